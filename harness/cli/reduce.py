"""`harness reduce SUBGRAPH --toolkit VERSION`: bisect a failing subgraph's ONNX graph on rknn-toolkit2's
simulator to the op that diverges, write a minimal repro, try the remedies (harness/gates/reduce.py).

    harness reduce 14 --toolkit 2.5.0 --model-dir DIR --step 0       # inputs: step 0 of an FP32 generation
    harness reduce 14_block04_ffn --toolkit 2.5.0 --inputs random    # compare-toolkits' inputs
    harness reduce 14 --toolkit 2.5.0 --inputs out/accuracy/repro/step00-subgraph14
    harness reduce --toolkit 2.5.0 --from-report artifacts/runs/seven-headroom.json   # the headroom gate's

Exit 0 when a remedy restores the check, 1 when none does or the subgraph does not diverge here.
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from .options import add_options, ranged

__all__ = ["add_command"]

# INT8's bar: the embedded model's FFNs built w8a8 reach ~0.9998 on their own inputs (reduce's int8
# remedy on block 4's FFN: 0.9998712), so 0.999 fails what INT8 does wrong, not what it always does
INT8_COSINE = 0.999


def add_command(subparsers):
    p = subparsers.add_parser("reduce", help="a failing subgraph bisected on the toolkit's simulator to the "
                                             "op that diverges; a repro; the remedy that restores the gate")
    p.add_argument("subgraph", nargs="?",
                   help="the subgraph: index (14), file stem (14_block04_ffn) or label (with --from-report: "
                        "default the first it fails)")
    p.add_argument("--toolkit", metavar="VERSION", help="toolkit version (default: toolkit/versions.toml's)")
    add_options(p, "model_dir", "partition", "seed", "steps", "cfg_scale")
    p.add_argument("--case", help="golden case whose generation feeds the subgraph (its settings, embeddings)")
    p.add_argument("--golden-dir", type=Path, help="where --case's cases.toml is (default: golden/<model name>)")
    p.add_argument("--prompt", help="prompt of the generation (default: the model's)")
    p.add_argument("--step", metavar="N[,N...]|all",
                   help="the failing step(s) whose inputs the subgraph is judged (and a quantised remedy "
                        "calibrated) on; 'all': every step (default: 0; with --from-report: all)")
    p.add_argument("--inputs", metavar="DIR|random",
                   help="a failing invocation `harness accuracy` saved, or 'random' (compare-toolkits' inputs)")
    p.add_argument("--threshold", type=ranged(float, 0, 1, "a cosine in 0..1"),
                   help="lowest acceptable cosine (default: toolkit/precisions.toml float16 cosine_min)")
    p.add_argument("--from-report", type=Path, metavar="RUN.json",
                   help="the failing case of the headroom gate's run report (subgraph, step, stream; the "
                        "case its name says)")
    p.add_argument("--out", type=Path, help="report.json and repro/ (default: out/reduce/<file stem>; with "
                                             "--from-report: <artifacts>/reduce/subgraphNN, which the run "
                                             "summary links)")
    p.add_argument("--int8", action="store_true",
                   help="the subgraph is built INT8 (w8a8, as --precision w8a8-ffn builds the FFNs): each range "
                        "bisected INT8, calibrated on its own inputs; the remedy a float16 island "
                        f"(default --threshold {INT8_COSINE})")
    p.add_argument("--no-write", action="store_true",
                   help="do not write the winning remedy into the partition's conversion.toml")
    p.set_defaults(func=_cmd_reduce)
    return p


def _from_report(args, bundle) -> None:
    """--from-report: the subgraph, step and case the headroom gate's run report names."""
    from ..gates.cases import golden_dir_for, load_cases
    from ..gates.failing import from_headroom_report
    if args.inputs is not None or args.prompt is not None:
        raise ConfigError("--from-report decides the inputs (the run's step): drop --inputs/--prompt")
    golden = Path(args.golden_dir or golden_dir_for(bundle.cfg.name)) / "cases.toml"
    cases = [c.name for c in load_cases(golden)] if golden.is_file() else []
    found = from_headroom_report(args.from_report, args.subgraph, cases)
    print(f"[reduce] from {args.from_report}: {found.line()}", flush=True)
    # every step, not only the one the gate names: a remedy calibrated and judged on one step alone
    # (int8 on step 0) passed there and failed accuracy at step 3 (docs/reduce.md)
    args.subgraph, args.step = str(found.subgraph), args.step or "all"
    if args.out is None:        # artifacts/runs/X.json -> artifacts/reduce/<stem>: the summary links it
        from ..gates.failing import REDUCE_DIR
        args.out = Path(args.from_report).resolve().parent.parent / REDUCE_DIR / f"subgraph{found.subgraph:02d}"
    if found.case:
        args.case = args.case or found.case
    else:       # the run's prompt and settings
        args.steps = args.steps or found.settings.get("steps")
        args.seed = args.seed if args.seed is not None else found.settings.get("seed")
        args.cfg_scale = args.cfg_scale if args.cfg_scale is not None else found.settings.get("cfg_scale")


def _cmd_reduce(args) -> int:
    import time

    from ..gates.reduce import ReduceRequest, run_reduce
    from ..model.bundle import load_bundle
    from ..runtime.partitions import exported_partition
    from ..toolkit.envs import default_version, toolkit_python
    from ..toolkit.precisions import recipe
    version = args.toolkit or default_version()
    toolkit_python(version)             # one line when the environment is absent, before any work
    began = time.perf_counter()
    bundle = load_bundle(args.model_dir)
    partition = args.partition or exported_partition(bundle, "float32")
    if args.from_report is not None:
        _from_report(args, bundle)
    elif args.subgraph is None:
        raise ConfigError("reduce: name the subgraph (e.g. 14), or give --from-report RUN.json")
    case_inputs = None
    if args.inputs is None:
        from ..gates.cases import chosen_inputs
        case_inputs = chosen_inputs(bundle, args.case, args.golden_dir, args.prompt, args.steps, args.cfg_scale,
                                    args.seed)
    threshold = args.threshold if args.threshold is not None else (
        INT8_COSINE if args.int8 else float(recipe("float16").get("cosine_min", 0.9999)))
    report = run_reduce(ReduceRequest(partition, args.subgraph, version, args.out, args.inputs, 0, args.step or "0",
                                      threshold, bundle, case_inputs, not args.no_write, args.int8),
                        say=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - began
    if args.from_report is not None:
        from ..gates.failing import link_in_summary
        summary = link_in_summary(Path(args.out).resolve().parent.parent)
        if summary:
            print(f"[reduce] linked from {summary}")
    if not report["reproduces"]:
        print(f"{report['subgraph']}: passes the check on rknn-toolkit2 {version} with these inputs "
              f"(cosine >= {threshold}): nothing to reduce ({seconds:.0f} s)")
        return 1
    winner = report.get("winner")
    print(f"{report['subgraph']}: diverges at {report['reduction']['nodes']}; repro {report['repro']['folder']}; "
          + (f"remedy: {winner['remedy']} ({winner['what']})"
             + (f", written to {winner['written']}" if winner.get("written") else ", not applied by convert")
             if winner else "no remedy restores the check")
          + f"; {len(report['reduction']['tries'])} tries, {seconds:.0f} s")
    return 0 if winner else 1
