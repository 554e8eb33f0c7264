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
from harness.results.ab import Side, baseline_options, run_session

pytestmark = [pytest.mark.npu, pytest.mark.benchmark]


def test_denoise_time_ab(suite, gate_runner, golden_cases, npu_guard, record_property):
    if suite.ab_baseline is None:
        pytest.skip("no --ab-baseline: the interleaved A/B session needs a baseline partition to run against")
    case = golden_cases[0]
    try:
        gate_runner.prepare()
        session = run_session(
            gate_runner.bundle,
            Side("baseline", suite.ab_baseline, suite.backend, baseline_options(suite.backend_options, suite.fault)),
            Side("candidate", gate_runner.partition, suite.backend, suite.backend_options),
            gate_runner.settings_for(case, suite.bench_steps), rounds=suite.ab_rounds, lifecycle=suite.lifecycle,
            threshold_pct=suite.ab_threshold, prompt=case.prompt, text_embs=gate_runner.case_text_embs(case),
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
