"""The board's run-to-run drift as a noise model, for the simulated board and the verdict benchmark.

boards/data/board-drift.toml holds the measured pairs (two runs of the same subgraph files on the
board) and the model's assumptions. The model: the log of each branch's time factor is an
Ornstein-Uhlenbeck process with the standard deviation the pairs give and an assumed correlation
time; every invocation adds independent jitter. So two runs far apart in time drift independently
(the pairs' 3-7 %), while an A and a B timed alternately within minutes share most of
the drift, which is what an interleaved A/B session relies on.

The spread: a pair of independent runs differs in log by a normal with variance 2 sigma^2, so
sigma^2 is the mean squared log ratio over the pairs, halved.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..model.config import REPO_ROOT
from .board_profile import BRANCH_ORDER

__all__ = ["Drift", "load_drift_model"]

DEFAULT_DRIFT_DATA = REPO_ROOT / "boards" / "data" / "board-drift.toml"


@dataclass(frozen=True)
class DriftModel:
    sigma: float            # stationary standard deviation of a branch's log time factor
    correlation_s: float    # board seconds over which the drift forgets its level
    jitter: float           # log spread of one invocation around the drift level
    pairs: dict             # {branch: (first run, second run)} as measured
    path: Path

    def scaled(self, sigma: float | None = None, correlation_s: float | None = None) -> DriftModel:
        """The same model with another spread or time scale (a sensitivity check)."""
        return DriftModel(self.sigma if sigma is None else sigma,
                          self.correlation_s if correlation_s is None else correlation_s,
                          self.jitter, self.pairs, self.path)


def load_drift_model(path: str | Path | None = None) -> DriftModel:
    path = Path(path or DEFAULT_DRIFT_DATA)
    try:
        data = tomllib.loads(path.read_text())
        pairs = {b: tuple(float(v) for v in t["core_per_step"]) for b, t in data["measured"].items()}
        model = data["model"]
        correlation_s, jitter = float(model["correlation_s"]), float(model["invocation_jitter"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"drift data {path}: {exc}") from None
    if not pairs or any(len(p) != 2 or min(p) <= 0 for p in pairs.values()) \
            or not (correlation_s > 0 and jitter >= 0):
        raise ConfigError(f"drift data {path}: needs [measured.BRANCH] core_per_step = [run 1, run 2] "
                          "(positive) and [model] correlation_s > 0, invocation_jitter >= 0")
    sigma = math.sqrt(sum(math.log(b / a) ** 2 for a, b in pairs.values()) / len(pairs) / 2)
    return DriftModel(sigma, correlation_s, jitter, pairs, path)


class Drift:
    """One board's drift, branch by branch, drawn from `model` with `seed`; time in board seconds.
    With `trials`, every level is an array: that many independent boards at once (the benchmark's
    Monte Carlo), else a number (the simulated board)."""

    def __init__(self, model: DriftModel, seed: int, branches=BRANCH_ORDER, trials: int | None = None):
        self.model = model
        self.shape = () if trials is None else (trials,)
        self.rng = np.random.default_rng(seed)
        self.level = {b: self.rng.normal(0.0, model.sigma, self.shape) for b in branches}
        self.t: float | None = None

    def advance(self, t: float) -> None:
        """Move every branch's level to time t (exact OU transition; time never runs back)."""
        if self.t is not None and t > self.t:
            keep = math.exp(-(t - self.t) / self.model.correlation_s)
            spread = self.model.sigma * math.sqrt(1.0 - keep * keep)
            for b in self.level:
                self.level[b] = self.level[b] * keep + self.rng.normal(0.0, spread, self.shape)
        self.t = t if self.t is None else max(self.t, t)

    def factor(self, branch: str, t: float) -> float:
        """The time factor of one invocation of `branch` at time t (1 for a branch without drift)."""
        if branch not in self.level:
            return 1.0
        self.advance(t)
        return float(np.exp(self.level[branch] + self.rng.normal(0.0, self.model.jitter, self.shape)))

    def mean_factor(self, branch: str, t: float, invocations: int):
        """The mean factor of `invocations` invocations at about time t (a step's worth of one
        branch): the level's factor times the mean jitter, taken as the exponential of the mean of
        the jitters' logs (exact to a few parts in 10^4 at a jitter of a few %)."""
        self.advance(t)
        jitter = self.rng.normal(0.0, self.model.jitter / math.sqrt(invocations), self.shape)
        return np.exp(self.level[branch] + jitter)
