"""Runs for the results store's tests, built the way the benchmark gate builds them."""
from __future__ import annotations

from harness.lifecycle.steptimes import STAGE_NAMES
from harness.model.config import BRANCHES
from harness.results.ab import A, B, judge_pairs
from harness.results.records import Run, RunKey, SubgraphTime
from harness.results.sessions import ABRecord

__all__ = ["make_run", "make_ab_record", "VERSIONS_OLD", "VERSIONS_NEW"]

VERSIONS_OLD = {"npu_driver": "0.9.6", "runtime_lib": "2.3.2", "toolkit_lite": "2.3.2", "onnxruntime": "1.20.1"}
VERSIONS_NEW = {**VERSIONS_OLD, "runtime_lib": "2.5.0", "toolkit_lite": "2.5.0"}


def make_run(run_id: str, step_s: float = 1.0, *, board: str = "rock-5c-aaaa", board_model: str = "Radxa ROCK 5C",
             case: str = "cat", versions: dict | None = None, manifest_hash: str = "m1", valid: bool = True,
             minute: int = 0, steps: int = 4, branch_factor: dict | None = None) -> Run:
    """One valid run whose figures scale with `step_s` (branch_factor: a branch slower by that factor)."""
    factor = branch_factor or {}
    branches = {b: step_s * 0.25 * factor.get(b, 1.0) for b in BRANCHES}
    stages = {s: step_s * 0.05 for s in STAGE_NAMES}
    stages["run"] = sum(branches.values())
    return Run(run_id=run_id,
               time=f"2026-11-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00+00:00",
               board_id=board, board_model=board_model, model="embedded", valid=valid,
               key=RunKey(case=case, steps=steps, precision="float16", backend="board-sim",
                          manifest_hash=manifest_hash, versions=dict(versions or VERSIONS_OLD)),
               mean_step_s=step_s, total_denoise_s=step_s * steps, stages=stages, branches=branches,
               step_s=tuple([step_s] * steps),
               subgraphs=tuple(SubgraphTime(f"block{i:02d}_{b}", i, b, branches[b] / 2)
                               for i in range(2) for b in BRANCHES),
               quality={"ssim": 0.99}, git_revision="abc123", peak_pss_added_bytes=1 << 20)


def make_ab_record(session_id: str, factor: float = 1.0, *, rounds: int = 6, minute: int = 0,
                   board: str = "rock-5c-aaaa") -> ABRecord:
    """An A/B session of two partitions (manifest hashes m1 and m2) whose side B is `factor` times side
    A in every figure, with a little noise of its own, judged by the session's own verdict."""
    noise = [1.0, 1.012, 0.991, 1.006, 0.995, 1.009, 0.998, 1.004]
    pairs = [{A: {"step": 1.0 * noise[i % 8], "ffn core": 0.25 * noise[i % 8], "init": 0.05},
              B: {"step": factor * noise[(i + 3) % 8], "ffn core": 0.25 * factor * noise[(i + 3) % 8],
                  "init": 0.05 * factor}} for i in range(rounds)]
    a, b = (make_run(f"{session_id}-{name}", 1.0 if name == A else factor, minute=minute, board=board,
                     manifest_hash=hash_) for name, hash_ in ((A, "m1"), (B, "m2")))
    return ABRecord(session_id=session_id, a=a, b=b, a_partition="/parts/old", b_partition="/parts/new",
                    pairs=tuple(pairs), verdicts=tuple(judge_pairs(pairs, threshold_pct=2.0)), threshold_pct=2.0,
                    confidence=0.99, lifecycle="on-demand", warmup=1, b_options={"slowdown": {"ffn": factor}})
