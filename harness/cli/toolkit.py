"""CLI subcommands `convert` and `compare-toolkits`; registered by harness.cli.main through add_command()."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import add_options, ranged

__all__ = ["add_command", "cmd_convert", "cmd_compare"]

_non_negative = ranged(int, 0, float("inf"), "a whole number")


def _precision(text: str) -> str:
    """--precision: a recipe of toolkit/precisions.toml or a precision file."""
    from ..core.errors import HarnessError
    from ..toolkit.precisions import recipe
    try:
        recipe(text)
    except HarnessError as exc:
        # argparse names the option itself: "argument --precision: 'x' is unknown ..."
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--precision ")) from None
    return text


def add_command(subparsers) -> None:
    from ..toolkit.convert import DEFAULT_TARGET
    from ..toolkit.precisions import precisions
    conv = subparsers.add_parser("convert", help="convert an FP32 partition to .rknn files (rknn-toolkit2)")
    conv.add_argument("partition", type=Path, help="exported FP32 partition directory (manifest.json)")
    conv.add_argument("--out", type=Path, required=True, help="output directory for the .rknn files")
    conv.add_argument("--toolkit", metavar="VERSION",
                      help="rknn-toolkit2 version (default: toolkit/versions.toml); "
                           "its environment comes from bin/toolkit-env VERSION")
    conv.add_argument("--precision", default="float16", type=_precision,
                      help=f"{', '.join(precisions())} "
                           f"(w8a8-ffn: INT8 FFN linears, calibrated), or a precision file *.toml written by "
                           f"search-precision (default: %(default)s)")
    conv.add_argument("--calibration", type=Path, help="calibration set directory (for w8a8-ffn)")
    conv.add_argument("--target", default=DEFAULT_TARGET, help="target platform (default: %(default)s)")
    conv.add_argument("--allow-cpu-ops", action="store_true",
                      help="keep a conversion that places ops on the CPU (the CPU-fallback gate then only reports)")
    conv.add_argument("--sim-samples", type=_non_negative, default=0,
                      help="run the PC simulator on N random inputs per subgraph and print the "
                           "cosine against onnxruntime FP32 (default: 0)")
    conv.add_argument("--quiet", action="store_true", help="no progress lines")
    conv.set_defaults(func=cmd_convert)

    cmp = subparsers.add_parser("compare-toolkits",
                                help="convert with two toolkit versions, compare them and gate NEW "
                                     "(exit 1 unless NEW passes every part)")
    cmp.add_argument("old", help="toolkit version, e.g. 2.3.2")
    cmp.add_argument("new", help="toolkit version, e.g. 2.5.0 (the one judged)")
    cmp.add_argument("--partition", type=Path,
                     help="exported FP32 partition (default: the model's, exported on first use)")
    cmp.add_argument("--out", type=Path, default=Path("out/compare-toolkits"),
                     help="where both conversions and the report (report.json, report.md) go "
                          "(default: %(default)s)")
    cmp.add_argument("--target", default=DEFAULT_TARGET, help="target platform (default: %(default)s)")
    cmp.add_argument("--sim-samples", type=_non_negative, default=1,
                     help="random input sets per subgraph for the cosine (default: %(default)s)")
    add_options(cmp, "model_dir", "golden_dir", "cases")
    cmp.add_argument("--quiet", action="store_true", help="no progress lines")
    cmp.set_defaults(func=cmd_compare)


def cmd_convert(args) -> int:
    from ..report.toolkit import cosine_rows, print_convert_summary
    from ..toolkit.convert import ConvertSettings, convert_partition
    result = convert_partition(args.partition, args.out,
                               ConvertSettings(version=args.toolkit, precision=args.precision,
                                               calibration=args.calibration, target=args.target,
                                               allow_cpu_ops=args.allow_cpu_ops, samples=args.sim_samples,
                                               quiet=args.quiet))
    rows = cosine_rows(result, args.partition) if args.sim_samples else None
    print_convert_summary(result, rows, file=sys.stdout)
    return 0


def cmd_compare(args) -> int:
    """The report on stdout, verdict first; 0 only when NEW passes every part of the comparison."""
    from ..gates.compare_toolkits import REPORT_MD, CompareInputs, compare_toolkits
    cases = [c.strip() for c in args.cases.split(",")] if args.cases else None
    inputs = CompareInputs(args.partition, args.model_dir, cases, args.golden_dir)
    comparison = compare_toolkits(args.old, args.new, inputs, args.out, target=args.target,
                                  samples=args.sim_samples, quiet=args.quiet)
    print((args.out / REPORT_MD).read_text(encoding="utf-8"), end="")
    return 0 if comparison.status == "passes" else 1
