"""A pytest plugin for the benchmark gate's confirmation test (`-p tests.disturb_first_run`): with
DISTURB_SECONDS=S in the environment, the first partitioned run of the process is stopped for S
seconds after its first invocation (SIGSTOP to itself, SIGCONT from a child process S seconds later),
as another job or the hypervisor can stop a run. The machine and the signals are real: only the
moment of the stop is chosen. Later runs are left alone."""
from __future__ import annotations

import os
import signal
import subprocess

from harness.gates.runner import GateRunner

__all__ = ["pytest_configure"]


def pytest_configure(config):
    seconds = float(os.environ.get("DISTURB_SECONDS", "0"))
    if seconds > 0:
        GateRunner.run = _first_run_stopped(GateRunner.run, seconds)


def _first_run_stopped(run, seconds: float):
    runs = []

    def stopped(self, *args, observers=(), **kwargs):
        runs.append(True)
        if len(runs) > 1:
            return run(self, *args, observers=observers, **kwargs)
        return run(self, *args, observers=(*observers, _stop_once(seconds)), **kwargs)
    return stopped


def _stop_once(seconds: float):
    done = []

    def observe(_invocation):
        if done:
            return
        done.append(True)
        waker = subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
        waker.wait()
    return observe
