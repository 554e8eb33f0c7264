"""Fault injection: a real onnxruntime context with a deliberate defect, to prove gates can fail.

Options (the suite's `--fault` sets them):
    nan_subgraph: index of the subgraph whose output gets NaN in the first stream (cond), as FP16
                  overflow does on the board; `nan_count` values are poisoned (default 7). The
                  decoder's index (one past the last block subgraph) poisons the image.
    shape_subgraph: index of the subgraph whose output loses its last stream ([1, N, D] where
                  [2, N, D] is declared): a wrong-shape output that numpy would broadcast.
    delay:        seconds slept inside every run(): a deliberately slowed backend for the benchmark
                  compare gate.
    slowdown:     factor by which every load, init and run is stretched (it waits factor - 1 times
                  the stage's own time; the last 2 ms of a wait spin, so a small factor is exact).
                  Unlike a fixed delay, it scales with the machine's load, so a slowed run stays
                  that many times slower when a shared CI box is busy.
    crash_subgraph: index of the subgraph whose run() kills its own process with SIGKILL, as a
                  crashing NPU runtime would. Only for runs whose contexts live in worker processes
                  (--lifecycle prefetch:K): anywhere else it kills the caller.
    leak_bytes:   bytes every release() leaks for good (`leak=mem:64KiB`): written, so they are resident
                  and private, as a runtime that does not free a context's memory (the soak gate's proof).
    leak_fds:     descriptors every release() leaks (`leak=fd:0.1`: one per 10 releases), really open.
    leak_threads: threads every release() leaves running (`leak=thread:0.05`: one per 20 releases).
    leak_from:    the release of this process the leaks start at (`leak=mem:64KiB@200`: from the 200th on;
                  default the first): a runtime that starts losing memory mid-run.
    leak_in:      "worker" (`leak-worker=mem:64KiB@100`): the leaks happen only in prefetch worker 0's process
                  (--lifecycle prefetch:K), whose releases are counted on their own (with K = 2 and three
                  branch kinds, worker 0 makes every other release: its 100th is about the run's 200th).
    init_fails_after: inits this process completes before every later init() fails as the driver fails it
                  (`init-fails-after=225`: "Bad address" after about 225 reloads, PaddlePaddle/FastDeploy#1858):
                  an infrastructure failure that starts mid-session, after earlier runs passed.
    hang_subgraph: index of the subgraph whose run() blocks until the process is stopped, as a run stuck in
                  the driver does (`hang@5`); the suite's --npu-timeout ends the test.
The subgraph index is read from the context label ("subgraph N (...)"), which the manifest defines.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass, fields

import numpy as np

from ..core.errors import ConfigError
from ..core.sizes import parse_size
from ..core.workers import worker_number
from .base import BackendOptions
from .onnxruntime import OnnxRuntimeContext

__all__ = ["FaultInjectionContext", "FaultSpec", "parse_fault"]

_LABEL = re.compile(r"^subgraph (\d+) ")


# prefix -> (option, how its value is read, the range it must lie in); the first matching prefix wins,
# so slow=x comes before slow=. A range written as a comparison also refuses nan.
_FAULTS = (
    ("nan@", "nan_subgraph", int, lambda v: v >= 0),
    ("shape@", "shape_subgraph", int, lambda v: v >= 0),
    ("hang@", "hang_subgraph", int, lambda v: v >= 0),
    ("init-fails-after=", "init_fails_after", int, lambda v: v >= 0),
    ("crash@", "crash_subgraph", int, lambda v: v >= 0),
    ("mem:", "leak_bytes", parse_size, lambda v: 0 < v <= 1 << 30),
    ("fd:", "leak_fds", float, lambda v: 0 < v <= 100),
    ("thread:", "leak_threads", float, lambda v: 0 < v <= 10),
    ("slow=x", "slowdown", float, lambda v: 1 <= v <= 100),
    ("slow=", "delay", float, lambda v: 0 <= v <= 60),
)


_LEAKS = ("leak_bytes", "leak_fds", "leak_threads")
_LEAK = re.compile(r"leak(?P<worker>-worker)?=(?P<what>[^@]*)(?:@(?P<start>[1-9]\d{0,8}))?")


def _onset(options: dict, part: str, start: int, where: str) -> None:
    """The leaks of one --fault share where and from which release they start."""
    if options.setdefault("leak_from", start) != start or options.setdefault("leak_in", where) != where:
        raise ConfigError(f"--fault '{part}': every leak of one --fault starts at the same release in the same "
                          f"process (leak= or leak-worker=, one @RELEASE)")


def parse_fault(spec: str | None) -> dict:
    """'nan@37' -> {'nan_subgraph': 37}; 'shape@5' -> {'shape_subgraph': 5}; 'hang@5' -> {'hang_subgraph': 5};
    'init-fails-after=225' -> {'init_fails_after': 225}; 'slow=0.01' ->
    {'delay': 0.01}; 'slow=x3' -> {'slowdown': 3.0}; 'leak=mem:64KiB' -> {'leak_bytes': 65536};
    'leak=fd:0.1' -> {'leak_fds': 0.1, ...}; 'leak-worker=mem:64KiB@100' -> {'leak_bytes': 65536,
    'leak_from': 100, 'leak_in': 'worker'}; comma-separated."""
    options: dict = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        try:
            leak = _LEAK.fullmatch(part)
            body = leak["what"] if leak else part
            prefix, key, read, within = next(f for f in _FAULTS
                                             if body.startswith(f[0]) and (f[1] in _LEAKS) == bool(leak))
            value = read(body[len(prefix):])
            if not within(value):
                raise ValueError
            options[key] = value
        except (StopIteration, ValueError, ConfigError):
            if part.startswith("leak"):        # the soak gate's proof, named only where it was meant
                raise ConfigError(f"--fault '{part}': expected leak=mem:SIZE (up to 1GiB), leak=fd:PER_RELEASE "
                                  f"(up to 100) or leak=thread:PER_RELEASE (up to 10), each with @RELEASE to start "
                                  f"at; leak-worker= for prefetch worker 0 alone") from None
            # crash@SUBGRAPH is left out of the hint: it is for prefetch workers only (docstring).
            raise ConfigError(f"--fault '{part}': expected nan@SUBGRAPH, shape@SUBGRAPH, hang@SUBGRAPH, "
                              f"init-fails-after=INITS, slow=SECONDS, slow=xFACTOR or leak=KIND:AMOUNT") from None
        if leak:
            _onset(options, part, int(leak["start"] or 1), "worker" if leak["worker"] else "any")
    return options


# A sleep overshoots by ~0.1 ms, more than 1 % of a 0.4 ms invocation would be: shorter waits spin,
# so slow=x1.02 stretches a stage by 2 % and not by whatever the scheduler adds.
_SPIN_BELOW_S = 0.002


def wait_until(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > _SPIN_BELOW_S:
        time.sleep(left - _SPIN_BELOW_S)
    while time.perf_counter() < deadline:
        pass


# What the leak fault has leaked: kept until the process ends, as a leaking runtime's would be. What is
# owed accumulates across releases (0.1 per release opens a descriptor every 10th release).
_leaked: list[bytes] = []
_leaked_fds: list[int] = []
_leaked_threads: list[threading.Thread] = []
_owed = {"fds": 0.0, "threads": 0.0}
_leak_lock = threading.Lock()
_inits = [0]                # inits completed in this process, for init-fails-after
_releases = [0]             # releases in this process, for leak_from
_never = threading.Event()


def _leak(nbytes: int, fds: float, threads: float) -> None:
    with _leak_lock:
        if nbytes:
            # A repeated non-zero byte: every page is written, so the leak is resident, not just mapped.
            _leaked.append(b"\xa5" * nbytes)
        _owed["fds"] = round(_owed["fds"] + fds, 9)      # ten releases of 0.1 owe 1, not 0.999...
        _owed["threads"] = round(_owed["threads"] + threads, 9)
        while _owed["fds"] >= 1:
            _leaked_fds.append(os.open(os.devnull, os.O_RDONLY))
            _owed["fds"] -= 1
        while _owed["threads"] >= 1:
            thread = threading.Thread(target=_never.wait, name="leaked", daemon=True)
            thread.start()
            _leaked_threads.append(thread)
            _owed["threads"] -= 1


def _leaks_here(leak_from: int, leak_in: str) -> bool:
    """Count this release; True when it is one the leak fault leaks on."""
    with _leak_lock:
        _releases[0] += 1
        count = _releases[0]
    return count >= leak_from and (leak_in == "any" or worker_number() == 0)


@dataclass(frozen=True)
class FaultSpec:
    """One --fault as the contexts read it (the fields are the module docstring's options)."""
    nan_subgraph: int | None = None
    nan_count: int = 7
    delay: float = 0.0
    shape_subgraph: int | None = None
    slowdown: float = 1.0
    crash_subgraph: int | None = None
    leak_bytes: int = 0
    leak_fds: float = 0.0
    leak_threads: float = 0.0
    leak_from: int = 1
    leak_in: str = "any"
    hang_subgraph: int | None = None
    init_fails_after: int | None = None

    @classmethod
    def of(cls, options: BackendOptions) -> FaultSpec:
        """The fault among a run's settings (the others, such as threads, are onnxruntime's)."""
        return cls(**{f.name: options.settings[f.name] for f in fields(cls) if f.name in options.settings})


class FaultInjectionContext(OnnxRuntimeContext):
    backend_name = "faults"
    exclusive_options = ("fault",)

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        options = parse_fault(values.get("fault"))
        decoder = bool(cfg.decoder) and cfg.latent_channels == 1
        last = cfg.subgraphs if decoder else cfg.subgraphs - 1
        for kind in ("nan", "shape", "hang"):
            if options.get(f"{kind}_subgraph", 0) > last:
                raise ConfigError(f"--fault {kind}@{options[kind + '_subgraph']}: {cfg.name} has subgraphs "
                                  f"0..{cfg.subgraphs - 1}" + (f" and its decoder {last}" if decoder else ""))
        return options

    def __init__(self, label: str, options: BackendOptions | None = None):
        super().__init__(label, options)
        fault = FaultSpec.of(self.options)
        match = _LABEL.match(label)
        self.index = int(match.group(1)) if match else None
        self.poison = self._here(fault.nan_subgraph)
        self.truncate = self._here(fault.shape_subgraph)
        self.crash = self._here(fault.crash_subgraph)
        self.hang = self._here(fault.hang_subgraph)
        self.nan_count, self.delay, self.slowdown = fault.nan_count, fault.delay, fault.slowdown
        self.leak_bytes, self.leak_fds, self.leak_threads = fault.leak_bytes, fault.leak_fds, fault.leak_threads
        self.leak_from, self.leak_in = fault.leak_from, fault.leak_in
        self.init_fails_after = fault.init_fails_after

    def _here(self, subgraph: int | None) -> bool:
        return subgraph is not None and self.index == subgraph

    def _stretched(self, stage, *args):
        started = time.perf_counter()
        result = stage(*args)
        if self.slowdown > 1:
            wait_until(started + self.slowdown * (time.perf_counter() - started))
        return result

    def load(self, path) -> None:
        self._stretched(super().load, path)

    def init(self) -> None:
        with _leak_lock:
            done = _inits[0]
        if self.init_fails_after is not None and done >= self.init_fails_after:
            raise self.error("init", f"failed to allocate handle, errno 14 Bad address (injected: "
                                     f"init-fails-after={self.init_fails_after})")
        self._stretched(super().init)
        with _leak_lock:
            _inits[0] += 1

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.crash:
            os.kill(os.getpid(), signal.SIGKILL)
        while self.hang:            # in short sleeps: a signal's handler (a timeout, Ctrl-C) ends it
            time.sleep(0.1)
        outputs = self._stretched(super().run, inputs)
        if self.delay:
            time.sleep(self.delay)
        if self.poison:
            first = np.array(outputs[0], copy=True)
            first[0].reshape(-1)[: self.nan_count] = np.nan
            outputs = [first, *outputs[1:]]
        if self.truncate:
            outputs = [outputs[0][:-1] if outputs[0].shape[0] > 1 else outputs[0][..., :-1], *outputs[1:]]
        return outputs

    def release(self) -> None:
        super().release()
        if (self.leak_bytes or self.leak_fds or self.leak_threads) and _leaks_here(self.leak_from, self.leak_in):
            _leak(self.leak_bytes, self.leak_fds, self.leak_threads)
