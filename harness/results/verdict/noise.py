"""The noise factor: how much wider than independent runs a board's own record says a history
verdict's interval must be.

history_verdict's interval assumes that the runs of a history are independent draws of one normal
(in the log) distribution. Runs close in time are not: measured on onnxruntime here, back-to-back
runs have a lag-1 autocorrelation of the step's log of 0.80-0.89 and still 0.37 at lag 50, so the
mean of 20 neighbouring runs varies 9-16 times as much as independent runs would let it; and a run
now and then is disturbed far past the rest (one branch +40-230 %), a heavy tail the outlier screen
keeps out of the spread but not out of the run judged. A history of 20-30 runs cannot measure a
memory longer than itself, so the factor is learned across the board's longer record instead: the
verdict's own statistic (the shift of a group of k runs over the n runs before it, in units of its
standard error: `standardized_shifts`) at every earlier position of the board's valid runs of the
experiment, each key's runs a series of its own (the noise belongs to the board and the case, not
to one stack). Three ratios say how far those statistics reach past the t distribution the verdict
assumes: the bulk's (the upper quantiles', from the quartile to the CONFIDENCE quantile, raised by
slow drift), the tail's (a fitted Student t's quantile at the figure's own level, raised by disturbed
runs) and the spread's (their median absolute deviation, raised by a level that moves now and then).
Each counts only when records of independent runs of the same shape give a smaller one CONFIDENCE of
the time (a Monte Carlo test at the gate's own level: `_independent_ratios`), so a quiet board keeps
its power and a short record, whose ratios vary most, needs the most evidence; the interval is
widened by the largest one that counts, never narrowed. A record of fewer than two earlier positions
leaves the factor at 1 and the verdict says the noise is not learned yet.

A real change inside the record widens the factor too (its shift is counted as noise) until it
leaves the NOISE_LOOKBACK runs: a verdict after it is slower to flag, never quicker.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..constants import CONFIDENCE, NOISE_LOOKBACK, NULL_RECORDS, TAIL_DFS
from .decision import outliers_kept

__all__ = ["NoiseFactor", "standardized_shifts", "noise_factor", "NOISE_LOOKBACK", "TAIL_DFS", "NULL_RECORDS"]

_DFS = np.array(TAIL_DFS)


@functools.cache
def _quartiles() -> np.ndarray:
    """A t's MAD over its scale, one per TAIL_DFS, from scipy on first use: importing scipy costs
    ~1 s, which a process that only reads the store skips."""
    from scipy import stats
    return np.asarray(stats.t.ppf(0.75, _DFS))


@dataclass(frozen=True)
class NoiseFactor:
    factor: float       # >= 1: the history verdict's interval is this many times wider
    positions: int      # earlier positions it was learned from (0: not learned)
    whose: str = "the board's"      # whose runs the record holds (the fleet's, for a fleet reference)

    def note(self) -> str:
        """'x2.4, learned from 180 earlier positions of the board's valid runs', or that it is not
        learned yet."""
        if not self.positions:
            return (f"not learned yet (fewer than 2 earlier positions in {self.whose} valid runs): "
                    "the runs of the history are taken as independent")
        return f"x{self.factor:.2g}, learned from {self.positions} earlier positions of {self.whose} valid runs"


def standardized_shifts(logs: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(t, df) at every position j of `logs` (one series, oldest first) with n runs before it and k
    from it: history_verdict's statistic, the mean of logs[j:j+k] minus the centre of logs[j-n:j]
    (after the same outlier screen) over the standard error of its interval, and its degrees of
    freedom. Empty arrays when the series is too short."""
    logs = np.asarray(logs, dtype=float)
    if logs.size < n + k or n < 2:
        return np.empty(0), np.empty(0)
    history = sliding_window_view(logs[:logs.size - k], n)
    group = sliding_window_view(logs[n:], k)[:history.shape[0]]
    kept = outliers_kept(history)       # the verdict's own screen
    m = kept.sum(axis=1)
    centre = (history * kept).sum(axis=1) / m
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (((history - centre[:, None]) ** 2) * kept).sum(axis=1) / (m - 1)
        df = m - 1          # the history's spread alone, as the verdict's (no pooling with the group)
        t = (group.mean(axis=1) - centre) / np.sqrt(var * (1.0 / k + 1.0 / m))
    usable = np.isfinite(t) & (m > 1)
    return t[usable], df[usable]


def noise_factor(series: Sequence[Sequence[float]], n: int, k: int, alpha: float = 0.005) -> NoiseFactor:
    """The factor for a verdict on a group of k runs against n earlier runs at the one-sided level
    `alpha`, learned from `series` (each a history of one figure's values, oldest first, together at
    most NOISE_LOOKBACK runs).

    The record's statistics give three ratios (`_ratios`: the bulk's, the tail's and the spread's);
    the interval is widened by the largest of those past what independent runs give in records of
    the same shape (their CONFIDENCE quantiles, `_independent_ratios`): even independent runs give
    ratios a little over 1, and widening by them would cost a quiet board its power for nothing."""
    ts, dfs = [], []
    for values in series:
        t, df = standardized_shifts(np.log(np.asarray(values, dtype=float)), n, k)
        ts.append(t)
        dfs.append(df)
    t, df = np.concatenate(ts or [np.empty(0)]), np.concatenate(dfs or [np.empty(0)])
    if t.size < 2:          # no spread among the positions: nothing to learn
        return NoiseFactor(1.0, 0)
    ratios = _ratios(t[None, :], np.array([np.median(df)]), alpha)[0]
    independent = _independent_ratios(int(t.size), n, k, round(alpha, 8))
    shown = [float(r) for r, bar in zip(ratios, independent) if r > bar]
    return NoiseFactor(max([1.0, *shown]), int(t.size))


def _ratios(t: np.ndarray, df: np.ndarray, alpha: float) -> np.ndarray:
    """How far each row of statistics `t` (a record's positions; one row per record) reaches past
    the t distribution the verdict assumes (`df` degrees of freedom per row), one column per ratio:
    (bulk) the largest of its upper order statistics over the t's quantiles at their levels, from
    the quartile to the CONFIDENCE quantile, which slow drift raises; (tail) a fitted tail's quantile
    at `alpha` over the t's (`_tail_quantile`), which disturbed runs raise; and (spread) its median
    absolute deviation over the t's, which the machine's level moving now and then raises. The
    spread is the ratio that varies least between records of independent runs (a MAD uses every
    position, an upper quantile the few past it), so its evidence bar is the lowest: a modest but
    real lack of independence, under the bars of the other two, passes this one."""
    from scipy import stats
    rows, size = t.shape
    levels = np.arange(1, size + 1) / (size + 1)            # each order statistic's level (Weibull's)
    upper = (levels >= 0.75) & (levels <= CONFIDENCE)
    upper[-1] |= not upper.any()                            # a tiny record: its largest statistic
    bulk = (np.sort(t, axis=1)[:, upper] / stats.t.ppf(levels[upper][None, :], df[:, None])).max(axis=1)
    centre = np.median(t, axis=1)
    mad = np.median(np.abs(t - centre[:, None]), axis=1)   # the spread's, and the fitted tail's scale
    tail = _tail_quantile(t, alpha, centre, mad) / stats.t.ppf(1 - alpha, df)
    return np.column_stack([bulk, tail, mad / stats.t.ppf(0.75, df)])


def _tail_quantile(t: np.ndarray, alpha: float, centre: np.ndarray, mad: np.ndarray) -> np.ndarray:
    """Per row of `t`, the upper `alpha` quantile of a Student t fitted to it (centre the row's
    median, scale from its MAD, its degrees of freedom the likeliest of TAIL_DFS): a record with a
    few disturbed runs gets heavy tails, and the quantile the verdict is decided at comes from them
    rather than from the normal-looking bulk. The 99 % quantile of a few hundred positions says
    nothing about the 0.01 % one a figure of a look is judged at. `centre` and `mad`: each row's
    median and median absolute deviation."""
    from scipy import stats
    scales = np.where(mad == 0, 1.0, mad)[:, None] / _quartiles()[None, :]       # rows x dfs
    z = (t - centre[:, None])[:, None, :] / scales[:, :, None]                   # rows x dfs x positions
    likelihood = np.asarray(stats.t.logpdf(z, _DFS[None, :, None])).sum(axis=2) - t.shape[1] * np.log(scales)
    best = np.argmax(likelihood, axis=1)
    rows = np.arange(t.shape[0])
    quantile = centre + scales[rows, best] * stats.t.ppf(1 - alpha, _DFS[best])
    return np.where(mad == 0, centre, quantile)


@functools.lru_cache(maxsize=64)
def _independent_records(n: int, k: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """NULL_RECORDS seeded records of independent normal runs, each one series with `size`
    positions: their statistics and degrees of freedom (records x positions). A record of fewer
    positions is judged against the first positions of these: the prefix of a series of
    independent runs is one."""
    rng = np.random.default_rng(20261201)
    shifts = [standardized_shifts(rng.normal(size=size + n + k - 1), n, k) for _ in range(NULL_RECORDS)]
    return np.stack([t for t, _ in shifts]), np.stack([df for _, df in shifts])


@functools.lru_cache(maxsize=1024)
def _independent_ratios(positions: int, n: int, k: int, alpha: float) -> tuple[float, float, float]:
    """The CONFIDENCE quantiles of each of `_ratios` over the NULL_RECORDS records of independent
    runs cut to `positions` positions: a ratio under its quantile is no evidence that the board's
    runs are anything else. The statistics do not depend on the runs' level or spread, so one
    simulation serves every figure of that shape."""
    t, df = _independent_records(n, k, max(positions, NOISE_LOOKBACK - n - k + 1))
    ratios = _ratios(t[:, :positions], np.median(df[:, :positions], axis=1), alpha)
    low, mid, high = (float(q) for q in np.quantile(ratios, CONFIDENCE, axis=0))
    return low, mid, high
