"""The shipped partition (models/embedded-rk3588-float16.tar.xz) cannot go stale: its manifest's source
ONNX sha256s are those of today's FP32 export of the embedded model (fast tier), and a conversion of that
export by the pinned toolkit today gives the same layer tables as its build log (toolkit tier). A board's
`bin/harness generate` (the board-shaped tree, the fake runtime of tests/fakes) runs it with no argument
and, without librknnrt, ends in the suite's one line, the runtime's own output kept in the run report."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from harness.core.errors import ConfigError
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from harness.runtime.shipped import SHIPPED, shipped_manifest, shipped_partition
from tests.fakes import FAKES_DIR
from tests.helpers import export_fp32, make_random_model_dir

TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"
REBUILD = "rebuild it as harness/runtime/shipped.py says"


@pytest.fixture(scope="module")
def todays_export(tmp_path_factory):
    return export_fp32(load_bundle(EMBEDDED_DIR), tmp_path_factory)


def test_the_shipped_partition_was_converted_from_todays_export_of_the_embedded_model(todays_export):
    from harness.toolkit.envs import default_version
    shipped = shipped_manifest()
    assert shipped["weights_sha256"] == load_bundle(EMBEDDED_DIR).digest, f"other weights: {REBUILD}"
    conversion = shipped["conversion"]
    assert (conversion["toolkit_version"], conversion["target"], conversion["precision"]) == \
        (default_version(), "rk3588", "float16"), f"not the pinned toolkit's FP16 rk3588 build: {REBUILD}"
    export = json.loads((todays_export / "manifest.json").read_text())
    today = {e["file"]: e["sha256"] for e in [*export["subgraphs"], export["decoder"]]}
    converted = {s["onnx_file"]: s["onnx_sha256"] for s in conversion["subgraphs"]}
    stale = sorted(name for name in today if converted.get(name) != today[name])
    assert not stale and converted.keys() == today.keys(), f"{len(stale)} subgraphs differ ({stale[:3]}): {REBUILD}"


def test_the_shipped_partition_serves_only_the_weights_it_was_converted_from(tmp_path):
    other = load_bundle(make_random_model_dir(tmp_path / "model", seed=3))
    with pytest.raises(ConfigError, match="converted from other weights"):
        shipped_partition(other, tmp_path / "cache")
    assert not (tmp_path / "cache" / "partitions").exists()


@pytest.mark.slow          # a harness process of its own, unpacking 40 MB
def test_generate_on_a_board_runs_the_shipped_partition_and_its_line_comes_first(tmp_path):
    """No --partition, no --backend: the board-shaped tree makes `auto` rknnlite; with no librknnrt.so the
    runtime's own lines (the fake prints them as 2.5.0 does) go to the report, the terminal gets one line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(FAKES_DIR)]),
           "ANIMA_TELEMETRY_ROOT": str(TREE), "LIBRKNNRT_PATH": str(tmp_path / "missing" / "librknnrt.so")}
    done = subprocess.run([sys.executable, "-m", "harness", "generate", "--out", str(tmp_path / "g.png"),
                           "--cache-dir", str(tmp_path / "cache"), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if not line.startswith("unpacking the shipped")]
    assert len(lines) == 1 and lines[0].startswith("error: rknnlite: subgraph 0 (block 0 self_attn): init failed"), \
        done.stderr
    assert "librknnrt.so does not exist" in lines[0] and "Catch exception" not in done.stdout + done.stderr
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["backend"] == "rknnlite" and "Catch exception when init runtime!" in report["runtime_log"]
    unpacked = tmp_path / "cache" / "partitions" / "embedded-rk3588-float16"
    assert report["partition"] == str(unpacked) and (unpacked / "manifest.json").is_file()


def layer_tables(build_log: str) -> dict[str, list]:
    """Each subgraph's layer table from a conversion's build.log (one '===== label: ... =====' section each)."""
    from harness.toolkit.layers import parse_layer_table
    sections = re.split(r"^===== .*?-> (\S+)\.rknn =====$", build_log, flags=re.M)[1:]
    return {stem: parse_layer_table(text, stem) for stem, text in zip(sections[::2], sections[1::2])}


@pytest.mark.toolkit
@pytest.mark.slow
def test_a_conversion_today_gives_the_shipped_layer_tables(todays_export, tmp_path, toolkit_version):
    from harness.toolkit.convert import ConvertSettings, convert_partition
    convert_partition(todays_export, tmp_path / "rknn", ConvertSettings(version=toolkit_version, quiet=True))
    with tarfile.open(SHIPPED, "r:xz") as tar:
        member = tar.extractfile("build.log")
        assert member is not None
        shipped = layer_tables(member.read().decode(errors="replace"))
    today = layer_tables((tmp_path / "rknn" / "build.log").read_text(errors="replace"))
    assert len(shipped) == 85 and shipped.keys() == today.keys()
    differ = [stem for stem in today if today[stem] != shipped[stem]]
    assert not differ, f"{len(differ)} layer tables differ from the shipped build ({differ[:3]}): {REBUILD}"
