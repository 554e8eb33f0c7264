"""The scripts in tools/ are run by hand, so nothing else would notice one broken by a change to the
package: each runs here, for real where a run is small, its --help (every import) where it is not.
Each start-up imports the harness afresh (5-30 s under load), so all but the cheapest are `slow`."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

from harness.model.config import REPO_ROOT
from harness.model.safetensors_io import SafetensorsFile
from tests.anima_shaped import GOLDEN_DIR, MODEL_DIR

TOOLS = REPO_ROOT / "tools"
# Too long for a unit test (a whole conversion, a full-size export, timed rounds): --help only.
HELP_ONLY = ("bench_convert.py", "bench_full_size.py", "bench_lifecycle.py", "bench_results_store.py",
             "bench_soak.py")
# Not run here at all, and why.
NOT_RUN = {"train_embedded.py": "needs torch, which lives only in bin/train's own venv (.venv-train)"}


def _run(script: str, *args, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, str(TOOLS / script), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _tensors(path) -> dict[str, np.ndarray]:
    with SafetensorsFile(path) as f:
        return {key: f.read_f32(key) for key in f.tensors}


def test_every_script_is_run_here_or_says_why_not():
    covered = set(HELP_ONLY) | set(NOT_RUN) | {"make_checkpoint.py", "make_anima_shaped.py", "sample_grid.py",
                                               "bench_site.py", "measurements.py"}   # test_measurements.py
    assert sorted(p.name for p in TOOLS.glob("*.py") if p.name != "__init__.py") == sorted(covered)


@pytest.mark.slow
@pytest.mark.parametrize("script", HELP_ONLY)
def test_help(script):
    assert "usage:" in _run(script, "--help")


def test_make_anima_shaped_writes_the_committed_model(tmp_path):
    """Seed 0 rewrites the committed checkpoint and text embeddings tensor for tensor."""
    model, golden = tmp_path / "model", tmp_path / "golden"
    model.mkdir()
    shutil.copy(MODEL_DIR / "model.toml", model)
    _run("make_anima_shaped.py", "--model-dir", model, "--golden-dir", golden)
    written, committed = _tensors(model / "dit.safetensors"), _tensors(MODEL_DIR / "dit.safetensors")
    assert sorted(written) == sorted(committed) and any(k.startswith("llm_adapter.") for k in written)
    for key, values in committed.items():
        np.testing.assert_array_equal(written[key], values, err_msg=key)
    for name in ("cond_a.npy", "cond_b.npy", "uncond.npy"):
        np.testing.assert_array_equal(np.load(golden / name), np.load(GOLDEN_DIR / name), err_msg=name)


@pytest.mark.slow
def test_make_checkpoint_writes_what_the_harness_reads(tmp_path):
    # a path longer than a console line: the summary stays one line (rich had broken it mid-word)
    (tmp_path / ("folder-" * 12)).mkdir()
    out = tmp_path / ("folder-" * 12) / "dit.safetensors"
    assert "anima-shaped float16" in _run("make_checkpoint.py", "--profile", MODEL_DIR / "model.toml", "--out", out,
                                           "--precision", "float16", "--prefix", "net.")
    proc = subprocess.run([sys.executable, "-m", "harness", "inspect-checkpoint", str(out), "--profile",
                           str(MODEL_DIR / "model.toml")], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0 and "key prefix 'net.' stripped" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_sample_grid_draws_and_grades(tmp_path):
    out = _run("sample_grid.py", "--per-digit", 1, "--steps", 2, "--out", tmp_path / "grid.png")
    assert "10 samples" in out and "prompt accuracy" in out
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_site_on_a_small_store(tmp_path):
    out = _run("bench_site.py", "--boards", 1, "--cases", 1, "--runs", 12, "--out", tmp_path / "site")
    assert "12 runs" in out and (tmp_path / "site" / "index.html").is_file()
