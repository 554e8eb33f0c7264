"""`bin/harness results ...`: the results store from the command line.

    results import FILE.csv...                             runs from another store's `export` (merging stores)
    results export [--out FILE.csv] [--ab-out FILE.csv]    one CSV row per run (Otava, a spreadsheet); per A/B verdict
    results check                                          each series' latest run, its change points, A/B sessions
    results boards                                         the boards of one board model, outliers named
    results push --to URL                                  this store's runs into another (a fleet's)
    results site --out DIR [--reports DIR]                 a static site of the store (harness/site/)
    results simulate --out FILE.json [--runs N]            the verdicts' error rates (harness/cli/results_simulate.py)

Every subcommand but `simulate` takes --results URL (SQLAlchemy's form, default sqlite:///.benchmarks/results.sqlite).
`check` and `boards` exit 1 when they find a regression or an outlier board, so CI can act on them.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import stat
import sys
from collections import Counter, defaultdict
from pathlib import Path

from ..core.atomic import atomic_write_text
from ..core.errors import ConfigError
from ..lifecycle.steptimes import STAGE_NAMES
from ..model.config import BRANCHES
from ..results.fleet import fleet_lines
from ..results.records import ResultsError, Run, RunKey
from ..results.sessions import SIDES
from ..results.store import DEFAULT_RESULTS, ResultsStore
from ..results.verdict.changes import change_points
from ..results.verdict.figures import parse_threshold
from ..results.verdict.judging import judge_stored
from ..results.verdict.outcome import Outcome
from ..results.verdict.power import parse_detect
from ..results.verdict.reference import is_confirmation
from ..results.verdict.verdict import group_note
from . import results_simulate
from .options import add_options

__all__ = ["add_command", "add_results_option", "check_lines", "series"]


def add_results_option(parser) -> None:
    parser.add_argument("--results", default=DEFAULT_RESULTS,
                        help="results store URL, SQLAlchemy's form: sqlite:///relative.sqlite, "
                             "sqlite:////absolute.sqlite or postgresql://user@host/db (default: %(default)s)")


def add_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("results", help="the benchmark results store: import, export, check, "
                                                   "compare boards, push to a fleet store")
    sub = parser.add_subparsers(dest="results_command", required=True)
    imp = sub.add_parser("import", help="add the runs of CSV files `results export` wrote (another store's)")
    imp.add_argument("files", type=Path, nargs="+", metavar="FILE.csv", help="runs CSV of `results export`")
    imp.set_defaults(func=_cmd_import)
    exp = sub.add_parser("export", help="write every run as one CSV row")
    exp.add_argument("--out", type=Path, help="CSV file, written whole and replaced atomically; a symlink, FIFO "
                                              "or device is refused (default: standard output)")
    exp.add_argument("--ab-out", type=Path, help="also write one CSV row per figure of every A/B session here")
    exp.set_defaults(func=_cmd_export)
    chk = sub.add_parser("check", help="judge each series' latest run against its history; change points")
    chk.add_argument("--board", help="only this board")
    chk.add_argument("--threshold", default="10%", help="the fixed rule's threshold while a history has too few "
                     "runs for a learned one (default: %(default)s, as --fixed-threshold)")
    add_options(chk, "detect", "inconclusive")
    chk.set_defaults(func=_cmd_check)
    brd = sub.add_parser("boards", help="compare the boards of one board model on one key")
    brd.add_argument("--board-model", help="only this board model (default: every one with several boards)")
    add_options(brd, "detect", "inconclusive")
    brd.set_defaults(func=_cmd_boards)
    push = sub.add_parser("push", help="copy the runs another store lacks into it (idempotent)")
    push.add_argument("--to", required=True, help="target store URL (e.g. the fleet's postgresql://...)")
    push.set_defaults(func=_cmd_push)
    site = sub.add_parser("site", help="write a static results site (index, series, fleets, upgrades)")
    site.add_argument("--out", type=Path, required=True, help="folder of the site (new, empty, or an earlier site)")
    site.add_argument("--reports", type=Path, help="folder of run reports (<run id>/report.html) to link and copy")
    site.add_argument("--threshold", default="10%",
                      help="the fixed rule's threshold, as for check (default: %(default)s)")
    site.set_defaults(func=_cmd_site)
    for command in (imp, exp, chk, brd, push, site):
        add_results_option(command)
    results_simulate.add_subcommand(sub)
    return parser


# -- import --------------------------------------------------------------------------------------------

def read_csv(path: Path) -> list[Run]:
    """The runs of a CSV that export_csv wrote, in its order. A row that is not a run, or a run id
    that is in the file twice for one case, refuses the whole file (ResultsError naming the rows):
    which of two rows is the run cannot be told."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultsError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    runs: list[Run] = []
    seen: dict[tuple[str, str], int] = {}
    for number, row in enumerate(rows, start=2):        # row 1 is the header
        run = _run_of_row(row, f"{path} row {number}")
        where = seen.setdefault((run.run_id, run.key.case), number)
        if where != number:
            raise ResultsError(f"{path}: run {run.run_id!r} of case {run.key.case!r} is on rows {where} and {number}: "
                               "a run id is one run per case; nothing imported")
        runs.append(run)
    return runs


def _run_of_row(row: dict, where: str) -> Run:
    missing = [c for c in _RUN_COLUMNS if c not in row]
    if missing:
        raise ResultsError(f"{where}: no column {missing[0]!r}: not a runs CSV of `results export`")

    def number(column, kind=float):
        return kind(row[column]) if row[column] not in ("", None) else None
    try:
        return Run(
            run_id=row["run_id"], time=row["time"], board_id=row["board_id"], board_model=row["board_model"],
            model=row["model"], valid=row["valid"] == "1", mean_step_s=number("mean_step_s"),
            total_denoise_s=number("total_denoise_s"),
            key=RunKey(case=row["case"], steps=number("steps", int), precision=row["precision"],
                       backend=row["backend"], manifest_hash=row["manifest_hash"],
                       versions={v: row[v] or None for v in _VERSION_COLUMNS}),
            branches={b: number(f"core_{b}_s") for b in BRANCHES if row.get(f"core_{b}_s")},
            stages={s: number(f"stage_{s}_s") for s in STAGE_NAMES if row.get(f"stage_{s}_s")},
            invalid_reasons=tuple(r for r in row["invalid_reasons"].split("; ") if r),
            git_revision=row["git_revision"] or None, ci_url=row["ci_url"] or None,
            peak_pss_added_bytes=number("peak_pss_added_bytes", int), host_cpus=number("host_cpus", int),
            host_memory_bytes=number("host_memory_bytes", int) if "host_memory_bytes" in row else None,
            host_load=number("host_load"), host_probe_s=number("host_probe_s"),
            serial_hash=row.get("serial_hash") or None, device_model=row.get("device_model") or None)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{where}: not a run ({exc})") from None
    except ResultsError as exc:
        raise ResultsError(f"{where}: {exc}") from None


def _cmd_import(args) -> int:
    """Every file read and checked first, then its new runs written in one transaction: an import
    refused or stopped leaves the store as it was."""
    found: dict[tuple, Run] = {}
    repeated = 0                # the same run in two files (two stores that shared it): imported once
    for path in args.files:
        for run in read_csv(path):
            other = found.setdefault((run.run_id, run.key.case), run)
            if other is not run and other != run:
                raise ResultsError(f"{path}: run {run.run_id!r} of case {run.key.case!r} differs from the run of "
                                   "that id in an earlier file: nothing imported")
            repeated += other is not run
    with ResultsStore(args.results) as store:
        new = [run for key, run in found.items() if not store.has_run(*key)]
        store.add_runs(new)
        print(f"{store.where}: {len(new)} run(s) imported, {len(found) - len(new)} already in the store"
              + (f", {repeated} repeated in another file (imported once)" if repeated else ""))
    return 0


# -- export --------------------------------------------------------------------------------------------

_VERSION_COLUMNS = ("npu_driver", "runtime_lib", "toolkit_lite", "onnxruntime")


# What `import` needs of a row; the per-branch and per-stage figures, host_memory_bytes, serial_hash
# and device_model (an export from before them has none) are read where present.
_RUN_COLUMNS = ("time", "run_id", "case", "board_id", "board_model", "model", "backend", "precision", "steps",
                "manifest_hash", *_VERSION_COLUMNS, "git_revision", "ci_url", "valid", "invalid_reasons",
                "mean_step_s", "total_denoise_s", "peak_pss_added_bytes", "host_cpus", "host_load", "host_probe_s")


def export_csv(runs: list[Run]) -> str:
    """One row per run: identity, key, validity and every figure; Otava reads `time` and the figures."""
    header = ["time", "run_id", "case", "board_id", "board_model", "model", "backend", "precision", "steps",
              "manifest_hash", *_VERSION_COLUMNS, "git_revision", "ci_url", "valid", "invalid_reasons",
              "mean_step_s", "total_denoise_s", *(f"core_{b}_s" for b in BRANCHES),
              *(f"stage_{s}_s" for s in STAGE_NAMES), "peak_pss_added_bytes", "host_cpus", "host_load",
              "host_probe_s", "serial_hash", "device_model", "host_memory_bytes"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for r in runs:
        writer.writerow([r.time, r.run_id, r.key.case, r.board_id, r.board_model, r.model, r.key.backend,
                         r.key.precision, r.key.steps, r.key.manifest_hash,
                         *(r.key.versions.get(v) or "" for v in _VERSION_COLUMNS), r.git_revision or "",
                         r.ci_url or "", int(r.valid), "; ".join(r.invalid_reasons), repr(r.mean_step_s),
                         repr(r.total_denoise_s), *(_cell(r.branches.get(b)) for b in BRANCHES),
                         *(_cell(r.stages.get(s)) for s in STAGE_NAMES), _cell(r.peak_pss_added_bytes),
                         _cell(r.host_cpus), _cell(r.host_load), _cell(r.host_probe_s), r.serial_hash or "",
                         r.device_model or "", _cell(r.host_memory_bytes)])
    return out.getvalue()


def export_ab_csv(sessions: list) -> str:
    """One row per judged figure of every A/B session: both sides' identity and key, the effect and its
    interval. The sides' runs are rows of export_csv too (run ids `<session>-baseline` for A, `-candidate`
    for B). The columns of A and B are headed by the sides' stored keys, as the CSV always was."""
    header = ["time", "session_id", "case", "board_id", "rounds", "lifecycle",
              *(f"{side}_{v}" for side in SIDES for v in ("run_id", "partition", "manifest_hash")),
              *(f"{side}_{v}" for side in SIDES for v in _VERSION_COLUMNS),
              "figure", "shift_pct", "ci_low_pct", "ci_high_pct", "threshold_pct", "confidence", "n", "regression"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for s in sessions:
        a, b = s.a, s.b
        identity = [a.time, s.session_id, s.case, a.board_id, len(s.pairs), s.lifecycle, a.run_id,
                    s.a_partition, a.key.manifest_hash, b.run_id, s.b_partition, b.key.manifest_hash,
                    *(r.key.versions.get(v) or "" for r in (a, b) for v in _VERSION_COLUMNS)]
        for v in s.verdicts:
            writer.writerow([*identity, v.label, repr(v.shift_pct), repr(v.ci_pct[0]), repr(v.ci_pct[1]),
                             repr(v.threshold_pct), repr(v.confidence), v.n, int(v.regression)])
    return out.getvalue()


def _cell(value) -> str:
    return "" if value is None else repr(value)


def _regular_file(path: Path | None, option: str) -> None:
    """Refuse an output that is a symlink, FIFO, device, socket or folder: the export replaces its file
    atomically (a new file renamed over it), which would silently turn a link or a device node into a
    plain file (as root, --out /dev/stdout would replace that link). Standard output is the default."""
    if path is None:
        return
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    kinds = ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
    kind = next((name for test, name in kinds if test(mode)), None)
    if kind:
        instead = "name a file, or leave out --out for standard output" if option == "--out" else "name a file"
        raise ConfigError(f"{option} {path}: is {kind}; export writes a regular file and replaces it whole "
                          f"({instead})")


def _cmd_export(args) -> int:
    _regular_file(args.out, "--out")
    _regular_file(args.ab_out, "--ab-out")
    with ResultsStore(args.results, create=False) as store:
        runs = store.runs()
        sessions = store.ab_sessions() if args.ab_out else []
    if args.ab_out:
        atomic_write_text(args.ab_out, export_ab_csv(sessions))
        print(f"{args.ab_out}: {len(sessions)} A/B session(s)", file=sys.stderr if not args.out else sys.stdout)
    text = export_csv(runs)
    if args.out:
        atomic_write_text(args.out, text)
        print(f"{args.out}: {len(runs)} run(s)")
    else:
        sys.stdout.write(text)
    return 0


# -- check ---------------------------------------------------------------------------------------------

def series(runs: list[Run]) -> dict[tuple, list[Run]]:
    """(board, key digest) -> the valid runs of that history, oldest first."""
    out: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if run.valid:
            out[(run.board_id, run.key.digest)].append(run)
    return out


def check_lines(store: ResultsStore, runs: list[Run], threshold_pct: float,
                detect_pct: float) -> tuple[list[str], list[Outcome]]:
    """Per board and experiment: its latest run judged as the gate judged it (judge_stored: against the
    accepted stack, probation and the confirming run included), and the change points of each of its
    keys' series; the outcomes judged."""
    if runs and not any(run.valid for run in runs):
        reasons = Counter(reason for run in runs for reason in run.invalid_reasons).most_common(1)
        return [f"{len(runs)} run(s), every one INVALID, so no series to judge"
                + (f" (most often: {reasons[0][0]})" if reasons else "")], []
    lines, outcomes = [], []
    experiments: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        experiments[(run.board_id, run.key.experiment)].append(run)
    for (board, _), members in experiments.items():
        latest = next((r for r in reversed(members) if r.valid and not is_confirmation(r)), None)
        if latest is None:
            continue
        second = next((r for r in members if r.run_id == f"{latest.run_id}-confirm"), None)
        judgement = judge_stored(store, latest, threshold_pct, detect_pct, second)
        valid = sum(r.valid for r in members)
        lines.append(f"{latest.key.case} on {board} ({latest.key.backend}, {latest.key.precision}, "
                     f"{latest.key.steps} steps): {valid} valid run(s), latest run {latest.run_id}")
        lines.append(f"  {judgement.verdict_line()}")
        lines += [f"    {v.line()} ({v.kind}, n={v.n}{group_note(v)})" for v in judgement.verdicts]
        if judgement.outcome is not None:
            outcomes.append(judgement.outcome)
        lines += _change_point_lines(series([r for r in members if r.key.digest == latest.key.digest]))
    return lines, outcomes


def _change_point_lines(found: dict[tuple, list[Run]]) -> list[str]:
    lines = []
    for members in found.values():
        values = [r.mean_step_s for r in members]
        for index in change_points(values):
            before, after = values[index - 1], values[index]
            lines.append(f"  change point at run {members[index].run_id} ({members[index].time}): step "
                         f"{sum(values[:index]) / index:.4f} s -> {sum(values[index:]) / (len(values) - index):.4f} s"
                         f" (last before {before:.4f}, first after {after:.4f})")
    return lines


def ab_check_lines(sessions: list, detect_pct: float) -> tuple[list[str], list[Outcome]]:
    """Per pair of keys (board, case, A's key, B's key): its latest A/B session judged again
    from its stored pairs (ab.judge_pairs, held to --detect), and its outcome."""
    from ..results.ab import judge_pairs, session_decider, session_outcome
    latest = {}
    for s in sessions:          # oldest first: the last one of a pair of keys stays
        latest[(s.a.board_id, s.case, s.a.key.digest, s.b.key.digest)] = s
    lines, outcomes = [], []
    for s in latest.values():
        differences = "; ".join(s.b.key.differences(s.a.key)) or "same key"
        verdicts = judge_pairs(list(s.pairs), s.threshold_pct, s.confidence, detect_pct)
        outcome, decider = session_outcome(verdicts), session_decider(verdicts, len(s.pairs))
        outcomes.append(outcome)
        lines.append(f"A/B {s.case} on {s.a.board_id}: {s.b_partition} against "
                     f"{s.a_partition} ({differences}), session {s.session_id}, {len(s.pairs)} pairs: "
                     f"{outcome.name}" + (f"; {decider}" if decider else ""))
        lines += [f"  {'REGRESSION ' if v.regression else ''}{v.line()} ({v.kind}, n={v.n})" for v in verdicts]
    return lines, outcomes


def _cmd_check(args) -> int:
    with ResultsStore(args.results, create=False) as store:
        runs = store.runs(board=args.board)
        sessions = store.ab_sessions(board=args.board)
        if not runs:
            raise ConfigError(f"{args.results}: no runs" + (f" of board {args.board}" if args.board else ""))
        detect = parse_detect(args.detect)
        lines, outcomes = check_lines(store, runs, parse_threshold(args.threshold, "--threshold"), detect)
    ab_lines, ab_outcomes = ab_check_lines(sessions, detect)
    print("\n".join(lines + ab_lines))
    return _exit(outcomes + ab_outcomes, args.inconclusive)


def _exit(outcomes: list[Outcome], inconclusive: str) -> int:
    """1 for a REGRESSION, and for an INCONCLUSIVE verdict unless --inconclusive=warn; else 0."""
    failing = {Outcome.REGRESSION} | ({Outcome.INCONCLUSIVE} if inconclusive != "warn" else set())
    return 1 if failing & set(outcomes) else 0


# -- boards --------------------------------------------------------------------------------------------

def _cmd_boards(args) -> int:
    with ResultsStore(args.results, create=False) as store:
        runs = store.runs(board_model=args.board_model)
    lines, outliers, inconclusive = fleet_lines(runs, args.board_model, parse_detect(args.detect))
    if not lines:
        raise ConfigError(f"{args.results}: no board model with runs of several boards on one key"
                          + (f" ({args.board_model})" if args.board_model else ""))
    print("\n".join(lines))
    if outliers:
        print(f"outlier board(s): {', '.join(outliers)}")
    if inconclusive:
        print(f"board(s) the fleet could not judge (INCONCLUSIVE): {', '.join(inconclusive)}")
    return _exit([Outcome.REGRESSION] * bool(outliers) + [Outcome.INCONCLUSIVE] * bool(inconclusive),
                 args.inconclusive)


# -- push ----------------------------------------------------------------------------------------------

def _cmd_push(args) -> int:
    with ResultsStore(args.results, create=False) as local, ResultsStore(args.to) as fleet:
        copied, had = local.push(fleet)
        print(f"{local.where} -> {fleet.where}: {copied} run(s) pushed, {had} already there")
    return 0


# -- site ----------------------------------------------------------------------------------------------

def _cmd_site(args) -> int:
    from ..site.collect import collect
    from ..site.pages import write_site
    with ResultsStore(args.results, create=False) as store:
        site = collect(store, args.threshold)
    if not site.series:
        raise ConfigError(f"{args.results}: no runs, so no site")
    pages = write_site(site, args.out, args.reports)
    print(f"{args.out}: {len(pages)} page(s), {len(site.series)} series, {site.runs} run(s) of {site.where}")
    return 0
