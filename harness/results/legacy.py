"""Readers of the stores the results store replaces, for `bin/harness results import` only.

    history.jsonl                           one JSON run record per line (the old benchmark history)
    <baselines>/<board>/<case>/<digest>.json  one saved denoise mean per key (the old per-board baselines)

Nothing here is fatal for one bad record: each becomes one line naming the file and line, and the
rest is imported. A torn last line (a run killed mid-append, no final newline) is the expected
damage and is reported as such; a bad line elsewhere is corruption, which `import` reports with a
non-zero exit after importing the good ones. A baseline whose mean is NaN, Infinity, negative or zero
is refused: it would judge every later run "within", or end in a division by zero.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..model.config import BRANCHES
from ..lifecycle.steptimes import STAGE_NAMES
from .records import ResultsError, Run, RunKey, board_model_of

__all__ = ["Imported", "read_history", "read_baselines"]


@dataclass
class Imported:
    runs: list = field(default_factory=list)            # Run
    baselines: list = field(default_factory=list)       # Run that was a board's baseline
    torn: list = field(default_factory=list)            # lines: the torn last line, skipped
    problems: list = field(default_factory=list)        # lines: every other record skipped


def read_history(path: Path, into: Imported) -> None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
    lines = data.split(b"\n")
    ends_torn = not data.endswith(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path} line {number}"
        try:
            into.runs.append(_run_of_record(json.loads(raw)))
        except (ValueError, ResultsError) as exc:
            last = number == len(lines) and ends_torn
            (into.torn if last else into.problems).append(
                f"{where}: {'torn last line (a run killed mid-append), skipped' if last else 'skipped'}: "
                f"{_reason(exc)}")


def _reason(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1] if isinstance(exc, ResultsError) else f"not valid JSON ({exc})"


def _run_of_record(record) -> Run:
    if not isinstance(record, dict):
        raise ResultsError(f"record: expected a JSON object, got {type(record).__name__}")
    try:
        steps = record.get("steps") or 1
        return Run(
            run_id=record.get("run_id") or f"history-{record['time']}", time=record["time"],
            board_id=record["board_id"], board_model=board_model_of(str(record["board_id"])),
            model=record["model"], valid=record["valid"], mean_step_s=record["mean_step_s"],
            total_denoise_s=record["total_denoise_s"],
            key=RunKey(case=record.get("case") or "unknown", steps=steps,
                       precision=record.get("precision") or "unknown", backend=record["backend"],
                       manifest_hash=record["manifest_hash"], versions=dict(record.get("versions") or {})),
            stages={s: v for s, v in (record.get("lifecycle_s_per_step") or {}).items() if s in STAGE_NAMES},
            branches={b: v for b, v in (record.get("branch_s_per_step") or {}).items() if b in BRANCHES},
            invalid_reasons=tuple(record.get("invalid_reasons") or ()), git_revision=record.get("git_revision"),
            kernel=record.get("kernel"), peak_pss_added_bytes=record.get("peak_pss_added_bytes"))
    except KeyError as exc:
        raise ResultsError(f"record: missing field {exc.args[0]!r}") from None
    except (TypeError, AttributeError) as exc:
        raise ResultsError(f"record: malformed ({exc})") from None


def read_baselines(root: Path, into: Imported) -> None:
    """Every <root>/<board>/<case>/<digest>.json; each becomes a run marked as its board's baseline."""
    for path in sorted(root.glob("*/*/*.json")):
        try:
            run = _run_of_baseline(json.loads(path.read_text(encoding="utf-8")), path)
        except (OSError, ValueError) as exc:
            into.problems.append(f"{path}: skipped: unreadable ({exc})")
            continue
        except ResultsError as exc:
            into.problems.append(f"{path}: skipped: {_reason(exc)}")
            continue
        into.baselines.append(run)


def _run_of_baseline(data, path: Path) -> Run:
    if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
        raise ResultsError("baseline: lacks its 'key'")
    mean = data.get("mean_s")
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean) or mean <= 0:
        raise ResultsError(f"baseline: mean_s must be a finite number of seconds > 0, got {mean!r}")
    key = data["key"]
    steps = key.get("steps")
    try:
        return Run(
            run_id=data.get("run_id") or f"baseline-{path.stem}", time=data.get("saved_utc") or "",
            board_id=data.get("board_id") or path.parts[-3],
            board_model=board_model_of(str(data.get("board_id") or path.parts[-3])),
            model=data.get("model") or "unknown", valid=True,
            # the old baseline held the pytest-benchmark round mean: one whole denoise
            mean_step_s=mean / steps if isinstance(steps, int) and steps > 0 else mean, total_denoise_s=mean,
            key=RunKey(case=key.get("case"), steps=steps, precision=key.get("precision"),
                       backend=key.get("backend"), manifest_hash=key.get("manifest_hash"),
                       versions=dict(key.get("versions") or {})),
            git_revision=data.get("git_revision"))
    except (TypeError, AttributeError) as exc:
        raise ResultsError(f"baseline: malformed ({exc})") from None
