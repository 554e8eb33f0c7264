"""The latent quality gate's comparison, and its thresholds against a real FP16-level difference:
the FP32 partition's latent passes against the committed FP16 golden of the Anima-shaped model."""
import numpy as np
import pytest

from harness.gates.cases import load_cases
from harness.gates.golden import GoldenStale, GoldenStore
from harness.gates.quality import ImageMismatch, compare_latents
from harness.gates.runner import quality_line
from harness.model.bundle import check_text_emb, load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.settings import SampleSettings
from tests.anima_shaped import GOLDEN_DIR, MODEL_DIR


def test_data_range_comes_from_the_golden():
    rng = np.random.default_rng(0)
    golden = rng.standard_normal((4, 16, 16)).astype(np.float32) * 5
    noisy = golden + 0.01 * rng.standard_normal(golden.shape).astype(np.float32)
    q = compare_latents(noisy, golden)
    assert q.kind == "latent" and q.data_range == pytest.approx(float(golden.max() - golden.min()))
    # the same relative error at another scale gives the same SSIM and PSNR: no fixed range assumed
    q10 = compare_latents(noisy * 10, golden * 10)
    assert q10.ssim == pytest.approx(q.ssim, abs=1e-9) and q10.psnr == pytest.approx(q.psnr, abs=1e-4)
    assert compare_latents(golden, golden).psnr == float("inf")
    assert -1.0 <= compare_latents(-golden, golden).cosine < -0.999
    with pytest.raises(ImageMismatch, match=r"obtained latent shape \[4, 8, 8\] differs from golden \[4, 16, 16\]"):
        compare_latents(golden[:, :8, :8], golden)


def test_fp32_latent_passes_the_float16_golden_with_margin(tmp_path):
    bundle = load_bundle(MODEL_DIR)
    case = load_cases(GOLDEN_DIR / "cases.toml")[0]
    golden, meta = GoldenStore(GOLDEN_DIR, kind="latent").load(case)
    assert meta["kind"] == "latent" and meta["precision"] == "float16"
    export_partition(bundle.weights_source, bundle.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    streams = {s: check_text_emb(np.load(GOLDEN_DIR / f), bundle.cfg, f)
               for s, f in (("cond", case.text_emb), ("uncond", case.uncond_text_emb))}
    settings = SampleSettings(steps=case.steps, cfg_scale=case.cfg, shift=case.shift, seed=case.seed)
    latent = run_partitioned(
        RunRequest(bundle, tmp_path / "p", "onnxruntime", "", settings, text_embs=streams)).latent
    q = compare_latents(latent, golden)
    print(quality_line(case, q))
    assert q.passes(case.ssim_min, case.psnr_min, case.cosine_min)
    assert 0 < 1 - q.ssim < (1 - case.ssim_min) / 5, "an FP16-level difference, well inside the gate"


def test_an_image_golden_is_refused_where_the_gate_compares_latents():
    case = load_cases(GOLDEN_DIR.parent / "embedded-digits" / "cases.toml")[0]
    with pytest.raises(GoldenStale, match="holds an image golden, but this partition has no decoder, so the "
                                          "gate compares latents"):
        GoldenStore(GOLDEN_DIR.parent / "embedded-digits", kind="latent").load(case)
