"""The quality gate's thresholds of one model, derived from its own cases (`harness goldens thresholds`).

Cases are prompts x seeds: every distinct prompt (or text embedding) and CFG of the model's golden cases
of one sampler, each rendered from every given seed. Each case runs through FP32, FP16 and FP16 + FFN
W8A8 partitions on onnxruntime. FP16 vs FP32 stands in for a board's FP16 run against an FP16 golden
made elsewhere (rounding-level differences the gate must pass); W8A8 vs FP16 is the variant the gate
must fail. Per metric, as an error (1 - SSIM, 1 - cosine, and the MSE a PSNR stands for: smaller is
better), the bar sits at the geometric mean of the worst FP16 error and the best W8A8 error, so the
same factor (the margin) is left on each side. A metric whose rounded bar does not leave a factor
above 1 on both sides refuses the whole derivation: nothing is written.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.atomic import atomic_write_text
from ..core.errors import ConfigError, HarnessError
from ..partition.onnx_export import ExportSettings, export_partition
from ..runtime.run import RunRequest, run_partitioned
from .cases import GoldenCase, case_inputs
from .quality import QualityResult, compare, compare_latents

__all__ = ["VARIANTS", "PAIRS", "NoSeparation", "Bar", "threshold_cases", "measure", "bars", "write_bars",
           "case_lines", "bar_lines"]

# name -> (exported precision, simulated quantisation)
VARIANTS = {"float32": ("float32", None), "float16": ("float16", None), "w8a8": ("float16", "w8a8-ffn")}
FLOAT16, W8A8 = "float16 vs float32", "w8a8 vs float16"
PAIRS = {FLOAT16: ("float16", "float32"), W8A8: ("w8a8", "float16")}
# the metrics the quality gate judges, per kind of golden (cases.toml keys)
GATED = {"image": ("ssim", "psnr"), "latent": ("ssim", "psnr", "cosine")}
LABELS = {"ssim": "1-SSIM", "psnr": "MSE (PSNR)", "cosine": "1-cosine"}


class NoSeparation(HarnessError):
    """FP16 and W8A8 errors overlap on a gated metric: no bar passes one and fails the other."""
    exit_code = 1


def threshold_cases(cases: list[GoldenCase], seeds: list[int], sampler: str) -> list[GoldenCase]:
    """Every distinct (prompt or text embedding, CFG, steps) of the `sampler` cases x every seed."""
    distinct: dict[tuple, GoldenCase] = {}
    for case in cases:
        key = (case.prompt, case.text_emb, case.uncond_text_emb, case.cfg, case.steps)
        if case.sampler == sampler:
            distinct.setdefault(key, case)
    if not distinct:
        raise ConfigError(f"--sampler {sampler}: no golden case of that sampler")
    return [replace(c, name=f"{c.name}-s{seed}", seed=seed) for c in distinct.values() for seed in seeds]


def errors(q: QualityResult) -> dict:
    """{(kind, metric): error}: smaller is better; PSNR as the MSE over the data range squared."""
    out = {(q.kind, "ssim"): 1.0 - q.ssim, (q.kind, "psnr"): 10.0 ** (-q.psnr / 10.0)}
    if q.cosine is not None:
        out[(q.kind, "cosine")] = 1.0 - q.cosine
    return out


def measure(bundle, cases: list[GoldenCase], golden_dir: Path, on_row=None) -> list[dict]:
    """One row per case and pair: {"case", "pair", "errors": {(kind, metric): error}}."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="thresholds-") as tmp:
        parts = {name: Path(tmp) / name for name in VARIANTS}
        for name, (precision, quant) in VARIANTS.items():
            export_partition(bundle.weights_source, bundle.cfg, parts[name],
                             ExportSettings(precision=precision, fake_quant=quant))
        for case in cases:
            inputs = case_inputs(case, bundle.cfg, golden_dir)
            runs = {name: run_partitioned(RunRequest(bundle, parts[name], "onnxruntime", inputs.prompt,
                                                     inputs.settings, text_embs=inputs.text_embs))
                    for name in VARIANTS}
            for pair, (a, b) in PAIRS.items():
                found = errors(compare_latents(runs[a].latent, runs[b].latent))
                if runs[a].image is not None:
                    found.update(errors(compare(runs[a].image, runs[b].image)))
                rows.append({"case": case.name, "pair": pair, "errors": found})
                if on_row:
                    on_row(rows[-1])
    return rows


@dataclass(frozen=True)
class Bar:
    """One metric's measured ranges and its bar (error and cases.toml value) with the margin each side."""
    kind: str
    metric: str
    cases: int
    float16: tuple[float, float]     # best, worst error of FP16 vs FP32
    w8a8: tuple[float, float]        # best, worst error of W8A8 vs FP16
    error: float                     # the bar as an error, rounded as cases.toml states it
    value: float                     # the bar as cases.toml states it: SSIM or cosine minimum, PSNR in dB
    gated: bool

    @property
    def key(self) -> str:
        return f"{self.metric}_min"

    @property
    def margin_float16(self) -> float:
        return self.error / max(self.float16[1], 1e-300)

    @property
    def margin_w8a8(self) -> float:
        return self.w8a8[0] / self.error

    @property
    def separates(self) -> bool:
        return self.margin_float16 > 1.0 and self.margin_w8a8 > 1.0


def gate_value(metric: str, error: float) -> tuple[float, float]:
    """(error, value) with the value rounded as cases.toml states it: 2 significant digits of 1 - SSIM or
    1 - cosine, PSNR to 0.1 dB; the error is the rounded value's, so the margins are the written bar's."""
    if metric == "psnr":
        db = round(-10.0 * math.log10(error), 1)
        return 10.0 ** (-db / 10.0), db
    exponent = math.floor(math.log10(error))
    rounded = round(error, 1 - exponent)
    return rounded, round(1.0 - rounded, 2 - exponent)


def bars(rows: list[dict], kind: str) -> list[Bar]:
    """Per metric the geometric-mean bar; the metrics the gate judges on `kind` first."""
    out = []
    for metric_key in rows[0]["errors"]:
        float16 = [r["errors"][metric_key] for r in rows if r["pair"] == FLOAT16]
        w8a8 = [r["errors"][metric_key] for r in rows if r["pair"] == W8A8]
        # errors of 0 (identical runs) stay positive: a bar of 0 is one nothing but identity passes
        error, value = gate_value(metric_key[1], math.sqrt(max(max(float16), 1e-300) * max(min(w8a8), 1e-300)))
        out.append(Bar(metric_key[0], metric_key[1], len(float16), (min(float16), max(float16)),
                       (min(w8a8), max(w8a8)), error, value,
                       metric_key[0] == kind and metric_key[1] in GATED[kind]))
    return sorted(out, key=lambda b: (not b.gated, -b.margin_float16))


def _say(bar: Bar, seeds: list[int]) -> str:
    """The inline comment beside a written bar: the ranges it was placed between and its margins."""
    if bar.metric == "psnr":
        between = f"FP16 vs FP32 >= {_db(bar.float16[1]):.1f} dB, W8A8 vs FP16 <= {_db(bar.w8a8[0]):.1f} dB"
    else:
        between = f"{LABELS[bar.metric]} FP16 vs FP32 <= {bar.float16[1]:.2e}, W8A8 vs FP16 >= {bar.w8a8[0]:.2e}"
    return (f"{between}: x{bar.margin_float16:.1f} / x{bar.margin_w8a8:.1f} "
            f"({bar.cases} cases, seeds {','.join(map(str, seeds))}; harness goldens thresholds)")


def _db(error: float) -> float:
    return -10.0 * math.log10(max(error, 1e-300))


def write_bars(path: Path, sampler: str, written: list[Bar], seeds: list[int]) -> list[str]:
    """Put the bars in cases.toml (comments and layout kept), atomically: into [defaults] when every
    case that takes its thresholds from there is of `sampler`, else into each `sampler` case. Returns
    where they went ("[defaults]" or case names)."""
    import tomlkit
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    defaults = doc.setdefault("defaults", tomlkit.table())
    keys = [bar.key for bar in written]
    mine, others_inherit = [], False
    for entry in doc.get("case", []):
        if entry.get("sampler", defaults.get("sampler")) == sampler:
            mine.append(entry)
        elif not all(key in entry for key in keys):
            others_inherit = True
    targets = [e for e in mine if others_inherit or any(key in e for key in keys)]
    if any(all(e is not t for t in targets) for e in mine):
        targets.append(defaults)
    for table in targets:
        for bar in written:
            table[bar.key] = tomlkit.item(bar.value).comment(_say(bar, seeds))
    atomic_write_text(path, tomlkit.dumps(doc))
    return ["[defaults]" if t is defaults else f"[[case]] {t['name']}" for t in targets]


def case_lines(row: dict) -> str:
    """One measured case and pair: every error."""
    return f"{row['case']:16s} {row['pair']:18s} " + "  ".join(
        f"{kind} {LABELS[metric]} {error:.3e}" for (kind, metric), error in row["errors"].items())


def bar_lines(table: list[Bar]) -> list[str]:
    """The table: metric, FP16 range, W8A8 range, the bar and its cases.toml value, margin each side."""
    lines = [f"{'metric':20s} {'FP16 vs FP32':>20s} {'W8A8 vs FP16':>20s}  {'bar':>9s}  "
             f"{'cases.toml':24s} margins"]
    for b in table:
        value = f"{b.key} = {b.value!r}" if b.gated else "(not gated)"
        lines.append(f"{b.kind + ' ' + LABELS[b.metric]:20s} {b.float16[0]:.2e}..{b.float16[1]:.2e} "
                     f"{b.w8a8[0]:.2e}..{b.w8a8[1]:.2e}  {b.error:.2e}  {value:24s} "
                     f"x{b.margin_float16:.2f} / x{b.margin_w8a8:.2f}")
    return lines
