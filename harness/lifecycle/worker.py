"""The prefetch worker process: owns at most one context at a time and runs its stages on request.

Each worker is its own process (a fresh interpreter running `worker_main(FD)`, which imports nothing of
the parent's main script), so a stage that holds the GIL (nobody knows whether RKNNLite's calls
release it) still overlaps with the pipeline, and a runtime that crashes takes down only its
worker: the parent sees the pipe close and fails the run naming the subgraph.

Protocol (one socket pair, pickled messages, replies in request order):
    parent -> ("init", options, in_block, out_block)   worker -> ("hello",)
    parent -> ("load", seq, label, path)   worker -> ("ok", seq, {"load": s, "init": s})
    parent -> ("run", seq, layout)          worker -> ("ok", seq, {"run": s, "outputs": layout})
    parent -> ("release", seq)              worker -> ("ok", seq, {"release": s})
    parent -> ("stop",)                     worker releases what it holds and exits
Any failure -> ("error", seq, one line). Input and output arrays travel in two shared-memory blocks
that the parent made; `layout` is [(offset, shape, dtype), ...] inside the block.
"""
from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import time
from multiprocessing.connection import Connection

import numpy as np

from ..core.signals import GROUP_SIGNALS

__all__ = ["worker_main", "write_arrays", "read_arrays"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Linux: if the parent is SIGKILLed (no chance to stop us), the kernel kills the worker too,
    # so no context outlives the run. Elsewhere the closed pipe still ends the loop. (The signal
    # follows the parent *thread* that started us: make the strategy in the thread that runs it.)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def write_arrays(buf, arrays) -> list[tuple]:
    """Pack arrays one after another into a shared buffer; returns their layout."""
    layout, offset = [], 0
    for a in arrays:
        a = np.ascontiguousarray(a)
        end = offset + a.nbytes
        if end > len(buf):
            raise ValueError(f"shared block of {len(buf)} bytes cannot hold {end} bytes")
        np.ndarray(a.shape, a.dtype, buffer=buf, offset=offset)[...] = a
        layout.append((offset, a.shape, a.dtype.str))
        offset = (end + 63) // 64 * 64          # keep every array 64-byte aligned
    return layout


def read_arrays(buf, layout, copy: bool) -> list[np.ndarray]:
    views = [np.ndarray(shape, np.dtype(dtype), buffer=buf, offset=offset) for offset, shape, dtype in layout]
    return [np.array(v, copy=True) for v in views] if copy else views


def _attach(name: str) -> mmap.mmap:
    # The parent made and will unlink the block. Attaching through SharedMemory would register it
    # with a resource tracker of this process, which unlinks it when the worker exits.
    fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def worker_main(fd: int) -> None:
    """Serve one parent over the socket `fd` until told to stop or the parent goes."""
    _die_with_parent()
    # Ctrl-C, Ctrl-\ and a hang-up reach the whole process group: the parent decides, and stops
    # us in order (releasing the context, unlinking the shared blocks).
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    conn = Connection(fd)
    _, options, in_name, out_name = conn.recv()
    from ..backends.base import backend_class
    from ..core.errors import HarnessError
    from .split import context_for
    backend_class(options.backend)                   # import the runtime before saying hello
    shm_in, shm_out = _attach(in_name), _attach(out_name)
    ctx = None
    conn.send(("hello",))
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):              # the parent is gone
                break
            op = msg[0]
            if op == "stop":
                break
            seq = msg[1]
            try:
                if op == "load":
                    ctx, reply = _load(context_for, options, msg[2], msg[3])
                elif op == "run":
                    reply = _run(ctx, shm_in, shm_out, msg[2])
                elif op == "release":
                    start = time.perf_counter()
                    held, ctx = ctx, None
                    if held is not None:
                        held.release()
                    reply = {"release": time.perf_counter() - start}
                else:
                    raise ValueError(f"unknown request {op!r}")
                conn.send(("ok", seq, reply))
            except HarnessError as exc:
                conn.send(("error", seq, str(exc)))
            except Exception as exc:  # any error: a bug in a stage still names the stage
                conn.send(("error", seq, f"{op}: {type(exc).__name__}: {exc}"))
    finally:
        if ctx is not None:
            with contextlib.suppress(Exception):
                ctx.release()
        for shm in (shm_in, shm_out):
            with contextlib.suppress(Exception):
                shm.close()


def _load(context_for, options, label, path):
    start = time.perf_counter()
    ctx = context_for(options, label, path)
    try:
        ctx.load(path)
        loaded = time.perf_counter()
        ctx.init()
    except BaseException:
        with contextlib.suppress(Exception):
            ctx.release()
        raise
    return ctx, {"load": loaded - start, "init": time.perf_counter() - loaded}


def _run(ctx, shm_in, shm_out, layout):
    if ctx is None:
        raise ValueError("run before load")
    inputs = read_arrays(shm_in, layout, copy=False)
    start = time.perf_counter()
    outputs = ctx.run(inputs)
    seconds = time.perf_counter() - start
    del inputs                                       # no view may outlive the block
    return {"run": seconds, "outputs": write_arrays(shm_out, outputs)}

