"""Gate: a full generation per golden case with every subgraph output checked for NaN/Inf, and on
Spectrum's forecast steps every forecast hidden state (a forecast can blow up where no subgraph did)."""
import pytest

from harness.core.errors import NumericsError

pytestmark = pytest.mark.npu


def test_no_nan_or_inf_in_any_subgraph_output(golden_case, case_run, gate_runner):
    # The run is made in setup (case_run): one the board could not finish is this test's error, not its failure.
    case, run = golden_case, case_run
    if isinstance(run.error, NumericsError):
        pytest.fail(f"{case.name}: {run.error} (report: {run.report_path})", pytrace=False)
    if run.error is not None:
        pytest.fail(f"{case.name}: the memory guard stopped the run before numerics could be judged: {run.error}",
                    pytrace=False)
    # Every subgraph ran at every computed step (its output was checked as it arrived) and at no
    # forecast step, whose forecast was checked per stream instead.
    report = run.result.report
    sampler = report["sampler"]
    assert len(sampler["computed_steps"]) + len(sampler["forecast_steps"]) == case.steps
    ran = {(r["step"], r["subgraph"]) for r in report["lifecycle_records"]
           if r["stage"] == "run" and r["branch"] != "decoder"}
    assert ran == {(s, i) for s in sampler["computed_steps"] for i in range(gate_runner.subgraphs)}
    assert sampler.get("forecasts_checked", 0) == len(sampler["forecast_steps"]) * len(report["streams"])
