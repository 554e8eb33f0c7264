"""`harness goldens thresholds`: a model's quality bars from its own FP16, FP32 and W8A8 runs, written into
its cases.toml with their margins; the gates then judge that model by them."""
import math
import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from harness.cli.main import main
from harness.core.errors import ConfigError
from harness.gates.cases import case_inputs, load_cases
from harness.gates.runner import quality_check
from harness.gates.thresholds import FLOAT16, W8A8, bars, gate_value, write_bars
from harness.model.bundle import load_bundle
from harness.model.config import load_model_dir
from harness.model.weights import random_weights, save_weights
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from tests.helpers import UNSEEN_CASES, make_unseen_model


def _rows(float16: list[float], w8a8: list[float]) -> list[dict]:
    """Rows of latent 1-SSIM, cosine and MSE errors, each metric the given errors scaled."""
    def errs(e):
        return {("latent", "ssim"): e, ("latent", "psnr"): e / 100, ("latent", "cosine"): e / 10}
    return ([{"case": f"c{i}", "pair": FLOAT16, "errors": errs(e)} for i, e in enumerate(float16)]
            + [{"case": f"c{i}", "pair": W8A8, "errors": errs(e)} for i, e in enumerate(w8a8)])


def test_the_bar_sits_at_the_geometric_mean_of_worst_float16_and_best_w8a8():
    table = {b.metric: b for b in bars(_rows([1e-6, 4e-6], [1e-4, 9e-4]), "latent")}
    ssim = table["ssim"]
    assert ssim.error == pytest.approx(2e-5) and ssim.value == pytest.approx(1 - 2e-5)
    assert ssim.margin_float16 == pytest.approx(5.0) and ssim.margin_w8a8 == pytest.approx(5.0)
    assert ssim.separates and all(b.gated for b in table.values())
    # PSNR is stated in dB to 0.1: its margins are those of the rounded bar, still about equal
    assert table["psnr"].value == round(-10 * math.log10(2e-7), 1)
    assert table["psnr"].margin_float16 == pytest.approx(5.0, rel=0.03)


def test_overlapping_errors_do_not_separate_and_image_runs_gate_image_metrics():
    table = bars(_rows([1e-6, 3e-4], [1e-4, 9e-4]), "image")
    assert not any(b.separates for b in table)
    assert not any(b.gated for b in table), "latent metrics of a model with a decoder are not gated"


@pytest.mark.parametrize("error,value", [(8.49e-05, 0.999915), (1.66e-06, 0.9999983), (4.96e-4, 0.9995)])
def test_gate_values_keep_two_significant_digits_of_the_error(error, value):
    rounded, got = gate_value("ssim", error)
    assert got == value and rounded == pytest.approx(1 - value)


SPECTRUM_CASE = """
[[case]]
name = "s"
text_emb = "cond_a.npy"
uncond_text_emb = "uncond.npy"
seed = 3
sampler = "spectrum"
spectrum = { preset = "13-of-28", warmup = 3, degree = 2 }
"""


def test_written_into_defaults_keeping_comments_or_per_case_when_another_sampler_inherits(tmp_path):
    path = tmp_path / "cases.toml"
    path.write_text("# why these cases\n" + UNSEEN_CASES)
    table = [b for b in bars(_rows([1e-6, 4e-6], [1e-4, 9e-4]), "latent") if b.gated]
    assert write_bars(path, "flow-euler", table, [1, 2]) == ["[defaults]"]
    text = path.read_text()
    assert text.startswith("# why these cases\n") and "x5.0 / x5.0" in text
    assert tomllib.loads(text)["defaults"]["ssim_min"] == pytest.approx(1 - 2e-5)
    # a Spectrum case taking its thresholds from [defaults]: flow-euler's bars go into its own cases
    path.write_text(UNSEEN_CASES + SPECTRUM_CASE)
    assert write_bars(path, "flow-euler", table, [1, 2]) == ["[[case]] a", "[[case]] b"]
    data = tomllib.loads(path.read_text())
    assert "ssim_min" not in data["defaults"] and data["case"][0]["ssim_min"] == pytest.approx(1 - 2e-5)


def test_a_gate_on_cases_without_thresholds_names_the_command(tmp_path):
    (tmp_path / "cases.toml").write_text(UNSEEN_CASES)
    with pytest.raises(ConfigError,
                       match=r"cases.toml \[\[case\]\] #1 'a': no ssim_min / psnr_min.*goldens thresholds"):
        load_cases(tmp_path / "cases.toml")
    assert all(math.isnan(c.ssim_min) for c in load_cases(tmp_path / "cases.toml", thresholds=False))


@pytest.mark.parametrize("seeds", ["1,x", "1,1", ""])
def test_bad_seeds_are_one_clear_error(seeds, capsys):
    assert main(["goldens", "thresholds", "--seeds", seeds]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --seeds {seeds!r}: expected ")


@pytest.mark.slow       # about 9 s on the loaded 2-core machine
def test_a_model_whose_w8a8_run_is_its_float16_run_gets_no_bars(tmp_path):
    """FFN output weights of zero: the INT8 FFN gives the FP16 FFN's zeros, so W8A8 vs FP16 has no error
    at all and no bar can fail it: the command exits 1 naming the metrics and leaves cases.toml as it was."""
    model, golden = make_unseen_model(tmp_path / "model", tmp_path / "golden", blocks=2, width=32)
    cfg = load_model_dir(model)
    weights = random_weights(cfg, seed=0)
    weights.update({k: np.zeros_like(v) for k, v in weights.items() if k.endswith("mlp.layer2.weight")})
    save_weights(weights, model / cfg.files["weights"])
    before = (golden / "cases.toml").read_bytes()
    done = subprocess.run([sys.executable, "-m", "harness", "goldens", "thresholds", "--model-dir", str(model),
                           "--golden-dir", str(golden), "--seeds", "1"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {golden / 'cases.toml'}: not written: FP16 and W8A8 errors do not separate on ")
    assert all(f"latent {metric} (x" in line for metric in ("ssim", "psnr", "cosine")), line
    assert (golden / "cases.toml").read_bytes() == before


def _latent(bundle, partition, case, golden_dir) -> np.ndarray:
    inputs = case_inputs(case, bundle.cfg, golden_dir)
    return run_partitioned(RunRequest(bundle, partition, "onnxruntime", inputs.prompt, inputs.settings,
                                      text_embs=inputs.text_embs)).latent[0]


@pytest.mark.slow
def test_an_unseen_model_gets_bars_its_float16_run_passes_and_its_w8a8_run_fails(tmp_path):
    """A model no threshold was made for (2 blocks, width 32): the command writes its bars, the quality
    and numerics gates pass on its own FP16 partition against goldens made from it, a run of its FP32
    partition (another host's FP16 stands in) passes the written bars and its W8A8 run fails them."""
    model, golden = make_unseen_model(tmp_path / "model", tmp_path / "golden", blocks=2, width=32)
    done = subprocess.run([sys.executable, "-m", "harness", "goldens", "thresholds", "--model-dir", str(model),
                           "--golden-dir", str(golden), "--seeds", "1,2,3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "wrote ssim_min, psnr_min, cosine_min (latent)" in done.stdout
    cases = load_cases(golden / "cases.toml")
    margins = re.search(r"^ssim_min = [\d.]+ # .*: x(\d+\.\d) / x(\d+\.\d)", (golden / "cases.toml").read_text(), re.M)
    assert margins and min(float(m) for m in margins.groups()) > 1.0
    bundle = load_bundle(model)
    parts = {}
    for name, precision, quant in (("float16", "float16", None), ("float32", "float32", None),
                                   ("w8a8", "float16", "w8a8-ffn")):
        parts[name] = tmp_path / name
        export_partition(bundle.weights_source, bundle.cfg, parts[name],
                         ExportSettings(precision=precision, fake_quant=quant))
    gates = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", "tests/acceptance/test_quality.py",
             "tests/acceptance/test_numerics.py", f"--model-dir={model}", f"--golden-dir={golden}",
             f"--partition={parts['float16']}", "--backend=onnxruntime"]
    written = subprocess.run([*gates, "--update-goldens", f"--artifacts={tmp_path / 'a1'}"], capture_output=True,
                             text=True)
    assert written.returncode == 0, written.stdout[-3000:]
    judged = subprocess.run([*gates, f"--artifacts={tmp_path / 'a2'}"], capture_output=True, text=True)
    assert judged.returncode == 0 and "4 passed" in judged.stdout, judged.stdout[-3000:]
    for case in cases:
        golden_latent = np.load(golden / f"{case.name}.npy")
        for name, passes in (("float32", True), ("w8a8", False)):
            q, _ = quality_check(case, _latent(bundle, parts[name], case, golden), golden_latent,
                                 tmp_path / "quality", kind="latent")
            assert q.passes(case.ssim_min, case.psnr_min, case.cosine_min) == passes, (name, case.name, q)
