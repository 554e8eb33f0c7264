"""The full-size path at full width on one block (CI's stand-in for the by-hand full-size benchmark,
tools/bench_full_size.py): an anima-2b-width BF16 checkpoint with a `net.` prefix and an
`llm_adapter.*` group, inspected, exported block by block to FP16, and generated from a
text-embedding file on onnxruntime; the latent agrees with the FP32 reference."""
import json

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.config import PROFILES_DIR, load_model_dir
from harness.model.random_checkpoint import write_random_checkpoint

pytestmark = pytest.mark.slow


def test_full_width_block_from_bf16_checkpoint_to_latent(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")        # one line per fact, however long the worker's tmp path
    model = tmp_path / "model"
    model.mkdir()
    text = (PROFILES_DIR / "anima-2b.toml").read_text()
    for old, new in (("blocks = 28", "blocks = 1"), ("latent_size = [64, 64]", "latent_size = [8, 8]"),
                     ("text_emb_tokens = 512", "text_emb_tokens = 8"),
                     ('name = "anima-2b"', 'name = "anima-2b-1block"')):
        assert old in text
        text = text.replace(old, new)
    (model / "model.toml").write_text('weights = "dit.safetensors"\n' + text)
    cfg = load_model_dir(model)
    assert (cfg.width, cfg.ffn_hidden, cfg.text_emb_dim, cfg.in_channels) == (2048, 8192, 1024, 17)
    write_random_checkpoint(cfg, model / "dit.safetensors", "bfloat16", prefix="net.", llm_adapter=True, seed=5)

    assert main(["inspect-checkpoint", str(model / "dit.safetensors"), "--profile", str(model / "model.toml")]) == 0
    out = capsys.readouterr().out
    assert "key prefix 'net.' stripped" in out and "llm_adapter" in out and "(BF16 27)" in out

    assert main(["export", "--model-dir", str(model), "--precision", "float16", "--out", str(tmp_path / "p"),
                 "--quiet"]) == 0
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert [s["branch"] for s in manifest["subgraphs"]] == ["self_attn", "cross_attn", "ffn"]
    assert manifest["decoder"] is None

    emb = tmp_path / "cond.npy"
    np.save(emb, np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32))
    common = ["--model-dir", str(model), "--steps", "2", "--cfg", "1", "--text-emb", str(emb), "--quiet"]
    assert main(["generate", *common, "--backend", "onnxruntime", "--partition", str(tmp_path / "p"),
                 "--out", str(tmp_path / "npu.png")]) == 0
    assert main(["generate", *common, "--backend", "reference", "--out", str(tmp_path / "ref.png")]) == 0
    npu, ref = np.load(tmp_path / "npu.latent.npy"), np.load(tmp_path / "ref.latent.npy")
    assert npu.shape == (16, 8, 8) and np.isfinite(npu).all()
    cosine = float(np.dot(npu.ravel(), ref.ravel()) / (np.linalg.norm(npu) * np.linalg.norm(ref)))
    print(f"full width, one block, FP16 subgraphs vs FP32 reference: cosine {cosine:.7f}, "
          f"max abs {np.abs(npu - ref).max():.3g}")
    assert cosine > 0.9999
    report = json.loads((tmp_path / "npu.json").read_text())
    assert report["invocations"] == 3 * 2 and report["streams_padded_to"] == 2
