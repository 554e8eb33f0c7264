"""Run the toolkit worker (worker.py) under a toolkit environment's python and read its events.

The worker prints one JSON event per line on stdout; the toolkit's own output goes to per-subgraph
log files, never to this pipe. A worker that fails reports the subgraph, the toolkit call and the
toolkit's error line; a worker that dies without saying why is reported with its exit code and the
last line it wrote to stderr.
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from ..core.errors import ToolkitError
from .envs import toolkit_python

__all__ = ["run_worker"]

# The toolkit side, run by path: the rknn-sim backend imports build_rknn from it the same way
# (sys.path.insert(0, str(WORKER.parent)); from worker import build_rknn).
WORKER = Path(__file__).parent / "remote" / "worker.py"


def run_worker(version: str, job: dict, job_file: Path, on_event: Callable[[dict], None]) -> list[dict]:
    """Run one job to the end; every event goes to on_event; return the events.

    Raises ToolkitError for a missing environment, a failed build (naming the subgraph through the
    event's name; the caller maps it to a label) or a worker that crashed.
    """
    python = toolkit_python(version)
    job_file.write_text(json.dumps(job))
    stderr_path = job_file.with_suffix(".stderr")
    events = []
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen([str(python), str(WORKER), str(job_file)], stdout=subprocess.PIPE,
                                stderr=err, text=True, bufsize=1)
        try:
            for event in _events(proc.stdout):
                events.append(event)
                on_event(event)
        finally:
            if proc.poll() is None and events and events[-1].get("event") == "failed":
                proc.kill()
            code = proc.wait()
    if code != 0 and not any(e.get("event") == "failed" for e in events):
        tail = [ln for ln in stderr_path.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        built = {e.get("name") for e in events if e.get("event") == "built"}
        building = next((item["name"] for item in job.get("items", []) if item.get("name") not in built), None)
        raise ToolkitError(f"rknn-toolkit2 {version} worker exited with code {code}"
                           + (f" while building {building}" if building else "")
                           + (f": {tail[0].strip()}" if tail else ""))
    return events


def _events(stream) -> Iterator[dict]:
    for line in stream:
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)
