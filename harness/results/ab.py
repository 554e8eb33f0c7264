"""Interleaved A/B benchmark session: `bin/harness bench-ab --a DIR --b DIR`.

Side A's partition (or stack) and side B's run alternately in one session, round by round,
and each round's figures form one pair: the mean step time, the core time per step of every branch and
the lifecycle seconds per pass of every stage. Drift of the machine or board between rounds hits
both sides of a pair alike and cancels in the pair's ratio; the paired verdict
(harness.results.verdict.decision) then judges each figure with its interval. A round is one run, so the
unit of independence is the run, never an invocation inside it.

Which side runs first is drawn at random for every two rounds, the second of them reversed (see
round_orders): each side runs first equally often, and no periodic disturbance of the host lines up
with one side, as it does under a fixed alternation.

Every figure is one test, so each is judged at the session's confidence shared out over the
figures (Bonferroni): the chance that a session with nothing changed flags any of them stays
within 1 - confidence.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..backends.base import BackendOptions
from ..core.errors import ConfigError
from ..sampling.settings import SampleSettings
from .constants import AB_THRESHOLD_PCT, CONFIDENCE
from .verdict.decision import Decision, paired_verdict
from .verdict.outcome import Outcome
from .verdict.power import DETECT_PCT, more_pairs

__all__ = ["A", "B", "Side", "ABRequest", "ABSession", "run_session", "judge_pairs", "session_outcome",
           "session_decider", "session_figures", "side_options", "without_fault", "round_orders", "parse_confidence",
           "DEFAULT_THRESHOLD_PCT", "DEFAULT_CONFIDENCE"]

DEFAULT_THRESHOLD_PCT, DEFAULT_CONFIDENCE = AB_THRESHOLD_PCT, CONFIDENCE     # constants.py says why
# The sides A and B as they are keyed wherever a session is written down: a pair's figures, the side
# that ran first (--out JSON, artifacts/runs/<case>-ab.json), the store's ab_rounds.side and its
# "<session>-baseline" / "<session>-candidate" run ids, the kept A/A streams. Those keys predate the
# words A and B and stay, so that every report and store written before reads as it did.
A, B = "baseline", "candidate"
_STAGES = ("load", "init", "release")


@dataclass(frozen=True)
class Side:
    """One side of the session: its name (A or B), partition, and the backend with its context options."""
    name: str
    partition: Path
    options: BackendOptions

    @property
    def backend(self) -> str:
        return self.options.backend


@dataclass
class ABSession:
    """A session as it runs (run_session): what was asked for, and what each judged round gave."""
    request: ABRequest
    pairs: list[dict] = field(default_factory=list)                 # per round: {A: {figure: s}, B: {figure: s}}
    verdicts: list[Decision] = field(default_factory=list)
    reports: dict = field(default_factory=lambda: {A: [], B: []})   # side -> its judged rounds' run reports
    first: list[str] = field(default_factory=list)                  # per judged round: the side that ran first

    @property
    def regressions(self) -> list[Decision]:
        return [v for v in self.verdicts if v.regression]

    @property
    def outcome(self) -> Outcome:
        return session_outcome(self.verdicts)

    def as_dict(self) -> dict:
        return {"pairs": self.pairs, "first": self.first, "verdicts": [v.as_dict() for v in self.verdicts],
                "regression": bool(self.regressions), "outcome": str(self.outcome)}


def session_outcome(verdicts: list[Decision]) -> Outcome:
    """An A/B session's outcome: REGRESSION when a figure regressed; else its step's (the figure the
    session is run for): INCONCLUSIVE when the step's interval could not have found the promised
    slowdown (--detect), PASS when it could."""
    if any(v.regression for v in verdicts):
        return Outcome.REGRESSION
    step = next((v for v in verdicts if v.label == "step"), None)
    return step.outcome if step is not None else Outcome.INCONCLUSIVE


def session_decider(verdicts: list[Decision], rounds: int) -> str:
    """What would decide an INCONCLUSIVE session ('' otherwise): so many more pairs, its noise as it is."""
    step = next((v for v in verdicts if v.label == "step"), None)
    if session_outcome(verdicts) is not Outcome.INCONCLUSIVE or step is None or step.spread_log is None:
        return ""
    more = more_pairs(step.spread_log, step.level, step.n, step.detect_pct or DETECT_PCT, step.threshold_pct)
    if more is None:
        return (f"to decide it: no number of pairs here will (the pairs' log sd {100 * step.spread_log:.1f} %): "
                "a quieter board")
    return f"to decide it: {more} more pair(s), --rounds {rounds + more}, the pairs' noise as it is"


def session_figures(report: dict) -> dict[str, float]:
    """One run's figures: 'step', '<branch> core' per branch and the lifecycle stages per pass."""
    tables = report["tables"]
    figures = {"step": tables["step_split"]["step"]}
    figures.update({f"{b} core": s for b, s in sorted(tables["core_per_step"].items())})
    figures.update({s: tables["lifecycle_pass"][s] for s in _STAGES})
    return figures


def judge_pairs(pairs: list[dict], threshold_pct: float = DEFAULT_THRESHOLD_PCT,
                confidence: float = DEFAULT_CONFIDENCE, detect_pct: float | None = DETECT_PCT) -> list[Decision]:
    """A paired verdict per figure both sides have with a time in every round (a stage a resident
    strategy never repeats is 0 and has nothing to judge), each held to the promise `detect_pct`:
    B's shift against A."""
    names = [n for n in pairs[0][A] if all(p[A].get(n, 0) > 0 and p[B].get(n, 0) > 0 for p in pairs)]
    each = 1.0 - (1.0 - confidence) / max(len(names), 1)
    return [replace(paired_verdict(n, [p[A][n] for p in pairs], [p[B][n] for p in pairs],
                                   threshold_pct=threshold_pct, confidence=each), detect_pct=detect_pct)
            for n in names]


def round_orders(rounds: int, rng: np.random.Generator) -> list[bool]:
    """Per round, whether side A runs first: for every two rounds one order drawn at random and
    then its reverse. The reverse keeps the sides first equally often (an order effect then adds
    spread to the pairs, not a shift); the draw keeps any disturbance that comes every few runs (a
    garbage collection every N allocations, a timer, an allocator's trim) from always meeting the
    same side, which a fixed alternation A B | B A | A B ... does: there the 1st, 4th, 5th, 8th ... run
    is always A's."""
    orders: list[bool] = []
    while len(orders) < rounds:
        first = bool(rng.integers(2))
        orders += [first, not first]
    return orders[:rounds]


def parse_confidence(text, option: str = "--confidence") -> float:
    """'0.99' or '99%' -> 0.99: a session's confidence over all its figures."""
    raw = str(text).strip()
    try:
        # rounded: '99.99%' is 0.9999, not the 0.99989999... a division by 100 leaves
        value = round(float(raw.removesuffix("%")) / (100 if raw.endswith("%") else 1), 12)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected a confidence such as 0.99 or 99%") from None
    if not 0.5 <= value < 1:
        raise ConfigError(f"{option} {text!r}: expected a confidence in [0.5, 1) (or [50%, 100%))")
    return value


@dataclass(frozen=True)
class ABRequest:
    """One session as its caller asks for it, built at the edge (`bench-ab`'s arguments, the suite's
    settings): the two sides, what each round runs and how the pairs are judged."""
    a: Side
    b: Side
    settings: SampleSettings
    rounds: int
    warmup: int = 1
    lifecycle: str = "on-demand"
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    confidence: float = DEFAULT_CONFIDENCE
    detect_pct: float = DETECT_PCT
    prompt: str | None = None           # None: the model's default prompt
    text_embs: dict | None = None       # the prompt's text embeddings, when the caller has them

    def __post_init__(self):
        if self.rounds < 2:
            raise ConfigError(f"{self.rounds} A/B rounds: a paired verdict needs at least 2")
        if (self.a.name, self.b.name) != (A, B):
            raise ConfigError(f"A/B sides named {self.a.name!r} and {self.b.name!r}: expected {A!r} and {B!r}")


def run_session(bundle, request: ABRequest, *, on_pair: Callable[[int, dict], None] | None = None, guard=None,
                rng: np.random.Generator | None = None) -> ABSession:
    """`request.warmup` rounds first (a process's first run of a partition builds its sessions), then
    `request.rounds` pairs, judged. Both partitions are verified on the first round only. The order
    within each round comes from `rng` (fresh entropy by default: see round_orders); `on_pair` hears
    of each judged pair as it is made."""
    session = ABSession(request)
    orders = round_orders(request.warmup + request.rounds, rng if rng is not None else np.random.default_rng())
    for r, a_first in enumerate(orders):
        order = (request.a, request.b) if a_first else (request.b, request.a)
        ran = _run_round(bundle, request, order, verify=r == 0, guard=guard)
        if r >= request.warmup:
            _keep_pair(session, ran, first=order[0].name)
            if on_pair:
                on_pair(len(session.pairs), session.pairs[-1])
    session.verdicts = judge_pairs(session.pairs, request.threshold_pct, request.confidence, request.detect_pct)
    return session


def _run_round(bundle, request: ABRequest, order: tuple[Side, Side], verify: bool, guard) -> dict[str, dict]:
    """One round: each side's run, in `order`; {side name: its run report}."""
    from ..runtime.run import RunRequest, run_partitioned  # onnx: not for a process that only parses options
    prompt = request.prompt if request.prompt is not None else bundle.cfg.prompt["default"]
    return {side.name: run_partitioned(RunRequest(bundle, side.partition, side.backend, prompt, request.settings,
                                                  side.options, lifecycle=request.lifecycle, verify=verify,
                                                  text_embs=request.text_embs), guard=guard).report
            for side in order}


def _keep_pair(session: ABSession, ran: dict[str, dict], first: str) -> None:
    """A judged round into the session: its pair of figures, which side ran first, both reports."""
    session.pairs.append({name: session_figures(report) for name, report in ran.items()})
    session.first.append(first)
    for name, report in ran.items():
        session.reports[name].append(report)


def without_fault(options: BackendOptions, fault: str | None) -> BackendOptions:
    """The suite's context options less its --fault: in a suite A/B session the fault is B's defect
    (the suite's partition), and A runs the same backend without it."""
    from ..backends.faults import parse_fault
    return options.without(*parse_fault(fault))


def side_options(backend: str, fault: str | None = None, slowdown: str | None = None,
                 drift: int | None = None, time_scale: float | None = None) -> BackendOptions:
    """Context options of one side: a fault (backend faults) or a slowdown and drift (board-sim)."""
    if fault and backend != "faults":
        raise ConfigError(f"--fault needs --backend faults (got --backend {backend})")
    if (slowdown or drift is not None or time_scale is not None) and backend != "board-sim":
        raise ConfigError(f"--slowdown, --drift and --time-scale need --backend board-sim (got {backend})")
    if backend == "faults":
        from ..backends.faults import parse_fault
        return BackendOptions(backend, parse_fault(fault))
    if backend == "board-sim":
        from ..backends.board_sim import normalize_options
        raw = {"slowdown": slowdown, "drift": drift}
        return BackendOptions(backend, normalize_options({**raw, **({"time_scale": time_scale}
                                                                    if time_scale is not None else {})}))
    return BackendOptions(backend)
