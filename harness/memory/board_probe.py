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
scales. The result is a data file (`anima-board-probe/1`) that `harness plan --measured` reads.
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

from ..backends.base import create_context
from ..partition.manifest import SubgraphEntry
from .assumptions import MEASURED_FORMAT

__all__ = ["Subject", "ProbeSetup", "probe_board", "host_bytes", "HOLDS_CORE_BELOW"]

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
    backend: str
    options: dict                 # context options without core_mask
    time_scale: float = 1.0       # seconds here per board second
    memory_scale: float = 1.0     # bytes here per board byte
    window_s: float = 40.0        # board seconds each overlap loop runs
    repeats: int = 5
    cores: bool = True            # the backend honours a core mask
    telemetry_root: Path = Path("/")


def _inputs(entry, rows: int | None = None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in entry.inputs]
    return [a[:rows] for a in arrays] if rows else arrays


def _context(setup: ProbeSetup, subject: Subject, core_mask: str | None, tag: str):
    options = dict(setup.options, **({"core_mask": core_mask} if core_mask else {}))
    return create_context(setup.backend, f"{subject.entry.label} probe {tag}", **options)


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
    """The two loops' rates together against alone (see the module's docstring)."""
    window = setup.window_s * setup.time_scale
    with _loaded(setup, runner, "0", "runner") as ctx:
        inputs = _inputs(runner.entry)
        run_alone = _timed_runs(ctx, inputs, setup.repeats)
        cycle_alone = statistics.median(_cycle(setup, cycler, "0", "cycler") for _ in range(setup.repeats))
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
        elapsed = time.perf_counter() - start
    kept = runs * run_alone / elapsed + len(cycles) * cycle_alone / elapsed
    return {"runner": runner.kind, "cycler": cycler.kind, "run_alone_s": run_alone / setup.time_scale,
            "lifecycle_alone_s": cycle_alone / setup.time_scale, "window_s": elapsed / setup.time_scale,
            "runs_together": runs, "lifecycles_together": len(cycles), "rates_kept": kept,
            "lifecycle_holds_core": bool(kept < HOLDS_CORE_BELOW)}


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
    """Both streams on core 0 against one stream each on cores 0 and 1 at once; 0_1_2 against 0."""
    with _loaded(setup, both, "0", "both streams") as ctx:
        inputs = _inputs(both.entry)
        one_core = _timed_runs(ctx, inputs, setup.repeats)
    with _loaded(setup, both, "0_1_2", "all cores") as ctx:
        all_cores = _timed_runs(ctx, inputs, setup.repeats)
    with _loaded(setup, one, "0", "stream 0") as a, _loaded(setup, one, "1", "stream 1") as b:
        rows = _inputs(one.entry)
        pair = statistics.median(_together([lambda: a.run(rows), lambda: b.run(rows)])
                                 for _ in range(setup.repeats))
    return {"one_core_both_streams_s": one_core / setup.time_scale,
            "two_cores_one_stream_each_s": pair / setup.time_scale,
            "stream_per_core_speedup": one_core / pair, "all_cores_s": all_cores / setup.time_scale,
            "multi_core_speedup": one_core / all_cores}


# ------------------------------------------------------------------------------- lifecycle

def measure_lifecycle(setup: ProbeSetup, subjects: list[Subject], weight_mib) -> dict:
    """Median load + init + release of each subject against its weight MiB, and the least-squares
    line the planner's [plan] lifecycle_model is (the same fit, so the two compare)."""
    rows = []
    for subject in subjects:
        _cycle(setup, subject, None, "first")       # a runtime's one-off first build is no board stage
        # the mean, not the median: a late wake-up is paid back by the next stages (board-sim's clock)
        seconds = statistics.fmean(_cycle(setup, subject, None, "lifecycle") for _ in range(setup.repeats))
        rows.append({"kind": subject.kind, "weight_mib": float(weight_mib(subject)),
                     "seconds": seconds / setup.time_scale})
    x = np.array([r["weight_mib"] for r in rows])
    y = np.array([r["seconds"] for r in rows])
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(x) - 2) * fit.stderr if len(x) > 2 else float("inf")
    return {"contexts": rows, "fit": [float(fit.intercept), float(fit.slope)],
            "per_mib_interval": [float(fit.slope - half), float(fit.slope + half)]}


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
    subgraph at once."""
    with _loaded(setup, subject, None, "warm-up"):       # the runtime's one-off start-up is not a context's
        pass
    before, device_before = host_bytes(), _dma_buf_bytes(setup.telemetry_root)
    with contextlib.ExitStack() as stack:
        for k in range(held):
            stack.enter_context(_loaded(setup, subject, None, f"held {k}"))
        after, device_after = host_bytes(), _dma_buf_bytes(setup.telemetry_root)
    host = (after - before) / held / MiB / setup.memory_scale
    out: dict[str, Any] = {"contexts_held": held, "host_mib": host}
    if device_after is not None:
        device = (device_after - (device_before or 0)) / held / MiB / setup.memory_scale
        out.update(device_mib=device, host_device_mib=[host, device])
    else:
        out["device"] = f"not measured: no dma-buf descriptor under {setup.telemetry_root / 'proc'}"
    return out


# ------------------------------------------------------------------------------- all of it

def probe_board(setup: ProbeSetup, subjects: dict[str, Subject], one_stream: Subject | None, weight_mib,
                say=print) -> dict:
    """Every measurement this backend allows; the measured data file's tables."""
    data: dict[str, Any] = {"format": MEASURED_FORMAT,
            "probe": {"backend": setup.backend, "host": socket.gethostname(),
                      "date": datetime.now(UTC).isoformat(timespec="seconds"),
                      "time_scale": setup.time_scale, "memory_scale": setup.memory_scale}}
    if setup.cores:
        say("probe-board: overlap (an inference on core 0 beside another context's lifecycle on it)")
        data["overlap"] = measure_overlap(setup, subjects["ffn"], subjects["self_attn"])
        if one_stream is not None:
            say("probe-board: streams (two cores at once against one; cores 0_1_2 against 0)")
            data["streams"] = measure_streams(setup, subjects["ffn"], one_stream)
    else:
        data["probe"]["not_measured"] = f"{setup.backend} has no NPU cores: overlap and streams"
    say(f"probe-board: lifecycle against weight size ({', '.join(subjects)})")
    data["lifecycle"] = measure_lifecycle(setup, list(subjects.values()), weight_mib)
    say("probe-board: memory per context")
    data["memory"] = measure_memory(setup, subjects["ffn"])
    return data
