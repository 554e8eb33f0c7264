"""Core-mask consistency: each branch kind's subgraph run under every NPU core mask the board offers,
its outputs compared with the single-core output (core 0), and its inference time per mask.

Why: field reports saw outputs that differ between core masks (airockchip/rknn-toolkit2#228), op
types that use only core 0 whatever the mask (the RKNNRT API reference), and no speedup at
NPU_CORE_0_1_2 (immich-app/immich#15241); boards/data/field-reports.toml. A core split may reorder a
subgraph's FP16 sums, which moves its outputs by FP16 rounding, far less than FP16 itself moves them
against FP32; so the bound is the per-subgraph accuracy bar of the FP16 gate (cosine >= 0.9999
against FP32, `accuracy.DEFAULT_THRESHOLD`): a mask whose outputs fall under it against core 0's is
computing something else.

Backends that honour a core mask: rknnlite (the board: outputs and times) and board-sim (its times;
its outputs are onnxruntime's, equal under every mask by construction).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..backends.base import BackendOptions, create_context
from ..backends.board_sim import normalize_options
from ..partition.manifest import SubgraphEntry, load_manifest
from ..runtime.partitions import exported_partition
from .accuracy import DEFAULT_THRESHOLD, cosine, max_rel_err

__all__ = ["MASKS", "MASK_BACKENDS", "MaskRow", "compare_outputs", "core_mask_consistency", "failures",
           "mask_backend"]

MASKS = ("0", "1", "2", "0_1", "0_1_2")
MASK_BACKENDS = ("rknnlite", "board-sim")


@dataclass(frozen=True)
class MaskRow:
    branch: str
    mask: str
    cosine: float           # against core 0's outputs, all outputs flattened together
    max_rel_err: float
    run_seconds: float      # median inference time under this mask
    speedup: float          # core 0's time over this mask's

    def as_dict(self) -> dict:
        return asdict(self)


def compare_outputs(outputs: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    """(cosine, max relative error) of one mask's outputs against core 0's."""
    flat = np.concatenate([np.asarray(o, np.float64).ravel() for o in outputs])
    ref = np.concatenate([np.asarray(r, np.float64).ravel() for r in reference])
    return cosine(flat, ref), max_rel_err(flat, ref)


def _run_under(options: BackendOptions, label: str, path, inputs, mask: str, repeats: int):
    ctx = create_context(options.with_settings({"core_mask": mask}), f"{label} core mask {mask}")
    try:
        ctx.load(path)
        ctx.init()
        times, outputs = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            outputs = ctx.run(inputs)
            times.append(time.perf_counter() - start)
        return outputs, statistics.median(times)
    finally:
        ctx.release()


def core_mask_consistency(options: BackendOptions, manifest, masks=MASKS, repeats: int = 3,
                          seed: int = 0) -> list[MaskRow]:
    """Block 0's self-attention, cross-attention and FFN (or the first fused subgraph) under every
    mask, on one set of unit-scale inputs."""
    rng = np.random.default_rng(seed)
    kinds: dict[str, SubgraphEntry] = {}
    for entry in manifest.subgraphs:
        kinds.setdefault(entry.branch, entry)
    rows = []
    for branch, entry in kinds.items():
        inputs = [rng.standard_normal(s.shape).astype(s.dtype) for s in entry.inputs]
        path = manifest.path_of(entry)
        reference, ref_time = _run_under(options, entry.label, path, inputs, masks[0], repeats)
        for mask in masks:
            outputs, seconds = ((reference, ref_time) if mask == masks[0]
                                else _run_under(options, entry.label, path, inputs, mask, repeats))
            cos, rel = compare_outputs(outputs, reference)
            rows.append(MaskRow(branch, mask, cos, rel, seconds, ref_time / seconds if seconds else 0.0))
    return rows


def failures(rows: list[MaskRow], bar: float = DEFAULT_THRESHOLD) -> list[str]:
    """One line per mask whose outputs fall under the bar against core 0's (NaN included)."""
    return [f"{r.branch} under core mask {r.mask}: cosine {r.cosine:.7f} against core 0's outputs, under "
            f"{bar} (max relative error {r.max_rel_err:.2e})" for r in rows if not r.cosine >= bar]


def mask_backend(options: BackendOptions, partition, bundle, cache_dir) -> tuple[BackendOptions, object]:
    """(options, manifest) that judges the masks: the suite's backend when it honours a core
    mask, else board-sim on the model's FP16 export at 1/50 of the board's time (stages long enough
    beside this machine's timer jitter to time a mask)."""
    if options.backend in MASK_BACKENDS:
        return options, load_manifest(partition)
    exported = exported_partition(bundle, "float16", root=cache_dir / "partitions")
    return BackendOptions("board-sim", normalize_options({"time_scale": 0.02})), load_manifest(exported)
