"""The Anima path through `generate`: text-embedding files instead of a prompt, one stream (--cfg 1)
on a partition exported for two, and a decoder ONNX named in model.toml run as one more managed model."""
import shutil

import numpy as np
import pytest

from harness.backends import live_contexts
from harness.cli.main import main
from harness.core.errors import NumericsError
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.anima_shaped import GOLDEN_DIR, MODEL_DIR, write_decoder_onnx
from tests.helpers import make_random_model_dir

COND, UNCOND = GOLDEN_DIR / "cond_a.npy", GOLDEN_DIR / "uncond.npy"


@pytest.fixture(scope="module")
def anima(tmp_path_factory):
    """The Anima-shaped model and its default (two-stream) FP32 partition."""
    bundle = load_bundle(MODEL_DIR)
    out = tmp_path_factory.mktemp("anima") / "p"
    export_partition(bundle.weights_source, bundle.cfg, out, ExportSettings(precision="float32"))
    return bundle, out


def _gen(tmp_path, *args):
    out = tmp_path / "g.png"
    return main(["generate", "--quiet", "--steps", "2", "--out", str(out), *args]), out


def test_text_emb_files_drive_the_anima_shaped_model(anima, tmp_path):
    bundle, partition = anima
    code, out = _gen(tmp_path, "--model-dir", str(MODEL_DIR), "--backend", "onnxruntime", "--partition",
                     str(partition), "--text-emb", str(COND), "--uncond-text-emb", str(UNCOND))
    assert code == 0
    latent = np.load(out.with_suffix(".latent.npy"))
    assert latent.shape == (16, 16, 16) and not out.exists()     # no decoder: the latent, no image
    code, ref_out = _gen(tmp_path / "ref", "--model-dir", str(MODEL_DIR), "--backend", "reference",
                         "--text-emb", str(COND), "--uncond-text-emb", str(UNCOND))
    assert code == 0
    np.testing.assert_allclose(latent, np.load(ref_out.with_suffix(".latent.npy")), atol=1e-4)


def test_cfg_1_runs_one_stream_on_a_two_stream_partition(anima, tmp_path):
    bundle, partition = anima
    one = tmp_path / "one"
    export_partition(bundle.weights_source, bundle.cfg, one, ExportSettings(precision="float32", streams=1))
    streams = {"cond": np.load(COND)[None]}
    s = sample_settings(bundle, steps=2, cfg_scale=1.0)
    padded = run_partitioned(RunRequest(bundle, partition, "onnxruntime", "", s, text_embs=streams))
    single = run_partitioned(RunRequest(bundle, one, "onnxruntime", "", s, text_embs=streams))
    assert padded.report["streams"] == ["cond"] and padded.report["streams_padded_to"] == 2
    np.testing.assert_allclose(padded.latent, single.latent, atol=1e-5)
    code, _ = _gen(tmp_path, "--model-dir", str(MODEL_DIR), "--backend", "onnxruntime", "--partition",
                   str(partition), "--text-emb", str(COND), "--cfg", "1")
    assert code == 0


def test_cfg_1_with_a_prompt_on_the_embedded_layout(tmp_path):
    model = make_random_model_dir(tmp_path / "model", seed=2)
    code, out = _gen(tmp_path, "--model-dir", str(model), "--backend", "onnxruntime", "--cfg", "1",
                     "--precision", "float32", "--prompt", "digit one")
    assert code == 0 and out.exists()


@pytest.mark.parametrize("args,message", [
    (["--text-emb", "WRONG"],
     "--text-emb {wrong}: text embedding is float32 [3, 5]; anima-shaped takes float [16, 32]"),
    (["--text-emb", "COND", "--cfg", "4"], "--cfg 4 mixes an unconditional stream: give --uncond-text-emb FILE"),
    (["--prompt", "a cat"], "model anima-shaped has no prompt encoder here"),
    (["--text-emb", "COND", "--prompt", "x"], "--prompt and --text-emb both given"),
])
def test_bad_text_emb_input_is_one_line(tmp_path, capsys, args, message):
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((3, 5), np.float32))
    args = [{"WRONG": str(wrong), "COND": str(COND)}.get(a, a) for a in args]
    code, _ = _gen(tmp_path, "--model-dir", str(MODEL_DIR), *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert message.format(wrong=wrong) in err[0]


def _with_decoder(tmp_path, decoder_writer):
    model = tmp_path / "model"
    shutil.copytree(MODEL_DIR, model)
    bundle = load_bundle(model)
    decoder_writer(bundle.cfg, model / "vae_decoder.onnx")
    toml = model / "model.toml"
    toml.write_text(toml.read_text() + '\n[decoder]\nonnx = "vae_decoder.onnx"\noutput_range = [-1.0, 1.0]\n')
    return model


def test_decoder_named_in_model_toml_runs_as_a_managed_model(tmp_path):
    model = _with_decoder(tmp_path, write_decoder_onnx)
    code, out = _gen(tmp_path, "--model-dir", str(model), "--backend", "onnxruntime", "--precision", "float32",
                     "--text-emb", str(COND), "--uncond-text-emb", str(UNCOND))
    assert code == 0 and out.exists()
    import json
    report = json.loads(out.with_suffix(".json").read_text())
    stages = [r["stage"] for r in report["lifecycle_records"] if r["branch"] == "decoder"]
    assert stages == ["load", "init", "run", "release"]


def _nan_decoder(cfg, path):
    import onnx
    from onnx import TensorProto, helper
    h, w = cfg.latent_size
    # sqrt of a negative constant: NaN whatever the latent, as a broken VAE export would give
    nodes = [helper.make_node("Constant", [], ["neg"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [-1.0])),
             helper.make_node("Sqrt", ["neg"], ["nan"]),
             helper.make_node("Slice", ["latent", "s", "e", "ax"], ["three"]),
             helper.make_node("Add", ["three", "nan"], ["image"])]
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("s", 0), ("e", 3), ("ax", 1))]
    graph = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("latent", TensorProto.FLOAT,
                                                                           [1, cfg.latent_channels, h, w])],
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, h, w])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_decoder_emitting_nan_is_caught_and_everything_released(tmp_path):
    model = _with_decoder(tmp_path, _nan_decoder)
    bundle = load_bundle(model)
    export_partition(bundle.weights_source, bundle.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    s = sample_settings(bundle, steps=1, cfg_scale=1.0)
    with pytest.raises(NumericsError, match=r"NaN/Inf in the image from subgraph 12 \(decoder\), file decoder.onnx: "
                                            r"768 of 768 values"):
        run_partitioned(
            RunRequest(bundle, tmp_path / "p", "onnxruntime", "", s, text_embs={"cond": np.load(COND)[None]}))
    assert live_contexts() == 0


def test_text_emb_of_a_prompt_renders_what_the_prompt_renders_on_the_embedded_model(tmp_path):
    from harness.core.imageio import load_png
    from harness.model.config import EMBEDDED_DIR
    bundle = load_bundle(EMBEDDED_DIR)
    np.save(tmp_path / "seven.npy", bundle.text_emb("a handwritten digit seven"))
    np.save(tmp_path / "empty.npy", bundle.text_emb(""))
    by_prompt = main(["generate", "--quiet", "--steps", "2", "--prompt", "a handwritten digit seven",
                      "--out", str(tmp_path / "p.png")])
    by_emb = main(["generate", "--quiet", "--steps", "2", "--text-emb", str(tmp_path / "seven.npy"),
                   "--uncond-text-emb", str(tmp_path / "empty.npy"), "--out", str(tmp_path / "e.png")])
    assert by_prompt == by_emb == 0
    np.testing.assert_array_equal(load_png(tmp_path / "p.png"), load_png(tmp_path / "e.png"))
