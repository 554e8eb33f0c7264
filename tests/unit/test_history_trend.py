"""Benchmark history (JSONL) and the trend plot/table on real files."""
import argparse
import io
import json

import pytest
from rich.console import Console

from harness.results.history import HistoryError, append_run, load_history
from harness.core.imageio import load_png
from harness.cli.trend import add_command
from harness.results.trend import render_table, trend


def _record(day: int, step_s: float, valid: bool = True, board: str = "rock5c-01") -> dict:
    return {
        "time": f"2026-08-{day:02d}T09:30:00+00:00", "board_id": board, "backend": "rknnlite",
        "model": "embedded-digits", "manifest_hash": "sha256:abc", "valid": valid,
        "mean_step_s": step_s, "total_denoise_s": step_s * 20,
        "branch_s_per_step": {"self_attn": 0.2, "cross_attn": 0.1, "ffn": 0.3},
        "lifecycle_s_per_step": {"load": 0.5, "init": 0.4, "run": 0.6, "release": 0.05},
        "telemetry": {"npu_freq_mhz": 1000}, "precision": "float16", "steps": 20,
        "versions": {"npu_driver": "0.9.8", "runtime_lib": "2.3.2", "toolkit_lite": "2.3.2", "onnxruntime": None},
        "git_revision": "abc123", "run_id": f"gh-{day}-1",
    }


def test_append_and_load_round_trip(tmp_path):
    path = tmp_path / "nested" / "history.jsonl"
    records = [_record(1, 1.5), _record(2, 1.6, valid=False)]
    for record in records:
        append_run(path, record)
    assert load_history(path) == records
    assert path.read_text().count("\n") == 2
    assert sorted(p.name for p in path.parent.iterdir()) == [".history.jsonl.lock", "history.jsonl"]


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "history.jsonl"
    append_run(path, _record(1, 1.5))
    with open(path, "a") as fh:
        fh.write('{"time": "2026-08-02T09:30:00+00:00", "board_id": \n')
    with pytest.raises(HistoryError, match=r"history.jsonl line 2: not valid JSON"):
        load_history(path)


def test_incomplete_record_in_file_names_line_and_field(tmp_path):
    path = tmp_path / "history.jsonl"
    append_run(path, _record(1, 1.5))
    bad = _record(2, 1.5)
    del bad["lifecycle_s_per_step"]["release"]
    path.write_text(path.read_text() + json.dumps(bad) + "\n")
    with pytest.raises(HistoryError, match=r"line 2: field 'lifecycle_s_per_step' must be seconds >= 0 for each of"):
        load_history(path)


@pytest.mark.parametrize("field, value, fragment", [
    ("valid", "yes", "'valid' must be true or false"),
    ("mean_step_s", float("nan"), "'mean_step_s' must be seconds"),
    ("time", "2026-08-01T09:30:00", "with a UTC offset"),
])
def test_bad_record_is_refused_and_file_untouched(tmp_path, field, value, fragment):
    path = tmp_path / "history.jsonl"
    append_run(path, _record(1, 1.5))
    before = path.read_bytes()
    with pytest.raises(HistoryError, match=fragment):
        append_run(path, {**_record(2, 1.5), field: value})
    assert path.read_bytes() == before


def test_missing_history_is_a_clear_error(tmp_path):
    with pytest.raises(HistoryError, match="no benchmark history at"):
        load_history(tmp_path / "none.jsonl")


def test_trend_writes_png_and_rows_with_invalid_run(tmp_path):
    history = [_record(1, 1.5), _record(2, 1.7, valid=False), _record(3, 1.4),
               _record(4, 9.0, board="rock5c-02")]
    out = tmp_path / "out" / "trend.png"
    rows = trend(history, out, board="rock5c-01")
    assert [r["step_s"] for r in rows] == [1.5, 1.7, 1.4]
    assert [r["valid"] for r in rows] == [True, False, True]
    picture = load_png(out)
    assert picture.shape[0] > 400 and picture.std() > 0.05
    buffer = io.StringIO()
    render_table(rows, console=Console(file=buffer, width=200))
    table = buffer.getvalue()
    assert "NO" in table and "rock5c-01" in table and "1.700" in table and "embedded-digits" in table


def test_trend_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(HistoryError, match="empty"):
        trend([], tmp_path / "t.png")
    with pytest.raises(HistoryError, match=r"no runs of board 'x'.*rock5c-01"):
        trend([_record(1, 1.0)], tmp_path / "t.png", board="x")
    assert not (tmp_path / "t.png").exists()


def test_trend_command_end_to_end(tmp_path, capsys):
    history = tmp_path / "history.jsonl"
    for day in (1, 2, 3):
        append_run(history, _record(day, 1.0 + day / 10, valid=day != 2))
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["trend", "--history", str(history), "--out", str(tmp_path / "t.png")])
    assert args.func(args) == 0
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert "3 runs" in capsys.readouterr().out
    missing = parser.parse_args(["trend", "--history", str(tmp_path / "none.jsonl")])
    with pytest.raises(HistoryError, match="none.jsonl"):
        missing.func(missing)


def test_new_records_must_carry_versions_revision_run_id_steps_and_precision(tmp_path):
    path = tmp_path / "history.jsonl"
    for field in ("versions", "git_revision", "run_id", "steps", "precision"):
        record = _record(1, 1.5)
        del record[field]
        with pytest.raises(HistoryError, match=rf"missing field\(s\) \['{field}'\]"):
            append_run(path, record)
    old = _record(1, 1.5)
    for field in ("versions", "git_revision", "run_id", "steps", "precision"):
        del old[field]
    path.write_text(json.dumps(old) + "\n")        # a record from before these fields still loads
    assert load_history(path) == [old]


def test_trend_draws_one_line_per_board_backend_model_precision_and_marks_version_changes(tmp_path):
    from matplotlib.figure import Figure

    from harness.results.trend import _plot_step_time, trend_rows, version_changes
    history = [_record(1, 1.5), _record(2, 1.6), {**_record(3, 4.0), "backend": "faults"},
               {**_record(4, 1.0), "precision": "float32"},
               {**_record(5, 1.2), "versions": {**_record(5, 1.2)["versions"], "npu_driver": "0.9.9"}}]
    rows = trend_rows(history)
    changes = version_changes(rows)
    assert [(row["index"], what) for row, what in changes] == [(4, "npu_driver 0.9.8->0.9.9")]
    ax = Figure().subplots()
    _plot_step_time(ax, rows, threshold_pct=10)
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert lines == {"rknnlite/embedded-digits/float16": [1.5, 1.6, 1.2],
                     "faults/embedded-digits/float16": [4.0],
                     "rknnlite/embedded-digits/float32": [1.0]}
    bands = [c for c in ax.collections if c.get_label().startswith("+10 % band")]
    assert len(bands) == 3
    # The FP16 line's band starts at the driver change and spans its median since then (+10 %).
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(1.2) and max(ys) == pytest.approx(1.32)
    out = trend(history, tmp_path / "t.png", threshold_pct=10)
    assert len(out) == 5 and load_png(tmp_path / "t.png").std() > 0.05


APPENDER = r"""
import sys, time
from pathlib import Path
from harness.results.history import append_run
from tests.unit.test_history_trend import _record

path, who, count, go = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
while not go.exists():          # both processes start appending at the same moment
    time.sleep(0.001)
for i in range(count):
    append_run(path, {**_record(1, 1.0 + i / 1000), "board_id": f"{who}-{i}"})
"""


def test_two_runs_appending_at_once_lose_no_record(tmp_path):
    """Two processes append to one history at the same time: every record of both is there once."""
    import subprocess
    import sys

    from harness.model.config import REPO_ROOT
    path, go, count = tmp_path / "history.jsonl", tmp_path / "go", 40
    children = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), who, str(count), str(go)],
                                 cwd=REPO_ROOT) for who in ("a", "b")]
    go.touch()
    assert [c.wait(timeout=120) for c in children] == [0, 0]
    boards = [r["board_id"] for r in load_history(path)]
    assert sorted(boards) == sorted(f"{who}-{i}" for who in ("a", "b") for i in range(count))
