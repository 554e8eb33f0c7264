"""`harness bench-ab`: partitions A and B interleaved in one session, judged by paired differences
(the session itself: harness.results.ab). The arguments become one ab.ABRequest here, at the edge."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError
from ..model.config import EMBEDDED_DIR
from ..results.ab import (
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD_PCT,
    A,
    ABRequest,
    B,
    Side,
    parse_confidence,
    run_session,
    side_options,
)
from .options import add_options, old_spelling
from .results import add_results_option

__all__ = ["add_command", "ab_request"]

DEFAULT_CASE = "default-prompt"


def add_command(sub) -> None:
    p = sub.add_parser("bench-ab", help="interleaved A/B benchmark: partitions A and B alternately in one "
                                        "session, B judged against A by paired differences")
    for side, old, what in (("a", "baseline", "A: the partition B is judged against (e.g. the old one)"),
                            ("b", "candidate", "B: the partition judged (e.g. the new one)")):
        given = p.add_mutually_exclusive_group(required=True)
        given.add_argument(f"--{side}", type=Path, help=f"partition directory of side {what}")
        given.add_argument(f"--{old}", dest=side, type=Path, action=old_spelling(f"--{side}"), help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                   help="model directory of both partitions (default: models/embedded)")
    p.add_argument("--backend", default="onnxruntime",
                   choices=("onnxruntime", "rknnlite", "board-sim", "faults", "rknn-sim"),
                   help="backend both sides run on (default: %(default)s)")
    p.add_argument("--fault", help="with --backend faults: B's fault, e.g. slow=x1.05")
    p.add_argument("--slowdown", help="with --backend board-sim: B's slowdown, e.g. ffn=x1.03")
    p.add_argument("--drift", type=int, help="with --backend board-sim: seed of the board's drift model")
    p.add_argument("--time-scale", type=float, help="with --backend board-sim: seconds here per board second")
    p.add_argument("--steps", type=int, default=2, help="sampler steps per run (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=8, help="judged rounds, one pair each (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="rounds run first and not judged (default: %(default)s)")
    p.add_argument("--lifecycle", default="on-demand", help="context strategy (default: %(default)s)")
    p.add_argument("--threshold", default=f"{DEFAULT_THRESHOLD_PCT:g}%",
                   help="smallest shift that is a regression (default: %(default)s)")
    p.add_argument("--confidence", default=f"{DEFAULT_CONFIDENCE:g}",
                   help="session confidence, shared over the figures: 0.99 or 99%% (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write the pairs and verdicts as JSON here")
    p.add_argument("--case", default=DEFAULT_CASE,
                   help="the case name the session is stored under (default: %(default)s, the model's default prompt)")
    add_options(p, "detect", "inconclusive")
    add_results_option(p)
    p.set_defaults(func=_cmd_bench_ab)


def ab_request(args, bundle) -> ABRequest:
    """The session the arguments ask for, every value checked: one line naming the option at fault."""
    from ..results.verdict.figures import parse_threshold
    from ..results.verdict.power import parse_detect
    from ..sampling.reference_run import sample_settings
    threshold = parse_threshold(args.threshold, "--threshold")
    detect = parse_detect(args.detect)
    confidence = parse_confidence(args.confidence, "--confidence")
    for flag, value, least in (("--steps", args.steps, 1), ("--rounds", args.rounds, 2), ("--warmup", args.warmup, 0)):
        if value < least:
            raise ConfigError(f"{flag} {value}: expected a whole number >= {least}")
    a_opts = side_options(args.backend, None, None, args.drift, args.time_scale)
    b_opts = side_options(args.backend, args.fault, args.slowdown, args.drift, args.time_scale)
    if args.backend == "board-sim":     # one board: B's cores are A's
        b_opts = b_opts.with_settings({"lock_dir": a_opts.get("lock_dir")})
    return ABRequest(Side(A, args.a, a_opts), Side(B, args.b, b_opts),
                     sample_settings(bundle, steps=args.steps), rounds=args.rounds, warmup=args.warmup,
                     lifecycle=args.lifecycle, threshold_pct=threshold, confidence=confidence, detect_pct=detect)


def _cmd_bench_ab(args) -> int:
    from ..model.bundle import load_bundle
    from ..results.store import ResultsStore
    from ..results.telemetry import TelemetryWindow
    from ..results.verdict.outcome import Outcome
    bundle = load_bundle(args.model_dir)
    request = ab_request(args, bundle)
    with ResultsStore(args.results) as store:      # opened first: a store that cannot be written fails early
        with TelemetryWindow() as window:
            session = run_session(bundle, request, on_pair=lambda i, p: print(
                f"round {i}: step {p[A]['step']:.4f} s (A) / {p[B]['step']:.4f} s (B)", file=sys.stderr))
        _say(session, args)
        if args.out:
            atomic_write_json(args.out, session.as_dict())
        _store(store, session, args.case, window.verdict())
    print(json.dumps({"pairs": len(session.pairs), "regressions": len(session.regressions),
                      "outcome": str(session.outcome)}))
    fails = session.outcome is Outcome.REGRESSION or (session.outcome is Outcome.INCONCLUSIVE
                                                      and args.inconclusive != "warn")
    return 1 if fails else 0


def _say(session, args) -> None:
    """Each figure's verdict, then the session's outcome (and what would decide an INCONCLUSIVE one)."""
    from ..results.ab import session_decider
    from ..results.verdict.outcome import Outcome
    for verdict in session.verdicts:
        print(("REGRESSION " if verdict.regression else "") + verdict.line())
    decider = session_decider(session.verdicts, args.rounds)
    warned = session.outcome is Outcome.INCONCLUSIVE and args.inconclusive == "warn"
    print(f"{session.outcome.name}: A/B session of {len(session.pairs)} pairs"
          + (f"; {decider}" if decider else "") + (" (--inconclusive=warn)" if warned else ""))


def _store(store, session, case: str, telemetry: dict) -> None:
    """The session into the results store: both sides' runs, the pairs and the verdicts."""
    from ..results.sessions import ab_record
    from ..results.telemetry import board_id, board_identity
    identity = board_identity()
    record = ab_record(session, case=case, identity=identity, board=board_id(identity), telemetry=telemetry)
    store.add_ab_session(record)
    print(f"A/B session {record.session_id} written to {store.where}", file=sys.stderr)
