"""Measure where the quality gate's thresholds must sit (run by hand; docs/precision.md records the output).

Cases are prompts x seeds: every distinct prompt (or text-embedding file) and CFG scale of the model's
golden cases, each rendered from every seed of --seeds (12 or more cases per model). For each case the
final latent (and, with a decoder, the image) of FP32, FP16 and FP16 + FFN W8A8 partitions on
onnxruntime. FP16 vs FP32 stands in for the board's FP16 run against an FP16 golden made elsewhere
(rounding-level differences the gate must pass); W8A8 vs FP16 is the variant the gate must fail.

Per metric (1 - SSIM, 1 - cosine, and PSNR as the MSE it stands for: errors, smaller is better) the
separation is the ratio of the smallest W8A8 error to the largest FP16 error. A threshold at their
geometric mean leaves the same factor on each side; the primary metric is the one with the largest
factor. Prints one line per case and pair, then the table (cases, metric, FP16 range, W8A8 range,
threshold, margin each side); --json keeps every row.

    .venv/bin/python tools/measure_latent_gate.py --model-dir models/embedded --seeds 1,2,3,4
    .venv/bin/python tools/measure_latent_gate.py --model-dir models/anima-shaped --seeds 1,2,3,4,5,6
    .venv/bin/python tools/measure_latent_gate.py --model-dir models/embedded --sampler spectrum --seeds 1,...,12
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.sampling.reference_run import stream_text_embs  # noqa: E402
from harness.gates.cases import load_cases
from harness.model.bundle import check_text_emb, load_bundle  # noqa: E402
from harness.partition.onnx_export import export_partition  # noqa: E402
from harness.gates.quality import compare, compare_latents  # noqa: E402
from harness.runtime.run import run_partitioned, RunRequest  # noqa: E402
from harness.sampling.settings import SampleSettings  # noqa: E402

VARIANTS = (("float32", "float32", None), ("float16", "float16", None), ("w8a8", "float16", "w8a8-ffn"))
PAIRS = (("float16 vs float32", "float16", "float32"), ("w8a8 vs float16", "w8a8", "float16"))


def case_streams(bundle, case, golden_dir: Path) -> dict:
    if case.text_emb is None:
        return stream_text_embs(bundle, [case.prompt], case.cfg)
    streams = {"cond": check_text_emb(np.load(golden_dir / case.text_emb), bundle.cfg, case.text_emb)}
    if case.cfg != 1.0:
        streams["uncond"] = check_text_emb(np.load(golden_dir / case.uncond_text_emb), bundle.cfg,
                                           case.uncond_text_emb)
    return streams


def grid(cases, seeds: list[int], sampler: str = "flow-euler") -> list:
    """Every distinct (prompt or text embedding, CFG) of the golden cases of `sampler` x every seed (a
    Spectrum forecast carries FP16 differences further: its cases get thresholds of their own)."""
    prompts, seen = [], set()
    for case in cases:
        key = (case.prompt, case.text_emb, case.uncond_text_emb, case.cfg, case.steps)
        if case.sampler == sampler and key not in seen:
            seen.add(key)
            prompts.append(case)
    return [replace(c, name=f"{c.name}-s{seed}", seed=seed) for c in prompts for seed in seeds]


def errors(q, kind: str) -> dict:
    """The metrics as errors (smaller is better): 1 - SSIM, 1 - cosine, and the MSE over the data
    range squared that a PSNR stands for (10^(-PSNR/10))."""
    out = {f"{kind} 1-SSIM": 1.0 - q.ssim, f"{kind} MSE (PSNR)": 10.0 ** (-q.psnr / 10.0)}
    if q.cosine is not None:
        out[f"{kind} 1-cosine"] = 1.0 - q.cosine
    return out


def measure(bundle, cases, golden_dir: Path) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parts = {}
        for name, dtype, quant in VARIANTS:
            parts[name] = Path(tmp) / name
            export_partition(bundle.weights_source, bundle.cfg, parts[name], dtype=dtype, fake_quant=quant)
        for case in cases:
            settings = SampleSettings(steps=case.steps, cfg_scale=case.cfg, shift=case.shift, seed=case.seed,
                                      sampler=case.sampler, spectrum=case.spectrum)
            runs = {name: run_partitioned(RunRequest(bundle, parts[name], "onnxruntime", case.prompt, settings,
                                                     text_embs=case_streams(bundle, case, golden_dir)))
                    for name, _, _ in VARIANTS}
            for label, a, b in PAIRS:
                metrics = errors(compare_latents(runs[a].latent, runs[b].latent), "latent")
                if runs[a].image is not None:
                    metrics.update(errors(compare(runs[a].image, runs[b].image), "image"))
                rows.append({"case": case.name, "pair": label, **metrics})
                print(f"{bundle.cfg.name} {case.name:12s} {label}: "
                      + "  ".join(f"{k} {v:.3e}" for k, v in metrics.items()), flush=True)
    return rows


def separation(rows: list[dict]) -> list[dict]:
    """Per metric: FP16 and W8A8 ranges, the geometric-mean threshold and the factor each side."""
    table = []
    metrics = [k for k in rows[0] if k not in ("case", "pair")]
    for metric in metrics:
        float16 = [r[metric] for r in rows if r["pair"] == PAIRS[0][0]]
        w8a8 = [r[metric] for r in rows if r["pair"] == PAIRS[1][0]]
        worst_float16, best_w8a8 = max(float16), min(w8a8)
        threshold = math.sqrt(max(worst_float16, 1e-300) * best_w8a8)
        table.append({"metric": metric, "cases": len(float16), "float16": [min(float16), worst_float16],
                      "w8a8": [best_w8a8, max(w8a8)], "threshold": threshold,
                      "margin_float16": threshold / max(worst_float16, 1e-300), "margin_w8a8": best_w8a8 / threshold})
    return sorted(table, key=lambda t: -t["margin_float16"])


def as_gate_value(metric: str, error: float) -> str:
    """An error threshold as the gate states it: SSIM or cosine minimum, PSNR floor in dB."""
    if "PSNR" in metric:
        return f"psnr_min {-10.0 * math.log10(error):.2f} dB"
    name = "ssim_min" if "SSIM" in metric else "cosine_min"
    return f"{name} {1.0 - error:.9f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--golden-dir", type=Path)
    parser.add_argument("--seeds", default="1,2,3,4", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--sampler", default="flow-euler", choices=("flow-euler", "spectrum"),
                        help="which golden cases' prompts and settings (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="write every row and the table here")
    args = parser.parse_args(argv)
    bundle = load_bundle(args.model_dir)
    golden_dir = args.golden_dir or ROOT / "golden" / bundle.cfg.name
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    cases = grid(load_cases(golden_dir / "cases.toml"), seeds, args.sampler)
    rows = measure(bundle, cases, golden_dir)
    table = separation(rows)
    print(f"\n{bundle.cfg.name}: {len(cases)} cases (prompts x seeds {seeds}); errors, smaller is better")
    print(f"{'metric':22s} {'FP16 vs FP32':>21s} {'W8A8 vs FP16':>21s}  threshold (gate value)           margins")
    for t in table:
        print(f"{t['metric']:22s} {t['float16'][0]:.2e}..{t['float16'][1]:.2e}  {t['w8a8'][0]:.2e}..{t['w8a8'][1]:.2e}  "
              f"{t['threshold']:.2e} ({as_gate_value(t['metric'], t['threshold'])})  "
              f"x{t['margin_float16']:.2f} / x{t['margin_w8a8']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"model": bundle.cfg.name, "seeds": seeds, "rows": rows,
                                         "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
