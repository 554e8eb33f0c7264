"""Suite settings: command line > board profile > defaults; backend auto-detection; the header."""
import subprocess
import sys

import pytest

from harness.config import REPO_ROOT
from harness.errors import ConfigError
from harness.pytest_plugin import OPTIONS, resolve_settings

BOARD_TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"


def cli(**given):
    return {name: given.get(name) for name in OPTIONS}


def test_defaults_pick_onnxruntime_off_board(tmp_path):
    s = resolve_settings(cli(telemetry_root=str(tmp_path)), None)
    assert s.backend == "onnxruntime" and not s.on_board
    assert s.mem_floor == int(1.5 * 2**30) and s.swap_limit == 16 * 2**20
    assert s.golden_dir.name == "embedded-digits"
    assert s.pss_budget == 128 * 2**20          # models/embedded/model.toml [gates]


def test_auto_picks_rknnlite_on_a_board_shaped_tree_and_names_what_is_missing():
    s = resolve_settings(cli(telemetry_root=str(BOARD_TREE), require_npu=True), None)
    assert s.on_board and s.backend == "rknnlite"
    assert "rknn-toolkit-lite2" in s.npu_problem        # no runtime installed on this machine


def test_board_profile_fills_in_and_the_command_line_wins(tmp_path):
    profile = tmp_path / "board.toml"
    profile.write_text('[suite]\nbackend = "onnxruntime"\nmem_floor = "2GiB"\nbench_rounds = 3\n'
                       'swap_limit = "32MiB"\n')
    s = resolve_settings(cli(swap_limit="8MiB", telemetry_root=str(tmp_path)), str(profile))
    assert s.mem_floor == 2 * 2**30 and s.bench_rounds == 3 and s.swap_limit == 8 * 2**20


@pytest.mark.parametrize("text,fragment", [
    ('[suite]\nbackend = "tpu"\n', "--backend tpu: unknown"),
    ('[suite]\nmem_flor = "1GiB"\n', "unknown [suite] option 'mem_flor'"),
    ('[suite]\nbench_rounds = 0\n', "bench-rounds expects a positive whole number"),
    ("[suite\n", "not valid TOML"),
])
def test_bad_profile_values_are_named(tmp_path, text, fragment):
    profile = tmp_path / "board.toml"
    profile.write_text(text)
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        resolve_settings(cli(telemetry_root=str(tmp_path)), str(profile))


def test_shipped_board_profiles_hold_valid_values():
    import tomllib

    from harness.backends.rknnlite import parse_core_mask
    from harness.memory import parse_size
    from harness.pytest_plugin.options import typed_value
    profiles = sorted((REPO_ROOT / "boards").glob("*.toml"))
    assert profiles
    for profile in profiles:
        suite = tomllib.loads(profile.read_text())["suite"]
        assert set(suite) <= set(OPTIONS), profile
        for name, value in suite.items():
            typed_value(name, value, str(profile))
        for name in ("mem_floor", "swap_limit"):
            if name in suite:
                assert parse_size(suite[name]) > 0
        parse_core_mask(suite.get("core_mask", "auto"))
        assert suite.get("backend", "auto") in ("auto", "onnxruntime", "rknnlite")


def test_report_header_names_board_runtime_and_backend():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-p",
                           "no:cacheprovider", "--collect-only", "-m", "npu",
                           f"--telemetry-root={BOARD_TREE}", "--backend=onnxruntime"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    header = proc.stdout
    assert "anima: backend onnxruntime (asked: onnxruntime)" in header
    assert "on RK3588: True" in header and "ROCK 5C" in header
    assert "librknnrt" in header and "NPU driver" in header
    assert "anima: partition " in header and ("manifest sha256" in header or "exported on first use" in header)
