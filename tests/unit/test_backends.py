"""Backends: the onnxruntime context on a real ONNX model, the rknnlite adapter against the fake runtime,
and the rknnlite adapter in this real environment (no board runtime: a clear error, never a fallback)."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from scipy.special import erf

from harness.backends import create_context, live_contexts
from harness.backends.base import BackendOptions
from harness.backends.onnxruntime import OnnxRuntimeContext, session_options
from harness.backends.rknnlite import RknnLiteContext
from harness.core.errors import BackendError, ConfigError
from tests.fakes import forget_rknnlite, use_fake_rknnlite

LABEL = "subgraph 4 (block 1 cross_attn)"
TOKENS, WIDTH = 8, 16


def _model_bytes(weight: np.ndarray) -> bytes:
    """y = erf(x @ W): the MatMul + exact-GELU ingredients of an FFN subgraph, tiny."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Erf", ["h"], ["y"])],
        "tiny_ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [TOKENS, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [TOKENS, WIDTH])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture
def weight(rng):
    return (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)


@pytest.fixture
def model_path(tmp_path, weight):
    path = tmp_path / "subgraph_004.onnx"
    path.write_bytes(_model_bytes(weight))
    return path


@pytest.fixture
def x(rng):
    return rng.standard_normal((TOKENS, WIDTH)).astype(np.float32)


@pytest.fixture(autouse=True)
def nothing_left_live():
    assert live_contexts() == 0
    yield
    assert live_contexts() == 0, "a test left a context loaded"


def _lifecycle(ctx, path, inputs):
    try:
        ctx.load(path)
        ctx.init()
        return ctx.run(inputs)
    finally:
        ctx.release()


# ---------------------------------------------------------------- onnxruntime

def test_onnxruntime_runs_the_model(model_path, weight, x):
    ctx = create_context(BackendOptions("onnxruntime"), LABEL)
    assert isinstance(ctx, OnnxRuntimeContext)
    (y,) = _lifecycle(ctx, model_path, [x])
    np.testing.assert_allclose(y, erf(x.astype(np.float64) @ weight), rtol=1e-5, atol=1e-6)


def test_onnxruntime_session_does_not_spin():
    opts = session_options(1)
    assert opts.intra_op_num_threads == 1
    assert opts.inter_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_onnxruntime_threads_option(model_path, x):
    ctx = OnnxRuntimeContext(LABEL, BackendOptions("onnxruntime", {"threads": 2}))
    assert ctx.threads == 2
    assert len(_lifecycle(ctx, model_path, [x])) == 1
    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ConfigError, match="'threads'"):
            OnnxRuntimeContext(LABEL, BackendOptions("onnxruntime", {"threads": bad}))


def test_onnxruntime_lifecycle_counts_live_and_release_is_idempotent(model_path, x):
    ctx = OnnxRuntimeContext(LABEL)
    with pytest.raises(BackendError, match="init failed: no model loaded"):
        ctx.init()
    ctx.load(model_path)
    assert live_contexts() == 1
    with pytest.raises(BackendError, match="run failed: context not initialised"):
        ctx.run([x])
    ctx.init()
    ctx.release()
    ctx.release()
    assert live_contexts() == 0
    with pytest.raises(BackendError, match=r"subgraph 4 \(block 1 cross_attn\): run failed"):
        ctx.run([x])


def test_onnxruntime_missing_file(tmp_path, x):
    ctx = OnnxRuntimeContext(LABEL)
    with pytest.raises(BackendError) as err:
        _lifecycle(ctx, tmp_path / "absent.onnx", [x])
    assert "onnxruntime: subgraph 4 (block 1 cross_attn): load failed" in str(err.value)
    assert "absent.onnx" in str(err.value)


def test_onnxruntime_corrupt_file(tmp_path, x):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf model \xff\xfe")
    ctx = OnnxRuntimeContext(LABEL)
    with pytest.raises(BackendError, match=r"cross_attn\): init failed: .*corrupt\.onnx"):
        _lifecycle(ctx, bad, [x])


def test_onnxruntime_wrong_input_count(model_path, x):
    ctx = OnnxRuntimeContext(LABEL)
    with pytest.raises(BackendError, match=r"run failed: expected 1 inputs \(x\), got 2"):
        _lifecycle(ctx, model_path, [x, x])


def test_onnxruntime_wrong_input_shape(model_path, x):
    with pytest.raises(BackendError, match="run failed"):
        _lifecycle(OnnxRuntimeContext(LABEL), model_path, [x[:, :3]])


# ---------------------------------------------------------------- rknnlite against the fake runtime

@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("RKNNLITE_FAKE_FAIL", raising=False)
    fake_cls = use_fake_rknnlite(monkeypatch)
    try:
        yield fake_cls
    finally:
        fake_cls.reset()
        forget_rknnlite()


@pytest.fixture
def rknn_path(tmp_path, model_path):
    path = tmp_path / "subgraph_004.rknn"
    path.write_bytes(model_path.read_bytes())
    return path


def test_rknnlite_drives_the_documented_lifecycle_and_releases(fake, monkeypatch, rknn_path, x):
    """What the fake can honestly show: the adapter's calls, in order, with the arguments the API
    documents, and what it makes of the results. (The fake runs the file through onnxruntime, so
    comparing its numbers with the onnxruntime backend would hold by construction; on the board,
    numbers are the quality and numerics gates' business.)"""
    seen = []
    real_init, real_inference = fake.init_runtime, fake.inference

    def init_runtime(self, *args, **kwargs):
        seen.append(("init_runtime", args, kwargs))
        return real_init(self, *args, **kwargs)

    def inference(self, *args, **kwargs):
        seen.append(("inference", args, kwargs))
        return real_inference(self, *args, **kwargs)

    monkeypatch.setattr(fake, "init_runtime", init_runtime)
    monkeypatch.setattr(fake, "inference", inference)
    ctx = create_context(BackendOptions("rknnlite", {"core_mask": "0_1_2"}), LABEL)
    assert isinstance(ctx, RknnLiteContext)
    ctx.load(rknn_path)
    assert fake.live == 1 and live_contexts() == 1
    ctx.init()
    outputs = ctx.run([x])
    # inference takes a list of arrays (the documented `inputs=`), and the core mask reaches init_runtime
    (_, init_args, init_kwargs), (_, run_args, run_kwargs) = seen
    assert {**dict(zip(("core_mask",), init_args)), **init_kwargs} == {"core_mask": fake.NPU_CORE_0_1_2}
    passed = run_kwargs.get("inputs", run_args[0] if run_args else None)
    assert isinstance(passed, list) and len(passed) == 1 and passed[0] is x
    assert isinstance(outputs, list) and [o.shape for o in outputs] == [(TOKENS, WIDTH)]
    ctx.release()
    ctx.release()                   # release is safe twice, as the API's is
    assert fake.calls == ["__init__", "load_rknn", "init_runtime", "inference", "release"]
    assert fake.live == 0 and live_contexts() == 0
    with pytest.raises(BackendError, match=r"^rknnlite: subgraph 4 \(block 1 cross_attn\): run failed: "
                                           "context not initialised"):
        ctx.run([x])
    assert fake.calls[-1] == "release", "a released context must not reach the runtime again"


@pytest.mark.parametrize("api_call, stage, detail", [
    ("load_rknn", "load", "load_rknn(.*) returned -1"),
    ("init_runtime", "init", r"init_runtime\(core_mask=auto\) returned -1"),
    ("inference", "run", "inference\\(\\) returned None"),
])
@pytest.mark.parametrize("switch", ["attribute", "environment"])
def test_rknnlite_failure_codes_name_subgraph_and_stage(fake, monkeypatch, rknn_path, x,
                                                        api_call, stage, detail, switch):
    if switch == "attribute":
        setattr(fake, f"fail_{api_call}", True)
    else:
        monkeypatch.setenv("RKNNLITE_FAKE_FAIL", api_call)
    with pytest.raises(BackendError, match=rf"^rknnlite: subgraph 4 \(block 1 cross_attn\): {stage} failed: {detail}"):
        _lifecycle(RknnLiteContext(LABEL), rknn_path, [x])
    assert fake.live == 0, "the runtime context was not released after the failure"
    assert fake.calls[-1] == "release"


def test_rknnlite_failed_load_releases_without_caller(fake, rknn_path):
    fake.fail_load_rknn = True
    ctx = RknnLiteContext(LABEL)
    with pytest.raises(BackendError, match="load failed"):
        ctx.load(rknn_path)
    assert fake.live == 0 and live_contexts() == 0
    ctx.release()
    ctx.release()


def test_rknnlite_missing_and_corrupt_files(fake, tmp_path, x):
    with pytest.raises(BackendError, match=r"load failed: subgraph file .*absent\.rknn not found"):
        _lifecycle(RknnLiteContext(LABEL), tmp_path / "absent.rknn", [x])
    corrupt = tmp_path / "corrupt.rknn"
    corrupt.write_bytes(b"RKNN\x00\x01 truncated")
    with pytest.raises(BackendError, match="init failed: init_runtime"):
        _lifecycle(RknnLiteContext(LABEL), corrupt, [x])
    assert fake.live == 0


def test_rknnlite_wrong_input_count_is_a_run_error(fake, rknn_path, x):
    with pytest.raises(BackendError, match="run failed: inference\\(\\) returned None for 2 inputs"):
        _lifecycle(RknnLiteContext(LABEL), rknn_path, [x, x])


@pytest.mark.parametrize("option, constant", [
    ("auto", "NPU_CORE_AUTO"), ("0", "NPU_CORE_0"), ("1", "NPU_CORE_1"), ("2", "NPU_CORE_2"),
    ("0_1", "NPU_CORE_0_1"), ("0_1_2", "NPU_CORE_0_1_2"), ("NPU_CORE_0_1", "NPU_CORE_0_1"),
    (7, "NPU_CORE_0_1_2"), (4, "NPU_CORE_2"), (0, "NPU_CORE_AUTO"),
])
def test_rknnlite_core_masks(fake, rknn_path, x, option, constant):
    ctx = RknnLiteContext(LABEL, BackendOptions("rknnlite", {"core_mask": option}))
    assert ctx.core_mask == getattr(fake, constant)
    assert len(_lifecycle(ctx, rknn_path, [x])) == 1


@pytest.mark.parametrize("bad", ["3", "0_2", "gpu", 5, 8, -1, True, None, 1.0])
def test_rknnlite_bad_core_mask(fake, bad):
    with pytest.raises(ConfigError, match="'core_mask'"):
        RknnLiteContext(LABEL, BackendOptions("rknnlite", {"core_mask": bad}))
    assert fake.live == 0


# ---------------------------------------------------------------- rknnlite in this real environment

def test_rknnlite_off_board_says_so():
    forget_rknnlite()
    if importlib.util.find_spec("rknnlite") is not None:
        pytest.skip("the board runtime is installed here")
    with pytest.raises(BackendError) as err:
        create_context(BackendOptions("rknnlite"), LABEL)
    message = str(err.value)
    assert LABEL in message
    assert "rknnlite runtime" in message and "not installed" in message
    assert "not an RK3588 board" in message and "--backend onnxruntime" in message


def test_rknn_sim_without_its_toolkit_environment_says_how_to_make_it(tmp_path, monkeypatch):
    """No toolkit needed: an absent environment fails the load naming bin/toolkit-env."""
    import shutil as _shutil

    from harness.backends import create_context as _create
    from harness.model.bundle import load_bundle
    from harness.partition.onnx_export import ExportSettings, export_partition
    from tests.helpers import make_random_model_dir
    bundle = load_bundle(make_random_model_dir(tmp_path / "model"))
    export_partition(bundle.weights, bundle.cfg, tmp_path / "fp32", ExportSettings(precision="float32", blocks=[0]))
    part = tmp_path / "conv"
    _shutil.copytree(tmp_path / "fp32", part)
    manifest = json.loads((part / "manifest.json").read_text())
    entry = manifest["subgraphs"][0]
    manifest["conversion"] = {"toolkit_version": "2.5.0", "target": "rk3588", "precision": "float16",
                              "config": {"target_platform": "rk3588"},
                              "source": {"directory": str(tmp_path / "fp32")},
                              "subgraphs": [{"file": entry["file"], "onnx_file": entry["file"],
                                             "onnx_sha256": entry["sha256"], "quantization": None}]}
    (part / "manifest.json").write_text(json.dumps(manifest))
    # The file's own description, as rknn-toolkit2 2.5.0 appends it: a uint64 length, then JSON.
    table = json.dumps({"version": "2.5.0", "target_platform": ["rk3588"]}).encode()
    with open(part / entry["file"], "ab") as fh:
        fh.write(len(table).to_bytes(8, "little") + table)
    monkeypatch.setenv("ANIMA_TOOLKIT_HOME", str(tmp_path / "no-toolkits"))
    from harness.backends.rknn_sim import shutdown_workers
    shutdown_workers()          # a worker started earlier in this session would still serve
    ctx = _create(BackendOptions("rknn-sim"), "subgraph 0 (block 0 self_attn)")
    with pytest.raises(BackendError, match=r"subgraph 0 \(block 0 self_attn\): load failed: toolkit "
                                           r"environment 2.5.0 is absent .* bin/toolkit-env 2.5.0"):
        ctx.load(part / entry["file"])
    assert live_contexts() == 0
