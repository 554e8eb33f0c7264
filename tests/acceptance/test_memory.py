"""Gate: the on-demand pipeline's peak added PSS stays within the model's stated budget."""
import pytest

pytestmark = [pytest.mark.npu, pytest.mark.memory]


def test_on_demand_peak_pss_within_budget(golden_cases, gate_runner, npu_guard, suite):
    if suite.pss_budget is None:
        pytest.fail(f"no PSS budget: set [gates] pss_budget in {suite.model_dir / 'model.toml'} or --pss-budget",
                    pytrace=False)
    run = gate_runner.case_run(golden_cases[0], npu_guard)
    if run.error is not None:
        pytest.fail(f"no run to measure: {run.error}", pytrace=False)
    mem = run.result.report["memory"]
    peak = mem["run_peak_pss_added_bytes"]       # over the run's own start, not the guard's
    assert peak <= suite.pss_budget, (f"peak added PSS {peak / 2**20:.1f} MiB over the budget "
                                      f"{suite.pss_budget / 2**20:.1f} MiB (samples: {mem['sample_count']})")
