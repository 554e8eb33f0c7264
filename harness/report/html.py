"""A self-contained HTML report of one run: the summary's tables plus pictures, every image inlined as
a data: URI so the single file can be attached, mailed or opened from an artifact zip offline.

Pictures: per quality case golden / obtained / diff heat map thumbnails (nearest-neighbour upscaled,
so single-pixel differences stay visible), the benchmark trend and the memory curve (PSS added and
MemAvailable over the run, with the guard's floor).
"""
from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_write_text
from .summary import MiB, bench_rows, gate_rows, memory_table, quality_rows, verdict_line

__all__ = ["write_html_report"]

THUMB_PX = 160
_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #ddd}
.passed{color:#1a7f37}.failed{color:#cf222e}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left}
th{background:#f6f8fa} .meta{color:#57606a;font-size:13px}
td.passed,td.pass{color:#1a7f37;font-weight:600} td.failed,td.fail{color:#cf222e;font-weight:600}
td.error{color:#9a6700;font-weight:600}
td.skipped{color:#9a6700;font-weight:600}
figure{display:inline-block;margin:0 12px 12px 0;text-align:center;font-size:12px}
""" + f"img.thumb{{width:{THUMB_PX}px;height:{THUMB_PX}px;image-rendering:pixelated;border:1px solid #d0d7de}}\n" + """\
img.plot{max-width:100%;border:1px solid #d0d7de}
"""


def _png_bytes(array_uint8: np.ndarray) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(array_uint8).save(buf, format="PNG")
    return buf.getvalue()


def thumbnail_png(image: np.ndarray, size: int = THUMB_PX) -> bytes:
    """A float [H, W, 3] image in [0, 1] as a PNG of about `size` px, upscaled by whole pixels."""
    from ..core.imageio import to_uint8
    scale = max(1, size // max(image.shape[:2]))
    big = np.repeat(np.repeat(to_uint8(image), scale, axis=0), scale, axis=1)
    return _png_bytes(big)


def diff_thumbnail_png(obtained: np.ndarray, golden: np.ndarray, size: int = THUMB_PX) -> bytes:
    """|obtained - golden| summed over RGB, scaled to its own maximum (so FP16-level diffs show)."""
    from matplotlib import colormaps
    diff = np.abs(obtained.astype(np.float64) - golden.astype(np.float64)).sum(axis=-1)
    norm = diff / max(float(diff.max()), 1e-12)
    rgb = colormaps["magma"](norm)[..., :3]
    return thumbnail_png(rgb, size)


def _figure_png(draw) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 3), layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def memory_curve_png(samples_file: str | Path) -> bytes:
    """PSS added over the first sample and MemAvailable against the guard's floor, over time."""
    data = json.loads(Path(samples_file).read_text(encoding="utf-8"))
    samples, summary = data["samples"], data["summary"]
    if not samples:
        raise ValueError(f"{samples_file}: no memory samples")
    t0, pss0 = samples[0]["t"], samples[0]["pss"]

    def draw(fig):
        ax = fig.subplots()
        t = [s["t"] - t0 for s in samples]
        ax.plot(t, [(s["pss"] - pss0) / MiB for s in samples], color="tab:blue", label="PSS added [MiB]")
        ax.set_xlabel("seconds")
        ax.set_ylabel("PSS added [MiB]", color="tab:blue")
        right = ax.twinx()
        right.plot(t, [s["mem_available"] / MiB for s in samples], color="tab:green", label="MemAvailable")
        right.axhline(summary["floor_bytes"] / MiB, color="tab:red", linestyle="--", label="guard floor")
        right.set_ylabel("MemAvailable [MiB]", color="tab:green")
        right.legend(loc="lower right", fontsize="small")
        ax.set_title(f"memory during {Path(samples_file).stem}")
    return _figure_png(draw)


def _img(png: bytes, cls: str, alt: str) -> str:
    return (f'<img class="{cls}" alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')


_WORDS = {"passed": "passed", "failed": "FAILED", "error": "ERROR", "skipped": "skipped", "pass": "pass",
          "fail": "FAIL"}


def _td(cell) -> str:
    # Verdict words get a colour class (no emoji: a headless board browser may lack the font).
    text = str(cell)
    cls = next((k for k, v in _WORDS.items() if v == text), None)
    return f'<td class="{cls}">{html.escape(text)}</td>' if cls else f"<td>{html.escape(text)}</td>"


def _html_table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _quality_pictures(quality: list[dict]) -> str:
    parts = []
    for q in quality:
        if q.get("kind", "image") != "image":
            continue        # a latent gate (no decoder): no picture to show
        try:
            golden = np.load(q["golden_npy"], allow_pickle=False)
            obtained = np.load(q["obtained_npy"], allow_pickle=False)
        except (OSError, ValueError, KeyError, TypeError):
            continue        # no arrays to show (e.g. the run failed before an image existed)
        figures = [(thumbnail_png(golden), "golden"), (thumbnail_png(obtained), "obtained"),
                   (diff_thumbnail_png(obtained, golden), "|obtained - golden| (own scale)")]
        verdict = "pass" if q["passed"] else "FAIL"
        parts.append(f'<h3>{html.escape(q["case"])}: SSIM {q["ssim"]:.6f}, PSNR {q["psnr"]:.2f} dB ({verdict})</h3>'
                     + "".join(f"<figure>{_img(png, 'thumb', cap)}<figcaption>{html.escape(cap)}"
                               f"</figcaption></figure>" for png, cap in figures))
    return "".join(parts)


def html_report(data: dict, trend_png: bytes | None = None, memory_pngs: Sequence[bytes] = ()) -> str:
    outcome = data["outcome"]
    run = data.get("run", {})
    meta = " · ".join(f"{k} {html.escape(str(v))}" for k, v in run.items() if v)
    body = [f'<h1 class="{outcome}">Anima NPU acceptance: {html.escape(verdict_line(data))}</h1>',
            f'<p class="meta">{meta}</p>',
            "<h2>Gates</h2>",
            _html_table(["test", "result", "time", "message"], gate_rows(data["tests"], _WORDS, code=""))]
    if data.get("quality"):
        body += ["<h2>Quality against the goldens</h2>",
                 _html_table(["case", "SSIM", "threshold", "PSNR", "threshold", "verdict"],
                             quality_rows(data["quality"], _WORDS)),
                 _quality_pictures(data["quality"])]
    if data.get("benchmarks"):
        body += ["<h2>Benchmark against the baseline</h2>",
                 _html_table(["case", "mean denoise", "baseline", "delta", "threshold", "comparison", "clocks"],
                             bench_rows(data["benchmarks"]))]
        body += [f"<p>{html.escape(b['comparison']['message'])}</p>" for b in data["benchmarks"]]
        body += [f'<p>{html.escape(b["case"])} on the results site: <a href="{html.escape(b["comparison"]["site"])}">'
                 f'{html.escape(b["comparison"]["site"])}</a></p>'
                 for b in data["benchmarks"] if b["comparison"].get("site")]
    if trend_png:
        body += ["<h2>Trend</h2>", _img(trend_png, "plot", "benchmark trend")]
    if data.get("slowest"):
        body += ["<h2>Slowest subgraphs (all stages, per step)</h2>",
                 _html_table(["subgraph", "block", "branch", "seconds per step"],
                             [[s["subgraph"], s["block"], s["branch"], f"{s['seconds_per_step']:.4f}"]
                              for s in data["slowest"]])]
    if memory_pngs or data.get("memory"):
        body.append("<h2>Memory</h2>")
        if data.get("memory"):
            body.append(_html_table(*memory_table(data["memory"])))
        body += [_img(png, "plot", "memory curve") for png in memory_pngs]
    body += [f"<p>{html.escape(line)}</p>" for line in data.get("baselines", [])]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Anima NPU acceptance: {html.escape(verdict_line(data))}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_html_report(path: str | Path, data: dict, trend_png: bytes | None = None,
                      memory_files: Sequence = ()) -> Path:
    pngs = []
    for f in memory_files:
        try:
            pngs.append(memory_curve_png(f))
        except (OSError, ValueError, KeyError):
            continue
    atomic_write_text(path, html_report(data, trend_png, pngs))
    return Path(path)
