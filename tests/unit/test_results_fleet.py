"""`results boards` on real stores (SQLite and PostgreSQL): a fleet of five boards of one model whose
runs interleave in time, each judged against the other boards over the same window, and named only
when it is off the fleet's spread, in the direction its line says."""
from __future__ import annotations

import re

import numpy as np
import pytest

from harness.cli.main import main
from harness.results.store import ResultsStore
from tests.results_data import make_run

pytestmark = pytest.mark.results

BOARDS = ("rock-5c-aaaa", "rock-5c-bbbb", "rock-5c-cccc", "rock-5c-dddd", "rock-5c-eeee")
THROTTLED = 1.25        # an INVALID run's step (a thermal trip): far off, and never to be counted


def fleet(url: str, runs: int, levels: dict, *, invalid_board: str | None = None, seed: int = 5) -> None:
    """Five boards' runs interleaved in time (board a, b, ..., e, a, b, ...), each at its level
    (1.0 unless `levels` says) with 1 % log-normal noise; `invalid_board`'s runs are INVALID but one
    in five. The board named last is the one the old comparison (the other boards' runs concatenated
    in board order, cut to the last 30) judged everyone else by."""
    rng = np.random.default_rng(seed)
    with ResultsStore(url) as store:
        for i in range(runs):
            for b, board in enumerate(BOARDS):
                invalid = board == invalid_board and i % 5 != 0
                step = (THROTTLED if invalid else levels.get(board, 1.0)) * float(np.exp(rng.normal(0, 0.01)))
                store.add_run(make_run(f"{board}-{i}", step, board=board, valid=not invalid,
                                       minute=len(BOARDS) * i + b))


def boards(url: str, capsys) -> tuple[int, list[str]]:
    code = main(["results", "boards", "--results", url])
    return code, capsys.readouterr().out.splitlines()


def assert_lines_agree(lines: list[str]) -> None:
    """Every board's flag matches its own line: an OUTLIER is slower or faster and past its threshold,
    a board within its threshold is no OUTLIER."""
    for line in lines:
        if "OUTLIER" in line:
            assert re.search(r"OUTLIER board \S+ (slower|faster) than the other \d+ boards: [-+][\d.]+ % "
                             r"\[[-\d.]+, [-\d.]+\], past the [\d.]+ % threshold", line), line
            assert "within" not in line, line
        elif line.startswith("  board ") and "too few" not in line:
            assert "within the" in line and "past" not in line, line


@pytest.mark.parametrize("runs", [30, 12])
def test_boards_names_only_the_board_8_percent_slower(results_url, capsys, runs):
    fleet(results_url, runs, {"rock-5c-eeee": 1.08})
    code, lines = boards(results_url, capsys)
    assert code == 1 and lines[-1] == "outlier board(s): rock-5c-eeee", "\n".join(lines)
    (named,) = [line for line in lines if "OUTLIER" in line]
    shift = float(re.search(r"slower than the other 4 boards: \+([\d.]+) %", named).group(1))
    assert 6.0 < shift < 10.0, named
    assert_lines_agree(lines)
    assert "5 boards, runs from" in lines[0] and all(f"{runs} valid run(s)" in l for l in lines[1:-1])


def test_a_board_whose_history_is_mostly_invalid_is_judged_by_its_valid_runs_only(results_url, capsys):
    fleet(results_url, 30, {"rock-5c-eeee": 1.08}, invalid_board="rock-5c-aaaa")
    code, lines = boards(results_url, capsys)
    assert code == 1 and lines[-1] == "outlier board(s): rock-5c-eeee", "\n".join(lines)
    (mostly_invalid,) = [line for line in lines if "rock-5c-aaaa" in line]
    assert re.search(r"\(6 valid run\(s\), \d+ INVALID left out\)", mostly_invalid) and "OUTLIER" not in mostly_invalid
    assert_lines_agree(lines)


def test_a_faster_board_is_named_faster(results_url, capsys):
    fleet(results_url, 12, {"rock-5c-eeee": 0.92})
    code, lines = boards(results_url, capsys)
    assert code == 1 and lines[-1] == "outlier board(s): rock-5c-eeee", "\n".join(lines)
    (named,) = [line for line in lines if "OUTLIER" in line]
    assert "OUTLIER board rock-5c-eeee faster than the other 4 boards: -" in named
    assert_lines_agree(lines)


def test_a_steady_fleet_names_no_board(results_url, capsys):
    fleet(results_url, 12, {})
    code, lines = boards(results_url, capsys)
    assert code == 0 and not any("OUTLIER" in line or "outlier board" in line for line in lines), "\n".join(lines)
    assert_lines_agree(lines)


def test_a_board_that_stopped_running_is_not_in_the_reference_of_todays_boards(results_url, capsys):
    # a sixth board ran 12 runs at 1.20 long ago; the five boards have run 30 each since
    with ResultsStore(results_url) as store:
        for i in range(12):
            store.add_run(make_run(f"old-{i}", 1.2, board="rock-5c-ffff", minute=i))
    with ResultsStore(results_url) as store:
        rng = np.random.default_rng(3)
        for i in range(30):
            for b, board in enumerate(BOARDS):
                step = (1.08 if board == "rock-5c-eeee" else 1.0) * float(np.exp(rng.normal(0, 0.01)))
                store.add_run(make_run(f"{board}-{i}", step, board=board, minute=100 + 5 * i + b))
    code, lines = boards(results_url, capsys)
    assert code == 1 and lines[-1] == "outlier board(s): rock-5c-eeee", "\n".join(lines)
    today = [line for line in lines if re.search(r"board rock-5c-[a-e]{4} ", line)]
    assert len(today) == 5 and all("than the other 4 boards" in line or "against the other 4 boards" in line
                                   for line in today), "\n".join(lines)
    (old,) = [line for line in lines if "rock-5c-ffff" in line]
    assert "0 other board(s) with 5 valid runs in its window" in old
