"""The off-board backend: one subgraph as one onnxruntime CPU session, behind the RKNNLite-shaped lifecycle.

load() reads the model bytes (the board's load_rknn also only reads the file), init() builds the session
(where the board's init_runtime builds the NPU context), run() is one inference, release() drops it all.
A run-dominated subgraph (below) is only opened at load and read by onnxruntime at init: its load
stage is then near zero and init holds the reading.

Options:
    threads: intra-op threads per session (default: chosen per subgraph by what it costs, `threads_for`).
             A small subgraph is dominated by building its session: the embedded model chains ~1,700
             tiny calls per image, and with onnxruntime's defaults (several intra-op threads that spin
             while idle) that chain ran 11-50x slower than one non-spinning thread, so it gets one.
             A full-width FP16 subgraph (25-67 MB of weights, 52-137 GFLOP per call of two streams)
             is dominated by its GEMMs and gets every core this process may use. Spinning is off
             either way.
    A run-dominated subgraph also allocates from one CPU arena the process's sessions share
    (`shared_arena`): a fresh session's own arena maps fresh pages for every intermediate (at
    full width 60-120 thousand page faults per call), the shared arena keeps them from one session
    to the next; the subgraphs' run time per full step fell to 0.54-0.74 of what it was
    (docs/full-size.md). The values computed do not change (tests/unit/test_session_choice.py).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..partition.declared import check_identity
from .base import BackendOptions, Context

__all__ = ["OnnxRuntimeContext", "session_options", "RUN_DOMINATED_BYTES"]

# The manifest's entry label: "subgraph 4 (block 1 cross_attn)" or "subgraph 84 (decoder)".


# Model bytes from which a subgraph's run outweighs building its session. The embedded model's
# subgraphs are 30-70 kB (session creation ~1 ms, the run ~0.2 ms), anima-2b's at full width
# 25-67 MB as FP16 (creation 0.01-0.5 s, the run 0.4-3 s): anything in between is far from both.
RUN_DOMINATED_BYTES = 1 << 20


def threads_for(model_bytes: int) -> int:
    """Intra-op threads for a subgraph of this size: one for a small one, every usable core else."""
    if model_bytes < RUN_DOMINATED_BYTES:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_arena_lock = threading.Lock()
_arena_registered = False


def shared_arena(opts):
    """`opts` set to allocate from the process's shared CPU arena (registered on first use).

    The arena keeps what the largest run needed (its pages stay resident between invocations and
    count in the host's PSS) instead of mapping and faulting it in afresh for every session."""
    global _arena_registered
    import onnxruntime as ort

    with _arena_lock:
        if not _arena_registered:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            # No limit, onnxruntime's default extension strategy, chunk size and dead bytes.
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
            _arena_registered = True
    opts.add_session_config_entry("session.use_env_allocators", "1")
    return opts


def session_options(threads: int = 1):
    """Session options for chains of small calls: no spinning threads, no inter-op parallelism."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # A session lives for one invocation. On the embedded model building it is most of a step: graph
    # optimisation made init 2.4x slower (30 FP16 subgraphs, measured side by side) and saved nothing
    # on one run. At full width (docs/full-size.md) it made init about
    # 2x slower for a run not reliably faster, and with it onnxruntime pre-packs constant weights,
    # which sums in another order and moves FP16 outputs by one float16 ulp; without it the outputs
    # are bitwise those the goldens were made with.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Spinning workers burn the host cores the FP32 residual stream and AdaLN also need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return opts


def _threads_option(options: BackendOptions) -> int | None:
    threads = options.get("threads")
    if threads is None:
        return None             # chosen per subgraph at init, from its size
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"onnxruntime backend option 'threads' must be a positive integer, got {threads!r}")
    return threads


class OnnxRuntimeContext(Context):
    backend_name = "onnxruntime"

    @classmethod
    def import_runtime(cls) -> None:
        import onnxruntime  # noqa: F401 (imported now for its side effect: loaded before a run is under way)

    def __init__(self, label: str, options: BackendOptions | None = None):
        super().__init__(label, options)
        self.threads = _threads_option(self.options)
        self.session_threads: int | None = None     # what init chose (threads, or threads_for the model)
        self._model: bytes | None = None     # a small subgraph's bytes (a large one is read at init)
        self._path: Path | None = None
        self._size = 0
        self._session = None
        self._input_names: list[str] = []

    def load(self, path: Path) -> None:
        path = Path(path)
        try:
            size = path.stat().st_size
            # A run-dominated subgraph is read by onnxruntime itself at init: reading it here too
            # made one more copy of its weights to fault in (docs/full-size.md).
            model = path.read_bytes() if size < RUN_DOMINATED_BYTES else None
            if model is None:
                path.open("rb").close()
        except OSError as exc:
            raise self.error("load", f"cannot read subgraph file {path}: {exc.strerror or exc}") from exc
        if not size:
            raise self.error("load", f"subgraph file {path} is empty")
        self._model, self._path, self._size = model, path, size
        self._mark_live()

    def init(self) -> None:
        if self._path is None:
            raise self.error("init", "no model loaded (call load first)")
        import onnxruntime as ort

        self.session_threads = self.threads or threads_for(self._size)
        opts = session_options(self.session_threads)
        if self._size >= RUN_DOMINATED_BYTES:
            shared_arena(opts)
        source = self._model if self._model is not None else str(self._path)
        try:
            session = ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
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
        self._path = None
        self._input_names = []
        self._mark_released()
