"""The headroom gate's stated limit comes from model.toml and is checked; intermediates a probe adds
are the graph's own tensors."""
import dataclasses

import pytest

from harness.core.errors import ConfigError
from harness.gates.headroom import DEFAULT_MIN_HEADROOM, min_headroom_of, probe_model
from harness.model.config import EMBEDDED_DIR, load_model_dir


def test_stated_headroom_from_model_toml():
    cfg = load_model_dir(EMBEDDED_DIR)
    assert min_headroom_of(cfg) == DEFAULT_MIN_HEADROOM
    assert min_headroom_of(dataclasses.replace(cfg, raw_gates={"float16_headroom_min": 16})) == 16.0
    for bad in ("8x", 0.5, True):
        with pytest.raises(ConfigError, match=r"model.toml: \[gates\] float16_headroom_min = .*: a number >= 1"):
            min_headroom_of(dataclasses.replace(cfg, raw_gates={"float16_headroom_min": bad}))


def test_probe_names_a_missing_tensor(embedded_fp32):
    _, partition = embedded_fp32
    onnx_file = partition / "02_block00_ffn.onnx"
    assert probe_model(onnx_file, ["layer1", "gelu"])
    with pytest.raises(ConfigError, match=f"headroom probe: {onnx_file} has no tensor 'attn/qk'"):
        probe_model(onnx_file, ["attn/qk"])
