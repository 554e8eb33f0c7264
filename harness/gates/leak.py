"""Sequential leak detection over per-cycle series: a warm-up found from the data, then a one-sided CUSUM
on each series' growth per cycle, so a leak is found within a bounded number of cycles of its start,
wherever it starts, and the soak can stop there.

For each series y (a resource of one process, or of the whole tree), cycle t (0-based):
    warm-up     ends at the first t >= 2W - 1 where the median of the last W readings exceeds the median of
                the W before by no more than W * k (the growth has fallen to half the limit: an allocator
                that grows and settles), and at the latest at `warm_max` (a series still rising then is
                judged from there: a leak from the first cycle must not pass as a long warm-up).
    CUSUM       from the warm-up's end, S = max(0, S + min(y[t] - y[t-1], C) - k): k = half the limit (the
                classic reference value for finding a shift of the limit's size), C clips one cycle's growth
                (an allocator's one-off arena chunk counts as C at most), h the threshold.
    found       when S >= h.
    since       of a count, the cycle after the last one S was 0 (its first step); of memory, the change
                point of the growths against the leak's own rate (`change_point`), at or after that cycle.

Over a window where the series rises by R, S gains at most R - k * length, so a plateau whose readings
spread by less than h never trips it, however long the run; a leak of r per cycle (r <= C) trips it
within h / (r - k) cycles of its start, or of the warm-up's end if it started before (`delay`).
Memory: limit L (--soak-memory-rate, 16 KiB), k = L / 2, C = 32 L, h = 160 L (2.5 MiB): 64 KiB per cycle is
found 46 cycles after it starts, 16 KiB per cycle 320 cycles after (so one image's 1,092 cycles find it
when it starts before cycle 772). h is set from clean runs here: the largest S a clean 1,092-cycle soak reached
was 0.6 h (1.5 MiB; onnxruntime, on-demand and prefetch:2, load average 10-19 on 2 CPUs). Counts
(descriptors, threads): limit one per 100 cycles, k = 0.005, C = 1, h = 3.2: one per 20 cycles is found
at its 4th (80 cycles after it starts), one per 50 cycles at its 4th (200); a count that steps up once or
twice (a thread pool starting: clean runs reached S = 2 on threads) is not a leak.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Rule", "memory_rule", "COUNT_RULE", "Watch", "WINDOW", "WARM_MAX", "warm_max", "change_point"]

WINDOW = 16                 # W: readings per median block of the warm-up test
WARM_MAX = 200              # cycles: the longest warm-up
WARM_SHARE = 4              # ... and at most a quarter of the planned cycles


@dataclass(frozen=True)
class Rule:
    limit: float            # growth per cycle at which a series fails
    clip: float             # C: the most one cycle's growth counts
    threshold: float        # h
    count: bool = False     # whole steps (descriptors, threads): S's last zero is the first step

    @property
    def reference(self) -> float:
        return self.limit / 2

    def delay(self, rate: float) -> float:
        """Cycles from a leak's start (or the warm-up's end) to finding it, for a steady `rate` per cycle."""
        gain = min(rate, self.clip) - self.reference
        return math.ceil(self.threshold / gain) if gain > 0 else math.inf


def memory_rule(limit: float) -> Rule:
    return Rule(float(limit), 32.0 * limit, 160.0 * limit)


COUNT_RULE = Rule(0.01, 1.0, 3.2, count=True)


def warm_max(planned: int) -> int:
    return max(2 * WINDOW - 1, min(WARM_MAX, planned // WARM_SHARE))


class Watch:
    """The test over many series at once (one column each), fed one row of readings per cycle; rows are
    read from `samples` ([cycles, series]), which the caller fills."""

    def __init__(self, samples: np.ndarray, rules: list[Rule | None], planned: int):
        n = len(rules)
        self.samples = samples
        self.judged = np.array([r is not None for r in rules])
        self.k = np.array([r.reference if r else 0.0 for r in rules])
        self.clip = np.array([r.clip if r else 0.0 for r in rules])
        self.h = np.array([r.threshold if r else np.inf for r in rules])
        self.counts = np.array([r is not None and r.count for r in rules])
        self.base_h = self.h.copy()
        self.warm_max = warm_max(planned)
        self.warm_end = np.full(n, -1)           # the first judged cycle; -1 while warming
        self.s = np.zeros(n)
        self.peak = np.zeros(n)                  # the largest S reached: a clean run's margin below h
        self.zero_at = np.zeros(n, dtype=int)    # the last cycle S was 0
        self.found_at = np.full(n, -1)
        self.since = np.full(n, -1)

    def widen(self, columns: np.ndarray, factor: float) -> None:
        """Raise the threshold of `columns` to `factor` times their rule's (a sum over several processes
        spreads as the square root of their number)."""
        self.h[columns] = self.base_h[columns] * factor

    def update(self, t: int) -> np.ndarray:
        """Take row t (filled); the indices of the series found leaking at this cycle."""
        warming = self.warm_end < 0
        if warming.any() and t >= 2 * WINDOW - 1:
            self._end_warm_up(t, warming)
        live = (self.warm_end >= 0) & (self.warm_end < t) & (self.found_at < 0) & self.judged
        if not live.any():
            return np.empty(0, dtype=int)
        rise = self.samples[t] - self.samples[t - 1].astype(float)
        self.s = np.where(live, np.maximum(0.0, self.s + np.minimum(rise, self.clip) - self.k), self.s)
        self.peak = np.maximum(self.peak, self.s)
        self.zero_at = np.where(live & (self.s == 0), t, self.zero_at)
        found = np.flatnonzero(live & (self.s >= self.h))
        self.found_at[found] = t
        for column in found:
            start = int(self.warm_end[column])
            knot = int(self.zero_at[column]) - start
            if not self.counts[column]:
                knot = change_point(self.samples[start:t + 1, column], self.k[column], self.clip[column],
                                    self.h[column], knot)
            self.since[column] = start + knot + 1
        return found

    def _end_warm_up(self, t: int, warming: np.ndarray) -> None:
        if t >= self.warm_max:
            settled = warming
        else:
            recent = np.median(self.samples[t - WINDOW + 1:t + 1], axis=0)
            before = np.median(self.samples[t - 2 * WINDOW + 1:t - WINDOW + 1], axis=0)
            settled = warming & (recent - before <= WINDOW * self.k)
        self.warm_end[settled] = t
        self.zero_at[settled] = t


def change_point(y: np.ndarray, reference: float, clip: float, threshold: float, last_zero: int) -> int:
    """The reading of y (a series from the warm-up's end to the cycle its leak was found at) after which
    the leak's growth began: a change point of the CUSUM's own growths min(y[t] - y[t-1], C) for a shift
    from the run's own drift before it (its mean growth, when positive) to the leak's rate after it, with
    the reference halfway between the two (at least k): the latest minimum of level - reference * t, the
    point and the reference found together (a fixed point). With reference k it is S's last zero
    (`last_zero`). Of the fixed points reached from references k, 2k, 4k ... C, the latest after which the
    growth alone holds at least half the evidence (h / 2 over k per cycle), else the last zero.

    Why not the last zero: measured against k, an allocator step before the leak (up to C) stays in S for
    up to C / k cycles (64), and a leak starting within them took its start from before the step (147 for
    a leak from cycle 200, in a suite run). Against half the leak's rate such a step is paid off in a few
    cycles. The evidence rule keeps a lumpy leak from starting at its last chunk (one chunk alone is a
    fixed point). A reference above k only moves the point later: it is never before the last zero.
    """
    level = np.concatenate(([0.0], np.cumsum(np.minimum(np.diff(np.asarray(y, dtype=float)), clip))))
    end = len(level) - 1
    ahead = np.arange(end)

    def latest_minimum(m: float) -> int:
        score = level[:-1] - max(reference, m) * ahead
        return end - 1 - int(np.argmin(score[::-1]))

    def settled(knot: int) -> int:
        seen: set[int] = set()
        while knot not in seen:
            seen.add(knot)
            drift = max(level[knot] / knot, 0.0) if knot else 0.0
            knot = latest_minimum((drift + (level[end] - level[knot]) / (end - knot)) / 2)
        return knot

    best = last_zero
    m = reference
    while m <= clip:
        knot = settled(latest_minimum(m))
        if knot > best and level[end] - level[knot] - reference * (end - knot) >= threshold / 2:
            best = knot
        m *= 2
    return best
