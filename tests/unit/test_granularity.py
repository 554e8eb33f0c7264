"""Partition granularity: fused subgraphs (whole blocks, AdaLN modulation, AdaLN gate and residual add
inside) compute the branch partition's image, the manifest records the granularity, a kept fused partition
with other input names is exported again, and a malformed fused manifest is one error naming the subgraph."""
import json

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.cli.main import main
from harness.core.errors import ConfigError, ManifestError
from harness.partition.granularity import parse_granularity
from harness.partition.manifest import FORMAT, load_manifest
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.partitions import exported_partition, is_current
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.helpers import random_bundle


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 10-block random model: blocks:4 then ends in a group of two (28 blocks divide evenly), and its
    partitions export and run in a third of the embedded depth's time."""
    return random_bundle(tmp_path_factory, seed=11, blocks=10)


@pytest.fixture(scope="module")
def partitions(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("granularity")
    out = {}
    for text in ("branch", "block", "blocks:4"):
        out[text] = root / text.replace(":", "")
        export_partition(model.weights, model.cfg, out[text], ExportSettings(precision="float32", granularity=text))
    return out


def _latent(model, partition, backend="onnxruntime", lifecycle="on-demand", options=None):
    settings = sample_settings(model, steps=2)
    return run_partitioned(RunRequest(model, partition, backend, "the number 3", settings, lifecycle=lifecycle,
                                      backend_options=BackendOptions(backend, options or {}))).latent


@pytest.fixture(scope="module")
def on_demand(model, partitions):
    """Each granularity's latent on onnxruntime, on demand: what the other strategies and backends must
    give, rendered once for the module's tests."""
    return {text: _latent(model, path) for text, path in partitions.items()}


@pytest.mark.parametrize("text, words", [("blocks", "blocks:K"), ("blocks:0", "blocks:K"), ("fused", "branch"),
                                         ("blocks:99", "has 28 blocks")])
def test_bad_granularity_is_one_error_naming_the_option(text, words):
    with pytest.raises(ConfigError, match="--granularity") as err:
        parse_granularity(text, 28)
    assert words in str(err.value)


def test_a_kept_fused_partition_with_other_input_names_is_exported_again(model, tmp_path):
    first = exported_partition(model, "float32", root=tmp_path, granularity="blocks:4")
    path = first / "manifest.json"
    data = json.loads(path.read_text())
    for spec in data["subgraphs"][0]["inputs"]:       # the names a fused export once wrote
        spec["name"] = spec["name"].replace("adaln_gate", "gate")
    path.write_text(json.dumps(data))
    assert not is_current(first)
    assert exported_partition(model, "float32", root=tmp_path, granularity="blocks:4") == first
    assert "b0_self_attn_adaln_gate" in [s.name for s in load_manifest(first).subgraphs[0].inputs]
    assert is_current(first)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "format": "anima-partition/3"}))     # a manifest not read here
    assert not is_current(first) and exported_partition(model, "float32", root=tmp_path, granularity="blocks:4")
    assert load_manifest(first).format == FORMAT


def test_fused_partitions_hold_whole_blocks_and_record_their_granularity(model, partitions):
    blocks = model.cfg.blocks
    for text, count in (("branch", 3 * blocks), ("block", blocks), ("blocks:4", -(-blocks // 4))):
        m = load_manifest(partitions[text])
        m.verify()
        assert m.format == FORMAT and m.granularity == text and len(m.subgraphs) == count
        assert m.blocks_held() == set(range(blocks))
    fused = load_manifest(partitions["blocks:4"]).subgraphs[1]
    assert fused.blocks == [4, 5, 6, 7] and fused.label == "subgraph 1 (blocks 4-7)"
    names = [s.name for s in fused.inputs]
    assert names[:2] == ["x", "text_emb"] and "b7_ffn_adaln_gate" in names and len(names) == 2 + 4 * 9


def test_fused_partitions_compute_the_branch_partitions_latent(on_demand):
    branch = on_demand["branch"]
    for text in ("block", "blocks:4"):
        fused = on_demand[text]
        # FP32 throughout: only the order of the residual adds differs (x + (g1 o1 + g2 o2 + g3 o3))
        assert np.max(np.abs(fused - branch)) < 1e-4 * max(1.0, float(np.max(np.abs(branch)))), text


def test_every_strategy_and_the_simulated_board_run_a_fused_partition(model, partitions, on_demand):
    for lifecycle in ("resident", "lru:4", "pinned:4", "prefetch:2"):
        assert np.array_equal(_latent(model, partitions["block"], lifecycle=lifecycle), on_demand["block"]), lifecycle
    sim = _latent(model, partitions["blocks:4"], "board-sim", "prefetch:2", {"time_scale": 1e-4})
    assert np.array_equal(sim, on_demand["blocks:4"])


def test_a_fused_subgraph_out_of_order_is_named(partitions, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(partitions["blocks:4"], bad)
    data = json.loads((bad / "manifest.json").read_text())
    data["subgraphs"][1]["blocks"] = [5, 6, 7, 8]
    data["subgraphs"][1]["block"] = 5
    (bad / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=r"subgraph 1 \(blocks 5-8\) is out of execution order"):
        load_manifest(bad)


def test_export_command_takes_granularity(model, tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["export", "--model-dir", str(model.model_dir), "--granularity", "blocks:7", "--out", str(out),
                 "--quiet"]) == 0
    assert "granularity blocks:7" in capsys.readouterr().out and load_manifest(out).granularity == "blocks:7"
    with pytest.raises(SystemExit):
        main(["export", "--granularity", "fused", "--out", str(tmp_path / "q")])
    assert "--granularity fused" in capsys.readouterr().err


def test_the_suites_granularity_chooses_the_partition_the_gates_export(tmp_path):
    from harness.gates.runner import GateRunner
    from harness.pytest_plugin.options import resolve_settings
    runner = GateRunner(resolve_settings({"granularity": "blocks:4", "cache_dir": str(tmp_path)}, None))
    assert runner.partition.name.endswith("-blocks4")
    manifest = load_manifest(runner.partition)
    assert manifest.granularity == "blocks:4" and runner.subgraphs == 7
    with pytest.raises(ConfigError, match="--granularity"):
        resolve_settings({"granularity": "blocks:x"}, None)


def test_int8_ffn_conversion_of_a_fused_partition_is_refused_naming_the_file(partitions, tmp_path):
    from harness.toolkit.convert import ConvertSettings, convert_partition
    with pytest.raises(ConfigError, match=r"w8a8-ffn .* granularity block \(convert it as float16\)") as err:
        convert_partition(partitions["block"], tmp_path / "rknn", ConvertSettings(precision="w8a8-ffn"))
    assert str(partitions["block"]) in str(err.value) and not (tmp_path / "rknn").exists()


def test_the_headroom_gate_watches_every_block_inside_a_fused_subgraph(model, partitions):
    from harness.gates.headroom import HeadroomObserver, OnnxProbe
    manifest = load_manifest(partitions["blocks:4"])
    observer = HeadroomObserver(OnnxProbe(manifest))
    settings = sample_settings(model, steps=1)
    try:
        run_partitioned(RunRequest(model, partitions["blocks:4"], "onnxruntime", "the number 3", settings),
                        observers=[observer])
    finally:
        observer.close()
    summary = {s["subgraph"]: s for s in observer.summary()}
    assert sorted(summary) == list(range(len(manifest.subgraphs)))
    watched = set(summary[1]["tensors"])
    # every branch of every block the subgraph holds, under the name its body has inside the graph
    assert {f"b{b}/{br}/{t}" for b in (4, 5, 6, 7) for br, t in (("ffn", "layer1"), ("ffn", "gelu"),
            ("self_attn", "attn/qk"), ("cross_attn", "attn/scores"))} <= watched
    assert all(0 < float(p["peak"]) < float("inf") for p in summary[1]["tensors"].values())


def test_a_fused_runs_benchmark_is_recorded_by_the_results_store(model, partitions, tmp_path):
    from harness.gates.runner import benchmark_info
    from harness.results.records import Run, RunKey
    from harness.results.store import ResultsStore
    settings = sample_settings(model, steps=1)
    report = run_partitioned(RunRequest(model, partitions["block"], "onnxruntime", "the number 3", settings),
                             report_path=tmp_path / "report.json").report
    info = benchmark_info(report)
    assert set(info["core_s_per_step"]) == {"block"}
    run = Run(run_id="fused-1", time="2026-12-01T10:00:00+00:00", board_id="host", board_model="x86", model="embedded",
              key=RunKey(case="three", steps=1, precision="float16", backend="onnxruntime", manifest_hash="m"),
              valid=True, mean_step_s=info["mean_step_s"], total_denoise_s=info["denoise_s"],
              stages=dict(info["lifecycle_s_per_step"]), branches=dict(info["core_s_per_step"]))
    with ResultsStore(f"sqlite:///{tmp_path / 'results.db'}") as store:
        store.add_run(run)
        assert store.runs()[0].branches == run.branches


@pytest.fixture(scope="module")
def deep_model(tmp_path_factory):
    """The random model at the embedded depth (28 blocks): the board profile's planner models that one."""
    return random_bundle(tmp_path_factory, seed=11)


@pytest.mark.parametrize("granularity", ["block", pytest.param("blocks:4", marks=pytest.mark.slow)])
def test_board_sims_fused_step_is_the_planners_estimate(deep_model, tmp_path, granularity):
    """One model of host time per step ([plan] host_model) for both: board-sim pauses each fused
    subgraph's share of it, so the board seconds its simulated step asks for (every stage, inference
    and host pause, summed by its clock whatever this machine's load does to the sleeps) are the
    step the planner estimates."""
    from harness.backends import board_sim
    from harness.backends.board_profile import load_board_profile
    from harness.memory.plan_space import inputs_for
    model = deep_model
    profile = load_board_profile()
    inp = inputs_for(profile, parse_granularity(granularity, model.cfg.blocks), "auto", 2048.0)
    host_step = inp.host_per_invocation * inp.subgraphs
    step = sum(sum(inp.stages[n].values()) + inp.run[n] for n in inp.order) + host_step
    # the branch partition's host seconds per step, whatever the granularity
    assert host_step == pytest.approx(profile.host_per_invocation() * 3 * model.cfg.blocks)
    partition = tmp_path / "partition"
    export_partition(model.weights, model.cfg, partition, ExportSettings(precision="float32", granularity=granularity))
    scale = profile.sim("time_scale")
    clock = board_sim._CLOCK
    before, host_before = clock.asked, clock.host_board
    run_partitioned(RunRequest(model, partition, "board-sim", "the number 3",
                               sample_settings(model, steps=2), lifecycle="on-demand"))
    decoder = profile.host_before(1) + profile.lifecycle_of("decoder")     # once per image
    assert (clock.host_board - host_before) / scale == pytest.approx(2 * host_step + profile.host_before(1))
    assert ((clock.asked - before) / scale - decoder) / 2 == pytest.approx(step, rel=1e-6)
