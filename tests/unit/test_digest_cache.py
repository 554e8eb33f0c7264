"""The checkpoint digest is hashed once and remembered while the file is unchanged: a second open
answers from the record (its time in the run report), a file rewritten in place or replaced by
another with the same size and mtime is hashed again."""
import json
import os
import shutil

import numpy as np
import pytest

from harness.model import digest_cache
from harness.model.bundle import load_bundle
from harness.model.checkpoint import Checkpoint, load_weights
from harness.model.config import load_profile
from harness.model.random_checkpoint import write_random_checkpoint
from harness.model.weights import weights_digest
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.settings import SampleSettings


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "digests"
    monkeypatch.setenv("ANIMA_DIGEST_CACHE", str(directory))
    return directory


@pytest.fixture
def cfg():
    return load_profile("cosmos-tiny")


@pytest.fixture
def ckpt(cfg, tmp_path):
    path = tmp_path / "model.safetensors"
    write_random_checkpoint(cfg, path, "float32", seed=1)
    return path


def _record(cache):
    (record,) = cache.glob("*.json")
    return record


def test_first_open_hashes_and_remembers(cache, cfg, ckpt):
    first = Checkpoint(ckpt, cfg)
    assert first.digest() == weights_digest(load_weights(ckpt, cfg))
    assert first.digest_info["cached"] is False
    record = json.loads(_record(cache).read_text())
    assert record["digest"] == first.digest()
    assert record["identity"] == digest_cache.file_identity(ckpt)


def test_unchanged_file_is_not_rehashed(cache, cfg, ckpt):
    Checkpoint(ckpt, cfg).digest()
    # Prove the second open answers from the record rather than the tensors: a record saying
    # something no hash of this file can give is what comes back.
    record = _record(cache)
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "digest": "f" * 64}))
    second = Checkpoint(ckpt, cfg)
    assert second.digest() == "f" * 64
    assert second.digest_info["cached"] is True
    assert second.known_digest() == "f" * 64


def test_file_changed_in_place_is_rehashed(cache, cfg, ckpt):
    old = Checkpoint(ckpt, cfg)
    before = old.digest()
    old.close()
    info = Checkpoint(ckpt, cfg).file.tensors["final_layer.linear.weight"]
    with open(ckpt, "r+b") as fh:           # same size, same inode: only the mtime says it changed
        fh.seek(info.start)
        fh.write(np.float32(7.0).tobytes())
    stat = os.stat(ckpt)
    os.utime(ckpt, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = Checkpoint(ckpt, cfg)
    assert again.digest() != before
    assert again.digest_info["cached"] is False
    assert again.digest() == weights_digest(load_weights(ckpt, cfg))


def test_replaced_file_with_same_size_and_mtime_is_rehashed(cache, cfg, ckpt, tmp_path):
    before = Checkpoint(ckpt, cfg).digest()
    other = tmp_path / "other.safetensors"
    write_random_checkpoint(cfg, other, "float32", seed=2)        # same shapes, other values
    stat = os.stat(ckpt)
    assert os.stat(other).st_size == stat.st_size
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, ckpt)                 # a new inode under the old name
    again = Checkpoint(ckpt, cfg)
    assert again.digest() != before
    assert again.digest_info["cached"] is False


def test_unwritable_cache_costs_a_rehash_only(tmp_path, monkeypatch, cfg, ckpt):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("ANIMA_DIGEST_CACHE", str(blocker / "digests"))
    first = Checkpoint(ckpt, cfg)
    assert first.digest() == weights_digest(load_weights(ckpt, cfg))
    second = Checkpoint(ckpt, cfg)
    second.digest()
    assert second.digest_info["cached"] is False


def test_run_report_says_how_the_digest_was_had(cache, tmp_path):
    model = tmp_path / "embedded"
    shutil.copytree("models/embedded", model)
    partition = tmp_path / "partition"
    first = load_bundle(model)
    export_partition(first.weights_source, first.cfg, partition, ExportSettings(precision="float32"))
    settings = SampleSettings(steps=1, cfg_scale=4.0, shift=3.0, seed=1)
    reports = []
    for n in range(2):
        bundle = load_bundle(model)
        path = tmp_path / f"report{n}.json"
        run_partitioned(RunRequest(bundle, partition, "onnxruntime", "three", settings), report_path=path)
        reports.append(json.loads(path.read_text())["weights_digest"])
    assert [r["cached"] for r in reports] == [False, True]
    assert reports[0]["sha256"] == reports[1]["sha256"]
    assert all(r["seconds"] >= 0 for r in reports)
