"""Suite settings: command line > board profile > defaults; backend auto-detection; the header."""
import re

import pytest

from harness.core.errors import ConfigError
from harness.model.config import REPO_ROOT
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


@pytest.mark.parametrize("profile", sorted((REPO_ROOT / "boards").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_board_profiles_resolve_and_take_effect(profile, tmp_path):
    """Each shipped profile through the suite's own validation (resolve_settings), and every value it
    sets that is not a default reaches the settings. Paths that exist only on the runner are given on
    the command line, which wins over the profile."""
    import tomllib
    runner_only = {"model_dir", "golden_dir", "history"}
    here = cli(telemetry_root=str(tmp_path), model_dir=str(REPO_ROOT / "models" / "embedded"),
               golden_dir=str(tmp_path / "golden"), history=str(tmp_path / "history.jsonl"))
    with_profile = resolve_settings(here, str(profile))
    without = resolve_settings(here, None)
    assert with_profile.board_profile == profile
    suite = tomllib.loads(profile.read_text())["suite"]
    defaults = {name: OPTIONS[name].default for name in OPTIONS}
    changed = [name for name, value in suite.items()
               if name not in runner_only and str(value) != str(defaults[name])]
    assert changed, f"{profile.name} sets nothing but defaults and runner paths"
    for name in changed:
        attribute = "backend_requested" if name == "backend" else name
        if getattr(with_profile, attribute) != getattr(without, attribute):
            continue
        # a value that is also what no profile gives may still be the one the profile needs: a profile
        # changes other defaults (--inconclusive auto fails under a board profile; host-ci says warn)
        import tomli_w
        document = tomllib.loads(profile.read_text())
        del document["suite"][name]
        less = tmp_path / f"without-{name}.toml"
        less.write_text(tomli_w.dumps(document))
        assert getattr(with_profile, attribute) != getattr(resolve_settings(here, str(less)), attribute), \
            f"{profile.name}: '{name}' had no effect"


def test_report_header_names_board_runtime_and_backend(pytester):
    result = pytester.runpytest_subprocess("-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
                                           "-p", "no:cacheprovider", "--collect-only", "-m", "npu",
                                           f"--telemetry-root={BOARD_TREE}", "--backend=onnxruntime",
                                           str(REPO_ROOT / "tests" / "acceptance"))
    assert result.ret == pytest.ExitCode.OK, str(result.stderr)
    header = str(result.stdout)
    assert "anima: backend onnxruntime (asked: onnxruntime)" in header
    assert "on RK3588: True" in header and "ROCK 5C" in header
    assert "librknnrt" in header and "NPU driver" in header
    assert re.search(r"anima: results store sqlite:////\S+/\.benchmarks/results\.sqlite", header)
    assert "anima: partition " in header and ("manifest sha256" in header or "exported on first use" in header)


@pytest.mark.parametrize("given, fragment", [
    ({"backend": "faults", "fault": "bogus"},
     "--fault 'bogus': expected nan@SUBGRAPH, shape@SUBGRAPH, hang@SUBGRAPH, init-fails-after=INITS, slow=SECONDS, "
     "slow=xFACTOR or leak=KIND:AMOUNT"),
    ({"backend": "faults", "fault": "nan@-1"}, "--fault 'nan@-1'"),
    ({"backend": "faults", "fault": "nan@85"},
     "--fault nan@85: embedded-digits has subgraphs 0..83 and its decoder 84"),
    ({"backend": "faults", "fault": "slow=inf"}, "--fault 'slow=inf'"),
    ({"backend": "faults", "fault": "slow=x0.5"}, "--fault 'slow=x0.5'"),
    ({"backend": "onnxruntime", "fault": "nan@3"},
     "--fault nan@3: only --backend faults reads it, this run uses onnxruntime"),
    ({"cases": "seven,nine"},
     "--cases: no golden case 'nine' in .*cases.toml \\(cases: seven, seven-spectrum, three, zero\\)"),
    ({"cases": " , "}, "--cases ' , ': name at least one golden case"),
    ({"bench_sampler": "dpm"}, "--bench-sampler dpm: choose flow-euler, spectrum"),
])
def test_bad_fault_and_cases_are_named(tmp_path, given, fragment):
    with pytest.raises(ConfigError, match=fragment):
        resolve_settings(cli(telemetry_root=str(tmp_path), **given), None)


def test_bench_sampler_is_taken(tmp_path):
    assert resolve_settings(cli(telemetry_root=str(tmp_path), bench_sampler="spectrum"),
                            None).bench_sampler == "spectrum"
    assert resolve_settings(cli(telemetry_root=str(tmp_path)), None).bench_sampler is None


def test_good_fault_and_cases_reach_the_settings(tmp_path):
    s = resolve_settings(cli(telemetry_root=str(tmp_path), backend="faults", fault="nan@37,slow=x4",
                             cases="zero,seven"), None)
    assert s.backend_options.as_dict() == {"nan_subgraph": 37, "slowdown": 4.0} and s.cases == ["zero", "seven"]


def test_bad_option_is_one_line_and_a_usage_error(pytester):
    """On the command line: exit code 4 (usage error), the message, no traceback."""
    result = pytester.runpytest_subprocess("-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
                                           "-p", "no:cacheprovider", "--backend=faults", "--fault=nan@x",
                                           str(REPO_ROOT / "tests" / "acceptance" / "test_numerics.py"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --fault 'nan@x': expected nan@SUBGRAPH, shape@SUBGRAPH, hang@SUBGRAPH, "
                                 "init-fails-after=INITS, slow=SECONDS, slow=xFACTOR or leak=KIND:AMOUNT"])
    assert "Traceback" not in str(result.stderr) + str(result.stdout)


def test_the_int8_ffn_has_one_name():
    assert resolve_settings({"fake_quant": "w8a8-ffn"}, None).fake_quant == "w8a8-ffn"
    with pytest.raises(ConfigError, match=r"--fake-quant ffn-w8a8: choose w8a8-ffn"):
        resolve_settings({"fake_quant": "ffn-w8a8"}, None)


def test_an_old_option_spelling_still_works_and_says_the_new_one(tmp_path):
    # users' CI scripts and board profiles carry --baseline-threshold and --ab-baseline
    s = resolve_settings({**cli(telemetry_root=str(tmp_path)), "baseline_threshold": "20%", "ab_baseline": "old"},
                         None)
    assert s.fixed_threshold == 20.0 and s.ab_a == tmp_path.cwd() / "old"
    assert s.renamed == ["command line: --ab-baseline is deprecated and will go: it is --ab-a now",
                         "command line: --baseline-threshold is deprecated and will go: it is --fixed-threshold now"]
    # the new spelling wins over the old one
    both = {**cli(telemetry_root=str(tmp_path), fixed_threshold="30%"), "baseline_threshold": "20%"}
    assert resolve_settings(both, None).fixed_threshold == 30.0
    assert resolve_settings(cli(telemetry_root=str(tmp_path)), None).renamed == []


def test_an_old_key_in_a_board_profile_still_works_and_says_the_new_one(tmp_path):
    profile = tmp_path / "board.toml"
    profile.write_text('[suite]\nbaseline_threshold = "40%"\n[tier.pr]\nab_baseline = "old"\n')
    s = resolve_settings(cli(telemetry_root=str(tmp_path), tier="pr"), str(profile))
    assert s.fixed_threshold == 40.0 and s.ab_a == tmp_path.cwd() / "old"
    assert s.renamed == [f"{profile} [suite]: baseline_threshold is deprecated and will go: it is fixed_threshold now",
                         f"{profile} [tier.pr]: ab_baseline is deprecated and will go: it is ab_a now"]


def test_an_old_option_spelling_is_said_once_on_the_command_line(pytester, tmp_path):
    result = pytester.runpytest_subprocess("-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
                                           "-p", "no:cacheprovider", "--collect-only", "-q",
                                           f"--ab-baseline={tmp_path}", "--baseline-threshold=20%",
                                           str(REPO_ROOT / "tests" / "acceptance" / "test_benchmark_ab.py"))
    assert result.ret == pytest.ExitCode.OK, str(result.stderr)
    said = [line for line in result.stderr.lines if "deprecated" in line]
    assert said == ["command line: --ab-baseline is deprecated and will go: it is --ab-a now",
                    "command line: --baseline-threshold is deprecated and will go: it is --fixed-threshold now"], \
        result.stderr.lines
    # --ab-baseline reached the setting: the A/B test is collected, not deselected for want of --ab-a
    assert any("test_denoise_time_ab" in line for line in result.stdout.lines), result.stdout.lines
