"""The benchmark verdict: PASS, REGRESSION or INCONCLUSIVE, each with the smallest shift it could detect.

One call, `judge(store, run) -> Verdict`: the run against its board's accepted stack in the results
store. A verdict that could not have found the change its users care about says INCONCLUSIVE, never
PASS. One module per concern (docs/verdict.md explains the maths):

  outcome.py    the three outcomes            power.py      the minimum detectable effect, --detect
  figures.py    what is judged                decision.py   one figure against its history, an A/B pair
  looks.py      a change's looks, alpha       noise.py      the board's noise factor
  record.py     the board's record            reference.py  the accepted stack, probation, comparability
  probe.py      the host's calibration probe  history.py    every figure of a run
  verdict.py    the Verdict and its line      judging.py    judge(store, run), confirm, judge_stored
  rerun.py      the gate's confirming rerun   changes.py    change points over a history
"""
from .outcome import Outcome
from .power import DETECT_PCT, POWER, minimum_detectable_pct

__all__ = ["judge", "confirm", "judge_stored", "Verdict", "Outcome", "DETECT_PCT", "POWER", "minimum_detectable_pct"]


def __getattr__(name: str):
    """judge, confirm and judge_stored read the results store, whose own modules import the figure
    verdicts (decision.py) from this package, and the Verdict brings numpy: loaded on first use, so
    neither waits on the other and the options (--detect's default) load neither."""
    if name in ("judge", "confirm", "judge_stored"):
        from . import judging
        return getattr(judging, name)
    if name == "Verdict":
        from .verdict import Verdict
        return Verdict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
