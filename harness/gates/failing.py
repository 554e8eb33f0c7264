"""The failing case a gate's run report names, as `harness reduce --from-report` reads it.

The headroom gate writes each probed run's report (artifacts/runs/<case>-headroom.json) with a
`headroom` section: per subgraph its lowest float16 headroom and the tensor, step and stream where it
was reached. reduce then bisects the subgraph that fell below the limit on its inputs over the same
generation (the case's settings, seed and text embeddings: every step, the one named among them; a
remedy judged on that step alone can fail the next), and says which step and stream.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["FailingCase", "from_headroom_report", "REDUCE_DIR", "reduced_beside", "link_in_summary"]

# reduce --from-report artifacts/runs/<case>-headroom.json writes into artifacts/reduce/subgraphNN,
# beside the run reports, and links each repro there from that session's summary.md
REDUCE_DIR = "reduce"
SUMMARY = "summary.md"


@dataclass(frozen=True)
class FailingCase:
    subgraph: int
    label: str
    tensor: str
    step: int
    stream: str
    headroom: float
    case: str | None            # the golden case the run was, when its report's name says so
    settings: dict

    def line(self) -> str:
        return (f"{self.label}: tensor {self.tensor} at step {self.step}, stream {self.stream}, headroom "
                f"{self.headroom:.3g}x" + (f" (case {self.case})" if self.case else ""))


def _read(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"reduce --from-report {path}: not a readable run report: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("headroom"), dict):
        raise ConfigError(f"reduce --from-report {path}: no headroom section (a run report the headroom "
                          f"gate wrote: artifacts/runs/<case>-headroom.json)")
    return report


def from_headroom_report(path: Path, subgraph: str | None, cases: list[str]) -> FailingCase:
    """The subgraph (`subgraph`, else the first below the limit) the report's headroom section fails."""
    report = _read(path)
    section = report["headroom"]
    limit = float(section["min_headroom"])
    failing = [s for s in section["subgraphs"] if s["headroom"] is not None and float(s["headroom"]) < limit]
    chosen = [s for s in failing if subgraph is None or subgraph in (str(s["subgraph"]), s["label"])]
    if not chosen:
        named = ", ".join(s["label"] for s in failing) or "none"
        raise ConfigError(f"reduce --from-report {path}: "
                          + (f"subgraph {subgraph} does not fail its headroom there" if subgraph else
                             "no subgraph below its headroom") + f" (failing: {named})")
    sub = chosen[0]
    stem = Path(path).stem.removesuffix("-headroom")
    return FailingCase(int(sub["subgraph"]), sub["label"], sub["tensor"], int(sub["step"]), sub["stream"],
                       float(sub["headroom"]), stem if stem in cases else None, report.get("settings") or {})


def reduced_beside(artifacts: Path) -> list[dict]:
    """The reduce results in artifacts/reduce/*/report.json: subgraph, toolkit, the op(s), the remedy
    and the repro's path relative to `artifacts` (a report that cannot be read is left out)."""
    rows = []
    for path in sorted((Path(artifacts) / REDUCE_DIR).glob("*/report.json")):
        try:
            report = json.loads(path.read_text())
            reduction = report.get("reduction") or {}
            winner = report.get("winner") or {}
            row = {"subgraph": report["subgraph"], "toolkit": report["toolkit"],
                   "diverges": reduction.get("nodes") or "does not diverge",
                   "remedy": winner.get("what") and f"{winner['remedy']}: {winner['what']}",
                   "written": winner.get("written"), "report": str(path.relative_to(artifacts))}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        repro = path.parent / "repro" / "repro.py"
        row["repro"] = str(repro.relative_to(artifacts)) if report.get("reproduces") and repro.is_file() else None
        rows.append(row)
    return rows


def link_in_summary(artifacts: Path) -> Path | None:
    """The session's summary.md with its reduce table (replaced whole) listing every reduce result
    beside its run reports; None when the folder has no summary (not a suite run's artifacts)."""
    from ..core.atomic import atomic_write_text
    from ..report.summary import REDUCED_TITLE, reduced_section
    path = Path(artifacts) / SUMMARY
    if not path.is_file():
        return None
    text = path.read_text()
    if REDUCED_TITLE in text:           # the table reduce wrote before: the rest of the page stays
        head, _, rest = text.partition(REDUCED_TITLE)
        tail = rest.split("\n### ", 1)
        text = head + ("### " + tail[1] if len(tail) > 1 else "")
    atomic_write_text(path, text.rstrip() + "\n\n" + "\n".join(reduced_section(reduced_beside(artifacts))))
    return path
