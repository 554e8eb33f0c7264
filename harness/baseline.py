"""Benchmark baselines with rules: what a timing may be compared against, and when one may be saved.

A baseline is one saved timing under a key: case, steps, precision, backend, manifest hash and the
NPU stack's versions (driver, librknnrt, rknn-toolkit-lite2, onnxruntime). Two runs are compared only
when their keys are equal; a run whose key matches no baseline but whose case has baselines under
other keys is reported as "not a regression check", naming what differs. Baselines live per board:

    <root>/<board id>/<case>/<key digest>.json

Saving is the plugin's job (harness/pytest_plugin/baselines.py): only with --save-baseline, only from
a valid (not INVALID) run, and only when the whole pytest session passed.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .atomic import atomic_write_json
from .errors import ConfigError, HarnessError
from .history import utc_now

__all__ = ["BaselineKey", "BaselineStore", "Comparison", "judge", "parse_threshold",
           "REGRESSED", "WITHIN", "NO_BASELINE", "KEY_MISMATCH"]

REGRESSED, WITHIN, NO_BASELINE, KEY_MISMATCH = "regressed", "within threshold", "no baseline yet", "key mismatch"


@dataclass(frozen=True)
class BaselineKey:
    case: str
    steps: int
    precision: str
    backend: str
    manifest_hash: str
    versions: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def digest(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def differences(self, other: dict) -> list[str]:
        """'field: baseline -> this run' for every field of `other` (a saved key) that differs."""
        mine = self.as_dict()
        out = []
        for name in ("case", "steps", "precision", "backend", "manifest_hash"):
            if other.get(name) != mine[name]:
                out.append(f"{name} {_short(other.get(name))} -> {_short(mine[name])}")
        theirs = other.get("versions") or {}
        for name in sorted(set(theirs) | set(mine["versions"])):
            if theirs.get(name) != mine["versions"].get(name):
                out.append(f"{name} {theirs.get(name)} -> {mine['versions'].get(name)}")
        return out


def _short(value):
    return value[:12] if isinstance(value, str) and len(value) == 64 else value


def parse_threshold(text, option: str = "--baseline-threshold") -> float:
    """'10%' or '10' -> 10.0 (percent over the baseline's mean that counts as a regression)."""
    raw = str(text).strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected a percentage such as 10%") from None
    if not 0 < value < 1000:
        raise ConfigError(f"{option} {text!r}: must be between 0 and 1000 %")
    return value


class BaselineStore:
    """The baselines of one board under `root`."""

    def __init__(self, root: str | Path, board: str):
        self.root = Path(root)
        self.board = board

    def path_for(self, key: BaselineKey) -> Path:
        return self.root / self.board / key.case / f"{key.digest}.json"

    def _read(self, path: Path) -> dict:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise HarnessError(f"baseline {path}: unreadable ({exc}); delete it or save a new one "
                               "with --save-baseline") from None
        if not isinstance(data, dict) or not isinstance(data.get("mean_s"), (int, float)) \
                or not isinstance(data.get("key"), dict):
            raise HarnessError(f"baseline {path}: lacks 'key' and 'mean_s'; delete it or save a new one")
        data["path"] = str(path)
        return data

    def find(self, key: BaselineKey) -> dict | None:
        path = self.path_for(key)
        return self._read(path) if path.is_file() else None

    def others(self, key: BaselineKey) -> list[dict]:
        """Baselines of the same case under other keys, newest first."""
        folder = self.root / self.board / key.case
        found = [self._read(p) for p in sorted(folder.glob("*.json")) if p.name != f"{key.digest}.json"]
        return sorted(found, key=lambda d: d.get("saved_utc", ""), reverse=True)

    def save(self, key: BaselineKey, mean_s: float, provenance: dict) -> Path:
        path = self.path_for(key)
        atomic_write_json(path, {"key": key.as_dict(), "mean_s": mean_s, "board_id": self.board,
                                 "saved_utc": utc_now(), **provenance})
        return path


@dataclass
class Comparison:
    status: str
    message: str
    mean_s: float
    threshold_pct: float
    baseline_path: str | None = None
    baseline_mean_s: float | None = None
    delta_pct: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def judge(store: BaselineStore, key: BaselineKey, mean_s: float, threshold_pct: float) -> Comparison:
    """Compare `mean_s` with the baseline of the same key; say why when there is none."""
    base = store.find(key)
    if base is None:
        others = store.others(key)
        if not others:
            return Comparison(NO_BASELINE, f"no baseline yet for {key.case} on board {store.board} "
                              f"(save one from a passing run with --save-baseline)", mean_s, threshold_pct)
        nearest = others[0]
        diff = "; ".join(key.differences(nearest["key"]))
        return Comparison(KEY_MISMATCH, f"not a regression check: the baseline {nearest['path']} has "
                          f"another key ({diff}), so the timings are different experiments",
                          mean_s, threshold_pct, baseline_path=nearest["path"],
                          baseline_mean_s=nearest["mean_s"])
    delta = 100.0 * (mean_s - base["mean_s"]) / base["mean_s"]
    status = REGRESSED if delta > threshold_pct else WITHIN
    verb = "over" if delta > threshold_pct else "within"
    message = (f"denoise mean {mean_s:.4f} s vs baseline {base['mean_s']:.4f} s ({base['path']}, run "
               f"{base.get('run_id')}, {base.get('git_revision') or 'unknown revision'}): "
               f"{delta:+.1f} %, {verb} the {threshold_pct:g} % threshold")
    return Comparison(status, message, mean_s, threshold_pct, base["path"], base["mean_s"], delta)
