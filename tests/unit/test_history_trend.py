"""The trend plot and table over the runs of a real results store."""
import argparse
import io
import re

import pytest
from rich.console import Console

from harness.cli.trend import add_command
from harness.core.imageio import load_png
from harness.results.records import ResultsError
from harness.results.store import ResultsStore
from harness.results.trend import render_table, trend
from tests.results_data import VERSIONS_NEW, make_run


def test_trend_writes_png_and_rows_with_invalid_run(tmp_path):
    runs = [make_run("r1", 1.5), make_run("r2", 1.7, valid=False, minute=1), make_run("r3", 1.4, minute=2),
            make_run("r4", 9.0, board="rock-5c-bbbb", minute=3)]
    out = tmp_path / "out" / "trend.png"
    rows = trend(runs, out, board="rock-5c-aaaa")
    assert [r["step_s"] for r in rows] == [1.5, 1.7, 1.4]
    assert [r["valid"] for r in rows] == [True, False, True]
    picture = load_png(out)
    assert picture.shape[0] > 400 and picture.std() > 0.05
    buffer = io.StringIO()
    render_table(rows, console=Console(file=buffer, width=200))
    table = buffer.getvalue()
    assert "NO" in table and "rock-5c-aaaa" in table and "1.700" in table and "embedded" in table


def test_trend_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(ResultsError, match="no runs"):
        trend([], tmp_path / "t.png")
    with pytest.raises(ResultsError, match=r"no runs of board 'x'.*rock-5c-aaaa"):
        trend([make_run("r1")], tmp_path / "t.png", board="x")
    assert not (tmp_path / "t.png").exists()


def test_trend_command_reads_the_store(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    with ResultsStore(url) as store:
        for i in range(3):
            store.add_run(make_run(f"r{i}", 1.0 + i / 10, valid=i != 1, minute=i))
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["trend", "--results", url, "--out", str(tmp_path / "t.png")])
    assert args.func(args) == 0
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert "3 runs" in capsys.readouterr().out


def test_trend_draws_one_line_per_board_learns_its_band_and_marks_changes(tmp_path):
    from matplotlib.figure import Figure

    from harness.results.trend import plot_step_time, trend_rows, version_changes
    # board A: ten quiet runs, then the driver changes; board B: a level shift after run 6
    a = [make_run(f"a{i}", 1.0 + 0.01 * (i % 3), minute=i) for i in range(10)]
    a.append(make_run("a10", 1.2, minute=10, versions=VERSIONS_NEW))
    b = [make_run(f"b{i}", 2.0 if i < 6 else 2.4, board="rock-5c-bbbb", minute=20 + i) for i in range(12)]
    rows = trend_rows(a + b)
    assert [(row["index"], what.split(",")[0]) for row, what in version_changes(rows)] == [
        (10, "runtime_lib 2.3.2->2.5.0")]
    ax = Figure().subplots()
    plot_step_time(ax, rows, threshold_pct=10)
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()
             if not line.get_label().startswith("_")}
    assert set(lines) == {"board-sim/embedded/float16 @ rock-5c-aaaa", "board-sim/embedded/float16 @ rock-5c-bbbb"}
    marks = [c for c in ax.collections if c.get_label() == "change point"]
    assert [list(m.get_offsets()[0]) for m in marks] == [[float(len(a) + 6), 2.4]]
    # board B's band is learned from its runs (a 2.0 -> 2.4 history is wide), not the fixed 10 %
    band_b = [c for c in ax.collections if c.get_label().startswith("threshold band")][1]
    ys = band_b.get_paths()[0].vertices[:, 1]
    assert max(ys) / min(ys) > 1.10


def test_each_band_states_what_its_verdict_could_detect(tmp_path):
    # a quiet line finds a few %; a line of 2.0 and 2.4 s runs could not find the promised 25 %; a line
    # of one run has no noise estimate at all: each legend says so, as every verdict's line does
    from matplotlib.figure import Figure

    from harness.results.trend import plot_step_time, trend_rows
    quiet = [make_run(f"a{i}", 1.0 + 0.01 * (i % 3), minute=i) for i in range(10)]
    noisy = [make_run(f"b{i}", 2.0 if i % 2 else 2.4, board="rock-5c-bbbb", minute=20 + i) for i in range(6)]
    lone = [make_run("c0", 3.0, board="rock-5c-cccc", minute=40)]
    ax = Figure().subplots()
    plot_step_time(ax, trend_rows(quiet + noisy + lone), threshold_pct=10)
    bands = [c.get_label() for c in ax.collections if c.get_label().startswith("threshold band")]
    assert len(bands) == 3, bands
    assert re.search(r"step [-+][\d.]+ % \[[-\d.]+, [-\d.]+\] within the [\d.]+ % threshold, detects \+[\d.]+ %",
                     bands[0]), bands[0]
    assert "inconclusive: could detect only +" in bands[1] and "not the promised 25 %" in bands[1], bands[1]
    assert "the fixed 10 % threshold" in bands[2] and "could detect no shift" in bands[2], bands[2]
