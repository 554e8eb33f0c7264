"""The board backend: one subgraph as one RKNNLite context (rknn-toolkit-lite2, RK3588 only).

The RKNNLite API reports failure by return value, not by exception: load_rknn and init_runtime return
0 or -1, inference returns None on any error. Every such value becomes a BackendError naming the subgraph
and the stage, so a failure in subgraph 57 of 84 says so instead of surfacing later as a NoneType error.

Options:
    core_mask: which NPU cores to run on. A name - "auto", "0", "1", "2", "0_1", "0_1_2" (cores by
               index), "all" - or an int raw bitmask equal to one of RKNNLite.NPU_CORE_* (0 auto,
               1, 2, 4, 3, 7, 0xffff all).
               Default "auto". Multi-core masks are reported to crash on some kernels, hence the option.

The runtime library: rknn-toolkit-lite2 opens `$LIBRKNNRT_PATH`, else /usr/lib/librknnrt.so, inside
init_runtime (importing the wheel does not load it), so a missing library is init_runtime returning -1;
`runtime_library()` names the file the runtime will open. `sdk_versions()` of an initialised context
reads librknnrt's and the NPU driver's versions through RKNNLite.get_sdk_version(), which needs no root
(the driver's debugfs file does).

What the runtime prints itself (rknn-toolkit-lite2's "E Catch exception when init runtime!" and its Python
traceback, librknnrt's log lines) is kept out of the terminal: every call runs with file descriptors 1 and
2 and sys.stdout/sys.stderr turned into a buffer, so the suite's one line comes first and alone; a failing
stage's error carries that output (`runtime_log`), which the run report keeps.

Off the board the runtime is absent; creating a context then fails loudly: the suite must never quietly
run something other than the NPU while claiming to gate it.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import BackendError, ConfigError
from .base import BackendOptions, Context

__all__ = ["RknnLiteContext", "CORE_MASKS", "parse_core_mask", "load_runtime", "DEFAULT_LIBRKNNRT"]

# option name -> suffix of the RKNNLite.NPU_CORE_* constant, and that constant's documented value
CORE_MASKS = {"auto": ("AUTO", 0), "0": ("0", 1), "1": ("1", 2), "2": ("2", 4),
              "0_1": ("0_1", 3), "0_1_2": ("0_1_2", 7), "all": ("ALL", 0xFFFF)}
_BY_VALUE = {value: name for name, (_, value) in CORE_MASKS.items()}

DEFAULT_LIBRKNNRT = "/usr/lib/librknnrt.so"      # rknn-toolkit-lite2 2.5.0's default (rknn_runtime)
# get_sdk_version's block: "  API: 2.5.0 (hash@date)" (librknnrt) and "  DRV: 0.9.8" (the kernel driver;
# with the rknn_server proxy the DRV lines carry "rknnrt:"/"rknn_server:" prefixes)
_SDK_FIELD = re.compile(r"^\s*(API|DRV):\s*(?:rknnrt:\s*)?(\S+)", re.MULTILINE)
NOT_ON_BOARD = ("the rknnlite runtime (rknn-toolkit-lite2) is not installed: this is not an RK3588 board "
                "with the NPU runtime. Use --backend onnxruntime off the board")


def parse_core_mask(value) -> str:
    """Normalise the core_mask option to a CORE_MASKS name, or raise ConfigError naming the option."""
    if isinstance(value, bool):
        pass  # bool is an int subclass; True must not silently mean core 0
    elif isinstance(value, int):
        if value in _BY_VALUE:
            return _BY_VALUE[value]
    elif isinstance(value, str):
        name = value.strip().lower().removeprefix("npu_core_")
        if name in CORE_MASKS:
            return name
    raise ConfigError(f"rknnlite backend option 'core_mask' is {value!r}: expected one of "
                      f"{', '.join(repr(n) for n in CORE_MASKS)} or a raw mask in "
                      f"{sorted(_BY_VALUE)}")


def load_runtime():
    """Import the board runtime's RKNNLite class, or raise BackendError saying this is not the board."""
    try:
        from rknnlite.api import RKNNLite
    except (ImportError, OSError) as exc:  # OSError: wheel present but its librknnrt.so cannot load
        raise BackendError(f"rknnlite: {NOT_ON_BOARD} ({exc})") from exc
    return RKNNLite


def runtime_library() -> Path:
    """The librknnrt.so the runtime will open: $LIBRKNNRT_PATH when set, as the runtime itself reads it."""
    return Path(os.environ.get("LIBRKNNRT_PATH") or DEFAULT_LIBRKNNRT)


def parse_sdk_version(text: str | None) -> dict:
    """{"api": librknnrt version, "driver": NPU driver version} from get_sdk_version()'s block."""
    fields: dict[str, str] = {}
    for key, value in _SDK_FIELD.findall(text or ""):
        fields.setdefault({"API": "api", "DRV": "driver"}[key], value)
    return fields


_OUTPUT_LOCK = threading.Lock()     # the descriptors are the process's: one call redirects them at a time
_sink: io.BufferedRandom | None = None


_libc: Any = None


def _flush_all() -> None:
    global _libc
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):      # librknnrt's printf: C stdio buffers, not Python's
        _libc = _libc or ctypes.CDLL(None)
        _libc.fflush(None)


@contextlib.contextmanager
def runtime_output(kept: list[str]):
    """Run the block with everything printed (on fd 1 and 2, C or Python) appended to `kept` instead."""
    global _sink
    with _OUTPUT_LOCK:
        if _sink is None:
            _sink = tempfile.TemporaryFile()
        _flush_all()
        saved = (os.dup(1), os.dup(2))
        streams = (sys.stdout, sys.stderr)
        text = io.TextIOWrapper(open(_sink.fileno(), "wb", buffering=0, closefd=False), write_through=True,
                                errors="replace")
        try:
            os.dup2(_sink.fileno(), 1)
            os.dup2(_sink.fileno(), 2)
            sys.stdout = sys.stderr = text
            yield
        finally:
            _flush_all()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            text.detach()
            _sink.seek(0)
            kept.append(_sink.read().decode(errors="replace"))
            _sink.seek(0)
            _sink.truncate()


class RknnLiteContext(Context):
    backend_name = "rknnlite"

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        return {"core_mask": parse_core_mask(values.get("core_mask") or "auto")}

    def __init__(self, label: str, options: BackendOptions | None = None):
        super().__init__(label, options)
        self.core_mask_name = parse_core_mask(self.options.get("core_mask", "auto"))
        try:
            self._api = load_runtime()
        except BackendError as exc:
            raise BackendError(f"rknnlite: {label}: {NOT_ON_BOARD} ({exc.__cause__})") from exc
        self.core_mask = getattr(self._api, f"NPU_CORE_{CORE_MASKS[self.core_mask_name][0]}")
        self._rknn: Any = None          # an RKNNLite once loaded (the board's runtime: no stubs)
        self._initialised = False
        self._output = ""               # what the runtime printed during the last call

    def load(self, path: Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise self.error("load", f"subgraph file {path} not found")
        rknn = self._call("load", lambda: self._api(verbose=False))
        ret = self._call("load", lambda: rknn.load_rknn(str(path)), cleanup=rknn)
        if ret != 0:
            # A context that never loaded is not live: free the runtime object here, nobody else will.
            rknn.release()
            raise self.error("load", f"load_rknn({path}) returned {ret}")
        self._rknn = rknn
        self._mark_live()

    def init(self) -> None:
        if self._rknn is None:
            raise self.error("init", "no model loaded (call load first)")
        ret = self._call("init", lambda: self._rknn.init_runtime(core_mask=self.core_mask))
        if ret != 0:
            library = runtime_library()
            missing = "" if library.is_file() else (f"; {library} does not exist: install librknnrt.so "
                                                     "there or set LIBRKNNRT_PATH to it")
            raise self.error("init", f"init_runtime(core_mask={self.core_mask_name}) returned {ret}{missing}")
        self._initialised = True

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if not self._initialised:
            raise self.error("run", "context not initialised (call load and init first)")
        # Both explicit: data_type's documented default is uint8, and the runtime refuses an input whose
        # dtype differs from its entry, so each input names its own; a 4-D input without data_format is
        # read as NHWC, ours are NCHW (the decoder's latent). data_format is ignored for other ranks.
        arrays = [np.asarray(a) for a in inputs]
        data_type = [a.dtype.name for a in arrays]
        outputs = self._call("run", lambda: self._rknn.inference(inputs=arrays, data_type=data_type,
                                                                 data_format="nchw"))
        if outputs is None:
            raise self.error("run", f"inference() returned None for {len(inputs)} inputs "
                                    "(the runtime's own output names the cause)")
        return list(outputs)

    def sdk_versions(self) -> dict:
        """librknnrt ("api") and NPU driver ("driver") versions of this initialised context."""
        if not self._initialised:
            raise self.error("init", "get_sdk_version needs an initialised context (call load and init first)")
        text = self._call("init", self._rknn.get_sdk_version)
        versions = parse_sdk_version(text)
        if not versions:
            raise self.error("init", f"get_sdk_version() returned {text!r}: no API/DRV versions in it")
        return versions

    def release(self) -> None:
        rknn, self._rknn, self._initialised = self._rknn, None, False
        try:
            if rknn is not None:
                self._call("release", rknn.release)
        finally:
            self._mark_released()

    def _call(self, stage: str, fn, cleanup=None):
        # The documented API does not raise, but a broken install can: keep the one-error-per-stage contract.
        kept: list[str] = []
        try:
            with runtime_output(kept):
                result = fn()
        except Exception as exc:
            self._output = "".join(kept)
            if cleanup is not None:
                cleanup.release()
            raise self.error(stage, f"{type(exc).__name__}: {exc}") from exc
        self._output = "".join(kept)
        return result

    def error(self, stage: str, detail: str) -> BackendError:
        """The stage's one line; the runtime's own output of the failing call rides along into the report."""
        output, self._output = self._output.strip(), ""
        exc = super().error(stage, detail + ("; rknn-toolkit-lite2's own output is the run report's runtime_log"
                                             if output else ""))
        exc.runtime_log = output
        return exc
