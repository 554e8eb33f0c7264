"""docs/measurements.md from docs/data/measurements.json, and that JSON from what the runs wrote.

    tools/measurements.py tier --artifacts artifacts --name "fast (both cores)" --wall 81.8 --cpu 131.3
    tools/measurements.py lifecycle --from out/bench-lifecycle.json --conditions "quiet (load 0.3), 5 December 2026"
    tools/measurements.py site --log out/site-c2672bf.txt --revision c2672bf --label "before 41" --wall 644 --cpu 99
    tools/measurements.py render            # writes the page; --check: exit 1 if the page differs

`tier` reads a bin/test run's artifacts (session.json: tests by outcome, pytest's seconds, the start)
and takes what only an outside clock knows (farm-bench's wall and CPU seconds, peak memory) as
options; `lifecycle` keeps tools/bench_lifecycle.py's JSON as written; `site` reads tools/bench_site.py's
printed lines (every run appended to one log: the medians) into a row of the results site's table. The page's prose is
tools/measurements.md.j2; dated changes of a figure go to CHANGELOG.md, not onto the page."""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "measurements.json"
PAGE = ROOT / "docs" / "measurements.md"
TEMPLATE = "measurements.md.j2"
# What bin/test adds to every pytest command line, and the options that only say where a run writes.
_BIN_TEST_ADDS = {"--suite-run", "--durations=25"}
_WHERE = ("--artifacts=", "--results=", "--basetemp=")


def tests_cell(tests: dict) -> str:
    return ", ".join(f"{count:,} {outcome}" for outcome, count in tests.items())


def tier_time(row: dict) -> str:
    """The time cell: wall (bold, with its target), pytest's own seconds, CPU, peak, the whole job."""
    parts = []
    if row.get("wall_s") is not None:
        target = f" (target {row['target_s']} s)" if row.get("target_s") else ""
        parts.append(f"**{row['wall_s']} s** wall{target}")
    if row.get("pytest_s") is not None:
        parts.append(f"{row['pytest_s']} s of pytest")
    parts += [f"{row['cpu_s']} s CPU"] if row.get("cpu_s") is not None else []
    parts += [f"peak {row['peak_mib']} MiB"] if row.get("peak_mib") is not None else []
    if row.get("whole_min") is not None:
        parts.append(f"{row['whole_min']} min with the venv built")
    when = ", ".join(x for x in (row.get("load"), _day_and_time(row.get("started")), row.get("revision")) if x)
    return ", ".join(parts) + (f" ({when})" if when else "")


def _day_and_time(started: str | None) -> str | None:
    """'2026-12-04T12:07' -> '4 Dec, 12:07 UTC' (session.json's start is UTC)."""
    if not started:
        return None
    when = datetime.fromisoformat(started)
    return f"{when.day} {when:%b}, {when:%H:%M} UTC"


def percent(fraction) -> str:
    if fraction is None:
        return "-"
    return f"{100 * fraction:.1f}".rstrip("0").rstrip(".") + " %"


def render(data: dict) -> str:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(tests=tests_cell, tier_time=tier_time, percent=percent)
    return env.get_template(TEMPLATE).render(**data)


def command_of(argv: list[str]) -> str:
    """The bin/test command a run's session.json argv came from (bin/test's own additions dropped)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("-c", "-n"):
            skip = True
        elif arg not in _BIN_TEST_ADDS and not arg.startswith(_WHERE):
            kept.append(arg)
    return " ".join(["bin/test", *(f'"{a}"' if " " in a else a for a in kept)])


def tier_row(session: dict, name: str, args) -> dict:
    if session.get("status") != "ok":
        raise SystemExit(f"error: session.json: the run ended '{session.get('status')}', not ok: not a figure")
    row = {"tier": name, "command": args.command or command_of(session["argv"]), "tests": session["tests"],
           "pytest_s": session["seconds"], "started": session["started"][:16]}
    extra = {"wall_s": args.wall, "target_s": args.target, "cpu_s": args.cpu, "peak_mib": args.peak,
             "load": args.load, "revision": args.revision}
    return {**row, **{k: v for k, v in extra.items() if v is not None}}


# tools/bench_site.py's line: "10000 runs, 40 series: collect 15.7 s, write 8.1 s; 43 pages, 134 files, 7.7 MB"
_SITE_LINE = re.compile(r"(?P<runs>\d+) runs, (?P<series>\d+) series: collect (?P<collect>[\d.]+) s, "
                        r"write (?P<write>[\d.]+) s; (?P<pages>\d+) pages, (?P<files>\d+) files, (?P<mb>[\d.]+) MB")


def site_row(log: Path, args) -> dict:
    """A row of the results site's table from tools/bench_site.py's log (one line a run: the medians)."""
    try:
        found = [m.groupdict() for m in _SITE_LINE.finditer(log.read_text())]
    except OSError as exc:
        raise SystemExit(f"error: --log {log}: cannot read it: {exc}") from None
    if not found:
        raise SystemExit(f"error: --log {log}: no line of tools/bench_site.py in it")
    row = {"revision": args.revision, "label": args.label, "runs": int(found[-1]["runs"]),
           "series": int(found[-1]["series"]), "n": len(found),
           "collect_s": round(statistics.median(float(f["collect"]) for f in found), 1),
           "write_s": round(statistics.median(float(f["write"]) for f in found), 1),
           "files": int(found[-1]["files"]), "mb": float(found[-1]["mb"])}
    extra = {"wall_s": args.wall, "cpu_s": args.cpu, "peak_mib": args.peak, "load": args.load}
    return {**row, **{k: v for k, v in extra.items() if v is not None}}


_SITE = {"command": "tools/bench_site.py", "store": "10 boards x 4 cases x 250 runs (each with the times of the "
         "84 subgraphs of a 28-step run)", "sitting": "", "note": "", "rows": []}


def record_site(data: dict, row: dict, sitting: str | None, note: str | None) -> dict:
    """The row replaces the row of its revision and label, or is added last."""
    site = {**_SITE, **data.get("site", {})}
    site |= {k: v for k, v in (("sitting", sitting), ("note", note)) if v is not None}
    same = [i for i, r in enumerate(site["rows"]) if (r["revision"], r["label"]) == (row["revision"], row["label"])]
    rows = [*site["rows"]]
    if same:
        rows[same[0]] = row
    else:
        rows.append(row)
    return {**data, "site": {**site, "rows": rows}}


def record_tier(data: dict, row: dict) -> dict:
    rows = [r for r in data["tiers"]["rows"] if r["tier"] != row["tier"]]
    at = next((i for i, r in enumerate(data["tiers"]["rows"]) if r["tier"] == row["tier"]), len(rows))
    return {**data, "tiers": {**data["tiers"], "rows": rows[:at] + [row] + rows[at:]}}


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {path}: cannot read {what}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the figures (default: %(default)s)")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page (default: %(default)s)")
    sub = parser.add_subparsers(dest="what", required=True)
    show = sub.add_parser("render", help="write the page from the figures")
    show.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    tier = sub.add_parser("tier", help="a tier's row from a bin/test run's artifacts")
    tier.add_argument("--artifacts", type=Path, required=True)
    tier.add_argument("--name", required=True, help="the row's tier column (a row of that name is replaced)")
    tier.add_argument("--command", help="the command shown (default: from session.json's argv)")
    for flag in ("--wall", "--cpu", "--peak", "--target"):
        tier.add_argument(flag, type=float)
    tier.add_argument("--load", help="e.g. 'nothing else running (load 1.0-1.5)'")
    tier.add_argument("--revision")
    life = sub.add_parser("lifecycle", help="the lifecycle table from tools/bench_lifecycle.py's JSON")
    life.add_argument("--from", dest="source", type=Path, required=True)
    life.add_argument("--conditions", required=True, help="machine, load and date of the run")
    site = sub.add_parser("site", help="a results site row from tools/bench_site.py's log")
    site.add_argument("--log", type=Path, required=True, help="tools/bench_site.py's output, every run appended")
    site.add_argument("--revision", required=True, help="the row's revision (its row of that label is replaced)")
    site.add_argument("--label", required=True, help="what the revision is, e.g. 'before issue 41'")
    for flag in ("--wall", "--cpu", "--peak"):
        site.add_argument(flag, type=float, help="the whole process's median, from an outside clock")
    site.add_argument("--load", help="e.g. 'load 9-13'")
    site.add_argument("--sitting", help="when and how the revisions were timed (the table's sentence)")
    site.add_argument("--note", help="what the figures say (the paragraph under the table)")
    args = parser.parse_args(argv)

    data = _read_json(args.data, "the figures")
    if args.what == "tier":
        data = record_tier(data, tier_row(_read_json(args.artifacts / "session.json", "a run's session"),
                                          args.name, args))
    elif args.what == "site":
        data = record_site(data, site_row(args.log, args), args.sitting, args.note)
    elif args.what == "lifecycle":
        data = {**data, "lifecycle": {"command": "tools/bench_lifecycle.py --only board-sim",
                                      "conditions": args.conditions, "bench": _read_json(args.source, "a bench run")}}
    if args.what != "render":
        args.data.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    text = render(data)
    if getattr(args, "check", False):
        same = args.page.read_text() == text
        said = "as generated" if same else f"differs from {args.data}: run tools/measurements.py render"
        print(f"{args.page}: {said}")
        return 0 if same else 1
    args.page.write_text(text)
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
