"""Every constant of the verdicts, once, with its reason. The modules that use one import it from
here (and keep its name for their importers); `bin/harness results simulate` measures what a change
of any of them does to the false-alarm and detection rates (docs/results-statistics.md).

Two kinds. What the gate PROMISES its users: each is stated policy in docs/results.md,
docs/options.md or the issues the verdicts were built for, and a change of one is a change of the
gate's contract, not a tuning. What is TUNED to keep those promises on the simulated board and the
kept onnxruntime A/A streams (harness/results/simulate.py); the rates quoted are from them at the
time each constant was chosen. Anything else is derived from these.
"""
from __future__ import annotations

__all__ = ["CONFIDENCE", "LOOKBACK", "MIN_HISTORY", "HISTORY_FLOOR_PCT", "FIXED_THRESHOLD_PCT", "AB_THRESHOLD_PCT",
           "OUTLIER_Z", "GROUP_RUNS", "PRIMARY_SHARE", "SPENDING_RHO", "FIRST_LOOK_SHARE", "CHANGE_ALPHA",
           "CHANGE_MIN_RUNS", "NOISE_LOOKBACK", "TAIL_DFS", "NULL_RECORDS"]

# == PROMISED ==========================================================================================

# Of one judgement over all its figures: a run judged alone (two-sided), a change over all its looks
# (1 - CONFIDENCE one-sided), an A/B session (two-sided): 1 % false alarms (docs/results.md: the
# figures of one run share its 99 % confidence; a change's 5 runs share 1 %).
CONFIDENCE = 0.99
# The smallest shift a history verdict calls a regression, however quiet the history: below it a
# statistically clear shift is too small to fail a board for (docs/results.md: "at least 3 %"). The
# calibration probe's too: below it the figures' own 3 % absorbs the machine's speed.
HISTORY_FLOOR_PCT = 3.0
# An A/B session's (--ab-threshold, docs/options.md): the paired interval is narrow enough on the
# board to call +2 % real, and a threshold at the +3 % that must be caught would catch it half the time.
AB_THRESHOLD_PCT = 2.0
# The fixed rule, the rule before the store (--fixed-threshold, docs/results.md: the run's mean over
# the reference's mean by more than 10 %): what stands in while a history has too few runs for a learned one.
FIXED_THRESHOLD_PCT = 10.0
# Earlier runs a verdict looks back on (Conbench's lookback window; docs/results.md: "the last 30").
LOOKBACK = 30
# Runs since a change judged as one group: the target is a +5 % shift of the whole NPU found within
# 5 runs, so a change's first 5 runs are its group and its looks (docs/results.md).
GROUP_RUNS = 5

# == TUNED to keep the promises ==========================================================================

# -- the history --------------------------------------------------------------------------------------

# Earlier runs further than this many robust standard deviations (the MAD's) from the median are
# outliers (a run disturbed by another job): left out of the spread, not allowed to widen it.
OUTLIER_Z = 5.0

# -- a change's looks ---------------------------------------------------------------------------------

# The NPU core's share of a look's false-alarm rate: three quarters for the shift of the whole NPU
# (what an upgrade brings, which the NPU core sees with the least noise), a quarter for the figures
# that locate a shift (step, branches, stages).
PRIMARY_SHARE = 0.75
# Look 1's part of a change's false-alarm rate: 0.3 of the 1 % keeps most of a lone run's power on a
# change's first run (+10 % found 91 % of the time against 94 % at a lone run's 0.5 %) and leaves the
# later looks enough to find +5 % within 5 runs.
FIRST_LOOK_SHARE = 0.3
# The exponent of the power family the later looks spend the rest by (Kim-DeMets): 3 is close to
# O'Brien-Fleming's boundary, little for the early looks, whose group is small, most for the last.
SPENDING_RHO = 3.0

# -- change points --------------------------------------------------------------------------------------

# A split of a history leaves at least this many runs each side (fewer give no level to compare).
CHANGE_MIN_RUNS = 3

# -- the noise factor (verdict/noise.py) ----------------------------------------------------------------------

# The board's latest runs the factor is learned from. 480 left fewer A/A changes flagged on the
# onnxruntime streams (27 of 1,309 against 34) but found +5 % within 5 runs on the simulated board
# 94.6 % of the time against 95.5 %.
NOISE_LOOKBACK = 240
# Degrees of freedom a fitted tail may have: from a Cauchy-like 1.5 (a record with wild runs) to a normal one.
TAIL_DFS = (1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0, 1000.0)
# Simulated records of independent runs a ratio's CONFIDENCE quantile (its evidence bar) is taken
# over: 400 leave 4 records past the 99 % quantile, and cost about a second per shape of record.
NULL_RECORDS = 400

# == DERIVED ==============================================================================================

# Fewer earlier runs than a change's group give no spread worth a threshold: the caller says "too few
# runs" (a history shorter than the group judged against it says less about the board than the group).
MIN_HISTORY = GROUP_RUNS

# A split of a history is kept when its permutation test gives p under this (per search): the
# one-sided half of a lone run's two-sided 1 - CONFIDENCE (rounded: 1 - 0.99 is not 0.01 in binary, and
# a permutation p-value of exactly 10 / 2000 must stay "not under" it).
CHANGE_ALPHA = round((1 - CONFIDENCE) / 2, 12)
