"""The run report's declared shape (harness/core/run_report.py): the writer checks it, every reader
refuses a report of another shape with one line naming the file and the field."""
from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from harness.core.errors import ConfigError
from harness.core.run_report import check_run_report, read_run_report

STOPPED = {"status": "terminated", "error": "SIGTERM received", "backend": "onnxruntime"}


def test_a_stopped_run_needs_only_how_it_ended():
    assert check_run_report(dict(STOPPED), "r.json") == STOPPED


@pytest.mark.parametrize("report,fragment", [
    ({"error": None}, "missing field(s) ['status']"),
    ({"status": "done", "error": None}, "field 'status' must be one of"),
    ({**STOPPED, "status": "ok"}, "missing field(s) ['model', 'partition'"),
    ({**STOPPED, "images": "2"}, "field 'images' must be a whole number"),
])
def test_a_report_of_another_shape_is_named(report, fragment):
    with pytest.raises(ConfigError, match=r"r\.json: .*" + fragment.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("]", r"\]").replace("'", "'")):
        check_run_report(report, "r.json")


def test_readers_refuse_an_unfinished_or_broken_report(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(STOPPED))
    with pytest.raises(ConfigError, match="did not finish .status terminated: SIGTERM received"):
        read_run_report(path, finished=True)
    path.write_text(json.dumps({**STOPPED, "status": "ok"}))
    assert main(["compare", str(path), str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "missing field(s)" in err[0]
    path.write_text("{not json")
    assert main(["plan", "--report", str(path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
