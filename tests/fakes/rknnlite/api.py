"""A fake `rknnlite.api.RKNNLite` that behaves like the documented board API, for tests off the board.

Documented behaviour reproduced: load_rknn / init_runtime return 0 or -1, inference returns a list of
arrays or None on any error, nothing raises, release is safe twice, NPU_CORE_* constants with their
documented values. Errors are logged to stderr as the real runtime logs them.

The ".rknn" file is treated as an ONNX file and really executed with onnxruntime, so results are real
numbers that can be compared with the onnxruntime backend.

Switches to make a stage fail (as the board does on "Invalid RKNN model version", a bad core mask, a
driver error): class attributes `fail_load_rknn`, `fail_init_runtime`, `fail_inference`, or the
environment variable RKNNLITE_FAKE_FAIL, a comma-separated list of those stage names.
`RKNNLite.live` counts instances created and not yet released; `RKNNLite.calls` logs method names.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

__all__ = ["RKNNLite"]

_lock = threading.Lock()


class RKNNLite:
    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7

    fail_load_rknn = False
    fail_init_runtime = False
    fail_inference = False
    live = 0
    calls: list[str] = []

    @classmethod
    def reset(cls) -> None:
        cls.fail_load_rknn = cls.fail_init_runtime = cls.fail_inference = False
        cls.live = 0
        cls.calls = []

    def __init__(self, verbose=False, verbose_file=None):
        self.verbose = verbose
        self._model: bytes | None = None
        self._session = None
        self._released = False
        self._note("__init__")
        with _lock:
            type(self).live += 1

    def load_rknn(self, path):
        self._note("load_rknn")
        if self._failing("load_rknn") or self._released:
            return self._fail("load_rknn", "failed (forced)" if not self._released else "context released")
        try:
            with open(path, "rb") as fh:
                self._model = fh.read()
        except OSError as exc:
            return self._fail("load_rknn", f"cannot open {path}: {exc.strerror}")
        return 0

    def init_runtime(self, core_mask=NPU_CORE_AUTO, **_ignored):
        self._note("init_runtime")
        if self._model is None:
            return self._fail("init_runtime", "model not loaded")
        if core_mask not in (0, 1, 2, 4, 3, 7):
            return self._fail("init_runtime", f"invalid core mask {core_mask}")
        if self._failing("init_runtime"):
            return self._fail("init_runtime", "Invalid RKNN model version (forced)")
        try:
            self._session = _session(self._model)
        except Exception as exc:  # the real runtime reports a bad model file here, by return code
            return self._fail("init_runtime", f"invalid model: {exc}")
        return 0

    def inference(self, inputs=None, data_format=None, inputs_pass_through=None, get_frame_id=False):
        self._note("inference")
        if self._session is None:
            return self._fail("inference", "runtime not initialised", None)
        if self._failing("inference"):
            return self._fail("inference", "rknn_run failed (forced)", None)
        names = [i.name for i in self._session.get_inputs()]
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(names):
            return self._fail("inference", f"expected {len(names)} inputs", None)
        try:
            return list(self._session.run(None, {n: np.asarray(x) for n, x in zip(names, inputs)}))
        except Exception as exc:
            return self._fail("inference", str(exc), None)

    def release(self):
        self._note("release")
        if self._released:
            return
        self._released = True
        self._session = self._model = None
        with _lock:
            type(self).live -= 1

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


def _session(model: bytes):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
