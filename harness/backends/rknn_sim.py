"""The toolkit's PC simulator as a backend (`--backend rknn-sim`): the converted partition's subgraphs,
run off the board by rknn-toolkit2 itself.

The simulator only runs models built in the same process (docs/architecture.md section 8), so a `.rknn`
file cannot simply be loaded. One long-lived worker per toolkit version (harness/toolkit/remote/sim_server.py,
run by that toolkit environment's python) builds each subgraph from its source ONNX with the settings
`harness convert` recorded in the partition's manifest (`conversion.config` and the subgraph's
`quantization`), checks the rebuilt model against the `.rknn` file it stands for, and keeps it
initialised. Its toolkit version must be the one the partition was converted with.

Lifecycle, as the lifecycle module times it for every backend:
    load     the first time per model: build + export + compare with the .rknn (~0.3-3 s);
             afterwards a cache hit (one pipe round trip)
    init     the first time: init_runtime() of the simulator; afterwards a cache hit
    run      one simulator inference, inputs and outputs as .npy bytes over the pipe
    release  the context is released; the worker keeps the built model for the next step
So on rknn-sim only step 0's load/init say anything about building; the board's load_rknn and
init_runtime costs are not simulated. `run` is the simulator's CPU time, not the NPU's.

Options: none. The toolkit version and every build setting come from the partition's manifest.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from ..core.errors import BackendError, ConfigError, ManifestError, ToolkitError
from ..core.schema import read_json
from ..core.signals import group_signals_blocked
from ..partition.declared import rknn_version
from ..toolkit.remote.framing import read_frame, write_frame
from .base import BackendOptions, Context

__all__ = ["RknnSimContext", "worker_for", "shutdown_workers", "conversion_record"]

SERVER = Path(__file__).resolve().parent.parent / "toolkit" / "remote" / "sim_server.py"


# ---------------------------------------------------------------- the worker process

class SimWorker:
    """One sim_server.py process of one toolkit version; requests are serialised by a lock."""

    def __init__(self, version: str):
        from ..toolkit.envs import toolkit_python
        self.version = version
        python = toolkit_python(version)        # ToolkitError naming bin/toolkit-env when absent
        self.log_path = Path(tempfile.mkstemp(prefix=f"anima-rknn-sim-{version}-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")
        self._lock = threading.Lock()
        # The terminal's group signals (Ctrl-C, a hang-up) are the run's to handle: it releases its
        # contexts through this server and then stops it.
        with group_signals_blocked():
            self.proc = subprocess.Popen([str(python), str(SERVER)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log)
        hello, _ = self.request({"op": "hello"})
        if hello.get("toolkit") != version:
            self.close()
            raise ToolkitError(f"rknn-sim: environment {version} runs rknn-toolkit2 {hello.get('toolkit')}")
        self.pid = hello["pid"]

    def request(self, header: dict, arrays=()) -> tuple[dict, list[np.ndarray]]:
        with self._lock:
            if self.proc.poll() is not None:
                raise self._died()
            try:
                write_frame(self.proc.stdin, header, arrays)
                return read_frame(self.proc.stdout)
            except (BrokenPipeError, EOFError):
                raise self._died() from None

    def _died(self) -> BackendError:
        code = self.proc.wait()
        tail = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        return BackendError(f"rknn-sim: the rknn-toolkit2 {self.version} simulator process exited "
                            f"(code {code})" + (f": {tail[0].strip()[:300]}" if tail else "")
                            + f" (log: {self.log_path})")

    def stats(self) -> dict:
        return self.request({"op": "stats"})[0]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.request({"op": "quit"})
            except BackendError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream:
                stream.close()
        self._log.close()
        if self.proc.returncode == 0:       # a clean stop: its log holds only the toolkit's chatter
            self.log_path.unlink(missing_ok=True)


_workers: dict[str, SimWorker] = {}
_workers_lock = threading.Lock()


def worker_for(version: str) -> SimWorker:
    """The session's worker for a toolkit version, started on first use."""
    with _workers_lock:
        worker = _workers.get(version)
        if worker is None or worker.proc.poll() is not None:
            worker = _workers[version] = SimWorker(version)
        return worker


def shutdown_workers() -> None:
    """Stop every worker (and so free every built model); the next load starts afresh."""
    with _workers_lock:
        while _workers:
            _, worker = _workers.popitem()
            worker.close()


atexit.register(shutdown_workers)


# ---------------------------------------------------------------- what a .rknn file stands for

_manifests: dict[tuple, dict] = {}
_hashes: dict[tuple, str] = {}


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _hashes:
        with open(path, "rb") as fh:
            _hashes[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return _hashes[key]


def _manifest_json(directory: Path) -> dict:
    path = directory / "manifest.json"
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"rknn-sim: {directory} has no manifest.json (a partition from `harness convert`)") from None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _manifests:
        _manifests[key] = read_json(path, "manifest")
    return _manifests[key]


def conversion_record(rknn_path: Path) -> dict:
    """{version, onnx, onnx_sha256, config, rknn_sha256, key} for a .rknn of a converted partition."""
    rknn_path = Path(rknn_path)
    data = _manifest_json(rknn_path.parent)
    conversion = data.get("conversion")
    if not conversion:
        raise ConfigError(f"rknn-sim: {rknn_path.parent / 'manifest.json'} is not a converted partition "
                          f"(no `conversion` table): convert it with `harness convert`")
    record = next((r for r in conversion.get("subgraphs", []) if r.get("file") == rknn_path.name), None)
    entry = next((e for e in [*data.get("subgraphs", []), data.get("decoder") or {}]
                  if e.get("file") == rknn_path.name), None)
    source = Path(conversion["source"]["directory"])
    if record is None:      # an NPU part of a split subgraph (toolkit/split.py): its ONNX is beside it
        record = next((p for r in conversion.get("subgraphs", []) for p in (r.get("split") or {}).get("parts", [])
                       if p.get("file") == rknn_path.name), None)
        entry, source = record, rknn_path.parent
    if record is None or entry is None:
        raise ConfigError(f"rknn-sim: {rknn_path.name} is not listed in the conversion record of "
                          f"{rknn_path.parent / 'manifest.json'}")
    built_by = rknn_version(rknn_path)
    if built_by != conversion["toolkit_version"]:       # before choosing the environment by the claim
        raise ManifestError(f"rknn-sim: {rknn_path} was built by rknn-toolkit2 {built_by}, the conversion "
                            f"record of {rknn_path.parent / 'manifest.json'} says {conversion['toolkit_version']}")
    onnx = source / record["onnx_file"]
    if not onnx.is_file():
        raise ConfigError(f"rknn-sim: {rknn_path.name} was converted from {onnx}, which is gone: the "
                          f"simulator rebuilds each subgraph from its source ONNX")
    if _sha256(onnx) != record["onnx_sha256"]:
        raise ConfigError(f"rknn-sim: {onnx} has changed since {rknn_path.name} was converted from it "
                          f"(sha256 differs from the conversion record)")
    # a subgraph's own settings (a remedy of `harness reduce`: op_target) were built into its .rknn
    config = {**conversion["config"], **{k: v for k, v in record.get("settings", {}).items() if k != "split"},
              "quantization": _quantization(record.get("quantization"), rknn_path)}
    identity = json.dumps({"onnx": record["onnx_sha256"], "rknn": entry["sha256"],
                           "config": {**config, "quantization": _identity(config["quantization"])}},
                          sort_keys=True)
    return {"version": conversion["toolkit_version"], "onnx": str(onnx), "config": config,
            "rknn_sha256": entry["sha256"], "key": hashlib.sha256(identity.encode()).hexdigest()[:24]}


_datasets: dict[str, Path] = {}


def _quantization(quant: dict | None, rknn_path: Path) -> dict | None:
    """The recorded INT8 settings, with the dataset list as an absolute-path copy (the toolkit resolves
    list entries from its working directory)."""
    if not quant:
        return None
    dataset = Path(quant["dataset"])
    if not dataset.is_file():
        raise ConfigError(f"rknn-sim: {rknn_path.name} was calibrated from {dataset}, which is gone: "
                          f"the simulator rebuilds INT8 subgraphs from their calibration set")
    from ..toolkit.precisions import absolute_dataset
    if str(dataset) not in _datasets:
        scratch = Path(tempfile.mkdtemp(prefix="anima-rknn-sim-datasets-"))
        atexit.register(lambda: __import__("shutil").rmtree(scratch, ignore_errors=True))
        _datasets[str(dataset)] = absolute_dataset(dataset, scratch / dataset.name)
    return {**quant, "dataset": str(_datasets[str(dataset)]), "dataset_sha256": _sha256(dataset)}


def _identity(quant: dict | None) -> dict | None:
    # The cache key must not depend on where the scratch copy of the dataset list lives.
    return None if quant is None else {k: v for k, v in quant.items() if k != "dataset"}


# ---------------------------------------------------------------- the context

class RknnSimContext(Context):
    backend_name = "rknn-sim"
    # --calibration picks the set a w8a8-ffn conversion is made from (harness/runtime/converted.py).
    exclusive_options = ("calibration",)

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        if values.get("calibration") is not None and values.get("precision") != "w8a8-ffn":
            raise ConfigError(f"--calibration {values['calibration']}: goes with --precision w8a8-ffn")
        return {}           # contexts take none: every build setting comes from the manifest

    def __init__(self, label: str, options: BackendOptions | None = None):
        if options is not None and options.settings:
            raise ConfigError(f"rknn-sim backend takes no options (got {', '.join(sorted(options.settings))}): "
                              f"the toolkit version and build settings come from the partition's manifest")
        super().__init__(label, options)
        self._worker: SimWorker | None = None
        self._key: str | None = None
        self._inited = False

    def load(self, path: Path) -> None:
        try:
            record = conversion_record(Path(path))
            worker = worker_for(record["version"])
        except (ConfigError, ToolkitError) as exc:
            raise self.error("load", str(exc).removeprefix("rknn-sim: ")) from None
        self._ask(worker, "load", {"op": "load", "key": record["key"], "onnx": record["onnx"],
                                   "config": record["config"], "rknn": str(Path(path).resolve())})
        self._worker, self._key = worker, record["key"]
        self._mark_live()

    def init(self) -> None:
        if self._worker is None:
            raise self.error("init", "no model loaded (call load first)")
        self._ask(self._worker, "init", {"op": "init", "key": self._key})
        self._inited = True

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if not self._inited or self._worker is None:
            raise self.error("run", "context not initialised (call load and init first)")
        return self._ask(self._worker, "run", {"op": "run", "key": self._key}, inputs)[1]

    def release(self) -> None:
        if self._worker is not None and self._worker.proc.poll() is None:
            try:
                self._worker.request({"op": "release", "key": self._key})
            except BackendError:
                pass        # a dead worker holds nothing any more
        self._worker, self._key, self._inited = None, None, False
        self._mark_released()

    def _ask(self, worker: SimWorker, stage: str, header: dict, arrays=()):
        reply, outputs = worker.request(header, arrays)
        if not reply.get("ok"):
            raise self.error(stage, f"{reply.get('stage')}: {reply.get('detail')} (toolkit log: {worker.log_path})")
        return reply, outputs
