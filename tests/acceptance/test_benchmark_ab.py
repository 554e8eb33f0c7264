"""Gate: an interleaved A/B session against a named baseline partition (`--ab-baseline DIR`).

The suite's partition is the candidate; both run alternately, round by round, in this one session
(harness/results/ab.py), so drift of the machine or board hits both alike. Each figure (step time,
core time per branch, lifecycle stage) is judged by its paired differences; a regression fails this
test naming the figure, its shift, the interval and the threshold. With --fault, the fault is the
candidate's only (slow=xFACTOR makes a candidate that must fail). The session is written to
artifacts/runs/<case>-ab.json and to the results store (--results): both sides as runs under their own
partition's key, every round's figures and the verdicts, in one transaction.
"""
import warnings

import pytest

from harness.core.atomic import atomic_write_json
from harness.core.errors import HarnessError
from harness.gates.cases import case_inputs
from harness.results.ab import Side, baseline_options, run_session, session_decider
from harness.results.telemetry import TelemetryWindow
from harness.results.verdict import Outcome

# Marker ab: deselected, said in one line, when no --ab-baseline names the partition to run against.
pytestmark = [pytest.mark.npu, pytest.mark.benchmark, pytest.mark.ab]
_WARMUP = 1             # rounds run first and not judged (a process's first run builds its sessions)


def test_denoise_time_ab(suite, gate_runner, golden_cases, npu_guard, record_property, results_gate):
    case = golden_cases[0]
    try:
        gate_runner.prepare()
        inputs = case_inputs(case, gate_runner.bundle.cfg, suite.golden_dir, suite.bench_steps)
        sides = {"baseline": Side("baseline", suite.ab_baseline, suite.backend,
                                  baseline_options(suite.backend_options.as_dict(), suite.fault)),
                 "candidate": Side("candidate", gate_runner.partition, suite.backend,
                                   suite.backend_options.as_dict())}
        with TelemetryWindow(suite.telemetry_root) as window:
            session = run_session(gate_runner.bundle, sides["baseline"], sides["candidate"], inputs.settings,
                                  rounds=suite.ab_rounds, warmup=_WARMUP, lifecycle=suite.lifecycle,
                                  threshold_pct=suite.ab_threshold, confidence=suite.ab_confidence,
                                  detect_pct=suite.detect, prompt=inputs.prompt, text_embs=inputs.text_embs,
                                  guard=npu_guard)
        atomic_write_json(suite.artifacts / "runs" / f"{case.name}-ab.json", session.as_dict())
    except HarnessError as exc:
        pytest.fail(f"{case.name}: no A/B session: {exc}", pytrace=False)
    try:
        results_gate.record_ab(session, case.name, sides, window.verdict(), threshold_pct=suite.ab_threshold,
                               confidence=suite.ab_confidence, warmup=_WARMUP)
    except HarnessError as exc:
        pytest.fail(f"{case.name}: A/B session ran but was not recorded: {exc}", pytrace=False)
    for verdict in session.verdicts:
        record_property(f"ab {verdict.label}", verdict.line())
    assert len(session.pairs) == suite.ab_rounds
    assert {"step", "load", "init", "release"} <= {v.label for v in session.verdicts}
    if session.regressions:
        pytest.fail(f"{case.name}: A/B regression against {suite.ab_baseline}: "
                    + "; ".join(v.line() for v in session.regressions), pytrace=False)
    if session.outcome is Outcome.INCONCLUSIVE:     # it could not have found the promised slowdown
        line = (f"{case.name}: A/B session inconclusive against {suite.ab_baseline}: "
                + "; ".join(v.line() for v in session.verdicts if v.label == "step")
                + f"; {session_decider(session.verdicts, suite.ab_rounds)}")
        if suite.inconclusive == "warn":
            warnings.warn(f"{line} (not failed: --inconclusive=warn, the default off a board)", stacklevel=1)
        else:
            pytest.fail(line, pytrace=False)
