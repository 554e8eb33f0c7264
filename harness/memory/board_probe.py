"""The planner's assumptions measured on a board: `harness probe-board`.

The planner (plan_space.py) models every case but the measured one from figures the board write-up
never took ([sim] and [plan] of boards/data/rock5c-anima.toml). This probe takes them, in minutes,
through any backend that honours a core mask (rknnlite on the board; board-sim here, which must give
back the figures it was configured with):

  overlap    one context's inference on core 0 looped in one thread while another context on the
             same core loops through load/init/release in a second: the share of the two loops'
             alone-rates they keep together. 2 means the lifecycle runs beside inference (prefetch
             can hide it), 1 that they take turns on the core ([sim] lifecycle_holds_core).
  streams    one context running both CFG streams on core 0 against two one-stream contexts on
             cores 0 and 1 at once (stream-per-core), and one context on 0_1_2 against core 0.
  lifecycle  load + init + release of a branch, a block and a blocks:K context against the weight
             MiB each holds: a fixed part per context and a part per MiB ([plan] lifecycle_model).
  memory     PSS added per context held, less its file-backed part, and device memory (dma-buf)
             where the board exposes it.

Figures are in board terms: board-sim's seconds and bytes are divided by its time and memory
scales. Each figure is repeated until its 95 % interval is within --tolerance (5 %) of it or its
--budget seconds end (harness/memory/repeats.py); `intervals` in the data file says, per figure, its
interval, its repeats, whether it is within, and the repeats it would need when it is not. The result
is a data file (`anima-board-probe/1`) that `harness plan --measured` reads.
"""
from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from scipy import stats

from ..backends.base import BackendOptions, create_context
from ..partition.manifest import SubgraphEntry
from .assumptions import MEASURED_FORMAT
from .repeats import TOLERANCE, Interval, converge

__all__ = ["Subject", "ProbeSetup", "probe_board", "host_bytes", "HOLDS_CORE_BELOW", "noise_lines"]

MiB = 2 ** 20
# The two loops keep this much of their alone-rates together or less: they take turns on the core.
# Halfway between running fully beside each other (2) and strictly in turn (1).
HOLDS_CORE_BELOW = 1.5


@dataclass(frozen=True)
class Subject:
    """One subgraph the probe loads: its file, its entry (input shapes) and its weight MiB."""
    kind: str            # "ffn", "self_attn", "block", "blocks:4", ...
    path: Path
    entry: SubgraphEntry


@dataclass(frozen=True)
class ProbeSetup:
    options: BackendOptions       # context options without core_mask
    time_scale: float = 1.0       # seconds here per board second
    memory_scale: float = 1.0     # bytes here per board byte
    window_s: float = 40.0        # board seconds each overlap loop runs
    repeats: int = 5
    cores: bool = True            # the backend honours a core mask
    telemetry_root: Path = Path("/")
    budget_s: float = 20.0        # wall seconds each figure may repeat for, past `repeats`
    tolerance: float = TOLERANCE  # the 95 % interval's half-width each figure is repeated to


def _inputs(entry, rows: int | None = None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in entry.inputs]
    return [a[:rows] for a in arrays] if rows else arrays


def _context(setup: ProbeSetup, subject: Subject, core_mask: str | None, tag: str):
    options = setup.options.with_settings({"core_mask": core_mask}) if core_mask else setup.options
    return create_context(options, f"{subject.entry.label} probe {tag}")


@contextlib.contextmanager
def _loaded(setup: ProbeSetup, subject: Subject, core_mask: str | None, tag: str):
    ctx = _context(setup, subject, core_mask, tag)
    try:
        ctx.load(subject.path)
        ctx.init()
        yield ctx
    finally:
        ctx.release()


def _cycle(setup: ProbeSetup, subject: Subject, core_mask: str | None, tag: str) -> float:
    """Seconds of one load + init + release: the board's three calls, not the object around them."""
    ctx = _context(setup, subject, core_mask, tag)
    start = time.perf_counter()
    try:
        ctx.load(subject.path)
        ctx.init()
    finally:
        ctx.release()
    return time.perf_counter() - start


def _timed_runs(ctx, inputs, count: int) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        ctx.run(inputs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------------------- overlap

def measure_overlap(setup: ProbeSetup, runner: Subject, cycler: Subject) -> dict:
    """The two loops' rates together against alone (see the module's docstring), one window a repeat."""
    window = setup.window_s * setup.time_scale
    with _loaded(setup, runner, "0", "runner") as ctx:
        inputs = _inputs(runner.entry)
        run_alone = _timed_runs(ctx, inputs, setup.repeats)
        cycle_alone = statistics.median(_cycle(setup, cycler, "0", "cycler") for _ in range(setup.repeats))
        last: dict = {}

        def one_window() -> tuple[float]:
            runs, cycles, elapsed = _window(setup, ctx, inputs, cycler, window)
            last.update(runs=runs, cycles=cycles, elapsed=elapsed)
            return (runs * run_alone / elapsed + cycles * cycle_alone / elapsed,)
        kept = converge(one_window, ("rates_kept",), 2, setup.budget_s, setup.tolerance)["rates_kept"]
    return {"runner": runner.kind, "cycler": cycler.kind, "run_alone_s": run_alone / setup.time_scale,
            "lifecycle_alone_s": cycle_alone / setup.time_scale, "window_s": last["elapsed"] / setup.time_scale,
            "runs_together": last["runs"], "lifecycles_together": last["cycles"], "rates_kept": kept.value,
            "lifecycle_holds_core": bool(kept.value < HOLDS_CORE_BELOW), "intervals": {"rates_kept": kept}}


def _window(setup: ProbeSetup, ctx, inputs, cycler: Subject, window: float) -> tuple[int, int, float]:
    """(runs, lifecycles, seconds) of one window with the lifecycle loop beside the inference loop."""
    stop = threading.Event()
    cycles = []

    def cycle_loop():
        while not stop.is_set():
            cycles.append(_cycle(setup, cycler, "0", "cycler"))
    thread = threading.Thread(target=cycle_loop, name="probe-lifecycle")
    runs, start = 0, time.perf_counter()
    thread.start()
    try:
        while time.perf_counter() - start < window:
            ctx.run(inputs)
            runs += 1
    finally:
        stop.set()
        thread.join()
    return runs, len(cycles), time.perf_counter() - start


# ------------------------------------------------------------------------------- streams

def _together(jobs) -> float:
    """Wall seconds of callables started at once, one thread each."""
    barrier = threading.Barrier(len(jobs) + 1)
    threads = [threading.Thread(target=lambda j=j: (barrier.wait(), j())) for j in jobs]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def measure_streams(setup: ProbeSetup, both: Subject, one: Subject) -> dict:
    """Both streams on core 0 against one stream each on cores 0 and 1 at once; 0_1_2 against 0. Each
    repeat times one call of each, so the ratios are taken call by call."""
    times: dict[str, list[float]] = {"one": [], "all": [], "pair": []}
    with contextlib.ExitStack() as stack:
        core0 = stack.enter_context(_loaded(setup, both, "0", "both streams"))
        cores = stack.enter_context(_loaded(setup, both, "0_1_2", "all cores"))
        a = stack.enter_context(_loaded(setup, one, "0", "stream 0"))
        b = stack.enter_context(_loaded(setup, one, "1", "stream 1"))
        inputs, rows = _inputs(both.entry), _inputs(one.entry)

        def sample() -> tuple[float, float]:
            times["one"].append(_timed_runs(core0, inputs, 1))
            times["all"].append(_timed_runs(cores, inputs, 1))
            times["pair"].append(_together([lambda: a.run(rows), lambda: b.run(rows)]))
            return times["one"][-1] / times["pair"][-1], times["one"][-1] / times["all"][-1]
        found = converge(sample, ("stream_per_core_speedup", "multi_core_speedup"), setup.repeats,
                         setup.budget_s, setup.tolerance)
    mean = {k: statistics.fmean(v) / setup.time_scale for k, v in times.items()}
    return {"one_core_both_streams_s": mean["one"], "two_cores_one_stream_each_s": mean["pair"],
            "stream_per_core_speedup": found["stream_per_core_speedup"].value, "all_cores_s": mean["all"],
            "multi_core_speedup": found["multi_core_speedup"].value, "intervals": found}


# ------------------------------------------------------------------------------- lifecycle

def measure_lifecycle(setup: ProbeSetup, subjects: list[Subject], weight_mib) -> dict:
    """Median load + init + release of each subject against its weight MiB, and the least-squares
    line the planner's [plan] lifecycle_model is (the same fit, so the two compare)."""
    rows, intervals = [], {}
    for subject in subjects:
        _cycle(setup, subject, None, "first")       # a runtime's one-off first build is no board stage
        # the mean, not the median: a late wake-up is paid back by the next stages (board-sim's clock)
        found = converge(lambda s=subject: (_cycle(setup, s, None, "lifecycle") / setup.time_scale,),
                         ("seconds",), setup.repeats, setup.budget_s, setup.tolerance)["seconds"]
        intervals[subject.kind] = found
        rows.append({"kind": subject.kind, "weight_mib": float(weight_mib(subject)), "seconds": found.value})
    x = np.array([r["weight_mib"] for r in rows])
    y = np.array([r["seconds"] for r in rows])
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(x) - 2) * fit.stderr if len(x) > 2 else float("inf")
    return {"contexts": rows, "fit": [float(fit.intercept), float(fit.slope)],
            "per_mib_interval": [float(fit.slope - half), float(fit.slope + half)], "intervals": intervals}


# ------------------------------------------------------------------------------- memory

def _dma_buf_bytes(root: Path) -> int | None:
    """This process's dma-buf bytes from /proc/self/fdinfo (a board's NPU buffers), None where no
    descriptor is a dma-buf or fdinfo cannot be read."""
    fdinfo = root / "proc" / str(os.getpid()) / "fdinfo"
    total, seen = 0, False
    try:
        entries = list(fdinfo.iterdir())
    except OSError:
        return None
    for entry in entries:
        with contextlib.suppress(OSError):
            text = entry.read_text()
            if "exp_name:" in text:
                seen = True
                total += next((int(line.split()[1]) for line in text.splitlines() if line.startswith("size:")), 0)
    return total if seen else None


def _pss_not_file(pid: int) -> int:
    """PSS of one process less its file-backed part (Pss_Anon + Pss_Shmem, kernel 5.9 on), in bytes.

    The file-backed part is shared libraries' pages, and a process's share of them moves whenever
    another process maps or unmaps the same library: a probe beside a busy test run once read 114
    MiB per context where the board-sim gives 138. A context's host memory is anonymous (the
    runtime's own copies and buffers), so leaving the file-backed pages out loses nothing of it.
    """
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) * 1024
    if "Pss_File" not in fields:            # an older kernel: the whole PSS, noisier
        return fields["Pss"]
    return fields["Pss"] - fields["Pss_File"]


def host_bytes() -> int:
    """_pss_not_file of this process and its descendants (a runtime's own workers)."""
    total = _pss_not_file(os.getpid())
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(OSError):          # ended since the listing: it holds nothing now
            total += _pss_not_file(child.pid)
    return total


def measure_memory(setup: ProbeSetup, subject: Subject, held: int = 4) -> dict:
    """Host bytes (host_bytes) and dma-buf (device) bytes added per context, `held` contexts of one
    subgraph at once, repeated (at least 3 times) as every figure is."""
    with _loaded(setup, subject, None, "warm-up"):       # the runtime's one-off start-up is not a context's
        pass
    devices: list[float | None] = []

    def sample() -> tuple[float]:
        before, device_before = host_bytes(), _dma_buf_bytes(setup.telemetry_root)
        with contextlib.ExitStack() as stack:
            for k in range(held):
                stack.enter_context(_loaded(setup, subject, None, f"held {k}"))
            after, device_after = host_bytes(), _dma_buf_bytes(setup.telemetry_root)
        devices.append(None if device_after is None else
                       (device_after - (device_before or 0)) / held / MiB / setup.memory_scale)
        return ((after - before) / held / MiB / setup.memory_scale,)
    host = converge(sample, ("host_mib",), min(3, setup.repeats), setup.budget_s, setup.tolerance)["host_mib"]
    out: dict[str, Any] = {"contexts_held": held, "host_mib": host.value, "intervals": {"host_mib": host}}
    if devices[-1] is not None:
        device = statistics.fmean(d for d in devices if d is not None)
        out.update(device_mib=device, host_device_mib=[host.value, device])
    else:
        out["device"] = f"not measured: no dma-buf descriptor under {setup.telemetry_root / 'proc'}"
    return out


# ------------------------------------------------------------------------------- all of it

def probe_board(setup: ProbeSetup, subjects: dict[str, Subject], one_stream: Subject | None, weight_mib,
                say=print) -> dict:
    """Every measurement this backend allows; the measured data file's tables."""
    data: dict[str, Any] = {"format": MEASURED_FORMAT,
            "probe": {"backend": setup.options.backend, "host": socket.gethostname(),
                      "date": datetime.now(UTC).isoformat(timespec="seconds"),
                      "time_scale": setup.time_scale, "memory_scale": setup.memory_scale}}
    if setup.cores:
        say("probe-board: overlap (an inference on core 0 beside another context's lifecycle on it)")
        data["overlap"] = measure_overlap(setup, subjects["ffn"], subjects["self_attn"])
        if one_stream is not None:
            say("probe-board: streams (two cores at once against one; cores 0_1_2 against 0)")
            data["streams"] = measure_streams(setup, subjects["ffn"], one_stream)
    else:
        data["probe"]["not_measured"] = f"{setup.options.backend} has no NPU cores: overlap and streams"
    say(f"probe-board: lifecycle against weight size ({', '.join(subjects)})")
    data["lifecycle"] = measure_lifecycle(setup, list(subjects.values()), weight_mib)
    say("probe-board: memory per context")
    data["memory"] = measure_memory(setup, subjects["ffn"])
    data["intervals"] = {f"{table}.{name}": interval.as_dict() for table in ("overlap", "streams", "lifecycle",
                                                                              "memory") if table in data
                         for name, interval in data[table].pop("intervals").items()}
    return data


def noise_lines(data: dict) -> list[str]:
    """Which figures are within the tolerance and which are not (with the repeats they would need)."""
    found = {name: Interval(**i) for name, i in data.get("intervals", {}).items()}
    inside = [f"{name} {i.text()}" for name, i in found.items() if i.within]
    outside = [f"{name} {i.text()}" for name, i in found.items() if not i.within]
    return ([f"within tolerance: {'; '.join(inside)}"] if inside else []) + \
        [f"NOT within tolerance: {line}" for line in outside]
