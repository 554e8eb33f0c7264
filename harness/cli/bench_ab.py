"""`harness bench-ab`: baseline and candidate partitions interleaved in one session, judged by paired
differences (the session itself: harness.results.ab)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError
from ..model.config import EMBEDDED_DIR
from ..results.ab import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD_PCT, Side, parse_confidence, run_session, side_options
from .options import add_options
from .results import add_results_option

__all__ = ["add_command"]

DEFAULT_CASE = "default-prompt"


def add_command(sub) -> None:
    p = sub.add_parser("bench-ab", help="interleaved A/B benchmark: baseline and candidate partitions "
                                        "alternately in one session, judged by paired differences")
    p.add_argument("--baseline", type=Path, required=True, help="baseline partition directory")
    p.add_argument("--candidate", type=Path, required=True, help="candidate partition directory")
    p.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                   help="model directory of both partitions (default: models/embedded)")
    p.add_argument("--backend", default="onnxruntime",
                   choices=("onnxruntime", "rknnlite", "board-sim", "faults", "rknn-sim"),
                   help="backend both sides run on (default: %(default)s)")
    p.add_argument("--fault", help="with --backend faults: the candidate's fault, e.g. slow=x1.05")
    p.add_argument("--slowdown", help="with --backend board-sim: the candidate's slowdown, e.g. ffn=x1.03")
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


def _cmd_bench_ab(args) -> int:
    from ..model.bundle import load_bundle
    from ..results.ab import session_decider
    from ..results.sessions import ab_record
    from ..results.store import ResultsStore
    from ..results.telemetry import TelemetryWindow, board_id, board_identity
    from ..results.verdict.figures import parse_threshold
    from ..results.verdict.outcome import Outcome
    from ..results.verdict.power import parse_detect
    from ..sampling.reference_run import sample_settings
    threshold = parse_threshold(args.threshold, "--threshold")
    detect = parse_detect(args.detect)
    args.confidence = parse_confidence(args.confidence, "--confidence")
    for flag, value, least in (("--steps", args.steps, 1), ("--rounds", args.rounds, 2), ("--warmup", args.warmup, 0)):
        if value < least:
            raise ConfigError(f"{flag} {value}: expected a whole number >= {least}")
    bundle = load_bundle(args.model_dir)
    base_opts = side_options(args.backend, None, None, args.drift, args.time_scale)
    cand_opts = side_options(args.backend, args.fault, args.slowdown, args.drift, args.time_scale)
    if args.backend == "board-sim":     # one board: the candidate's cores are the baseline's
        cand_opts["lock_dir"] = base_opts["lock_dir"]
    sides = {"baseline": Side("baseline", args.baseline, args.backend, base_opts),
             "candidate": Side("candidate", args.candidate, args.backend, cand_opts)}
    with ResultsStore(args.results) as store:      # opened first: a store that cannot be written fails early
        with TelemetryWindow() as window:
            session = run_session(bundle, sides["baseline"], sides["candidate"],
                                  sample_settings(bundle, steps=args.steps), rounds=args.rounds, warmup=args.warmup,
                                  lifecycle=args.lifecycle, threshold_pct=threshold, confidence=args.confidence,
                                  detect_pct=detect,
                                  on_pair=lambda i, p: print(f"round {i}: step {p['baseline']['step']:.4f} s / "
                                                             f"{p['candidate']['step']:.4f} s", file=sys.stderr))
        for verdict in session.verdicts:
            print(("REGRESSION " if verdict.regression else "") + verdict.line())
        decider = session_decider(session.verdicts, args.rounds)
        print(f"{session.outcome.name}: A/B session of {len(session.pairs)} pairs"
              + (f"; {decider}" if decider else "") + ("" if session.outcome is not Outcome.INCONCLUSIVE
                                                       or args.inconclusive != "warn" else " (--inconclusive=warn)"))
        if args.out:
            atomic_write_json(args.out, session.as_dict())
        identity = board_identity()
        record = ab_record(session, case=args.case, sides=sides, identity=identity, board=board_id(identity),
                           telemetry=window.verdict(), threshold_pct=threshold, confidence=args.confidence,
                           lifecycle=args.lifecycle, warmup=args.warmup)
        store.add_ab_session(record)
        print(f"A/B session {record.session_id} written to {store.where}", file=sys.stderr)
    print(json.dumps({"pairs": len(session.pairs), "regressions": len(session.regressions),
                      "outcome": str(session.outcome)}))
    fails = session.outcome is Outcome.REGRESSION or (session.outcome is Outcome.INCONCLUSIVE
                                                      and args.inconclusive != "warn")
    return 1 if fails else 0
