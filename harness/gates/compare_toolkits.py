"""`harness compare-toolkits OLD NEW`: convert the same FP32 partition with two toolkit versions and
compare, in Markdown for a pull request:

1. per subgraph, side by side: cosine of the toolkit's PC simulator against onnxruntime FP32 (the
   simulator runs in the build process right after each build, on the same random inputs for both
   versions), ops placed on the CPU, .rknn size and build seconds;
2. per golden case, each build's image SSIM against the golden, through the rknn-sim backend;
3. a verdict on NEW: every op on the NPU, every subgraph's cosine >= the precision's `cosine_min`
   (toolkit/precisions.toml), every case's SSIM >= its threshold.

Both conversions keep every op's placement (--allow-cpu-ops): the comparison reports a CPU fallback
instead of stopping at it.
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError, HarnessError
from ..toolkit.precisions import recipe
from ..toolkit.convert import convert_partition
from ..toolkit.envs import toolkit_python
from ..report.toolkit import cosine_rows, markdown_table

__all__ = ["compare_toolkits", "image_rows"]


def _default_partition(bundle) -> Path:
    from ..runtime.partitions import exported_partition
    return exported_partition(bundle, "float32")


def _convert(version: str, partition: Path, out: Path, target: str, samples: int, quiet: bool):
    return convert_partition(partition, out / version, version=version, target=target,
                             allow_cpu_ops=True, samples=samples, quiet=quiet)


def _subgraph_table(old, new, rows_old, rows_new) -> str:
    head = ["subgraph", f"cosine {old.version}", f"cosine {new.version}", f"CPU ops {old.version}",
            f"CPU ops {new.version}", f"KiB {old.version}", f"KiB {new.version}",
            f"build s {old.version}", f"build s {new.version}"]
    size = {r.version: {e.file: e.bytes for e in r.manifest.entries()} for r in (old, new)}
    body = []
    for a, b in zip(rows_old, rows_new):
        stem = Path(a["file"]).stem
        ops = [", ".join(f"{o['op']} {o['name']}" for o in r.cpu_ops[stem]) or "-" for r in (old, new)]
        body.append([a["label"], f"{a['cosine']:.7f}", f"{b['cosine']:.7f}", ops[0], ops[1],
                     f"{size[old.version][a['file']] / 1024:.0f}", f"{size[new.version][b['file']] / 1024:.0f}",
                     f"{old.build_seconds[a['file']]:.2f}", f"{new.build_seconds[b['file']]:.2f}"])
    total = ["**all**", f"min {min(r['cosine'] for r in rows_old):.7f}",
             f"min {min(r['cosine'] for r in rows_new):.7f}",
             str(sum(len(v) for v in old.cpu_ops.values())), str(sum(len(v) for v in new.cpu_ops.values())),
             f"{sum(size[old.version].values()) / 1024:.0f}", f"{sum(size[new.version].values()) / 1024:.0f}",
             f"{sum(old.build_seconds.values()):.1f}", f"{sum(new.build_seconds.values()):.1f}"]
    return markdown_table(head, body + [total])


def image_rows(bundle, conversions: dict[str, Path], cases, backend: str = "rknn-sim") -> list[dict] | None:
    """SSIM of each conversion's image against each golden, through rknn-sim; None without it.
    Each case is rendered as its golden was (case_inputs: its sampler, text embeddings and all)."""
    from ..backends.base import BACKENDS
    if backend not in BACKENDS:
        return None
    from .golden import GoldenStore
    from .cases import case_inputs, golden_dir_for
    from .quality import compare
    from ..runtime.run import RunRequest, run_partitioned
    golden_dir = golden_dir_for(bundle.cfg.name)
    store = GoldenStore(golden_dir)
    rows = []
    for case in cases:
        golden, _ = store.load(case)
        inputs = case_inputs(case, bundle.cfg, golden_dir)
        row = {"case": case.name, "ssim_min": case.ssim_min}
        for version, path in conversions.items():
            try:        # one build failing on the simulator must not hide the other's result
                result = run_partitioned(RunRequest(bundle, path, backend, inputs.prompt, inputs.settings,
                                                    text_embs=inputs.text_embs))
                row[version] = compare(result.image, golden).ssim
            except HarnessError as exc:
                row[version] = None
                row[f"{version} error"] = str(exc)
        rows.append(row)
    return rows


def _verdict(new, rows_new, images, cosine_min: float) -> list[str]:
    reasons = []
    cpu = {k: v for k, v in new.cpu_ops.items() if v}
    if cpu:
        stem, ops = next(iter(cpu.items()))
        reasons.append(f"{sum(len(v) for v in cpu.values())} op(s) on the CPU in {len(cpu)} subgraph(s), "
                       f"first {ops[0]['op']} '{ops[0]['name']}' in {stem}")
    worst = min(rows_new, key=lambda r: r["cosine"])
    if worst["cosine"] < cosine_min:
        reasons.append(f"{worst['label']}: cosine {worst['cosine']:.7f} < {cosine_min}")
    for row in images or []:
        if row[new.version] is None:
            reasons.append(f"case {row['case']}: no image ({row[f'{new.version} error']})")
        elif row[new.version] < row["ssim_min"]:
            reasons.append(f"case {row['case']}: SSIM {row[new.version]:.6f} < {row['ssim_min']}")
    return reasons


def _ssim_cell(row: dict, version: str) -> str:
    return f"{row[version]:.6f}" if row[version] is not None else "no image (see below)"


def compare_toolkits(old: str, new: str, partition=None, out="out/compare-toolkits",
                     target: str = "rk3588", samples: int = 1, quiet: bool = False,
                     images: bool = True, case_names: list[str] | None = None) -> str:
    """Both conversions, the tables and the verdict, as Markdown."""
    from ..model.config import EMBEDDED_DIR
    from .cases import load_cases
    from ..model.bundle import load_bundle
    if old == new:
        raise ConfigError(f"compare-toolkits: OLD and NEW are both {old}")
    if samples < 1:
        raise ConfigError("compare-toolkits: --sim-samples must be at least 1 (the cosine needs it)")
    for version in (old, new):      # one line each, before any work, when an environment is absent
        toolkit_python(version)
    bundle = load_bundle(EMBEDDED_DIR)
    partition = Path(partition) if partition else _default_partition(bundle)
    out = Path(out)
    results = {v: _convert(v, partition, out, target, samples, quiet) for v in (old, new)}
    rows = {v: cosine_rows(results[v], partition) for v in (old, new)}
    table = _subgraph_table(results[old], results[new], rows[old], rows[new])
    from .cases import golden_dir_for
    cases = load_cases(golden_dir_for(bundle.cfg.name) / "cases.toml") if images else []
    if case_names:
        unknown = sorted(set(case_names) - {c.name for c in cases})
        if unknown:
            raise ConfigError(f"--cases: unknown case(s) {', '.join(unknown)} "
                              f"(known: {', '.join(c.name for c in cases)})")
        cases = [c for c in cases if c.name in case_names]
    try:
        ssim = image_rows(bundle, {v: out / v for v in (old, new)}, cases) if images else None
    except HarnessError as exc:     # e.g. a golden missing: the per-subgraph part still stands
        ssim, image_note = None, f"image part failed: {exc}"
    else:
        image_note = None
    cosine_min = float(recipe("float16").get("cosine_min", 0.9999))
    reasons = _verdict(results[new], rows[new], ssim, cosine_min)
    lines = [f"## rknn-toolkit2 {old} -> {new} ({target}, float16, partition {partition})", "",
             f"Simulator vs onnxruntime FP32 on {samples} random unit-scale input set(s) per subgraph; "
             f"conversion wall time {results[old].seconds:.0f} s ({old}) and {results[new].seconds:.0f} s "
             f"({new}).", "", table, "", "### Image SSIM against the golden (rknn-sim)", ""]
    if ssim is None:
        lines.append(image_note or "pending: the rknn-sim backend is not part of this build "
                                   "(issue 7 item 7), so no image was rendered.")
    else:
        lines.append(markdown_table(["case", f"SSIM {old}", f"SSIM {new}", "threshold"],
                                    [[r["case"], _ssim_cell(r, old), _ssim_cell(r, new), r["ssim_min"]]
                                     for r in ssim]))
        lines += [f"\n{r['case']} on {v}: {r[f'{v} error']}" for r in ssim for v in (old, new)
                  if r[v] is None]
    lines += ["", "### Verdict", ""]
    if reasons:
        lines.append(f"**{new} fails**: " + "; ".join(reasons) + ".")
    else:
        scope = "" if ssim is not None else (
            " (per-subgraph checks only; " + ("the image part failed" if image_note else
                                              "the image part is pending") + ")")
        lines.append(f"**{new} passes**{scope}: every op on the NPU, every subgraph's cosine >= "
                     f"{cosine_min}" + (", every case's SSIM at or above its threshold" if ssim else "")
                     + ".")
    return "\n".join(lines)
