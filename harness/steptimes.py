"""The vocabulary of a step's time and the arithmetic that turns raw records into the board profile's
tables: lifecycle per stage per pass, core time per branch per step, and the step split.

A **stage** is one of the four lifecycle calls every subgraph goes through each step on the board.
Our short names key every record, table and history line; the board call is what RKNNLite names it.
"""
from __future__ import annotations

__all__ = ["BOARD_CALLS", "STAGE_NAMES", "HOST_CATEGORIES", "summarize"]

BOARD_CALLS = {"load": "load_rknn", "init": "init_runtime", "run": "inference", "release": "release"}
STAGE_NAMES = tuple(BOARD_CALLS)
# Host math timed per step: AdaLN modulation, timestep/patch embedding, dtype casts at the subgraph
# boundary, the FP32 residual add (with its AdaLN gate), the final layer.
HOST_CATEGORIES = ("adaln", "embed", "cast", "residual", "final")


HOST_CATEGORIES = ("adaln", "embed", "cast", "residual", "final")


def summarize(records: list[dict], host: list[dict], step_walls: list[float]) -> dict:
    """Per-step tables from raw records, in the board profile's terms.

    lifecycle_pass: mean seconds per pass over the subgraphs (one pass = one step) by stage, as the
    profile's [lifecycle_pass]; core_per_step: mean inference seconds per step by branch, as
    [denoise_20_steps]; step_split: where a step's wall time went (lifecycle, host math, the rest).
    """
    steps = len(step_walls)
    body = [r for r in records if r["branch"] != "decoder" and r["step"] < max(steps, 1)]
    per = max(steps, 1)
    stage = {s: sum(r["seconds"] for r in body if r["stage"] == s) / per for s in STAGE_NAMES}
    branches = sorted({r["branch"] for r in body})
    core = {b: sum(r["seconds"] for r in body if r["stage"] == "run" and r["branch"] == b) / per
            for b in branches}
    host_per = {c: sum(h["seconds"] for h in host if h["category"] == c and h["step"] < per) / per
                for c in HOST_CATEGORIES}
    wall = sum(step_walls) / per if steps else 0.0
    lifecycle = sum(stage.values())
    host_total = sum(host_per.values())
    return {
        "invocations": sum(1 for r in body if r["stage"] == "run"),
        "stage_records": len(body),
        "lifecycle_records": records,
        "host_times": host,
        "step_seconds": step_walls,
        "tables": {
            "lifecycle_pass": {**stage, "stage_sum": stage["load"] + stage["init"] + stage["release"]},
            "core_per_step": core,
            "step_split": {"step": wall, "lifecycle": lifecycle, "host": host_total, **{f"host_{k}": v for k, v in host_per.items()},
                           "rest": wall - lifecycle - host_total},
        },
        "denoise_seconds": sum(step_walls),
    }
