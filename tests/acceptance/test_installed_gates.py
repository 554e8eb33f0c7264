"""Gate: each gate an installed distribution registers under `anima.gates` (docs/extending.md), run on
every selected case's shared run as the suite's own gates are, and reported by its entry-point name.
A refused registration stops the collection with its one line, as a refused backend stops a run."""
import pytest

from harness.core.errors import ConfigError
from harness.gates.installed import GATES, gate

pytestmark = pytest.mark.npu

if GATES.refused:
    pytest.fail(GATES.refused[0], pytrace=False)


if GATES.found:     # none installed: no test at all, rather than a skip in every -m npu run
    @pytest.mark.parametrize("name", sorted(GATES.found))
    def test_installed_gate(name, golden_case, case_run):
        try:
            message = gate(name)(case_run)
        except ConfigError as exc:      # the module cannot be imported, or names no function
            pytest.fail(str(exc), pytrace=False)
        if message is not None:
            pytest.fail(f"{golden_case.name}: {name}: {message}", pytrace=False)
