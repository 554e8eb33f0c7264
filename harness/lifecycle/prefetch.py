"""prefetch:K: knowing the fixed order, load and initialise the next subgraphs while the current one
runs, with at most K contexts alive, releasing finished ones in the background.

K worker processes each own at most one context. When the pipeline finishes a subgraph, its worker
releases it and, in the same breath, loads the next subgraph the fixed order will ask for; with
K = 2 one worker runs while the other turns over. The pipeline only waits when a load is not ready
yet, and that wait is measured: overlap = (lifecycle seconds - seconds waited) / lifecycle seconds.

Processes, not threads: a simulated stage that sleeps always releases the GIL, RKNNLite's calls may
not, so threads could look perfect here and hide nothing on the board. A worker also keeps a
crashing runtime away from the pipeline (and pytest): a dead worker fails the run with one line
naming the subgraph. The outputs are the backend's own, bit for bit: only where they run moves.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.base import BackendOptions
from ..core.errors import BackendError
from ..core.signals import group_signals_blocked
from ..core.workers import WORKER_ENV
from .records import Counters, LifecycleRecorder
from .worker import read_arrays, write_arrays

__all__ = ["Prefetch"]

_ROOT = Path(__file__).resolve().parents[2]     # the worker imports `harness` from here
_STARTUP_TIMEOUT = 120.0        # spawning imports numpy and the runtime: slow on a loaded 2-core box


def block_bytes(entries, which: str) -> int:
    """Largest total bytes of one call's inputs (or outputs) over the entries, 64-byte aligned."""
    def total(specs):
        return sum((int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize + 63) // 64 * 64 for s in specs)
    return max([total(getattr(e, which)) for e in entries] + [64])


def _worker_env(number: int) -> dict:
    env = dict(os.environ)
    env[WORKER_ENV] = str(number)           # how a reading of the tree names it (harness/memory/resources.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    return env


def _describe_exit(code) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class _Worker:
    """The parent's handle on one worker process: its pipe, its two shared blocks, what it holds."""

    def __init__(self, number: int, options: BackendOptions, in_bytes: int, out_bytes: int):
        self.number = number
        with group_signals_blocked():           # before the first block registers with it
            resource_tracker.ensure_running()
        self.shm_in = shared_memory.SharedMemory(create=True, size=in_bytes)
        self.shm_out = shared_memory.SharedMemory(create=True, size=out_bytes)
        mine, theirs = socket.socketpair()
        try:
            # A fresh interpreter (not multiprocessing's spawn, which re-imports the caller's
            # main script): the worker imports only the harness and the backend.
            code = f"from harness.lifecycle.worker import worker_main; worker_main({theirs.fileno()})"
            with group_signals_blocked():       # no window before the worker ignores them
                self.process = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()],
                                                env=_worker_env(number))
        except BaseException:
            mine.close()
            self._free_blocks()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.conn.send(("init", options, self.shm_in.name, self.shm_out.name))
        self.entry = None                      # the entry whose context it holds or is loading
        self.pending: deque = deque()          # (seq, op, entry, step) awaiting a reply
        self._seq = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, op: str, entry, step: int, *payload) -> int:
        self._seq += 1
        try:
            self.conn.send((op, self._seq, *payload))
        except (OSError, ValueError):
            raise self.died(op, entry) from None
        self.pending.append((self._seq, op, entry, step))
        return self._seq

    def receive(self):
        """The next reply, or BackendError naming the subgraph in flight if the worker died."""
        while not self.conn.poll(0.05):
            if not self.alive():
                break
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            _, op, entry, _ = self.pending[0] if self.pending else (0, "idle", None, 0)
            raise self.died(op, entry) from None

    def died(self, op: str, entry) -> BackendError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1.0)
        what = f"{op} of {entry.label}" if entry is not None else op
        return BackendError(f"prefetch worker {self.number} (pid {self.process.pid}) "
                            f"{_describe_exit(self.process.returncode)} during {what}")

    def stop(self) -> None:
        """Ask it to release what it holds and exit (reap() waits for that). Never raises."""
        with contextlib.suppress(Exception):
            self.conn.send(("stop",))

    def reap(self) -> None:
        """Wait for it to exit, kill it if it does not (a hung stage), free its blocks."""
        try:
            self.process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:      # the process goes, and its context with it
            self.process.kill()
            self.process.wait(timeout=5.0)
        self._free_blocks()
        with contextlib.suppress(Exception):
            self.conn.close()

    def _free_blocks(self) -> None:
        for shm in (self.shm_in, self.shm_out):
            with contextlib.suppress(Exception):
                shm.close()
            with contextlib.suppress(Exception):
                shm.unlink()


class Prefetch:
    """At most K contexts alive, each in its own worker process, loaded ahead in the fixed order."""

    def __init__(self, options: BackendOptions, recorder: LifecycleRecorder, path_of, order, k: int,
                 entries=None):
        self.name = f"prefetch:{k}"
        self.options = options
        self.recorder = recorder
        self._path_of = path_of
        self.k = k
        self._order = list(order)                       # the fixed cyclic order of the subgraphs
        self._position = {e.index: p for p, e in enumerate(self._order)}
        self.counters = Counters()
        self.final_release_s = 0.0
        self.waited_by_branch: dict[str, float] = {}      # where the pipeline stood still
        self._ahead: deque = deque()                    # (entry, worker, seq, step) loaded ahead
        self._current: tuple[Any, _Worker] | None = None   # (entry, worker) the pipeline is using
        self._workers: list[_Worker] = []
        every = list(entries or self._order)
        try:
            for n in range(k):
                self._workers.append(_Worker(n, options,
                                             block_bytes(every, "inputs"), block_bytes(every, "outputs")))
            for w in self._workers:
                self._hello(w)
        except BaseException:
            self.close()
            raise

    def _hello(self, w: _Worker) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while not w.conn.poll(0.05):
            if not w.alive() or time.monotonic() > deadline:
                raise w.died("start-up", None)
        w.receive()

    # -- the cycle the pipeline drives --------------------------------------------------------
    def acquire(self, entry, step: int):
        if self._ahead and self._ahead[0][0].index == entry.index:
            _, w, seq, _ = self._ahead.popleft()
            self.counters.hits += 1
        else:
            # Not what the order predicted (first call, the decoder): drop what was loaded ahead.
            self.counters.misses += 1
            self._cancel_ahead(step)
            w = self._free_worker()
            seq = self._load(w, entry, step)
        self._current = (entry, w)
        self._top_up(entry, step)
        start = time.perf_counter()
        self._wait(w, seq)
        waited = time.perf_counter() - start
        self.counters.waited_s += waited
        self.waited_by_branch[entry.branch] = self.waited_by_branch.get(entry.branch, 0.0) + waited
        return w

    def run(self, w: _Worker, entry, step: int, inputs: list) -> list:
        with self.recorder.timed(step, entry, "run"):
            try:
                layout = write_arrays(w.shm_in.buf, inputs)
            except ValueError as exc:
                raise BackendError(f"prefetch: {entry.label}: inputs do not fit: {exc}") from None
            reply = self._wait(w, w.send("run", entry, step, layout))
            return read_arrays(w.shm_out.buf, reply["outputs"], copy=True)

    def finish(self, entry, step: int) -> None:
        held, self._current = self._current, None
        if held is None:
            return
        _, w = held
        self._release(w, step)
        self._top_up(entry, step)

    def close(self) -> None:
        """Stop every worker (releasing what it holds), then free the shared blocks; never raises."""
        start = time.perf_counter()
        for w in self._workers:
            w.stop()
        for w in self._workers:
            w.reap()
        self._workers = []
        self._ahead.clear()
        self._current = None
        self.counters.live = 0
        self.final_release_s += time.perf_counter() - start

    def stats(self) -> dict:
        return {"strategy": self.name, **self.counters.as_dict(), "final_release_s": self.final_release_s,
                "workers": self.k, "waited_s_by_branch": dict(self.waited_by_branch)}

    # -- scheduling ---------------------------------------------------------------------------
    def _next_after(self, entry, step: int):
        """The subgraph the fixed order asks for after `entry` (wrapping into the next step)."""
        pos = self._position.get(entry.index)
        if pos is None:
            return None, step
        pos += 1
        return (self._order[pos], step) if pos < len(self._order) else (self._order[0], step + 1)

    def _top_up(self, entry, step: int) -> None:
        last, last_step = (self._ahead[-1][0], self._ahead[-1][3]) if self._ahead else (entry, step)
        while True:
            free = [w for w in self._workers if w.entry is None]
            nxt, nxt_step = self._next_after(last, last_step)
            if not free or nxt is None:
                return
            self._ahead.append((nxt, free[0], self._load(free[0], nxt, nxt_step), nxt_step))
            last, last_step = nxt, nxt_step

    def _free_worker(self) -> _Worker:
        for w in self._workers:
            if w.entry is None:
                return w
        raise BackendError(f"{self.name}: no free worker (a context was acquired twice without finish)")

    def _load(self, w: _Worker, entry, step: int) -> int:
        w.entry = entry
        self.counters.loaded()
        return w.send("load", entry, step, entry.label, str(self._path_of(entry)))

    def _release(self, w: _Worker, step: int) -> None:
        entry, w.entry = w.entry, None
        self.counters.released()
        w.send("release", entry, step)

    def _cancel_ahead(self, step: int) -> None:
        while self._ahead:
            _, w, _, _ = self._ahead.popleft()
            self._release(w, step)

    def _wait(self, w: _Worker, seq: int) -> dict:
        """Read w's replies up to `seq`'s, recording the stages they report."""
        while True:
            reply = w.receive()
            got, op, entry, step = w.pending.popleft()
            if reply[0] == "error":
                raise BackendError(reply[2])
            self._note(op, entry, step, reply[2])
            if got == seq:
                return reply[2]

    def _note(self, op: str, entry, step: int, times: dict) -> None:
        for stage in ("load", "init", "release"):
            if stage in times:
                self.recorder.add(step, entry, stage, times[stage])
                self.counters.lifecycle_s += times[stage]
