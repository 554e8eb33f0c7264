"""`bin/harness results simulate`: the verdicts' error rates as JSON, same seeds every run."""
import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from harness.backends.board_drift import load_drift_model
from harness.model.config import REPO_ROOT
from harness.results import simulate


def _harness(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "results", "simulate", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900)


def _short_stream(out, rounds: int = 110):
    """The first `rounds` rounds of the first kept stream (110: five windows with a learned noise factor)."""
    source = simulate.kept_streams()[0]
    with gzip.open(source, "rt") as handle:
        kept = json.load(handle)
    row = {key: value[:rounds] for key, value in kept["onnxruntime"]["rows"]["+0%"].items()}
    with gzip.open(out, "wt") as handle:
        json.dump({**kept, "onnxruntime": {"rows": {"+0%": row}}}, handle)
    return out


@pytest.mark.parametrize("args,culprit", [(["--runs", "0"], "--runs 0"),
                                          (["--streams", "nowhere"], f"--streams {REPO_ROOT / 'nowhere'}"),
                                          (["--shift", "fast"], "--shift 'fast'")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, culprit):
    out = tmp_path / "rates.json"
    proc = _harness("--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and culprit in proc.stderr and proc.stderr.count("\n") == 1
    assert not out.exists()


def test_an_ab_session_finds_a_large_slowdown_and_passes_none():
    model = load_drift_model()
    assert simulate._board_ab(model, 30, 0.20, seed=3) == 30
    assert simulate._board_ab(model, 30, 0.0, seed=3) <= 3


def test_a_rate_holds_or_misses_its_bound_only_as_far_as_its_interval_says():
    at_most, at_least = ("max", 0.01), ("min", 0.95)
    assert simulate.holds(simulate.rate(0, 2000), at_most) == "holds"          # [0, 0.18] %
    assert simulate.holds(simulate.rate(0, 40), at_most) == "undecided"        # [0, 8.8] %: 40 say nothing
    assert simulate.holds(simulate.rate(40, 1000), at_most) == "MISSED"        # [2.9, 5.4] %
    assert simulate.holds(simulate.rate(1990, 2000), at_least) == "holds"
    assert simulate.holds(simulate.rate(38, 40), at_least) == "undecided"      # [83.1, 99.4] %
    assert simulate.holds(simulate.rate(800, 1000), at_least) == "MISSED"
    # what must never happen holds no interval: none in N bounds it by the interval's top, one misses it
    assert simulate.holds(simulate.rate(0, 200), ("never", 0.0)) == "none in 200"
    assert simulate.holds(simulate.rate(1, 200), ("never", 0.0)) == "MISSED"
    assert simulate.RATES["loaded 3x, look 1 PASS"][1][0] == "never"
    assert simulate.bound_text(("never", 0.0)) == "never" and simulate.bound_text(("max", 0.01)) == "≤ 1 %"


def test_a_loaded_host_is_as_noisy_as_measured_and_its_3x_stack_is_never_a_pass_unseen():
    # the host's factor: a log sd of 25-30 % per board, with bursts and a heavy tail
    host = simulate.LoadedHost(4000, seed=1)
    logs = np.log(np.array([host.factor() for _ in range(60)]))
    assert 0.25 <= float(np.median(logs.std(axis=0))) <= 0.30
    assert float(np.quantile(logs, 0.999)) > 4 * 0.27, "a tail past a normal's"
    # the three outcomes are tallied for each look: every board counted once a look (4 boards: the count
    # does not depend on how many, and each board's five looks are judged, ~0.3 s a board)
    tally = simulate._loaded_history(load_drift_model(), 4, simulate.LOADED_SLOW, seed=3)
    assert sum(tally[f"look 1 {o}"] for o in ("pass", "regression", "inconclusive")) == 4
    assert sum(tally[f"look 5 {o}"] for o in ("pass", "regression", "inconclusive")) == 4


def test_the_quiet_boards_inconclusive_outcomes_are_tallied_and_a_noisy_board_has_more():
    # the board's own drift (3.8 %) and one ten times as wide, same seed: the quiet board can decide
    # what the noisy one cannot, look by look
    model = load_drift_model()
    quiet = simulate._board_history(model, 6, 0.0, seed=3, progress=lambda line: None)
    noisy = simulate._board_history(model.scaled(sigma=10 * model.sigma), 6, 0.0, seed=3, progress=lambda line: None)
    for name in simulate.QUIET_OUTCOMES:
        assert 0 <= quiet[f"{name} inconclusive"] < noisy[f"{name} inconclusive"] <= 6, (name, quiet, noisy)


@pytest.mark.slow           # stores judged run by run
def test_the_upgrade_paths_count_each_judged_run_once_through_the_seam():
    # B then C: the three C runs of each store; accept then revert: the run back on A
    seen = []

    def judge(store, run):
        seen.append((len(store.runs()), run.key.versions["npu_driver"]))
        return simulate.gate_judge(store, run)

    c = simulate.upgrade_path(judge, simulate.UPGRADE_PATHS[0], 2, seed=4)
    assert sum(c.values()) == 6 and seen == [(6, "0.9.10"), (7, "0.9.10"), (8, "0.9.10")] * 2
    seen.clear()
    back = simulate.upgrade_path(judge, simulate.UPGRADE_PATHS[1], 2, seed=4)
    assert sum(back.values()) == 2 and seen == [(10, "0.9.6")] * 2


@pytest.mark.slow          # a few simulated boards and five stream windows, each judged with a noise factor
def test_simulate_writes_every_rate_and_finds_a_large_shift(tmp_path):
    (tmp_path / "kept").mkdir()
    _short_stream(tmp_path / "kept" / "short.json.gz")
    out = tmp_path / "rates.json"
    args = ("--runs", "4", "--board-runs", "6", "--seed", "5", "--shift", "20", "--streams", str(tmp_path / "kept"),
            "--out", str(out))
    proc = _harness(*args)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(simulate.RATES) < set(result["rates"])
    for name, cell in result["rates"].items():
        assert 0 <= cell["hits"] <= cell["n"], name
        assert cell["ci95"][0] <= cell["rate"] <= cell["ci95"][1], name
        assert name in proc.stdout
    assert result["rates"]["kept streams A/A, 5 looks"]["n"] == 5
    assert result["rates"]["board +20%, 5 runs"]["rate"] >= 0.75       # a +20 % step is found
    assert result["runs"] == 4 and result["board_runs"] == 6 and result["seed"] == 5 and result["machine"]
    # the quiet board's cells (the promises) at --board-runs, the loaded host's at --runs
    assert {result["rates"][name]["n"] for name in ("board A/A, 5 looks", "board +5 %, 5 runs", "board A/A, A/B",
                                                    "board A/A, look 1 inconclusive")} == {6}
    assert result["rates"]["loaded A/A, 5 looks"]["n"] == 4
    assert "| 4 (quiet board 6) | 5 |" in simulate.rates_table({"x": result})
    assert "board history +20%" in proc.stderr              # progress on standard error


def _result(tmp_path, name: str, hits: int) -> str:
    """A `simulate` JSON of the command's own shape, its A/A rate `hits` of 1000."""
    rates = {rate: {**simulate.rate(hits, 1000), "what": what, "bound": list(bound), "holds": None}
             for rate, (what, bound) in simulate.RATES.items()}
    result = {"rates": rates, "started": "2026-12-03T12:00:00+00:00", "machine": "here", "cpus": 2,
              "load_start": [1.0, 1.0, 1.0], "load_end": [2.0, 2.0, 2.0], "runs": 1000, "seed": 0, "seconds": 60.0}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(result))
    return str(path)


def test_table_puts_results_side_by_side_from_their_files(tmp_path):
    proc = _harness("--table", _result(tmp_path, "before", 7), "--table", _result(tmp_path, "after", 5))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "| rate | must be | before | after |"
    row = next(line for line in lines if line.startswith("| board A/A, 5 looks |"))
    assert "| ≤ 1 % | 0.7 % [" in row and "(7/1000) | 0.5 % [" in row and row.endswith("(5/1000) |")
    assert any(line.startswith("| after | 2026-12-03 12:00:00 | here | 2 | 1.0, 2.0 | 1000 | 0 | 60 |")
               for line in lines)


def test_table_of_a_file_that_is_not_a_result_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    proc = _harness("--table", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: --table ") and proc.stderr.count("\n") == 1


def test_the_statistics_pages_tables_are_generated_from_the_kept_results():
    """docs/results-statistics.md's rate tables are `results simulate --table` of the files its marker
    names: a figure typed into the page, or a result file changed without the page, fails here."""
    page = (REPO_ROOT / "docs" / "results-statistics.md").read_text()
    marker = next(line for line in page.splitlines() if line.startswith("<!-- results simulate --table "))
    files = marker.removeprefix("<!-- results simulate ").removesuffix(" -->").split()[1::2]
    generated = simulate.rates_table({path.stem: json.loads(path.read_text())
                                      for path in (REPO_ROOT / name for name in files)})
    start = page.index(marker) + len(marker) + 1
    assert page[start:page.index("<!-- end of generated tables -->", start)] == generated


def test_one_command_rewrites_the_pages_tables(tmp_path):
    # a page whose table went stale: --page writes back what --table of its marker's files prints
    kept = (REPO_ROOT / "docs" / "results-statistics.md").read_text()
    page = tmp_path / "page.md"
    page.write_text(kept.replace("| board A/A, 5 looks | ≤ 1 % |", "| board A/A, 5 looks | typed in |"))
    proc = _harness("--page", str(page))
    assert proc.returncode == 0, proc.stderr
    assert page.read_text() == kept
    page.write_text("no marker here\n")
    proc = _harness("--page", str(page))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: --page {page}: no ") and page.read_text() == \
        "no marker here\n"
