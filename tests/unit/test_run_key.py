"""Runs are keyed by what decides them, not by name: a benchmark's derived run never stands in
for a golden case that happens to share its name (`<case>-spectrum` once did, and
--update-goldens rewrote the golden `seven-spectrum` from a 20-step benchmark render)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.core.errors import ConfigError
from harness.gates.cases import load_cases
from harness.gates.headroom import DEFAULT_MIN_HEADROOM as MIN_HEADROOM
from harness.gates.headroom import REPORT_KEY
from harness.gates.runner import derived_case, memory_case
from harness.partition.manifest import load_manifest
from harness.sampling.spectrum import DEFAULT_PRESET, PRESETS
from tests.helpers import TWO_STEP_DEFAULTS, gate_runner_for

CASES = TWO_STEP_DEFAULTS + """
[[case]]
name = "one"
prompt = "digit one"
seed = 5

[[case]]
name = "one-spectrum"
prompt = "digit one"
seed = 5
steps = 6
sampler = "spectrum"
spectrum = { preset = "13-of-28", warmup = 3, degree = 2 }
"""


# Four blocks: which run stands for which case does not depend on the depth (a render's cost does).
BLOCKS = 4


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    """The module's cache of exported partitions: every test's random model is the same (seed 6), so the
    first test exports its partition and the others verify and use it."""
    return tmp_path_factory.mktemp("partitions")


@pytest.fixture
def gates(tmp_path, partitions):
    runner, golden = gate_runner_for(tmp_path, CASES, seed=6, cache=partitions, blocks=BLOCKS)
    return runner, load_cases(golden / "cases.toml")


@pytest.fixture
def own_gates(tmp_path):
    """gates with a partition of the test's own, which the test may damage."""
    runner, golden = gate_runner_for(tmp_path, CASES, seed=6, blocks=BLOCKS)
    return runner, load_cases(golden / "cases.toml")


def test_a_derived_run_named_like_a_case_is_not_that_cases_run(gates):
    runner, (one, one_spectrum) = gates
    # What the benchmark made of `one` under --bench-sampler=spectrum, under the name it used to get.
    bench = replace(one, name="one-spectrum", sampler="spectrum", spectrum=PRESETS[DEFAULT_PRESET].as_dict())
    rendered = runner.run(bench, guard=None, keep=False)           # --bench-steps not given
    assert runner.share(bench, rendered, None)
    judged = runner.case_run(one_spectrum, guard=None)
    assert judged.result is not rendered
    assert judged.result.report["sampler"]["params"] == one_spectrum.spectrum


def test_a_run_of_the_same_settings_is_shared_whatever_its_name(gates):
    runner, (one, _) = gates
    rendered = runner.run(one, guard=None, keep=False)
    assert runner.share(derived_case(one, "bench"), rendered, one.steps)
    assert runner.case_run(one, guard=None).result is rendered
    assert not runner.share(one, rendered, one.steps)       # that key has its run already


def test_a_derived_runs_name_is_no_golden_case_name(gates, tmp_path):
    runner, (one, _) = gates
    name = derived_case(one, "spectrum").name
    (tmp_path / "cases.toml").write_text(CASES.replace('name = "one-spectrum"', f'name = "{name}"'))
    with pytest.raises(ConfigError, match="a file-safe name"):
        load_cases(tmp_path / "cases.toml")


def test_a_shared_headroom_run_is_the_cases_run_and_an_unshared_one_is_not(gates):
    runner, (one, _) = gates
    shared, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=True)
    judged = runner.case_run(one, guard=None)
    assert judged.result is shared.result                   # numerics and quality judge the probed run
    assert judged.report_path.name == "one.json" and judged.report_path.exists()
    assert REPORT_KEY in judged.result.report
    again, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=True)
    assert again.result is not shared.result                # the case had its run: a new probed one


def test_the_memory_cases_run_carries_no_probe(gates):
    runner, cases = gates
    probed, _ = runner.headroom_run(memory_case(cases), None, MIN_HEADROOM, share=False)
    measured = runner.case_run(memory_case(cases), guard=None)
    assert measured.result is not probed.result and REPORT_KEY not in measured.result.report


def test_a_failed_shared_headroom_run_names_the_report_its_run_wrote(own_gates):
    runner, (one, _) = own_gates
    runner.prepare()        # the partition verified; then a subgraph is damaged on disk
    manifest = load_manifest(runner.partition)
    path = manifest.path_of(manifest.entries()[0])
    path.write_bytes(b"not an onnx model")
    failed, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=True)
    judged = runner.case_run(one, guard=None)
    assert failed.error is not None and judged.error is failed.error        # not rendered again
    assert judged.report_path.name == "one-headroom.json" and judged.report_path.exists()



def test_the_benchmarks_round_is_the_cases_unprobed_run(gates):
    runner, (one, _) = gates
    benchmarked = runner.run(one, guard=None, keep=False)
    assert runner.share(derived_case(one, "bench"), benchmarked, one.steps)
    assert runner.unprobed_run(one, guard=None).result is benchmarked      # timed with no probe in it


def test_a_probed_shared_run_is_not_the_cases_unprobed_run(gates):
    runner, (one, _) = gates
    probed, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=True)
    timed = runner.unprobed_run(one, guard=None)
    assert timed.result is not probed.result and REPORT_KEY not in timed.result.report
    assert runner.case_run(one, guard=None).result is probed.result        # numerics and quality keep theirs


def test_a_probed_run_keeps_its_small_subgraphs_loaded_and_renders_the_on_demand_latent(gates):
    """Off the board, on subgraphs whose session building is most of a run, the probed (never timed) run loads
    each subgraph once instead of once a step, and numerics and quality see bitwise the on-demand run's."""
    runner, (one, _) = gates
    probed, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=False)
    plain = runner.run(one, guard=None, keep=False)
    subgraphs = len(load_manifest(runner.partition).entries())
    assert (probed.result.report["lifecycle"], plain.report["lifecycle"]) == ("resident", "on-demand")
    assert probed.result.report["lifecycle_counters"]["misses"] == subgraphs
    assert plain.report["lifecycle_counters"]["misses"] == (subgraphs - 1) * one.steps + 1      # a decoder: once
    assert probed.result.latent.tobytes() == plain.latent.tobytes()


def test_a_probed_run_keeps_a_lifecycle_of_the_users_own(gates):
    runner, (one, _) = gates
    runner.s = replace(runner.s, lifecycle="lru:3")
    probed, _ = runner.headroom_run(one, None, MIN_HEADROOM, share=False)
    assert probed.result.report["lifecycle"] == "lru:3"
