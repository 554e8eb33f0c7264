"""Gate: a full generation per golden case with every subgraph output checked for NaN/Inf."""
import pytest

from harness.errors import NumericsError

pytestmark = pytest.mark.npu


def test_no_nan_or_inf_in_any_subgraph_output(golden_case, gate_runner, npu_guard):
    case = golden_case
    run = gate_runner.case_run(case, npu_guard)
    if isinstance(run.error, NumericsError):
        pytest.fail(f"{case.name}: {run.error} (report: {run.report_path})", pytrace=False)
    if run.error is not None:
        pytest.fail(f"{case.name}: run failed before numerics could be judged: {run.error}", pytrace=False)
    # Every subgraph ran at every step (its output was checked as it arrived).
    ran = {(r["step"], r["subgraph"]) for r in run.result.report["lifecycle_records"]
           if r["stage"] == "run" and r["branch"] != "decoder"}
    assert ran == {(s, i) for s in range(case.steps) for i in range(gate_runner.bundle.cfg.subgraphs)}
