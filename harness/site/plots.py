"""The site's plots: matplotlib SVG files (no script, nothing fetched; they show with JavaScript off).

The SVG ids are salted with a fixed string and the files carry no date, so one store gives the same
files whatever the database it is read from.
"""
from __future__ import annotations

import io
from datetime import datetime

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

__all__ = ["sparkline", "series_plot", "fleet_plot"]

matplotlib.rcParams["svg.hashsalt"] = "anima-results-site"
# text as <text> (the page's own font), not a path per glyph: a quarter of the bytes and of the time
matplotlib.rcParams["svg.fonttype"] = "none"
_VALID, _INVALID, _CHANGE, _STACK, _BAND, _BASELINE = "#0969da", "#cf222e", "#cf222e", "#57606a", "#0969da", "#1a7f37"
_MAX_TICKS = 10


def _svg(fig: Figure) -> str:
    FigureCanvasSVG(fig)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def sparkline(values: list, valid: list[bool], alarm: bool) -> str:
    """A small trend of one figure: its valid runs' values, the latest run a dot (red on a regression)."""
    fig = Figure(figsize=(1.6, 0.35))
    ax = fig.add_axes((0, 0, 1, 1))
    points = [(i, v) for i, (v, ok) in enumerate(zip(values, valid)) if ok and v]
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, ys, color=_VALID, linewidth=0.8)
        ax.plot(xs[-1:], ys[-1:], "o", color=_INVALID if alarm else _VALID, markersize=2.5)
        # at least +-5 % of the middle in height: a steady series reads flat, not as its noise magnified
        middle = (max(ys) + min(ys)) / 2
        half = max((max(ys) - min(ys)) / 2 * 1.15, 0.05 * middle)
        ax.set_ylim(middle - half, middle + half)
    ax.set_axis_off()
    ax.margins(0.04, 0)
    return _svg(fig)


def _ticks(times: list[str]) -> tuple[list[int], list[str]]:
    step = max(1, -(-len(times) // _MAX_TICKS))
    at = sorted(set(range(0, len(times), step)) | {len(times) - 1})
    return at, [datetime.fromisoformat(times[i]).strftime("%m-%d %H:%M") for i in at]


def series_plot(label: str, values: list, valid: list[bool], times: list[str], bands: list,
                change_points: list[tuple[int, str]], stack_changes: list[tuple[int, str]],
                baselines: list[int]) -> str:
    """One figure of a series over its runs (x: run number, UTC dates as ticks): valid runs joined,
    INVALID runs apart (hollow red, not joined), the learned interval shaded, change points (red dashed
    rule, labelled with the shift), stack changes (grey dotted rule, labelled with what changed),
    baselines (green diamonds)."""
    # fixed margins: a constrained layout would draw every plot twice (a thousand plots for a lab's store)
    fig = Figure(figsize=(9.5, 2.6))
    fig.subplots_adjust(left=0.08, right=0.99, top=0.88, bottom=0.22)
    ax = fig.add_subplot()
    xs = range(len(values))
    ok = [(x, v) for x, v, good in zip(xs, values, valid) if good and v]
    if ok:
        ax.plot(*zip(*ok), color=_VALID, linewidth=1, marker="o", markersize=2.5, label="valid run")
    bad = [(x, v) for x, v, good in zip(xs, values, valid) if not good and v]
    if bad:
        ax.plot(*zip(*bad), linestyle="none", marker="o", markersize=5, markerfacecolor="none",
                markeredgecolor=_INVALID, label="INVALID run (left out)")
    if any(bands):      # NaN where a run had no interval (too few runs of its stack): the band breaks there
        nan = float("nan")
        ax.fill_between(list(xs), [b[0] if b else nan for b in bands], [b[1] if b else nan for b in bands],
                        color=_BAND, alpha=0.15, linewidth=0, step="mid", label="learned interval")
    marked = [(x, values[x]) for x in baselines if values[x]]
    if marked:
        ax.plot(*zip(*marked), linestyle="none", marker="D", markersize=6, color=_BASELINE, label="baseline")
    for x, text in change_points:
        ax.axvline(x - 0.5, color=_CHANGE, linestyle="--", linewidth=1.2)
        _label(ax, x, len(values), 0.97, f"change point {text}", _CHANGE, "top")
    for x, text in stack_changes:
        ax.axvline(x - 0.5, color=_STACK, linestyle=":", linewidth=1.5)
        _label(ax, x, len(values), 0.86, f"stack: {text}", _STACK, "top")
    at, labels = _ticks(times)
    ax.set_xticks(at, labels, rotation=30, ha="right", fontsize="x-small")
    ax.set_xlim(-1, max(len(values), 2))
    ax.set_ylabel(f"{label} [s]", fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="upper right", fontsize="x-small", ncols=4, frameon=False)
    return _svg(fig)


def _label(ax, x: int, runs: int, y: float, text: str, colour: str, va: str) -> None:
    """A rule's label beside it, right of the rule in the left half of the plot and left of it in the
    right half, kept out of the layout so a long label never squeezes the axes."""
    right = x < runs / 2
    note = ax.annotate(text, (x - 0.5, y), xycoords=("data", "axes fraction"), xytext=(3 if right else -3, 0),
                       textcoords="offset points", va=va, ha="left" if right else "right", fontsize="x-small",
                       color=colour, backgroundcolor=(1, 1, 1, 0.7))
    note.set_in_layout(False)


def fleet_plot(title: str, boards: dict[str, list[float]], reference: float | None, outliers: set[str]) -> str:
    """The boards of one model side by side: each board's valid step times in its window (one strip
    of dots, its mean a bar), the mean of the boards' means a rule (each board is judged against the others');
    an outlier board in red."""
    fig = Figure(figsize=(max(4.0, 1.1 * len(boards) + 2), 3.0), layout="constrained")
    ax = fig.add_subplot()
    for x, (board, values) in enumerate(boards.items()):
        colour = _INVALID if board in outliers else _VALID
        jitter = [x + 0.25 * ((i * 0.618) % 1 - 0.5) for i in range(len(values))]
        ax.plot(jitter, values, linestyle="none", marker="o", markersize=3, color=colour, alpha=0.6)
        if values:
            mean = sum(values) / len(values)
            ax.plot([x - 0.3, x + 0.3], [mean, mean], color=colour, linewidth=2.5)
    if reference:
        ax.axhline(reference, color=_STACK, linestyle="--", linewidth=1,
                   label="the boards' mean (each board is judged against the others')")
        ax.legend(loc="upper left", fontsize="x-small", frameon=False)
    ax.set_xticks(range(len(boards)), list(boards), rotation=15, ha="right", fontsize="small")
    ax.set_ylabel("denoise step [s]", fontsize="small")
    ax.set_title(title, fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return _svg(fig)
