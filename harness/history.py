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
import math
from datetime import datetime, timezone
from pathlib import Path

from .atomic import atomic_write_bytes
from .config import BRANCHES
from .errors import HarnessError

__all__ = ["HistoryError", "append_run", "load_history", "check_record", "utc_now",
           "DEFAULT_HISTORY", "LIFECYCLE_STAGES", "REQUIRED_FIELDS", "RUN_FIELDS"]

DEFAULT_HISTORY = Path(".benchmarks/history.jsonl")
LIFECYCLE_STAGES = ("load", "init", "run", "release")
REQUIRED_FIELDS = ("time", "board_id", "backend", "model", "manifest_hash", "valid", "mean_step_s",
                   "total_denoise_s", "branch_s_per_step", "lifecycle_s_per_step")
RUN_FIELDS = ("precision", "steps", "versions", "git_revision", "run_id")
_STRINGS = ("board_id", "backend", "model", "manifest_hash")
_SECONDS = ("mean_step_s", "total_denoise_s")


class HistoryError(HarnessError):
    """The benchmark history file or a record in it is wrong."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value >= 0


def _check_time(value, where: str) -> None:
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise HistoryError(f"{where}: 'time' must be an ISO 8601 timestamp, got {value!r}") from None
    if parsed.utcoffset() is None:
        raise HistoryError(f"{where}: 'time' {value!r} has no UTC offset; use utc_now()")


def _check_breakdown(record: dict, key: str, parts: tuple[str, ...], where: str) -> None:
    table = record[key]
    if not isinstance(table, dict) or set(parts) - set(table):
        raise HistoryError(f"{where}: '{key}' must map each of {list(parts)} to seconds, got {table!r}")
    for part in parts:
        if not _seconds(table[part]):
            raise HistoryError(f"{where}: '{key}.{part}' must be seconds >= 0, got {table[part]!r}")


def check_record(record, where: str = "record", new: bool = False) -> dict:
    """Raise HistoryError naming `where` and the field when `record` is not a complete run record
    (`new`: one about to be appended, which must also carry RUN_FIELDS)."""
    if not isinstance(record, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [key for key in REQUIRED_FIELDS + (RUN_FIELDS if new else ()) if key not in record]
    if missing:
        raise HistoryError(f"{where}: missing field(s) {missing}")
    _check_time(record["time"], where)
    for key in _STRINGS:
        if not isinstance(record[key], str) or not record[key]:
            raise HistoryError(f"{where}: '{key}' must be a non-empty string, got {record[key]!r}")
    if not isinstance(record["valid"], bool):
        raise HistoryError(f"{where}: 'valid' must be true or false, got {record['valid']!r}")
    for key in _SECONDS:
        if not _seconds(record[key]):
            raise HistoryError(f"{where}: '{key}' must be seconds >= 0, got {record[key]!r}")
    _check_breakdown(record, "branch_s_per_step", BRANCHES, where)
    _check_breakdown(record, "lifecycle_s_per_step", LIFECYCLE_STAGES, where)
    if "versions" in record and not isinstance(record["versions"], dict):
        raise HistoryError(f"{where}: 'versions' must map component to version, got {record['versions']!r}")
    if "steps" in record and not (isinstance(record["steps"], int) and record["steps"] > 0):
        raise HistoryError(f"{where}: 'steps' must be a positive whole number, got {record['steps']!r}")
    return record


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
