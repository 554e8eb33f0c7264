"""Calibration capture for INT8 conversion: chosen subgraphs' inputs, at chosen steps and streams,
taken from a real FP32 generation (an observer on the pipeline, not a second forward).

The board's recipe (boards/data/rock5c-anima.toml [calibration]) is {high sigma, low sigma} x
{cond, uncond} = 4 sets per block, 112 for the 28 FFNs. One set is one stream's inputs to one
subgraph at one step. A subgraph exported for S streams takes [S, ...] inputs, and the toolkit's
dataset samples must have the model's input shape, so a set repeats its one stream S times along the
batch axis: per-tensor activation statistics (min/max, histograms) of S copies are those of one.

Output directory (written whole or not at all):
    calibration.json          the record: model, partition, manifest hash, generation, and per
                              subgraph every set's step, sigma, stream, input files, shapes, sha256
    NN_blockBB_BRANCH.txt     the toolkit's dataset list for that subgraph: one line per set,
                              .npy paths separated by spaces, in the model's input order; relative
                              to this directory, so it can move (`harness convert` hands the
                              toolkit an absolute copy: the toolkit resolves from its own cwd)
    NN_blockBB_BRANCH/        the .npy files (float32, the FP32 export's input shapes)
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_directory, atomic_write_json, atomic_write_text
from ..core.errors import ConfigError
from ..core.schema import read_json
from ..model.config import BRANCHES
from ..sampling.settings import SampleSettings
from .pipeline import Invocation

__all__ = ["FORMAT", "RECORD_FILE", "PRESETS", "parse_steps", "parse_branches", "parse_streams",
           "CaptureRecipe", "capture_calibration", "load_calibration"]

FORMAT = "anima-calibration/1"
RECORD_FILE = "calibration.json"
STEP_NAMES = ("high", "mid", "low")


# Named recipes for `capture-calibration --preset`. "board-112" is the board's ({high, low} sigma x
# {cond, uncond}: 4 sets per FFN, 112 for 28); it leaves the middle of the schedule outside the INT8
# ranges. "full-schedule" stratifies over sigma: 8 steps whose sigmas are evenly spaced from the
# first to the last network step, both streams at each (16 sets per FFN).
PRESETS = {
    "board-112": {"branches": "ffn", "steps": "high,low", "streams": "cond,uncond"},
    "full-schedule": {"branches": "ffn", "steps": "strata:8", "streams": "cond,uncond"},
}


def strata_steps(count: int, sigmas) -> list[int]:
    """`count` steps whose sigmas are evenly spaced over the steps that run the network (sigmas has
    steps + 1 levels; the last, 0, runs nothing): the step nearest to each target level."""
    levels = np.asarray(sigmas[:-1], dtype=np.float64)
    targets = np.linspace(levels[0], levels[-1], min(count, len(levels)))
    return sorted({int(np.argmin(np.abs(levels - t))) for t in targets})


def parse_steps(text: str, steps: int, shift: float = 3.0) -> list[int]:
    """'high,low' -> [0, steps-1]: high sigma is the first step, low sigma the last one that still
    runs the network (the schedule ends at sigma 0); 'mid' is steps // 2; numbers are steps;
    'strata:N' is N steps evenly spaced in sigma over the schedule of `steps` steps and `shift`."""
    chosen: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.startswith("strata:"):
            from ..sampling.flow import flow_sigmas
            count = part.removeprefix("strata:")
            if not count.isdigit() or int(count) < 1:
                raise ConfigError(f"--steps '{text}': '{part}' needs a positive count (strata:8)")
            chosen.extend(s for s in strata_steps(int(count), flow_sigmas(steps, shift)) if s not in chosen)
            continue
        if part in STEP_NAMES:
            step = {"high": 0, "mid": steps // 2, "low": steps - 1}[part]
        else:
            try:
                step = int(part)
            except ValueError:
                raise ConfigError(f"--steps '{text}': '{part}' is not high, mid, low or a step number") from None
            if not 0 <= step < steps:
                raise ConfigError(f"--steps '{text}': step {step} is outside 0..{steps - 1} "
                                  f"of a {steps}-step generation")
        if step not in chosen:
            chosen.append(step)
    if not chosen:
        raise ConfigError(f"--steps '{text}': name at least one step")
    return sorted(chosen)


def parse_branches(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if names == ["all"]:
        return list(BRANCHES)
    unknown = [n for n in names if n not in BRANCHES]
    if unknown or not names:
        raise ConfigError(f"--branches '{text}': choose from {', '.join(BRANCHES)} or all")
    return [b for b in BRANCHES if b in names]


def parse_streams(text: str, available: list[str]) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise ConfigError(f"--streams '{text}': this generation has streams {', '.join(available)}"
                          + (" (CFG 1 runs no uncond stream)" if "uncond" in unknown else ""))
    return [s for s in available if s in names]


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


class CalibrationCapture:
    """Pipeline observer: saves the chosen invocations' inputs, one set per stream, into `staging`
    (the directory being written, renamed into place at the end)."""

    def __init__(self, staging: Path, branches, steps, streams, blocks=None):
        self.staging = Path(staging)
        self.branches, self.steps, self.streams = set(branches), set(steps), list(streams)
        self.blocks = None if blocks is None else set(blocks)
        self.subgraphs: dict[int, dict] = {}

    def __call__(self, inv: Invocation) -> None:
        entry = inv.entry
        if entry.branch not in self.branches or inv.step not in self.steps:
            return
        if self.blocks is not None and entry.block not in self.blocks:
            return
        stem = Path(entry.file).stem
        record = self.subgraphs.setdefault(entry.index, {
            "index": entry.index, "block": entry.block, "branch": entry.branch, "source": entry.file,
            "dataset": f"{stem}.txt", "inputs": [s.to_dict() for s in entry.inputs], "sets": []})
        for stream in self.streams:
            k = inv.streams.index(stream)
            files = []
            for spec, array in zip(entry.inputs, inv.inputs):
                one = np.asarray(array[k:k + 1], dtype=np.float32)
                sample = np.repeat(one, spec.shape[0], axis=0)       # the model's input shape
                rel = f"{stem}/s{inv.step:02d}_{stream}_{spec.name}.npy"
                data = _npy_bytes(sample)
                (self.staging / rel).parent.mkdir(parents=True, exist_ok=True)
                (self.staging / rel).write_bytes(data)
                files.append({"name": spec.name, "file": rel, "shape": list(sample.shape),
                              "dtype": "float32", "sha256": hashlib.sha256(data).hexdigest()})
            record["sets"].append({"step": inv.step, "sigma": inv.sigma, "stream": stream, "inputs": files})

    def write_lists(self) -> None:
        """One dataset list per subgraph, in the model's input order, paths relative to it."""
        for record in self.subgraphs.values():
            lines = [" ".join(f["file"] for f in s["inputs"]) for s in record["sets"]]
            atomic_write_text(self.staging / record["dataset"], "\n".join(lines) + "\n")


@dataclass(frozen=True)
class CaptureRecipe:
    """Which invocations a capture keeps: branches, steps and streams (and blocks: None for all)."""
    branches: list[str]
    steps: list[int]
    streams: list[str]
    blocks: list[int] | None = None


def capture_calibration(bundle, partition, out, prompt: str, settings: SampleSettings, recipe: CaptureRecipe,
                        guard=None, text_embs: dict | None = None) -> dict:
    """Run one FP32 generation (onnxruntime) through `partition` and write the calibration directory `out`.
    Returns the record. Nothing is left under `out` if the run fails."""
    from ..partition.manifest import load_manifest, manifest_sha256
    from .run import RunRequest, run_partitioned
    manifest = load_manifest(partition)
    if manifest.export.get("dtype") != "float32" or manifest.export.get("fake_quant"):
        raise ConfigError(f"--partition {partition}: calibration is captured from an FP32 generation, "
                          f"this partition is {manifest.export.get('dtype')}"
                          + (f"+{manifest.export['fake_quant']}" if manifest.export.get("fake_quant") else ""))
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: already exists and is not empty; choose a new directory")
    with atomic_directory(out) as staging:
        branches, steps, streams, blocks = recipe.branches, recipe.steps, recipe.streams, recipe.blocks
        capture = CalibrationCapture(staging, branches, steps, streams, blocks)
        result = run_partitioned(
            RunRequest(bundle, partition, "onnxruntime", prompt, settings, text_embs=text_embs),
            guard=guard, observers=[capture])
        capture.write_lists()
        from ..sampling.flow import flow_sigmas
        sigmas = flow_sigmas(settings.steps, settings.shift)
        record = {
            "format": FORMAT, "model": bundle.cfg.name, "weights_sha256": bundle.digest,
            "partition": str(Path(partition).resolve()), "manifest_sha256": manifest_sha256(partition),
            "export": {k: manifest.export.get(k) for k in ("dtype", "streams", "opset")},
            "generation": {"prompt": prompt, **settings.as_dict(), "backend": "onnxruntime",
                           "denoise_seconds": result.report.get("denoise_seconds")},
            "recipe": {"branches": sorted(set(branches), key=BRANCHES.index), "steps": list(steps),
                       "sigmas": [float(sigmas[s]) for s in steps], "streams": list(streams),
                       "blocks": sorted(blocks) if blocks is not None else "all",
                       "batch_fill": "each set repeats its one stream along the batch axis"},
            "total_sets": sum(len(r["sets"]) for r in capture.subgraphs.values()),
            "subgraphs": [capture.subgraphs[i] for i in sorted(capture.subgraphs)],
        }
        atomic_write_json(staging / RECORD_FILE, record)
    return record


# ---------------------------------------------------------------- reading a capture back

@dataclass
class CalibrationSet:
    """A calibration directory, checked: the record and the dataset list of each subgraph."""
    directory: Path
    record: dict
    lists: dict[int, Path] = field(default_factory=dict)     # subgraph index -> dataset list

    def dataset_for(self, entry) -> Path:
        """The dataset list for a subgraph; a ConfigError naming it when the capture has none."""
        if entry.index not in self.lists:
            branches = ", ".join(self.record["recipe"]["branches"])
            raise ConfigError(f"calibration {self.directory}: no set for {entry.label} "
                              f"(captured branches: {branches}); capture it with "
                              f"`harness capture-calibration --branches {entry.branch}`")
        return self.lists[entry.index]


def load_calibration(directory, manifest=None) -> CalibrationSet:
    """Read and check a calibration directory: the record, every listed file present with its
    sha256, and (with `manifest`, the partition to be converted) the same weights and input shapes."""
    directory = Path(directory)
    path = directory / RECORD_FILE
    if not path.is_file():
        raise ConfigError(f"calibration {directory}: no {RECORD_FILE} (make one with "
                          f"`harness capture-calibration --out {directory}`)")
    record = read_json(path, "calibration record")
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a calibration record ({FORMAT})")
    if manifest is not None and record.get("weights_sha256") != manifest.weights_sha256:
        raise ConfigError(f"{path}: captured from other weights than partition {manifest.directory} "
                          f"(sha256 {str(record.get('weights_sha256'))[:12]}..., partition "
                          f"{manifest.weights_sha256[:12]}...)")
    found = CalibrationSet(directory, record)
    for sub in record.get("subgraphs", []):
        where = f"calibration {directory}: subgraph {sub.get('index')} (block {sub.get('block')} {sub.get('branch')})"
        if manifest is not None:
            entry = next((e for e in manifest.subgraphs if e.index == sub.get("index")), None)
            want = [list(s.shape) for s in entry.inputs] if entry else None
            have = [i["shape"] for i in sub["inputs"]]
            if entry is None or want != have:
                raise ConfigError(f"{where}: inputs {have} do not fit partition {manifest.directory} "
                                  f"({want if entry else 'no such subgraph'})")
        lst = directory / sub["dataset"]
        if not lst.is_file():
            raise ConfigError(f"{where}: dataset list {lst} is missing")
        for s in sub["sets"]:
            for f in s["inputs"]:
                npy = directory / f["file"]
                if not npy.is_file():
                    raise ConfigError(f"{where}: {npy} is missing")
                if hashlib.sha256(npy.read_bytes()).hexdigest() != f["sha256"]:
                    raise ConfigError(f"{where}: {npy} fails its checksum")
        _check_list(lst, sub, where)
        found.lists[sub["index"]] = lst
    return found


def _check_list(lst: Path, sub: dict, where: str) -> None:
    # The list is what the toolkit reads: it must name exactly the recorded sets, in input order.
    want = [[f["file"] for f in s["inputs"]] for s in sub["sets"]]
    have = [line.split() for line in lst.read_text(encoding="utf-8").splitlines() if line.strip()]
    if have != want:
        raise ConfigError(f"{where}: dataset list {lst} disagrees with {RECORD_FILE} "
                          f"(edited by hand? capture again)")
