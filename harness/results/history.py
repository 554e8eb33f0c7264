"""Benchmark history: one JSON object per run and line (JSONL), appended atomically.

A record holds at least (extra keys are kept as they are):
  time                  UTC ISO 8601 with offset, e.g. "2026-08-12T09:30:00+00:00" (see utc_now())
  board_id, backend, model, manifest_hash   strings
  valid                 bool: telemetry said the run is comparable (clocks pinned, no throttling, ...)
  mean_step_s           mean seconds per sampler step
  total_denoise_s       seconds for the whole denoise loop
  branch_s_per_step     {self_attn, cross_attn, ffn}: NPU core seconds per step, summed over blocks
  lifecycle_s_per_step  {load, init, run, release}: seconds per step, summed over subgraphs
A record appended now also carries what makes two runs comparable (records from before may lack them
and load as they are; the trend groups them under "unknown"):
  precision             e.g. "float16", "float16+ffn-w8a8"
  steps                 sampler steps of the timed denoise
  versions              {npu_driver, runtime_lib, toolkit_lite, onnxruntime} (harness/provenance.py)
  git_revision, run_id  the commit under test and the CI run (or a local id)

Appending rewrites the whole file through a temporary file and a rename (harness/atomic.py): a run
killed mid-append leaves the old history, never a torn last line. A lock file serialises concurrent
appenders so neither loses the other's record. Loading never skips a line: a malformed one is an error
naming the file and line, because a silently dropped run would bend the trend.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
from datetime import datetime, timezone
from pathlib import Path

from .atomic import atomic_write_bytes
from .config import BRANCHES
from .errors import HarnessError
from .schema import Field, check_table, is_iso_time, is_seconds, non_empty_str, positive_int
from .steptimes import STAGE_NAMES

__all__ = ["HistoryError", "append_run", "load_history", "check_record", "utc_now",
           "DEFAULT_HISTORY", "REQUIRED_FIELDS", "RUN_FIELDS"]

DEFAULT_HISTORY = Path(".benchmarks/history.jsonl")
_STRINGS = ("board_id", "backend", "model", "manifest_hash")
_SECONDS = ("mean_step_s", "total_denoise_s")


class HistoryError(HarnessError):
    """The benchmark history file or a record in it is wrong."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _breakdown(parts: tuple[str, ...]):
    return lambda table: isinstance(table, dict) and all(is_seconds(table.get(p)) for p in parts)


# Extra keys are kept (records grow over time); these are the ones the trend and compare read.
_RECORD = {
    "time": Field(is_iso_time, "an ISO 8601 timestamp with a UTC offset (see utc_now())"),
    **{key: Field(non_empty_str, "a non-empty string") for key in _STRINGS},
    "valid": Field(lambda v: isinstance(v, bool), "true or false"),
    **{key: Field(is_seconds, "seconds >= 0") for key in _SECONDS},
    "branch_s_per_step": Field(_breakdown(BRANCHES), f"seconds >= 0 for each of {list(BRANCHES)}"),
    "lifecycle_s_per_step": Field(_breakdown(STAGE_NAMES), f"seconds >= 0 for each of {list(STAGE_NAMES)}"),
}


REQUIRED_FIELDS = tuple(_RECORD)

# What makes two runs comparable: required of a record appended now, checked when an older one has them.
_RUN = {
    "precision": Field(non_empty_str, "a non-empty string such as float16 or float16+ffn-w8a8"),
    "steps": Field(positive_int, "a positive whole number"),
    "versions": Field(lambda v: isinstance(v, dict), "a table of component -> version"),
    "git_revision": Field(lambda v: v is None or non_empty_str(v), "a commit id or null"),
    "run_id": Field(non_empty_str, "a non-empty string"),
}
RUN_FIELDS = tuple(_RUN)


def check_record(record, where: str = "record", new: bool = False) -> dict:
    """Raise HistoryError naming `where` and the field when `record` is not a complete run record
    (`new`: one about to be appended, which must also carry RUN_FIELDS)."""
    run = _RUN if new else {k: Field(f.check, f.expect, required=False) for k, f in _RUN.items()}
    return check_table(record, {**_RECORD, **run}, where, error=HistoryError, extra=True)


@contextlib.contextmanager
def _locked(path: Path):
    # The lock lives in its own file: the history itself is replaced by rename, so a lock on it
    # would be a lock on an inode that stops being the history.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def append_run(history_path: str | Path, record: dict) -> None:
    """Validate `record` and append it as one line; the file is replaced atomically."""
    path = Path(history_path)
    check_record(record, f"new record for {path}", new=True)
    try:
        line = json.dumps(record, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise HistoryError(f"new record for {path}: not JSON serialisable ({exc})") from None
    with _locked(path):
        try:
            existing = path.read_bytes()
        except FileNotFoundError:
            existing = b""
        if existing and not existing.endswith(b"\n"):
            existing += b"\n"   # a hand-edited file without a final newline must not glue two runs
        atomic_write_bytes(path, existing + line.encode("utf-8") + b"\n")


def load_history(path: str | Path) -> list[dict]:
    """All run records in file order; blank lines are allowed, anything malformed raises."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HistoryError(f"no benchmark history at {path}: run the benchmark gate "
                           "(pytest -m benchmark) first") from None
    except UnicodeDecodeError as exc:
        raise HistoryError(f"{path}: not UTF-8 text ({exc})") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise HistoryError(f"{where}: not valid JSON ({exc})") from None
        records.append(check_record(record, where))
    return records
