"""The planner reproduces the board write-up's arithmetic from the board profile data, plans from a
measured run report too, and picks the fastest strategy that fits the memory budget."""
import json

import pytest

from harness.cli.main import main
from harness.memory.planner import inputs_from_profile, lru_hits, memory_mib, plan
from harness.memory.residency import extrapolate


@pytest.fixture(scope="module")
def board_plan():
    return plan(inputs_from_profile(), pools=(1, 4, 16, 83, 84), pins=(16,), prefetch=(1, 2))


def _choice(result, name):
    return next(c for c in result["choices"] if c["strategy"] == name)


def test_no_lru_pool_under_84_ever_hits_in_1092_invocations():
    assert all(lru_hits(84, 13, pool) == 0 for pool in range(1, 84))
    assert lru_hits(84, 13, 84) == 84 * 12                  # only a pool of all 84 keeps anything


def test_lru_rows_say_zero_hits(board_plan):
    assert board_plan["invocations"] == 1092
    for pool in (1, 4, 16, 83):
        assert "0 hits / 1092" in _choice(board_plan, f"lru:{pool}")["note"]
        assert _choice(board_plan, f"lru:{pool}")["seconds"] == pytest.approx(1713.78)


def test_full_residency_saves_380_50_s(board_plan):
    resident = _choice(board_plan, "resident")
    assert round(1713.78 - resident["seconds"], 2) == 380.50
    assert round(resident["seconds"], 2) == 1333.28


def test_16_pinned_save_72_4_s_with_the_pass_mean_and_say_so(board_plan):
    pinned = _choice(board_plan, "pinned:16")
    assert board_plan["mean_lifecycle_s"] == 0.377           # 31.708 / 84 at the profile's precision
    assert round(1713.78 - pinned["seconds"], 1) == 72.4
    assert "pass mean" in pinned["note"] and "per-branch means: 97.9 s" in pinned["note"]


def test_84_resident_contexts_extrapolate_to_11_3_gib(board_plan):
    assert round(board_plan["full_residency_added_gib"], 1) == 11.3
    # the growth is the marginal slope of the probe's last two rows (16 -> 18 contexts)
    assert extrapolate([16, 18], [2144.4, 2420.9], 84) == pytest.approx(2420.9 + 66 * 138.25)
    assert memory_mib(inputs_from_profile(), 16) == pytest.approx(2144.4)      # measured rows as they are


def test_hide_everything_bound_is_1274_to_1302_s_below_full_residency(board_plan):
    bound = board_plan["bound"]
    assert (round(bound["low"]), round(bound["high"])) == (1274, 1302)
    assert bound["high"] < _choice(board_plan, "resident")["seconds"]
    assert bound["added_mib"] == pytest.approx(154.9)          # on-demand memory: one context
    assert _choice(board_plan, "on-demand")["reach"] == 0.0
    assert 0.9 < _choice(board_plan, "resident")["reach"] < 1.0


def test_best_choice_fits_the_budget(board_plan):
    best = board_plan["best"]
    assert best["fits"] and best["added_mib"] <= board_plan["budget_mib"]
    assert not _choice(board_plan, "resident")["fits"]
    fitting = [c["seconds"] for c in board_plan["choices"] if c["fits"]]
    assert best["seconds"] == min(fitting)
    tight = plan(inputs_from_profile(budget_mib=200), pools=(), pins=(), prefetch=(2,))
    assert tight["best"]["strategy"] == "on-demand"            # 2 contexts do not fit 200 MiB


def test_plan_command_from_profile_and_from_a_run_report(tmp_path, capsys):
    assert main(["plan", "--json", str(tmp_path / "plan.json")]) == 0
    printed = capsys.readouterr().out
    assert "1333.28" in printed and "11.3 GiB" in printed and "1274-1302" in printed
    assert json.loads((tmp_path / "plan.json").read_text())["best"]["fits"]
    bad = tmp_path / "report.json"
    bad.write_text("{}")
    assert main(["plan", "--report", str(bad)]) == 2
    assert "--report" in capsys.readouterr().err


# ---------------------------------------------------------------- budget from RAM, granularities, core masks

def _variant(tmp_path, ram_gib, **replace_lines):
    """The board profile with another RAM total and no [sim] context_budget_mib (a 16 GB board has no probe)."""
    from harness.backends.board_profile import DEFAULT_BOARD_DATA
    lines = []
    for line in DEFAULT_BOARD_DATA.read_text().splitlines():
        key = line.split("=")[0].strip()
        if key == "context_budget_mib":
            continue
        if key == "ram_total_gib":
            line = f"ram_total_gib = {ram_gib}"
        lines.append(replace_lines.get(key, line))
    path = tmp_path / f"board-{ram_gib}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_budget_is_derived_from_ram_floor_and_the_last_row_within_the_gates(tmp_path):
    from harness.backends.board_profile import load_board_profile
    from harness.memory.budget import derived_budget
    eight = derived_budget(load_board_profile())
    assert eight.mib == pytest.approx(2144.4)                 # 16 contexts: the 18-row grew swap 21.4 > 16 MiB
    assert "MemAvailable floor 1536 MiB" in eight.how and "RAM 7936 MiB" in eight.how
    sixteen = derived_budget(load_board_profile(_variant(tmp_path, 15.5)))
    assert sixteen.mib == pytest.approx(2144.4 + 7.75 * 1024)  # the doubled RAM goes to contexts
    assert inputs_from_profile(_variant(tmp_path, 15.5)).budget_mib == pytest.approx(sixteen.mib)


def test_plan_on_a_16_gib_board_derives_its_budget_and_chooses(tmp_path, capsys):
    assert main(["plan", "--profile", str(_variant(tmp_path, 15.5)), "--json", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "budget derived from RAM: 10080.4 MiB" in out and "choice: " in out
    space = json.loads((tmp_path / "p.json").read_text())["space"]
    branch = next(r for r in space["rows"] if r["granularity"] == "branch" and r["core_mask"] == "auto")
    block = next(r for r in space["rows"] if r["granularity"] == "block" and r["core_mask"] == "auto")
    assert not branch["resident"]["fits"] and block["resident"]["fits"]    # 11.3 GiB vs fewer fixed parts


def test_budget_option_says_why_the_choice_stays_or_changes(capsys):
    assert main(["plan", "--budget", "20GiB"]) == 0
    assert "--budget 20480 MiB keeps" in capsys.readouterr().out
    assert main(["plan", "--budget", "300MiB"]) == 0
    out = capsys.readouterr().out
    assert "--budget 300 MiB changes the choice from" in out and "over 300 MiB" in out


def test_fused_contexts_pay_the_fitted_fixed_part_once():
    from harness.backends.board_profile import load_board_profile
    from harness.memory.plan_space import fits, inputs_for
    from harness.partition.granularity import parse_granularity
    profile = load_board_profile()
    f = fits(profile)
    weights = f.weights_mib
    measured = [profile.lifecycle_of(b) for b in ("self_attn", "cross_attn", "ffn")]
    assert sum(f.lifecycle_of(w) for w in weights.values()) == pytest.approx(sum(measured))
    assert f.lifecycle[0] > 0 and f.pss[0] > 0
    block = inputs_for(profile, parse_granularity("block"), "auto", 2144.4)
    branch = inputs_from_profile()
    assert block.subgraphs == 28
    assert 28 * sum(measured) - block.pass_stage_sum == pytest.approx(28 * 2 * f.lifecycle[0])
    assert sum(block.run.values()) == pytest.approx(sum(branch.run[b] for b in branch.order))


def test_stream_per_core_halves_a_call_and_doubles_the_contexts():
    from harness.backends.board_profile import load_board_profile
    from harness.memory.plan_space import inputs_for
    from harness.partition.granularity import BRANCH
    profile = load_board_profile()
    one, two = inputs_from_profile(), inputs_for(profile, BRANCH, "stream-per-core", 2144.4)
    assert two.run["ffn"] == pytest.approx(one.run["ffn"] / 2)
    assert two.pass_stage_sum == pytest.approx(2 * one.pass_stage_sum)
    assert memory_mib(two, 8) == pytest.approx(memory_mib(one, 16))


def test_a_model_the_planner_does_not_know_is_one_error_naming_the_key(tmp_path, capsys):
    bad = _variant(tmp_path, 7.75, lifecycle_model='lifecycle_model = "proportional"')
    assert main(["plan", "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "lifecycle_model" in err and str(bad) in err and "Traceback" not in err
