"""Kept for the modules that import it by this name: the figure verdicts live in verdict/decision.py
and verdict/changes.py."""
from .constants import FIXED_THRESHOLD_PCT, HISTORY_FLOOR_PCT, MIN_HISTORY, OUTLIER_Z
from .verdict.changes import change_points
from .verdict.decision import Decision, fixed_verdict, history_verdict, outliers_kept, paired_verdict

__all__ = ["Decision", "outliers_kept", "history_verdict", "change_points", "paired_verdict", "fixed_verdict",
           "MIN_HISTORY", "HISTORY_FLOOR_PCT", "FIXED_THRESHOLD_PCT", "OUTLIER_Z"]
