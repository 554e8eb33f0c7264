"""Builders shared by tests: model directories with random weights in the real file layout."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from harness.config import EMBEDDED_DIR, load_model_dir
from harness.model.embedded import PROMPT_KEYS
from harness.weights import random_weights, save_weights

__all__ = ["make_random_model_dir", "random_bundle", "export_fp32", "small_tmpfs"]


def make_random_model_dir(target: Path, seed: int = 0) -> Path:
    """A copy of the embedded model's model.toml with random DiT and prompt-encoder weights."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(EMBEDDED_DIR / "model.toml", target / "model.toml")
    cfg = load_model_dir(target)
    save_weights(random_weights(cfg, seed=seed), target / cfg.files["weights"])
    rng = np.random.default_rng(seed + 1)
    vocab = len(cfg.prompt["vocab"])
    save_weights({
        PROMPT_KEYS[0]: rng.standard_normal((vocab, cfg.context_dim)).astype(np.float32),
        PROMPT_KEYS[1]: rng.standard_normal((cfg.context_tokens, cfg.context_dim)).astype(np.float32),
    }, target / cfg.files["prompt_encoder"])
    return target



def random_bundle(tmp_path_factory, seed: int):
    """A loaded random-weight model in a fresh temporary directory (one per test module)."""
    from harness.model.bundle import load_bundle
    return load_bundle(make_random_model_dir(tmp_path_factory.mktemp("model"), seed=seed))


def export_fp32(bundle, tmp_path_factory) -> Path:
    """The bundle's partition exported in FP32 to a fresh temporary directory."""
    from harness.partition.onnx_export import export_partition
    out = tmp_path_factory.mktemp("partition") / "fp32"
    export_partition(bundle.weights, bundle.cfg, out, dtype="float32")
    return out


@contextlib.contextmanager
def small_tmpfs(mount: Path, size: str):
    """A tmpfs of `size` (e.g. "600k") mounted at `mount` for the block, to fill a disk for real.
    Needs root; elsewhere the test skips, and with CI=true fails, saying so."""
    import pytest
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        why = f"cannot mount a {size} tmpfs at {mount} (needs root): {done.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)
