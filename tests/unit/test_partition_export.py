"""ONNX export of the subgraph bodies and decoder, run in real onnxruntime against the numpy reference."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from harness.core.errors import ConfigError, WeightsError
from harness.model import reference
from harness.model.config import BRANCHES, EMBEDDED_DIR, load_model_dir, load_profile
from harness.model.embedded import decode
from harness.model.weights import random_weights
from harness.partition import (
    ExportSettings,
    build_decoder,
    build_subgraph,
    export_partition,
    float16_missing_kernels,
    load_manifest,
)

EXPORTED_BLOCKS = (0, 1)


def session(model, optimized_to: Path | None = None, disable_opt: bool = False) -> ort.InferenceSession:
    # One thread and no spinning: the default settings run chains of small graphs 11-50x slower.
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if disable_opt:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if optimized_to is not None:
        opts.optimized_model_filepath = str(optimized_to)
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def branch_inputs(cfg, streams: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((streams, cfg.tokens, cfg.width), dtype=np.float32)
    text_emb = rng.standard_normal((streams, cfg.text_emb_tokens, cfg.text_emb_dim), dtype=np.float32)
    return x, text_emb


def run_branch(sess, branch: str, x, text_emb, dtype=np.float32) -> np.ndarray:
    feed = {"x": x.astype(dtype)}
    if branch == "cross_attn":
        feed["text_emb"] = text_emb.astype(dtype)
    return sess.run(["y"], feed)[0]


def rel_err(out, ref) -> float:
    return float(np.max(np.abs(out.astype(np.float32) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.fixture(scope="module")
def embedded():
    cfg = load_model_dir(EMBEDDED_DIR)
    return cfg, random_weights(cfg, seed=3)


@pytest.fixture(scope="module")
def partitions(embedded, tmp_path_factory):
    cfg, w = embedded
    root = tmp_path_factory.mktemp("partitions")
    return {dtype: export_partition(w, cfg, root / dtype, ExportSettings(precision=dtype, blocks=EXPORTED_BLOCKS))
            for dtype in ("float32", "float16")}


@pytest.mark.parametrize("block", EXPORTED_BLOCKS)
@pytest.mark.parametrize("branch", BRANCHES)
def test_fp32_subgraph_matches_reference(partitions, embedded, block, branch):
    cfg, w = embedded
    manifest = partitions["float32"]
    x, text_emb = branch_inputs(cfg, streams=2, seed=block)
    out = run_branch(session(manifest.path_of(manifest.entry(block, branch))), branch, x, text_emb)
    ref = reference.branch_body(w, cfg, block, branch, x, text_emb, reference.make_rope(cfg))
    assert out.shape == ref.shape == (2, cfg.tokens, cfg.width)
    assert rel_err(out, ref) <= 1e-5


def test_streams_are_independent(partitions, embedded):
    """Each CFG stream must come out as if run alone: nothing may mix across the batch axis."""
    cfg, w = embedded
    x, text_emb = branch_inputs(cfg, streams=2)
    entry = partitions["float32"].entry(0, "self_attn")
    both = run_branch(session(partitions["float32"].path_of(entry)), "self_attn", x, text_emb)
    swapped = run_branch(session(partitions["float32"].path_of(entry)), "self_attn", x[::-1], text_emb)
    np.testing.assert_array_equal(both[::-1], swapped)


@pytest.mark.parametrize("branch", BRANCHES)
def test_float16_subgraph_runs_and_is_close(partitions, embedded, branch, record_property):
    cfg, w = embedded
    manifest = partitions["float16"]
    x, text_emb = branch_inputs(cfg, streams=2)
    entry = manifest.entry(0, branch)
    assert {s.dtype for s in entry.inputs + entry.outputs} == {"float16"}
    out = run_branch(session(manifest.path_of(entry)), branch, x, text_emb, np.float16)
    assert out.dtype == np.float16
    err = rel_err(out, reference.branch_body(w, cfg, 0, branch, x, text_emb, reference.make_rope(cfg)))
    record_property(f"float16_rel_err_{branch}", err)
    print(f"float16 {branch}: max abs err / scale = {err:.2e}")
    # float16 has an 11-bit significand: per-op rounding lands near 1e-3, far from an op-level bug.
    assert 1e-6 < err < 5e-3


@pytest.mark.parametrize("branch", BRANCHES)
def test_float16_weights_are_float16_and_islands_are_honest(partitions, branch, tmp_path):
    """The manifest's fp32_islands are exactly the nodes onnxruntime would otherwise have to cast."""
    manifest = partitions["float16"]
    path = manifest.path_of(manifest.entry(0, branch))
    model = onnx.load(str(path))
    big = [t for t in model.graph.initializer if len(t.dims) == 2]
    assert big and all(t.data_type == onnx.TensorProto.FLOAT16 for t in big)
    islands = manifest.export["fp32_islands"][branch]
    wrapped = [n.name for n in model.graph.node if n.op_type in float16_missing_kernels(17)]
    assert islands == wrapped
    # onnxruntime inserts Casts for any float16 node lacking a kernel: it must find none left to wrap.
    session(path, optimized_to=tmp_path / "session.onnx", disable_opt=True)
    seen = Counter(n.op_type for n in onnx.load(str(tmp_path / "session.onnx")).graph.node)
    assert seen["Cast"] == Counter(n.op_type for n in model.graph.node)["Cast"]


def test_fp32_export_has_no_islands_or_casts(partitions):
    manifest = partitions["float32"]
    assert manifest.export["fp32_islands"] == {}
    for entry in manifest.subgraphs:
        ops = {n.op_type for n in onnx.load(str(manifest.path_of(entry))).graph.node}
        assert "Cast" not in ops


def test_graphs_are_valid_and_converter_friendly(partitions):
    manifest = partitions["float32"]
    for entry in manifest.entries():
        model = onnx.load(str(manifest.path_of(entry)))
        onnx.checker.check_model(model, full_check=True)
        assert [o.version for o in model.opset_import] == [17]
        assert model.ir_version == 8
        ops = {n.op_type for n in model.graph.node}
        assert not ops & {"Gelu", "RMSNormalization", "LayerNormalization", "Attention"}
    ffn = onnx.load(str(manifest.path_of(manifest.entry(0, "ffn"))))
    assert {"Erf", "MatMul"} <= {n.op_type for n in ffn.graph.node}


def test_toolkit_friendly_constants_and_gelu(partitions):
    # rknn-toolkit2 (docs/architecture.md section 8): Clip bounds must be rank 0, and GELU fuses into one
    # NPU op only when written constant-second; constant-first leaves Erf on the CPU.
    manifest = partitions["float32"]
    decoder = onnx.load(str(manifest.path_of(manifest.decoder)))
    inits = {i.name: i for i in decoder.graph.initializer}
    clip = next(n for n in decoder.graph.node if n.op_type == "Clip")
    assert [list(inits[name].dims) for name in clip.input[1:]] == [[], []]
    ffn = onnx.load(str(manifest.path_of(manifest.entry(0, "ffn"))))
    consts = {i.name for i in ffn.graph.initializer}
    node = {n.name: n for n in ffn.graph.node}
    for name in ("gelu/one_plus_erf", "gelu/half_x"):
        first, second = node[name].input
        assert first not in consts and second in consts, f"{name}: constant must come second"


def test_decoder_matches_numpy_decode(partitions, embedded):
    cfg, _ = embedded
    manifest = partitions["float32"]
    assert manifest.decoder is not None and manifest.decoder.file == "decoder.onnx"
    rng = np.random.default_rng(5)
    latent = rng.uniform(-1.3, 1.3, (1, 1, *cfg.latent_size)).astype(np.float32)   # exercises the clip
    image = session(manifest.path_of(manifest.decoder)).run(["image"], {"latent": latent})[0]
    d = cfg.decoder
    ref = decode(latent[0], d["scale"], d["background"], d["foreground"])
    # [1, H, W, 3]: the batch axis keeps every decoder op on the NPU (the pipeline drops it).
    assert image.shape == (1, *ref.shape)
    assert ref.shape == (cfg.latent_size[0] * d["scale"], cfg.latent_size[1] * d["scale"], 3)
    assert image.dtype == np.float32
    assert np.max(np.abs(image[0] - ref)) <= 1e-6


def test_decoder_refused_for_multichannel_latent():
    with pytest.raises(ConfigError, match="cosmos-tiny"):
        build_decoder(load_profile("cosmos-tiny"))


def test_export_writes_every_subgraph_in_order(tmp_path):
    cfg = load_profile("cosmos-tiny")
    manifest = export_partition(random_weights(cfg), cfg, tmp_path, ExportSettings(streams=1))
    assert [(e.block, e.branch) for e in manifest.subgraphs] == [(b, br) for b in range(2) for br in BRANCHES]
    assert [e.index for e in manifest.subgraphs] == list(range(6))
    assert manifest.decoder is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([e.file for e in manifest.subgraphs]
                                                                + ["manifest.json"])
    assert manifest.subgraphs[1].inputs[1].shape == (1, cfg.text_emb_tokens, cfg.text_emb_dim)
    load_manifest(tmp_path).verify()


@pytest.mark.parametrize("opset", [18, 19])
def test_newer_opsets_up_to_19_match(embedded, opset):
    cfg, w = embedded
    x, text_emb = branch_inputs(cfg, streams=2)
    model = build_subgraph(w, cfg, 0, "self_attn", opset=opset)
    assert model.opset_import[0].version == opset
    ref = reference.self_attn_body(w, cfg, 0, x, reference.make_rope(cfg))
    assert rel_err(run_branch(session(model), "self_attn", x, text_emb), ref) <= 1e-5


@pytest.mark.parametrize("opset", [20, 21, 12])
def test_opset_outside_converter_range_refused(embedded, opset, tmp_path):
    cfg, w = embedded
    with pytest.raises(ConfigError, match=f"opset {opset}"):
        build_subgraph(w, cfg, 0, "ffn", opset=opset)
    with pytest.raises(ConfigError, match=f"opset {opset}"):
        export_partition(w, cfg, tmp_path, ExportSettings(opset=opset, blocks=[0]))
    assert not any(tmp_path.iterdir())


def test_bad_arguments_name_the_culprit(embedded, tmp_path):
    cfg, w = embedded
    with pytest.raises(ConfigError, match="block 28"):
        build_subgraph(w, cfg, 28, "ffn")
    with pytest.raises(ConfigError, match="branch 'mlp'"):
        build_subgraph(w, cfg, 0, "mlp")
    with pytest.raises(ConfigError, match="bfloat16"):
        build_subgraph(w, cfg, 0, "ffn", dtype="bfloat16")
    with pytest.raises(ConfigError, match="streams"):
        build_subgraph(w, cfg, 0, "ffn", streams=0)
    partial = {k: v for k, v in w.items() if k != "blocks.0.mlp.layer2.weight"}
    with pytest.raises(WeightsError, match="blocks.0.mlp.layer2.weight"):
        build_subgraph(partial, cfg, 0, "ffn")
    huge = dict(w, **{"blocks.0.mlp.layer1.weight": w["blocks.0.mlp.layer1.weight"] * 1e6})
    with pytest.raises(WeightsError, match="blocks.0.mlp.layer1.weight.*float16"):
        build_subgraph(huge, cfg, 0, "ffn", dtype="float16")


# Ops that only move data: onnxruntime's CPU provider has float16 kernels for them, so the probe
# need not check them. Any other op the export emits must be in COMPUTE_OPS, or it escapes the probe.
_DATA_MOVEMENT = {"Cast", "Concat", "Reshape", "Slice", "Transpose"}


def test_float16_kernel_probe_covers_every_op_the_export_uses(embedded):
    """A data-movement op has a float16 kernel everywhere; the probe must not call it missing, and
    every compute op in a float16 export (fake-quant FFN included) must be one the probe checks."""
    from harness.partition.graph import COMPUTE_OPS, lacks_float16_kernel
    cfg, w = embedded
    assert lacks_float16_kernel("Transpose", 17) is False
    models = [build_subgraph(w, cfg, 0, branch, "float16") for branch in BRANCHES]
    models.append(build_subgraph(w, cfg, 0, "ffn", "float16", 2, 17, fake_quant="w8a8-ffn"))
    used = {n.op_type for m in models for n in m.graph.node}
    unprobed = used - set(COMPUTE_OPS) - _DATA_MOVEMENT
    assert not unprobed, f"the float16 export uses {sorted(unprobed)}, which float16_missing_kernels never probes"
    print(f"onnxruntime {ort.__version__} CPU lacks float16 kernels for: {sorted(float16_missing_kernels(17))}")


@pytest.mark.slow
def test_full_width_anima_block_matches_reference(anima_block):
    """One real-size anima-2b block (D 2048, 1024 tokens, FFN 8192), each branch vs the reference."""
    cfg, w, manifest = anima_block
    x, text_emb = branch_inputs(cfg, streams=1)
    rope = reference.make_rope(cfg)
    assert manifest.decoder is None and manifest.export["tokens"] == 1024
    for entry in manifest.subgraphs:
        out = run_branch(session(manifest.path_of(entry)), entry.branch, x, text_emb)
        ref = reference.branch_body(w, cfg, 0, entry.branch, x, text_emb, rope)
        assert rel_err(out, ref) <= 1e-5, entry.label


def test_ffn_w8a8_fake_quant_matches_an_independent_simulation():
    """INT8 FFN what-if: per-output-channel weights, per-tensor dynamic activations, in the graph."""
    cfg = load_profile("cosmos-tiny")
    w = random_weights(cfg, seed=8)
    x = np.random.default_rng(9).standard_normal((2, cfg.tokens, cfg.width)).astype(np.float32)
    model = build_subgraph(w, cfg, 1, "ffn", "float32", streams=2)
    quant = build_subgraph(w, cfg, 1, "ffn", "float32", 2, 17, fake_quant="w8a8-ffn")

    def q8(a, axis=None):
        s = np.abs(a).max(axis=axis, keepdims=axis is not None) / 127.0
        return np.round(a / s) * s

    w1 = q8(w["blocks.1.mlp.layer1.weight"].astype(np.float64), axis=1)
    w2 = q8(w["blocks.1.mlp.layer2.weight"].astype(np.float64), axis=1)
    from scipy.special import erf
    h = q8(x.astype(np.float64)) @ w1.T
    want = q8(0.5 * h * (1 + erf(h / np.sqrt(2)))) @ w2.T
    got = run_branch(session(quant), "ffn", x, None)
    exact = run_branch(session(model), "ffn", x, None)
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()
    # and it really is lossy: further from the FP32 body than FP32 rounding would be
    assert np.abs(got - exact).max() > 1e-3 * np.abs(exact).max()
