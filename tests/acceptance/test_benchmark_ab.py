"""Gate: an interleaved A/B session against a named partition, side A (`--ab-a DIR`).

The suite's partition is side B; both run alternately, round by round, in this one session
(harness/results/ab.py), so drift of the machine or board hits both alike. Each figure (step time,
core time per branch, lifecycle stage) is judged by its paired differences; a regression fails this
test naming the figure, its shift, the interval and the threshold. With --fault, the fault is B's
only (slow=xFACTOR makes a B that must fail). The session is written to
artifacts/runs/<case>-ab.json and to the results store (--results): both sides as runs under their own
partition's key, every round's figures and the verdicts, in one transaction.
"""
import warnings

import pytest

from harness.core.atomic import atomic_write_json
from harness.core.errors import HarnessError
from harness.gates.cases import case_inputs
from harness.results.ab import A, ABRequest, B, Side, run_session, session_decider, without_fault
from harness.results.telemetry import TelemetryWindow
from harness.results.verdict import Outcome

# Marker ab: deselected, said in one line, when no --ab-a names the partition to run against.
pytestmark = [pytest.mark.npu, pytest.mark.benchmark, pytest.mark.ab]
_WARMUP = 1             # rounds run first and not judged (a process's first run builds its sessions)


def test_denoise_time_ab(suite, gate_runner, golden_cases, npu_guard, record_property, results_gate):
    case = golden_cases[0]
    try:
        gate_runner.prepare()
        inputs = case_inputs(case, gate_runner.bundle.cfg, suite.golden_dir, suite.bench_steps)
        options = suite.backend_options
        request = ABRequest(Side(A, suite.ab_a, without_fault(options, suite.fault)),
                            Side(B, gate_runner.partition, options), inputs.settings,
                            rounds=suite.ab_rounds, warmup=_WARMUP, lifecycle=suite.lifecycle,
                            threshold_pct=suite.ab_threshold, confidence=suite.ab_confidence,
                            detect_pct=suite.detect, prompt=inputs.prompt, text_embs=inputs.text_embs)
        with TelemetryWindow(suite.telemetry_root) as window:
            session = run_session(gate_runner.bundle, request, guard=npu_guard)
        atomic_write_json(suite.artifacts / "runs" / f"{case.name}-ab.json", session.as_dict())
    except HarnessError as exc:
        pytest.fail(f"{case.name}: no A/B session: {exc}", pytrace=False)
    try:
        results_gate.record_ab(session, case.name, window.verdict())
    except HarnessError as exc:
        pytest.fail(f"{case.name}: A/B session ran but was not recorded: {exc}", pytrace=False)
    for verdict in session.verdicts:
        record_property(f"ab {verdict.label}", verdict.line())
    assert len(session.pairs) == suite.ab_rounds
    assert {"step", "load", "init", "release"} <= {v.label for v in session.verdicts}
    if session.regressions:
        pytest.fail(f"{case.name}: A/B regression against side A, {suite.ab_a}: "
                    + "; ".join(v.line() for v in session.regressions), pytrace=False)
    if session.outcome is Outcome.INCONCLUSIVE:     # it could not have found the promised slowdown
        line = (f"{case.name}: A/B session inconclusive against side A, {suite.ab_a}: "
                + "; ".join(v.line() for v in session.verdicts if v.label == "step")
                + f"; {session_decider(session.verdicts, suite.ab_rounds)}")
        if suite.inconclusive == "warn":
            warnings.warn(f"{line} (not failed: --inconclusive=warn, the default off a board)", stacklevel=1)
        else:
            pytest.fail(line, pytrace=False)
