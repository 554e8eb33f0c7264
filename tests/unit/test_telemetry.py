"""Telemetry against tests/data/sysfs-rk3588 (a tree shaped like a ROCK 5C's sysfs/procfs) and this machine.

Tests that change readings work on a copy in tmp_path: tests/data is never written.
"""
from __future__ import annotations

import platform
import shutil
import time
from pathlib import Path

import pytest

from harness.core.errors import ConfigError
from harness.results.telemetry import (
    TelemetryWindow,
    board_id,
    board_identity,
    detect_rk3588,
    read_clocks,
    read_thermals,
)

BOARD = Path(__file__).resolve().parents[1] / "data" / "sysfs-rk3588"
POLICY4 = "sys/devices/system/cpu/cpufreq/policy4/scaling_cur_freq"


@pytest.fixture
def board(tmp_path):
    copy = tmp_path / "board"
    shutil.copytree(BOARD, copy)
    return copy


def test_detects_the_board_tree_and_not_an_empty_one(tmp_path):
    assert detect_rk3588(BOARD)
    assert not detect_rk3588(tmp_path)


def test_device_tree_decides_over_the_runtime_library(board):
    # librknnrt.so and the RKNPU driver also ship on RK3566 boards: the device tree wins.
    (board / "proc/device-tree/compatible").write_bytes(b"radxa,rock-3a\0rockchip,rk3568\0")
    assert not detect_rk3588(board)
    shutil.rmtree(board / "proc/device-tree")
    assert detect_rk3588(board), "without a device tree the NPU nodes / runtime library are the evidence"
    for rel in ("sys", "usr"):
        shutil.rmtree(board / rel)
    assert not detect_rk3588(board)


def test_identity_fields_parsed():
    ident = board_identity(BOARD)
    assert ident["model"] == "Radxa ROCK 5C"
    assert ident["compatible"] == ["radxa,rock-5c", "rockchip,rk3588s"]
    assert ident["soc"] == "rockchip,rk3588s"
    assert ident["serial"] == "8b2c41e07d5f9a36"
    assert ident["kernel"] == "6.1.84-1-rk2410"
    assert ident["npu_driver"] == "0.9.8"
    assert ident["runtime_lib"] == "2.3.2"
    assert ident["toolkit_lite"] is None          # rknn-toolkit-lite2 only installs on aarch64
    assert ident["onnxruntime"] and ident["python"] == platform.python_version()


def test_identity_tolerates_an_empty_root(tmp_path):
    ident = board_identity(tmp_path)
    for field in ("model", "soc", "serial", "kernel", "npu_driver", "runtime_lib"):
        assert ident[field] is None, field
    assert ident["compatible"] == []


def test_board_id_is_short_stable_and_hides_the_serial(board):
    ident = board_identity(BOARD)
    bid = board_id(ident)
    assert bid.startswith("radxa-rock-5c-") and len(bid) == len("radxa-rock-5c-") + 8
    assert ident["serial"] not in bid
    assert board_id(board_identity(BOARD)) == bid
    (board / "proc/device-tree/serial-number").write_bytes(b"0000000000000001\0")
    assert board_id(board_identity(board)) != bid, "two boards of one model must not share baselines"
    assert board_id({"machine": "x86_64", "hostname": "ci-1"}).startswith("host-x86-64-")


def test_read_clocks():
    clocks = read_clocks(BOARD)
    assert clocks == {
        "cpu policy0": {"freq_hz": 1_800_000_000, "governor": "performance"},
        "cpu policy4": {"freq_hz": 2_304_000_000, "governor": "performance"},
        "cpu policy6": {"freq_hz": 2_304_000_000, "governor": "performance"},
        "npu": {"freq_hz": 1_000_000_000, "governor": "userspace"},
        "ddr": {"freq_hz": 2_112_000_000, "governor": "performance"},
    }


def test_read_thermals():
    zones = read_thermals(BOARD)
    assert list(zones)[:2] == ["thermal_zone0", "thermal_zone1"] and len(zones) == 7
    soc = zones["thermal_zone0"]
    assert soc["type"] == "soc-thermal" and soc["temp_c"] == 41.0
    assert [(t["type"], t["temp_c"]) for t in soc["trips"]] == [
        ("active", 50.0), ("passive", 75.0), ("passive", 85.0), ("critical", 115.0)]
    assert zones["thermal_zone6"]["type"] == "npu-thermal"


def test_unchanged_window_is_valid():
    with TelemetryWindow(BOARD, interval=0.01) as window:
        time.sleep(0.05)
    verdict = window.verdict()
    assert verdict["valid"], verdict["reasons"]
    assert verdict["reasons"] == [] and len(verdict["samples"]) >= 2


def test_cpu_frequency_change_invalidates_the_window(board):
    with TelemetryWindow(board, interval=5) as window:
        (board / POLICY4).write_text("1800000\n")
    verdict = window.verdict()
    assert not verdict["valid"]
    assert len(verdict["reasons"]) == 1
    assert "policy4" in verdict["reasons"][0] and "2304 MHz -> 1800 MHz" in verdict["reasons"][0]


def test_governor_change_invalidates_the_window(board):
    with TelemetryWindow(board, interval=5) as window:
        (board / "sys/class/devfreq/dmc/governor").write_text("dmc_ondemand\n")
    (reason,) = window.verdict()["reasons"]
    assert reason.startswith("clock ddr governor changed") and "dmc_ondemand" in reason


def test_background_sampling_catches_a_transient_change(board):
    original = (board / POLICY4).read_text()
    with TelemetryWindow(board, interval=0.01) as window:
        (board / POLICY4).write_text("408000\n")
        time.sleep(0.2)
        (board / POLICY4).write_text(original)
    verdict = window.verdict()
    assert verdict["samples"][0]["clocks"] == verdict["samples"][-1]["clocks"]
    assert not verdict["valid"] and "policy4" in verdict["reasons"][0]


def test_temperature_over_a_passive_trip_invalidates_the_window(board):
    with TelemetryWindow(board, interval=5) as window:
        (board / "sys/class/thermal/thermal_zone6/temp").write_text("115500\n")
    (reason,) = window.verdict()["reasons"]
    assert reason.startswith("thermal_zone6 (npu-thermal) reached its critical trip point 115 C")


def test_fan_trip_does_not_invalidate_but_throttling_does(board):
    temp = board / "sys/class/thermal/thermal_zone0/temp"
    with TelemetryWindow(board, interval=5) as window:
        temp.write_text("60000\n")                    # over the fan's active trip only
    assert window.verdict()["valid"]
    with TelemetryWindow(board, interval=5) as window:
        temp.write_text("80000\n")
    (reason,) = window.verdict()["reasons"]
    assert "thermal_zone0 (soc-thermal)" in reason and "passive trip point 75 C (peak 80 C)" in reason


def test_window_on_this_machine_tolerates_missing_files():
    with TelemetryWindow("/", interval=0.02) as window:
        time.sleep(0.05)
    verdict = window.verdict()
    assert len(verdict["samples"]) >= 2 and isinstance(verdict["valid"], bool)
    if not read_clocks("/") and not read_thermals("/"):
        assert verdict["valid"] and verdict["reasons"] == []


@pytest.mark.parametrize("bad", [0, -1, "0.5", None, True])
def test_bad_interval(bad):
    with pytest.raises(ConfigError, match="'interval'"):
        TelemetryWindow(BOARD, interval=bad)


def test_runtime_version_is_read_from_librknnrt_path_first(tmp_path, monkeypatch):
    # The runtime opens $LIBRKNNRT_PATH before /usr/lib/librknnrt.so; the report names that library's version.
    lib = tmp_path / "opt-rknn" / "librknnrt.so"
    lib.parent.mkdir()
    lib.write_bytes(b"\0rknn_init\0librknnrt version: 2.5.0 (e4ab7ec0b@2025-10-20T10:00:00)\0")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(lib))
    assert board_identity("/")["runtime_lib"] == "2.5.0"
    assert board_identity(BOARD)["runtime_lib"] == "2.3.2", "a simulated tree ignores this machine's env"
