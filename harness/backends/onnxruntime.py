"""The off-board backend: one subgraph as one onnxruntime CPU session, behind the RKNNLite-shaped lifecycle.

load() reads the model bytes (the board's load_rknn also only reads the file), init() builds the session
(where the board's init_runtime builds the NPU context), run() is one inference, release() drops it all.

Options:
    threads: intra-op threads per session (default 1). The pipeline chains ~1,700 tiny calls per image;
             with onnxruntime's defaults (several intra-op threads that spin while idle) that chain ran
             11-50x slower than one non-spinning thread, so one thread is the default and spinning is off.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import ConfigError, ManifestError
from ..partition.declared import check_identity
from .base import Context

__all__ = ["OnnxRuntimeContext", "session_options"]

# The manifest's entry label: "subgraph 4 (block 1 cross_attn)" or "subgraph 84 (decoder)".


def session_options(threads: int = 1):
    """Session options for chains of small calls: no spinning threads, no inter-op parallelism."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # A session lives for one invocation, so building it is most of a step: graph optimisation made
    # init 2.4x slower (30 FP16 subgraphs, measured side by side) and saved nothing on one run; the
    # outputs of every FP16 and fake-quant subgraph were bitwise equal without it.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Spinning workers burn the host cores the FP32 residual stream and AdaLN also need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return opts


def _threads_option(options: dict) -> int:
    threads = options.get("threads", 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"onnxruntime backend option 'threads' must be a positive integer, got {threads!r}")
    return threads


class OnnxRuntimeContext(Context):
    backend_name = "onnxruntime"

    def __init__(self, label: str, **options):
        super().__init__(label, **options)
        self.threads = _threads_option(options)
        self._model: bytes | None = None
        self._path: Path | None = None
        self._session = None
        self._input_names: list[str] = []

    def load(self, path: Path) -> None:
        path = Path(path)
        try:
            model = path.read_bytes()
        except OSError as exc:
            raise self.error("load", f"cannot read model file {path}: {exc.strerror or exc}") from exc
        if not model:
            raise self.error("load", f"model file {path} is empty")
        self._model, self._path = model, path
        self._mark_live()

    def init(self) -> None:
        if self._model is None:
            raise self.error("init", "no model loaded (call load first)")
        import onnxruntime as ort

        try:
            session = ort.InferenceSession(self._model, sess_options=session_options(self.threads),
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own pybind exception types for bad models
            raise self.error("init", f"onnxruntime rejected {self._path}: {exc}") from exc
        self._session = session
        check_identity(self.label, self._path, session.get_modelmeta().custom_metadata_map)
        self._input_names = [i.name for i in session.get_inputs()]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self._session is None:
            raise self.error("run", "context not initialised (call load and init first)")
        if len(inputs) != len(self._input_names):
            raise self.error("run", f"expected {len(self._input_names)} inputs "
                                    f"({', '.join(self._input_names)}), got {len(inputs)}")
        feed = {name: np.asarray(x) for name, x in zip(self._input_names, inputs)}
        try:
            outputs = self._session.run(None, feed)
        except Exception as exc:
            raise self.error("run", str(exc)) from exc
        # Own copies, as RKNNLite's inference returns: onnxruntime's arrays can keep the session's
        # memory alive, and freeing it later would bill the next stage (or the harness) for it.
        return [np.array(o, copy=True) for o in outputs]

    def release(self) -> None:
        self._session = None
        self._model = None
        self._input_names = []
        self._mark_released()
