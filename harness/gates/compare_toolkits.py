"""`harness compare-toolkits OLD NEW`: convert the same FP32 partition with two toolkit versions, compare
them, and gate NEW:

1. per subgraph, side by side: cosine of the toolkit's PC simulator against onnxruntime FP32 (the
   simulator runs in the build process right after each build, on the same random inputs for both
   versions), ops placed on the CPU, .rknn size and build seconds;
2. per golden case, each build's image (or final latent, for a model without decoder) against the
   golden, through the rknn-sim backend, judged as the quality gate judges it;
3. a verdict on NEW: "passes" when every op is on the NPU, every subgraph's cosine >= the precision's
   `cosine_min` (toolkit/precisions.toml) and every case passes; "fails" when one of those does not
   hold; "not judged" when a part of the comparison did not run (a golden that cannot be read or does
   not match its record, a render or a conversion that failed). Only "passes" is a pass.

Both conversions keep every op's placement (--allow-cpu-ops): the comparison reports a CPU fallback
instead of stopping at it. The report (report.json: every row; report.md: the verdict, then the worst
subgraphs) is written into --out beside the two conversions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.atomic import atomic_write_json, atomic_write_text
from ..core.errors import ConfigError, HarnessError, ToolkitError
from ..report.toolkit import comparison_markdown, cosine_rows, decibels
from ..toolkit.convert import ConvertSettings, check_out, convert_partition
from ..toolkit.envs import toolkit_python
from ..toolkit.precisions import recipe

__all__ = ["Comparison", "CompareInputs", "compare_toolkits", "image_rows", "subgraph_failures", "reduce_commands",
           "REPORT_JSON", "REPORT_MD"]

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


@dataclass
class Comparison:
    """What compare-toolkits found, as report.json holds it; `status` is the verdict on NEW."""
    old: str
    new: str
    header: dict
    subgraphs: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "fails" if self.failures else "not judged" if self.not_run else "passes"

    def to_json(self) -> dict:
        return {"old": self.old, "new": self.new, **self.header,
                "verdict": {"status": self.status, "failures": self.failures, "not_run": self.not_run},
                "subgraphs": self.subgraphs, "images": self.images}


def _default_partition(bundle) -> Path:
    from ..runtime.partitions import exported_partition
    return exported_partition(bundle, "float32")


def _convert(version: str, partition: Path, out: Path, target: str, samples: int, quiet: bool):
    return convert_partition(partition, out / version,
                             ConvertSettings(version=version, target=target, allow_cpu_ops=True, samples=samples,
                                             quiet=quiet))


def _subgraph_rows(results: dict, rows: dict, cosine_min: float) -> list[dict]:
    """One row per subgraph, in execution order, with each converted version's figures."""
    versions = [v for v in results if results[v] is not None]
    if not versions:
        return []
    table = []
    for index, first in enumerate(rows[versions[0]]):
        row = {"subgraph": first["label"], "file": first["file"], "versions": {}}
        for v in versions:
            r, result = rows[v][index], results[v]
            stem = Path(r["file"]).stem
            size = {e.file: e.bytes for e in result.manifest.entries()}
            row["versions"][v] = {
                "cosine": r["cosine"], "max_abs": r["max_abs"], "shapes_match": r["shapes_match"],
                "cpu_ops": [f"{o['op']} {o['name']}" for o in result.cpu_ops.get(stem, [])],
                "bytes": size[r["file"]], "build_seconds": result.build_seconds[r["file"]],
                "passes": r["shapes_match"] and r["cosine"] >= cosine_min and not result.cpu_ops.get(stem)}
        table.append(row)
    return table


def subgraph_failures(table: list[dict], new: str, cosine_min: float) -> list[str]:
    cells = [(row["subgraph"], row["versions"][new]) for row in table if new in row["versions"]]
    failures = []
    cpu = [(label, c) for label, c in cells if c["cpu_ops"]]
    if cpu:
        label, first = cpu[0]
        failures.append(f"{sum(len(c['cpu_ops']) for _, c in cpu)} op(s) on the CPU in {len(cpu)} "
                        f"subgraph(s), first {first['cpu_ops'][0]} in {label}")
    # `not >=`: a NaN cosine (an output that is not finite) fails, as it does in accuracy
    low = [(label, c) for label, c in cells if not c["shapes_match"] or not c["cosine"] >= cosine_min]
    if low:
        label, worst = min(low, key=lambda lc: lc[1]["cosine"] if lc[1]["cosine"] == lc[1]["cosine"] else -2.0)
        what = "output shape changed" if not worst["shapes_match"] else f"cosine {worst['cosine']:.7f}"
        failures.append(f"{len(low)} subgraph(s) under cosine {cosine_min}, worst {label}: {what}")
    return failures


def reduce_commands(table: list[dict], new: str, partition: Path, out: Path, model_dir,
                    cosine_min: float) -> list[dict]:
    """For each subgraph failing its cosine on NEW: the `harness reduce` command that bisects it on the
    same random inputs, and where that command writes its repro."""
    from .reduce import reduce_command
    rows = []
    for row in table:
        cell = row["versions"].get(new)
        # a subgraph whose cosine fails (a CPU fallback alone is the layer table's to explain)
        if cell is None or (cell["shapes_match"] and cell["cosine"] >= cosine_min):
            continue
        stem = Path(row["file"]).stem
        target = Path(out) / "reduce" / stem
        extra = (f"--model-dir {model_dir} " if model_dir else "") + f"--inputs random --out {target}"
        rows.append({"subgraph": row["subgraph"], "command": reduce_command(stem, new, partition, extra),
                     "repro": str(target / "repro" / "repro.py")})
    return rows


def _golden_kind(partition: Path) -> str:
    from ..partition.manifest import load_manifest
    return "image" if load_manifest(partition).decoder is not None else "latent"


def _load_goldens(store, cases) -> dict:
    """{case name: golden array or the GoldenError that stops that case from running}."""
    goldens = {}
    for case in cases:
        try:
            goldens[case.name] = store.load(case)[0]
        except HarnessError as exc:
            goldens[case.name] = exc
    return goldens


def image_rows(bundle, conversions: dict[str, Path], cases, backend: str = "rknn-sim",
               golden_dir: Path | None = None, quiet: bool = True) -> list[dict]:
    """Each conversion's render of each golden case, judged against the golden as the quality gate
    judges it. Each case is rendered as its golden was (case_inputs: its sampler, text embeddings and
    all). A case whose golden cannot be used, or a render that fails, says why and did not run."""
    from .cases import case_inputs, golden_dir_for
    from .golden import GoldenStore
    golden_dir = Path(golden_dir) if golden_dir else golden_dir_for(bundle.cfg.name)
    kind = _golden_kind(next(iter(conversions.values())))
    goldens = _load_goldens(GoldenStore(golden_dir, kind=kind), cases)
    rows = []
    renders = _render_lines(len(cases) * len(conversions), quiet)
    for case in cases:
        row = {"case": case.name, "kind": kind, "ssim_min": case.ssim_min, "psnr_min": case.psnr_min,
               "cosine_min": case.cosine_min if kind == "latent" else None, "versions": {}}
        golden = goldens[case.name]
        if isinstance(golden, HarnessError):
            row["golden_error"] = str(golden)
        else:
            inputs = case_inputs(case, bundle.cfg, golden_dir)
            row["versions"] = {}
            for version, path in conversions.items():
                row["versions"][version] = _render(bundle, path, backend, inputs, golden, case, kind)
                renders(f"{case.name} on {version}")
        rows.append(row)
    return rows


def _render_lines(total: int, quiet: bool):
    """A line on stderr per case rendered on each build, with elapsed time and an ETA: the image part runs
    minutes on the simulator and said nothing until its verdict."""
    import sys

    from ..core.progress import StepLines
    lines = StepLines(total, "[compare] renders", lambda line: None, interval=0.0)
    if not quiet and total:
        print(f"[compare] rendering each golden case on each build: {total} renders", file=sys.stderr, flush=True)

    def rendered(what: str) -> None:
        lines()
        if not quiet:
            print(f"{lines.line()} ({what})", file=sys.stderr, flush=True)
    return rendered


def _render(bundle, path, backend, inputs, golden, case, kind) -> dict:
    """One build's render of one case against its golden; {"error": why} when it could not run."""
    from ..runtime.run import RunRequest, run_partitioned
    from .quality import compare, compare_latents
    try:        # one build failing on the simulator must not hide the other's result
        result = run_partitioned(RunRequest(bundle, path, backend, inputs.prompt, inputs.settings,
                                            text_embs=inputs.text_embs))
        q = compare(result.image, golden) if kind == "image" else compare_latents(result.latent, golden)
    except HarnessError as exc:
        return {"error": str(exc)}
    return {**q.to_json(), "passes": q.passes(case.ssim_min, case.psnr_min, case.cosine_min)}


def _image_findings(rows: list[dict], new: str) -> tuple[list[str], list[str]]:
    """(failures of NEW, parts that did not run) of the image part."""
    failures, not_run = [], []
    for row in rows:
        if "golden_error" in row:
            not_run.append(f"case {row['case']}: {row['golden_error']}")
            continue
        for version, cell in row["versions"].items():
            if "error" in cell:
                not_run.append(f"case {row['case']} on {version}: {cell['error']}")
            elif version == new and not cell["passes"]:
                failures.append(f"case {row['case']}: " + _metrics(row, cell))
    return failures, not_run


def _metrics(row: dict, cell: dict) -> str:
    parts = [f"SSIM {cell['ssim']:.6f} (min {row['ssim_min']})",
             f"PSNR {decibels(cell['psnr_db'])} dB (min {row['psnr_min']})"]
    if cell.get("cosine") is not None:
        parts.append(f"cosine {cell['cosine']:.7f} (min {row['cosine_min']})")
    return ", ".join(parts)


def _chosen_cases(golden_dir: Path, case_names: list[str] | None):
    from .cases import load_cases
    cases = load_cases(golden_dir / "cases.toml")
    if case_names:
        unknown = sorted(set(case_names) - {c.name for c in cases})
        if unknown:
            raise ConfigError(f"--cases: unknown case(s) {', '.join(unknown)} in {golden_dir / 'cases.toml'} "
                              f"(known: {', '.join(c.name for c in cases)})")
        cases = [c for c in cases if c.name in case_names]
    return cases


def _check_input(old: str, new: str, samples: int, out: Path) -> None:
    """Bad input, before any work: one line each (exit 2)."""
    if old == new:
        raise ConfigError(f"compare-toolkits: OLD and NEW are both {old}")
    if samples < 1:
        raise ConfigError("compare-toolkits: --sim-samples must be at least 1 (the cosine needs it)")
    for version in (old, new):      # one line each, before any work, when an environment is absent
        toolkit_python(version)
        check_out(out / version)    # --out/VERSION: new, empty or a previous conversion


@dataclass(frozen=True)
class CompareInputs:
    """What a comparison reads: the FP32 partition (None: the model's exported one), the model folder
    (None: the embedded one), the golden cases of the image part (None: every one; an empty list: no
    image part) and their folder (None: the model's)."""
    partition: Path | str | None = None
    model_dir: Path | str | None = None
    case_names: list[str] | None = None
    golden_dir: Path | str | None = None


def compare_toolkits(old: str, new: str, inputs: CompareInputs, out="out/compare-toolkits",
                     target: str = "rk3588", samples: int = 1, quiet: bool = False) -> Comparison:
    """Both conversions, the per-subgraph and image parts, the verdict on NEW; the report is written
    into `out` (report.json and report.md) beside the conversions."""
    from ..model.bundle import load_bundle
    from ..model.config import EMBEDDED_DIR
    from .cases import golden_dir_for
    out = Path(out)
    _check_input(old, new, samples, out)
    model_dir, case_names = inputs.model_dir, inputs.case_names
    bundle = load_bundle(model_dir or EMBEDDED_DIR)
    golden_dir = Path(inputs.golden_dir) if inputs.golden_dir else golden_dir_for(bundle.cfg.name)
    images = case_names != []
    cases = _chosen_cases(golden_dir, case_names) if images else []
    partition = Path(inputs.partition) if inputs.partition else _default_partition(bundle)
    cosine_min = float(recipe("float16").get("cosine_min", 0.9999))
    comparison = Comparison(old, new, {"target": target, "precision": "float16", "partition": str(partition),
                                       "model": bundle.cfg.name, "golden_dir": str(golden_dir),
                                       "sim_samples": samples, "cosine_min": cosine_min,
                                       "conversion_seconds": {}})
    results = {}
    for version in (old, new):
        try:
            results[version] = _convert(version, partition, out, target, samples, quiet)
        except ToolkitError as exc:     # a toolkit that cannot convert the model: NEW fails, OLD did not run
            results[version] = None
            (comparison.failures if version == new else comparison.not_run).append(
                f"conversion with {version}: {exc}")
        else:
            comparison.header["conversion_seconds"][version] = results[version].seconds
    rows = {v: cosine_rows(r, partition) for v, r in results.items() if r is not None}
    comparison.subgraphs = _subgraph_rows(results, rows, cosine_min)
    comparison.failures += subgraph_failures(comparison.subgraphs, new, cosine_min)
    comparison.header["reduce"] = reduce_commands(comparison.subgraphs, new, partition, out, model_dir,
                                                 cosine_min)
    _judge_images(comparison, bundle, out, cases, golden_dir, results, images, quiet)
    _write_report(comparison, out)
    return comparison


def _judge_images(comparison: Comparison, bundle, out: Path, cases, golden_dir, results, images: bool,
                  quiet: bool) -> None:
    if not images:
        comparison.not_run.append("image part: not asked for")
        return
    converted = {v: out / v for v, r in results.items() if r is not None}
    if not converted:
        return
    comparison.images = image_rows(bundle, converted, cases, golden_dir=golden_dir, quiet=quiet)
    failures, not_run = _image_findings(comparison.images, comparison.new)
    comparison.failures += failures
    comparison.not_run += not_run


def _write_report(comparison: Comparison, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report = comparison.to_json()
    atomic_write_json(out / REPORT_JSON, report)
    atomic_write_text(out / REPORT_MD, comparison_markdown(report, json_name=REPORT_JSON) + "\n")
