"""Commands from installed distributions (the `anima.commands` entry-point group, harness/cli/installed.py):
listed by --help, and refused in one line naming the distribution, exit 2, when one would take a
built-in's or another distribution's name, cannot be imported or does not add exactly its command.
A built-in command still runs. docs/extending.md's test (test_extending.py) runs a working one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.cli.installed import ENTRY_POINT_GROUP
from tests.unit.test_backend_registry import distribution

ROOT = Path(__file__).resolve().parents[2]
HELLO = ('def add_command(sub):\n    sub.add_parser("hello").set_defaults(func=lambda args: print("hi") or 0)\n'
         'def add_two(sub):\n    add_command(sub)\n    sub.add_parser("bye")\n')


def harness(site: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "harness", *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def refusal(site: Path, command: str) -> str:
    done = harness(site, command)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr.strip()


def test_an_installed_command_is_listed_and_runs(tmp_path):
    site = distribution(tmp_path, "anima-hello", {"hello": "anima_hello"}, HELLO, group=ENTRY_POINT_GROUP)
    assert "hello              (installed by anima-hello)" in harness(site, "--help").stdout
    done = harness(site, "hello")
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr


def test_a_clash_a_duplicate_an_import_failure_or_a_stray_command_is_one_line(tmp_path):
    where = f"{ENTRY_POINT_GROUP} entry point"
    clash = distribution(tmp_path / "clash", "anima-a", {"trend": "anima_a", "hello": "anima_a"}, HELLO,
                         group=ENTRY_POINT_GROUP)
    assert refusal(clash, "hello") == (f"bin/harness: error: anima-a: {where} 'trend': 'trend' is the suite's own "
                                       "command (choose another name)")
    assert harness(clash, "trend", "--help").returncode == 0           # the built-in is untouched
    twice = distribution(tmp_path / "twice", "anima-a", {"hello": "anima_a"}, HELLO, group=ENTRY_POINT_GROUP)
    distribution(twice, "anima-b", {"hello": "anima_b"}, group=ENTRY_POINT_GROUP)
    line = refusal(twice, "hello")     # the path's order decides which of the two is refused
    assert line.startswith("bin/harness: error: anima-") and f"{where} 'hello': 'hello' is also registered by" in line
    missing = distribution(tmp_path / "missing", "anima-c", {"hello": "anima_nothere"}, group=ENTRY_POINT_GROUP)
    assert refusal(missing, "hello") == (f"bin/harness: error: anima-c: {where} 'hello' (anima_nothere): cannot be "
                                         "imported: No module named 'anima_nothere'")
    stray = distribution(tmp_path / "stray", "anima-d", {"hello": "anima_d:add_two"}, HELLO, group=ENTRY_POINT_GROUP)
    assert refusal(stray, "hello") == (f"bin/harness: error: anima-d: {where} 'hello' (anima_d:add_two): must add "
                                       "the one command 'hello' and set its func (it added hello, bye)")
