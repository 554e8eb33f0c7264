"""The confirming rerun: a regression judged from one run fails only when a second run, measured the
same way in the same job, finds it too (Verdict.needs_confirmation); one run disturbed far past its
history (another tenant, a page-cache flush) is not a slower stack."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..records import Run
from .verdict import Verdict

__all__ = ["BenchmarkDecision", "decide"]


@dataclass(frozen=True)
class BenchmarkDecision:
    """The gate's runs of one benchmark (the timed one, and the one offered as a baseline) with their Verdict."""
    run: Run                 # the timed run
    offered: Run             # the run that may become a baseline: the confirmation run when one was needed
    judgement: Verdict

    def keep(self, results) -> None:
        """Both runs go to the store at session end (with the quality gate's metrics of the image)."""
        results.record(self.run)
        if self.offered is not self.run:
            results.record(self.offered)


def decide(results, run: Run, again: Callable[[], Run]) -> BenchmarkDecision:
    """The judgement of `run`; a regression judged from one run fails only when a second run says so
    too: a run disturbed far past its history (another tenant, a page-cache flush) is not a slower stack."""
    judgement = results.judge(run)
    offered = run
    if judgement.needs_confirmation:
        offered = replace(again(), run_id=f"{run.run_id}-confirm")     # (run id, case) names one run
        judgement = results.confirm(run, judgement, offered)
    return BenchmarkDecision(run, offered, judgement)
