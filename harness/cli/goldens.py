"""`bin/harness goldens thresholds`: a model's quality-gate thresholds from its own cases, written into
its cases.toml with their margins (the derivation itself: harness.gates.thresholds).

    goldens thresholds --model-dir DIR [--golden-dir G] [--seeds 1,2,3,4,5] [--sampler flow-euler]

Exits 1, writing nothing, when FP16 and W8A8 errors overlap on a metric the gate judges.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import ConfigError
from ..model.config import EMBEDDED_DIR
from ..sampling.spectrum import SAMPLERS

__all__ = ["add_command"]


def add_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("goldens", help="the golden cases of a model: their quality thresholds")
    sub = parser.add_subparsers(dest="goldens_command", required=True)
    thr = sub.add_parser("thresholds", help="measure FP16 vs FP32 and W8A8 vs FP16 over N cases and write the "
                                            "quality thresholds, with their margins, into cases.toml")
    thr.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR, help="model directory (default: models/embedded)")
    thr.add_argument("--golden-dir", type=Path, help="golden directory with cases.toml (default: golden/<model name>)")
    thr.add_argument("--seeds", default="1,2,3,4,5",
                     help="comma-separated seeds, each rendering every distinct prompt (default: %(default)s)")
    thr.add_argument("--sampler", default="flow-euler", choices=tuple(SAMPLERS),
                     help="which golden cases' prompts, settings and thresholds (default: %(default)s)")
    thr.add_argument("--dry-run", action="store_true", help="measure and print; leave cases.toml as it is")
    thr.set_defaults(func=_cmd_thresholds)
    return parser


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: expected comma-separated whole numbers, e.g. 1,2,3,4,5") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds {text!r}: expected distinct whole numbers >= 0")
    return seeds


def _cmd_thresholds(args) -> int:
    from ..gates.cases import golden_dir_for, load_cases
    from ..gates.thresholds import (
        GATED,
        NoSeparation,
        bar_lines,
        bars,
        case_lines,
        measure,
        threshold_cases,
        write_bars,
    )
    from ..model.bundle import load_bundle
    seeds = parse_seeds(args.seeds)
    bundle = load_bundle(args.model_dir)
    golden_dir = args.golden_dir or golden_dir_for(bundle.cfg.name)
    path = golden_dir / "cases.toml"
    cases = threshold_cases(load_cases(path, thresholds=False), seeds, args.sampler)
    print(f"{bundle.cfg.name}: {len(cases)} cases ({args.sampler}, seeds {args.seeds}), FP32, FP16 and FFN W8A8 "
          f"on onnxruntime; errors, smaller is better", flush=True)
    rows = measure(bundle, cases, golden_dir, on_row=lambda row: print(case_lines(row), flush=True))
    kind = "image" if any(k == "image" for k, _ in rows[0]["errors"]) else "latent"    # as the gate judges
    table = bars(rows, kind)
    print()
    for line in bar_lines(table):
        print(line)
    gated = sorted((b for b in table if b.gated), key=lambda b: GATED[kind].index(b.metric))
    overlap = [b for b in gated if not b.separates]
    if overlap:
        raise NoSeparation(f"{path}: not written: FP16 and W8A8 errors do not separate on "
                           + ", ".join(f"{b.kind} {b.metric} (x{b.margin_float16:.2f} / x{b.margin_w8a8:.2f})"
                                       for b in overlap))
    if args.dry_run:
        print(f"--dry-run: {path} left as it is")
        return 0
    where = write_bars(path, args.sampler, gated, seeds)
    print(f"wrote {', '.join(b.key for b in gated)} ({kind}) into {path}: {', '.join(where)}")
    return 0
