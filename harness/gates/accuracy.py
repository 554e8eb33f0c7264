"""Per-subgraph accuracy across a whole denoise: what rknn-toolkit2's `accuracy_analysis` does for one
model, done for every subgraph at every step of a real generation.

The generation runs on the backend under test; an observer on the pipeline takes each invocation's
inputs exactly as the backend got them, runs the FP32 reference subgraph (onnxruntime on the FP32
export of the same weights) on those inputs, and compares the outputs. Errors therefore do not
accumulate from earlier subgraphs: each row is that one subgraph's own error at that step.

Metrics per invocation (all CFG streams together):
    cosine       cosine similarity of the flattened outputs (1 = same direction), NaN if either is
                 not finite
    max_rel_err  max |out - ref| / max |ref|: relative to the reference's largest magnitude, since an
                 element-wise ratio is meaningless where the reference crosses zero

The first invocation (in execution order) whose cosine falls below the threshold is named, and its
inputs, both outputs and what ran it are saved, so `harness accuracy --replay DIR` reproduces it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError, NumericsError
from ..core.schema import read_json
from ..runtime.pipeline import Invocation, batch_of

__all__ = ["Row", "cosine", "max_rel_err", "ReferenceSubgraphs", "AccuracyAnalysis", "worst_first",
           "per_subgraph", "analyze", "replay", "DEFAULT_THRESHOLD"]

DEFAULT_THRESHOLD = 0.9999      # the FP16 bar of issue 7 (simulator vs onnxruntime FP32 cosine)
REPRO_FILE = "repro.json"


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b) / (na * nb))


def max_rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    scale = np.max(np.abs(ref)) if ref.size else 0.0
    with np.errstate(invalid="ignore"):
        err = np.max(np.abs(out - ref)) if out.size else 0.0
    if not np.isfinite(err):
        return float("inf")
    return float(err / scale) if scale > 0 else float(err)


@dataclass(frozen=True)
class Row:
    step: int
    subgraph: int
    block: int | None
    branch: str
    cosine: float
    max_rel_err: float
    max_abs_err: float

    @property
    def label(self) -> str:
        return f"subgraph {self.subgraph} (block {self.block} {self.branch})"

    def fails(self, threshold: float) -> bool:
        return not self.cosine >= threshold       # NaN fails too


def run_streams(run, entry, inputs, streams: int) -> np.ndarray:
    """Run all streams through one context: once for a batch-S subgraph, per stream for batch 1."""
    if batch_of(entry) == streams:
        return np.asarray(run(list(inputs))[0], dtype=np.float32)
    return np.concatenate([np.asarray(run([a[k:k + 1] for a in inputs])[0], dtype=np.float32)
                           for k in range(streams)])


class ReferenceSubgraphs:
    """FP32 reference sessions (onnxruntime) of a partition, one per subgraph, kept for the run:
    a reference is not on the board's lifecycle, so it is not loaded and released per step."""

    def __init__(self, manifest):
        if manifest.export.get("dtype") != "float32" or manifest.export.get("fake_quant"):
            raise ConfigError(f"--reference {manifest.directory}: the reference must be a plain FP32 "
                              f"export, this one is {manifest.export.get('dtype')}")
        self.manifest = manifest
        self._sessions: dict[int, object] = {}

    def _session(self, index: int):
        if index not in self._sessions:
            import onnxruntime as ort

            from ..backends.onnxruntime import session_options
            entry = next(e for e in self.manifest.entries() if e.index == index)
            self.manifest.verify_entry(entry)
            self._sessions[index] = (entry, ort.InferenceSession(
                str(self.manifest.path_of(entry)), sess_options=session_options(1),
                providers=["CPUExecutionProvider"]))
        return self._sessions[index]

    def run(self, index: int, inputs, streams: int) -> np.ndarray:
        entry, session = self._session(index)
        names = [i.name for i in session.get_inputs()]
        as32 = [np.asarray(a, dtype=np.float32) for a in inputs]
        return run_streams(lambda xs: session.run(None, dict(zip(names, xs))), entry, as32, streams)

    def close(self) -> None:
        self._sessions.clear()


class AccuracyAnalysis:
    """Pipeline observer: one Row per invocation; the first failing invocation saved under `save_dir`."""

    def __init__(self, reference: ReferenceSubgraphs, threshold: float, save_dir: Path | None,
                 describe: dict):
        self.reference = reference
        self.threshold = threshold
        self.save_dir = save_dir
        self.describe = describe        # backend, options, partition, ... for the replay file
        self.rows: list[Row] = []
        self.first_failure: Row | None = None
        self.repro: Path | None = None

    def __call__(self, inv: Invocation) -> None:
        entry = inv.entry
        ref = self.reference.run(entry.index, inv.inputs, len(inv.streams))
        out = inv.output
        with np.errstate(invalid="ignore", over="ignore"):
            abs_err = float(np.max(np.abs(out.astype(np.float64) - ref)))
        row = Row(inv.step, entry.index, entry.block, entry.branch, cosine(out, ref),
                  max_rel_err(out, ref), abs_err if np.isfinite(abs_err) else float("inf"))
        self.rows.append(row)
        if self.first_failure is None and row.fails(self.threshold):
            self.first_failure = row
            if self.save_dir is not None:
                self.repro = self._save(inv, ref, row)

    def _save(self, inv: Invocation, ref: np.ndarray, row: Row) -> Path:
        assert self.save_dir is not None        # observe() saves only with a save_dir
        folder = self.save_dir / f"step{inv.step:02d}-subgraph{row.subgraph:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for spec, array in zip(inv.entry.inputs, inv.inputs):
            np.save(folder / f"input_{spec.name}.npy", array, allow_pickle=False)
            files.append(f"input_{spec.name}.npy")
        np.save(folder / "output_backend.npy", inv.output, allow_pickle=False)
        np.save(folder / "output_reference.npy", ref, allow_pickle=False)
        atomic_write_json(folder / REPRO_FILE, {
            **self.describe, "subgraph": row.subgraph, "label": row.label, "step": inv.step,
            "sigma": inv.sigma, "streams": list(inv.streams), "inputs": files,
            "threshold": self.threshold, "cosine": row.cosine, "max_rel_err": row.max_rel_err})
        return folder


def _order(row: Row) -> tuple:
    return (row.cosine if np.isfinite(row.cosine) else -np.inf, -row.max_rel_err)


def worst_first(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=_order)


def per_subgraph(rows: list[Row]) -> dict[int, Row]:
    """Each subgraph's worst step."""
    worst: dict[int, Row] = {}
    for row in rows:
        if row.subgraph not in worst or _order(row) < _order(worst[row.subgraph]):
            worst[row.subgraph] = row
    return dict(sorted(worst.items()))


def rows_as_dicts(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


# ---------------------------------------------------------------- a whole analysed generation

def _clear_old_repros(folder: Path) -> None:
    """Drop failure folders a previous analysis saved here (only those: they hold repro.json)."""
    import shutil
    for old in folder.glob("step*-subgraph*"):
        if (old / REPRO_FILE).is_file():
            shutil.rmtree(old)


def analyze(request, reference_dir, threshold: float, out_dir):
    """Run `request` (a runtime.run.RunRequest: the partition, its backend options, the prompt and its
    SampleSettings), comparing every invocation with the FP32 reference.

    Returns (analysis, error): a run stopped by NaN/Inf (NumericsError) still returns its rows up to
    that invocation, with the error; other failures raise. Writes OUT/accuracy.json, OUT/run.json and
    the first failure's folder under OUT/repro/.
    """
    from ..partition.manifest import manifest_sha256
    from ..runtime.run import open_partition, run_partitioned
    bundle, partition, options = request.bundle, request.partition, request.options
    out_dir = Path(out_dir)
    reference = ReferenceSubgraphs(open_partition(bundle, reference_dir, verify=True))
    repro_dir = out_dir / "repro"
    _clear_old_repros(repro_dir)
    describe = {"backend": options.backend, "backend_options": options.as_dict(),
                "partition": str(Path(partition).resolve()), "reference": str(Path(reference_dir).resolve()),
                "model_dir": str(Path(bundle.model_dir).resolve())}
    analysis = AccuracyAnalysis(reference, threshold, repro_dir, describe)
    error = None
    try:
        result = run_partitioned(request, report_path=out_dir / "run.json", observers=[analysis])
        report = result.report
    except NumericsError as exc:
        error = exc
        report = {}
    finally:
        reference.close()
    atomic_write_json(out_dir / "accuracy.json", {
        "backend": options.backend, "backend_options": options.as_dict(), "partition": describe["partition"],
        "manifest_sha256": manifest_sha256(partition), "reference": describe["reference"],
        "prompt": request.prompt, "settings": request.settings.as_dict(), "threshold": threshold,
        "error": str(error) if error else None,
        "first_failure": asdict(analysis.first_failure) if analysis.first_failure else None,
        "repro": str(analysis.repro) if analysis.repro else None,
        "lifecycle_pass": report.get("tables", {}).get("lifecycle_pass"),
        "rows": rows_as_dicts(analysis.rows)})
    return analysis, error


# ---------------------------------------------------------------- replay of a saved failure

def replay(folder: Path) -> Row:
    """Run a saved failing invocation again: the backend on the saved inputs against the reference."""
    from ..backends.base import BackendOptions
    from ..lifecycle.split import context_for
    from ..partition.manifest import load_manifest
    folder = Path(folder)
    path = folder / REPRO_FILE
    if not path.exists():
        raise ConfigError(f"--replay {folder}: no {REPRO_FILE} (a folder that `harness accuracy` saved)")
    saved = read_json(path, "repro record")
    manifest = load_manifest(saved["partition"])
    entry = next((e for e in manifest.subgraphs if e.index == saved["subgraph"]), None)
    if entry is None:
        raise ConfigError(f"{path}: partition {manifest.directory} has no subgraph {saved['subgraph']}")
    manifest.verify_entry(entry)
    inputs = [np.load(folder / name, allow_pickle=False) for name in saved["inputs"]]
    streams = len(saved["streams"])
    ctx = context_for(BackendOptions(saved["backend"], saved.get("backend_options", {})), entry.label,
                      manifest.path_of(entry))
    try:
        ctx.load(manifest.path_of(entry))
        ctx.init()
        out = run_streams(ctx.run, entry, inputs, streams)
    finally:
        ctx.release()
    reference = ReferenceSubgraphs(load_manifest(saved["reference"]))
    ref = reference.run(entry.index, inputs, streams)
    with np.errstate(invalid="ignore", over="ignore"):
        abs_err = float(np.max(np.abs(out.astype(np.float64) - ref)))
    return Row(saved["step"], entry.index, entry.block, entry.branch, cosine(out, ref),
               max_rel_err(out, ref), abs_err if np.isfinite(abs_err) else float("inf"))


