"""`harness reduce SUBGRAPH --toolkit VERSION`: why a subgraph fails on rknn-toolkit2's simulator, and
what restores its gate.

1. inputs: what the failing step fed the subgraph: an FP32 generation on onnxruntime (the capture
   `harness accuracy` takes: --case/--prompt, --step), a saved failing invocation (--inputs DIR, the
   folder `harness accuracy` printed), or `--inputs random` (the unit-scale inputs compare-toolkits
   converts with, same seed);
2. bisection (gates/bisect.py) of the subgraph's FP32 ONNX graph on the simulator against
   onnxruntime FP32, by compare-toolkits' and accuracy's check (cosine >= the threshold, finite);
3. the repro (gates/repro.py), checked in a fresh toolkit process before it is kept;
4. the remedies (gates/remedies.py); the first that passes and `convert` can apply is written into
   the partition's own conversion.toml (toolkit/remedies.py), which the next conversion applies.

Output: --out (default out/reduce/<subgraph file stem>) with report.json, and repro/.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError
from ..toolkit.cut import Graph, reference_values
from .bisect import reduce_graph
from .remedies import Context, as_json, try_remedies
from .repro import write_repro
from .sim_runner import BASE_CONFIG, INT8, SimRunner

__all__ = ["ReduceRequest", "run_reduce", "find_entry", "reduce_command"]


@dataclass
class ReduceRequest:
    partition: Path             # the FP32 export
    subgraph: str               # index, file stem or label
    version: str
    out: Path | None = None
    inputs: str | None = None   # None: capture; "random"; or a folder of input_<name>.npy
    seed: int = 0
    step: str = "0"             # "N", "N,M,..." or "all"
    threshold: float = 0.9999
    bundle: Any = None          # a ModelBundle, for a capture
    case_inputs: Any = None     # chosen_inputs(...) (CaseInputs), for a capture
    write_config: bool = True
    int8: bool = False          # the subgraph is built INT8 (as w8a8-ffn's FFNs): each range too


def reduce_command(subgraph: str, version: str, partition, extra: str = "") -> str:
    """The exact command a report prints for one failing subgraph."""
    return f"bin/harness reduce {subgraph} --toolkit {version} --partition {partition}" + (f" {extra}" if extra else "")


def find_entry(manifest, text: str):
    """The subgraph `text` names: its index, its file stem, or its label; ConfigError listing the form."""
    for entry in manifest.entries():
        stem = Path(entry.file).stem
        if text in (str(entry.index), stem, entry.file, entry.label):
            return entry
    raise ConfigError(f"reduce: no subgraph '{text}' in {manifest.file} (give its index, e.g. 14, or its "
                      f"file stem, e.g. {Path(manifest.subgraphs[0].file).stem})")


def _steps(text: str) -> set[int] | None:
    """--step: None for "all", else the step numbers."""
    if text.strip() == "all":
        return None
    try:
        steps = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise ConfigError(f"--step '{text}': step numbers separated by commas, or 'all'") from None
    if not steps or min(steps) < 0:
        raise ConfigError(f"--step '{text}': step numbers separated by commas (0 or more), or 'all'")
    return steps


def _captured(req: ReduceRequest, manifest, entry) -> list[list[np.ndarray]]:
    """The subgraph's inputs at the --step steps of an FP32 generation on onnxruntime (all streams)."""
    from ..runtime.run import RunRequest, run_partitioned
    steps = _steps(req.step)
    seen: dict[int, list[np.ndarray]] = {}

    def observe(inv) -> None:
        if inv.entry.index == entry.index and (steps is None or inv.step in steps):
            seen[inv.step] = [np.array(a, np.float32) for a in inv.inputs]
    ci = req.case_inputs
    run_partitioned(RunRequest(req.bundle, req.partition, "onnxruntime", ci.prompt, ci.settings,
                               text_embs=ci.text_embs), observers=[observe])
    missing = sorted((steps or set()) - set(seen))
    if missing or not seen:
        raise ConfigError(f"reduce --step {req.step}: the generation ran no step {missing or req.step} "
                          f"of {entry.label} ({ci.settings.steps} steps)")
    return [seen[k] for k in sorted(seen)]


def _saved(folder: Path, entry) -> list[list[np.ndarray]]:
    files = [folder / f"input_{spec.name}.npy" for spec in entry.inputs]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"reduce --inputs {folder}: no {', '.join(missing)} (a folder `harness accuracy` saved "
                          f"for {entry.label})")
    return [[np.load(f).astype(np.float32) for f in files]]


def input_sets(req: ReduceRequest, manifest, entry) -> tuple[list[list[np.ndarray]], str]:
    if req.inputs == "random":
        from ..toolkit.samples import sample_inputs
        return sample_inputs(entry, 1, req.seed), f"random unit-scale inputs, seed {req.seed} (compare-toolkits')"
    if req.inputs:
        return _saved(Path(req.inputs), entry), f"the invocation saved in {req.inputs}"
    sets = _captured(req, manifest, entry)
    return sets, f"{len(sets)} step(s) ({req.step}) of an FP32 generation (onnxruntime)"


def _dataset(scratch: Path, sets: list[list[np.ndarray]]) -> Path:
    lines = []
    for k, arrays in enumerate(sets):
        names = []
        for j, array in enumerate(arrays):
            path = scratch / f"set{k}_in{j}.npy"
            np.save(path, array)
            names.append(str(path))
        lines.append(" ".join(names))
    listing = scratch / "dataset.txt"
    listing.write_text("\n".join(lines) + "\n")
    return listing


def run_reduce(req: ReduceRequest, say=print) -> dict:
    """Bisect, write the repro, try the remedies; returns the report (also written as report.json)."""
    import onnx

    from ..partition.manifest import load_manifest
    began = time.perf_counter()
    manifest = load_manifest(req.partition)
    if manifest.export.get("dtype") != "float32" or manifest.conversion:
        what = ("a conversion; give the FP32 export it came from" if manifest.conversion
                else f"exported as {manifest.export.get('dtype')}")
        raise ConfigError(f"reduce --partition {req.partition}: an FP32 export is bisected (the toolkit "
                          f"converts it), this one is {what}")
    entry = find_entry(manifest, req.subgraph)
    manifest.verify_entry(entry)
    stem = Path(entry.file).stem
    out = Path(req.out or Path("out/reduce") / stem)
    if out.exists() and not (out / "report.json").is_file() and any(out.iterdir()):
        raise ConfigError(f"reduce --out {out}: exists and is not a reduce report; choose another directory")
    model = onnx.load(str(manifest.path_of(entry)))
    sets, source = input_sets(req, manifest, entry)
    say(f"[reduce] {entry.label} ({entry.file}, {len(model.graph.node)} nodes) on rknn-toolkit2 {req.version}'s "
        f"simulator{' built INT8 (w8a8, each range calibrated on its inputs)' if req.int8 else ''} against "
        f"onnxruntime FP32; inputs: {source}; check: cosine >= {req.threshold}")
    values = [reference_values(model, s) for s in sets]
    graph = Graph(model)
    scratch = Path(tempfile.mkdtemp(prefix="anima-reduce-"))
    try:
        build = {"quantization": INT8} if req.int8 else {}
        found = reduce_graph(graph, values, SimRunner(req.version, build, scratch), req.threshold,
                             say=lambda line: say(f"[reduce] {line}"))
        report: dict = {"subgraph": entry.label, "index": entry.index, "file": entry.file, "toolkit": req.version,
                        "build": "int8" if req.int8 else "float16",
                        "partition": str(Path(req.partition).resolve()), "inputs": source,
                        "threshold": req.threshold, "nodes": len(graph.nodes)}
        if found is None:
            report.update(reproduces=False, seconds=round(time.perf_counter() - began, 1))
            _write(out, report)
            return report
        report["reduction"] = found.to_json()
        say(f"[reduce] diverges at nodes {found.start}-{found.end - 1}: {found.nodes}; tensors "
            f"{', '.join(o for op in found.ops for o in op['outputs'])}; "
            + ("output not finite" if not np.isfinite(found.cosine) else f"cosine {found.cosine:.7f}")
            + f", max relative error {found.max_rel_err:.3g}")
        _fresh(out)
        segment = graph.segment(found.start, found.end, values[0])
        printed = write_repro(out / "repro", segment, values[0], req.version, {**BASE_CONFIG, **build}, req.threshold,
                              f"{found.nodes} of {entry.label} ({entry.file}) diverges on rknn-toolkit2 {req.version}")
        report["repro"] = {"folder": str((out / "repro").resolve()), "printed": printed}
        say(f"[reduce] repro reproduces in a fresh process: {out / 'repro' / 'repro.py'}")
        ctx = Context(graph, values, found.start, found.end, req.version, req.threshold, scratch,
                      _dataset(scratch, sets), manifest.path_of(entry), build)
        outcomes = try_remedies(ctx, say=lambda line: say(f"[reduce] remedy {line}"))
        report["remedies"] = as_json(outcomes)
        report["winner"] = _winner(req, entry, outcomes, report, sets)
        report.update(reproduces=True, seconds=round(time.perf_counter() - began, 1))
        _write(out, report)
        return report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _winner(req, entry, outcomes, report, sets) -> dict | None:
    """The first remedy that passes; written where convert reads it when convert can apply it."""
    from ..toolkit.remedies import write_remedy
    winner = next((o for o in outcomes if o.passes and o.remedy != "none"), None)
    if winner is None:
        return None
    result = {"remedy": winner.remedy, "what": winner.what, "written": None}
    if winner.convert_config is not None and req.write_config:
        config = {**winner.convert_config, **({"build": "int8"} if req.int8 else {})}
        result["written"] = str(write_remedy(Path(req.partition), entry, config, req.version,
                                             f"harness reduce: {report['reduction']['nodes']}", sets))
    return result


def _fresh(out: Path) -> None:
    if (out / "repro").exists():        # a previous report's repro, replaced whole
        shutil.rmtree(out / "repro")


def _finite(value):
    """JSON has no NaN or inf: a check that is not finite is recorded as null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _write(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "report.json", _finite(report))
