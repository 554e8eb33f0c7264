"""The checks the benchmark and numerics gates make on a run's figures (harness/gates/benchmark.py,
harness/gates/runner.py): a real run of a random model passes them, and the same figures with a time
counted twice or a subgraph's run missing do not."""
import copy

import pytest

from harness.gates.benchmark import baseline_offer, figure_problems
from harness.gates.cases import load_cases
from harness.gates.runner import benchmark_info, numerics_coverage
from harness.results.verdict.verdict import HISTORY, UPGRADE, Verdict
from tests.helpers import TWO_STEP_DEFAULTS, gate_runner_for
from tests.results_data import make_run

CASES = TWO_STEP_DEFAULTS + '\n[[case]]\nname = "one"\nprompt = "digit one"\nseed = 5\n'


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    # 4 blocks: the figures' sums and the numerics' coverage are read against the runner's own subgraphs
    runner, golden = gate_runner_for(tmp_path_factory.mktemp("gates"), CASES, seed=6, blocks=4)
    case = load_cases(golden / "cases.toml")[0]
    return runner, case, runner.run(case, guard=None, keep=False).report


def test_a_real_runs_figures_add_up_and_a_stage_timed_twice_does_not(ran):
    runner, case, report = ran
    info = benchmark_info(report)
    assert figure_problems(info, case.steps, runner.subgraphs) == []
    doubled = copy.deepcopy(info)
    doubled["step_split_s"]["host"] += doubled["step_split_s"]["step"]
    assert any("host math" in p for p in figure_problems(doubled, case.steps, runner.subgraphs))
    assert figure_problems(info, case.steps + 1, runner.subgraphs)


def test_the_numerics_gate_sees_every_output_and_names_a_missing_run(ran):
    runner, case, report = ran
    assert numerics_coverage(report, case.steps, runner.subgraphs) == []
    dropped = copy.deepcopy(report)
    first_run = next(i for i, r in enumerate(dropped["lifecycle_records"]) if r["stage"] == "run")
    del dropped["lifecycle_records"][first_run]
    assert numerics_coverage(dropped, case.steps, runner.subgraphs) == ["1 subgraph run(s) missing, 0 unexpected"]


def test_a_baseline_is_offered_only_when_asked_and_never_from_an_invalid_run():
    run = make_run("r1", 1.0)
    judged = Verdict(HISTORY, "its history")
    assert baseline_offer(run, judged, save_baseline=False, accept_upgrade=False) == (None, None)
    assert baseline_offer(run, judged, save_baseline=True, accept_upgrade=False) == ("saved", None)
    assert baseline_offer(run, Verdict(UPGRADE, "the accepted stack"), False,
                          accept_upgrade=True) == ("upgrade accepted", None)
    invalid = make_run("r2", 1.0, valid=False)
    reason, refused = baseline_offer(invalid, judged, save_baseline=True, accept_upgrade=False)
    assert reason is None and refused.startswith("baseline not saved: the run is INVALID")
