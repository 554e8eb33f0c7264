"""The onnxruntime A/A streams the history verdict's figures come from (harness/results/streams) are
read back and judged again by `results simulate --streams`, each stream and all together."""
import functools
import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from harness.model.config import REPO_ROOT
from harness.results.simulate import AFTER_RUNS, HISTORY_RUNS, STREAMS_DIR, store_looks, stream_figures, stream_record

STREAMS = sorted(STREAMS_DIR.glob("onnxruntime-aa-*.json.gz"))


@functools.cache
def _kept(path) -> dict:
    """A kept stream file, read (once per test session: it is read only)."""
    with gzip.open(path, "rt") as handle:
        return json.load(handle)


def test_every_kept_stream_says_how_and_when_it_was_recorded():
    assert STREAMS, "no stream kept under harness/results/streams"
    for path in STREAMS:
        kept = _kept(path)
        recorded = kept["recorded"]
        assert recorded["when"] and recorded["cpus"] and recorded["rounds"] > 0, path.name
        pairs = kept["onnxruntime"]["rows"]["+0%"]["pairs"]
        assert len(pairs) == recorded["rounds"], path.name
        assert all(run["step"] > 0 for pair in pairs for run in pair.values()), path.name


def _cut(path, rounds: int, out):
    """The first `rounds` rounds of a kept stream, as a stream file of its own."""
    kept = _kept(path)          # cached: built anew around it, not changed
    row = {key: value[:rounds] for key, value in kept["onnxruntime"]["rows"]["+0%"].items()}
    kept = {**kept, "onnxruntime": {**kept["onnxruntime"], "rows": {"+0%": row}}}
    with gzip.open(out, "wt") as handle:
        json.dump(kept, handle)
    return out


@pytest.mark.slow          # a few dozen noise factors, in a subprocess
def test_kept_streams_are_judged_each_and_together(tmp_path):
    # 110 rounds give five windows: from the first with a learned noise factor (round 85) to round 105
    (tmp_path / "kept").mkdir()
    for name in ("one", "two"):
        _cut(STREAMS[0], 110, tmp_path / "kept" / f"{name}.json.gz")
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "results", "simulate", "--runs", "1",
                           "--streams", str(tmp_path / "kept"), "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kept stream one.json.gz" in proc.stderr and "kept stream two.json.gz" in proc.stderr
    result = json.loads(out.read_text())
    each = [result["streams"][name] for name in ("one.json.gz", "two.json.gz")]
    assert [row["any look"][1] for row in each] == [5, 5]       # windows at rounds 85, 90, ..., 105
    total = result["rates"]["kept streams A/A, 5 looks"]
    assert (total["hits"], total["n"]) == (sum(row["any look"][0] for row in each), 10)


# The A/A changes of the kept streams that the store's verdict flagged while the noise factor had
# only its bulk and tail ratios (6 of the 7 it flagged there, 2 December 2026): each a 3-5-run group
# of the NPU core just over its threshold after the machine's level moved at the window's boundary.
# (stream, round the change is at, look that flagged it)
LEVEL_MOVED = [("onnxruntime-aa-2026-12-02-0041.json.gz", 155, 5), ("onnxruntime-aa-2026-12-02-0041.json.gz", 635, 5),
               ("onnxruntime-aa-2026-12-02-0041.json.gz", 705, 5), ("onnxruntime-aa-2026-12-02-0106.json.gz", 285, 3),
               ("onnxruntime-aa-2026-12-02-0106.json.gz", 360, 4), ("onnxruntime-aa-2026-12-02-0106.json.gz", 430, 3)]


@pytest.mark.parametrize("name,at,look", LEVEL_MOVED)
def test_a_level_that_moves_now_and_then_widens_by_the_records_spread(name, at, look):
    from harness.results.verdict import noise
    from harness.results.verdict.figures import NPU_CORE
    from harness.results.verdict.history import judge_values

    pairs = _kept(STREAMS_DIR / name)["onnxruntime"]["rows"]["+0%"]["pairs"]
    history = [stream_figures(p["baseline"]) for p in pairs[at - HISTORY_RUNS:at]]
    group = [stream_figures(p["candidate"]) for p in pairs[at:at + AFTER_RUNS]]
    record = stream_record(pairs, at)
    verdicts = judge_values(history, group[:look - 1], group[look - 1], 10.0, look=look, record=record)
    core = next(v for v in verdicts if v.label == NPU_CORE)
    assert not [v.line() for v in verdicts if v.regression]
    assert core.widened > 1, core
    # what widened it: the spread of the record's statistics, past what independent runs give (in 4
    # of these 6 its upper quantiles are not: a bulk ratio alone missed them on 2 December)
    t, df = noise.standardized_shifts(np.log([r[NPU_CORE] for r in record[0]]), HISTORY_RUNS, look)
    bulk, _, spread = noise._ratios(t[None, :], np.array([np.median(df)]), 0.005)[0]
    bars = noise._independent_ratios(t.size, HISTORY_RUNS, look, 0.005)
    assert spread > bars[2], (bulk, spread, bars)


# The A/A changes of the kept streams flagged at look 1 by the three-ratio noise factor (2 December
# 2026): each one run disturbed past its threshold (one branch or stage +38-132 %, or the NPU core +58 %).
# A fourth then, 0542 at round 405, is no longer over its threshold at look 1 since the bulk ratio
# reads every upper quantile (3 December). (stream, round the change is at)
ONE_RUN_DISTURBED = [("onnxruntime-aa-2026-12-02-0041.json.gz", 605), ("onnxruntime-aa-2026-12-02-0542.json.gz", 735),
                     ("onnxruntime-aa-2026-12-02-0604.json.gz", 445)]


@pytest.mark.parametrize("name,at", ONE_RUN_DISTURBED)
def test_a_run_disturbed_at_look_1_is_cleared_by_the_second_run(name, at):
    from harness.results.verdict.history import judge_values

    pairs = _kept(STREAMS_DIR / name)["onnxruntime"]["rows"]["+0%"]["pairs"]
    history = [stream_figures(p["baseline"]) for p in pairs[at - HISTORY_RUNS:at]]
    after = [stream_figures(p["candidate"]) for p in pairs[at:at + AFTER_RUNS]]
    record = stream_record(pairs, at)
    first, second = (judge_values(history, [], run, 10.0, look=1, record=record) for run in after[:2])
    assert [v for v in first if v.regression], "the first run alone is over its threshold"
    assert not [v.line() for v in second if v.regression]
    assert not any(store_looks(history, after, record)), "and no look of the change is flagged"
