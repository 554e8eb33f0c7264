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
_DOTS = 60


def _svg(fig: Figure) -> str:
    FigureCanvasSVG(fig)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()


def sparkline(values: list, valid: list[bool], alarm: bool, band=None, width: int = 160, height: int = 35) -> str:
    """A trend of one figure as inline SVG (a few hundred bytes of text in the page, no file, no
    matplotlib: a lab's index has hundreds of them): its valid runs' values joined, the latest run a
    dot (red on a regression); `band` (collect.JudgedBand): the interval judged, shaded over the runs it
    judged, and the figure judged a rule across them."""
    points = [(i, v) for i, (v, ok) in enumerate(zip(values, valid)) if ok and v]
    if not points:
        return f'<svg class="spark" width="{width}" height="{height}" role="img"></svg>'
    ys = [v for _, v in points] + ([band.low, band.high, band.level] if band else [])
    # at least +-5 % of the middle in height: a steady series reads flat, not as its noise magnified
    middle = (max(ys) + min(ys)) / 2
    half = max((max(ys) - min(ys)) / 2 * 1.1, 0.05 * middle)
    span = max(len(values) - 1, 1)

    def x(i: float) -> float:
        return round(2 + (width - 4) * i / span, 1)

    def y(v: float) -> float:
        return round(height / 2 - (v - middle) / half * (height / 2 - 2), 1)

    line = " ".join(f"{x(i)},{y(v)}" for i, v in points)
    last = points[-1]
    colour = _INVALID if alarm else _VALID
    shaded = ""
    if band is not None:
        left, right = x(band.first - 0.5), x(band.last + 0.5)
        shaded = (f'<rect x="{left}" y="{y(band.high)}" width="{max(right - left, 1.5)}" '
                  f'height="{round(y(band.low) - y(band.high), 1)}" fill="{_BAND}" fill-opacity="0.2"/>'
                  f'<line x1="{left}" x2="{right}" y1="{y(band.level)}" y2="{y(band.level)}" stroke="{colour}"/>')
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f'{shaded}<polyline fill="none" stroke="{_VALID}" stroke-width="0.8" points="{line}"/>'
            f'<circle cx="{x(last[0])}" cy="{y(last[1])}" r="1.6" fill="{colour}"/></svg>')


def _ticks(times: list[str]) -> tuple[list[int], list[str]]:
    step = max(1, -(-len(times) // _MAX_TICKS))
    at = sorted(set(range(0, len(times), step)) | {len(times) - 1})
    return at, [datetime.fromisoformat(times[i]).strftime("%m-%d %H:%M") for i in at]


def series_plot(label: str, values: list, valid: list[bool], times: list[str], band,
                change_points: list[tuple[int, str]], stack_changes: list[tuple[int, str]],
                baselines: list[int]) -> str:
    """One figure of a series over its runs (x: run number, UTC dates as ticks): valid runs joined,
    INVALID runs apart (hollow red, not joined), the interval the latest verdict judged shaded over the
    runs it judged and the figure it judged a rule across them (`band`: collect.JudgedBand, red on a
    regression: then the rule lies past the shading), change points (red dashed rule, labelled with
    the shift), stack changes (grey dotted rule, labelled with what changed), baselines (green
    diamonds)."""
    # fixed margins: a constrained layout would draw every plot twice (a thousand plots for a lab's store)
    fig = Figure(figsize=(9.5, 2.6))
    fig.subplots_adjust(left=0.08, right=0.99, top=0.88, bottom=0.22)
    ax = fig.add_subplot()
    xs = range(len(values))
    ok = [(x, v) for x, v, good in zip(xs, values, valid) if good and v]
    if ok:
        # a dot per run while they can be told apart; past that each costs bytes and shows nothing
        ax.plot(*zip(*ok), color=_VALID, linewidth=1, marker="o" if len(ok) <= _DOTS else None, markersize=2.5,
                label="valid run")
    bad = [(x, v) for x, v, good in zip(xs, values, valid) if not good and v]
    if bad:
        ax.plot(*zip(*bad), linestyle="none", marker="o", markersize=5, markerfacecolor="none",
                markeredgecolor=_INVALID, label="INVALID run (left out)")
    if band is not None:
        span = (band.first - 0.5, band.last + 0.5)
        ax.fill_between(span, band.low, band.high, color=_BAND, alpha=0.2, linewidth=0, label="interval judged",
                        gid="judged-interval")
        ax.plot(span, (band.level, band.level), color=_INVALID if band.regression else _VALID, linewidth=2,
                label=f"figure judged ({band.runs} run{'s' if band.runs > 1 else ''})", gid="judged-figure")
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
