"""Attention at the full model's per-head plane (1,024 tokens x head_dim 128) converts with every op on
the NPU of rknn-toolkit2, and its simulator output matches onnxruntime FP32.

The width-64 embedded model cannot show this: its planes are 64 tokens x 16. What fails at full width
is a [S, H, d, N] tensor the toolkit lays out around its fused attention: a d*N plane of 131,072
elements overflows the NPU's 65,536-element surface and the op runs on the CPU. Two heads of 128 at
1,024 tokens reproduce it in seconds (one head does not: the toolkit folds a single-head transpose
into a reshape); the width, the FFN and the text tokens are cut down because they play no part.
"""
from __future__ import annotations

import dataclasses

import pytest

from harness.model.config import load_profile
from harness.model.weights import random_weights
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.report.toolkit import cosine_rows
from harness.toolkit.convert import ConvertSettings, convert_partition

_SURFACE = 65_536       # elements of one NPU surface plane (the toolkit's "align_surf overflow")


@pytest.fixture(scope="module")
def narrow_anima(tmp_path_factory):
    """Block 0 of anima-2b narrowed to two heads: full tokens and head_dim, FP32 export."""
    cfg = dataclasses.replace(load_profile("anima-2b"), blocks=1, width=256, heads=2, text_emb_tokens=8,
                              text_emb_dim=32, adaln_lora_rank=16)
    assert cfg.tokens == 1024 and cfg.head_dim == 128 and cfg.tokens * cfg.head_dim > _SURFACE
    out = tmp_path_factory.mktemp("narrow") / "fp32"
    export_partition(random_weights(cfg, seed=0), cfg, out, ExportSettings(precision="float32"))
    return out


@pytest.mark.toolkit
def test_full_size_attention_plane_converts_with_every_op_on_the_npu(narrow_anima, tmp_path, toolkit_version):
    result = convert_partition(narrow_anima, tmp_path / "rknn",
                               ConvertSettings(version=toolkit_version, allow_cpu_ops=True, samples=1, quiet=True))
    on_cpu = {stem: [f"{op['op']} '{op['name']}'" for op in ops] for stem, ops in result.cpu_ops.items() if ops}
    assert on_cpu == {}, f"ops left on the CPU by rknn-toolkit2 {toolkit_version}: {on_cpu}"
    rows = cosine_rows(result, narrow_anima)
    assert len(rows) == 3 and all(r["shapes_match"] for r in rows), rows
    worst = min(rows, key=lambda r: r["cosine"])
    assert worst["cosine"] >= 0.9999, worst
