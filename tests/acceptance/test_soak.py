"""Gate: the lifecycle soak (harness/gates/soak.py). Each branch kind's subgraph is loaded, initialised,
run and released --soak-cycles times (default: one board image's cycles, 1,092 for the 84-subgraph
partition) on the suite's backend; no resource of the process tree may grow per cycle beyond its limit.
The proofs below run the suite itself against the faults backend leaking real memory, then real
descriptors, and find each named with the images it leaves.
"""
import pytest

from harness.gates.soak import cycles_per_image, run_soak, soak_verdict
from harness.memory.resources import ResourceSampler
from harness.model.config import REPO_ROOT
from harness.pytest_plugin.fixtures import npu_memory_guard
from harness.runtime.run import open_partition

pytestmark = [pytest.mark.soak, pytest.mark.slow]


def test_lifecycle_soak(suite, gate_runner, artifacts, record_property):
    if suite.require_npu and suite.npu_problem:
        pytest.fail(f"--require-npu: {suite.npu_problem}. The soak never falls back to a CPU backend.",
                    pytrace=False)
    manifest = open_partition(gate_runner.bundle, gate_runner.partition)
    per_image = cycles_per_image(manifest)
    sampler = ResourceSampler(suite.telemetry_root)
    with npu_memory_guard(suite) as guard:
        run = run_soak(suite.backend, manifest, suite.backend_options, suite.soak_cycles or per_image,
                       sampler, guard=guard)
    verdict = soak_verdict(run, suite.soak_memory_rate, guard.floor_bytes, per_image)
    from harness.core.atomic import atomic_write_json
    atomic_write_json(artifacts / "soak.json", verdict.as_dict())
    print("\n".join(verdict.lines()))
    for growth in verdict.growth:
        record_property(f"soak_{growth.resource}_per_cycle", round(growth.per_cycle, 3))
    if run.tripped:
        pytest.fail(f"soak: stopped after {run.cycles:,} of {suite.soak_cycles or per_image:,} cycles: "
                    f"{run.tripped}", pytrace=False)
    failed = [f"soak: {g.line(per_image)}" for g in verdict.failures]
    assert not failed, "\n".join(failed + [f"(every reading: {artifacts / 'soak.json'})"])


@pytest.fixture
def run_suite(pytester, suite, monkeypatch):
    """The soak gate in a fresh pytest process (the leak stays in that process)."""
    monkeypatch.setenv("COLUMNS", "400")     # failure lines unwrapped for fnmatch_lines

    def run(*args):
        return pytester.runpytest_subprocess(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider", "-q",
            f"--artifacts={pytester.path / 'artifacts'}", f"--cache-dir={suite.cache_dir}",
            str(REPO_ROOT / "tests/acceptance/test_soak.py::test_lifecycle_soak"), "--soak-cycles=300",
            "--backend=faults", *args, timeout=300)
    return run


def test_soak_fails_on_a_memory_leak_naming_it_and_the_images_left(run_suite):
    result = run_suite("--fault=leak=mem:64KiB")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*soak: USS (private memory): +6?.? KiB per cycle *(limit 16.0 KiB): "
                                 "the memory floor (1.5 GiB, * above it now) in * images of 1,092 cycles*"])
    assert "soak: open file descriptors" not in result.stdout.str()


def test_soak_fails_on_a_descriptor_leak_naming_it_and_the_images_left(run_suite):
    result = run_suite("--fault=leak=fd:0.1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*soak: open file descriptors: +0.1?? per cycle *(limit: any steady growth): "
                                 "the descriptor limit (RLIMIT_NOFILE *, * left) in * images of 1,092 cycles*"])
    assert "soak: USS" not in result.stdout.str() and "soak: RSS" not in result.stdout.str()
