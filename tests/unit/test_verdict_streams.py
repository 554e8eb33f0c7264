"""The onnxruntime A/A streams the README's history-verdict figures come from (tools/data/streams) are
read back and judged again by tools/bench_verdicts.py --ort-pairs, each stream and all together."""
import gzip
import json
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT

STREAMS = sorted((REPO_ROOT / "tools" / "data" / "streams").glob("onnxruntime-aa-*.json.gz"))


def test_every_kept_stream_says_how_and_when_it_was_recorded():
    assert STREAMS, "no stream kept under tools/data/streams"
    for path in STREAMS:
        with gzip.open(path, "rt") as handle:
            kept = json.load(handle)
        recorded = kept["recorded"]
        assert recorded["when"] and recorded["cpus"] and recorded["rounds"] > 0, path.name
        pairs = kept["onnxruntime"]["rows"]["+0%"]["pairs"]
        assert len(pairs) == recorded["rounds"], path.name
        assert all(run["step"] > 0 for pair in pairs for run in pair.values()), path.name


def _cut(path, rounds: int, out):
    """The first `rounds` rounds of a kept stream, as a stream file of its own."""
    with gzip.open(path, "rt") as handle:
        kept = json.load(handle)
    row = kept["onnxruntime"]["rows"]["+0%"]
    kept["onnxruntime"]["rows"]["+0%"] = {key: value[:rounds] for key, value in row.items()}
    with gzip.open(out, "wt") as handle:
        json.dump(kept, handle)
    return out


@pytest.mark.slow          # a partition export and a few dozen noise factors
def test_kept_streams_are_judged_each_and_together(tmp_path):
    # 110 rounds give five windows: from the first with a learned noise factor (round 85) to round 105
    one, two = (_cut(STREAMS[0], 110, tmp_path / f"{name}.json.gz") for name in ("one", "two"))
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "bench_verdicts.py"), "--only", "onnxruntime",
                           "--ort-slow", "0", "--ort-pairs", str(one), "--ort-pairs", str(two), "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  one.json.gz\n" in proc.stdout and "  two.json.gz\n" in proc.stdout
    assert "  all 2 streams\n" in proc.stdout
    result = json.loads(out.read_text())["onnxruntime"]
    each = [result["streams"][name]["+0%"] for name in ("one.json.gz", "two.json.gz")]
    total = result["total"]["+0%"]
    for verdict, (hits, n) in total.items():
        if verdict.endswith(" + condition"):
            continue
        assert n == sum(row["n"][verdict] for row in each) > 0, verdict
        assert hits == sum(row["hits"][verdict] for row in each), verdict
    assert total["store, any of runs 1-5"][1] == 2 * 5       # windows at rounds 85, 90, ..., 105
