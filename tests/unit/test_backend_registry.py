"""Backends from installed distributions (the `anima.backends` entry-point group): found through
importlib.metadata from a distribution's metadata on the path, and refused in one line, naming the
distribution, when they would shadow a backend or cannot be imported. docs/extending.md's own test
(test_extending.py) runs the gates on one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.backends.registry import BUILT_IN, ENTRY_POINT_GROUP, installed

ROOT = Path(__file__).resolve().parents[2]


def distribution(site: Path, name: str, entry_points: dict[str, str], module: str | None = None,
                 group: str = ENTRY_POINT_GROUP) -> Path:
    """An installed distribution as an installer leaves it in `site`: NAME-1.0.dist-info with its
    METADATA and entry_points.txt under `group` (and a module, if given)."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    if module:
        (site / f"{name.replace('-', '_')}.py").write_text(module)
    return site


def test_an_installed_distributions_backend_is_found_with_where_it_came_from(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(distribution(tmp_path, "anima-tiny", {"tiny": "anima_tiny:TinyContext"})))
    found, origin, refused = installed()
    assert found == {"tiny": "anima_tiny:TinyContext"} and origin == {"tiny": "anima-tiny"} and refused == []


def test_a_registration_that_would_shadow_a_backend_or_names_no_class_is_refused(tmp_path, monkeypatch):
    distribution(tmp_path, "shadow-a", {"onnxruntime": "a:Ctx", "twice": "a:Ctx", "bad": "a.Ctx"})
    distribution(tmp_path, "shadow-b", {"twice": "b:Ctx"})
    monkeypatch.syspath_prepend(str(tmp_path))
    found, origin, refused = installed()
    first = origin["twice"]           # the path's order decides which; the other is refused
    other = ({"shadow-a", "shadow-b"} - {first}).pop()
    assert "onnxruntime" in BUILT_IN and found == {"twice": f"{first[-1]}:Ctx"}
    assert sorted(refused) == sorted([
        f"shadow-a: {ENTRY_POINT_GROUP} entry point 'onnxruntime': 'onnxruntime' is the suite's own backend "
        "(choose another name)",
        f"shadow-a: {ENTRY_POINT_GROUP} entry point 'bad': 'a.Ctx' is not module:object",
        f"{other}: {ENTRY_POINT_GROUP} entry point 'twice': 'twice' is also registered by {first}"])


def _generate(site: Path, tmp_path: Path, backend: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "harness", "generate", "--backend", backend, "--steps", "1",
                           "--out", str(tmp_path / "out" / "x.png")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def error_line(done: subprocess.CompletedProcess) -> str:
    """The run's error line without the report it names (generate keeps a report of a failed run)."""
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1].split(" (report: ")[0]


def test_every_run_stops_on_a_refused_or_broken_backend_with_one_line(tmp_path):
    shadow = distribution(tmp_path / "shadow", "shadow-a", {"onnxruntime": "a:Ctx"})
    done = _generate(shadow, tmp_path, "onnxruntime")
    assert done.returncode == 2 and error_line(done) == (f"error: shadow-a: {ENTRY_POINT_GROUP} entry point "
                                                         "'onnxruntime': 'onnxruntime' is the suite's own backend "
                                                         "(choose another name)")
    broken = distribution(tmp_path / "broken", "anima-broken", {"broken": "anima_broken:Missing"}, "X = 1\n")
    assert error_line(_generate(broken, tmp_path, "onnxruntime")) == (
        "error: backend 'broken' (anima-broken: anima_broken:Missing): cannot be imported: "
        "module 'anima_broken' has no attribute 'Missing'")
    plain = distribution(tmp_path / "plain", "anima-plain", {"plain": "anima_plain:Plain"}, "class Plain:\n    pass\n")
    assert error_line(_generate(plain, tmp_path, "plain")) == (
        "error: backend 'plain' (anima-plain: anima_plain:Plain): is not a subclass of harness.backends.base.Context")
    assert not (tmp_path / "out" / "x.png").exists()
