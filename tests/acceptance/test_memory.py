"""Gate: the run's peak added PSS, counted over its whole process tree (the pipeline and every
process it started: prefetch workers, the toolkit simulator's worker), stays within the model's
stated budget. It judges the run of the lifecycle the suite runs (--lifecycle) and says which, with
the workers' part beside the pipeline's."""
import pytest

pytestmark = [pytest.mark.npu, pytest.mark.memory]


def _mib(n) -> str:
    return f"{n / 2**20:.1f} MiB"


def test_peak_pss_within_budget(memory_run, suite, record_property):
    if suite.pss_budget is None:
        pytest.fail(f"no PSS budget: set [gates] pss_budget in {suite.model_dir / 'model.toml'} or --pss-budget",
                    pytrace=False)
    run = memory_run            # made in setup: one the board could not finish is this test's error
    if run.error is not None:
        pytest.fail(f"no run to measure: {run.error}", pytrace=False)
    report = run.result.report
    mem = report["memory"]
    peak = mem["run_peak_pss_added_bytes"]       # over the run's own start, not the guard's
    pipeline, workers = mem["run_peak_pipeline_pss_added_bytes"], mem["run_peak_workers_pss_added_bytes"]
    judged = (f"lifecycle {report['lifecycle']}: peak added PSS {_mib(peak)} (pipeline {_mib(pipeline)}, "
              f"{mem['run_max_worker_processes']} child process(es) {_mib(workers)})")
    for key, value in (("lifecycle", report["lifecycle"]), ("peak_pss_added_bytes", peak),
                       ("pipeline_pss_added_bytes", pipeline), ("workers_pss_added_bytes", workers)):
        record_property(key, value)
    print(judged)
    assert peak <= suite.pss_budget, (f"{judged} over the budget {_mib(suite.pss_budget)} "
                                      f"(samples: {mem['sample_count']})")
