"""harness/core/atomic.py under a real SIGKILL: the file is always exactly the old or the new content.

A child process rewrites a ~2 MB file over and over with two alternating contents A and B (each
self-consistent: one repeated byte plus its sha256 as a trailer); the parent SIGKILLs it at random
moments. After every kill the file must be byte-for-byte A or B. A kill can leave the temporary file
of the interrupted write behind: by design those are only ever named `.<name>.<random>.tmp` beside
the target (tempfile.mkstemp in atomic_path), so a cleanup can find them and readers never see them.
A control run with a plain in-place writer shows the same kills do tear a file, i.e. that the test
can fail.
"""
import hashlib
import os
import random
import signal
import subprocess
import sys

import pytest

from harness.core.atomic import atomic_path, atomic_write_bytes
from harness.model.config import REPO_ROOT

SIZE = 2 * 1024 * 1024
KILLS = 5

CHILD = r"""
import hashlib, sys
from pathlib import Path
from harness.core.atomic import atomic_write_bytes

path, mode, size = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def content(byte):
    body = bytes([byte]) * size
    return body + hashlib.sha256(body).hexdigest().encode()

def naive_write(data):
    # The unsafe way, as a control: truncate in place, then write in chunks.
    with open(path, "wb") as fh:
        for i in range(0, len(data), 65536):
            fh.write(data[i:i + 65536])
            fh.flush()

write = atomic_write_bytes if mode == "atomic" else lambda p, d: naive_write(d)
contents = [content(0x41), content(0x42)]
write(path, contents[0])
print("ready", flush=True)
i = 1
while True:
    write(path, contents[i % 2])
    i += 1
"""


def _content(byte: int) -> bytes:
    body = bytes([byte]) * SIZE
    return body + hashlib.sha256(body).hexdigest().encode()


def _kill_at_random(path, mode: str, rng: random.Random) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), mode, str(SIZE)],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", "child never completed its first write"
        # Sleep via wait(): returns early only if the child died on its own, which is a failure.
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=rng.uniform(0.010, 0.080))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL


def test_sigkill_never_tears_or_removes_the_file(tmp_path):
    path = tmp_path / "state.bin"
    allowed = {_content(0x41), _content(0x42)}
    rng = random.Random(20260812)
    for kill in range(KILLS):
        _kill_at_random(path, "atomic", rng)
        assert path.exists(), f"kill {kill}: the file vanished"
        data = path.read_bytes()
        assert data in allowed, f"kill {kill}: torn file of {len(data)} bytes"
    leftovers = {p.name for p in tmp_path.iterdir()} - {"state.bin"}
    assert all(n.startswith(".state.bin.") and n.endswith(".tmp") for n in leftovers), leftovers
    assert len(leftovers) <= KILLS


def test_control_in_place_writer_is_torn_by_the_same_kills(tmp_path):
    path = tmp_path / "state.bin"
    allowed = {_content(0x41), _content(0x42)}
    rng = random.Random(7)
    torn = 0
    for _ in range(KILLS):
        _kill_at_random(path, "naive", rng)
        torn += path.read_bytes() not in allowed
    assert torn >= 1, "no kill tore the naive writer: the kill test would not notice a broken atomic_path"


def test_failing_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "golden.json"
    atomic_write_bytes(path, b"old contents")
    with pytest.raises(RuntimeError, match="renderer crashed"):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half of the new")
            raise RuntimeError("renderer crashed")
    assert path.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["golden.json"]


def test_failing_first_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError):
        with atomic_path(tmp_path / "new.npy") as tmp:
            tmp.write_bytes(b"partial")
            raise ValueError("bad image")
    assert list(tmp_path.iterdir()) == []
