"""The fake RKNNLite behaves like rknn-toolkit-lite2 2.5.0 (its rknn_lite.py, docs/architecture.md section 8),
and the rknnlite backend drives it the way the board needs (explicit data_type and data_format)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.backends import create_context
from harness.backends.base import BackendOptions
from harness.backends.onnxruntime import OnnxRuntimeContext
from tests.fakes import forget_rknnlite, use_fake_rknnlite

LABEL = "subgraph 84 (decoder)"


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("RKNNLITE_FAKE_FAIL", raising=False)
    cls = use_fake_rknnlite(monkeypatch)
    try:
        yield cls
    finally:
        cls.reset()
        forget_rknnlite()


def _conv_model(path, dtype=TensorProto.FLOAT) -> np.ndarray:
    """A 4-D NCHW model whose output depends on the layout: y = conv1x1(x) with 3 input channels."""
    rng = np.random.default_rng(3)
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    w = rng.standard_normal((2, 3, 1, 1)).astype(np_dtype)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv",
                              [helper.make_tensor_value_info("x", dtype, [1, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", dtype, [1, 2, 4, 5])],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.write_bytes(model.SerializeToString())
    return w


def _runtime(fake, path):
    rknn = fake()
    assert rknn.load_rknn(str(path)) == 0
    assert rknn.init_runtime(core_mask=fake.NPU_CORE_AUTO) == 0
    return rknn


def test_signatures_follow_the_real_api(fake):
    # Parameter order of rknn-toolkit-lite2 2.5.0's rknn_lite.py: positional callers depend on it.
    def params(f):
        return list(inspect.signature(f).parameters)[1:]
    assert params(fake.load_rknn) == ["path", "key_path"]
    assert params(fake.init_runtime) == ["target", "device_id", "async_mode", "core_mask"]
    assert params(fake.inference) == ["inputs", "data_type", "data_format", "inputs_pass_through",
                                      "get_frame_id", "reuse_outputs"]
    assert (fake.NPU_CORE_AUTO, fake.NPU_CORE_0_1_2, fake.NPU_CORE_ALL) == (0, 7, 0xFFFF)


def test_float16_model_gives_float32_outputs(fake, tmp_path):
    _conv_model(tmp_path / "m.rknn", TensorProto.FLOAT16)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float16)
    out = _runtime(fake, tmp_path / "m.rknn").inference([x], data_type="float16", data_format="nchw")
    assert out[0].dtype == np.float32 and out[0].shape == (1, 2, 4, 5)


def test_data_type_defaults_to_uint8_so_float_buffers_are_refused(fake, tmp_path, capsys):
    _conv_model(tmp_path / "m.rknn")
    x = np.ones((1, 3, 4, 5), np.float32)
    rknn = _runtime(fake, tmp_path / "m.rknn")
    assert rknn.inference([x], data_format="nchw") is None
    assert "240 bytes" in capsys.readouterr().err        # 60 values as float32, expected 60 as uint8
    assert rknn.inference([x], data_type="float32", data_format="nchw") is not None


def test_4d_input_without_data_format_is_read_as_nhwc(fake, tmp_path):
    w = _conv_model(tmp_path / "m.rknn")
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 5)).astype(np.float32)
    want = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x)
    rknn = _runtime(fake, tmp_path / "m.rknn")
    right = rknn.inference([x], data_type="float32", data_format="nchw")[0]
    silent = rknn.inference([x], data_type="float32")[0]          # no error, as on the board
    assert np.allclose(right, want, atol=1e-5)
    assert silent.shape == want.shape and not np.allclose(silent, want, atol=1e-2)


def test_npu_core_all_and_bad_masks(fake, tmp_path):
    _conv_model(tmp_path / "m.rknn")
    rknn = fake()
    assert rknn.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.init_runtime(core_mask=fake.NPU_CORE_ALL) == 0
    assert rknn.init_runtime(core_mask=5) == -1


def test_loads_and_runs_again_after_release(fake, tmp_path):
    _conv_model(tmp_path / "m.rknn")
    x = np.ones((1, 3, 4, 5), np.float32)
    rknn = _runtime(fake, tmp_path / "m.rknn")
    rknn.release()
    assert fake.live == 0
    assert rknn.inference([x], data_type="float32", data_format="nchw") is None   # runtime freed
    assert rknn.load_rknn(str(tmp_path / "m.rknn")) == 0 and fake.live == 1
    assert rknn.init_runtime() == 0
    assert rknn.inference([x], data_type="float32", data_format="nchw") is not None
    rknn.release()
    rknn.release()
    assert fake.live == 0


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_backend_passes_data_type_and_format(fake, tmp_path, dtype):
    _conv_model(tmp_path / "m.rknn", dtype)
    x = np.random.default_rng(2).standard_normal((1, 3, 4, 5)).astype(
        np.float16 if dtype == TensorProto.FLOAT16 else np.float32)
    ctx = create_context(BackendOptions("rknnlite", {"core_mask": "all"}), LABEL)
    ctx.load(tmp_path / "m.rknn")
    ctx.init()
    try:
        out = ctx.run([x])
    finally:
        ctx.release()
    assert fake.last_inference == {"data_type": [x.dtype.name], "data_format": "nchw"}
    ref = OnnxRuntimeContext(LABEL)
    ref.load(tmp_path / "m.rknn")
    ref.init()
    try:
        want = ref.run([x])
    finally:
        ref.release()
    assert out[0].dtype == np.float32 and out[0].shape == want[0].shape
    # Same model, same inputs; the two onnxruntime sessions may pick different FP16 kernels.
    assert np.allclose(out[0], np.asarray(want[0], np.float32), rtol=1e-3, atol=1e-3)


def _two_dtype_model(path):
    """y = float(h16) + t32: one float16 and one float32 input, as a subgraph with mixed inputs has."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["h"], ["h32"], to=TensorProto.FLOAT), helper.make_node("Add", ["h32", "t"], ["y"])],
        "mixed", [helper.make_tensor_value_info("h", TensorProto.FLOAT16, [2, 3]),
                  helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.write_bytes(model.SerializeToString())


def test_each_input_dtype_must_match_its_data_type(fake, tmp_path, capsys):
    _two_dtype_model(tmp_path / "m.rknn")
    h, t = np.ones((2, 3), np.float16), np.full((2, 3), 2.0, np.float32)
    rknn = _runtime(fake, tmp_path / "m.rknn")
    assert rknn.inference([h, t], data_type="float16") is None            # input 1 is float32
    assert "inputs[1].dtype: float32 is not same as data_type" in capsys.readouterr().err
    assert rknn.inference([h, t], data_type=["float16"]) is None
    assert "lengths of data_type and inputs are not equal" in capsys.readouterr().err
    assert rknn.inference([h, t], data_type=["float32", "float32"]) is None
    assert "inputs[0].dtype: float16 is not same as data_type[0]" in capsys.readouterr().err
    assert rknn.inference((h, t), data_type=["float16", "float32"]) is None
    assert "placed in a list" in capsys.readouterr().err
    assert rknn.inference([h, t.astype(np.float64)], data_type=["float16", "float64"]) is None
    out = rknn.inference([h, t], data_type=["float16", "float32"])
    assert np.allclose(out[0], 3.0)


def test_backend_names_every_inputs_own_dtype(fake, tmp_path):
    _two_dtype_model(tmp_path / "m.rknn")
    ctx = create_context(BackendOptions("rknnlite"), LABEL)
    ctx.load(tmp_path / "m.rknn")
    ctx.init()
    try:
        out = ctx.run([np.ones((2, 3), np.float16), np.full((2, 3), 2.0, np.float32)])
    finally:
        ctx.release()
    assert fake.last_inference["data_type"] == ["float16", "float32"] and np.allclose(out[0], 3.0)


def test_missing_librknnrt_is_init_runtime_minus_one(fake, tmp_path, monkeypatch, capsys):
    from harness.core.errors import BackendError
    _conv_model(tmp_path / "m.rknn")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(tmp_path / "nowhere" / "librknnrt.so"))
    rknn = fake()
    assert rknn.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.init_runtime() == -1
    assert f"Can not find dynamic library on {tmp_path / 'nowhere' / 'librknnrt.so'}!" in capsys.readouterr().err
    ctx = create_context(BackendOptions("rknnlite"), LABEL)
    ctx.load(tmp_path / "m.rknn")
    with pytest.raises(BackendError, match=r"init failed: init_runtime\(core_mask=auto\) returned -1; "
                                           r".*librknnrt.so does not exist: .*set LIBRKNNRT_PATH"):
        ctx.init()
    ctx.release()


def test_sdk_versions_come_from_get_sdk_version(fake, tmp_path):
    _conv_model(tmp_path / "m.rknn")
    rknn = fake()
    assert rknn.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert rknn.get_sdk_version() is None                     # before init_runtime, as the real one
    fake.driver_version = "0.9.6"
    ctx = create_context(BackendOptions("rknnlite"), LABEL)
    ctx.load(tmp_path / "m.rknn")
    ctx.init()
    try:
        # The simulated board tree's librknnrt.so says 2.3.2 (LIBRKNNRT_PATH points at it).
        assert ctx.sdk_versions() == {"api": "2.3.2", "driver": "0.9.6"}
    finally:
        ctx.release()
