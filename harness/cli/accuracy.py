"""`harness accuracy`: per-subgraph accuracy of a backend across a whole denoise, as rich tables.

    harness accuracy [--backend onnxruntime|faults|rknn-sim] [--partition DIR] [--threshold 0.9999]
    harness accuracy --replay out/accuracy/repro/step03-subgraph41      # one failing invocation again

Prints the invocations worst-first, the worst cosine of every subgraph as a blocks x branches grid,
and names the first invocation below the threshold with the command that reproduces it. Exit code 0
when every invocation meets the threshold, 1 when one does not.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from ..core.errors import ConfigError
from ..gates.accuracy import DEFAULT_THRESHOLD, Row, analyze, per_subgraph, replay, worst_first
from ..model.config import BRANCHES
from .options import add_options, check_precision, default_partition, ranged, resolve_backend

__all__ = ["add_command"]


_threshold = ranged(float, 0, 1, "a cosine in 0..1")


def add_command(subparsers):
    p = subparsers.add_parser("accuracy", help="every subgraph at every step against the FP32 reference "
                                               "on the same inputs (cosine, max relative error)")
    add_options(p, "model_dir", "backend", "partition", "precision", "core_mask", "board_profile_data", "time_scale",
                "fault", "calibration", "cache_dir")
    p.add_argument("--toolkit", help="with --backend rknn-sim: toolkit version (default: the partition's)")
    p.add_argument("--reference", type=Path,
                   help="FP32 reference partition (default: the FP32 export of these weights)")
    p.add_argument("--threshold", type=_threshold, default=DEFAULT_THRESHOLD,
                   help="lowest acceptable cosine (default: %(default)s)")
    p.add_argument("--case", help="golden case to run (its settings and text embeddings; a model "
                                  "without a prompt encoder here, like Anima, runs this way)")
    p.add_argument("--golden-dir", type=Path, help="where --case's cases.toml is (default: golden/<model name>)")
    p.add_argument("--prompt", help="prompt (default: the model's default prompt)")
    add_options(p, "seed", "steps", "cfg_scale")
    p.add_argument("--top", type=int, default=15, help="rows of the worst-first table (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/accuracy"),
                   help="accuracy.json, run.json and the failure's folder (default: %(default)s)")
    p.add_argument("--replay", type=Path, metavar="DIR", help="run one saved failing invocation again")
    p.set_defaults(func=_cmd_accuracy)
    return p


def _backend_options(args, cfg):
    from ..backends import backend_options
    if args.toolkit and args.backend != "rknn-sim":
        raise ConfigError(f"--toolkit {args.toolkit}: only --backend rknn-sim builds with a toolkit")
    options = backend_options(args.backend, vars(args), cfg)
    if args.backend == "rknn-sim" and args.toolkit:
        options = options.with_settings({"toolkit": args.toolkit})
    return options


def _cmd_accuracy(args) -> int:
    from ..report.terminal import console
    con = console(stderr=False)
    if args.replay is not None:
        return _cmd_replay(args, con)
    from ..gates.cases import chosen_inputs
    from ..model.bundle import load_bundle
    from ..results.telemetry import detect_rk3588
    from ..runtime.partitions import exported_partition
    args.backend = resolve_backend(args.backend, detect_rk3588(Path("/")))
    check_precision(args.backend, args.precision)
    bundle = load_bundle(args.model_dir)
    options = _backend_options(args, bundle.cfg)
    inputs = chosen_inputs(bundle, args.case, args.golden_dir, args.prompt, args.steps, args.cfg_scale, args.seed)
    partition = args.partition or default_partition(bundle, args.backend, args.precision, True, args.calibration,
                                                    args.cache_dir)
    from ..partition.manifest import load_manifest
    # the reference holds the same subgraphs as the partition under test: the same granularity
    reference = args.reference or exported_partition(bundle, "float32",
                                                     granularity=load_manifest(partition).granularity)
    from ..runtime.run import RunRequest
    request = RunRequest(bundle, partition, args.backend, inputs.prompt, inputs.settings, options,
                         text_embs=inputs.text_embs)
    analysis, error = analyze(request, reference, args.threshold, args.out)
    what = f"{args.backend} vs onnxruntime FP32"
    con.print(f"partition under test: {partition}; reference: {reference}", highlight=False, soft_wrap=True)
    render_worst(analysis.rows, args.threshold, args.top, what, con)
    render_grid(analysis.rows, args.threshold, bundle.cfg.blocks, what, con)
    if error is not None:
        con.print(f"[red]the run stopped:[/red] {error}", highlight=False)
    first = analysis.first_failure
    con.print(f"{len(analysis.rows)} invocations ({len({r.subgraph for r in analysis.rows})} subgraphs x "
              f"{len({r.step for r in analysis.rows})} steps); all rows: {args.out / 'accuracy.json'}",
              highlight=False)
    if first is None:
        con.print(f"[green]every subgraph at every step has cosine >= {args.threshold}[/green]")
        return 0
    con.print(f"[red]first below {args.threshold}:[/red] {first.label} at step {first.step}: cosine "
              f"{first.cosine:.7f}, max rel err {first.max_rel_err:.3g}", highlight=False)
    if analysis.repro is not None:
        con.print(f"reproduce: bin/harness accuracy --replay {shlex.quote(str(analysis.repro))}",
                  highlight=False, soft_wrap=True)
    return 1


def _cmd_replay(args, con) -> int:
    import json
    row = replay(args.replay)
    saved = json.loads((args.replay / "repro.json").read_text())
    threshold = saved.get("threshold", DEFAULT_THRESHOLD)
    verdict = "still fails" if row.fails(threshold) else "passes now"
    con.print(f"{row.label} at step {row.step} on {saved['backend']}: cosine {row.cosine:.7f} "
              f"(saved run: {saved['cosine']:.7f}), max rel err {row.max_rel_err:.3g}; "
              f"threshold {threshold}: {verdict}", highlight=False, soft_wrap=True)
    return 1 if row.fails(threshold) else 0


def _fmt_cos(value: float, threshold: float) -> str:
    text = f"{value:.7f}" if value == value else "NaN"
    return f"[red]{text}[/red]" if not value >= threshold else text


def render_worst(rows: list[Row], threshold: float, top: int, what: str, con) -> None:
    from rich.table import Table
    table = Table(title=f"worst invocations first: {what}")
    for col in ("step", "subgraph", "block", "branch", "cosine", "max rel err", "max abs err"):
        table.add_column(col, justify="left" if col == "branch" else "right")
    for r in worst_first(rows)[:top]:
        table.add_row(str(r.step), str(r.subgraph), str(r.block), r.branch, _fmt_cos(r.cosine, threshold),
                      f"{r.max_rel_err:.3g}", f"{r.max_abs_err:.3g}")
    con.print(table)


def render_grid(rows: list[Row], threshold: float, blocks: int, what: str, con) -> None:
    """Worst cosine over the steps for each subgraph, one row per block."""
    from rich.table import Table
    worst = per_subgraph(rows)
    table = Table(title=f"cosine per subgraph (worst step): {what}")
    table.add_column("block", justify="right")
    for branch in BRANCHES:
        table.add_column(branch, justify="right")
    by_key = {(r.block, r.branch): r for r in worst.values()}
    for block in range(blocks):
        cells = [(_fmt_cos(by_key[(block, b)].cosine, threshold) if (block, b) in by_key else "-")
                 for b in BRANCHES]
        table.add_row(str(block), *cells)
    con.print(table)
    if worst:
        low = min(worst.values(), key=lambda r: r.cosine if r.cosine == r.cosine else -1)
        con.print(f"lowest: {low.label} cosine {low.cosine:.7f} at step {low.step}; "
                  f"{sum(1 for r in worst.values() if r.fails(threshold))} of {len(worst)} subgraphs "
                  f"below {threshold}", highlight=False)
