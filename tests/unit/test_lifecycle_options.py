"""The suite's lifecycle options: --lifecycle, --images and the simulated board's own options,
from the command line or a board profile's [suite] table."""
import pytest

from harness.core.errors import ConfigError
from harness.pytest_plugin import OPTIONS, resolve_settings


def cli(tmp_path, **given):
    return {name: given.get(name) for name in OPTIONS} | {"telemetry_root": str(tmp_path)}


def test_defaults_are_on_demand_and_one_image(tmp_path):
    s = resolve_settings(cli(tmp_path), None)
    assert (s.lifecycle, s.images) == ("on-demand", 1)


def test_board_sim_with_prefetch_and_images(tmp_path):
    s = resolve_settings(cli(tmp_path, backend="board-sim", lifecycle="PREFETCH:2", images="4",
                             time_scale="0.01", core_mask="1"), None)
    assert (s.backend, s.lifecycle, s.images) == ("board-sim", "prefetch:2", 4)
    assert s.backend_options.get("time_scale") == 0.01 and s.backend_options.get("core_mask") == "1"
    assert s.backend_options.get("profile_data").endswith("boards/data/rock5c-anima.toml")


def test_from_a_board_profile_table(tmp_path):
    profile = tmp_path / "board.toml"
    profile.write_text('[suite]\nbackend = "board-sim"\nlifecycle = "pinned:16"\nimages = 2\n')
    s = resolve_settings(cli(tmp_path), str(profile))
    assert (s.backend, s.lifecycle, s.images) == ("board-sim", "pinned:16", 2)


@pytest.mark.parametrize("given, words", [
    ({"lifecycle": "lru:0"}, "--lifecycle"),
    ({"images": "0"}, "images"),
    ({"backend": "board-sim", "time_scale": "2"}, "time_scale"),
    ({"backend": "board-sim", "board_profile_data": "/nonexistent.toml"}, "/nonexistent.toml"),
])
def test_bad_values_are_one_error_naming_the_option(tmp_path, given, words):
    with pytest.raises(ConfigError, match=words):
        resolve_settings(cli(tmp_path, **given), None)
