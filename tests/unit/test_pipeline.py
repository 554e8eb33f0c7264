"""The partitioned pipeline against the monolithic reference, its records, and its failure modes."""
import dataclasses
import json
import shutil

import numpy as np
import pytest

from harness.backends import live_contexts
from harness.backends.base import BackendOptions
from harness.cli.main import main
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_reference, sample_settings
from harness.sampling.settings import SampleSettings
from tests.helpers import export_fp32, random_bundle

STEPS = 3
# 16 blocks, 48 subgraphs: still block 5's FFN, block 3's cross-attention and subgraph 40 to break;
# every claim here is per subgraph (what a run and an export cost grows with the depth).
BLOCKS = 16
SUBGRAPHS = 3 * BLOCKS


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=4, blocks=BLOCKS)


@pytest.fixture(scope="module")
def partition(model, tmp_path_factory):
    return export_fp32(model, tmp_path_factory)


@pytest.fixture(scope="module")
def fp32_run(model, partition):
    return run_partitioned(
        RunRequest(model, partition, "onnxruntime", "the number 3", sample_settings(model, steps=STEPS)))


def test_partitioned_fp32_matches_monolithic_reference(model, fp32_run):
    s = sample_settings(model, steps=STEPS)
    ref = sample_reference(model, ["the number 3"], [s.seed], s)
    assert np.abs(fp32_run.latent - ref).max() <= 1e-4


def test_report_holds_every_lifecycle_stage_of_every_invocation(fp32_run, model):
    records = fp32_run.report["lifecycle_records"]
    n = model.cfg.subgraphs
    for stage in ("load", "init", "run", "release"):
        body = [r for r in records if r["stage"] == stage and r["branch"] != "decoder"]
        assert len(body) == n * STEPS, stage
        assert {(r["step"], r["subgraph"]) for r in body} == {(s, i) for s in range(STEPS) for i in range(n)}
    # order within one step follows the manifest: block 0 self, cross, ffn, block 1 self, ...
    step0 = [(r["block"], r["branch"]) for r in records if r["stage"] == "run" and r["step"] == 0]
    assert step0[:4] == [(0, "self_attn"), (0, "cross_attn"), (0, "ffn"), (1, "self_attn")]
    assert fp32_run.report["status"] == "ok" and live_contexts() == 0


def test_float16_partition_image_is_close_to_fp32(model, fp32_run, tmp_path):
    from harness.gates.quality import compare
    float16 = tmp_path / "float16"
    export_partition(model.weights_source, model.cfg, float16, ExportSettings(precision="float16"))
    run = run_partitioned(
        RunRequest(model, float16, "onnxruntime", "the number 3", sample_settings(model, steps=STEPS)))
    q = compare(run.image, fp32_run.image)
    print(f"FP16 vs FP32 subgraphs, random-weight model, {STEPS} steps: SSIM {q.ssim:.6f}, PSNR {q.psnr:.1f} dB")
    assert 0.99 < q.ssim <= 1.0


def test_nan_stops_the_run_naming_step_block_branch_stream(model, partition, tmp_path):
    from harness.core.errors import NumericsError
    # The board's reported field failure: FP16 activations overflowing to inf. Weights that fit in
    # FP16 (6e4 < 65504) make block 5's FFN output overflow at run time, in the subgraph itself.
    bad = dict(model.all_weights())
    bad["blocks.5.mlp.layer2.weight"] = np.full_like(bad["blocks.5.mlp.layer2.weight"], 6e4)
    poisoned = tmp_path / "poisoned"
    export_partition(bad, model.cfg, poisoned, ExportSettings(precision="float16"))
    report = tmp_path / "r.json"
    with pytest.raises(NumericsError, match=r"step 0, block 5, branch ffn, stream cond .*: \d+ of 4096 values"):
        run_partitioned(
            RunRequest(dataclasses.replace(model, weights=bad, checkpoint=None), poisoned, "onnxruntime",
                       "digit one", sample_settings(model, steps=2)),
            report_path=report)
    assert live_contexts() == 0
    assert json.loads(report.read_text())["status"] == "failed"


def _damaged(partition, tmp_path, damage):
    copy = tmp_path / "damaged"
    shutil.copytree(partition, copy)
    damage(copy)
    return copy


def _edit_manifest(edit):
    def apply(d):
        m = json.loads((d / "manifest.json").read_text())
        edit(m)
        (d / "manifest.json").write_text(json.dumps(m))
    return apply


def _flip_byte(d):
    f = d / json.loads((d / "manifest.json").read_text())["subgraphs"][7]["file"]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))


def _truncate(d):
    f = d / json.loads((d / "manifest.json").read_text())["subgraphs"][10]["file"]
    f.write_bytes(f.read_bytes()[:100])


def _remove(d):
    (d / json.loads((d / "manifest.json").read_text())["subgraphs"][2]["file"]).unlink()


def _shape(m):
    m["subgraphs"][4]["inputs"][0]["shape"][1] += 1


@pytest.mark.parametrize("damage,fragment", [
    (_remove, "subgraph 2 (block 0 ffn)"),
    (_truncate, "subgraph 10 (block 3 cross_attn)"),
    (_flip_byte, "subgraph 7 (block 2 cross_attn)"),
    (_edit_manifest(lambda m: m["subgraphs"][5].__setitem__("file", "../escape.onnx")), "subgraph 5"),
    (_edit_manifest(_shape), "subgraph 4 (block 1 cross_attn)"),
])
def test_bad_partition_is_one_clear_error_and_leaves_nothing_loaded(model, partition, tmp_path, capsys,
                                                                    damage, fragment):
    bad = _damaged(partition, tmp_path, damage)
    out = tmp_path / "img.png"
    code = main(["generate", "--model-dir", str(model.model_dir), "--backend", "onnxruntime",
                 "--partition", str(bad), "--steps", "1", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0 and fragment in err and "Traceback" not in err
    assert live_contexts() == 0
    assert json.loads(out.with_suffix(".json").read_text())["status"] == "failed"


def test_unknown_backend_and_rknnlite_off_board(model, partition, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--model-dir", str(model.model_dir), "--backend", "npu9000", "--quiet"])
    assert exit_info.value.code == 2
    assert "--backend: invalid choice: 'npu9000'" in capsys.readouterr().err
    code = main(["generate", "--model-dir", str(model.model_dir), "--backend", "rknnlite", "--partition",
                 str(partition), "--steps", "1", "--quiet", "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    # Said first, before any subgraph is loaded or a report written (a refused run writes nothing).
    assert code == 2 and err.startswith("error: --backend rknnlite: not an RK3588") and len(err.splitlines()) == 1
    assert not tmp_path.joinpath("x.json").exists() and live_contexts() == 0


def test_cli_prints_tables_and_writes_report(model, partition, tmp_path, capsys):
    out = tmp_path / "img.png"
    assert main(["generate", "--model-dir", str(model.model_dir), "--backend", "onnxruntime",
                 "--partition", str(partition), "--steps", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "load_rknn" in printed and "init_runtime" in printed and "core time per branch" in printed
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["invocations"] == SUBGRAPHS * 2 and report["stage_records"] == 4 * SUBGRAPHS * 2
    assert set(report["tables"]["core_per_step"]) == {"self_attn", "cross_attn", "ffn"}


def test_partition_from_other_weights_or_partial_is_refused(model, tmp_path):
    from harness.core.errors import ManifestError
    other = dict(model.all_weights())
    other["blocks.3.mlp.layer1.weight"] = other["blocks.3.mlp.layer1.weight"] * 1.01
    export_partition(other, model.cfg, tmp_path / "stale", ExportSettings(precision="float32"))
    with pytest.raises(ManifestError, match="exported from other weights"):
        run_partitioned(
            RunRequest(model, tmp_path / "stale", "onnxruntime", "digit one", sample_settings(model, steps=1)))
    export_partition(model.weights_source, model.cfg, tmp_path / "partial",
                     ExportSettings(precision="float32", blocks=[0, 1]))
    with pytest.raises(ManifestError, match=f"partial partition .2 of {BLOCKS} blocks; block 2 missing"):
        run_partitioned(
            RunRequest(model, tmp_path / "partial", "onnxruntime", "digit one", sample_settings(model,
                       steps=1)))
    assert live_contexts() == 0


def test_rknnlite_failing_mid_run_names_subgraph_and_releases_everything(model, partition, tmp_path, monkeypatch,
                                                                       fake_rknnlite):
    """The board adapter through the whole pipeline, against the fake RKNNLite: inference returns
    None (its documented failure) at subgraph 40; the run stops there with everything released."""
    from harness.core.errors import BackendError
    fake = fake_rknnlite
    real = fake.inference
    calls = {"n": 0}

    def flaky(self, inputs=None, **kwargs):
        calls["n"] += 1
        return None if calls["n"] == 41 else real(self, inputs=inputs, **kwargs)

    monkeypatch.setattr(fake, "inference", flaky)
    report = tmp_path / "r.json"
    with pytest.raises(BackendError,
                       match=r"subgraph 40 \(block 13 cross_attn\): run failed: inference\(\) returned None"):
        run_partitioned(
            RunRequest(model, partition, "rknnlite", "digit one", sample_settings(model, steps=1),
                       backend_options=BackendOptions("rknnlite", {"core_mask": "0_1_2"})),
            report_path=report)
    assert live_contexts() == 0 and fake.live == 0
    assert json.loads(report.read_text())["status"] == "failed"


def test_anima_shaped_partition_without_decoder_or_prompt_encoder(tmp_path):
    """The Cosmos reference model (16 -> here 4 latent channels, no decoder, no prompt encoder: the
    shape of an Anima deployment) through the partition, fed precomputed text_embs: the final latent
    matches the monolithic reference and no image is claimed."""
    from harness.model.bundle import ModelBundle
    from harness.model.checkpoint import load_weights
    from harness.model.config import load_profile
    from harness.sampling.flow import initial_noise
    from tests.unit.test_reference import DATA
    cfg = load_profile("cosmos-tiny")
    bundle = ModelBundle(cfg, load_weights(DATA / "tiny.safetensors", cfg), None, tmp_path)
    manifest = export_partition(bundle.weights, cfg, tmp_path / "p", ExportSettings(precision="float32"))
    assert manifest.decoder is None
    io = np.load(DATA / "tiny_io.npz")
    text_embs = {"cond": io["text_emb"], "uncond": np.zeros_like(io["text_emb"])}
    settings = SampleSettings(steps=3, cfg_scale=4.0, shift=3.0, seed=7)
    run = run_partitioned(RunRequest(bundle, tmp_path / "p", "onnxruntime", "", settings, text_embs=text_embs))
    assert run.image is None and run.report["status"] == "ok"

    from harness.model import reference as R
    from harness.sampling.flow import denoise
    ctx = np.concatenate([text_embs["cond"], text_embs["uncond"]])

    def velocity(x, sigma, step):
        v = R.forward(bundle.weights, cfg, np.concatenate([x, x]), sigma, ctx)
        return {"cond": v[:1], "uncond": v[1:]}

    ref = denoise(velocity, initial_noise((1, 4, 8, 8), 7), 3, 3.0, 4.0)
    assert np.abs(run.latent - ref).max() <= 1e-4
