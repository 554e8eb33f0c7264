"""`python -m harness trend`: step time and lifecycle time over the runs in the results store.

Two panels over the runs (x = run index, dates as tick labels): mean step seconds, and the per-step
lifecycle seconds stacked by stage (load, init, run, release) — on the board the load/init/release
share is the cost of the on-demand strategy, so a regression there shows apart from the NPU time.
Runs whose telemetry marked them invalid (throttled, clocks not pinned) are drawn hollow and hatched:
they stay visible but do not pass for real measurements.

The step-time panel draws one line per (board, backend, model, precision): a fault-injection or FP32
run is another experiment, not a point on the FP16 line. A change of the NPU stack's versions within a
line is marked (dotted rule, labelled with what changed), and each line shades its threshold band: from
the centre of its valid runs since the last version change up to the threshold the history verdict
learns from their spread (harness/results/verdict/decision.py; the fixed threshold while there are too few runs),
and its legend states that verdict as every verdict does: its threshold and the shift it could detect
against the promise (verdict.DETECT_PCT), or that it could detect none without a noise estimate.
A change point in a line (verdicts.change_points over its valid runs) is marked with a red triangle.
Several boards in the store draw one line each.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from ..core.atomic import atomic_path
from ..lifecycle.steptimes import STAGE_NAMES
from .records import ResultsError, Run
from .verdict.changes import change_points
from .verdict.decision import history_verdict
from .verdict.power import DETECT_PCT

__all__ = ["trend", "trend_rows", "group_of", "version_changes", "render_table", "DEFAULT_TREND_PNG"]

DEFAULT_TREND_PNG = Path("out/trend.png")
_STAGE_COLOURS = {"load": "tab:blue", "init": "tab:orange", "run": "tab:green", "release": "tab:red"}
_MAX_TICKS = 12


def trend_rows(runs: list[Run], board: str | None = None, backend: str | None = None) -> list[dict]:
    """One table row per run (optionally of one board / backend), in time order."""
    if not runs:
        raise ResultsError("the results store has no runs: nothing to plot (run the benchmark gate, "
                           "pytest -m benchmark, or `results import` another store's export)")
    chosen = [r for r in runs if (board is None or r.board_id == board)
              and (backend is None or r.key.backend == backend)]
    if not chosen:
        boards = sorted({r.board_id for r in runs})
        raise ResultsError(f"no runs of board '{board}' and backend '{backend}' in the store; boards present: {boards}")
    return [{
        "index": index,
        "time": run.time,
        "board": run.board_id,
        "backend": run.key.backend,
        "model": run.model,
        "precision": run.key.precision,
        "versions": run.key.versions,
        "valid": run.valid,
        "step_s": run.mean_step_s,
        "denoise_s": run.total_denoise_s,
        **{stage: run.stages.get(stage, 0.0) for stage in STAGE_NAMES},
    } for index, run in enumerate(chosen)]


def _date_label(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%m-%d %H:%M")


def _tick_positions(count: int) -> list[int]:
    # Every run gets a tick until labels would overlap; then an even spread that keeps the last run.
    if count <= _MAX_TICKS:
        return list(range(count))
    step = -(-count // _MAX_TICKS)
    return sorted(set(range(0, count, step)) | {count - 1})


def group_of(row: dict) -> tuple:
    return (row["board"], row["backend"], row["model"], row["precision"])


def version_changes(rows: list[dict]) -> list[tuple[dict, str]]:
    """(row, 'what changed') for each run whose versions differ from the previous run of its line."""
    last: dict[tuple, dict] = {}
    changes = []
    for row in rows:
        key = group_of(row)
        before = last.get(key)
        if before is not None and before != row["versions"]:
            what = ", ".join(f"{k} {before.get(k)}->{row['versions'].get(k)}"
                             for k in sorted(set(before) | set(row["versions"]))
                             if before.get(k) != row["versions"].get(k))
            changes.append((row, what))
        last[key] = row["versions"]
    return changes


def _band(rows: list[dict], changed_at: set[int], threshold_pct: float) -> tuple[float, float, float, str] | None:
    """(x from, centre, centre * (1 + threshold), the verdict in words) of one line, or None without
    valid runs. The threshold is the history verdict's on the latest valid run, learned from the
    spread of the valid runs since the last version change; its words say what it could detect."""
    start = max([r["index"] for r in rows if r["index"] in changed_at], default=rows[0]["index"])
    valid = [r["step_s"] for r in rows if r["valid"] and r["index"] >= start]
    if not valid:
        return None
    learned = history_verdict("step", valid[:-1], valid[-1]) if len(valid) > 1 else None
    ref = sorted(valid)[len(valid) // 2]
    if learned is None:
        return start, ref, ref * (1 + threshold_pct / 100), \
            f"the fixed {threshold_pct:g} % threshold: too few valid runs for a noise estimate, could detect no shift"
    return start, ref, ref * (1 + learned.threshold_pct / 100), replace(learned, detect_pct=DETECT_PCT).line()


def _plot_change_points(ax, members: list[dict], colour: str) -> None:
    valid = [r for r in members if r["valid"]]
    for index in change_points([r["step_s"] for r in valid]):
        ax.scatter([valid[index]["index"]], [valid[index]["step_s"]], marker="v", s=90, color="tab:red",
                   edgecolors=colour, zorder=4, label="change point")


def plot_step_time(ax, rows: list[dict], threshold_pct: float | None = None) -> None:
    changes = version_changes(rows)
    changed_at = {row["index"] for row, _ in changes}
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(group_of(row), []).append(row)
    colours = iter(["tab:blue", "tab:purple", "tab:orange", "tab:brown", "tab:olive", "tab:cyan", "tab:pink"] * 8)
    last_x = rows[-1]["index"]
    several_boards = len({key[0] for key in groups}) > 1
    for key, members in groups.items():
        colour = next(colours)
        label = "/".join(key[1:]) + (f" @ {key[0]}" if several_boards else "")
        ax.plot([r["index"] for r in members], [r["step_s"] for r in members], color=colour,
                linewidth=1.2, marker="o", markersize=4, zorder=2, label=label)
        _plot_change_points(ax, members, colour)
        band = _band(members, changed_at, threshold_pct) if threshold_pct else None
        if band:
            start, low, high, words = band
            ax.fill_between([start - 0.4, last_x + 0.4], low, high, color=colour, alpha=0.12, zorder=0,
                            label=f"threshold band ({key[1]}/{key[3]}): {words}")
    for row, what in changes:
        ax.axvline(row["index"] - 0.5, color="0.3", linestyle=":", linewidth=1, zorder=1)
        ax.annotate(what, (row["index"] - 0.45, 0.02), xycoords=("data", "axes fraction"), rotation=90,
                    fontsize="x-small", color="0.3", va="bottom")
    invalid = [r for r in rows if not r["valid"]]
    ax.scatter([r["index"] for r in invalid], [r["step_s"] for r in invalid], facecolors="none",
               edgecolors="tab:red", linewidths=1.5, s=60, zorder=3, label="invalid run (telemetry)")
    ax.set_ylabel("mean step time [s]")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")


def _plot_lifecycle(ax, rows: list[dict]) -> None:
    bottom = [0.0] * len(rows)
    for stage in STAGE_NAMES:
        heights = [r[stage] for r in rows]
        colour = _STAGE_COLOURS[stage]
        bars = ax.bar([r["index"] for r in rows], heights, bottom=bottom, width=0.7, color=colour,
                      edgecolor=colour, label=stage)
        for bar, row in zip(bars, rows):
            if not row["valid"]:
                bar.set_fill(False)
                bar.set_hatch("//")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("lifecycle time per step [s]")
    ax.grid(True, axis="y", alpha=0.3)
    # Headroom above the tallest stack so the legend never hides a bar.
    ax.set_ylim(0, max(max(bottom), 1e-9) * 1.25)
    ax.legend(loc="upper left", fontsize="small", ncols=4)


def trend(runs: list[Run], out_png: str | Path, board: str | None = None, backend: str | None = None,
          threshold_pct: float | None = 10.0) -> list[dict]:
    """Write the two-panel trend PNG (atomically) and return the table rows."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = trend_rows(runs, board, backend)
    fig = Figure(figsize=(min(24.0, max(8.0, 0.35 * len(rows))), 7), layout="constrained")
    FigureCanvasAgg(fig)
    ax_step, ax_life = fig.subplots(2, 1, sharex=True)
    plot_step_time(ax_step, rows, threshold_pct)
    _plot_lifecycle(ax_life, rows)
    ticks = _tick_positions(len(rows))
    ax_life.set_xticks(ticks, [_date_label(rows[i]["time"]) for i in ticks], rotation=45, ha="right")
    ax_life.set_xlabel("run (UTC date)")
    boards = sorted({r["board"] for r in rows})
    fig.suptitle(f"benchmark trend: {len(rows)} runs, board {', '.join(boards)}")
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return rows


def render_table(rows: list[dict], console=None) -> None:
    """Print the rows as a rich table (stdout unless a console is given)."""
    from rich.table import Table

    from ..report.terminal import console as make_console

    models = ", ".join(sorted({r["model"] for r in rows}))
    title = f"benchmark runs: {models} (seconds; lifecycle stages per step)"
    table = Table(title=title, box=None, padding=(0, 1, 0, 0), pad_edge=False)
    for header in ("#", "UTC time", "board", "backend", "precision", "valid"):
        table.add_column(header, no_wrap=header == "UTC time")
    for header in ("step s", "total s", *STAGE_NAMES):
        table.add_column(header, justify="right")
    for r in rows:
        # Month-day like the plot's tick labels; keeps the table inside an 80-column log.
        table.add_row(str(r["index"]), _date_label(r["time"]), r["board"], r["backend"], r["precision"],
                      "yes" if r["valid"] else "[bold red]NO[/bold red]", f"{r['step_s']:.3f}",
                      f"{r['denoise_s']:.2f}", *(f"{r[s]:.3f}" for s in STAGE_NAMES))
    (console or make_console(stderr=False)).print(table)
