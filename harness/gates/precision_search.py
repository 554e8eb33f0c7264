"""`harness search-precision`: the fastest mixed-precision build (INT8 FFNs) that passes the quality gate.

The board's all-INT8 FFN build was 18.5 % faster and failed the image bar. This search asks which
subset does pass, guided by per-subgraph accuracy:

 1. the all-INT8 build (every FFN's two linears, GELU and the branch output FP16) is converted with
    each of a few toolkit quantization options (algorithm x per-channel / per-layer), and each is run
    through the simulator on a golden case with every FFN compared to the FP32 reference at every step
    (harness.gates.accuracy) and the image judged by the quality gate;
 2. the FFNs are ranked by their worst cosine under the best options (worst first); FP16 is judged
    as the reference row, then the largest count of the most accurate FFNs that passes is found by
    bisection (a handful of candidates for 28 FFNs), then one more FFN half-INT8 on top, once with
    each of its two linears kept FP16;
 3. every candidate is a precision file (toolkit/calibration.py), converted and judged the same way.

Each candidate's predicted board step time is the FP16 step minus what its INT8 FFNs save, from
boards/data/int8-ffn-saving.toml (derived from the board write-up's figures; an assumption, named
there). The table ends with the fastest candidate that passes; `harness convert --precision FILE`
rebuilds it from the precision file the search wrote.

Output directory: search.json (every candidate, its metrics and margins), search.md (the same as a
markdown table, for docs/precision.md), candidates/NAME.toml (the precision files), chosen.toml (a copy
of the chosen one's), one folder per candidate's conversion.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.atomic import atomic_write_json, atomic_write_text
from ..core.errors import ConfigError, HarnessError
from ..model.config import REPO_ROOT
from ..toolkit.precisions import LINEARS, PRECISION_FILE_FORMAT
from .cases import case_inputs, golden_dir_for

__all__ = ["Candidate", "JudgedCase", "board_saving", "predicted_step", "precision_text", "rank_ffns", "top_candidate",
           "search", "chosen", "render", "markdown", "load_outcomes", "write_search", "say"]

SAVING_FILE = REPO_ROOT / "boards" / "data" / "int8-ffn-saving.toml"
# The options tried on the all-INT8 build: the board's (normal, per-channel), the toolkit's
# histogram algorithm, and per-layer scales. mmse is left out: minutes per subgraph on this machine.
OPTIONS = (("normal", "channel"), ("kl_divergence", "channel"), ("normal", "layer"))


@dataclass
class Candidate:
    name: str
    int8: list[int]                                  # FFN subgraphs with INT8 linears
    half: dict[int, str] = field(default_factory=dict)   # subgraph -> the linear kept FP16
    algorithm: str = "normal"
    method: str = "channel"

    def int8_linears(self) -> float:
        return len(self.int8) - 0.5 * len(self.half)


@dataclass
class Outcome:
    candidate: Candidate
    predicted_step_s: float
    ssim: float | None = None
    psnr: float | None = None
    ssim_margin: float | None = None
    psnr_margin: float | None = None
    worst_ffn_cosine: float | None = None
    passes: bool = False
    error: str | None = None
    seconds: float = 0.0
    precision_file: str = ""
    ffn_cosines: dict[int, float] = field(default_factory=dict)


def board_saving(path: Path = SAVING_FILE) -> dict:
    """The measured step times and the per-FFN saving assumption (boards/data/int8-ffn-saving.toml)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        return {"float16_step_s": float(data["measured"]["float16_step_s"]),
                "w8a8_step_s": float(data["measured"]["w8a8_step_s"]),
                "saving_per_ffn_s": float(data["assumption"]["saving_per_ffn_s"]),
                "linear_share": float(data["assumption"]["linear_share"]), "file": str(path)}
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable INT8 saving file ({exc})") from None


def predicted_step(candidate: Candidate, saving: dict, blocks: int) -> float:
    """Board seconds per step: FP16 minus each INT8 FFN's saving (the embedded model's FFNs stand
    for the board's 28 in proportion: k of `blocks` INT8 is k/blocks of 28)."""
    share = 28.0 / blocks
    whole = len(candidate.int8) - len(candidate.half)
    halves = len(candidate.half) * saving["linear_share"]
    return saving["float16_step_s"] - (whole + halves) * share * saving["saving_per_ffn_s"]


def precision_text(candidate: Candidate, calibration: Path) -> str:
    """The precision file of a candidate (toolkit/calibration.py reads it)."""
    lines = [f'# Written by `harness search-precision`: candidate {candidate.name}.',
             '# Rebuild: bin/harness convert FP32_PARTITION --precision THIS_FILE --out DIR',
             f'format = "{PRECISION_FILE_FORMAT}"', f'name = "{candidate.name}"',
             f'int8_subgraphs = {sorted(candidate.int8)}', 'quantized_dtype = "w8a8"',
             f'quantized_algorithm = "{candidate.algorithm}"', f'quantized_method = "{candidate.method}"',
             'hybrid_float = ["gelu", "output"]', f'calibration = "{Path(calibration).resolve()}"']
    if candidate.half:
        pairs = ", ".join(f'"{i}" = ["{lin}"]' for i, lin in sorted(candidate.half.items()))
        lines.append(f"float_linears = {{ {pairs} }}")
    return "\n".join(lines) + "\n"


def rank_ffns(cosines: dict[int, float]) -> list[int]:
    """FFN subgraphs worst first (lowest worst-step cosine; NaN is worst)."""
    return sorted(cosines, key=lambda i: cosines[i] if cosines[i] == cosines[i] else -1.0)


def option_candidates(ffns: list[int]) -> list[Candidate]:
    return [Candidate(f"all-{alg}-{method}", list(ffns), algorithm=alg, method=method)
            for alg, method in OPTIONS]


def top_candidate(ranked: list[int], count: int, best: Candidate, half: int = 0,
                  keep: str = LINEARS[0]) -> Candidate:
    """The `count` most accurate FFNs INT8 (the end of the worst-first list), and the next `half`
    of them with one linear INT8, the other (`keep`, layer1 or layer2) FP16."""
    n = len(ranked)
    full = ranked[n - count:] if count else []
    back = ranked[max(0, n - count - half):n - count]
    name = f"int8-{count}" + (f"-half{len(back)}-{keep}-float16" if back else "") + f"-{best.algorithm}-{best.method}"
    return Candidate(name, back + full, {i: keep for i in back}, best.algorithm, best.method)


def say(text: str) -> None:
    print(f"[search] {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class JudgedCase:
    """The golden case every candidate is judged on: the case, its golden image, and its folder (where
    its text embeddings are; None: the model's own)."""
    case: Any
    golden: Any
    golden_dir: Path | None = None


class _Judge:
    """Converts a candidate, runs one golden case through the simulator with the accuracy observer,
    and judges the image by the case's quality thresholds. The FP32 source is also the accuracy
    reference."""

    def __init__(self, bundle, source: Path, calibration: Path, judged: JudgedCase, out: Path,
                 version: str | None, saving: dict):
        self.bundle, self.source, self.reference = bundle, source, source
        self.golden_dir = judged.golden_dir or golden_dir_for(bundle.cfg.name)
        self.calibration, self.case, self.golden, self.out = calibration, judged.case, judged.golden, out
        self.version, self.saving = version, saving

    def __call__(self, candidate: Candidate) -> Outcome:
        started = time.perf_counter()
        outcome = Outcome(candidate, predicted_step(candidate, self.saving, self.bundle.cfg.blocks))
        spec = self.out / "candidates" / f"{candidate.name}.toml"
        spec.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(spec, precision_text(candidate, self.calibration))
        outcome.precision_file = str(spec)
        try:
            self._judge(candidate, spec, outcome)
        except HarnessError as exc:
            outcome.error = str(exc)
        outcome.seconds = round(time.perf_counter() - started, 1)
        say(f"{candidate.name}: " + (f"FAILED TO RUN: {outcome.error}" if outcome.error else
                  f"SSIM {outcome.ssim:.6f} (margin {outcome.ssim_margin:+.2e}), worst FFN cosine "
                  f"{outcome.worst_ffn_cosine:.6f}, {'passes' if outcome.passes else 'fails'}; "
                  f"{outcome.seconds:.0f} s"))
        return outcome

    def _judge(self, candidate: Candidate, spec: Path, outcome: Outcome) -> None:
        from ..backends.rknn_sim import shutdown_workers
        from ..gates.accuracy import AccuracyAnalysis, ReferenceSubgraphs, per_subgraph
        from ..gates.quality import compare
        from ..runtime.run import RunRequest, open_partition, run_partitioned
        from ..toolkit.convert import ConvertSettings, convert_partition
        partition = self.out / "partitions" / candidate.name
        say(f"{candidate.name}: converting ({len(candidate.int8)} INT8 FFNs, {len(candidate.half)} "
                  f"half, {candidate.algorithm}/{candidate.method})")
        convert_partition(self.source, partition,
                          ConvertSettings(version=self.version, precision=str(spec), quiet=True))
        reference = ReferenceSubgraphs(open_partition(self.bundle, self.reference))
        analysis = AccuracyAnalysis(reference, 0.0, None, {})
        case = self.case
        inputs = case_inputs(case, self.bundle.cfg, self.golden_dir)

        def step_line(i: int) -> None:
            if (i + 1) % 5 == 0:
                say(f"{candidate.name}: simulator step {i + 1}/{case.steps}")
        try:
            result = run_partitioned(RunRequest(self.bundle, partition, "rknn-sim", inputs.prompt, inputs.settings,
                                                text_embs=inputs.text_embs),
                                     observers=[analysis], on_step=step_line, report_path=partition / "run.json")
        finally:
            reference.close()
            shutdown_workers()          # the worker's built models of this candidate: not needed again
        q = compare(result.image, self.golden)
        worst = per_subgraph([r for r in analysis.rows if r.branch == "ffn"])
        outcome.ffn_cosines = {i: r.cosine for i, r in worst.items()}
        outcome.worst_ffn_cosine = min(outcome.ffn_cosines.values())
        outcome.ssim, outcome.psnr = q.ssim, q.psnr
        outcome.ssim_margin, outcome.psnr_margin = q.ssim - case.ssim_min, q.psnr - case.psnr_min
        outcome.passes = q.passes(case.ssim_min, case.psnr_min)


def search(bundle, calibration: Path, judged: JudgedCase, out: Path, cache_dir: Path, version: str | None = None,
           saving_file: Path = SAVING_FILE, options: bool = True) -> list[Outcome]:
    """Run the search (see the module docstring); returns every candidate's outcome, in order."""
    from ..partition.manifest import subgraph_index
    from ..runtime.converted import cached_fp32_export
    saving = board_saving(saving_file)
    source = cached_fp32_export(bundle, cache_dir)
    ffns = [subgraph_index(b, "ffn") for b in range(bundle.cfg.blocks)]
    judge = _Judge(bundle, source, calibration, judged, out, version, saving)
    first = option_candidates(ffns) if options else option_candidates(ffns)[:1]
    outcomes = [judge(c) for c in first]
    ran = [o for o in outcomes if o.error is None]
    if not ran:
        raise ConfigError(f"search-precision: no all-INT8 build ran ({outcomes[0].error})")
    best = max(ran, key=lambda o: (o.ssim, o.worst_ffn_cosine))
    ranked = rank_ffns(best.ffn_cosines)
    say("FFNs worst first: " + ", ".join(f"{i} ({best.ffn_cosines[i]:.5f})" for i in ranked[:8]) + " ...")
    if not any(o.passes for o in outcomes):
        outcomes += _bisect(judge, ranked, best.candidate)
    write_search(out, outcomes, saving, calibration, judged.case)
    return outcomes


def _bisect(judge, ranked: list[int], best: Candidate) -> list[Outcome]:
    """The largest number of the most accurate FFNs that still passes, by bisection (the error grows
    with every FFN made INT8): FP16 (0) is judged first as the reference row and must pass; all
    (len(ranked)) failed already. Then one more FFN half-INT8 on top of the largest passing count."""
    float16 = judge(top_candidate(ranked, 0, best))
    outcomes = [float16]
    if not float16.passes:
        say("the FP16 build itself fails the gate on the simulator: no INT8 candidate can pass")
        return outcomes
    lo, hi = 0, len(ranked)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        outcomes.append(judge(top_candidate(ranked, mid, best)))
        lo, hi = (mid, hi) if outcomes[-1].passes else (lo, mid)
    for keep in LINEARS:        # which of the two linears of the next FFN can go INT8
        outcomes.append(judge(top_candidate(ranked, lo, best, half=1, keep=keep)))
    return outcomes


def chosen(outcomes: list[Outcome]) -> Outcome | None:
    """The fastest candidate that passes (lowest predicted step; more INT8 breaks a tie)."""
    passing = [o for o in outcomes if o.passes]
    return min(passing, key=lambda o: (o.predicted_step_s, -o.candidate.int8_linears()), default=None)


def write_search(out: Path, outcomes: list[Outcome], saving: dict, calibration: Path, case) -> None:
    """search.json, search.md and chosen.toml (a copy of the chosen candidate's precision file) into `out`."""
    pick = chosen(outcomes)
    if pick is not None:
        shutil.copyfile(pick.precision_file, out / "chosen.toml")
    atomic_write_json(out / "search.json", {
        "case": case.name, "ssim_min": case.ssim_min, "psnr_min": case.psnr_min,
        "calibration": str(calibration), "saving": saving,
        "chosen": pick.candidate.name if pick else None,
        "candidates": [{**asdict(o), "candidate": asdict(o.candidate)} for o in outcomes]})
    atomic_write_text(out / "search.md", markdown(outcomes))


def load_outcomes(path: Path) -> tuple[list[Outcome], dict]:
    """(every candidate's outcome, the board saving) of a finished search's search.json."""
    try:
        data = json.loads(Path(path).read_text())
        outcomes = [Outcome(**{**o, "candidate": Candidate(**o["candidate"]),
                               "ffn_cosines": {int(k): v for k, v in o["ffn_cosines"].items()}})
                    for o in data["candidates"]]
        return outcomes, data["saving"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a search-precision search.json ({exc})") from None


COLUMNS = ("candidate", "INT8 FFNs", "of them half", "options", "SSIM", "SSIM margin", "PSNR dB", "PSNR margin",
           "worst FFN cosine", "verdict", "predicted board step")


def _cells(o: Outcome) -> list[str]:
    """One candidate's row, the same in the terminal table and the markdown one."""
    c = o.candidate
    head = [c.name, str(len(c.int8)), str(len(c.half)), f"{c.algorithm}/{c.method}"]
    step = f"{o.predicted_step_s:.2f} s"
    if o.error:
        return head + ["-"] * 5 + ["error", step]
    return head + [f"{o.ssim:.6f}", f"{o.ssim_margin:+.2e}", f"{o.psnr:.2f}", f"{o.psnr_margin:+.2f}",
                   f"{o.worst_ffn_cosine:.6f}", "pass" if o.passes else "FAIL", step]


def markdown(outcomes: list[Outcome]) -> str:
    """The candidates as a markdown table (docs/precision.md takes it as written)."""
    rows = [COLUMNS, ("---",) * len(COLUMNS)] + [_cells(o) for o in outcomes]
    return "".join("| " + " | ".join(row) + " |\n" for row in rows)


def render(outcomes: list[Outcome], saving: dict, con) -> None:
    from rich.table import Table
    table = Table(title="search-precision: candidates (simulator, quality gate, predicted board step)")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("candidate", "options", "verdict") else "right")
    for o in outcomes:
        table.add_row(*_cells(o))
    con.print(table)
    pick = chosen(outcomes)
    con.print(f"board (assumption, {saving['file']}): FP16 {saving['float16_step_s']:.2f} s/step, all-FFN W8A8 "
              f"{saving['w8a8_step_s']:.2f} s/step, {saving['saving_per_ffn_s']:.5f} s saved per INT8 FFN",
              highlight=False, soft_wrap=True)
    if pick is None:
        con.print("[red]no candidate passes the quality gate[/red]: FP16 stays the build")
    else:
        con.print(f"chosen: {pick.candidate.name}, predicted {pick.predicted_step_s:.2f} s/step "
                  f"({100 * (1 - pick.predicted_step_s / saving['float16_step_s']):.1f} % below FP16); rebuild: "
                  f"bin/harness convert PARTITION --precision {pick.precision_file} --out DIR",
                  highlight=False, soft_wrap=True)


# ---------------------------------------------------------------- CLI
