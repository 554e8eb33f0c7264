"""Every tuned constant of the verdicts, once, with its reason. The modules that use one import it
from here (and keep its name for their importers); `bin/harness results simulate` measures what a
change of any of them does to the false-alarm and detection rates (docs/results-statistics.md).

Rates quoted below are from the simulated board and the kept onnxruntime A/A streams
(harness/results/simulate.py) at the time each constant was chosen.
"""
from __future__ import annotations

__all__ = ["CONFIDENCE", "LOOKBACK", "MIN_HISTORY", "HISTORY_FLOOR_PCT", "FIXED_THRESHOLD_PCT", "AB_THRESHOLD_PCT",
           "OUTLIER_Z", "GROUP_RUNS", "PRIMARY_SHARE", "SPENDING_RHO", "FIRST_LOOK_SHARE", "CHANGE_ALPHA",
           "CHANGE_MIN_RUNS", "NOISE_LOOKBACK", "MIN_POSITIONS", "QUANTILES", "TAIL_DFS", "EVIDENCE", "NULL_RECORDS",
           "NULL_BUCKET", "MAX_FACTOR", "PROBE_FLOOR_PCT"]

# -- what a verdict may get wrong --------------------------------------------------------------------

# Of one judgement over all its figures: a run judged alone (two-sided), a change over all its looks
# (1 - CONFIDENCE one-sided), an A/B session (two-sided): 1 % false alarms.
CONFIDENCE = 0.99
# The smallest shift a history verdict calls a regression, however quiet the history: below it a
# statistically clear shift is too small to fail a board for.
HISTORY_FLOOR_PCT = 3.0
# An A/B session's: the paired interval is narrow enough on the board to call +2 % real, but the gate
# is for regressions that matter.
AB_THRESHOLD_PCT = 2.0
# The rule before the store (candidate mean over the baseline mean by more than 10 %): what stands in
# while a history has too few runs for a learned threshold.
FIXED_THRESHOLD_PCT = 10.0
# The smallest change of the calibration probe that makes two runs incomparable however quiet its
# history: below it the figures' own thresholds (the 3 % floor) absorb the machine's speed.
PROBE_FLOOR_PCT = 3.0

# -- the history --------------------------------------------------------------------------------------

# Earlier runs a verdict looks back on (Conbench's lookback window).
LOOKBACK = 30
# Fewer earlier runs than this give no spread worth a threshold: the caller says "too few runs".
MIN_HISTORY = 5
# Earlier runs further than this many robust standard deviations (the MAD's) from the median are
# outliers (a run disturbed by another job): left out of the spread, not allowed to widen it.
OUTLIER_Z = 5.0

# -- a change's looks ---------------------------------------------------------------------------------

# Runs since a change judged as one group: the target is a +5 % shift of the whole NPU found within
# 5 runs, so a change's first 5 runs are its group and its looks.
GROUP_RUNS = 5
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

# A split of a history is kept when its permutation test gives p under this (per search), and leaves
# at least CHANGE_MIN_RUNS runs each side.
CHANGE_ALPHA = 0.005
CHANGE_MIN_RUNS = 3

# -- the noise factor (noise.py) -------------------------------------------------------------------------

# The board's latest runs the factor is learned from. 480 left fewer A/A changes flagged on the
# onnxruntime streams (27 of 1,309 against 34) but found +5 % within 5 runs on the simulated board
# 94.6 % of the time against 95.5 %.
NOISE_LOOKBACK = 240
# Fewer positions than this say nothing about a 99 % quantile: the factor is 1, "not learned yet".
MIN_POSITIONS = 60
# Upper quantiles of the statistic compared with the t distribution's (the bulk's ratio is the largest).
QUANTILES = (0.9, 0.95, 0.99)
# Degrees of freedom a fitted tail may have: from a Cauchy-like 1.5 (a record with wild runs) to a normal one.
TAIL_DFS = (1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0, 1000.0)
# A ratio counts as evidence when independent runs give a smaller one this often: at 0.99 a quiet
# board's interval is widened in about 1 verdict of 100; at 0.9 the simulated board found +5 % within
# 5 runs 93 % of the time instead of 96 %.
EVIDENCE = 0.99
# Simulated records of independent runs that EVIDENCE's quantile is taken over, in steps of
# NULL_BUCKET positions (one simulation serves a board's record as it grows).
NULL_RECORDS = 400
NULL_BUCKET = 20
# A wider interval than this says nothing anyway: the history of such a board cannot judge a run.
MAX_FACTOR = 20.0
