"""Builders shared by tests: model directories with random weights in the real file layout."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from harness.model.config import EMBEDDED_DIR, load_model_dir
from harness.model.embedded import PROMPT_KEYS
from harness.model.weights import random_weights, save_weights

__all__ = ["make_random_model_dir", "random_bundle", "export_fp32", "missing_tool"]


def missing_tool(reason: str) -> NoReturn:
    """Skip a test whose tool (a toolkit environment, a browser) is missing here. Under CI=true it
    fails instead: CI's set-up (bin/test) installs every tool, so a missing one is a broken set-up."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the set-up must provide it)", pytrace=False)
    pytest.skip(reason)


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
