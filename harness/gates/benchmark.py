"""The benchmark gate's side of the verdict: a timed run judged against its reference in the results
store (harness/results/verdict/, the confirming rerun in verdict/rerun.py), both runs kept for the
store, the figures handed over checked to add up, whether the test fails (failure: a REGRESSION, or
an INCONCLUSIVE verdict unless --inconclusive=warn), and whether the run may become its board's
baseline.

`results` is the session's side of the store (the suite's ResultsGate: run_of, judge, confirm, record,
offer): the decision here is the same whoever holds the store.
"""
from __future__ import annotations

import math

from ..lifecycle.steptimes import STAGE_NAMES
from ..report.sitelinks import series_url
from ..results.condition import HostCondition
from ..results.records import Run
from ..results.telemetry import TelemetryWindow
from ..results.verdict.figures import STEP
from ..results.verdict.outcome import Outcome
from ..results.verdict.rerun import BenchmarkDecision, decide
from ..results.verdict.verdict import FIRST, NOT_COMPARABLE, UPGRADE, Verdict
from .runner import benchmark_info

__all__ = ["BenchmarkDecision", "as_run", "measured_again", "decide", "comparison_of", "figure_problems",
           "baseline_offer", "failure"]


def as_run(results, case, gate_runner, result, telemetry: dict, info: dict, host) -> Run:
    """The measured run `result` as the store keeps it."""
    return results.run_of(case.name, info, result.report, telemetry, gate_runner.precision,
                          gate_runner.manifest_hash, gate_runner.bundle.cfg.name, host)


def measured_again(results, case, gate_runner, guard, telemetry_root, steps) -> Run:
    """A second run of the case, measured as the benchmark's was (not timed by pytest-benchmark): what
    confirms or clears a regression judged from one run (Verdict.needs_confirmation)."""
    with TelemetryWindow(telemetry_root) as window, HostCondition() as host:
        result = gate_runner.run(case, guard, steps, keep=False)
    return as_run(results, case, gate_runner, result, window.verdict(), benchmark_info(result.report), host)


def failure(judgement: Verdict, inconclusive: str = "fail") -> tuple[str | None, str | None]:
    """(why the benchmark test fails, or None; a warning, or None): a REGRESSION fails; an
    INCONCLUSIVE verdict fails too unless the lab chose --inconclusive=warn, and either way its line
    says what would decide it."""
    outcome = judgement.outcome
    if outcome is Outcome.REGRESSION:
        return f"benchmark regression: {judgement.headline()}", None
    if outcome is Outcome.INCONCLUSIVE:
        line = f"benchmark inconclusive: {judgement.headline()}; {judgement.decider()}"
        return (None, f"{line} (not failed: --inconclusive=warn, the default off a board)") \
            if inconclusive == "warn" else (line, None)
    return None, None


def comparison_of(run: Run, judgement: Verdict) -> dict:
    """The run summary's row: status, message and the step's shift against the reference."""
    step = next((v for v in judgement.verdicts if v.label == STEP), None)
    status = ("regressed" if judgement.regressed else judgement.kind if judgement.kind in (FIRST, NOT_COMPARABLE)
              else f"{judgement.kind}: inconclusive" if judgement.outcome is Outcome.INCONCLUSIVE
              else f"{judgement.kind}: not confirmed by a second run" if judgement.regressions
              else f"{judgement.kind}: within threshold")
    reference = judgement.reference_run
    moved = judgement.moved      # a figure that failed while the step did not: the row names it
    return {"status": status, "message": judgement.verdict_line(), "mean_s": run.total_denoise_s,
            "moved": f"{moved.label} {moved.shift_pct:+.1f} %" if moved else None,
            "threshold_pct": step.threshold_pct if step else float("nan"),
            "baseline_mean_s": reference.total_denoise_s if reference else None,
            "delta_pct": step.shift_pct if step else None, **judgement.as_dict(),
            "site": series_url(run.board_id, run.key.case, run.key.backend, run.key.precision, run.key.steps)}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def figure_problems(info: dict, steps: int, subgraphs: int) -> list[str]:
    """What makes the handed-over figures untrustworthy: a step, invocation or stage not recorded, or a
    time counted twice or dropped in the step split; [] when they add up."""
    computed = info["computed_steps"]       # all steps but Spectrum's forecast steps run the subgraphs
    split, life = info["step_split_s"], info["lifecycle_s_per_step"]
    checks = [
        (info["steps"] == steps == computed + info["forecast_steps"],
         f"steps {info['steps']} (computed {computed} + forecast {info['forecast_steps']}), asked {steps}"),
        (info["invocations"] == subgraphs * computed, "invocations missing from the lifecycle records"),
        (info["stage_records"] == len(STAGE_NAMES) * subgraphs * computed, "stages missing"),
        (_close(split["step"], info["computed_step_s"]), "the split's step is not the computed step's time"),
        (_close(info["image_s"], computed * info["computed_step_s"] + info["forecast_steps"] * info["forecast_step_s"]),
         "the image time is not its computed and forecast steps'"),
        (_close(split["lifecycle"], sum(life[s] for s in STAGE_NAMES)), "lifecycle is not the sum of its stages"),
        (_close(split["host"], sum(v for k, v in split.items() if k.startswith("host_"))),
         "host math is not the sum of its parts"),
        # core time per branch is the run stage, split by branch: nothing counted twice or dropped
        (_close(sum(info["core_s_per_step"].values()), life["run"]), "core time per branch is not the run stage"),
        (min(life.values()) >= 0 and split["host"] >= 0, "a negative stage or host time"),
        # lifecycle and host math are timed inside the step: together they cannot exceed it
        (split["rest"] >= 0, f"lifecycle {split['lifecycle']:.4f} s + host math {split['host']:.4f} s "
                             f"exceed the step's {split['step']:.4f} s: a stage is timed twice"),
    ]
    return [problem for ok, problem in checks if not ok]


def baseline_offer(run: Run, judgement: Verdict, save_baseline: bool,
                   accept_upgrade: bool) -> tuple[str | None, str | None]:
    """(why the run is offered as its board's baseline, or None; why it is not, or None when nobody
    asked): only with --save-baseline, or --accept-upgrade after an upgrade comparison; never a run
    that is INVALID, regressed or not comparable with its history."""
    accept = accept_upgrade and judgement.kind == UPGRADE
    if not (save_baseline or accept):
        return None, None
    if not run.valid:
        return None, "baseline not saved: the run is INVALID (" + "; ".join(run.invalid_reasons) + ")"
    if judgement.regressed or judgement.kind == NOT_COMPARABLE:
        why = "regressed" if judgement.regressed else "is not comparable with its history"
        return None, f"baseline not saved: the run {why}"
    return ("upgrade accepted" if accept else "saved"), None
