"""The tables of docs/verdict.md, generated: `python -m harness.results.verdict.tables` prints them and
a test holds the page to them."""
from __future__ import annotations

import math

from ..constants import AB_THRESHOLD_PCT, CONFIDENCE, HISTORY_FLOOR_PCT, PRIMARY_SHARE
from .power import DETECT_PCT, minimum_detectable_pct

__all__ = ["mde_tables"]


def mde_tables() -> str:
    """docs/verdict.md's tables, as markdown: the minimum detectable effect of a lone run's NPU core
    by history length and run-to-run noise, and of an A/B session's step by pairs and pair noise, at
    the levels the gate judges them at (python -m harness.results.verdict.tables prints them)."""
    sds, lone_level = (0.02, 0.05, 0.10, 0.25), (1 - CONFIDENCE) / 2 * PRIMARY_SHARE
    rows = ["| earlier runs | " + " | ".join(f"log sd {100 * s:g} %" for s in sds) + " |",
            "|---|" + "---|" * len(sds)]
    for n in (5, 10, 30):
        cells = [minimum_detectable_pct(s * math.sqrt(1 + 1 / n), lone_level, n - 1, floor_pct=HISTORY_FLOOR_PCT)
                 for s in sds]
        rows.append(f"| {n} | " + " | ".join(_cell(c) for c in cells) + " |")
    pair_sds, ab_level = (0.01, 0.02, 0.05, 0.10), (1 - CONFIDENCE) / 7 / 2     # 7 figures share the session's
    rows += ["", "| pairs | " + " | ".join(f"pair log sd {100 * s:g} %" for s in pair_sds) + " |",
             "|---|" + "---|" * len(pair_sds)]
    for n in (4, 8, 16, 32):
        cells = [minimum_detectable_pct(s / math.sqrt(n), ab_level, n - 1, floor_pct=AB_THRESHOLD_PCT)
                 for s in pair_sds]
        rows.append(f"| {n} | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _cell(pct: float) -> str:
    """'9.9', or '**31.2**' past DETECT_PCT: what that verdict would say INCONCLUSIVE about."""
    text = f"{pct:.1f}" if pct < 1000 else f"{pct:.0f}"
    return f"**{text}**" if pct > DETECT_PCT else text


if __name__ == "__main__":        # docs/verdict.md's tables
    print(mde_tables(), end="")
