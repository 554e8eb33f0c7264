"""The headroom gate's stated limit comes from model.toml and is checked; intermediates a probe adds
are the graph's own tensors, the host's probe computes them bitwise as the whole graph does; a peak is
per stream, and an inf or NaN anywhere in a stream is headroom 0."""
import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from harness.backends.onnxruntime import session_options
from harness.core.errors import ConfigError
from harness.gates.headroom import (
    DEFAULT_MIN_HEADROOM,
    HeadroomObserver,
    headroom_failures,
    min_headroom_of,
    probe_model,
    pruned_probe_model,
)
from harness.model.config import EMBEDDED_DIR, load_model_dir
from harness.partition.manifest import load_manifest
from harness.runtime.pipeline import Invocation


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


@pytest.mark.parametrize("name, tensors", [("00_block00_self_attn", ("attn/qk", "attn/scores")),
                                           ("01_block00_cross_attn", ("attn/qk", "attn/scores")),
                                           ("02_block00_ffn", ("layer1", "gelu"))])
def test_pruned_probe_computes_the_whole_graphs_tensors(embedded_fp32, name, tensors):
    _, partition = embedded_fp32
    onnx_file = partition / f"{name}.onnx"
    whole, pruned = probe_model(onnx_file, tensors), pruned_probe_model(onnx_file, tensors)
    graph = onnx.load_from_string(pruned).graph
    assert [o.name for o in graph.output] == list(tensors)
    assert len(graph.node) < len(onnx.load_from_string(whole).graph.node)     # the tail after them is cut
    sessions = [ort.InferenceSession(m, sess_options=session_options(1), providers=["CPUExecutionProvider"])
                for m in (whole, pruned)]
    rng = np.random.default_rng(3)
    feed = {i.name: rng.standard_normal(i.shape).astype(np.float32) * 4 for i in sessions[0].get_inputs()}
    assert [i.name for i in sessions[1].get_inputs()] == list(feed)      # fed as the subgraph is
    for a, b in zip(sessions[0].run(None, feed)[1:], sessions[1].run(None, feed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_peaks_are_per_stream_and_a_non_finite_value_is_headroom_zero(embedded_fp32):
    _, partition = embedded_fp32
    entry = next(e for e in load_manifest(partition).subgraphs if e.branch == "ffn")
    x = np.zeros(entry.inputs[0].shape, np.float16)
    observer = HeadroomObserver(None)
    for step, (cond, uncond) in enumerate(((-300.0, 2.0), (100.0, np.nan))):
        x[0].flat[5], x[1].flat[-1] = cond, uncond
        y = np.zeros(x.shape, np.float32)
        y[0].flat[0] = -4096.0 * (step + 1)
        observer(Invocation(entry, step, 1.0, ("cond", "uncond"), (x.copy(),), y))
    [sub] = observer.summary()
    assert sub["tensors"]["x"] == {"tensor": "x", "peak": "inf", "step": 1, "stream": "uncond", "headroom": 0.0}
    assert sub["tensors"]["y"]["peak"] == 8192.0 and sub["tensors"]["y"]["stream"] == "cond"
    assert (sub["tensor"], sub["headroom"]) == ("x", 0.0)


def test_a_tensor_not_held_in_float16_is_recorded_not_judged(embedded_fp32):
    _, partition = embedded_fp32
    entry = next(e for e in load_manifest(partition).subgraphs if e.branch == "ffn")
    x = np.full(entry.inputs[0].shape, 2.0, np.float32)
    y = np.full(entry.outputs[0].shape, 1e6, np.float32)          # far past 65504
    invocation = Invocation(entry, 3, 1.0, ("cond", "uncond"), (x,), y)
    held = HeadroomObserver(None, held={entry.index: {"y": "FP32 on the host (split)"}})
    held(invocation)
    [sub] = held.summary()
    assert (sub["tensor"], sub["headroom"]) == ("x", 65504 / 2.0)
    assert sub["tensors"]["y"]["held"] == "FP32 on the host (split)" and sub["tensors"]["y"]["peak"] == 1e6
    assert headroom_failures(held.report_section()["headroom"]) == []
    quantized = HeadroomObserver(None, held={entry.index: {"*": "w16a16i (calibrated range)"}})
    quantized(invocation)
    assert quantized.summary()[0]["headroom"] is None
    assert headroom_failures(quantized.report_section()["headroom"]) == []
    plain = HeadroomObserver(None)
    plain(invocation)
    [line] = headroom_failures(plain.report_section()["headroom"])
    assert "tensor y peaked at 1e+06 at step 3, stream cond" in line
