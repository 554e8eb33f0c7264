"""The fleet on real stores (SQLite and PostgreSQL): `results boards` over five boards of one model
whose runs interleave in time, each judged against the other boards over the same window and named
only when it is off the fleet's spread, in the direction its line says; and a board keyed by its
serial, which keeps its history and baseline when its device-tree model string changes."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.config import REPO_ROOT
from harness.results.fleet import board_verdicts, fleet_groups, fleet_lines
from harness.results.records import ResultsError, board_model_of
from harness.results.store import ResultsStore
from harness.results.telemetry import board_id, board_identity, serial_hash
from harness.results.verdict import DETECT_PCT, Outcome
from harness.results.verdict.judging import judge_run
from harness.results.verdict.verdict import HISTORY
from tests.results_data import make_run

pytestmark = pytest.mark.results

BOARDS = ("rock-5c-aaaa", "rock-5c-bbbb", "rock-5c-cccc", "rock-5c-dddd", "rock-5c-eeee")
THROTTLED = 1.25        # an INVALID run's step (a thermal trip): far off, and never to be counted
BOARD_TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"


def fleet(url: str, runs: int, levels: dict, *, invalid_board: str | None = None, seed: int = 5,
          boards: tuple = BOARDS, cpus: dict | None = None, memory: dict | None = None) -> None:
    """Five boards' runs interleaved in time (board a, b, ..., e, a, b, ...), each at its level
    (1.0 unless `levels` says) with 1 % log-normal noise; `invalid_board`'s runs are INVALID but one
    in five; `cpus`: board -> its host's CPU count (8 unless it says; not recorded without it);
    `memory`: board -> the GiB its kernel reports (7.7 unless it says; not recorded without it). The
    board named last is the one the old comparison (the other boards' runs concatenated in board order,
    cut to the last 30) judged everyone else by."""
    rng = np.random.default_rng(seed)
    with ResultsStore(url) as store:
        for i in range(runs):
            for b, board in enumerate(boards):
                invalid = board == invalid_board and i % 5 != 0
                step = (THROTTLED if invalid else levels.get(board, 1.0)) * float(np.exp(rng.normal(0, 0.01)))
                run = make_run(f"{board}-{i}", step, board=board, valid=not invalid, minute=len(boards) * i + b)
                if cpus is not None:
                    run = replace(run, host_cpus=cpus.get(board, 8))
                if memory is not None:
                    run = replace(run, host_memory_bytes=int(memory.get(board, 7.7) * 2 ** 30))
                store.add_run(run)


def boards(url: str, capsys) -> tuple[int, list[str]]:
    code = main(["results", "boards", "--results", url])
    return code, capsys.readouterr().out.splitlines()


def assert_lines_agree(lines: list[str]) -> None:
    """Every board's flag matches its own line: an OUTLIER is slower or faster and past its threshold,
    a board within its threshold is no OUTLIER."""
    for line in lines:
        if "OUTLIER" in line:
            assert re.search(r"OUTLIER board \S+ (slower|faster) than the other \d+ boards( \([^)]*\))?: [-+][\d.]+ % "
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
    # the healthy boards are judged again without it: an outlier in their reference would widen it
    healthy = [line for line in lines if re.match(r"  board rock-5c-[a-d]{4} ", line)]
    assert len(healthy) == 4 and all("against the other 3 boards (outlier rock-5c-eeee left out), within the" in line
                                     for line in healthy), "\n".join(lines)
    assert "5 boards, runs from" in lines[0] and all(f"{runs} valid run(s)" in line for line in lines[1:-1])


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
    assert len(today) == 5 and all(re.search(r"the other (4 boards|3 boards \(outlier rock-5c-eeee left out\))", line)
                                   for line in today), "\n".join(lines)
    (old,) = [line for line in lines if "rock-5c-ffff" in line]
    assert "INCONCLUSIVE board rock-5c-ffff" in old and "0 other board(s) alike with 5 valid runs in its window" in old
    with ResultsStore(results_url) as store:          # named, but its group was judged: it fails nothing
        assert fleet_lines(store.runs())[2] == []


TEN = tuple(f"rock-5c-{c * 4}" for c in "abcdefghij")


@pytest.mark.parametrize("slow", [2, 3])
def test_two_or_three_slow_boards_among_ten_are_each_named(results_url, capsys, slow):
    # the k slow boards are each in the others' references in a plain pass, and widen them past 8 %
    off = TEN[-slow:]
    fleet(results_url, 30, {board: 1.08 for board in off}, boards=TEN, cpus={})
    code, lines = boards(results_url, capsys)
    assert code == 1 and lines[-1] == f"outlier board(s): {', '.join(off)}", "\n".join(lines)
    assert "10 CPUs" not in lines[0] and "8 CPUs" in lines[0] and "10 boards" in lines[0], lines[0]
    for board in off:
        (named,) = [line for line in lines if f"OUTLIER board {board} slower" in line]
        assert 6.0 < float(re.search(r": \+([\d.]+) %", named).group(1)) < 10.0, named
    healthy = [line for line in lines if re.match(r"  board rock-5c-", line)]
    assert len(healthy) == 10 - slow, "\n".join(lines)
    for line in healthy:
        assert abs(float(re.search(r" ([-+][\d.]+) % \[", line).group(1))) < 1.0, line
        assert f"against the other {9 - slow} boards (outliers {', '.join(off)} left out)" in line, line
    assert_lines_agree(lines)


def test_boards_with_fewer_cpus_are_a_group_of_their_own(results_url, capsys):
    # two 4-CPU hosts run 12 % slower: unlike the 8-CPU boards, not off from them
    small = TEN[:2]
    fleet(results_url, 12, {board: 1.12 for board in small}, boards=TEN, cpus={board: 4 for board in small})
    code, lines = boards(results_url, capsys)
    assert not any("OUTLIER" in line for line in lines), "\n".join(lines)
    (eight,) = [line for line in lines if line.startswith("board model") and "8 CPUs" in line.split(",")[1]]
    assert "8 boards" in eight and \
        f"boards with 4 CPUs, memory not recorded ({', '.join(small)}) are a group of their own" in eight
    (four,) = [line for line in lines if line.startswith("board model") and "4 CPUs" in line.split(",")[1]]
    assert "2 boards" in four
    for board in small:        # two boards alike are too few for a spread: said, and not a pass
        (line,) = [line for line in lines if board in line and line.startswith("  ")]
        assert line.startswith(f"  INCONCLUSIVE board {board} (4 CPUs, memory not recorded): 1 other board(s) "
                               "alike"), line
    with ResultsStore(results_url) as store:
        _, outliers, inconclusive = fleet_lines(store.runs())
    assert not outliers and inconclusive == list(small)
    # the command fails on boards it could not judge (not a pass), unless the lab chose to be warned
    assert code == 1 and lines[-1] == f"board(s) the fleet could not judge (INCONCLUSIVE): {', '.join(small)}"
    assert main(["results", "boards", "--results", results_url, "--inconclusive=warn"]) == 0


def test_boards_with_more_memory_are_a_group_of_their_own_and_a_few_mib_less_is_the_same_size(results_url, capsys):
    # two 16 GB boards (15.6 GiB reported) run 8 % faster: among eight 8 GB boards they would be named
    # faster outliers. The 8 GB boards report 7.7 or 7.8 GiB: one size, one group
    big = TEN[-2:]
    memory = {**{board: 7.8 for board in TEN[:4]}, **{board: 15.6 for board in big}}
    fleet(results_url, 12, {board: 0.92 for board in big}, boards=TEN, cpus={}, memory=memory)
    code, lines = boards(results_url, capsys)
    assert not any("OUTLIER" in line for line in lines), "\n".join(lines)
    headers = [line for line in lines if line.startswith("board model")]
    (eight,) = [line for line in headers if line.split(", ")[1:3] == ["8 CPUs", "8 GiB"]]
    assert "8 boards" in eight and \
        f"boards with 8 CPUs, 16 GiB ({', '.join(big)}) are a group of their own" in eight, eight
    (sixteen,) = [line for line in headers if line.split(", ")[1:3] == ["8 CPUs", "16 GiB"]]
    assert "2 boards" in sixteen and f"boards with 8 CPUs, 8 GiB ({', '.join(TEN[:8])})" in sixteen, sixteen
    healthy = [line for line in lines if re.match(r"  board rock-5c-", line)]
    assert len(healthy) == 8 and all("against the other 7 boards, within the" in line for line in healthy), \
        "\n".join(lines)
    for board in big:          # two boards alike are too few for a spread: said, and not a pass
        (line,) = [line for line in lines if board in line and line.startswith("  ")]
        assert line.startswith(f"  INCONCLUSIVE board {board} (8 CPUs, 16 GiB): 1 other board(s) alike"), line
    assert code == 1 and lines[-1] == f"board(s) the fleet could not judge (INCONCLUSIVE): {', '.join(big)}"


def test_a_store_from_before_the_memory_column_is_upgraded_and_still_reads(results_url, capsys):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import inspect

    from harness.results.store import MIGRATIONS
    fleet(results_url, 6, {}, cpus={}, memory={})
    with ResultsStore(results_url) as store:
        before = store.runs()
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with store.engine.begin() as conn:      # the store as the revision before the column left it
            config.attributes["connection"] = conn
            command.downgrade(config, "decision")
        assert "host_memory_bytes" not in {c["name"] for c in inspect(store.engine).get_columns("runs")}
    with ResultsStore(results_url) as store:    # opened by this checkout: upgraded, the memory not recorded
        old = store.runs()
        # every run whole (its steps, stages, branches and subgraphs too), but its memory
        assert old == [replace(r, host_memory_bytes=None) for r in before] and len(old) == 30
    code, lines = boards(results_url, capsys)
    assert code == 0 and lines[0].startswith("board model Radxa ROCK 5C, 8 CPUs, memory not recorded, cat ("), \
        "\n".join(lines)
    assert "5 boards" in lines[0] and sum(line.startswith("  board rock-5c-") for line in lines) == 5
    with ResultsStore(results_url) as store:    # and a run measured now keeps its memory
        store.add_run(replace(make_run("new", minute=500), host_cpus=8, host_memory_bytes=8 * 2 ** 30))
        assert store.run("new", "cat").host_memory_bytes == 8 * 2 ** 30


def test_three_boards_are_inconclusive_not_a_pass(results_url):
    # a spread from two other boards (one degree of freedom) says nothing: not "no outlier"
    fleet(results_url, 30, {}, boards=TEN[:3], cpus={})
    with ResultsStore(results_url) as store:
        (group,) = fleet_groups(store.runs())
        lines, outliers, inconclusive = fleet_lines(store.runs())
    verdicts, could_not = board_verdicts(group)
    assert not verdicts and len(could_not) == 3 and not outliers and inconclusive == list(TEN[:3])
    assert all(re.match(r"INCONCLUSIVE board \S+ \(8 CPUs, memory not recorded\): 2 other board\(s\) alike .* "
                        "a spread needs 3: "
                        "it could not be compared", line) for line in could_not), could_not
    # ten boards alike can: each a PASS, stating what it could detect
    fleet(results_url, 30, {}, boards=TEN[3:], cpus={}, seed=6)
    with ResultsStore(results_url) as store:
        (group,) = fleet_groups(store.runs())
    verdicts, _ = board_verdicts(group)
    assert len(verdicts) == 10 and all(v.outcome is Outcome.PASS and v.detectable_pct < 8.0 for v in verdicts), \
        [v.line() for v in verdicts]



def test_boards_that_differ_by_10_percent_cannot_promise_25(results_url):
    # ten boards alike on paper whose levels spread 10 % (log sd): none off, none could be found 25 % slower
    levels = dict(zip(TEN, np.exp(np.random.default_rng(8).normal(0, 0.10, len(TEN)))))
    fleet(results_url, 12, levels, boards=TEN, cpus={})
    with ResultsStore(results_url) as store:
        (group,) = fleet_groups(store.runs())
    verdicts, _ = board_verdicts(group)
    assert verdicts and all(v.outcome is Outcome.INCONCLUSIVE and v.detectable_pct > DETECT_PCT for v in verdicts), \
        [v.line() for v in verdicts]
    assert all(v.line().startswith(f"INCONCLUSIVE board {v.board} ") and "within" not in v.line() for v in verdicts)


def board_tree(tmp_path, name: str, serial: bytes | None = None):
    """A copy of the ROCK 5C board tree (tests/data/sysfs-rk3588), with another serial if given."""
    tree = tmp_path / name
    shutil.copytree(BOARD_TREE, tree)
    if serial is not None:
        (tree / "proc/device-tree/serial-number").write_bytes(serial + b"\0")
    return tree


def run_on(tree, run_id: str, step: float = 1.0, minute: int = 0):
    """A run of the board under `tree` as the benchmark gate makes it (ResultsGate.run_of): board id and
    board model from its device tree, its serial's hash and model string, before the store files it."""
    identity = board_identity(tree)
    board = board_id(identity)
    return replace(make_run(run_id, step, board=board, board_model=board_model_of(board), minute=minute),
                   serial_hash=serial_hash(identity), device_model=identity["model"])


def test_a_board_whose_model_string_changes_keeps_its_baseline_and_history(results_url, tmp_path):
    tree = board_tree(tmp_path, "board")
    noise = (0.0, 0.006, -0.004, 0.003, -0.005, 0.004, -0.002, 0.001)
    with ResultsStore(results_url) as store:
        for i, n in enumerate(noise):
            store.add_run(store.filed(run_on(tree, f"old{i}", 1.0 + n, minute=i)))
        first = store.runs()[0]
        store.set_baseline(store.runs()[-1], "saved")
        # a firmware update renames the board in its device tree; the serial stays
        (tree / "proc/device-tree/model").write_bytes(b"Radxa ROCK 5C Rev 1.1\0")
        read_now = run_on(tree, "after", 1.0, minute=50)
        assert read_now.board_id != first.board_id, "the id read from the new model string is another one"
        renamed = store.filed(read_now)
        assert (renamed.board_id, renamed.board_model) == (first.board_id, first.board_model)
        judgement = judge_run(store, renamed, 10.0)
        assert judgement.kind == HISTORY and not judgement.regressed
        assert f"the baseline of board {first.board_id} (saved, run old7)" in judgement.reference
        assert ("the device-tree model string changed: 'Radxa ROCK 5C' -> 'Radxa ROCK 5C Rev 1.1' (same serial: "
                f"board {first.board_id}") in judgement.headline()
        store.add_run(read_now)                 # add_run files a run that was not filed before
        assert {(r.board_id, r.board_model) for r in store.runs()} == {(first.board_id, first.board_model)}
        assert len(store.runs(board=first.board_id)) == len(noise) + 1
        assert store.baseline(first.board_id, first.key.experiment)[0].run_id == "old7"
        assert store.run("after", "cat").device_model == "Radxa ROCK 5C Rev 1.1"
        # said once: the next run reads what the board's latest run read
        assert judge_run(store, store.filed(run_on(tree, "later", minute=60)), 10.0).board_change is None
        # another board of the model, with a serial of its own, is a board of its own
        other = store.filed(run_on(board_tree(tmp_path, "other", serial=b"0000000000000002"), "o1", minute=70))
        assert other.board_id not in (first.board_id, read_now.board_id)


def test_a_serial_hash_that_is_not_one_is_refused():
    with pytest.raises(ResultsError, match="serial_hash must be 16 lowercase hex digits"):
        replace(make_run("x"), serial_hash="0000000000000001-not-a-hash")
