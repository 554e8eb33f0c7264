"""`harness search-precision`: the fastest INT8-FFN build that passes the quality gate on the simulator
(the search itself: harness.gates.precision_search)."""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..gates.precision_search import JudgedCase, board_saving, chosen, load_outcomes, markdown, render, say, search


def add_command(subparsers):
    from ..model.config import EMBEDDED_DIR
    p = subparsers.add_parser("search-precision",
                              help="find the fastest INT8-FFN mix that passes the quality gate on the simulator")
    p.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR, help="model directory (default: models/embedded)")
    p.add_argument("--calibration", type=Path,
                   help="calibration directory (default: the full-schedule preset, captured into --out)")
    p.add_argument("--case", default=None, help="golden case judged (default: the first of cases.toml)")
    p.add_argument("--golden-dir", type=Path, help="golden directory (default: golden/<model name>)")
    p.add_argument("--toolkit", metavar="VERSION", help="rknn-toolkit2 version (default: toolkit/versions.toml)")
    p.add_argument("--no-options", dest="options", action="store_false",
                   help="try only the board's quantization options (normal, per-channel) on the all-INT8 build")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache"), help="FP32 export cache (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/search-precision"),
                   help="output directory (default: %(default)s)")
    p.add_argument("--table-from", type=Path, metavar="SEARCH_JSON",
                   help="search nothing: print a finished search's candidates (its search.json) as a markdown table")
    p.set_defaults(func=_cmd_search)
    return p


def _cmd_search(args) -> int:
    if args.table_from:
        print(markdown(load_outcomes(args.table_from)[0]), end="")
        return 0
    from ..gates.cases import golden_dir_for, load_cases
    from ..gates.golden import GoldenStore
    from ..model.bundle import load_bundle
    from ..report.terminal import console
    bundle = load_bundle(args.model_dir)
    golden_dir = args.golden_dir or golden_dir_for(bundle.cfg.name)
    cases = [c for c in load_cases(golden_dir / "cases.toml") if c.sampler == "flow-euler"]
    case = next((c for c in cases if args.case in (None, c.name)), None)
    if case is None:
        raise ConfigError(f"--case {args.case}: no flow-euler case of that name in {golden_dir / 'cases.toml'}")
    scale = int(bundle.cfg.decoder.get("scale", 4)) if bundle.cfg.decoder else None
    if scale is None:
        raise ConfigError(f"{bundle.cfg.name}: search-precision judges the decoded image; this model has no decoder")
    h, w = bundle.cfg.latent_size
    golden, _ = GoldenStore(golden_dir, (h * scale, w * scale, 3)).load(case)
    args.out.mkdir(parents=True, exist_ok=True)
    calibration = args.calibration or _full_schedule(bundle, args.cache_dir, args.out)
    outcomes = search(bundle, calibration, JudgedCase(case, golden, golden_dir), args.out, args.cache_dir,
                      args.toolkit, options=args.options)
    con = console(stderr=False)
    if not con.is_terminal:     # a log file gets the whole table, not 80 squeezed columns
        con.width = 170
    render(outcomes, board_saving(), con)
    con.print(f"all candidates: {args.out / 'search.json'}", highlight=False)
    return 0 if chosen(outcomes) is not None else 1


def _full_schedule(bundle, cache_dir: Path, out: Path) -> Path:
    from ..runtime.capture import (
        PRESETS,
        RECORD_FILE,
        CaptureRecipe,
        capture_calibration,
        parse_branches,
        parse_steps,
        parse_streams,
    )
    from ..runtime.converted import cached_fp32_export
    from ..sampling.reference_run import sample_settings
    target = out / "calibration-full-schedule"
    if (target / RECORD_FILE).is_file():
        return target
    settings = sample_settings(bundle)
    preset = PRESETS["full-schedule"]
    say(f"capturing the full-schedule calibration into {target}")
    capture_calibration(bundle, cached_fp32_export(bundle, cache_dir), target,
                        bundle.cfg.prompt.get("default", ""), settings,
                        CaptureRecipe(parse_branches(preset["branches"]),
                                      parse_steps(preset["steps"], settings.steps, settings.shift),
                                      parse_streams(preset["streams"], ["cond", "uncond"])))
    return target
