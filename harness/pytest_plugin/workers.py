"""The suite under pytest-xdist (`bin/test -n 2` off the board): the tests spread over worker processes,
the session's artifacts still written once, whole, by the controller.

- Never on the board, never with --require-npu: an 8 GB board runs its gates one after another.
- The tests that time or measure memory (markers npu, benchmark, memory, soak, timed) run alone: one worker
  takes a room lock exclusively for each of them, every other test holds it shared, so none of them is
  judged under the other worker's load. They are also one work unit, so they run on one worker, in order,
  and share the golden cases' runs as a serial session does. Each worker writes their ids beside the room
  lock as it collects and the controller's scheduler reads them: xdist's own groups (--dist loadgroup)
  travel in the test ids, which pytest 9.2 no longer lets a plugin change (pytest-xdist issue 1386).
- What a worker gathers for the session's end (the state's lists, its gate runner's facts, pytest-benchmark's
  JSON) goes to the controller in `workeroutput`, as JSON text; the controller merges it into its own
  state and its usual session-end hooks write session.json, summary.md, report.html and benchmark.json.
- Baselines are saved only when the whole session passed, which no worker knows: --save-baseline and
  --accept-upgrade are refused with -n.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from ..core.atomic import atomic_write_json
from ..core.locks import acquire, release
from .state import SHIPPED, is_worker, state_of

__all__ = ["choose", "distributed", "runs_alone", "ship_benchmark_json", "ALONE_MARKERS"]

ALONE_MARKERS = ("npu", "benchmark", "memory", "soak", "timed")
_LONG_MARKERS = ("slow", "toolkit", "lab")
GROUP = "alone"                     # the scheduler's work unit of the tests that run alone
_ALONE_IDS = "alone-{}.json"        # beside the room lock: a worker's ids of the tests that run alone
_OUTPUT = "anima"                   # this plugin's key in workeroutput
# What xdist tells a worker's own process; a pytest run inside a test (pytester, a subprocess) is no worker.
_WORKER_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def distributed(config) -> bool:
    """This is the controller of an xdist session (-n N, N > 0)."""
    return not is_worker(config) and bool(getattr(config.option, "numprocesses", None)) \
        and getattr(config.option, "dist", "no") != "no"


def choose(config, settings) -> None:
    """At configure time (hooks.py, once the settings are resolved, before xdist starts its session): a
    session that must run serially does, whatever -n said, in one line; a distributed one keeps the tests
    that run alone on one worker (our scheduler, module by module otherwise) and gets its room lock."""
    if not distributed(config):
        return
    why = _serial_because(settings)
    if why:
        config.option.dist, config.option.tx, config.option.numprocesses = "no", [], 0
        config.issue_config_time_warning(pytest.PytestConfigWarning(f"-n ignored: {why}"), stacklevel=2)
        return
    config.option.dist = "loadscope"
    config.option.loadscopereorder = False      # the work units in the order _in_order gives them
    state_of(config).room = Path(tempfile.mkdtemp(prefix="anima-workers-"))


def make_scheduler(config, log):
    """Work units of one module each (its module-scoped fixtures, such as the fault matrix's one run of
    every fault, made once, not once per worker), and one unit of the tests that run alone."""
    room = state_of(config).room
    if room is None:
        return None
    from xdist.scheduler import LoadScopeScheduling
    folder: Path = room

    class ModuleOrGroup(LoadScopeScheduling):
        alone: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.alone is None:      # first asked once every worker has collected, so written
                self.alone = _alone_ids(folder)
            return GROUP if nodeid in self.alone else nodeid.split("::", 1)[0]
    return ModuleOrGroup(config, log)


def _serial_because(s) -> str | None:
    if s.on_board or s.require_npu:
        return ("the npu gates run one after another on the board and with --require-npu (an 8 GB board "
                "cannot hold two sessions' subgraphs)")
    for flag, on in (("--save-baseline", s.save_baseline), ("--accept-upgrade", s.accept_upgrade)):
        if on:
            return f"{flag} saves a baseline only when the whole session passed, which no worker knows"
    return None


def configure_node(node):
    room = state_of(node.config).room
    assert room is not None         # xdist makes nodes only in a distributed session, which choose() gave a room
    node.workerinput["anima_room"] = str(room / "room")


def sessionstart(session):
    """In a worker: no longer marked a worker for the pytest runs its tests start, and benchmarks on."""
    config = session.config
    if not is_worker(config):
        return
    for name in _WORKER_ENV:
        os.environ.pop(name, None)
    # pytest-benchmark turns itself off under xdist (timings taken beside other tests mean nothing); here
    # a benchmark runs alone (the room lock), so its timings are as good as a serial session's.
    bench = getattr(config, "_benchmarksession", None)
    if bench is not None and getattr(bench, "xdist_warning", False):
        bench.disabled = bench.xdist_warning = False


def collection_modifyitems(config, items):
    room = getattr(config, "workerinput", {}).get("anima_room")
    if room is None:
        return
    items[:] = _in_order(items)
    ids = Path(room).with_name(_ALONE_IDS.format(config.workerinput["workerid"]))
    atomic_write_json(ids, [item.nodeid for item in items if runs_alone(item)])


def _in_order(items: list) -> list:
    """The tests that run alone first, then the modules with no slow, toolkit or lab test, then the modules
    with such tests, most of them first. Each test that runs alone waits for the test the other worker is
    in: with the short modules beside the group that wait is seconds, not the ten minutes of a README run."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(_module(item), i)
    long = Counter(_module(item) for item in items if any(item.get_closest_marker(m) for m in _LONG_MARKERS))

    def key(item) -> tuple[int, int, int]:
        if runs_alone(item):
            return 0, 0, 0
        module = _module(item)
        return (2 if long[module] else 1), -long[module], first[module]
    return sorted(items, key=key)       # stable: a module's tests keep their order


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def runs_alone(item) -> bool:
    return any(item.get_closest_marker(m) for m in ALONE_MARKERS)


def runtest_protocol(item, nextitem):
    """The body of an old-style hookwrapper (plugin.py): the room taken around the test."""
    room = getattr(item.config, "workerinput", {}).get("anima_room")
    if room is None:
        yield
        return
    alone = runs_alone(item)
    if not alone:
        _wait_for_the_group(room)
    fd = _HELD.pop(room, None)
    if fd is None:
        fd = _take(room, exclusive=alone)
    yield
    if alone and nextitem is not None and runs_alone(nextitem):
        _HELD[room] = fd        # the group keeps the room to its last test: none of its tests waits for
    else:                       # the test the other worker is in
        release(fd)


_HELD: dict[str, int] = {}          # room -> the descriptor the group holds it by, between two of its tests
_WAITED: set[str] = set()           # rooms whose group this worker has waited for
_TAKEN = ".taken"                   # beside the room lock: the group has taken the room
_GROUP_START_S = 60.0               # a group that never starts (its worker died) is not waited for longer


def _wait_for_the_group(room: str) -> None:
    """Before a worker's first test that does not run alone: the group takes the room first, so it never waits
    for a long set-up (the fault matrix's) that the other worker began at the same moment."""
    if room in _WAITED:
        return
    _WAITED.add(room)
    if not _alone_ids(Path(room).parent):
        return
    deadline = time.monotonic() + _GROUP_START_S
    while not Path(room + _TAKEN).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _alone_ids(folder: Path) -> set[str]:
    """The ids of the tests that run alone, as the workers wrote them beside the room lock."""
    return {i for f in folder.glob(_ALONE_IDS.format("*")) for i in json.loads(f.read_text())}


def _take(room: str, exclusive: bool) -> int:
    """A readers-writer lock across the workers: a test that runs alone holds `room` exclusively, the others
    shared. The turnstile keeps a waiting writer from being starved: it holds the turnstile while it waits,
    and a reader passes the turnstile before it takes its share."""
    turnstile = acquire(room + ".turnstile")
    try:
        if not exclusive and turnstile is not None:     # a blocking acquire is never None
            release(turnstile)
            turnstile = None
        fd = acquire(room, shared=not exclusive)
    finally:
        if turnstile is not None:
            release(turnstile)
    assert fd is not None           # a blocking acquire waits; only a non-blocking one gives up
    if exclusive:
        Path(room + _TAKEN).touch()
    return fd


def ship_benchmark_json(config, path: Path, text: str) -> bool:
    """In a worker, pytest-benchmark's JSON goes to the controller instead of the file (True)."""
    if not is_worker(config):
        return False
    config.workeroutput.setdefault(_OUTPUT + "_benchmark", []).append([str(path), text])
    return True


def sessionfinish(session):
    config = session.config
    if not is_worker(config):
        _write_benchmark_json(config)
        return
    from .reporting import runner_facts
    state = state_of(config)
    shipped = {name: getattr(state, name) for name in SHIPPED}
    ran_gates = any(t["npu"] for t in state.test_outcomes)
    shipped["facts"] = runner_facts(config) if ran_gates else {"run": {}, "slowest": [], "reports": []}
    if state.store_failure is not None:
        shipped["store_failure"] = state.store_failure
    config.workeroutput[_OUTPUT] = json.dumps(shipped, default=_plain)


def _plain(value):
    """JSON for what the state holds besides JSON's own types: paths, numpy numbers and arrays."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def testnodedown(node, error):
    """A worker's share of the session, merged into the controller's state as it ends."""
    state = state_of(node.config)
    output = getattr(node, "workeroutput", {})
    state.benchmark_json.extend(output.get(_OUTPUT + "_benchmark", []))
    if _OUTPUT not in output:
        return                          # a worker that crashed: xdist reports its tests
    shipped = json.loads(output[_OUTPUT])
    for name in SHIPPED:
        items = shipped[name]
        if name == "memory_samples":
            items = [(test, Path(path)) for test, path in items]
        getattr(state, name).extend(items)
    state.worker_facts.append(shipped["facts"])
    if "store_failure" in shipped:
        state.store_failure = shipped["store_failure"]


def _write_benchmark_json(config) -> None:
    """One pytest-benchmark JSON of the workers' (every worker's benchmarks, the first one's machine info),
    written by the controller where the workers would have written theirs."""
    shipped = state_of(config).benchmark_json
    if not shipped:
        return
    from ..core.atomic import atomic_write_text
    documents = [json.loads(text) for _, text in shipped]
    whole = documents[0]
    for other in documents[1:]:
        whole["benchmarks"].extend(other["benchmarks"])
    atomic_write_text(Path(shipped[0][0]), json.dumps(whole, ensure_ascii=True, indent=4))


def unconfigure(state) -> None:
    room = state.room
    if room is not None:
        shutil.rmtree(room, ignore_errors=True)
