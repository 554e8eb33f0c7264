"""Which prefetch worker this process is (harness/lifecycle/prefetch.py starts them with WORKER_ENV set
to their number): how a reading of the process tree names a worker (harness/memory/resources.py) and how
the faults backend leaks only inside one (`leak-worker=`)."""
from __future__ import annotations

import os

__all__ = ["WORKER_ENV", "worker_number"]

WORKER_ENV = "ANIMA_PREFETCH_WORKER"


def worker_number() -> int | None:
    """This process's worker number, None in the pipeline's own process."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value and value.isdigit() else None
