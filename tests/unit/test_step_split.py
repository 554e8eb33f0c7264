"""summarize(): the per-step tables and the step split, on records whose sums are known by hand.

Two steps of a 2-block partition (6 subgraphs) plus the decoder. Every time is a power of two, so
every sum and quotient below is exact in binary floating point.
"""
import pytest

from harness.lifecycle.steptimes import summarize

BRANCHES = ("self_attn", "cross_attn", "ffn")
# seconds per invocation, by stage and branch
STAGE_SECONDS = {"load": 1 / 64, "init": 1 / 8, "run": None, "release": 1 / 128}
RUN_SECONDS = {"self_attn": 1 / 16, "cross_attn": 1 / 32, "ffn": 1 / 4}
STEPS, BLOCKS = 2, 2


def _records():
    out = []
    for step in range(STEPS):
        for block in range(BLOCKS):
            for k, branch in enumerate(BRANCHES):
                for stage, seconds in STAGE_SECONDS.items():
                    out.append({"step": step, "block": block, "branch": branch, "subgraph": 3 * block + k,
                                "stage": stage, "seconds": RUN_SECONDS[branch] if stage == "run" else seconds})
    # the decoder runs once after the last step: not a part of any step's tables
    out += [{"step": STEPS - 1, "block": None, "branch": "decoder", "subgraph": 6, "stage": s, "seconds": 8.0}
            for s in STAGE_SECONDS]
    return out


HOST = [{"step": s, "category": c, "seconds": t} for s in range(STEPS)
        for c, t in (("adaln", 1 / 32), ("cast", 1 / 64), ("residual", 1 / 256))]
WALLS = [2.0, 2.5]


def test_tables_per_step_from_known_records():
    report = summarize(_records(), HOST, WALLS)
    tables = report["tables"]
    per_pass = BLOCKS              # per step, each branch runs once per block
    life = tables["lifecycle_pass"]
    assert life["load"] == per_pass * 3 / 64
    assert life["init"] == per_pass * 3 / 8
    assert life["release"] == per_pass * 3 / 128
    assert life["run"] == per_pass * (1 / 16 + 1 / 32 + 1 / 4)
    assert life["stage_sum"] == life["load"] + life["init"] + life["release"]
    assert tables["core_per_step"] == {b: per_pass * RUN_SECONDS[b] for b in BRANCHES}
    split = tables["step_split"]
    assert split["step"] == 2.25                               # mean of the step walls
    assert split["lifecycle"] == sum(life[s] for s in STAGE_SECONDS)
    assert (split["host_adaln"], split["host_cast"], split["host_residual"]) == (1 / 32, 1 / 64, 1 / 256)
    assert split["host_embed"] == split["host_final"] == 0.0
    assert split["host"] == 1 / 32 + 1 / 64 + 1 / 256
    assert split["rest"] == 2.25 - split["lifecycle"] - split["host"]
    assert report["invocations"] == STEPS * BLOCKS * 3
    assert report["stage_records"] == STEPS * BLOCKS * 3 * 4
    assert report["denoise_seconds"] == 4.5


def test_records_past_the_last_step_are_left_out():
    # a run stopped part-way (memory guard, NaN): step 2's partial records have no wall time yet
    stray = [{**r, "step": STEPS} for r in _records() if r["branch"] != "decoder"][:5]
    host = HOST + [{"step": STEPS, "category": "adaln", "seconds": 1.0}]
    assert summarize(_records() + stray, host, WALLS)["tables"] == summarize(_records(), HOST, WALLS)["tables"]


def test_no_step_finished():
    report = summarize([], [], [])
    assert report["tables"]["step_split"]["step"] == 0.0 and report["invocations"] == 0
    assert report["tables"]["lifecycle_pass"]["run"] == pytest.approx(0.0)


def test_spectrum_forecast_steps_are_counted_apart():
    # Steps 0 and 1 computed (the records above), steps 2 and 3 forecast: no lifecycle record, only
    # host math (the forecast and the final layer). The pass tables stay per computed step; the
    # forecast steps have their own split, and per_image holds the whole denoise.
    host = HOST + [{"step": s, "category": c, "seconds": t} for s in (2, 3)
                   for c, t in (("forecast", 1 / 512), ("final", 1 / 1024))]
    walls = WALLS + [1 / 128, 1 / 64]
    report = summarize(_records(), host, walls, computed_steps=[0, 1])
    tables = report["tables"]
    assert tables["lifecycle_pass"] == summarize(_records(), HOST, WALLS)["tables"]["lifecycle_pass"]
    assert tables["step_split"]["step"] == 2.25 and tables["step_split"]["host_forecast"] == 0.0
    assert report["steps"] == {"total": 4, "computed": 2, "forecast": 2}
    fs = tables["forecast_step"]
    assert fs["step"] == (1 / 128 + 1 / 64) / 2
    assert (fs["host_forecast"], fs["host_final"]) == (1 / 512, 1 / 1024)
    assert fs["rest"] == fs["step"] - 1 / 512 - 1 / 1024
    image = tables["per_image"]
    assert (image["computed_steps"], image["forecast_steps"], image["invocations"]) == (2, 2, STEPS * BLOCKS * 3)
    assert image["computed_seconds"] == 4.5 and image["forecast_seconds"] == 1 / 128 + 1 / 64
    assert image["denoise"] == report["denoise_seconds"] == 4.5 + 1 / 128 + 1 / 64
    assert image["per_computed_step"] == 2.25
