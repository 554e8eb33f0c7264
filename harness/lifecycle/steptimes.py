"""The vocabulary of a step's time and the arithmetic that turns raw records into the board profile's
tables: lifecycle per stage per pass, core time per branch per step, and the step split.

A **stage** is one of the four lifecycle calls every subgraph goes through each step on the board.
Our short names key every record, table and history line; the board call is what RKNNLite names it.
"""
from __future__ import annotations

__all__ = ["BOARD_CALLS", "STAGE_NAMES", "summarize"]

BOARD_CALLS = {"load": "load_rknn", "init": "init_runtime", "run": "inference", "release": "release"}
STAGE_NAMES = tuple(BOARD_CALLS)
# Host math timed per step: AdaLN modulation, timestep/patch embedding, dtype casts at the subgraph
# boundary, the FP32 residual add (with its AdaLN gate), the final layer, and Spectrum's forecast of
# the last hidden state (keeping the features on computed steps, the fit on forecast steps).
HOST_CATEGORIES = ("adaln", "embed", "cast", "residual", "final", "forecast")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(records: list[dict], host: list[dict], step_walls: list[float],
              computed_steps: list[int] | None = None, hidden_s: float = 0.0) -> dict:
    """Per-step tables from raw records, in the board profile's terms.

    A pass over the subgraphs happens on a computed step only (every step but Spectrum's forecast
    steps), so the per-step tables are per computed step: lifecycle_pass, mean seconds per pass by
    stage, as the profile's [lifecycle_pass]; core_per_step, mean inference seconds per computed step
    by branch, as [denoise_20_steps]; step_split, where a computed step's wall time went (lifecycle,
    host math, the rest). forecast_step splits a forecast step the same way; per_image holds the
    whole denoise, as the profile's [spectrum_28].
    hidden_s: lifecycle seconds a background strategy (prefetch) ran behind inference: they are in
    the stage tables but not in the steps' wall time, so the split leaves them out.
    """
    steps = len(step_walls)
    computed = sorted(set(range(steps) if computed_steps is None else computed_steps) & set(range(steps)))
    forecast = sorted(set(range(steps)) - set(computed))
    body = [r for r in records if r["branch"] != "decoder" and r["step"] < max(steps, 1)]
    per = max(len(computed), 1)
    stage = {s: sum(r["seconds"] for r in body if r["stage"] == s) / per for s in STAGE_NAMES}
    branches = sorted({r["branch"] for r in body})
    core = {b: sum(r["seconds"] for r in body if r["stage"] == "run" and r["branch"] == b) / per
            for b in branches}
    on_computed, on_forecast = set(computed), set(forecast)
    host_per = {c: sum(h["seconds"] for h in host if h["category"] == c and h["step"] in on_computed) / per
                for c in HOST_CATEGORIES}
    fper = max(len(forecast), 1)
    host_forecast = {c: sum(h["seconds"] for h in host if h["category"] == c and h["step"] in on_forecast) / fper
                     for c in HOST_CATEGORIES}
    wall = _mean([step_walls[i] for i in computed])
    fwall = _mean([step_walls[i] for i in forecast])
    lifecycle = sum(stage.values()) - hidden_s / per
    host_total = sum(host_per.values())
    invocations = sum(1 for r in body if r["stage"] == "run")
    return {
        "invocations": invocations,
        "stage_records": len(body),
        "lifecycle_records": records,
        "host_times": host,
        "step_seconds": step_walls,
        "steps": {"total": steps, "computed": len(computed), "forecast": len(forecast)},
        "tables": {
            "lifecycle_pass": {**stage, "stage_sum": stage["load"] + stage["init"] + stage["release"]},
            "core_per_step": core,
            "step_split": {"step": wall, "lifecycle": lifecycle, "host": host_total,
                           **{f"host_{k}": v for k, v in host_per.items()},
                           "rest": wall - lifecycle - host_total},
            "forecast_step": {"step": fwall, "host": sum(host_forecast.values()),
                              **{f"host_{k}": v for k, v in host_forecast.items() if v},
                              "rest": fwall - sum(host_forecast.values())},
            "per_image": {"denoise": sum(step_walls), "computed_steps": len(computed),
                          "forecast_steps": len(forecast), "invocations": invocations,
                          "computed_seconds": sum(step_walls[i] for i in computed),
                          "forecast_seconds": sum(step_walls[i] for i in forecast),
                          "per_computed_step": wall, "per_forecast_step": fwall},
        },
        "denoise_seconds": sum(step_walls),
    }
