"""`harness convert`: an exported FP32 partition -> one .rknn per subgraph + manifest.json.

All subgraphs are built by one toolkit process (worker.py). The output is assembled in a temporary
directory beside --out and renamed into place only when every subgraph built and passed the
CPU-fallback gate, so a failure never leaves a half-written partition (a previous one at --out stays
as it was). The manifest keeps the partition format the board run already reads and verifies (each
.rknn file's name, size and sha256), plus a `conversion` table: toolkit version, target, precision,
the source ONNX hashes, per-subgraph build seconds and op placement, and the build log's hash.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic import atomic_path
from ..core.errors import ConfigError, ManifestError, StorageError, ToolkitError
from ..partition.manifest import Manifest, SubgraphEntry, load_manifest, manifest_sha256
from .envs import default_version, toolkit_python
from .layers import check_no_cpu_ops, cpu_fallbacks, parse_layer_table, register_overflow
from .precisions import absolute_dataset, precisions, quantization_for, recipe
from .process import run_worker
from .remedies import APPLIED_KEYS, REMEDY_FILE, for_build, read_remedies, remedy_quantization, with_islands
from .samples import sample_inputs
from .split import SPLIT_KEY, cut_parts, file_sha256, host_outputs, part_feeds, write_plan

__all__ = ["PRECISIONS", "DEFAULT_TARGET", "BUILD_LOG", "ConvertResult", "ConvertSettings", "convert_partition",
           "check_out", "sample_inputs"]

PRECISIONS = precisions()
DEFAULT_TARGET = "rk3588"
BUILD_LOG = "build.log"
RKNN_CONFIG = {"float_dtype": "float16", "optimization_level": 3}
SAMPLE_SEED = 0     # the simulator's random inputs: the same in every conversion (two toolkits compared)


@dataclass
class ConvertResult:
    manifest: Manifest
    version: str
    seconds: float
    build_seconds: dict[str, float]
    cpu_ops: dict[str, list[dict]]
    sim_outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)
    samples: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)


def _source(partition) -> Manifest:
    manifest = load_manifest(partition)
    manifest.verify()
    if manifest.conversion:
        raise ConfigError(f"{manifest.file}: already a converted partition; convert the exported "
                          f"ONNX partition it came from")
    dtype = manifest.export.get("dtype")
    if dtype != "float32" or manifest.export.get("fake_quant"):
        raise ConfigError(f"{manifest.file}: exported as {dtype}"
                          f"{' with fake quantisation' if manifest.export.get('fake_quant') else ''}; "
                          f"convert the plain FP32 export (bin/harness export --precision float32): "
                          f"the toolkit builds FP16 and INT8 itself")
    return manifest


def check_out(out: Path) -> None:
    """--out may be new, empty, or a previous conversion (replaced as a whole); nothing else."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_conversion(out))):
        raise ConfigError(f"--out {out} exists and is not a converted partition: choose another "
                          f"directory (convert replaces only its own output)")


def _is_conversion(directory: Path) -> bool:
    try:
        return bool(load_manifest(directory).conversion)
    except ManifestError:
        return False


def _items(source: Manifest, work: Path, precision: str, calibration, samples: int, seed: int, version: str):
    items, inputs, splits = [], {}, {}
    # the partition's conversion.toml (harness reduce): a remedy is the toolkit's it was found with
    # (2.3.2's w16a16i is not a 2.5.0 dtype; an op_target names one version's tensors)
    remedies = {stem: r for stem, r in read_remedies(source.directory).items() if r.get("toolkit") == version}
    for entry in source.entries():
        stem = Path(entry.file).stem
        sets = sample_inputs(entry, samples, seed) if samples else []
        if sets:
            inputs[stem] = sets
        if SPLIT_KEY in remedies.get(stem, {}) and for_build(remedies[stem], quantization_for(entry, precision,
                                                                                             calibration)):
            splits[stem] = cut_parts(entry, source.path_of(entry), remedies[stem][SPLIT_KEY], work,
                                     f"{source.directory / REMEDY_FILE}: [subgraphs.{stem}]")
            feeds = part_feeds(source.path_of(entry), splits[stem], sets) if sets else {}
            items += [_item(work, p.name, str(work / p.onnx_file), None, None, feeds.get(p.name, []))
                      for p in splits[stem] if p.on == "npu"]
            continue
        recorded = quantization_for(entry, precision, calibration)
        remedy = remedies.get(stem) if stem in remedies and for_build(remedies[stem], recorded) else None
        if remedy and recorded is not None:         # an INT8 remedy: its islands in the recipe's build
            recorded = with_islands(recorded, remedy)
        elif remedy:
            recorded = remedy_quantization(source.directory, remedy)
        item = _item(work, stem, str(source.path_of(entry).resolve()), recorded, remedy, sets)
        items.append(item)
    return items, inputs, splits


def _item(work: Path, name: str, onnx_path: str, recorded, remedy, sets) -> dict:
    """One model for the toolkit worker: its ONNX, quantization, a remedy's settings, sample inputs."""
    quant = dict(recorded) if recorded else None
    if quant:   # the toolkit reads list entries from its own cwd: hand it absolute paths
        quant["dataset"] = str(absolute_dataset(Path(quant["dataset"]), work / "datasets" / f"{name}.txt"))
    item: dict[str, Any] = {"name": name, "onnx": onnx_path, "rknn": f"{name}.rknn",
                            "quantization": quant, "recorded_quantization": recorded}
    if remedy:
        item["settings"] = {k: remedy[k] for k in APPLIED_KEYS if k in remedy and k not in ("quantization", SPLIT_KEY)}
    if sets:
        item["samples"] = []
        for k, arrays in enumerate(sets):
            paths = []
            for j, array in enumerate(arrays):
                path = work / "samples" / f"{name}.sample{k}.in{j}.npy"
                np.save(path, array)
                paths.append(str(path))
            item["samples"].append({"inputs": paths})
    return item


def _progress(total: int, quiet: bool):
    """The worker's events as progress lines on stderr: each subgraph built, with elapsed time and an ETA
    (in a log: the first, the last and one every 10 s; harness.core.progress)."""
    from ..core.progress import LOG_INTERVAL, StepLines
    lines: list[StepLines] = []

    def show(event: dict) -> None:
        if quiet:
            return
        if event["event"] == "start":
            print(f"[convert] rknn-toolkit2 {event['toolkit']}: building {event['count']} subgraphs",
                  file=sys.stderr, flush=True)
            lines.append(StepLines(total, f"[convert] rknn-toolkit2 {event['toolkit']}",
                                   lambda line: print(line.replace(": step ", ": subgraph "), file=sys.stderr,
                                                      flush=True),
                                   interval=0.0 if sys.stderr.isatty() else LOG_INTERVAL))
        elif event["event"] == "built" and lines:
            lines[-1]()
    return show


def _kept_log(log: Path, out: Path, what: str = "toolkit log") -> str:
    """Keep a failed build's log beside --out, whole or not at all; what to say about it."""
    keep = out.parent / f"{out.name}.failed.log"
    try:
        with atomic_path(keep) as tmp:
            shutil.copyfile(log, tmp)
    except StorageError as exc:         # e.g. the disk that just filled up: say so, leave nothing
        return f" (the {what} could not be kept: {exc})"
    return f" ({what}: {keep})"


def _in_out(text: str, work: Path, out: Path) -> str:
    """A message about the work folder as one about --out: the work folder is gone when it is read."""
    return text.replace(str(work), str(out))


def _fail(source: Manifest, version: str, event: dict, work: Path, out: Path) -> ToolkitError:
    by_stem = {Path(e.file).stem: e for e in source.entries()}
    entry = by_stem.get(str(event.get("name")))
    where = f"{entry.label} ({entry.file})" if entry else "toolkit start-up"
    writing = f" writing {event['name']}.rknn into --out {out}" if entry and event["stage"] == "export_rknn" else ""
    kept = _kept_log(Path(event["log"]), out) if event.get("log") and Path(event["log"]).exists() else ""
    detail = _in_out(event.get("detail") or "no reason given", work, out)
    return ToolkitError(f"rknn-toolkit2 {version}: {where}: {event['stage']} failed{writing}: "
                        f"{detail}{_free_space_note(detail, out)}{kept}")


def _free_space_note(detail: str, out: Path) -> str:
    if "No space left" not in detail and "Errno 28" not in detail:
        return ""
    free = shutil.disk_usage(out.parent).free
    return f" ({free / 2**20:.1f} MiB free in {out.parent} at the time)"


def _storage_error(exc: OSError, work: Path, out: Path) -> StorageError:
    """This process failed to write into the work folder: name --out and the file, not the work folder."""
    name = _in_out(str(exc.filename or ""), work, out)
    reason = exc.strerror or str(exc)
    return StorageError(f"convert --out {out}: cannot write {name or 'the output'}: {reason}"
                        f"{_free_space_note(reason, out) if exc.errno == errno.ENOSPC else ''}")


@dataclass(frozen=True)
class ConvertSettings:
    """How to convert: the toolkit version (None: the default one), the precision (a named recipe or a
    precision file) and its calibration set (None: the recipe's), the target chip, whether an op may
    fall back to the CPU, how many random input sets the simulator runs per subgraph, and quiet."""
    version: str | None = None
    precision: str = "float16"
    calibration: Any = None
    target: str = DEFAULT_TARGET
    allow_cpu_ops: bool = False
    samples: int = 0
    quiet: bool = False


def convert_partition(partition, out, settings: ConvertSettings | None = None) -> ConvertResult:
    """Convert every subgraph (and the decoder) of an FP32 export; see the module docstring.

    settings.samples > 0 also runs the toolkit's PC simulator on that many random input sets per
    subgraph right after its build (the simulator only runs models built in the same process); the
    outputs come back in ConvertResult.sim_outputs for a comparison against onnxruntime.
    """
    settings = settings or ConvertSettings()
    version = settings.version or default_version()
    precision, calibration = settings.precision, settings.calibration
    spec = recipe(precision)       # a named recipe or a precision file; ConfigError naming it
    if calibration is None and spec.get("calibration"):
        calibration = spec["calibration"]
    out = Path(out)
    check_out(out)
    source = _source(partition)
    if precision != "float16" and source.granularity != "branch":
        # INT8 is chosen per branch subgraph (the FFNs); a fused subgraph would silently stay FP16
        raise ConfigError(f"--precision {precision} quantises the FFN subgraphs of a branch partition: "
                          f"{source.file} is granularity {source.granularity} (convert it as float16)")
    toolkit_python(version)                 # an absent environment fails before any work
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    # Absolute: the worker runs in its own directory (the toolkit litters its cwd with check*.onnx).
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".converting", dir=out.parent.resolve()))
    except OSError as exc:
        raise StorageError(f"convert --out {out}: cannot create a folder in {out.parent}: "
                           f"{exc.strerror or exc}") from None
    try:
        asked = _Request(version, precision, calibration, settings.target, settings.allow_cpu_ops,
                         settings.samples, settings.quiet, started)
        result = _build(source, work, out, asked)
        _finish(work, out)
    except OSError as exc:     # this process writing the work folder (samples, build log, manifest)
        raise _storage_error(exc, work, out) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.manifest = load_manifest(out)
    return result


@dataclass(frozen=True)
class _Request:
    """What convert_partition was asked (its settings, the default version and the recipe's calibration
    filled in)."""
    version: str
    precision: str
    calibration: Any
    target: str
    allow_cpu_ops: bool
    samples: int
    quiet: bool
    started: float          # perf_counter() when the conversion began


def _build(source, work, out, asked: _Request) -> ConvertResult:
    """Every subgraph built by the toolkit worker into work/, checked and described there."""
    version, precision, calibration, target = asked.version, asked.precision, asked.calibration, asked.target
    (work / "samples").mkdir()
    (work / "datasets").mkdir()
    items, inputs, splits = _items(source, work, precision, calibration, asked.samples, SAMPLE_SEED, version)
    job = {"out_dir": str(work), "items": items, "config": {"target_platform": target, **RKNN_CONFIG}}
    events = run_worker(version, job, work / "job.json", _progress(len(items), asked.quiet))
    failed = [e for e in events if e["event"] == "failed"]
    if failed:
        raise _fail(source, version, failed[0], work, out)
    built = {e["name"]: e for e in events if e["event"] == "built"}
    recorded = {item["name"]: item["recorded_quantization"] for item in items}
    settings = {item["name"]: item["settings"] for item in items if item.get("settings")}
    result = _assemble(source, work, out, asked, built, recorded, settings, splits)
    result.samples = inputs
    result.sim_outputs = {name: [np.load(p) for p in ev["sim_outputs"]] for name, ev in built.items()}
    onnx_of = {Path(e.file).stem: source.path_of(e) for e in source.entries()}
    for stem, parts in splits.items():      # a split subgraph's output is its last part's
        last = parts[-1]
        result.sim_outputs[stem] = (result.sim_outputs.pop(last.name, []) if last.on == "npu" else
                                    host_outputs(work, last, part_feeds(onnx_of[stem], parts,
                                                                        inputs.get(stem, []))[last.name]))
    return result


def _layers_of(entry, name: str, event: dict, version: str, out: Path, logs: list) -> tuple[list, list]:
    """One built model's layer table and CPU ops (its log appended to `logs`); a register overflow fails."""
    log_text = Path(event["log"]).read_text(errors="replace")
    logs.append(f"===== {entry.label}: {entry.file} -> {name}.rknn =====\n{log_text}")
    layers = parse_layer_table(log_text, where=f"{entry.label} ({name}.rknn)")
    overflow = register_overflow(layers, log_text)
    if overflow:
        # not a CPU fallback --allow-cpu-ops could keep: the board would run the truncated fields
        # (the simulator does not execute register tasks, so no later gate would see it)
        raise ToolkitError(f"rknn-toolkit2 {version}: register limit: {entry.label} ({name}.rknn): {overflow}"
                           f"{_kept_log(Path(event['log']), out, 'build log')}")
    return layers, cpu_fallbacks(layers, log_text)


def _split_entry(entry, parts, work: Path, out: Path, version: str, built: dict, logs: list):
    """A split subgraph's entry (its file the plan), conversion record and CPU ops (its NPU parts')."""
    plan = write_plan(work, entry, parts)
    cpu, layers, seconds, records = [], 0, 0.0, []
    for part in parts:
        record = {"file": part.file, "on": part.on, "onnx_file": part.onnx_file,
                  "onnx_sha256": file_sha256(work / part.onnx_file), "sha256": file_sha256(work / part.file),
                  "nodes": [part.start, part.end]}
        if part.on == "npu":
            table, ops = _layers_of(entry, part.name, built[part.name], version, out, logs)
            cpu += ops
            layers += len(table)
            seconds += built[part.name]["seconds"]
            record["build_seconds"] = built[part.name]["seconds"]
        records.append(record)
    made = SubgraphEntry(index=entry.index, block=entry.block, branch=entry.branch, file=plan.name,
                         sha256=file_sha256(plan), bytes=plan.stat().st_size, inputs=entry.inputs,
                         outputs=entry.outputs, blocks=entry.blocks)
    return made, {"file": plan.name, "onnx_file": entry.file, "onnx_sha256": entry.sha256,
                  "build_seconds": round(seconds, 3), "layers": layers, "cpu_ops": cpu,
                  "split": {"parts": records}}, cpu


def _assemble(source, work, out, asked: _Request, built, recorded, settings, splits) -> ConvertResult:
    """Parse every layer table, gate CPU fallbacks, write build.log and manifest.json into work/."""
    version, precision, calibration, target = asked.version, asked.precision, asked.calibration, asked.target
    entries, records, cpu_ops = [], [], {}
    logs: list[str] = []
    for entry in source.entries():
        stem = Path(entry.file).stem
        if stem in splits:
            made, record, cpu_ops[stem] = _split_entry(entry, splits[stem], work, out, version, built, logs)
            entries.append(made)
            records.append({**record, "quantization": None})
            continue
        layers, cpu_ops[stem] = _layers_of(entry, stem, built[stem], version, out, logs)
        rknn = work / f"{stem}.rknn"
        entries.append(SubgraphEntry(index=entry.index, block=entry.block, branch=entry.branch,
                                     file=rknn.name, sha256=file_sha256(rknn), bytes=rknn.stat().st_size,
                                     inputs=entry.inputs, outputs=entry.outputs, blocks=entry.blocks))
        records.append({"file": rknn.name, "onnx_file": entry.file, "onnx_sha256": entry.sha256,
                        "build_seconds": built[stem]["seconds"], "layers": len(layers),
                        "cpu_ops": cpu_ops[stem],
                        "quantization": recorded[stem],
                        **({"settings": settings[stem]} if stem in settings else {})})
    log_file = work / BUILD_LOG
    log_file.write_text("\n".join(logs))
    if not asked.allow_cpu_ops:
        try:
            check_no_cpu_ops({e.label + f" ({e.file})": cpu_ops[Path(s.file).stem]
                              for s, e in zip(source.entries(), entries)})
        except ToolkitError as exc:     # keep the layer tables that show it
            raise ToolkitError(f"{exc}{_kept_log(log_file, out, 'build log')}") from None
    seconds = time.perf_counter() - asked.started
    conversion = {"toolkit": "rknn-toolkit2", "toolkit_version": version, "target": target,
                  "precision": precision, "config": {"target_platform": target, **RKNN_CONFIG},
                  "precision_recipe": recipe(precision),
                  "source": {"directory": str(source.directory.resolve()),
                             "manifest_sha256": manifest_sha256(source.directory)},
                  "calibration": str(Path(calibration).resolve()) if calibration else None,
                  "build_log": {"file": BUILD_LOG, "sha256": file_sha256(log_file)},
                  "seconds": round(seconds, 3), "subgraphs": records}
    decoder = entries[-1] if source.decoder else None
    manifest = Manifest(directory=work, format=source.format, model=source.model,
                        weights_sha256=source.weights_sha256, weights_source=source.weights_source,
                        export=source.export, subgraphs=entries[:len(source.subgraphs)],
                        decoder=decoder, conversion=conversion)
    manifest.save()
    return ConvertResult(manifest=manifest, version=version, seconds=seconds,
                         build_seconds={r["file"]: r["build_seconds"] for r in records},
                         cpu_ops=cpu_ops)


def _finish(work: Path, out: Path) -> None:
    """Keep only the deliverables, then swap work/ in for out/ (the old output goes last)."""
    for scratch in ("logs", "sim", "samples", "datasets", "scratch", "job.json", "job.stderr", "toolkit-import.log"):
        target = work / scratch
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(work, out)
    (out.parent / f"{out.name}.failed.log").unlink(missing_ok=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.chmod(out, 0o755 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
