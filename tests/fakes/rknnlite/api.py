"""A fake `rknnlite.api.RKNNLite` that behaves like the board API, for tests off the board.

Reproduced from rknn-toolkit-lite2 2.5.0 (its rknn_lite.py, read from the aarch64 wheel; and
docs/architecture.md section 8): load_rknn / init_runtime return 0 or -1 and inference returns a list of
arrays or None on any error, nothing raises; the signatures and argument order
`load_rknn(path, key_path=None)`, `init_runtime(target=None, device_id=None, async_mode=False,
core_mask=NPU_CORE_AUTO)`, `inference(inputs, data_type=None, data_format=None,
inputs_pass_through=None, get_frame_id=False, reuse_outputs=False)`; the NPU_CORE_* constants
including NPU_CORE_ALL = 0xffff; outputs always float32; release() frees only the runtime, so the same
object can load and initialise again; release is safe twice. Errors are logged to stderr as the real
runtime logs them.

Inputs as the runtime takes them: `data_type` (documented default uint8) says how to read each
input's buffer, and only the buffer size is checked against the model's input; `data_format`
matters for 4-D inputs only: 'nchw' is taken as is, anything else (the default) as NHWC, so a 4-D
NCHW array passed without data_format='nchw' is silently read in the wrong layout, as on the board.

The ".rknn" file is treated as an ONNX file and really executed with onnxruntime, so results are real
numbers that can be compared with the onnxruntime backend.

Switches to make a stage fail (as the board does on "Invalid RKNN model version", a bad core mask, a
driver error): class attributes `fail_load_rknn`, `fail_init_runtime`, `fail_inference`, or the
environment variable RKNNLITE_FAKE_FAIL, a comma-separated list of those stage names.
`RKNNLite.live` counts objects holding a model (loaded, not released); `RKNNLite.calls` logs method
names and `RKNNLite.last_inference` the keyword arguments of the last inference call.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

__all__ = ["RKNNLite"]

_lock = threading.Lock()


_DATA_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "float16": np.float16,
               "float32": np.float32}
_CORE_MASKS = (0, 1, 2, 4, 3, 7, 0xFFFF)


class RKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    fail_load_rknn = False
    fail_init_runtime = False
    fail_inference = False
    live = 0
    calls: list[str] = []
    last_inference: dict = {}

    @classmethod
    def reset(cls) -> None:
        cls.fail_load_rknn = cls.fail_init_runtime = cls.fail_inference = False
        cls.live = 0
        cls.calls = []
        cls.last_inference = {}

    def __init__(self, verbose=False, verbose_file=None):
        self.verbose = verbose
        self._model: bytes | None = None
        self._session = None
        self._holding = False
        self._note("__init__")

    def load_rknn(self, path, key_path=None):
        self._note("load_rknn")
        if self._failing("load_rknn"):
            return self._fail("load_rknn", "failed (forced)")
        try:
            with open(path, "rb") as fh:
                self._model = fh.read()
        except OSError as exc:
            return self._fail("load_rknn", f"Invalid RKNN model path: {path} ({exc.strerror})")
        self._hold()
        return 0

    def init_runtime(self, target=None, device_id=None, async_mode=False, core_mask=NPU_CORE_AUTO):
        self._note("init_runtime")
        if self._model is None:
            return self._fail("init_runtime", "Model is not loaded yet, this interface should be "
                                              "called after load_rknn!")
        if isinstance(core_mask, bool) or core_mask not in _CORE_MASKS:
            return self._fail("init_runtime", f"invalid core mask {core_mask!r}")
        if self._failing("init_runtime"):
            return self._fail("init_runtime", "Invalid RKNN model version (forced)")
        try:
            self._session = _session(self._model)
        except Exception as exc:  # the real runtime reports a bad model file here, by return code
            return self._fail("init_runtime", f"Catch exception when init runtime! invalid model: {exc}")
        return 0

    def inference(self, inputs, data_type=None, data_format=None, inputs_pass_through=None,
                  get_frame_id=False, reuse_outputs=False):
        self._note("inference")
        type(self).last_inference = {"data_type": data_type, "data_format": data_format}
        if self._session is None:
            return self._fail("inference", "Runtime environment is not inited, please call "
                                           "init_runtime to init it first!", None)
        if self._failing("inference"):
            return self._fail("inference", "rknn_run failed (forced)", None)
        specs = self._session.get_inputs()
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(specs):
            return self._fail("inference", f"Catch exception when setting inputs: expected "
                                           f"{len(specs)} inputs", None)
        feed = {}
        for k, (spec, array) in enumerate(zip(specs, inputs)):
            value = _as_model_input(np.asarray(array), spec, data_type, data_format)
            if isinstance(value, str):
                return self._fail("inference", f"Catch exception when setting inputs: input {k}: "
                                               f"{value}", None)
            feed[spec.name] = value
        try:
            return [np.asarray(o, dtype=np.float32) for o in self._session.run(None, feed)]
        except Exception as exc:
            return self._fail("inference", f"Catch exception when running RKNN model: {exc}", None)

    def release(self):
        self._note("release")
        self._session = None            # the real release frees the runtime; the model data stays
        if self._holding:
            self._holding = False
            with _lock:
                type(self).live -= 1

    def _hold(self) -> None:
        if not self._holding:
            self._holding = True
            with _lock:
                type(self).live += 1

    def _failing(self, stage: str) -> bool:
        forced = {s.strip() for s in os.environ.get("RKNNLITE_FAKE_FAIL", "").split(",")}
        return getattr(type(self), f"fail_{stage}") or stage in forced

    def _note(self, name: str) -> None:
        with _lock:
            type(self).calls.append(name)

    @staticmethod
    def _fail(stage: str, why: str, value=-1):
        print(f"E {stage}: {why}", file=sys.stderr)
        return value


def _as_model_input(array: np.ndarray, spec, data_type, data_format):
    """The model input the runtime would see for this buffer, or a reason string on a size mismatch."""
    shape = [int(d) for d in spec.shape]
    kind = _DATA_TYPES.get(data_type or "uint8")        # documented default: uint8
    if kind is None:
        return f"data_type {data_type!r} is not one of {', '.join(_DATA_TYPES)}"
    expected = int(np.prod(shape)) * np.dtype(kind).itemsize
    if array.nbytes != expected:        # the runtime checks the buffer size, nothing else
        return (f"buffer of {array.nbytes} bytes, the model input '{spec.name}' {shape} takes "
                f"{expected} bytes of {np.dtype(kind).name}")
    values = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=kind)
    if len(shape) == 4 and data_format != "nchw":
        n, c, h, w = shape              # read as NHWC, handed to the NCHW model
        values = values.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    model_dtype = np.float16 if "float16" in spec.type else np.float32
    return np.ascontiguousarray(values.reshape(shape).astype(model_dtype))


def _session(model: bytes):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
