"""`harness capture-calibration`: subgraph inputs captured during an FP32 generation (harness.runtime.capture)."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..runtime.capture import (
    PRESETS,
    RECORD_FILE,
    CaptureRecipe,
    capture_calibration,
    parse_branches,
    parse_steps,
    parse_streams,
)


def add_command(subparsers):
    """Register `capture-calibration` on the CLI's subparsers."""
    from ..model.config import EMBEDDED_DIR
    p = subparsers.add_parser(
        "capture-calibration",
        help="capture subgraph inputs during an FP32 generation: .npy sets + the toolkit's dataset lists")
    p.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                   help="model directory with model.toml (default: models/embedded)")
    p.add_argument("--partition", type=Path,
                   help="FP32 partition to run (default: the FP32 export of these weights, made on first use)")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="a named recipe for --branches, --steps and --streams: board-112 (high and low "
                        "sigma x cond/uncond, the board's) or full-schedule (8 sigma strata x cond/uncond)")
    p.add_argument("--branches", default="ffn", help="branches to capture: ffn, self_attn, cross_attn, all "
                                                    "(comma list; default: %(default)s)")
    p.add_argument("--blocks", help="blocks to capture: N, N-M or a comma list (default: all)")
    p.add_argument("--steps", default="high,low",
                   help="steps to capture: high (first, sigma 1), low (last), mid, step numbers, or "
                        "strata:N (N steps evenly spaced in sigma) (default: %(default)s)")
    p.add_argument("--streams", default="cond,uncond", help="CFG streams (default: %(default)s)")
    p.add_argument("--case", help="golden case to generate (its settings and text embeddings; a model "
                                  "without a prompt encoder here, like Anima, runs this way)")
    p.add_argument("--golden-dir", type=Path, help="where --case's cases.toml is (default: golden/<model name>)")
    p.add_argument("--prompt", help="prompt of the generation (default: the model's default prompt)")
    p.add_argument("--seed", type=int, help="initial-noise seed (default: the model's)")
    p.add_argument("--sampler-steps", type=int, help="steps of the generation (default: the model's)")
    p.add_argument("--cfg", type=float, dest="cfg_scale", help="CFG scale (default: the model's)")
    p.add_argument("--out", type=Path, required=True, help="new directory for the capture")
    p.set_defaults(func=_cmd_capture)
    return p


def _cmd_capture(args) -> int:
    from ..gates.cases import chosen_inputs
    from ..model.bundle import load_bundle
    from ..runtime.partitions import exported_partition
    from .partition import parse_blocks
    bundle = load_bundle(args.model_dir)
    if args.sampler_steps is not None and args.sampler_steps < 1:
        raise ConfigError(f"--sampler-steps {args.sampler_steps}: must be positive")
    inputs = chosen_inputs(bundle, args.case, args.golden_dir, args.prompt, args.sampler_steps,
                           args.cfg_scale, args.seed)
    settings = inputs.settings
    if args.preset is not None:
        args.branches, args.steps, args.streams = (PRESETS[args.preset][k] for k in ("branches", "steps", "streams"))
    steps = parse_steps(args.steps, settings.steps, settings.shift)
    branches = parse_branches(args.branches)
    streams = parse_streams(args.streams, ["cond"] + (["uncond"] if settings.cfg_scale != 1.0 else []))
    blocks = parse_blocks(args.blocks, bundle.cfg.blocks) if args.blocks else None
    partition = args.partition or exported_partition(bundle, "float32")
    record = capture_calibration(bundle, partition, args.out, inputs.prompt, settings,
                                 CaptureRecipe(branches, steps, streams, blocks), text_embs=inputs.text_embs)
    _print_summary(record, args.out)
    return 0


def _print_summary(record: dict, out: Path) -> None:
    from rich.table import Table

    from ..report.terminal import console
    r = record["recipe"]
    table = Table(title=f"calibration capture {out}")
    for col in ("branch", "subgraphs", "sets"):
        table.add_column(col, justify="left" if col == "branch" else "right")
    for branch in r["branches"]:
        subs = [s for s in record["subgraphs"] if s["branch"] == branch]
        table.add_row(branch, str(len(subs)), str(sum(len(s["sets"]) for s in subs)))
    con = console(stderr=False)
    con.print(table)
    steps = ", ".join(f"step {s} (sigma {g:.4f})" for s, g in zip(r["steps"], r["sigmas"]))
    con.print(f"{record['total_sets']} sets: {steps} x {', '.join(r['streams'])}; "
              f"prompt '{record['generation']['prompt']}', seed {record['generation']['seed']}; "
              f"record {out / RECORD_FILE}", highlight=False)
