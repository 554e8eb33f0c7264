"""A LAVA job as a gate (`bin/harness lab verdict`): LAVA ends a job "finished correctly" whatever its
test cases say, and a job whose definition ran nothing passes too (docs/lab.md). The verdict reads the
job's log, the `lvl: results` records lava-run writes to its standard error and a LAVA server keeps as
the job's log (REST API: /api/v0.2/jobs/N/logs/), and says:

    0  the job completed, every definition it deployed finished, each reported at least as many test
       cases as its runs collected (the session's set `collected`), and no case failed
    1  a gate failed: a case's result is fail
    2  the lab failed, or nothing can be said: the job is Incomplete, a definition never started or ran
       no test, cases are missing against `collected`, a case is unknown (nothing judged)

one line per finding, each naming the job, the definition and the case.
"""
from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["Finding", "Job", "read_log", "read_output_dir", "fetch_server_log", "judge", "PASS", "FAIL", "INFRA"]

PASS, FAIL, INFRA = 0, 1, 2
# Sets the session reports about itself, not tests (lava/board-session): counted apart.
_OWN_SETS = {"fetch", "verdict", "collected"}


@dataclass(frozen=True)
class Finding:
    code: int           # FAIL or INFRA
    line: str


@dataclass
class Job:
    """What a job's log says: its id, its own result, its definitions and their cases in order."""
    job_id: str
    result: dict | None = None                              # the lava/job record
    definitions: list[str] = field(default_factory=list)    # LAVA's names: 0_anima-npu
    finished: dict[str, str] = field(default_factory=dict)  # definition -> LAVA's result for it
    cases: dict[str, list[dict]] = field(default_factory=dict)


def _records(text: str) -> list[dict]:
    """The `lvl: results` messages of a log: lava-run's lines ({...}) or a server's (- {...})."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    yaml = YAML(typ="safe", pure=True)
    found = []
    for line in text.splitlines():
        if '"lvl": "results"' not in line:
            continue
        try:
            entry = yaml.load(line.strip().removeprefix("- "))
        except YAMLError:
            continue            # a line cut short (a log still being written): its case is missing, and said
        if isinstance(entry, dict) and entry.get("lvl") == "results" and isinstance(entry.get("msg"), dict):
            found.append(entry["msg"])
    return found


def read_log(text: str, job_id: str = "") -> Job:
    job = Job(job_id)
    for msg in _records(text):
        definition, case = str(msg.get("definition", "")), str(msg.get("case", ""))
        if definition == "lava" and case == "job":
            job.result = msg
        elif definition == "lava" and case == "test-overlay":
            extra = msg.get("extra") or {}
            job.job_id = job.job_id or str(extra.get("uuid", "")).split("_")[0]
            name = f"{len(job.definitions)}_{extra.get('name', '')}"
            if name not in job.definitions:
                job.definitions.append(name)
        elif definition == "lava":
            job.finished.setdefault(case, str(msg.get("result")))
        else:
            job.cases.setdefault(definition, []).append(msg)
    job.definitions += [d for d in job.cases if d not in job.definitions]
    return job


def _case_name(msg: dict) -> str:
    return f"{msg['set']}/{msg['case']}" if msg.get("set") else str(msg.get("case"))


def _tests(cases: list[dict]) -> list[dict]:
    """The cases that are tests: not the session's own sets nor a reference (lava-test-reference), not a
    figure (TEST.ssim) of a test case."""
    names = {(c.get("set", ""), c.get("case")) for c in cases}
    return [c for c in cases if c.get("set", "") not in _OWN_SETS and "reference" not in c
            and not any((c.get("set", ""), str(c.get("case"))[:i]) in names
                        for i, char in enumerate(str(c.get("case"))) if char == ".")]


def _collected(cases: list[dict]) -> float | None:
    """How many tests the definition's runs collected (the set `collected`); None when it never said."""
    counts = [str(c.get("measurement")) for c in cases if c.get("set") == "collected"]
    try:
        return sum(float(n) for n in counts) if counts else None
    except ValueError:
        return None


def _definition(job: Job, name: str) -> list[Finding]:
    where = f"job {job.job_id} definition {name}"
    cases = job.cases.get(name, [])
    if name not in job.finished and not cases:
        return [Finding(INFRA, f"{where}: never started (no test case, no result of LAVA's for it): ran no test")]
    findings = [Finding(FAIL, f"{where} case {_case_name(c)}: fail") for c in cases if c.get("result") == "fail"]
    findings += [Finding(INFRA, f"{where} case {_case_name(c)}: unknown (nothing judged)")
                 for c in cases if c.get("result") == "unknown"]
    tests = _tests(cases)
    judged = [c for c in tests if c.get("result") in ("pass", "fail")]
    collected = _collected(cases)
    if not judged:
        findings.append(Finding(INFRA, f"{where}: ran no test ({len(tests)} test cases, none passed or failed)"))
    if collected is None:
        findings.append(Finding(INFRA, f"{where} case collected: missing: the session never said how many "
                                       f"tests its runs collect"))
    elif len(tests) < collected:
        findings.append(Finding(INFRA, f"{where} case collected: {collected:g} tests collected, {len(tests)} "
                                       f"reported: the others' results were lost"))
    if job.finished.get(name) == "fail" and not any(f.code == FAIL for f in findings):
        findings.append(Finding(INFRA, f"{where}: LAVA says it failed, and no case did"))
    return findings


def _incomplete(job: Job) -> Finding:
    result = job.result or {}
    running = next((d for d in job.definitions if d not in job.finished), None) or \
        (job.definitions[-1] if job.definitions else "none")
    cases = job.cases.get(running, [])
    last = _case_name(cases[-1]) if cases else "none"
    return Finding(INFRA, f"job {job.job_id} definition {running} case {last}: Incomplete "
                          f"({result.get('error_type', '?')}: {result.get('error_msg', '')})")


def judge(job: Job) -> tuple[int, list[str]]:
    """(exit status, one line per finding; a line saying what passed when none)."""
    if job.result is None:
        return INFRA, [f"job {job.job_id}: the log has no job result (lava/job): the job did not end, or this "
                       f"is not its log"]
    if job.result.get("result") != "pass":
        return INFRA, [_incomplete(job).line]
    if not job.definitions:
        return INFRA, [f"job {job.job_id}: no test definition was deployed"]
    findings = [f for name in job.definitions for f in _definition(job, name)]
    if findings:
        code = INFRA if any(f.code == INFRA for f in findings) else FAIL
        return code, [f.line for f in findings]
    tests = sum(len(_tests(job.cases[d])) for d in job.definitions)
    return PASS, [f"job {job.job_id}: complete, definitions {', '.join(job.definitions)}: {tests} test cases, "
                  f"none failed"]


def read_output_dir(out: Path, log: Path | None) -> Job:
    """lava-run's --output-dir OUT and its log (default OUT/output.yaml, the name a server gives it)."""
    path = log or out / "output.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: no lava-run log (lava-run ... --output-dir {out} JOB 2> {out}/output.yaml)")
    job = read_log(path.read_text(errors="replace"))
    job.job_id = job.job_id or out.name        # no definition deployed: the folder names the job
    return job


def fetch_server_log(server: str, job_id: int, token: str | None) -> Job:
    """A LAVA server's job through its REST API: the job's log (the same records as lava-run's)."""
    url = f"{server.rstrip('/')}/api/v0.2/jobs/{job_id}/logs/"
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode(errors="replace")
    except OSError as exc:      # HTTPError included: 404 for a job that is not there
        raise ConfigError(f"--server {server}: job {job_id}'s log ({url}): {exc}") from None
    return read_log(text, job_id=str(job_id))
