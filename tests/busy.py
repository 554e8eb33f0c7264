"""The busy neighbour of issue 45, started by bin/busy until stopped (Ctrl-C, SIGTERM) or --seconds:
two processes spinning on both cores and one that imports numpy and onnxruntime (their libraries
mapped as a test's are) and maps, touches and unmaps 200 MiB in a loop. A test that measures time or
memory must hold its claim beside it (tests/unit/test_first_hour.py runs it; docs/measurements.md)."""
from __future__ import annotations

import argparse
import mmap
import multiprocessing
import signal
import sys
import time

__all__ = ["spin", "churn", "main"]

CHURN_BYTES = 200 << 20
PAGE = mmap.PAGESIZE


def spin() -> None:
    while True:
        pass


def churn() -> None:
    import numpy  # noqa: F401 - mapped, as a test process maps them
    import onnxruntime  # noqa: F401
    while True:
        with mmap.mmap(-1, CHURN_BYTES) as region:
            for offset in range(0, CHURN_BYTES, PAGE):       # every page committed, then given back
                region[offset] = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bin/busy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, help="stop after this long (default: until stopped)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    workers = [multiprocessing.Process(target=target, name=name, daemon=True)
               for name, target in (("busy-spin-1", spin), ("busy-spin-2", spin), ("busy-churn", churn))]
    for worker in workers:
        worker.start()
    print(f"busy: spinning (pids {workers[0].pid}, {workers[1].pid}) and mapping 200 MiB in a loop "
          f"(pid {workers[2].pid}){f' for {args.seconds:g} s' if args.seconds else ' until stopped'}", flush=True)
    try:
        time.sleep(args.seconds) if args.seconds else signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for worker in workers:
            worker.kill()
            worker.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
