"""Repeat a measurement until its interval is within a tolerance or a time budget ends (probe-board).

Each call of `sample` gives one value of every figure it measures (a tuple, in `names` order). After at
least `least` samples, each figure's mean and its 95 % t-interval (scipy.stats.t) are taken; the
repeats stop when every interval's half-width is within `tolerance` of its mean, or when `budget_s`
seconds have passed since the first sample, or at `most` samples. A figure left outside says how many
repeats it would need at the spread it showed: n (half-width / (tolerance x mean))^2.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

__all__ = ["Interval", "converge", "TOLERANCE"]

TOLERANCE = 0.05            # the project's stated figure: a probe figure within 5 % of its value


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    repeats: int
    within: bool
    tolerance: float
    needs: int | None = None    # repeats the spread asks for, when not within

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}      # TOML has no null

    def text(self) -> str:
        head = f"{self.value:.4g} [95 % {self.low:.4g}, {self.high:.4g}] over {self.repeats} repeats"
        if self.within:
            return f"{head}, within {100 * self.tolerance:g} %"
        return f"{head}, NOT within {100 * self.tolerance:g} % (it would need about {self.needs} repeats)"


def _interval(values: list[float], tolerance: float) -> Interval:
    y = np.asarray(values, dtype=float)
    mean = float(y.mean())
    if len(y) < 2:
        return Interval(mean, -math.inf, math.inf, len(y), False, tolerance, 2)
    half = float(stats.t.ppf(0.975, len(y) - 1) * y.std(ddof=1) / math.sqrt(len(y)))
    allowed = tolerance * abs(mean)
    within = half <= allowed
    needs = None if within else (math.ceil(len(y) * (half / allowed) ** 2) if allowed > 0 else None)
    return Interval(mean, mean - half, mean + half, len(y), within, tolerance, needs)


def converge(sample, names: tuple[str, ...], least: int, budget_s: float, tolerance: float = TOLERANCE,
             most: int = 200) -> dict[str, Interval]:
    """{name: Interval} of the figures `sample()` measures, repeated as the module says."""
    columns: list[list[float]] = [[] for _ in names]
    start = time.monotonic()
    while True:
        for column, value in zip(columns, sample()):
            column.append(float(value))
        n = len(columns[0])
        if n < least:
            continue
        found = {name: _interval(column, tolerance) for name, column in zip(names, columns)}
        if all(i.within for i in found.values()) or time.monotonic() - start >= budget_s or n >= most:
            return found
