"""Write the Anima-shaped CI model's files: its random BF16 checkpoint (with a `net.` prefix and an
`llm_adapter.*` group) and the golden cases' text embeddings (run by hand when its model.toml changes).

    .venv/bin/python tools/make_anima_shaped.py        # models/anima-shaped + golden/anima-shaped text embeddings
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.model.config import ModelConfig, load_model_dir  # noqa: E402
from harness.model.random_checkpoint import write_random_checkpoint  # noqa: E402

TEXT_EMBS = ("cond_a.npy", "cond_b.npy", "uncond.npy")


def write_text_embs(cfg: ModelConfig, directory: Path, seed: int = 0) -> list[Path]:
    """Random text embeddings [text_emb_tokens, text_emb_dim] ~ N(0, 1) for the golden cases."""
    rng = np.random.default_rng(seed)
    paths = []
    for name in TEXT_EMBS:
        path = directory / name
        np.save(path, rng.standard_normal((cfg.text_emb_tokens, cfg.text_emb_dim)).astype(np.float32))
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / "models" / "anima-shaped")
    parser.add_argument("--golden-dir", type=Path, default=ROOT / "golden" / "anima-shaped")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = load_model_dir(args.model_dir)
    path = args.model_dir / cfg.files["weights"]
    write_random_checkpoint(cfg, path, "bfloat16", "net.", True, args.seed, adapter_layers=2)
    print(path)
    args.golden_dir.mkdir(parents=True, exist_ok=True)
    for path in write_text_embs(cfg, args.golden_dir, args.seed):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
