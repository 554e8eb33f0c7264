"""The stack preflight (harness/gates/preflight.py): the versions read from a partition's .rknn files, the
wheel's metadata and the simulated board tree (tests/data/sysfs-rk3588: librknnrt 2.3.2, RKNPU driver
0.9.8), judged against toolkit/compatibility.toml; and, as a session, a known-bad stack failing the smoke
tier in one line before any npu test starts."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.core.errors import ConfigError
from harness.gates.preflight import COMPATIBILITY, load_table, preflight, read_stack
from harness.model.config import REPO_ROOT
from harness.partition.declared import rknn_version
from tests.fakes import FAKES_DIR, SIM_LIBRKNNRT

BOARD = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"


def _describe(path: Path, version: str) -> None:
    """Append the model description rknn-toolkit2 appends to a .rknn file: a uint64 length, then JSON."""
    table = json.dumps({"version": version, "target_platform": ["rk3588"]}).encode()
    with open(path, "ab") as fh:
        fh.write(len(table).to_bytes(8, "little") + table)


def converted_partition(onnx_partition: Path, out: Path, versions: list[str]) -> Path:
    """A copy of an exported partition whose subgraph files are .rknn files recording `versions` (cycled
    over the files), the manifest re-signed: what `harness convert` leaves, as far as the preflight reads."""
    shutil.copytree(onnx_partition, out)
    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["subgraphs"] + ([manifest["decoder"]] if manifest.get("decoder") else [])
    for k, entry in enumerate(entries):
        rknn = out / Path(entry["file"]).with_suffix(".rknn").name
        (out / entry["file"]).rename(rknn)
        _describe(rknn, versions[k % len(versions)])
        data = rknn.read_bytes()
        entry.update(file=rknn.name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def onnx_partition(tmp_path_factory) -> Path:
    from harness.model.bundle import load_bundle
    from harness.partition.onnx_export import ExportSettings, export_partition
    from tests.helpers import make_random_model_dir
    root = tmp_path_factory.mktemp("preflight")
    bundle = load_bundle(make_random_model_dir(root / "model"))
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0]))
    return root / "fp32"


@pytest.fixture
def wheel(monkeypatch):
    """The fake runtime's package metadata on sys.path: rknn-toolkit-lite2 2.5.0, as the fake behaves."""
    monkeypatch.syspath_prepend(str(FAKES_DIR))


def test_the_table_reads_and_every_bad_combination_cites_its_source_and_the_fix():
    rows = load_table()
    bad = [r for r in rows if r["verdict"] == "bad"]
    assert bad and all(r["source"] and r["symptom"] and r["install"] for r in bad)
    # every row, the project's target stack too, cites where it comes from: an address or a file here
    for row in rows:
        for source in row["source"] if isinstance(row["source"], list) else [row["source"]]:
            assert source.startswith("https://") or (REPO_ROOT / source).is_file(), row
    assert any(r["verdict"] == "target" and {r[k] for k in ("converted_with", "wheel", "librknnrt")} == {"==2.5.0"}
               for r in rows)
    text = COMPATIBILITY.read_text()
    for thread in ("airockchip/rknn-toolkit2/issues/281", "airockchip/rknn-toolkit2/issues/254",
                   "jaylfc/taOS/issues/42"):
        assert thread in text


def test_the_versions_come_from_the_files_the_wheel_and_the_board_tree(onnx_partition, tmp_path, wheel):
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.3.0", "2.5.0"])
    stack = read_stack(part, BOARD)
    files = sum(len(f) for f in stack.converted_with.values())
    assert sorted(stack.converted_with) == ["2.3.0", "2.5.0"] and files == len(list(part.glob("*.rknn")))
    assert (stack.wheel, stack.librknnrt, stack.driver) == ("2.5.0", "2.3.2", "0.9.8")


def test_a_known_bad_combination_is_one_line_naming_both_versions_and_the_fix(onnx_partition, tmp_path, wheel):
    verdict = preflight(converted_partition(onnx_partition, tmp_path / "p", ["2.3.0"]), BOARD)
    assert verdict.kind == "bad" and "\n" not in verdict.line, verdict
    assert "rknn-toolkit2 2.3.0" in verdict.line and "librknnrt 2.3.2" in verdict.line
    assert "jaylfc/taOS#42" in verdict.line and "install librknnrt 2.3.0" in verdict.line


def test_a_library_older_than_the_converting_toolkit_is_refused(onnx_partition, tmp_path, wheel):
    verdict = preflight(converted_partition(onnx_partition, tmp_path / "p", ["2.5.0"]), BOARD)
    assert verdict.kind == "bad" and "librknnrt 2.3.2 is older than rknn-toolkit2 2.5.0" in verdict.line


def test_a_combination_the_table_does_not_know_passes_as_unknown(onnx_partition, tmp_path, wheel):
    verdict = preflight(converted_partition(onnx_partition, tmp_path / "p", ["2.3.2"]), BOARD)
    assert verdict.kind == "unknown", verdict
    assert "rknn-toolkit2 2.3.2" in verdict.line and "librknnrt 2.3.2" in verdict.line


def test_a_known_good_combination_says_so(onnx_partition, tmp_path, wheel):
    board = tmp_path / "board"
    shutil.copytree(BOARD, board)
    lib = board / "usr/lib/librknnrt.so"
    lib.write_bytes(lib.read_bytes().replace(b"librknnrt version: 2.3.2", b"librknnrt version: 2.3.0"))
    verdict = preflight(converted_partition(onnx_partition, tmp_path / "p", ["2.3.0"]), board)
    assert verdict.kind == "good", verdict


def test_a_rknn_file_without_its_description_is_named(onnx_partition, tmp_path):
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.5.0"])
    first = sorted(part.glob("*.rknn"))[0]
    first.write_bytes(first.read_bytes()[:-40])
    verdict = preflight(part, BOARD)
    assert verdict.kind == "bad" and f"{first}: no rknn-toolkit2 model description" in verdict.line


def test_the_description_is_read_from_the_end_of_a_large_file(tmp_path):
    path = tmp_path / "big.rknn"
    path.write_bytes(os.urandom(3 << 20).replace(b'{"', b"{ "))
    _describe(path, "2.3.0")
    assert rknn_version(path) == "2.3.0"


@pytest.mark.parametrize("row, error", [
    ('verdict = "bad"\nlibrknnrt = "==2.3.2"\nsource = "s"\nreported = "r"\n', "must say its 'symptom'"),
    ('verdict = "good"\nlibrknnrt = "=>2.3"\nsource = "s"\nreported = "r"\n', "field 'librknnrt' must be a version"),
    ('verdict = "good"\nsource = "s"\nreported = "r"\n', "names no version"),
])
def test_a_wrong_table_entry_is_named(tmp_path, row, error):
    table = tmp_path / "compatibility.toml"
    table.write_text(f"format = 1\n[[combination]]\n{row}")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(table))}: combination 1.*{re.escape(error)}"):
        load_table(table)


@pytest.mark.slow          # a pytest session of its own
def test_a_known_bad_stack_fails_the_smoke_tier_in_one_line_before_any_npu_test(onnx_partition, tmp_path):
    """The smoke tier on the simulated board with the fake runtime (rknn-toolkit-lite2 2.5.0, librknnrt
    2.3.2) and files converted with rknn-toolkit2 2.3.0: the preflight fails with the table's line and the
    session ends there: no other test, npu or not, starts (the JUnit XML holds the one test case)."""
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.3.0"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES_DIR), str(REPO_ROOT)]),
           "LIBRKNNRT_PATH": str(SIM_LIBRKNNRT)}
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-m", "smoke",
                           "-p", "no:cacheprovider", "-q", "-rf", f"--telemetry-root={BOARD}", "--backend=rknnlite",
                           f"--partition={part}", f"--artifacts={tmp_path / 'artifacts'}", f"--junitxml={junit}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    failures = out.split("= FAILURES =")[1].split("short test summary")[0]
    [body] = re.findall(r"_+ test_0_stack_preflight _+\n(.*?)\n=", failures, re.S)
    assert body.count("\n") == 0, body          # one line, no traceback, no captured output repeating it
    assert body.startswith("stack preflight: rknn-toolkit2 2.3.0 with librknnrt 2.3.2 "), body
    assert "install librknnrt 2.3.0" in body
    assert re.search(r"\n1 failed, \d+ deselected in ", out), out
    assert "stack preflight failed: no test after it started" in out, out
    cases = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert cases == ["test_0_stack_preflight"], cases
    assert "Traceback" not in out


@pytest.mark.slow          # a pytest session of its own
def test_a_board_session_without_the_preflight_test_checks_before_its_first_npu_test(onnx_partition, tmp_path):
    """`-k` leaving the preflight test out: the first npu test's setup judges the stack; a bad one is that
    test's error (the board's, not a gate's) with the same line, and no test after it starts."""
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.3.0"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES_DIR), str(REPO_ROOT)]),
           "LIBRKNNRT_PATH": str(SIM_LIBRKNNRT), "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-m", "smoke",
                           "-k", "test_3 or test_4", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-rE",
                           f"--telemetry-root={BOARD}", "--backend=rknnlite", f"--partition={part}",
                           f"--artifacts={tmp_path / 'artifacts'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and re.search(r"\n\d+ deselected, 1 error in ", out), out
    assert re.search(r"ERROR tests/acceptance/test_smoke.py::test_3_one_subgraph_lifecycle - Failed: stack "
                     r"preflight: rknn-toolkit2 2.3.0 with librknnrt 2.3.2 ", out), out
    assert "test_4" not in out.split("short test summary")[-1], out
