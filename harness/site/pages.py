"""Write the site: Jinja2 pages, the plots of plots.py, the style sheet and the filter script.

Every link is relative, so the site works from the file system (file://) and from any static server;
nothing is fetched from elsewhere. The pages are whole without JavaScript: the trends are SVG images,
and the index's filter (the one script) hides rows that a page without it lists in full.
The site is written to a staging folder and renamed into place: a failed run leaves the site before it.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ..core.atomic import atomic_directory
from ..core.errors import ConfigError
from ..report.sitelinks import slug
from ..results.constants import LOOKBACK
from ..results.fleet import MIN_OTHERS
from ..results.verdict import DETECT_PCT
from ..results.verdict.figures import NPU_CORE, STEP
from . import plots
from .collect import STATUS_ORDER, Series, Site, stack_label

__all__ = ["write_site", "MARKER"]

MARKER = ".anima-results-site"       # what tells an earlier site (replaced) from any other folder (refused)
# The figures drawn as a plot of their own on a series page: the step and the NPU core, the figures a
# verdict weighs most (judge.PRIMARY_SHARE); the others are inline trends.
PLOTTED = (STEP, NPU_CORE)


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("harness.site", "templates"), autoescape=select_autoescape(),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(slug=slug, pct=lambda v: f"{v:+.1f} %", seconds=lambda v: "" if v is None else f"{v:.4f}",
                       day=lambda t: t[:16].replace("T", " "), short=lambda t: (t or "")[:12])
    return env


def write_site(site: Site, out: Path, reports: Path | None = None) -> list[Path]:
    """Write every page of `site` into `out` (a new or empty folder, or an earlier site, replaced whole);
    `reports`: a folder of run reports (<run id>/report.html), copied beside the pages that link them."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: a file, not a folder")
    earlier = out.is_dir() and any(out.iterdir())
    if earlier and not (out / MARKER).is_file():
        raise ConfigError(f"--out {out}: not empty and not a results site; name a new or empty folder")
    target = out.with_name(f".{out.name}.new") if earlier else out
    if earlier and (target / MARKER).is_file():     # a whole new site a killed run did not swap in
        shutil.rmtree(target)
    with atomic_directory(target) as staging:
        _write(site, staging, reports)
    if earlier:
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / "site")
        os.replace(target, out)
        shutil.rmtree(old, ignore_errors=True)
    return sorted(p for p in out.rglob("*.html"))


def _write(site: Site, root: Path, reports: Path | None) -> None:
    env = _environment()
    (root / MARKER).write_text("written by bin/harness results site\n")
    static = root / "static"
    static.mkdir()
    for name in ("site.css", "filter.js"):
        (static / name).write_text(resources.files("harness.site").joinpath("static", name).read_text())
    copied = _copy_reports(site, root, reports)
    drawn = _drawn(site, root)
    common = {"site": site, "fleets": site.fleets, "upgrades": site.upgrades, "fleet_models": site.fleet_models}
    _page(env, root / "index.html", "index.html", root="", rows=_index_rows(site), **common)
    for s in site.series:
        _page(env, root / s.page, "series.html", root="../", s=s, panels=_series_plots(s, drawn),
              reports=copied, upgrade_of=_upgrade_pages(site), **common)
    for fleet in site.fleets:
        _page(env, root / f"fleet/{slug(fleet.board_model)}.html", "fleet.html", root="../", fleet=fleet,
              groups=_fleet_groups(fleet, drawn), page_of=_pages_of(site), detect_pct=DETECT_PCT,
              min_others=MIN_OTHERS, **common)
    for upgrade in site.upgrades:
        _page(env, root / f"upgrades/{upgrade.upgrade_id}.html", "upgrade.html", root="../", upgrade=upgrade,
              **common)


def _page(env: Environment, path: Path, template: str, **context) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(env.get_template(template).render(**context), encoding="utf-8")


def _svg(root: Path, name: str, text: str) -> str:
    path = root / "img" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return f"img/{name}"


def _index_rows(site: Site) -> list[dict]:
    """One row per series and figure, regressions first (the largest shift first), then by STATUS_ORDER."""
    rows = []
    for s in site.series:
        valid = [r.valid for r in s.runs]
        for label, values in s.figures.items():
            status, verdict = s.status(label), s.verdict(label)
            spark = Markup(plots.sparkline(values, valid, status == "regression", s.judged_band(label)))
            rows.append({"s": s, "figure": label, "status": status, "verdict": verdict, "spark": spark,
                         "anchor": slug(label), "order": (STATUS_ORDER.index(status),
                                                          -(verdict.shift_pct if verdict else 0.0), label != STEP)})
    return sorted(rows, key=lambda r: r["order"])


def _drawn(site: Site, root: Path) -> dict[str, str]:
    """Every plot file of the site, written, under its name in the site (img/...) -> that name: the
    plots are drawn over the CPUs, each independent of the others (matplotlib takes ~70 ms of CPU a
    plot here, and a lab's store has ~90 of them: tools/bench_site.py)."""
    calls = {name: call for s in site.series for name, call in _series_calls(s).items()}
    calls |= {name: call for fleet in site.fleets for name, call in _fleet_calls(fleet).items()}
    workers = min(os.cpu_count() or 1, len(calls))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            svgs = list(pool.map(_draw, calls.values()))
    else:
        svgs = [_draw(call) for call in calls.values()]
    return {name: _svg(root, name, svg) for name, svg in zip(calls, svgs)}


def _draw(call: tuple) -> str:
    plot, args = call
    return plot(*args)


def _series_calls(s: Series) -> dict[str, tuple]:
    """The plots of a series page (PLOTTED): file name -> (plots' function, its arguments)."""
    valid, times = [r.valid for r in s.runs], [r.time for r in s.runs]
    stacks = [(c.index, c.label) for c in s.stack_changes]
    calls = {}
    for label in PLOTTED:
        if label in s.figures:
            points = [(c.index, f"{c.shift_pct:+.1f} %") for c in s.change_points if c.figure == label]
            calls[f"series/{s.stem}--{slug(label)}.svg"] = (
                plots.series_plot, (label, s.figures[label], valid, times, s.judged_band(label), points, stacks,
                                    list(s.baselines)))
    return calls


def _series_plots(s: Series, drawn: dict[str, str]) -> list[dict]:
    """A panel per figure: a plot (a file) for the figures a verdict weighs most (PLOTTED), an inline
    trend for the others. A plot costs matplotlib ~85 ms and ~20 KB: for every figure of a lab's store
    (360 of them), most of the site's time and size."""
    valid = [r.valid for r in s.runs]
    panels = []
    for label, values in s.figures.items():
        panel = {"figure": label, "anchor": slug(label), "verdict": s.verdict(label), "status": s.status(label),
                 "img": None, "trend": None}
        if label in PLOTTED:
            panel["img"] = drawn[f"series/{s.stem}--{slug(label)}.svg"]
        else:
            panel["trend"] = Markup(plots.sparkline(values, valid, panel["status"] == "regression",
                                                    s.judged_band(label), 640, 70))
        panels.append(panel)
    return panels


def _fleet_windows(group) -> tuple[dict, float | None]:
    """Each board's valid step times in its window, and the mean of the boards' means."""
    windows = {board: [r.mean_step_s for r in runs if r.valid][-LOOKBACK:] for board, runs in group.runs.items()}
    means = [sum(v) / len(v) for v in windows.values() if v]
    return windows, (sum(means) / len(means) if means else None)


def _fleet_calls(fleet) -> dict[str, tuple]:
    calls = {}
    for n, (group, verdicts, _) in enumerate(fleet.groups):
        windows, reference = _fleet_windows(group)
        key = group.key
        calls[f"fleet/{slug(fleet.board_model)}-{n}.svg"] = (
            plots.fleet_plot, (f"{key.case} ({key.backend}, {key.precision}, {key.steps} steps)", windows,
                               reference, {v.board for v in verdicts if v.outlier}))
    return calls


def _fleet_groups(fleet, drawn: dict[str, str]) -> list[dict]:
    return [{"group": group, "stack": stack_label(group.key), "verdicts": verdicts, "left_out": left_out,
             "outliers": sorted({v.board for v in verdicts if v.outlier}),
             "img": drawn[f"fleet/{slug(fleet.board_model)}-{n}.svg"]}
            for n, (group, verdicts, left_out) in enumerate(fleet.groups)]


def _pages_of(site: Site) -> dict:
    """(board, experiment) -> its series page."""
    return {(s.board, s.experiment): s.page for s in site.series}


def _upgrade_pages(site: Site) -> dict:
    return {u.upgrade_id: f"upgrades/{u.upgrade_id}.html" for u in site.upgrades}


def _copy_reports(site: Site, root: Path, reports: Path | None) -> dict:
    """run id -> the copied report's path in the site, for the runs whose report is in `reports`."""
    if reports is None:
        return {}
    if not reports.is_dir():
        raise ConfigError(f"--reports {reports}: no such folder")
    copied = {}
    for run_id in sorted({r.run_id for s in site.series for r in s.runs}):
        found = reports / run_id / "report.html"
        if found.is_file():
            target = root / "reports" / slug(run_id) / "report.html"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
            copied[run_id] = f"reports/{slug(run_id)}/report.html"
    return copied
