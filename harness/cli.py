"""`python -m harness <command>`: generate, export, inspect, trend.

Expected failures (HarnessError) print one line naming the culprit and exit non-zero without a
traceback; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import EMBEDDED_DIR
from .errors import ConfigError, HarnessError

__all__ = ["main", "build_parser"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _cfg_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not (0.0 <= value <= 30.0):
        raise argparse.ArgumentTypeError(f"must be within 0..30, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if not 0 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"must be within 0..2^63-1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness",
                                     description="Anima DiT NPU acceptance harness")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = sub.add_parser("generate", help="render a prompt to a PNG (default: the embedded model)")
    gen.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                     help="model directory with model.toml (default: models/embedded)")
    gen.add_argument("--prompt", help="text prompt (default: the model's default prompt)")
    gen.add_argument("--seed", type=_seed, help="initial-noise seed (default: the model's)")
    gen.add_argument("--steps", type=_positive_int, help="sampler steps (default: the model's)")
    gen.add_argument("--cfg", type=_cfg_scale, dest="cfg_scale", help="CFG scale (default: the model's)")
    gen.add_argument("--out", type=Path, default=Path("out/generate.png"), help="PNG path (default: %(default)s)")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=_cmd_generate)
    return parser


def _cmd_generate(args) -> int:
    from .model.bundle import load_bundle
    from .generate import sample_settings, sample_reference
    from .imageio import save_png
    from .report import progress_bar

    bundle = load_bundle(args.model_dir)
    prompt = args.prompt if args.prompt is not None else bundle.cfg.prompt.get("default", "")
    s = sample_settings(bundle, args.steps, args.cfg_scale, None, args.seed)
    if args.out.suffix.lower() != ".png":
        raise ConfigError(f"--out {args.out}: the image is written as PNG; use a .png path")
    with progress_bar(s["steps"], "denoising", disable=args.quiet) as advance:
        latents = sample_reference(bundle, [prompt], [s["seed"]], s["steps"], s["cfg_scale"],
                                   s["shift"], on_step=lambda i: advance())
    save_png(bundle.decode(latents[0]), args.out)
    print(f"{args.out}  prompt='{prompt}' seed={s['seed']} steps={s['steps']} cfg={s['cfg_scale']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
