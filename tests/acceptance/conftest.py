"""Fixtures shared by the acceptance tests' modules that run the suite under pytester."""
from __future__ import annotations

import pytest

from harness.model.config import EMBEDDED_DIR, REPO_ROOT


@pytest.fixture
def run_suite(pytester, suite, monkeypatch):
    """Run the suite's gates in a fresh pytest process (pytester); returns its RunResult.

    The partitions come from this session's cache (--cache-dir): the FP16 one the gates above already
    exported, and the fake-quant one exported once and then kept, as they are keyed by the weights'
    digest, precision and fake quantisation.
    """
    tmp_path = pytester.path
    monkeypatch.setenv("COLUMNS", "400")     # failure lines unwrapped for fnmatch_lines

    def run(*args):
        # Run from tmp_path: pytest-benchmark shows stored runs relative to the working directory.
        args = [str(REPO_ROOT / a) if a.startswith("tests/") else a for a in args]
        return pytester.runpytest_subprocess(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider", "-q",
            f"--artifacts={tmp_path / 'artifacts'}", f"--results=sqlite:///{tmp_path / 'results.sqlite'}",
            f"--cache-dir={suite.cache_dir}", "--benchmark-storage=file://./bench", *args, timeout=300)
    return run


@pytest.fixture(scope="module")
def a_partition(tmp_path_factory):
    from harness.model.bundle import load_bundle
    from harness.partition.onnx_export import ExportSettings, export_partition
    bundle = load_bundle(EMBEDDED_DIR)
    out = tmp_path_factory.mktemp("ab-a") / "float16"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float16"))
    return out
