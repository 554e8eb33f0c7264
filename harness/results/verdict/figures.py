"""The figures a benchmark run is judged on: the denoise step, the NPU core (the geometric mean of the
branches' core times), each branch's core time and each lifecycle stage, per step."""
from __future__ import annotations

import math

from ...core.errors import ConfigError
from ...lifecycle.steptimes import STAGE_NAMES
from ...model.config import BRANCHES
from ..records import Run

__all__ = ["STEP", "NPU_CORE", "figures", "npu_core", "parse_threshold"]

STEP = "denoise step"
NPU_CORE = "NPU core"   # geometric mean of the branches' core times per step


def parse_threshold(text, option: str = "--fixed-threshold", example: str = "10%") -> float:
    """'10%' or '10' -> 10.0 (percent over the reference that counts as a regression; --detect's promise)."""
    raw = str(text).strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected a percentage such as {example}") from None
    if not 0 < value < 1000:
        raise ConfigError(f"{option} {text!r}: must be between 0 and 1000 %")
    return value


def npu_core(branches: dict[str, float]) -> float | None:
    """The NPU core figure: the geometric mean of the branches' core seconds per step (its log is the
    mean of their logs, so each branch's relative shift counts alike), None with fewer than two."""
    cores = [branches[b] for b in BRANCHES if b in branches]
    if len(cores) < 2 or not all(c > 0 for c in cores):
        return None
    return math.exp(sum(math.log(c) for c in cores) / len(cores))


def figures(run: Run) -> dict[str, float]:
    """label -> value of every figure judged: 'denoise step', 'NPU core' (with two branches or more),
    '<branch> core', '<stage> stage'."""
    out = {STEP: run.mean_step_s}
    npu = npu_core(run.branches)
    if npu is not None:
        out[NPU_CORE] = npu
    out.update({f"{b} core": run.branches[b] for b in BRANCHES if b in run.branches})
    out.update({f"{s} stage": run.stages[s] for s in STAGE_NAMES if s in run.stages})
    return out
