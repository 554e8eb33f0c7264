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

Inputs as the runtime takes them (its set_inputs, rknn_runtime.so of the same wheel): `inputs` must be
a list of numpy arrays; `data_type` is one name for every input or a list with one name per input
(a list of another length is refused); each input's own dtype must be one of int8, uint8, int16,
float16, float32 and equal to its data_type, else the call fails ("inputs[k].dtype: float16 is not same
as data_type[k]"); with no data_type the buffer is read as the documented default uint8 and only its size
is checked. `data_format` matters for 4-D inputs only: 'nchw' is taken as is, anything else (the
default) as NHWC, so a 4-D NCHW array passed without data_format='nchw' is silently read in the wrong
layout, as on the board.

The runtime library: init_runtime opens `$LIBRKNNRT_PATH`, else /usr/lib/librknnrt.so; when that file
is missing, init_runtime logs "Can not find dynamic library on PATH!" and returns -1 (importing
rknnlite.api still works: the wheel loads librknnrt only here). `get_sdk_version()` returns None
before init_runtime, then the runtime's version block, "API:" the librknnrt version (read from the
library's bytes, "librknnrt version: x.y.z", as the simulated board tree carries it) and "DRV:" the
kernel driver's version (class attribute `driver_version`).

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
import re
import sys
import threading

import numpy as np

__all__ = ["RKNNLite", "DEFAULT_LIBRKNNRT"]

_lock = threading.Lock()


_DATA_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "float16": np.float16,
               "float32": np.float32}
_CORE_MASKS = (0, 1, 2, 4, 3, 7, 0xFFFF)
DEFAULT_LIBRKNNRT = "/usr/lib/librknnrt.so"
_LIB_VERSION = re.compile(rb"librknnrt version: *([^\x00\n]+)")


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
    driver_version = "0.9.8"
    live = 0
    calls: list[str] = []
    last_inference: dict = {}

    @classmethod
    def reset(cls) -> None:
        cls.fail_load_rknn = cls.fail_init_runtime = cls.fail_inference = False
        cls.driver_version = "0.9.8"
        cls.live = 0
        cls.calls = []
        cls.last_inference = {}

    def __init__(self, verbose=False, verbose_file=None):
        self.verbose = verbose
        self._model: bytes | None = None
        self._session = None
        self._api_version: str | None = None
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
        library = os.environ.get("LIBRKNNRT_PATH") or DEFAULT_LIBRKNNRT
        try:
            with open(library, "rb") as fh:
                found = _LIB_VERSION.search(fh.read())
        except OSError:
            self._fail("init_runtime", f"Can not find dynamic library on {library}!")
            return self._fail("init_runtime", "Catch exception when init runtime!")
        self._api_version = found.group(1).decode(errors="replace").strip() if found else "unknown"
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
        if not isinstance(inputs, list):
            return self._fail("inference", "Inputs should be placed in a list, like [img1, img2], both "
                                           "the img1 and img2 are ndarray.", None)
        if len(inputs) != len(specs):
            return self._fail("inference", f"Catch exception when setting inputs: the model takes "
                                           f"{len(specs)} inputs, got {len(inputs)}", None)
        types = _input_types(inputs, data_type)
        if isinstance(types, str):
            return self._fail("inference", f"Catch exception when setting inputs. {types}", None)
        feed = {}
        for k, (spec, array, kind) in enumerate(zip(specs, inputs, types)):
            value = _as_model_input(array, spec, kind, data_format)
            if isinstance(value, str):
                return self._fail("inference", f"Catch exception when setting inputs. E Size of "
                                               f"inputs[{k}] is invalid! ({value})", None)
            feed[spec.name] = value
        try:
            return [np.asarray(o, dtype=np.float32) for o in self._session.run(None, feed)]
        except Exception as exc:
            return self._fail("inference", f"Catch exception when running RKNN model: {exc}", None)

    def get_sdk_version(self):
        self._note("get_sdk_version")
        if self._session is None:
            return self._fail("get_sdk_version", "Runtime environment is not inited, please call "
                                                 "init_runtime to init it first!", None)
        # The block the runtime returns: its "RKNN VERSION:", "  API: {}", "  DRV: {}" lines.
        return f"RKNN VERSION:\n  API: {self._api_version}\n  DRV: {type(self).driver_version}"

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


def _input_types(inputs: list, data_type) -> list[str | None] | str:
    """The data_type of each input, or the runtime's reason for refusing the inputs."""
    if isinstance(data_type, (list, tuple)):
        if len(data_type) != len(inputs):
            return "E The lengths of data_type and inputs are not equal."
        types, indexed = list(data_type), True
    else:
        types, indexed = [data_type] * len(inputs), False
    for k, (array, kind) in enumerate(zip(inputs, types)):
        if not isinstance(array, np.ndarray):
            return f"E Type of inputs[{k}] is not np.ndarray!"
        if kind is not None and kind not in _DATA_TYPES:
            return f"E Unsupport data type: {kind}"
        if array.dtype.name not in _DATA_TYPES:
            return f"E Unsupport inputs[{k}].dtype: {array.dtype.name}"
        if kind is not None and array.dtype.name != kind:
            where = f"data_type[{k}]" if indexed else "data_type"
            return f"E inputs[{k}].dtype: {array.dtype.name} is not same as {where}"
    return types


def _as_model_input(array: np.ndarray, spec, data_type, data_format):
    """The model input the runtime would see for this buffer, or a reason string on a size mismatch."""
    shape = [int(d) for d in spec.shape]
    kind = _DATA_TYPES[data_type or "uint8"]        # documented default: uint8
    expected = int(np.prod(shape)) * np.dtype(kind).itemsize
    if array.nbytes != expected:
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
