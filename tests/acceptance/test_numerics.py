"""Gate: a full generation per golden case with every subgraph output checked for NaN/Inf, and on
Spectrum's forecast steps every forecast hidden state (a forecast can blow up where no subgraph did)."""
import pytest

from harness.core.errors import NumericsError
from harness.gates.runner import numerics_coverage

pytestmark = pytest.mark.npu
# The fast tier judges the first case of each sampler (the same gate on the same path; every case is
# a whole 20-step render here), the full suite and -m npu every case.
FAST_TIER_CASES = 1


def test_no_nan_or_inf_in_any_subgraph_output(golden_case, case_run, gate_runner):
    # The run is made in setup (case_run): one the board could not finish is this test's error, not its failure.
    case, run = golden_case, case_run
    if isinstance(run.error, NumericsError):
        pytest.fail(f"{case.name}: {run.error} (report: {run.report_path})", pytrace=False)
    if run.error is not None:
        pytest.fail(f"{case.name}: the memory guard stopped the run before numerics could be judged: {run.error}",
                    pytrace=False)
    problems = numerics_coverage(run.result.report, case.steps, gate_runner.subgraphs)
    assert not problems, f"{case.name}: the numerics gate did not see every output: {'; '.join(problems)}"
