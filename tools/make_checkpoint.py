"""Write a random-weight DiT checkpoint in the public Cosmos-Predict2 key layout (harness.model.random_checkpoint).

    .venv/bin/python tools/make_checkpoint.py --profile anima-2b --out /tmp/anima-random.safetensors \
        --prefix net. --llm-adapter
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.model.config import load_profile
from harness.model.random_checkpoint import DTYPE_TAGS, write_random_checkpoint


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="anima-2b", help="profile name or .toml (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="safetensors file to write")
    parser.add_argument("--precision", choices=sorted(DTYPE_TAGS), default="bfloat16",
                        help="the stored tensors' type (default: %(default)s)")
    parser.add_argument("--prefix", default="", help="prefix for every DiT key, e.g. 'net.'")
    parser.add_argument("--llm-adapter", action="store_true", help="add an llm_adapter.* group")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = load_profile(args.profile)
    size = write_random_checkpoint(cfg, args.out, args.precision, args.prefix, args.llm_adapter, args.seed)
    print(f"{args.out}: {cfg.name} {args.precision}, {size / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
