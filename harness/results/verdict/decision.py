"""The verdict on one figure (a Decision): one run, or the runs since a change, against the history
of its key; an interleaved A/B session judged by paired differences; the fixed rule.

The unit of independence is the run (or, in an A/B session, the pair): every value handed in here is
one number per run or per pair (a run's mean step time, a branch's core time per step), never the
per-invocation samples of one run, which share that run's conditions and so are not independent
samples of the stack.

Shifts are relative: a history is judged on the scale of its own centre and a pair by the log of its
ratio, so one threshold in % serves a 0.4 ms CPU invocation and a 25 s board step alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..constants import (
    CONFIDENCE,
    FIXED_THRESHOLD_PCT,
    HISTORY_FLOOR_PCT,
    LOOKBACK,
    MIN_HISTORY,
    OUTLIER_Z,
)
from .outcome import Outcome
from .power import minimum_detectable_pct

__all__ = ["Decision", "outliers_kept", "history_verdict", "paired_verdict",
           "fixed_verdict",
           "MIN_HISTORY", "HISTORY_FLOOR_PCT", "FIXED_THRESHOLD_PCT", "OUTLIER_Z"]



@dataclass(frozen=True)
class Decision:
    """One figure judged: the shift, the statistic it was decided by and its p-value, the interval, the
    threshold, and the look at a change it was judged as. `shift_pct` and `ci_pct` are in % of the
    baseline (positive is slower); `n` counts the independent units behind it (earlier runs, or
    pairs). `statistic` is the shift over its standard error (a t statistic, the noise factor's
    widening included) and `p_value` its one-sided p-value against "no slowdown"; a history or paired
    decision is a regression when the p-value is under its level (1 - confidence) / 2 and the shift
    over the threshold. The fixed rule has no noise estimate: neither statistic nor p-value."""

    kind: str                      # "history" | "paired" | "fixed"
    label: str                     # what was judged, e.g. "ffn core"
    shift_pct: float
    ci_pct: tuple[float, float]
    threshold_pct: float
    regression: bool
    n: int
    confidence: float = 0.95
    runs: int = 1                  # new runs judged together (history: the runs since the change)
    widened: float = 1.0           # history: the noise factor its interval was widened by (noise.py)
    statistic: float | None = None
    p_value: float | None = None
    look: int | None = None        # history: the look at its change (None: a run judged alone)
    # What the verdict could detect, judged again from the runs or pairs when needed: the store keeps
    # none of them, so a stored Decision equals the one written without them (compare=False).
    mde_pct: float = field(default=math.inf, compare=False)   # found with probability POWER (inf: no noise estimate)
    detect_pct: float | None = field(default=None, compare=False)   # the promise (--detect); None: none (a probe)
    spread_log: float | None = field(default=None, compare=False)   # one run's log sd (history: widened)

    @property
    def outcome(self) -> Outcome:
        """REGRESSION when it found a slowdown; INCONCLUSIVE when it did not and could not have found
        one of the promised size (its minimum detectable effect over `detect_pct`); else PASS."""
        if self.regression:
            return Outcome.REGRESSION
        if self.detect_pct is not None and not self.mde_pct <= self.detect_pct:
            return Outcome.INCONCLUSIVE
        return Outcome.PASS

    @property
    def level(self) -> float:
        """The one-sided level the p-value is held to."""
        return (1.0 - self.confidence) / 2

    def reason(self) -> str:
        """Why, in words: 'p = 0.0004 under its 0.0025 and +6.8 % over the 3 % threshold'."""
        if self.p_value is None:
            return f"{self.shift_pct:+.1f} % {'over' if self.regression else 'within'} the fixed " \
                   f"{_pct(self.threshold_pct)} % threshold (no noise estimate)"
        clear = f"p = {self.p_value:.2g} {'under' if self.p_value < self.level else 'not under'} its {self.level:.2g}"
        look = f" (look {self.look} of its change)" if self.look else ""
        return f"{clear} and {self.shift_pct:+.1f} % {'over' if self.shift_pct > self.threshold_pct else 'within'} " \
               f"the {_pct(self.threshold_pct)} % threshold{look}"

    def shift(self) -> str:
        """'ffn core +6.8 % [5.9, 7.7]': what was judged, its shift and the shift's interval."""
        low, high = self.ci_pct
        return f"{self.label} {self.shift_pct:+.1f} % [{low:.1f}, {high:.1f}]"

    def line(self) -> str:
        """'ffn core +6.8 % [5.9, 7.7] over the 3 % threshold, detects +4.2 %'; 'within the' when the
        shift is under it, 'not clearly over the' when it is over but its interval still reaches 0.
        INCONCLUSIVE names what it could detect against the promise, never a threshold past it."""
        if self.outcome is Outcome.INCONCLUSIVE:
            could = f"could detect only +{_pct(self.mde_pct)} %" if math.isfinite(self.mde_pct) else \
                f"under the fixed {_pct(self.threshold_pct)} % rule with no noise estimate, could detect no shift"
            return f"{self.shift()} inconclusive: {could}, not the promised {_pct(self.detect_pct or 0)} %"
        where = "over" if self.regression else \
            "not clearly over" if self.shift_pct > self.threshold_pct else "within"
        detects = f", detects +{_pct(self.mde_pct)} %" if math.isfinite(self.mde_pct) else ""
        return f"{self.shift()} {where} the {_pct(self.threshold_pct)} % threshold{detects}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "label": self.label, "shift_pct": self.shift_pct,
                "ci_pct": list(self.ci_pct), "threshold_pct": self.threshold_pct,
                "regression": self.regression, "n": self.n, "confidence": self.confidence, "runs": self.runs,
                "widened": self.widened, "statistic": self.statistic, "p_value": self.p_value, "look": self.look,
                "mde_pct": self.mde_pct if math.isfinite(self.mde_pct) else None, "detect_pct": self.detect_pct,
                "outcome": str(self.outcome)}



def _pct(value: float) -> str:
    return f"{round(value, 1):g}"


def _finite_positive(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name}: every value must be a finite time > 0")
    return array


NORMAL_MAD = 0.6744897501960817   # a standard normal's MAD, scipy.special.ndtri(0.75): the MAD's scale "normal"


def robust_sd(logs: np.ndarray, median: np.ndarray) -> np.ndarray:
    """The MAD scaled to a normal's standard deviation along the last axis (kept, size 1), `median` the
    logs' median kept the same way: scipy.stats.median_abs_deviation(logs, axis=-1, scale="normal") as
    scipy computes it, on numpy. scipy's axis and NaN wrapper cost 0.5 ms a call, three times the sums,
    and a simulation screens thousands of histories (tests/unit/test_decision.py holds the two equal)."""
    return np.median(np.abs(logs - median), axis=-1, keepdims=True) / NORMAL_MAD


def outliers_kept(logs: np.ndarray) -> np.ndarray:
    """The outlier screen, along the last axis of `logs` (one history, or one per row): True for the
    runs within OUTLIER_Z robust standard deviations (the MAD's) of the median; all of them when the
    MAD is 0, and when the screen would keep fewer than MIN_HISTORY. The history verdict and the noise
    factor's statistics (noise.py) both screen by it.

    A screen that leaves too few runs for a spread keeps them all: the wild run then widens the
    interval (a PASS or INCONCLUSIVE on a noisy board, as it should be). Dropping it left a history
    of exactly MIN_HISTORY runs too short, and the step went to the fixed rule, which has no noise
    estimate: an unchanged stack B after five runs of A with one burst among them failed +17.9 %."""
    median = np.median(logs, axis=-1, keepdims=True)
    mad = robust_sd(logs, median)
    kept = np.where(mad == 0, True, np.abs(logs - median) <= OUTLIER_Z * mad)
    return np.where(kept.sum(axis=-1, keepdims=True) < MIN_HISTORY, True, kept)


def _robust_centre_spread(logs: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The runs kept after the outlier screen, and the mean and standard deviation of their logs.

    The screen uses the median and the MAD (robust to a few wild runs); what is kept is then
    summarised by mean and standard deviation, which are efficient for the normal-looking bulk, so
    the t-quantile below keeps its meaning and the false-positive rate stays where it is set."""
    kept = logs[outliers_kept(logs)]
    return kept, float(np.mean(kept)), float(np.std(kept, ddof=1)) if kept.size > 1 else 0.0


def history_verdict(label: str, history: Sequence[float], value: float | Sequence[float], *,
                    confidence: float = CONFIDENCE, floor_pct: float = HISTORY_FLOOR_PCT,
                    lookback: int = LOOKBACK, min_runs: int = MIN_HISTORY, widen: float = 1.0) -> Decision | None:
    """Judge `value` (one run's figure, or the figures of the runs since a change, judged as one
    group) against the earlier valid runs of the same key and board, oldest first.

    As Conbench's lookback z-score: the threshold is learned from the spread of the last `lookback`
    runs (after an outlier screen), here as the half-width of a prediction interval at `confidence`
    for the mean of the new runs, so it widens for a short or noisy history and narrows as the group
    grows (sqrt(1/k + 1/n)); it never drops below `floor_pct`. The spread is the history's alone
    (n - 1 degrees of freedom): the new runs' own spread would count the change under test as noise
    (a group of one normal and one 3x run). The Decision states its minimum detectable effect
    (verdict.power) beside its interval. Times are judged by their logs (run-to-run factors multiply), so the
    interval is exact for log-normal noise. `widen` (>= 1, noise.py) stretches the
    interval where the board's record shows runs that are not independent. None when fewer than
    `min_runs` earlier runs survive."""
    from scipy import stats
    earlier = np.log(_finite_positive(f"{label} history", history)[-lookback:])
    new = np.log(_finite_positive(f"{label} value", np.atleast_1d(value)))
    if earlier.size < min_runs:     # (an empty history would reach numpy as a mean of nothing: a warning)
        return None
    kept, centre, spread = _robust_centre_spread(earlier)
    if kept.size < min_runs:
        return None
    # the history's spread alone: the runs since a change carry the shift under test, and a spread
    # that counts them widens the interval by the very change it is to find (issue 41: one normal and
    # one 3x run widened it to 204,628 %)
    df = kept.size - 1
    se = spread * math.sqrt(1.0 / new.size + 1.0 / kept.size) * widen
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    delta = float(np.mean(new)) - centre
    shift, low, high = (_to_pct(x) for x in (delta, delta - half, delta + half))
    threshold = max(floor_pct, _to_pct(half))
    statistic, p = _t_test(delta, se, df)
    mde = minimum_detectable_pct(se, (1 - confidence) / 2, df, floor_pct=floor_pct)
    return Decision("history", label, shift, (low, high), threshold, bool(shift > threshold),
                    int(kept.size), confidence, int(new.size), float(widen), statistic, p, mde_pct=mde,
                    spread_log=spread * widen)


def _t_test(delta: float, se: float, df: float) -> tuple[float, float]:
    """(t, its one-sided p-value against no slowdown) of a shift `delta` with standard error `se`."""
    if se == 0:
        return (math.copysign(math.inf, delta), 0.0 if delta > 0 else 1.0) if delta else (0.0, 0.5)
    from scipy import stats
    t = delta / se
    return t, float(stats.t.sf(t, df))


def _to_pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def paired_verdict(label: str, baseline: Sequence[float], candidate: Sequence[float], *,
                   threshold_pct: float, confidence: float = 0.95, method: str = "t") -> Decision:
    """Judge an interleaved A/B session: baseline[i] and candidate[i] were timed side by side (one
    pair per round or per step), so drift common to both cancels in their ratio.

    The effect is the geometric mean of candidate/baseline (a t interval on the log ratios, or a
    BCa bootstrap with `method="bootstrap"`), in %. A regression needs both: the interval lies
    above 0 (the shift is real at `confidence`) and the shift is over `threshold_pct` (it is
    large enough to fail for)."""
    base = _finite_positive(f"{label} baseline", baseline)
    cand = _finite_positive(f"{label} candidate", candidate)
    if base.size != cand.size:
        raise ValueError(f"{label}: {base.size} baseline and {cand.size} candidate values do not pair")
    if base.size < 2:
        raise ValueError(f"{label}: a paired verdict needs at least 2 pairs, got {base.size}")
    from scipy import stats
    logs = np.log(cand / base)
    low, high = _mean_interval(logs, confidence, method)
    shift, ci = _to_pct(float(np.mean(logs))), (_to_pct(low), _to_pct(high))
    se = float(stats.sem(logs)) if np.ptp(logs) else 0.0
    statistic, p = _t_test(float(np.mean(logs)), se, base.size - 1)
    mde = minimum_detectable_pct(se, (1 - confidence) / 2, base.size - 1, floor_pct=threshold_pct)
    return Decision("paired", label, shift, ci, float(threshold_pct),
                    bool(ci[0] > 0 and shift > threshold_pct), int(base.size), confidence, statistic=statistic,
                    p_value=p, mde_pct=mde, spread_log=float(np.std(logs, ddof=1)))


def _mean_interval(sample: np.ndarray, confidence: float, method: str) -> tuple[float, float]:
    from scipy import stats
    mean = float(np.mean(sample))
    if np.ptp(sample) == 0:
        return mean, mean
    if method == "bootstrap":
        result = stats.bootstrap((sample,), np.mean, confidence_level=confidence, n_resamples=2000,
                                 method="BCa", random_state=np.random.default_rng(0))
        return float(result.confidence_interval.low), float(result.confidence_interval.high)
    if method != "t":
        raise ValueError(f"paired_verdict method {method!r}: expected 't' or 'bootstrap'")
    half = stats.t.ppf(0.5 + confidence / 2, sample.size - 1) * stats.sem(sample)
    return mean - half, mean + half


def fixed_verdict(label: str, baseline: Sequence[float], candidate: Sequence[float], *,
                  threshold_pct: float = FIXED_THRESHOLD_PCT) -> Decision:
    """Today's rule, kept to compare against: the candidate's mean over the baseline's mean by more
    than `threshold_pct`, with no noise estimate (the interval is the point itself)."""
    base = _finite_positive(f"{label} baseline", baseline)
    cand = _finite_positive(f"{label} candidate", candidate)
    shift = 100.0 * (float(np.mean(cand)) - float(np.mean(base))) / float(np.mean(base))
    return Decision("fixed", label, shift, (shift, shift), float(threshold_pct),
                   bool(shift > threshold_pct), int(cand.size), 1.0)
