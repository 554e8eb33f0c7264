"""The benchmark verdict: PASS, REGRESSION or INCONCLUSIVE, each with the smallest shift it could detect.

A verdict that could not have found the change its users care about says INCONCLUSIVE, never PASS:
`outcome.py` holds the three outcomes, `power.py` the minimum detectable effect every verdict states
beside its interval.
"""
from .outcome import Outcome
from .power import DETECT_PCT, POWER, minimum_detectable_pct

__all__ = ["Outcome", "DETECT_PCT", "POWER", "minimum_detectable_pct"]
