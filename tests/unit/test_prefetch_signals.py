"""SIGINT, SIGTERM, SIGHUP and SIGQUIT during a prefetch run on the simulated board: the run stops,
every worker process is gone (so no context is alive), no shared-memory block is left, and the
partial report is on disk. SIGINT, SIGHUP (an SSH drop) and SIGQUIT (Ctrl-backslash) come from the
terminal, to the whole process group."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.model.bundle import load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from tests.helpers import alive, make_random_model_dir, shared_blocks, worker_processes


@pytest.fixture(scope="module")
def model_and_partition(tmp_path_factory):
    model = load_bundle(make_random_model_dir(tmp_path_factory.mktemp("model"), seed=6))
    out = tmp_path_factory.mktemp("partition") / "fp32"
    export_partition(model.weights, model.cfg, out, ExportSettings(precision="float32"))
    return model.model_dir, out


@pytest.mark.slow          # two real 20-step runs interrupted after their workers started: ~15 s
@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated"),
                                             (signal.SIGHUP, 129, "terminated"),
                                             (signal.SIGQUIT, 131, "terminated")])
def test_signal_during_prefetch_leaves_no_worker_and_keeps_the_partial_report(model_and_partition, tmp_path,
                                                                               sig, code, word):
    model_dir, partition = model_and_partition
    out = tmp_path / "run.png"
    # 20 steps at 1/50 of the board's time: ~45 s if nobody stops it.
    cmd = [sys.executable, "-m", "harness", "generate", "--model-dir", str(model_dir), "--partition",
           str(partition), "--backend", "board-sim", "--time-scale", "0.02", "--steps", "20",
           "--lifecycle", "prefetch:2", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(worker_processes(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        workers = worker_processes(proc.pid)
        assert len(workers) == 2, "the prefetch workers never started"
        # Workers import numpy and the runtime (~1 s, more on a loaded machine), then the run
        # starts: 5 s after they appeared it is well inside the denoise loop.
        time.sleep(max(0.0, min(w.create_time() for w in workers) + 5.0 - time.time()))
        blocks = shared_blocks(workers)
        if sig != signal.SIGTERM:             # from the terminal: the whole process group
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    # one line, naming how the run ended and where its partial report is (issue 12)
    assert err.strip().splitlines()[-1].startswith(f"error: {word}: {signal.Signals(sig).name}")
    assert "Traceback" not in err
    assert not [w.pid for w in workers if alive(w)]
    assert len(blocks) == 4 and not [b for b in blocks if os.path.exists(b)], blocks
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["status"] == word and report["lifecycle"] == "prefetch:2"
    assert report["lifecycle_counters"]["live"] == 0
    assert 0 < report["invocations"] < 20 * 84          # partial: it stopped mid-run
