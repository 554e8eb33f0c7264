"""`bin/harness results site`: the static results site of a lab's store (three boards of one model, two
cases, a stack upgrade on every board, one board 8 % slower on one case since a new git revision),
opened in a real headless Chromium: what the pages show is read from the DOM the browser rendered
(scripts run, or off) and from screenshots, never from a string search of the files."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from harness.cli.main import main
from harness.results.store import ResultsStore, describe_url
from tests.browser import in_page, parse_html, rendered_dom, screenshot
from tests.results_data import make_run
from tests.site_data import BOARDS, CASES, INVALID_RUN, REGRESSION_AT, RUNS, SLOW, UPGRADE_AT, lab_store, run_name

pytestmark = [pytest.mark.results, pytest.mark.slow]      # one site ~30 s here

SERIES_PAGE = "series/{board}--{case}-board-sim-float16-4.html"


def build_site(url: str, out: Path, capsys) -> Path:
    lab_store(url)
    assert main(["results", "site", "--results", url, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{len(BOARDS) * len(CASES)} series, {RUNS * len(BOARDS) * len(CASES)} run(s)" in said, said
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    url = f"sqlite:///{tmp / 'results.sqlite'}"
    lab_store(url)
    assert main(["results", "site", "--results", url, "--out", str(tmp / "site")]) == 0
    return tmp / "site"


def index_rows(dom) -> list:
    return dom.find("table", id="series").find("tbody").find_all("tr")


def test_the_index_lists_the_regression_first(site):
    rows = index_rows(rendered_dom((site / "index.html").as_uri()))
    # nine figures a series: step, NPU core, 3 branches, 4 stages
    assert len(rows) == len(BOARDS) * len(CASES) * 9
    assert all(len(r.find("svg", class_="spark").find_all("polyline")) == 1 for r in rows), "a trend a row, inline"
    first = rows[0]
    assert (first.attrs["data-board"], first.attrs["data-case"]) == SLOW
    assert first.attrs["data-figure"] == "denoise step" or first.attrs["data-status"] == "regression"
    regressions = [r for r in rows if r.attrs["data-status"] == "regression"]
    assert regressions == rows[:len(regressions)], "every regression before every other row"
    assert {(r.attrs["data-board"], r.attrs["data-case"]) for r in regressions} == {SLOW}
    step = next(r for r in regressions if r.attrs["data-figure"] == "denoise step")
    shift = float(re.search(r"denoise step \+([\d.]+) %", step.text()).group(1))
    assert 7.0 < shift < 9.0, step.text()
    # the other series are on the new stack, under probation, and say which run of it their latest is
    others = [r for r in rows if (r.attrs["data-board"], r.attrs["data-case"]) != SLOW]
    assert {r.attrs["data-status"] for r in others} == {"upgrade under probation"}
    assert all(f"run {RUNS - UPGRADE_AT} of the new stack" in r.text() for r in others), others[0].text()


def test_the_series_page_marks_the_change_point_and_the_upgrade_at_their_runs(site):
    board, case = SLOW
    dom = rendered_dom((site / SERIES_PAGE.format(board=board, case=case)).as_uri())
    points = dom.find("table", id="change-points").find("tbody").find_all("tr")
    step = [p for p in points if p.attrs["data-figure"] == "denoise step"]
    assert [p.attrs["data-run"] for p in step] == [run_name(board, case, REGRESSION_AT)]
    assert f"run {run_name(board, case, REGRESSION_AT - 1)}" in step[0].text()       # the last run before
    before, after = re.search(r"(\w+) → (\w+)", step[0].text()).groups()
    assert before != after, "the git revisions either side differ"
    (stack,) = dom.find("table", id="stack-changes").find("tbody").find_all("tr")
    assert stack.attrs["data-run"] == run_name(board, case, UPGRADE_AT)
    assert "runtime_lib 2.3.2 -> 2.5.0" in stack.text()
    runs = dom.find("table", id="runs").find("tbody").find_all("tr")
    assert len(runs) == RUNS
    marked = {mark: [r.attrs["data-run"] for r in runs if mark in r.attrs["class"].split()]
              for mark in ("change-point", "stack-change", "baseline", "invalid")}
    assert marked == {"change-point": [run_name(board, case, REGRESSION_AT)],
                      "stack-change": [run_name(board, case, UPGRADE_AT)],
                      "baseline": [run_name(board, case, 0)], "invalid": []}


def test_a_series_without_a_regression_has_no_change_point_and_shows_its_invalid_run_apart(site):
    board, case, index = INVALID_RUN
    dom = rendered_dom((site / SERIES_PAGE.format(board=board, case=case)).as_uri())
    assert dom.find_all("table", id="change-points") == []
    (invalid,) = dom.find("table", id="invalid-runs").find("tbody").find_all("tr")
    assert invalid.attrs["data-run"] == run_name(board, case, index) and "thermal throttling" in invalid.text()
    # the step and the NPU core are plots of their own, the other seven figures inline trends
    panels = dom.find_all("img", class_="plot")
    assert len(panels) == 2 and all((site / "series" / p.attrs["src"]).resolve().is_file() for p in panels)
    assert len(dom.find_all("svg", class_="spark")) == 7


def test_the_fleet_page_of_three_boards_says_it_could_not_judge_them(site):
    # three boards: each against a spread of two (one degree of freedom), which says nothing
    dom = rendered_dom((site / "fleet" / "radxa-rock-5c.html").as_uri())
    assert dom.find("p", id="outliers").text() == "no board named, but not every board could be judged"
    assert dom.find("p", id="inconclusive").text().startswith(f"INCONCLUSIVE: {', '.join(BOARDS)}")
    groups = dom.find_all("section", class_="fleet-group")
    assert len(groups) == 2 * len(CASES), "each case on the old stack and on the new"
    for g in groups:
        said = g.text()
        assert "No board of this group could be compared" in said and "a spread needs 3 other boards alike" in said
        assert not g.find_all("tr", class_="outlier") and "within the" not in g.text()
        assert all(f"INCONCLUSIVE board {b} " in g.text() for b in BOARDS), g.text()[:400]


def _crawl(start: Path) -> dict:
    """Every page reached from `start` by its links, in Chromium (script off): page -> the links and
    images it has that point at a file that was not written or an anchor the page has not."""
    broken: dict[str, list[str]] = {}
    seen, todo = set(), [start.resolve()]
    expression = ("({links: [...document.querySelectorAll('a[href]')].map(a => a.href), "
                  "images: [...document.images].map(i => i.src), "
                  "ids: [...document.querySelectorAll('[id]')].map(e => e.id)})")
    anchors: dict[Path, set] = {}
    wanted: list[tuple[Path, Path, str]] = []
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        found = in_page(page.as_uri(), expression, script=False)
        anchors[page] = set(found["ids"])
        for url in found["links"] + found["images"]:
            if not url.startswith("file://"):
                continue        # a CI run's address: not the site's
            target, _, fragment = url.removeprefix("file://").split("?")[0].partition("#")
            path = Path(target)
            if not path.is_file():
                broken.setdefault(str(page), []).append(url)
            elif path.suffix == ".html":
                todo.append(path.resolve())
                if fragment:
                    wanted.append((page, path.resolve(), fragment))
    for page, target, fragment in wanted:
        if fragment not in anchors.get(target, set()):
            broken.setdefault(str(page), []).append(f"{target}#{fragment}")
    return {"pages": len(seen), "broken": broken}


def test_every_link_of_the_site_is_to_a_page_it_wrote(site):
    crawled = _crawl(site / "index.html")
    written = list(site.rglob("*.html"))
    assert crawled["broken"] == {} and crawled["pages"] == len(written), crawled


def test_a_one_board_store_links_no_fleet_page(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'one.sqlite'}"
    with ResultsStore(url) as store:
        for i in range(8):
            store.add_run(make_run(f"r{i}", 1.0 + 0.001 * (i % 3), minute=i))
    assert main(["results", "site", "--results", url, "--out", str(tmp_path / "site")]) == 0
    site = tmp_path / "site"
    assert not (site / "fleet").exists()
    crawled = _crawl(site / "index.html")
    assert crawled["broken"] == {} and crawled["pages"] == 2, crawled
    dom = rendered_dom((site / "series" / "rock-5c-aaaa--cat-board-sim-float16-4.html").as_uri(), script=False)
    assert "no fleet page: no other board of Radxa ROCK 5C ran this store's keys" in dom.find("p", class_="meta").text()


_JUDGED = ("(() => { const b = id => document.getElementById(id).getBBox(); "
           "return {band: [b('judged-interval').y, b('judged-interval').height], figure: b('judged-figure').y}; })()")


def test_the_interval_drawn_is_the_one_judged(site):
    # the regressed series' headline says regression: its plot's judged figure lies past the shaded
    # interval judged (SVG y grows downward: above its top); a series within its interval, inside it
    board, case = SLOW
    page = site / SERIES_PAGE.format(board=board, case=case)
    dom = rendered_dom(page.as_uri(), script=False)
    assert "regression" in dom.find("p", id="latest").text()
    step = site / "series" / dom.find("section", id="denoise-step").find("img").attrs["src"]
    drawn = in_page(step.resolve().as_uri(), _JUDGED, script=False)
    assert drawn["figure"] < drawn["band"][0], drawn
    other = site / SERIES_PAGE.format(board=BOARDS[0], case=case)
    dom = rendered_dom(other.as_uri(), script=False)
    assert "regression" not in dom.find("p", id="latest").text()
    step = site / "series" / dom.find("section", id="denoise-step").find("img").attrs["src"]
    drawn = in_page(step.resolve().as_uri(), _JUDGED, script=False)
    assert drawn["band"][0] < drawn["figure"] < drawn["band"][0] + drawn["band"][1], drawn


def test_the_upgrade_page_judges_each_series_on_the_new_stack(site):
    (page,) = (site / "upgrades").glob("*.html")
    dom = rendered_dom(page.as_uri())
    assert "runtime_lib 2.3.2 -> 2.5.0; toolkit_lite 2.3.2 -> 2.5.0" in dom.find("h1").text()
    members = dom.find_all("section", class_="upgrade-member")
    assert sorted((m.attrs["data-board"], m.attrs["data-case"]) for m in members) == \
        sorted((b, c) for b in BOARDS for c in CASES)
    for member in members:
        assert "upgrade under probation, run 5 of the new stack" in member.text(), member.text()[:300]
        step = member.find("tr", data_figure="denoise step")
        assert "within" in step.text() or (member.attrs["data-board"], member.attrs["data-case"]) == SLOW


_SHOWN = ("[...document.querySelectorAll('#series tbody tr')].filter(r => r.offsetParent !== null)"
          ".map(r => r.dataset.board)")
_IMAGES = "[...document.images].map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])"


def test_the_index_filter_works_with_script_and_the_full_list_without(site):
    url = (site / "index.html").as_uri() + f"?board={BOARDS[1]}"
    shown = in_page(url, _SHOWN)
    assert set(shown) == {BOARDS[1]} and len(shown) == len(CASES) * 9
    plain = in_page(url, _SHOWN, script=False)
    assert len(plain) == len(BOARDS) * len(CASES) * 9, "without script every row is listed"


@pytest.mark.parametrize("page", [SERIES_PAGE.format(board=SLOW[0], case=SLOW[1]), "fleet/radxa-rock-5c.html"])
def test_every_plot_loads_from_the_file_system_with_script_off(site, page):
    images = in_page((site / page).as_uri(), _IMAGES, script=False)
    assert images and all(loaded for _, loaded in images), [src for src, loaded in images if not loaded]


@pytest.mark.parametrize("page", ["index.html", SERIES_PAGE.format(board=SLOW[0], case=SLOW[1]),
                                  "fleet/radxa-rock-5c.html", "upgrade"])
def test_each_page_draws_in_chromium_with_script_off(site, tmp_path, page):
    path = next((site / "upgrades").glob("*.html")) if page == "upgrade" else site / page
    from PIL import Image
    shot = screenshot(path.as_uri(), tmp_path / "page.png", script=False)
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape == (1600, 1280, 3)
    drawn = np.any(pixels < 200, axis=-1)
    assert drawn[:, :640].mean() > 0.02, "text and plots on the page"
    # the regression in red (the index's first rows, the series' verdict); the fleet's INCONCLUSIVE in amber
    colour = [0x9A, 0x67, 0x00] if page.startswith("fleet") else [0xCF, 0x22, 0x2E]
    marked = np.all(np.abs(pixels - colour) < 40, axis=-1)
    if page != "upgrade":
        assert marked[:700].sum() > 300


def _page_data(path: Path, where: str) -> list:
    """What a page shows: its text and every attribute but SVG ids, the store's own address left out."""
    text = path.read_text()
    if path.suffix == ".svg":
        text = re.sub(r'\bid="[^"]*"|url\(#[^)]*\)|xlink:href="#[^"]*"|href="#[^"]*"', "", text)
        return text.split()
    return [(e.tag, sorted(e.attrs.items()),
             " ".join(c.strip() for c in e.children if isinstance(c, str)).replace(where, "<store>"))
            for e in parse_html(text).iter()]


def test_the_site_from_postgresql_equals_the_site_from_sqlite_page_by_page(tmp_path, postgres_cluster, capsys):
    sqlite_url, pg_url = f"sqlite:///{tmp_path / 'results.sqlite'}", postgres_cluster.database()
    one = build_site(sqlite_url, tmp_path / "from-sqlite", capsys)
    two = build_site(pg_url, tmp_path / "from-postgresql", capsys)
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    assert sum(p.suffix == ".html" for p in files) == 1 + len(BOARDS) * len(CASES) + 1 + 1
    for name in files:
        if name.suffix in (".html", ".svg"):
            assert _page_data(one / name, describe_url(sqlite_url)) == _page_data(two / name,
                                                                                  describe_url(pg_url)), name


def test_the_site_judges_latest_runs_and_upgrades_as_the_gate_did_before_writing_them(tmp_path):
    # the gate judges a run against the real store just before it writes it; the site, reading the
    # whole store later, must show the same judgement for each series' latest run and each upgrade's
    from harness.results.constants import GROUP_RUNS
    from harness.results.verdict.judging import judge_run
    from harness.site.collect import collect
    wanted = {run_name(b, c, i) for b in BOARDS for c in CASES for i in (RUNS - 1, UPGRADE_AT + GROUP_RUNS - 1)}
    gate = {}

    def judge(store, run):
        if run.run_id in wanted:
            gate[run.run_id] = judge_run(store, run, 10.0)

    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    lab_store(url, before_write=judge)
    with ResultsStore(url, create=False) as store:
        site = collect(store)
    shown = {s.latest.run_id: s.judgement for s in site.series}
    shown |= {run.run_id: judgement for u in site.upgrades for _, run, judgement, _, _ in u.members}
    assert shown == gate and len(gate) == len(wanted)


def test_a_folder_that_is_not_a_site_is_refused_and_an_earlier_site_replaced(site, tmp_path, capsys):
    url = f"sqlite:///{site.parent / 'results.sqlite'}"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert main(["results", "site", "--results", url, "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "not a results site" in err and "Traceback" not in err
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    again = tmp_path / "again"
    assert main(["results", "site", "--results", url, "--out", str(again)]) == 0
    (again / "index.html").write_text("stale")
    assert main(["results", "site", "--results", url, "--out", str(again)]) == 0
    assert (again / "index.html").read_text() == (site / "index.html").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no staging folder left"
    assert main(["results", "site", "--results", f"sqlite:///{tmp_path / 'none.sqlite'}", "--out",
                 str(tmp_path / 'x')]) == 2
    assert "no results store at" in capsys.readouterr().err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("configured", [True, False])
def test_the_run_summary_and_report_link_the_series_page_of_the_site(site, tmp_path, monkeypatch, configured):
    # the gate's row of a run (comparison_of) carries its series' URL under the configured site; the
    # markdown summary and the HTML report link it, and the page is one the site wrote, of that series
    from harness.gates.benchmark import comparison_of
    from harness.report.html import html_report
    from harness.report.sitelinks import SITE_URL_VARIABLE
    from harness.report.summary import markdown_summary
    from harness.results.verdict.judging import judge_run
    with ResultsStore(f"sqlite:///{site.parent / 'results.sqlite'}", create=False) as store:
        run = store.runs(board=SLOW[0], case=SLOW[1], latest=1)[0]
        comparison = comparison_of(run, judge_run(store, run, 10.0))
    if configured:
        monkeypatch.setenv(SITE_URL_VARIABLE, site.as_uri() + "/")
        with ResultsStore(f"sqlite:///{site.parent / 'results.sqlite'}", create=False) as store:
            comparison = comparison_of(run, judge_run(store, run, 10.0))
    else:
        monkeypatch.delenv(SITE_URL_VARIABLE, raising=False)
    data = {"outcome": "failed", "counts": {"failed": 1}, "run": {}, "tests": [],
            "benchmarks": [{"case": SLOW[1], "comparison": comparison, "valid": True, "reasons": []}]}
    summary = [line for line in markdown_summary(data).splitlines() if "on the results site" in line]
    links = [a.attrs["href"] for a in parse_html(html_report(data)).find_all("a")]
    if not configured:
        assert comparison["site"] is None and summary == [] and links == []
        return
    assert summary == [f"- {SLOW[1]} on the results site: {comparison['site']}"] and links == [comparison["site"]]
    dom = rendered_dom(comparison["site"])
    assert dom.find("h1").text() == f"{SLOW[1]} on {SLOW[0]} (board-sim, float16, 4 steps)"
