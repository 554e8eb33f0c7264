"""Fixtures shared by the test modules (the suite's own options and gate fixtures live in
harness/pytest_plugin/)."""
import importlib
from pathlib import Path

import pytest

from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from tests.fakes import forget_rknnlite, use_fake_rknnlite
from tests.helpers import missing_tool
from tests.postgres_fixtures import halting_postgres, lost_server, postgres_cluster  # noqa: F401 - fixtures

TESTS = Path(__file__).parent

# The results store's libraries are imported before pytester's in-process runs take their snapshot of
# sys.modules: imported inside each run and forgotten after it, SQLAlchemy re-registers its PostgreSQL
# functions every time and warns about it ("GenericFunction ... is already registered"), and psycopg
# comes back as a new module while its compiled half still raises the first one's errors, which the
# store's `except psycopg.Error` then no longer catches. The verdicts' and the runs' modules (scipy,
# ruptures, onnx) too: the plugin imports them only when a run is made or judged, and an in-process run
# would otherwise import them afresh each time (onnx's protobuf types twice). Imported by the pytester
# fixture below, not at this file's top: a pytest process of a test's own (a subprocess) that collects
# tests/ then no longer pays ~2.5 s of CPU for libraries its session may never use.
BEFORE_PYTESTER = ("alembic.command", "psycopg", "ruptures", "scipy.stats", "sqlalchemy.dialects.postgresql",
                   "harness.gates.benchmark", "harness.runtime.run")


# The gates' tiers: their tests live in tests/acceptance/ (tests/unit/test_layout.py holds every test there).
GATE_TIERS = ("npu", "smoke", "soak")
GATES_ONLY = ("unit", "lab")        # what `-m npu` need not import


def pytest_ignore_collect(collection_path, config):
    """`-m npu` (smoke, soak, or `npu and ...` with no `or`: only a gate can match it) collects tests/acceptance/
    alone: on the board and in CI the gates start without importing ~150 unit modules (1.8 s here)."""
    if collection_path.parent == TESTS and collection_path.name in GATES_ONLY and only_gates(config.option.markexpr):
        return True
    return None


def only_gates(markexpr: str) -> bool:
    """A marker expression no test without a gate tier's marker can match: a tier, alone or `and` the rest
    (with no `or` anywhere, `T and X` is T's conjunction however X is built)."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return bool(words) and words[0] in GATE_TIERS and "or" not in words


@pytest.fixture(scope="session")
def libraries_before_pytester() -> None:
    for name in BEFORE_PYTESTER:
        importlib.import_module(name)


@pytest.fixture
def pytester(libraries_before_pytester, pytester):
    """pytester, its snapshot of sys.modules taken with BEFORE_PYTESTER imported (see above)."""
    return pytester


@pytest.fixture
def disk_path():
    """A fresh folder on a disk's filesystem (the checkout's .cache/), removed afterwards. bin/test puts TMPDIR,
    and so tmp_path, on a RAM filesystem, whose files' pages the kernel counts as shared memory (Pss_Shmem),
    not as a file's (Pss_File): a test of how another process mapping a file moves our share of it needs the
    file on a disk, as the libraries and partitions it stands for are."""
    import shutil
    import tempfile
    root = REPO_ROOT / ".cache"
    root.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="disk-", dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fake_rknnlite(monkeypatch):
    """The fake RKNNLite runtime importable as `rknnlite.api` for one test, forgotten afterwards."""
    try:
        yield use_fake_rknnlite(monkeypatch)
    finally:
        forget_rknnlite()


@pytest.fixture(scope="session")
def embedded_fp32(tmp_path_factory):
    """The embedded model and its FP32 partition, exported once per session (what calibration
    capture and accuracy analysis run through)."""
    from harness.model.bundle import load_bundle
    from harness.partition.onnx_export import ExportSettings, export_partition
    bundle = load_bundle(EMBEDDED_DIR)
    out = tmp_path_factory.mktemp("embedded") / "fp32"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float32"))
    return bundle, out


@pytest.fixture(scope="session")
def toolkit_version():
    """The default rknn-toolkit2 version, or a skip saying how to create its environment."""
    from harness.core.errors import ToolkitError
    from harness.toolkit.envs import default_version, toolkit_python
    version = default_version()
    try:
        toolkit_python(version)
    except ToolkitError:
        missing_tool(f"no rknn-toolkit2 {version} environment: create it with bin/toolkit-env {version}")
    return version


@pytest.fixture(scope="session")
def anima_block(tmp_path_factory):
    """(config, weights, manifest): one random full-width anima-2b block (D 2048, FFN 8192) and its
    FP32 single-stream export, made once for the full-width tests (~4 s of CPU each time otherwise)."""
    from harness.model.config import load_profile
    from harness.model.weights import random_weights
    from harness.partition import ExportSettings, export_partition
    cfg = load_profile("anima-2b")
    weights = random_weights(cfg, seed=2, blocks=range(1))
    manifest = export_partition(weights, cfg, tmp_path_factory.mktemp("anima-block"),
                                ExportSettings(precision="float32", streams=1, blocks=[0]))
    return cfg, weights, manifest


# The PostgreSQL half runs in the full suite (and in `-m results`), not in the fast tier: the same
# code on the same schema, and about ten seconds of the fast tier's budget.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def results_url(request, tmp_path):
    """A fresh, empty results store's URL: every store test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    return request.getfixturevalue("postgres_cluster").database()
