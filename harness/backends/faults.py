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

import numpy as np

from ..core.errors import ConfigError
from ..core.sizes import parse_size
from .onnxruntime import OnnxRuntimeContext

__all__ = ["FaultInjectionContext", "parse_fault"]

_LABEL = re.compile(r"^subgraph (\d+) ")


# prefix -> (option, how its value is read, the range it must lie in); the first matching prefix wins,
# so slow=x comes before slow=. A range written as a comparison also refuses nan.
_FAULTS = (
    ("nan@", "nan_subgraph", int, lambda v: v >= 0),
    ("shape@", "shape_subgraph", int, lambda v: v >= 0),
    ("hang@", "hang_subgraph", int, lambda v: v >= 0),
    ("init-fails-after=", "init_fails_after", int, lambda v: v >= 0),
    ("crash@", "crash_subgraph", int, lambda v: v >= 0),
    ("leak=mem:", "leak_bytes", parse_size, lambda v: 0 < v <= 1 << 30),
    ("leak=fd:", "leak_fds", float, lambda v: 0 < v <= 100),
    ("slow=x", "slowdown", float, lambda v: 1 <= v <= 100),
    ("slow=", "delay", float, lambda v: 0 <= v <= 60),
)


def parse_fault(spec: str | None) -> dict:
    """'nan@37' -> {'nan_subgraph': 37}; 'shape@5' -> {'shape_subgraph': 5}; 'hang@5' -> {'hang_subgraph': 5};
    'init-fails-after=225' -> {'init_fails_after': 225}; 'slow=0.01' ->
    {'delay': 0.01}; 'slow=x3' -> {'slowdown': 3.0}; 'leak=mem:64KiB' -> {'leak_bytes': 65536};
    'leak=fd:0.1' -> {'leak_fds': 0.1}; comma-separated."""
    options: dict = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        try:
            prefix, key, read, within = next(f for f in _FAULTS if part.startswith(f[0]))
            value = read(part[len(prefix):])
            if not within(value):
                raise ValueError
            options[key] = value
        except (StopIteration, ValueError, ConfigError):
            if part.startswith("leak="):        # the soak gate's proof, named only where it was meant
                raise ConfigError(f"--fault '{part}': expected leak=mem:SIZE (up to 1GiB) or "
                                  f"leak=fd:PER_RELEASE (up to 100)") from None
            # crash@SUBGRAPH is left out of the hint: it is for prefetch workers only (docstring).
            raise ConfigError(f"--fault '{part}': expected nan@SUBGRAPH, shape@SUBGRAPH, hang@SUBGRAPH, "
                              f"init-fails-after=INITS, slow=SECONDS, slow=xFACTOR or leak=KIND:AMOUNT") from None
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


# What the leak fault has leaked: kept until the process ends, as a leaking runtime's would be. The
# descriptors owed accumulate across releases (0.1 per release opens one every 10th release).
_leaked: list[bytes] = []
_leaked_fds: list[int] = []
_fd_debt = [0.0]
_leak_lock = threading.Lock()
_inits = [0]                # inits completed in this process, for init-fails-after


def _leak(nbytes: int, fds: float) -> None:
    with _leak_lock:
        if nbytes:
            # A repeated non-zero byte: every page is written, so the leak is resident, not just mapped.
            _leaked.append(b"\xa5" * nbytes)
        _fd_debt[0] = round(_fd_debt[0] + fds, 9)      # ten releases of 0.1 owe 1, not 0.999...
        while _fd_debt[0] >= 1:
            _leaked_fds.append(os.open(os.devnull, os.O_RDONLY))
            _fd_debt[0] -= 1


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

    def __init__(self, label: str, nan_subgraph: int | None = None, nan_count: int = 7,
                 delay: float = 0.0, shape_subgraph: int | None = None, slowdown: float = 1.0,
                 crash_subgraph: int | None = None, leak_bytes: int = 0, leak_fds: float = 0.0,
                 hang_subgraph: int | None = None, init_fails_after: int | None = None, **options):
        super().__init__(label, **options)
        match = _LABEL.match(label)
        self.index = int(match.group(1)) if match else None
        self.poison = nan_subgraph is not None and self.index == nan_subgraph
        self.truncate = shape_subgraph is not None and self.index == shape_subgraph
        self.nan_count = nan_count
        self.delay = delay
        self.slowdown = slowdown
        self.crash = crash_subgraph is not None and self.index == crash_subgraph
        self.leak_bytes, self.leak_fds = leak_bytes, leak_fds
        self.hang = hang_subgraph is not None and self.index == hang_subgraph
        self.init_fails_after = init_fails_after

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
        if self.leak_bytes or self.leak_fds:
            _leak(self.leak_bytes, self.leak_fds)
