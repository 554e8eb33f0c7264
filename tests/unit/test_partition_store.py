"""The lab's partition store and each board's runner-local cache (.ci/publish-partition,
.ci/fetch-partition), run for real on a partition exported here: published once under its manifest hash,
fetched into the cache, reused from it, and refused when it is not the partition that hash names."""
from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from harness.model.config import REPO_ROOT


def _run(*args, env=None, ok=True):
    proc = subprocess.run([str(REPO_ROOT / ".ci" / args[0]), *map(str, args[1:])], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    from harness.model.bundle import load_bundle
    from harness.model.config import EMBEDDED_DIR
    from tests.helpers import export_fp32
    return export_fp32(load_bundle(EMBEDDED_DIR), tmp_path_factory)


def test_published_once_under_its_manifest_hash_and_fetched_into_the_cache(partition, tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    store.mkdir()
    sha = hashlib.sha256((partition / "manifest.json").read_bytes()).hexdigest()
    env = {"ANIMA_PARTITION_STORE": str(store)}
    assert _run("publish-partition", partition, env=env).stdout.strip() == sha
    tar = store / f"{sha}.tar"
    first = tar.stat().st_mtime_ns
    assert _run("publish-partition", partition, env=env).stdout.strip() == sha and tar.stat().st_mtime_ns == first
    got = _run("fetch-partition", sha, cache, env=env).stdout.strip()
    assert got == str(cache / sha)
    assert (cache / sha / "manifest.json").read_bytes() == (partition / "manifest.json").read_bytes()
    tar.unlink()                                     # the cached copy is used: the store is not read again
    assert _run("fetch-partition", sha, cache, env=env).stdout.strip() == got
    assert not [p for p in cache.iterdir() if p.name.startswith(".incoming")]


def test_a_partition_that_is_not_the_named_one_is_refused_and_not_cached(partition, tmp_path):
    cache = tmp_path / "cache"
    wrong = "0" * 64
    proc = _run("fetch-partition", wrong, cache, partition, ok=False)
    assert f"is not the partition with manifest sha256 {wrong}" in proc.stderr
    assert list(cache.iterdir()) == []
    missing = _run("publish-partition", partition, env={"ANIMA_PARTITION_STORE": ""}, ok=False)
    assert "the lab partition store is not configured on this runner" in missing.stderr
