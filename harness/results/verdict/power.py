"""The minimum detectable effect: the slowdown a verdict would find with probability POWER, from its
own noise and sample.

For a shift judged by its log ratio with standard error `se` on `df` degrees of freedom, held to a
one-sided level `level`, a true shift d is found with probability POWER when
d >= (t(1 - level, df) + t(POWER, df)) * se: the first term is where the verdict's bar sits, the second
how far past the bar the shift's own estimate must be centred for it to land past the bar POWER of the
time. On the log scale this is exact for normal noise; heavier tails make it a lower bound, which is
why a noise factor that widens the interval must widen `se` here too.
"""
from __future__ import annotations

import math

__all__ = ["POWER", "DETECT_PCT", "minimum_detectable_pct", "more_runs", "more_pairs", "parse_detect"]

# The probability a verdict must have of finding the promised shift before it may say PASS: the
# gate's detection promises are all stated at 95 % (docs/results.md: "+5 % found within 5 runs 95 % of
# the time"; an A/B session's +3 % at 95 %).
POWER = 0.95

# The promise a verdict is held to by default (--detect): the slowdown a lone run must be able to find.
# The board write-up's two runs of the same self-attention and cross-attention files (boards/data/
# board-drift.toml) differ by 7.0 % and 3.2 %, a run-to-run log sd of 4.9 % and 2.2 % (a pair's
# difference over sqrt 2). A lone run judged against the 30 runs of its lookback at the gate's 99 %
# (one-sided level 0.005) with 95 % power finds (2.576 + 1.645) * sqrt(1 + 1/30) = 4.29 sd of the log:
# 9.9 % at the quiet branch's noise, 23.4 % at the noisy one's. 25 % (the noisy branch's, rounded up) is
# what a board with the write-up's noise can promise for every run; a board noisier than that says
# INCONCLUSIVE until it has more runs or an A/B session, which pairs away the drift.
DETECT_PCT = 25.0


def minimum_detectable_pct(se_log: float, level: float, df: float | None = None, power: float = POWER,
                           floor_pct: float = 0.0) -> float:
    """The smallest slowdown, in % (positive is slower), found with probability `power` by a one-sided
    test at `level` of a log shift with standard error `se_log` (normal when `df` is None); inf when
    the standard error is unknown or infinite. `floor_pct`: a shift must also be over this to count
    (a history verdict's floor, an A/B session's threshold), so the bar is the larger of the two."""
    if not math.isfinite(se_log) or se_log < 0:
        return math.inf
    from scipy import stats  # here: scipy costs ~1 s to every process that only reads the store

    def quantile(q: float) -> float:
        # stats.t.ppf(q, df), not stats.t(df).ppf(q): freezing a distribution formats its docstring
        # anew each time, 0.6 ms, a quarter of a history verdict's time (thousands in a simulation)
        return float(stats.norm.ppf(q) if df is None else stats.t.ppf(q, df))
    bar = max(math.log1p(floor_pct / 100), quantile(1 - level) * se_log)
    return math.expm1(bar + quantile(power) * se_log) * 100


def more_runs(spread_log: float, level: float, n: int, k: int, detect_pct: float, floor_pct: float,
              max_n: int, max_k: int) -> tuple[int | None, int | None] | None:
    """What would bring a history verdict's minimum detectable effect under `detect_pct`, its noise
    (`spread_log`, the log sd of one run, widened) as it is: (more earlier runs, up to `max_n` in
    all; more runs judged together, up to `max_k`), None for either that cannot, None when neither
    can. `n` earlier runs, `k` judged together, at the one-sided `level`."""
    def mde(runs: int, group: int) -> float:
        return minimum_detectable_pct(spread_log * math.sqrt(1 / group + 1 / runs), level, runs - 1,
                                      floor_pct=floor_pct)
    history = next((m for m in range(1, max_n - n + 1) if mde(n + m, k) <= detect_pct), None)
    group = next((m for m in range(1, max_k - k + 1) if mde(n, k + m) <= detect_pct), None)
    return None if history is None and group is None else (history, group)


def more_pairs(spread_log: float, level: float, pairs: int, detect_pct: float, floor_pct: float,
               most: int = 1000) -> int | None:
    """The pairs an A/B session needs besides its `pairs` for its minimum detectable effect to come
    under `detect_pct`, the pairs' log-ratio sd `spread_log` as it is; None past `most`."""
    def mde(n: int) -> float:
        return minimum_detectable_pct(spread_log / math.sqrt(n), level, n - 1, floor_pct=floor_pct)
    return next((m for m in range(1, most + 1) if mde(pairs + m) <= detect_pct), None)


def parse_detect(text, option: str = "--detect") -> float:
    """'25%' or '25' -> 25.0: the slowdown, in %, every verdict must be able to find to say PASS."""
    from .figures import parse_threshold
    return parse_threshold(text, option, "25%")

