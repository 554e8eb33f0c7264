"""The board's first minutes (`bin/test -m smoke`): in order, the stack preflight (the versions of the
.rknn files, rknn-toolkit-lite2, librknnrt and the NPU driver against toolkit/compatibility.toml; a failed
one starts no test after it), the NPU device node, the librknnrt and
driver versions (RKNNLite.get_sdk_version, no root), one subgraph's load/init/run/release, and the model
for 2 steps. Each failure is one line naming what to fix (harness/gates/smoke.py). Off the board the
board-only checks (marker `board`) are deselected and the rest run on the host backend; with
--require-npu every check runs and fails off the board."""
import numpy as np
import pytest

from harness.core.errors import HarnessError
from harness.gates.preflight import preflight
from harness.gates.smoke import find_npu_node, lifecycle_once, npu_node_problem, version_problem
from harness.partition.manifest import load_manifest

pytestmark = pytest.mark.smoke
SMOKE_STEPS = 2


def _or_fail(call, before: str = "", after: str = ""):
    """call(), or the test fails with one line, the HarnessError's message between `before` and `after`:
    no traceback, and no chained one either (pytest.fail is raised after the except block, not in it)."""
    try:
        return call()
    except HarnessError as exc:
        message = f"{before}{exc}{after}"
    pytest.fail(message, pytrace=False)


def _first_entry(gate_runner):
    """(manifest, its first subgraph, its file); without a partition (rknnlite needs one), one line."""
    manifest = _or_fail(lambda: load_manifest(gate_runner.partition))
    entry = manifest.entries()[0]
    return manifest, entry, manifest.path_of(entry)


@pytest.mark.board
@pytest.mark.preflight
def test_0_stack_preflight(suite):
    # Not marked npu: it opens no runtime context, and off the board --require-npu's general line would
    # answer first and stop the session before test 1 names the missing node. A session of npu tests
    # without it gets the same check before its first npu test (harness/pytest_plugin/preflight.py).
    if suite.require_npu and suite.npu_problem:     # fails, and the checks after it say what is missing
        pytest.fail(f"--require-npu: {suite.npu_problem}: no board stack to judge", pytrace=False)
    verdict = preflight(suite.partition, suite.telemetry_root)
    if verdict.kind == "bad":
        pytest.fail(verdict.line, pytrace=False)
    print(verdict.line)


@pytest.mark.board
def test_1_npu_device_node(suite):
    # Not marked npu: the --require-npu hook would answer first with the general "not an RK3588" line,
    # and this test's line says which node is missing and what to do about it.
    problem = npu_node_problem(suite.telemetry_root)
    if problem:
        pytest.fail(problem, pytrace=False)
    node = find_npu_node(suite.telemetry_root)
    print(f"NPU device node {node.shown(suite.telemetry_root)} ({node.driver} driver)")


@pytest.mark.board
@pytest.mark.npu
def test_2_runtime_and_driver_versions(suite, gate_runner):
    if suite.backend != "rknnlite":
        pytest.skip(f"backend {suite.backend}: the versions come from RKNNLite.get_sdk_version() on the board")
    from harness.backends import create_context
    manifest, entry, path = _first_entry(gate_runner)
    ctx = create_context(suite.backend_options, entry.label)

    def versions_of_a_loaded_context():
        ctx.load(path)
        ctx.init()
        return ctx.sdk_versions()
    try:
        versions = _or_fail(versions_of_a_loaded_context)
    finally:
        ctx.release()
    converted_with = (manifest.conversion or {}).get("toolkit_version")
    print(f"librknnrt {versions.get('api')}, NPU driver {versions.get('driver')}, "
          f"partition converted with rknn-toolkit2 {converted_with or 'unknown (not a converted partition)'}")
    problem = version_problem(versions, converted_with)
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.mark.npu
def test_3_one_subgraph_lifecycle(suite, gate_runner):
    _, entry, path = _first_entry(gate_runner)
    partition = f" (partition {gate_runner.partition})"
    _or_fail(gate_runner.prepare, after=partition)
    seconds, outputs = _or_fail(lambda: lifecycle_once(suite.backend_options, entry, path),
                                after=partition)
    print(f"{entry.label} on {suite.backend}: " + ", ".join(f"{k} {v:.3f} s" for k, v in seconds.items()))
    bad = [i for i, out in enumerate(outputs) if not np.isfinite(out).all()]
    assert not bad, f"{entry.label}: output {bad[0]} has NaN/Inf on zero inputs ({path})"


@pytest.mark.npu
def test_4_model_for_two_steps(suite, gate_runner, golden_cases, npu_guard):
    case = golden_cases[0]
    result = _or_fail(lambda: gate_runner.run(case, npu_guard, steps=SMOKE_STEPS, tag="-smoke"),
                      before=f"{case.name}, {SMOKE_STEPS} steps on {suite.backend}: ")
    assert np.isfinite(result.latent).all(), f"{case.name}: the {SMOKE_STEPS}-step latent has NaN/Inf"
