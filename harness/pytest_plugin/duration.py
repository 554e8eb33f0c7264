"""Before a board session: the smoke tier first, and the session's expected length from the board profile.

A board profile's [duration] table gives the board's seconds per sampler step per model
(`step_seconds = {"anima-2b" = 120.4}`). A session collecting npu gates beyond the smoke tier then
prints, before its first test, (steps of every selected case + benchmark rounds x benchmark steps,
less the one round a case's gates share: harness/gates.py GateRunner.share) x step time. A profile's
[tier.NAME] tables (`--tier pr`) choose a shorter split, e.g. fewer cases or benchmark steps.
"""
from __future__ import annotations

from ..core.schema import read_toml
from .fixtures import selected_cases
from .state import settings_of


def expected_duration(step_seconds: float, case_steps: list[int], bench_rounds: int,
                      bench_steps: int | None, benchmarked: bool) -> tuple[float, str]:
    """(seconds, the sum it came from) for the gates' runs at `step_seconds` a step."""
    steps = sum(case_steps)
    formula = f"{len(case_steps)} cases x {'/'.join(map(str, sorted(set(case_steps))))} steps"
    if benchmarked and case_steps:
        per_round = bench_steps or case_steps[0]
        shared = 1 if per_round == case_steps[0] else 0     # the last round is the first case's run
        steps += (bench_rounds - shared) * per_round
        formula += f" + {bench_rounds} benchmark round(s) x {per_round} steps" + (
            " - the round the first case shares" if shared else "")
    return steps * step_seconds, f"({formula}) x {step_seconds:g} s"


def collection_modifyitems(items):
    # The smoke tier runs first, its stack preflight before all: a board that cannot pass it would fail
    # every gate after it, slowly.
    items.sort(key=lambda item: (item.get_closest_marker("smoke") is None,
                                 item.get_closest_marker("preflight") is None))


def collection_finish(session):
    settings = settings_of(session.config)
    gates = [i for i in session.items if i.get_closest_marker("npu") and not i.get_closest_marker("smoke")]
    if not gates or settings.board_profile is None:
        return
    from ..model.config import load_model_dir
    table = read_toml(settings.board_profile, "board profile (--board-profile)").get("duration", {})
    model = load_model_dir(settings.model_dir).name
    seconds_per_step = table.get("step_seconds", {}).get(model)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    if seconds_per_step is None:
        reporter.write_line(f"anima: expected duration unknown: {settings.board_profile} [duration] "
                            f"step_seconds has no step time for model {model}")
        return
    cases = selected_cases(settings)
    benchmarked = any(i.get_closest_marker("benchmark") for i in gates)
    seconds, formula = expected_duration(float(seconds_per_step), [c.steps for c in cases],
                                         settings.bench_rounds, settings.bench_steps, benchmarked)
    tier = f", tier {settings.tier}" if settings.tier else ""
    reporter.write_line(f"anima: expected duration {seconds / 60:.0f} min{tier} = {formula} "
                        f"(board profile {settings.board_profile} [duration])")
