"""Measure where the latent quality gate's thresholds must sit (run by hand; README records the output).

For each golden case of a model: the final latent of FP32, FP16 and FP16 + FFN W8A8 partitions on
onnxruntime. FP16 vs FP32 stands in for the board's FP16 run against an FP16 golden made elsewhere
(rounding-level differences the gate must pass); W8A8 vs FP16 is the variant the gate must fail.
Prints SSIM (channels as images, data range from the reference), PSNR and cosine for both, the
same way the image thresholds were measured, and each pair's verdict and margins under the latent
thresholds of golden/anima-shaped/cases.toml (or --thresholds).

    .venv/bin/python tools/measure_latent_gate.py --model-dir models/embedded
    .venv/bin/python tools/measure_latent_gate.py --model-dir models/anima-shaped
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.sampling.reference_run import stream_text_embs  # noqa: E402
from harness.gates.cases import load_cases
from harness.model.bundle import check_text_emb, load_bundle  # noqa: E402
from harness.partition.onnx_export import export_partition  # noqa: E402
from harness.gates.quality import compare_latents  # noqa: E402
from harness.runtime.run import run_partitioned, RunRequest  # noqa: E402

VARIANTS = (("fp32", "float32", None), ("fp16", "float16", None), ("w8a8", "float16", "ffn-w8a8"))


def case_streams(bundle, case, golden_dir: Path) -> dict:
    if case.text_emb is None:
        return stream_text_embs(bundle, [case.prompt], case.cfg)
    streams = {"cond": check_text_emb(np.load(golden_dir / case.text_emb), bundle.cfg, case.text_emb)}
    if case.cfg != 1.0:
        streams["uncond"] = check_text_emb(np.load(golden_dir / case.uncond_text_emb), bundle.cfg,
                                           case.uncond_text_emb)
    return streams


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--golden-dir", type=Path)
    parser.add_argument("--thresholds", type=Path, default=ROOT / "golden" / "anima-shaped" / "cases.toml",
                        help="cases.toml whose [defaults] thresholds each pair is judged by (default: %(default)s)")
    args = parser.parse_args(argv)
    limits = tomllib.loads(args.thresholds.read_text())["defaults"]
    mins = (limits["ssim_min"], limits["psnr_min"], limits.get("cosine_min", 0.0))
    bundle = load_bundle(args.model_dir)
    golden_dir = args.golden_dir or ROOT / "golden" / bundle.cfg.name
    cases = load_cases(golden_dir / "cases.toml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parts = {}
        for name, dtype, quant in VARIANTS:
            parts[name] = Path(tmp) / name
            export_partition(bundle.weights_source, bundle.cfg, parts[name], dtype=dtype, fake_quant=quant)
        for case in cases:
            settings = {"steps": case.steps, "cfg_scale": case.cfg, "shift": case.shift, "seed": case.seed}
            latents = {name: run_partitioned(
                RunRequest(bundle, parts[name], "onnxruntime", case.prompt, settings,
                           text_embs=case_streams(bundle, case, golden_dir))).latent
                       for name, _, _ in VARIANTS}
            for label, a, b in (("fp16 vs fp32", "fp16", "fp32"), ("w8a8 vs fp16", "w8a8", "fp16")):
                q = compare_latents(latents[a], latents[b])
                rows.append((case.name, label, q))
                verdict = "pass" if q.passes(*mins) else "FAIL"
                m = q.margins(*mins)
                print(f"{bundle.cfg.name} {case.name:8s} {label}: 1-SSIM {1 - q.ssim:.3e}  PSNR {q.psnr:.2f} dB  "
                      f"1-cosine {1 - q.cosine:.3e}  (data range {q.data_range:.3f})  -> {verdict} "
                      f"(margins SSIM {m['ssim']:+.2e}, PSNR {m['psnr_db']:+.2f} dB, cosine {m['cosine']:+.2e})",
                      flush=True)
    for label in ("fp16 vs fp32", "w8a8 vs fp16"):
        sel = [q for _, lab, q in rows if lab == label]
        print(f"{label}: SSIM {min(q.ssim for q in sel):.6f}..{max(q.ssim for q in sel):.6f}, "
              f"PSNR {min(q.psnr for q in sel):.2f}..{max(q.psnr for q in sel):.2f} dB, "
              f"cosine {min(q.cosine for q in sel):.7f}..{max(q.cosine for q in sel):.7f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
