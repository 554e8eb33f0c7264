"""The three outcomes a benchmark verdict can have."""
from __future__ import annotations

from enum import StrEnum

__all__ = ["Outcome"]


class Outcome(StrEnum):
    """PASS: no slowdown, and a slowdown of the promised size would have been found. REGRESSION: a
    slowdown found. INCONCLUSIVE: none found, but the noise and the sample could not have found one of
    the promised size either, so the run says nothing about the stack (it fails the gate by default)."""

    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"

    @property
    def fails(self) -> bool:
        """Whether the outcome fails the gate under the default policy (--inconclusive=fail)."""
        return self is not Outcome.PASS
