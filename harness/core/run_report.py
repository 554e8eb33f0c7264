"""The run report: the JSON file a partitioned run writes beside its output (also when it fails or is
stopped), declared once here. The run checks it before writing; `compare`, `accept-golden` and `plan`
check it when they read one, so a report of another shape is one error line naming the file.

A report always says how the run ended (`status`, `error`); what a finished run adds (the lifecycle
records, step times and tables) is required only when `status` is `ok`.
"""
from __future__ import annotations

from pathlib import Path

from .errors import ConfigError
from .schema import Field, check_table, is_int, non_empty_str, one_of, read_json

__all__ = ["check_run_report", "read_run_report"]

# "running": what a run killed with SIGKILL leaves; the others are set when it ends.
STATUSES = ("running", "ok", "failed", "interrupted", "terminated", "crashed")


def _is(*kinds):
    return lambda v: isinstance(v, kinds)


def _seq(check):
    # In memory a run's lists may still be tuples; on disk JSON makes every one a list.
    return lambda v: isinstance(v, (list, tuple)) and all(check(x) for x in v)


ALWAYS = {
    "status": Field(one_of(*STATUSES), f"one of {list(STATUSES)}"),
    "error": Field(lambda v: v is None or isinstance(v, str), "null or a message"),
    "error_kind": Field(non_empty_str, "an error class name", required=False),
    # what a board runtime printed itself during the failing call (harness/backends/rknnlite.py)
    "runtime_log": Field(_is(str), "the runtime's own output", required=False),
    "backend": Field(non_empty_str, "a backend name", required=False),
    "model": Field(non_empty_str, "a model name", required=False),
    "partition": Field(non_empty_str, "a partition directory", required=False),
    "settings": Field(_is(dict), "a table of sample settings", required=False),
    "lifecycle": Field(non_empty_str, "a lifecycle strategy", required=False),
    "images": Field(is_int, "a whole number", required=False),
}
_OPTIONAL = ("error_kind", "runtime_log")      # optional in a finished run's report too
WHEN_OK = {
    **{name: Field(f.check, f.expect) for name, f in ALWAYS.items() if name not in _OPTIONAL},
    **{name: ALWAYS[name] for name in _OPTIONAL},
    "manifest_sha256": Field(non_empty_str, "a sha256"),
    "streams": Field(_seq(non_empty_str), "a list of stream names"),
    "lifecycle_records": Field(_seq(_is(dict)), "a list of stage records"),
    "step_seconds": Field(_seq(lambda v: isinstance(v, (int, float))), "a list of seconds"),
    "tables": Field(_is(dict), "the lifecycle tables"),
}


def check_run_report(report, where: str, error: type[Exception] = ConfigError) -> dict:
    """`report` against the declaration (extra fields kept: a newer writer may add some)."""
    check_table(report, ALWAYS, where, error=error, extra=True)
    if report["status"] == "ok":
        check_table(report, WHEN_OK, where, error=error, extra=True)
    return report


def read_run_report(path: str | Path, finished: bool = False) -> dict:
    """A run report from disk, checked; `finished=True` also refuses one of a run that did not end ok."""
    report = check_run_report(read_json(path, "run report"), f"{path}")
    if finished and report["status"] != "ok":
        raise ConfigError(f"{path}: the run did not finish (status {report['status']}"
                          + (f": {report['error']})" if report.get("error") else ")"))
    return report
