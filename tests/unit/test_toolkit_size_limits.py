"""The toolkit's size limits, triggered for real by the smallest partitions that reach them (one block
of the Anima-shaped model, width 64): `convert` fails with one line naming the subgraph, the op, the
dimension and the limit, and leaves no partition behind.

- 8200 text tokens: the cross-attention's Transpose of the text embedding has a dimension over
  rknn-toolkit2 2.5.0's channel limit of 8192 and moves to the CPU (the attention Transposes' own
  "height * width <= 8192" limit, which the full-size model reached at 1,024 tokens x 16 heads before
  the export went head-major, is read from a captured log in test_toolkit_layers.py).

The register-field limit (13 bits, 0x1fff = 8191) is judged from captured logs of a real conversion
(test_toolkit_layers.py): the head-major attention no longer reaches it at 16384 text tokens, and at
65536 the toolkit itself aborts (docs/granularity.md).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from harness.model.config import REPO_ROOT, load_model_dir
from harness.model.random_checkpoint import write_random_checkpoint
from harness.partition.onnx_export import ExportSettings, export_partition

pytestmark = pytest.mark.toolkit


def _partition(root: Path, edits: dict) -> Path:
    """One block of the Anima-shaped model with `edits` to its model.toml, exported in FP32."""
    model = root / "model"
    model.mkdir()
    text = (REPO_ROOT / "models" / "anima-shaped" / "model.toml").read_text()
    for old, new in {"blocks = 4": "blocks = 1", **edits}.items():
        assert old in text
        text = text.replace(old, new)
    (model / "model.toml").write_text(text)
    cfg = load_model_dir(model)
    write_random_checkpoint(cfg, model / "dit.safetensors", "bfloat16", prefix="net.", seed=5)
    export_partition(model / "dit.safetensors", cfg, root / "fp32", ExportSettings(precision="float32"))
    return root / "fp32"


def test_a_transpose_over_the_channel_limit_is_named(tmp_path, toolkit_version, capsys):
    source = _partition(tmp_path, {"text_emb_tokens = 16": "text_emb_tokens = 8200"})
    out = tmp_path / "rknn"
    assert main(["convert", str(source), "--out", str(out), "--toolkit", toolkit_version, "--quiet"]) != 0
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: CPU fallback: subgraph 1 (block 0 cross_attn) (01_block00_cross_attn.rknn): "
                           "op Transpose "), line
    limit = "dimension 8200 of (2,8200,1,32) over the toolkit's channel limit 8192"
    assert limit in line, line
    assert not out.exists() and (tmp_path / "rknn.failed.log").is_file()
    # kept with --allow-cpu-ops, the summary still says each op and why
    assert main(["convert", str(source), "--out", str(out), "--toolkit", toolkit_version, "--quiet",
                 "--allow-cpu-ops"]) == 0
    said = capsys.readouterr().out
    assert "subgraph 1 (block 0 cross_attn): op Transpose " in said and limit in said, said
