"""`bin/harness lab verdict`'s rules on lava-run's log records (one JSON object a line, as lava-run writes
them to its standard error and a LAVA server serves them): exit 0 only for a complete job whose
definitions each reported at least as many test cases as they collected and none failed; 1 for a failed
case; 2 for the lab's failures and for a job that cannot be judged. tests/lab/test_lava_run.py runs it on
real lava-run output (a passing job, the --fault=nan@3 job, an overlay not unpacked, a definition that
never started, a failed overlay download); here each rule once, and the server's REST API path against
a local HTTP server serving such a log."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.lab.verdict import judge, read_log

JOB = "4242"
DEF = "0_anima-npu"


def _line(msg: dict) -> str:
    return json.dumps({"dt": "2026-12-05T00:00:00", "lvl": "results", "msg": msg})


def _log(*cases: tuple, job: str = "pass", finished: str | None = "pass", collected=(2,)) -> str:
    """A job's log: its definition deployed, the cases (set, case, result[, measurement]), LAVA's result
    for the definition and the job's."""
    lines = [_line({"definition": "lava", "case": "test-overlay", "result": "pass",
                    "extra": {"name": "anima-npu", "uuid": f"{JOB}_1.4.2.1"}})]
    lines += [_line({"definition": DEF, "set": "collected", "case": f"run{i}", "result": "pass",
                     "measurement": n, "units": "tests"}) for i, n in enumerate(collected)]
    for test_set, case, result, *measured in cases:
        lines.append(_line({"definition": DEF, "set": test_set, "case": case, "result": result,
                            **({"measurement": measured[0], "units": "s"} if measured else {})}))
    if finished:
        lines.append(_line({"definition": "lava", "case": DEF, "result": finished}))
    job_record = {"definition": "lava", "case": "job", "result": job}
    if job != "pass":
        job_record.update(error_type="Test", error_msg="board-session: the partition did not match")
    lines.append(_line(job_record))
    return "\n".join(lines) + "\n"


PASSING = [("smoke", "test_3", "pass", 1.0), ("numerics", "test_a", "pass", 2.0),
           ("numerics", "test_a.cosine", "pass", 0.99), ("verdict", "gates", "pass")]


def test_a_complete_job_that_reported_what_it_collected_passes():
    assert judge(read_log(_log(*PASSING))) == (0, [f"job {JOB}: complete, definitions {DEF}: 2 test cases, "
                                                   "none failed"])


@pytest.mark.parametrize("cases, more, code, line", [
    ([*PASSING[:2], ("numerics", "test_a.cosine", "fail", 0.2)], {}, 1,
     f"job {JOB} definition {DEF} case numerics/test_a.cosine: fail"),
    ([PASSING[0], ("numerics", "test_a", "unknown")], {}, 2,
     f"job {JOB} definition {DEF} case numerics/test_a: unknown (nothing judged)"),
    # a figure of a test (test_a.cosine) is no test: three collected, two tests reported
    (PASSING, {"collected": (1, 1)}, 0, None),         # the runs' counts add up
    (PASSING, {"collected": (3,)}, 2, f"job {JOB} definition {DEF} case collected: 3 tests collected, 2 reported: "
                                      "the others' results were lost"),
    (PASSING, {"collected": ()}, 2, f"job {JOB} definition {DEF} case collected: missing: the session never said "
                                    "how many tests its runs collect"),
    ([("smoke", "test_3", "skip"), ("numerics", "test_a", "skip")], {}, 2,
     f"job {JOB} definition {DEF}: ran no test (2 test cases, none passed or failed)"),
    ([], {"finished": None, "collected": ()}, 2,
     f"job {JOB} definition {DEF}: never started (no test case, no result of LAVA's for it): ran no test"),
    (PASSING, {"finished": "fail"}, 2, f"job {JOB} definition {DEF}: LAVA says it failed, and no case did"),
    (PASSING[:2], {"job": "fail", "finished": None}, 2,
     f"job {JOB} definition {DEF} case numerics/test_a: Incomplete (Test: board-session: the partition did not "
     "match)"),
])
def test_each_finding_is_one_line_naming_job_definition_and_case(cases, more, code, line):
    found, lines = judge(read_log(_log(*cases, **more)))
    assert found == code and (line in lines if line else len(lines) == 1), lines


def test_a_log_without_the_jobs_result_cannot_pass(tmp_path, capsys):
    cut = _log(*PASSING).splitlines()[:-1]        # lava-run killed, or the log read while it runs
    (tmp_path / "output.yaml").write_text("\n".join(cut))
    assert main(["lab", "verdict", str(tmp_path)]) == 2
    assert capsys.readouterr().out == (f"job {JOB}: the log has no job result (lava/job): the job did not end, "
                                       "or this is not its log\n")
    assert main(["lab", "verdict", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}/none/output.yaml: no lava-run log") and err.count("\n") == 1


def test_a_servers_job_is_read_by_its_rest_api(monkeypatch, capsys):
    """GET /api/v0.2/jobs/N/logs/ (with the token of $LAVA_TOKEN): the same records, a server's YAML list."""
    log = "".join(f"- {line}\n" for line in _log(*PASSING[:1], ("numerics", "test_a", "fail", 2.0)).splitlines())
    seen = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            body = log.encode() if self.path == "/api/v0.2/jobs/4242/logs/" else b'{"detail": "Not found."}'
            self.send_response(200 if self.path.endswith("/4242/logs/") else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("LAVA_TOKEN", "secret")
    try:
        assert main(["lab", "verdict", "--server", url, "--job", "4242"]) == 1
        assert capsys.readouterr().out == f"job {JOB} definition {DEF} case numerics/test_a: fail\n"
        assert main(["lab", "verdict", "--server", url, "--job", "7"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --server {url}: job 7's log ") and "404" in err and err.count("\n") == 1
    finally:
        server.shutdown()
    assert seen[0] == ("/api/v0.2/jobs/4242/logs/", "Token secret")


def test_verdict_wants_one_source(capsys, tmp_path: Path):
    assert main(["lab", "verdict", str(tmp_path), "--server", "http://x", "--job", "1"]) == 2
    assert capsys.readouterr().err == "error: lab verdict: lava-run's output folder OUT, or --server URL --job N\n"
