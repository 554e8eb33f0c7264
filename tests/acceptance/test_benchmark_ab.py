"""Gate: an interleaved A/B session against a named baseline partition (`--ab-baseline DIR`).

The suite's partition is the candidate; both run alternately, round by round, in this one session
(harness/results/ab.py), so drift of the machine or board hits both alike. Each figure (step time,
core time per branch, lifecycle stage) is judged by its paired differences; a regression fails this
test naming the figure, its shift, the interval and the threshold. With --fault, the fault is the
candidate's only (slow=xFACTOR makes a candidate that must fail). The session is written to
artifacts/runs/<case>-ab.json.
"""
import pytest

from harness.core.atomic import atomic_write_json
from harness.core.errors import HarnessError
from harness.gates.cases import case_inputs
from harness.results.ab import Side, baseline_options, run_session

# Marker ab: deselected, said in one line, when no --ab-baseline names the partition to run against.
pytestmark = [pytest.mark.npu, pytest.mark.benchmark, pytest.mark.ab]


def test_denoise_time_ab(suite, gate_runner, golden_cases, npu_guard, record_property):
    case = golden_cases[0]
    try:
        gate_runner.prepare()
        inputs = case_inputs(case, gate_runner.bundle.cfg, suite.golden_dir, suite.bench_steps)
        session = run_session(
            gate_runner.bundle,
            Side("baseline", suite.ab_baseline, suite.backend, baseline_options(suite.backend_options, suite.fault)),
            Side("candidate", gate_runner.partition, suite.backend, suite.backend_options),
            inputs.settings, rounds=suite.ab_rounds, lifecycle=suite.lifecycle,
            threshold_pct=suite.ab_threshold, prompt=inputs.prompt, text_embs=inputs.text_embs,
            guard=npu_guard)
        atomic_write_json(suite.artifacts / "runs" / f"{case.name}-ab.json", session.as_dict())
    except HarnessError as exc:
        pytest.fail(f"{case.name}: no A/B session: {exc}", pytrace=False)
    for verdict in session.verdicts:
        record_property(f"ab {verdict.label}", verdict.line())
    assert len(session.pairs) == suite.ab_rounds
    assert {"step", "load", "init", "release"} <= {v.label for v in session.verdicts}
    if session.regressions:
        pytest.fail(f"{case.name}: A/B regression against {suite.ab_baseline}: "
                    + "; ".join(v.line() for v in session.regressions), pytrace=False)
