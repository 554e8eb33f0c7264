"""Versions read exactly (harness/gates/versions.py) as the stack preflight shows and judges them: each odd
string the board or a file can carry (issue 44), on a copy of the simulated board tree, one verdict line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.gates.preflight import preflight, read_stack
from harness.gates.smoke import version_problem
from harness.gates.versions import read
from harness.model.config import REPO_ROOT
from tests.fakes import FAKES_DIR
from tests.unit.test_preflight import converted_partition, onnx_partition  # noqa: F401  (a fixture)

BOARD = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"


def board_with(tmp_path: Path, librknnrt: str | None = None, driver: str | None = None) -> Path:
    board = tmp_path / "board"
    shutil.copytree(BOARD, board)
    if librknnrt is not None:
        lib = board / "usr/lib/librknnrt.so"
        marker = f"librknnrt version: {librknnrt}".encode()
        lib.write_bytes(lib.read_bytes().replace(b"librknnrt version: 2.3.2", marker))
    if driver is not None:
        (board / "sys/kernel/debug/rknpu/version").write_text(f"RKNPU driver: {driver}\n")
    return board


def wheel_of(tmp_path: Path, version: str) -> Path:
    """An installed rknn-toolkit-lite2 whose metadata says `version` (empty: a broken install)."""
    where = tmp_path / "site"
    info = where / "rknn_toolkit_lite2-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: rknn-toolkit-lite2\nVersion: {version}\n")
    return where


@pytest.mark.parametrize("text, release, kind", [
    ("2.5.0", True, ""), ("2.5", False, "2 parts, not x.y.z"), ("2.5.0b0", False, "a pre-release"),
    ("2.3.0rc1", False, "a pre-release"), ("2.3.0-dirty", False, "a local or dirty build"),
    ("v2.5.0-dirty", False, "a local or dirty build"), ("", False, "unreadable: an empty version"),
    ("banana", False, "not a version")])
def test_each_version_reads_as_what_it_is(text, release, kind):
    assert (read(text).release, read(text).kind()) == (release, kind)


def test_ordering_is_pep_440s():
    assert not read("2.5").older_than(read("2.5.0")) and not read("2.3.0-dirty").older_than(read("2.3.0"))
    assert read("2.3.0rc1").older_than(read("2.3.0")) and read("2.5.0b0").older_than(read("2.5.0"))
    assert not read("banana").older_than(read("2.5.0")) and not read("").older_than(read("2.5.0"))


# (what the board or the files carry, the files' toolkit version, verdict, what the line must say)
CASES = [
    ({"librknnrt": "2.3.0rc1"}, "2.3.0", "bad", "librknnrt 2.3.0rc1 (a pre-release) is older than rknn-toolkit2 2.3.0"),
    ({"librknnrt": "2.5.0b0"}, "2.5.0", "bad", "librknnrt 2.5.0b0 (a pre-release) is older than rknn-toolkit2 2.5.0"),
    ({"librknnrt": "2.3.0-dirty"}, "2.3.0", "unknown", "librknnrt 2.3.0-dirty (a local or dirty build)"),
    ({"librknnrt": "v2.5.0-dirty"}, "2.5.0", "unknown", "librknnrt v2.5.0-dirty (a local or dirty build)"),
    ({"librknnrt": ""}, "2.5.0", "unknown", "librknnrt unreadable (an empty version)"),
    ({"librknnrt": "2.5"}, "2.5.0", "unknown", "librknnrt 2.5 (2 parts, not x.y.z)"),
    ({"librknnrt": "2.5.0", "driver": "2.5"}, "2.5.0", "target", ", RKNPU driver 2.5 (2 parts, not x.y.z)"),
    ({"librknnrt": "2.5.0", "wheel": ""}, "2.5.0", "unknown", "rknn-toolkit-lite2 unreadable (an empty version)"),
    ({"librknnrt": "2.5.0", "wheel": "2.5.0b0"}, "2.5.0", "unknown", "rknn-toolkit-lite2 2.5.0b0 (a pre-release)"),
    ({"librknnrt": "2.5.0"}, "2.5.0", "target", "the project's target stack"),
]


@pytest.mark.parametrize("board, files, kind, says", CASES, ids=[str(c[0]) for c in CASES])
def test_each_odd_version_is_shown_exactly_and_judged(onnx_partition, tmp_path, monkeypatch,  # noqa: F811
                                                     board, files, kind, says):
    monkeypatch.syspath_prepend(str(wheel_of(tmp_path, board["wheel"]) if "wheel" in board else FAKES_DIR))
    part = converted_partition(onnx_partition, tmp_path / "p", [files])
    verdict = preflight(part, board_with(tmp_path, board.get("librknnrt"), board.get("driver")))
    assert (verdict.kind, "\n" in verdict.line) == (kind, False), verdict
    assert says in verdict.line, verdict.line
    assert "not found" not in verdict.line and "not installed" not in verdict.line
    assert "RKNPU driver RKNPU driver" not in verdict.line


def test_librknnrt_2_5_does_not_stop_the_smoke_tier_as_older_than_2_5_0():
    assert version_problem({"api": "2.5"}, "2.5.0") is None
    assert "unreadable" in version_problem({"api": ""}, "2.5.0")


def test_a_partition_built_by_two_toolkits_fails(onnx_partition, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.5.0", "2.3.0"])
    verdict = preflight(part, board_with(tmp_path, "2.5.0"))
    assert verdict.kind == "bad", verdict
    assert "the partition was built by 2 rknn-toolkit2 versions: 2.3.0 (" in verdict.line, verdict.line


def test_the_conversion_record_is_checked_against_the_files(onnx_partition, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    part = converted_partition(onnx_partition, tmp_path / "p", ["2.3.2"])
    manifest = json.loads((part / "manifest.json").read_text())
    manifest["conversion"] = {"toolkit_version": "2.5.0", "target": "rk3588", "precision": "float16",
                              "subgraphs": []}
    (part / "manifest.json").write_text(json.dumps(manifest))
    assert read_stack(part, BOARD).recorded == "2.5.0"
    verdict = preflight(part, board_with(tmp_path, "2.5.0"))
    assert verdict.kind == "bad" and "conversion record says rknn-toolkit2 2.5.0 but its .rknn files were built " \
                                   "by 2.3.2" in verdict.line, verdict


def test_an_empty_rknn_version_is_refused_as_a_missing_one(onnx_partition, tmp_path):  # noqa: F811
    part = converted_partition(onnx_partition, tmp_path / "p", [""])
    verdict = preflight(part, BOARD)
    assert verdict.kind == "bad" and "names no toolkit version (an empty version string)" in verdict.line, verdict
