"""The toolkit side of the rknn-sim backend: one long-lived process, run by a toolkit environment's
python (`python sim_server.py`), serving the RKNN PC simulator over its stdin/stdout.

Imports only the standard library, numpy, rknn-toolkit2 and worker.py beside it, never the suite
(the toolkit pins numpy<=1.26.4). The simulator only runs models built in the same process
(docs/architecture.md section 8): so this process builds each subgraph from its ONNX file with the
conversion's recorded config (worker.build_rknn, the function `harness convert` built it with), checks
the rebuilt model against the .rknn it stands for, and keeps it, initialised, for the whole session.

Requests and replies are frames: a 4-byte big-endian length, a JSON header, then for each of the
header's `arrays` an 8-byte length and the bytes of one .npy file (numpy's own format: the suite's
numpy 2 and this numpy 1.26 both read it; pickles would not cross that gap).

ops (header "op"):
  hello                          -> toolkit version, pid
  load  key onnx config rknn     -> builds once per key (cached), compares with the .rknn file
                                    (rknn null: a probe model no .rknn stands for, not compared);
        [log]                       with a log path: a verbose build whose log (layer table) goes there
  graph onnx config dataset      -> the toolkit's own graph of the model (worker.toolkit_graph)
  init  key                      -> init_runtime() once per key (the simulator; no target)
  run   key [arrays]             -> inference outputs (float32); 4-D inputs as NCHW
  release key                    -> the model stays cached: a rebuild per step would cost
                                    20 x 84 builds; `evict` frees it for real
  stats                          -> models cached, resident memory
  quit
Replies: {"ok": true, ...} or {"ok": false, "stage": ..., "detail": ...}.
Everything the toolkit prints (Python and native) goes to stderr, which the suite sends to a log.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:       # the same files, as the type checker finds them inside the package
    from .framing import read_frame, write_frame
    from .worker import BuildFailed, build_rknn, redirected, toolkit_graph, toolkit_version
else:                   # run as a script by the toolkit's interpreter, without the package: its siblings
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from framing import read_frame, write_frame  # after the path they are found on
    from worker import BuildFailed, build_rknn, redirected, toolkit_graph, toolkit_version  # (after the path)

__all__ = ["serve"]

# The toolkit writes uninitialised heap bytes (pointer values) into every .rknn it exports, so two
# builds of one model never hash alike. Measured with 2.5.0 on the embedded model: 765-2,081 bytes
# differ between two builds (0.24 % of a 317 KB cross-attention, 2.7 % of the 78 KB decoder), all
# else identical. A model built from other weights differs in most of its weight bytes (block 1's
# FFN in place of block 0's: ~40 %), another precision or config in size. So a rebuild stands for
# the file when sizes match and at most MAX_DIFF_BYTES + MAX_DIFF_FRACTION of the bytes differ.
MAX_DIFF_BYTES = 8192
MAX_DIFF_FRACTION = 0.01


def compare_builds(rebuilt: bytes, recorded: bytes) -> tuple[bool, str]:
    """Does the rebuilt .rknn stand for the recorded one: same size, and differing only in the
    few scattered bytes the toolkit leaves uninitialised (see MAX_DIFF_BYTES)?"""
    if len(rebuilt) != len(recorded):
        return False, f"rebuilt model is {len(rebuilt)} bytes, the .rknn file {len(recorded)}"
    a = np.frombuffer(rebuilt, np.uint8)
    b = np.frombuffer(recorded, np.uint8)
    differing = int(np.count_nonzero(a != b))
    allowed = MAX_DIFF_BYTES + int(MAX_DIFF_FRACTION * len(a))
    detail = f"{differing} of {len(a)} bytes differ ({100 * differing / max(len(a), 1):.2f} %, allowed {allowed})"
    return differing <= allowed, detail


# The framing (read_frame / write_frame) is framing.py, shared with the suite side.


# ---------------------------------------------------------------- the cache of built models

class Models:
    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.built: dict[str, Any] = {}       # rknn.api.RKNN objects (the toolkit's own environment)
        self.inited: set[str] = set()

    def load(self, req: dict) -> dict:
        key = req["key"]
        if key in self.built:
            return {"built": False}
        started = time.perf_counter()
        if req.get("log"):      # the layer table (placement, the toolkit's cycle estimate) for the caller
            with redirected(req["log"]):
                rknn = build_rknn(req["onnx"], req["config"], verbose=True)
        else:
            rknn = build_rknn(req["onnx"], req["config"], verbose=False)
        seconds = time.perf_counter() - started
        if req.get("rknn") is None:
            self.built[key] = rknn
            return {"built": True, "build_seconds": round(seconds, 4), "compare": "not compared"}
        try:
            check = self._compare(rknn, key, Path(req["rknn"]))
        except BaseException:
            rknn.release()
            raise
        if not check[0]:
            rknn.release()
            raise BuildFailed("verify", f"the model built from {Path(req['onnx']).name} with the "
                                        f"recorded config does not match {req['rknn']}: {check[1]}")
        self.built[key] = rknn
        return {"built": True, "build_seconds": round(seconds, 4), "compare": check[1]}

    def _compare(self, rknn, key: str, recorded: Path) -> tuple[bool, str]:
        out = self.scratch / f"{key}.rknn"
        ret = rknn.export_rknn(str(out))
        if ret != 0:
            raise BuildFailed("export_rknn", f"returned {ret}")
        try:
            return compare_builds(out.read_bytes(), recorded.read_bytes())
        finally:
            out.unlink(missing_ok=True)

    def init(self, key: str) -> dict:
        if key in self.inited:
            return {"inited": False}
        ret = self._model(key).init_runtime()
        if ret != 0:
            raise BuildFailed("init_runtime", f"returned {ret}")
        self.inited.add(key)
        return {"inited": True}

    def run(self, key: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if key not in self.inited:
            raise BuildFailed("inference", "model not initialised (init first)")
        # The simulator refuses a 4-D input without a layout ("expect 'nhwc'"): ours are NCHW.
        formats = ["nchw" if a.ndim == 4 else None for a in arrays]
        outputs = self._model(key).inference(inputs=arrays, data_format=formats if any(formats) else None)
        if outputs is None:
            raise BuildFailed("inference", "returned None")
        return [np.asarray(o, dtype=np.float32) for o in outputs]

    def evict(self, key: str) -> None:
        rknn = self.built.pop(key, None)
        self.inited.discard(key)
        if rknn is not None:
            rknn.release()

    def _model(self, key: str):
        if key not in self.built:
            raise BuildFailed("lookup", f"model {key} was never loaded")
        return self.built[key]

    def close(self) -> None:
        for key in list(self.built):
            self.evict(key)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def serve(inp, out, scratch: Path) -> int:
    models = Models(scratch)
    try:
        while True:
            try:
                req, arrays = read_frame(inp)
            except EOFError:
                return 0
            op = req.get("op")
            try:
                if op == "hello":
                    write_frame(out, {"ok": True, "toolkit": toolkit_version(), "pid": os.getpid()})
                elif op == "load":
                    write_frame(out, {"ok": True, **models.load(req)})
                elif op == "graph":
                    write_frame(out, {"ok": True, "nodes": toolkit_graph(req["onnx"], req["config"],
                                                                         req["dataset"])})
                elif op == "init":
                    write_frame(out, {"ok": True, **models.init(req["key"])})
                elif op == "run":
                    write_frame(out, {"ok": True}, models.run(req["key"], arrays))
                elif op == "release":
                    write_frame(out, {"ok": True})
                elif op == "evict":
                    models.evict(req["key"])
                    write_frame(out, {"ok": True})
                elif op == "stats":
                    write_frame(out, {"ok": True, "models": len(models.built), "rss_bytes": _rss_bytes()})
                elif op == "quit":
                    write_frame(out, {"ok": True})
                    return 0
                else:
                    write_frame(out, {"ok": False, "stage": "protocol", "detail": f"unknown op {op!r}"})
            except BuildFailed as exc:
                write_frame(out, {"ok": False, "stage": exc.stage, "detail": exc.detail})
            except Exception as exc:  # the toolkit raises on some inputs instead of returning -1
                # Its messages can embed a whole traceback: the last line says what went wrong.
                lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [""]
                write_frame(out, {"ok": False, "stage": op,
                                  "detail": f"{type(exc).__name__}: {lines[-1]}"[:400]})
    finally:
        models.close()


def main() -> int:
    # Replies go to the real stdout, kept on a private descriptor; fd 1 then points at stderr so that
    # nothing the toolkit prints (from Python or native code) can corrupt a frame.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb")
    with tempfile.TemporaryDirectory(prefix="anima-rknn-sim-") as scratch:
        # The toolkit writes check*.onnx debugging files into its working directory: not the checkout.
        os.chdir(scratch)
        import rknn.api  # noqa: F401  (slow: torch, onnx; loaded before the first request)
        return serve(inp, out, Path(scratch))


if __name__ == "__main__":
    sys.exit(main())
