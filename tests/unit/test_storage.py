"""Where runs write: reports that cannot be written fail the run, errors name the user's path, the
artifacts folder holds one run at a time, and every suite error is one line."""
import json

import pytest

from harness.core.atomic import atomic_write_json, sweep_temporaries
from harness.core.errors import BackendError, ConfigError, StorageError
from harness.core.outputs import MARKER, ArtifactsLock
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.helpers import make_random_model_dir


def test_a_report_that_cannot_be_written_fails_a_run_that_passed(tmp_path):
    bundle = load_bundle(make_random_model_dir(tmp_path / "model"))
    export_partition(bundle.weights, bundle.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    (tmp_path / "a-file").write_text("not a folder")
    report = tmp_path / "a-file" / "report.json"
    with pytest.raises(StorageError, match=r"cannot write .*a-file/report\.json"):
        run_partitioned(
            RunRequest(bundle, tmp_path / "p", "onnxruntime", "digit one", sample_settings(bundle, steps=1)),
            report_path=report)


def test_a_failed_write_names_the_users_path_not_the_temporary_file(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StorageError) as caught:
        atomic_write_json(tmp_path / "a-file" / "x.json", {})
    assert "a-file/x.json" in str(caught.value) and ".tmp" not in str(caught.value)
    (tmp_path / "x.json").mkdir()       # replacing a folder fails after the temporary file exists
    with pytest.raises(StorageError, match=r"cannot write .*/x\.json: Is a directory"):
        atomic_write_json(tmp_path / "x.json", {})
    assert not list(tmp_path.glob(".*.tmp"))


def test_temporaries_of_dead_writers_are_swept_and_live_ones_kept(tmp_path):
    import os
    dead = tmp_path / ".x.json.999999999.abcd_123.tmp"      # no such pid
    live = tmp_path / f".x.json.{os.getpid()}.abcd_123.tmp"
    dead.write_text("half")
    live.write_text("in flight")
    assert sweep_temporaries(tmp_path) == [dead]
    assert live.exists()


def test_the_artifacts_folder_holds_one_run_at_a_time(tmp_path):
    art = tmp_path / "art"
    first = ArtifactsLock(art).claim()
    with pytest.raises(ConfigError, match=r"in use by pid \d+ since .*--artifacts=OTHER"):
        ArtifactsLock(art).claim()
    first.clear_previous()
    (art / "runs").mkdir()
    (art / "runs" / "old.json").write_text("{}")
    first.release()
    second = ArtifactsLock(art).claim()         # the first run ended: free again
    second.clear_previous()
    assert sorted(p.name for p in art.iterdir()) == sorted([".lock", MARKER])
    second.release()


def test_a_folder_of_other_files_is_never_cleared(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    lock = ArtifactsLock(tmp_path).claim()
    with pytest.raises(ConfigError, match="not a suite run's"):
        lock.clear_previous()
    lock.release()
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_runtimes_multi_line_error_reaches_the_user_as_one_line():
    err = BackendError("onnxruntime: subgraph 7 (block 2 cross_attn): init failed: [ONNXRuntimeError]\n"
                       "  Load model failed:\n\n  Protobuf parsing failed.\n")
    assert str(err) == ("onnxruntime: subgraph 7 (block 2 cross_attn): init failed: [ONNXRuntimeError] | "
                        "Load model failed: | Protobuf parsing failed.")
    assert json.dumps(str(err)).count("\\n") == 0
