"""Fault injection: a real onnxruntime context with a deliberate defect, to prove gates can fail.

Options (the suite's `--fault` sets them):
    nan_subgraph: index of the subgraph whose output gets NaN in the first stream (cond), as FP16
                  overflow does on the board; `nan_count` values are poisoned (default 7).
    delay:        seconds slept inside every run(): a deliberately slowed backend for the benchmark
                  compare gate.
The subgraph index is read from the context label ("subgraph N (...)"), which the manifest defines.
"""
from __future__ import annotations

import re
import time

import numpy as np

from ..errors import ConfigError
from .onnxruntime import OnnxRuntimeContext

__all__ = ["FaultInjectionContext", "parse_fault"]

_LABEL = re.compile(r"^subgraph (\d+) ")


def parse_fault(spec: str | None) -> dict:
    """'nan@37' -> {'nan_subgraph': 37}; 'slow=0.01' -> {'delay': 0.01}; comma-separated."""
    options: dict = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        try:
            if part.startswith("nan@"):
                options["nan_subgraph"] = int(part[4:])
                if options["nan_subgraph"] < 0:
                    raise ValueError
            elif part.startswith("slow="):
                options["delay"] = float(part[5:])
                if not 0 <= options["delay"] <= 60:      # also refuses nan and inf
                    raise ValueError
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(f"--fault '{part}': expected nan@SUBGRAPH or slow=SECONDS") from None
    return options


class FaultInjectionContext(OnnxRuntimeContext):
    backend_name = "faults"
    option_names = ("fault",)
    exclusive_options = ("fault",)

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        options = parse_fault(values.get("fault"))
        if options.get("nan_subgraph", 0) >= cfg.subgraphs:
            raise ConfigError(f"--fault nan@{options['nan_subgraph']}: {cfg.name} has subgraphs "
                              f"0..{cfg.subgraphs - 1}")
        return options

    def __init__(self, label: str, nan_subgraph: int | None = None, nan_count: int = 7,
                 delay: float = 0.0, **options):
        super().__init__(label, **options)
        match = _LABEL.match(label)
        self.index = int(match.group(1)) if match else None
        self.poison = nan_subgraph is not None and self.index == nan_subgraph
        self.nan_count = nan_count
        self.delay = delay

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        outputs = super().run(inputs)
        if self.delay:
            time.sleep(self.delay)
        if self.poison:
            first = np.array(outputs[0], copy=True)
            first[0].reshape(-1)[: self.nan_count] = np.nan
            outputs = [first, *outputs[1:]]
        return outputs
