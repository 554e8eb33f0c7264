"""Render the embedded model's sample grid and measure prompt accuracy (README figure).

    .venv/bin/python tools/sample_grid.py [--per-digit 10] [--cfg 4] [--out docs/sample-grid.png]

Each row is one digit prompted as "a handwritten digit <word>", seeds 0..per_digit-1; the title gives
the share of samples an SVC trained on the real digits reads as the prompted digit
(harness.sampling.prompt_accuracy).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.model.embedded import DIGIT_WORDS
from harness.sampling.prompt_accuracy import grade, prompted_latents


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR)
    ap.add_argument("--per-digit", type=int, default=10)
    ap.add_argument("--cfg", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("docs/sample-grid.png"))
    args = ap.parse_args(argv)
    bundle = load_bundle(args.model_dir)
    start = time.perf_counter()
    latents, labels = prompted_latents(bundle, args.per_digit, args.cfg, args.steps)
    acc, _ = grade(latents, labels)
    seconds = time.perf_counter() - start
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(10, args.per_digit, figsize=(args.per_digit * 0.8, 8.4), squeeze=False)
    for d in range(10):
        for s in range(args.per_digit):
            ax = axes[d, s]
            ax.imshow(bundle.decode(latents[d * args.per_digit + s]))
            ax.set_xticks([]), ax.set_yticks([])
            if s == 0:
                ax.set_ylabel(DIGIT_WORDS[d], rotation=0, ha="right", va="center")
    fig.suptitle(f"embedded model, CFG {args.cfg:g}, {args.steps} steps: classifier agrees on {acc:.0%}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(f"{args.out}: {len(latents)} samples, CFG {args.cfg:g}, prompt accuracy {acc:.1%}, "
          f"{seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
