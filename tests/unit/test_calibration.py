"""Calibration capture on the embedded model: the board's recipe, the toolkit's dataset lists, the
record, and the failures (bad options, a run failing part-way, a tampered or moved capture)."""
import dataclasses
import json

import numpy as np
import pytest

from harness.cli.main import main
from harness.core.errors import ConfigError, NumericsError
from harness.model import ops
from harness.model import reference as R
from harness.partition.manifest import load_manifest
from harness.runtime.capture import RECORD_FILE, CaptureRecipe, capture_calibration, load_calibration, parse_steps
from harness.sampling.flow import flow_sigmas, initial_noise
from harness.sampling.reference_run import sample_settings, stream_text_embs

STEPS = 3       # a 3-step generation: "high" is step 0, "low" is step 2


@pytest.fixture(scope="module")
def ffn_capture(embedded_fp32, tmp_path_factory):
    bundle, partition = embedded_fp32
    out = tmp_path_factory.mktemp("cal") / "ffn"
    assert main(["capture-calibration", "--partition", str(partition), "--sampler-steps", str(STEPS),
                 "--out", str(out)]) == 0
    return out


def _reference_branch_inputs(bundle, prompt, settings, block):
    """Block `block`'s branch inputs at step 0 from the monolithic reference: [S, N, D] per branch."""
    text_embs = stream_text_embs(bundle, [prompt], settings.cfg_scale)
    ctx = np.concatenate([text_embs["cond"], text_embs["uncond"]])
    w, cfg = bundle.all_weights(), bundle.cfg
    latent = initial_noise((1, *bundle.latent_shape), settings.seed)
    emb, lora = R.time_embedding(w, cfg, np.array([1.0, 1.0], np.float32))
    mods = R.modulations(w, cfg, emb, lora)
    rope = R.make_rope(cfg)
    x = ops.linear(R.patchify(np.concatenate([latent, latent]), cfg), w["x_embedder.proj.1.weight"])
    for i in range(block + 1):
        x, record = R.block_branches(w, cfg, i, x, mods, ctx, rope)
    return {b: h for b, (h, _) in record.items()}


def test_ffn_capture_is_the_boards_recipe_with_one_list_per_subgraph(ffn_capture, embedded_fp32):
    bundle, partition = embedded_fp32
    record = json.loads((ffn_capture / RECORD_FILE).read_text())
    assert record["total_sets"] == 112 and len(record["subgraphs"]) == 28
    sigmas = flow_sigmas(STEPS, 3.0)
    assert record["recipe"]["steps"] == [0, STEPS - 1]
    assert record["recipe"]["sigmas"] == pytest.approx([sigmas[0], sigmas[STEPS - 1]])
    assert record["manifest_sha256"] and record["weights_sha256"] == bundle.digest
    ffn_files = {e.file for e in load_manifest(partition).subgraphs if e.branch == "ffn"}
    assert {s["source"] for s in record["subgraphs"]} == ffn_files
    for sub in record["subgraphs"]:
        lines = (ffn_capture / sub["dataset"]).read_text().splitlines()
        assert len(lines) == 4
        assert {(s["step"], s["stream"]) for s in sub["sets"]} == {
            (0, "cond"), (0, "uncond"), (STEPS - 1, "cond"), (STEPS - 1, "uncond")}
        for line in lines:
            (path,) = line.split()
            assert np.load(ffn_capture / path).shape == (2, bundle.cfg.tokens, bundle.cfg.width)


def test_captured_inputs_are_what_the_subgraph_received(ffn_capture, embedded_fp32):
    """Step 0's FFN inputs against the monolithic reference's (block 0 and the last block)."""
    bundle, _ = embedded_fp32
    record = json.loads((ffn_capture / RECORD_FILE).read_text())
    settings = sample_settings(bundle, STEPS)
    for sub in (record["subgraphs"][0], record["subgraphs"][-1]):
        want = _reference_branch_inputs(bundle, record["generation"]["prompt"], settings, sub["block"])["ffn"]
        for k, stream in enumerate(("cond", "uncond")):
            (s,) = [s for s in sub["sets"] if s["step"] == 0 and s["stream"] == stream]
            got = np.load(ffn_capture / s["inputs"][0]["file"])
            assert np.abs(got - want[k]).max() <= 1e-4, (sub["block"], stream)     # both batch rows


def test_cross_attn_lines_list_x_then_text_embedding(embedded_fp32, tmp_path):
    bundle, partition = embedded_fp32
    out = tmp_path / "cross"
    settings = sample_settings(bundle, 2)
    record = capture_calibration(bundle, partition, out, "digit seven", settings,
                                 CaptureRecipe(["cross_attn"], [1], ["cond"], blocks=[3]))
    (sub,) = record["subgraphs"]
    assert sub["index"] == 10 and [i["name"] for i in sub["inputs"]] == ["x", "text_emb"]
    (line,) = (out / sub["dataset"]).read_text().splitlines()
    x_path, emb_path = line.split()
    assert x_path.endswith("_x.npy")
    np.testing.assert_array_equal(np.load(out / emb_path)[0], bundle.text_emb("digit seven"))


def test_load_calibration_names_the_missing_set_and_a_tampered_file(ffn_capture, embedded_fp32, tmp_path):
    bundle, partition = embedded_fp32
    manifest = load_manifest(partition)
    cal = load_calibration(ffn_capture, manifest)
    assert cal.dataset_for(manifest.entry(4, "ffn")).name == "14_block04_ffn.txt"
    with pytest.raises(ConfigError, match=r"no set for subgraph 12 \(block 4 self_attn\)"):
        cal.dataset_for(manifest.entry(4, "self_attn"))
    import shutil
    copy = tmp_path / "moved"
    shutil.copytree(ffn_capture, copy)
    assert load_calibration(copy, manifest).lists[2] == copy / "02_block00_ffn.txt"   # relocatable
    lst = copy / "05_block01_ffn.txt"
    lst.write_text("\n".join(lst.read_text().splitlines()[:3]) + "\n")
    with pytest.raises(ConfigError, match="05_block01_ffn.txt disagrees with calibration.json"):
        load_calibration(copy, manifest)
    victim = copy / "02_block00_ffn" / "s00_cond_x.npy"   # checked before any later list
    victim.write_bytes(victim.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(ConfigError, match="s00_cond_x.npy fails its checksum"):
        load_calibration(copy, manifest)
    with pytest.raises(ConfigError, match="no calibration.json"):
        load_calibration(tmp_path)


def test_a_run_failing_part_way_leaves_no_output_directory(embedded_fp32, tmp_path):
    bundle, partition = embedded_fp32
    bad = dict(bundle.all_weights())
    bad["blocks.5.mlp.layer2.weight"] = np.full_like(bad["blocks.5.mlp.layer2.weight"], 1e38)
    poisoned = tmp_path / "poisoned"
    from harness.partition.onnx_export import ExportSettings, export_partition
    export_partition(bad, bundle.cfg, poisoned, ExportSettings(precision="float32", blocks=None))
    out = tmp_path / "cal"
    with pytest.raises(NumericsError, match="block 5, branch ffn"):
        capture_calibration(dataclasses.replace(bundle, weights=bad, checkpoint=None), poisoned, out, "digit one",
                            sample_settings(bundle, 2), CaptureRecipe(["ffn"], [0, 1], ["cond", "uncond"]))
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["poisoned"]


@pytest.mark.parametrize("args,fragment", [
    (["--steps", "high,7"], "--steps 'high,7': step 7 is outside 0..2"),
    (["--steps", "first"], "'first' is not high, mid, low or a step number"),
    (["--branches", "mlp"], "--branches 'mlp': choose from self_attn, cross_attn, ffn or all"),
    (["--streams", "uncond", "--cfg", "1"], "CFG 1 runs no uncond stream"),
])
def test_bad_options_give_one_line_and_no_directory(args, fragment, embedded_fp32, tmp_path, capsys):
    _, partition = embedded_fp32
    out = tmp_path / "cal"
    rc = main(["capture-calibration", "--partition", str(partition), "--sampler-steps", "3",
               "--out", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and fragment in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_refuses_a_float16_partition_and_a_non_empty_out(embedded_fp32, tmp_path, capsys):
    bundle, partition = embedded_fp32
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["capture-calibration", "--partition", str(partition), "--out", str(tmp_path / "full")]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    from harness.partition.onnx_export import ExportSettings, export_partition
    export_partition(bundle.weights, bundle.cfg, tmp_path / "float16", ExportSettings(precision="float16", blocks=[0]))
    with pytest.raises(ConfigError, match="captured from an FP32 generation, this partition is float16"):
        capture_calibration(bundle, tmp_path / "float16", tmp_path / "c", "", sample_settings(bundle, 2),
                            CaptureRecipe(["ffn"], [0], ["cond"]))


def test_step_names():
    assert parse_steps("high,low", 20) == [0, 19]
    assert parse_steps("low,mid,high,0", 20) == [0, 10, 19]


def test_strata_spread_evenly_over_sigma_not_over_steps():
    from harness.runtime.capture import PRESETS
    from harness.sampling.flow import flow_sigmas
    sigmas = flow_sigmas(20, 3.0)
    steps = parse_steps(PRESETS["full-schedule"]["steps"], 20, 3.0)
    assert len(steps) == 8 and steps[0] == 0 and steps[-1] == 19
    # Evenly spaced levels: no gap between chosen sigmas is much larger than the ideal spacing
    # (the shifted schedule crowds high sigmas, so even step numbers would leave the low end bare).
    gaps = -np.diff(sigmas[steps].astype(np.float64))
    ideal = (sigmas[0] - sigmas[19]) / 7
    assert gaps.max() < 1.6 * ideal, (steps, gaps)
    assert parse_steps(PRESETS["board-112"]["steps"], 20) == [0, 19]


def test_bad_strata_name_the_option():
    with pytest.raises(ConfigError, match="--steps 'strata:x': 'strata:x' needs a positive count"):
        parse_steps("strata:x", 20)
