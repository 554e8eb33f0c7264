"""The pipe protocol between the suite and a toolkit-side process (stdlib + numpy only, because the
toolkit's virtualenv imports it too): a big-endian u32 length and a JSON header, then for each of
header["arrays"] arrays a u64 length and the array as .npy bytes (no pickle)."""
from __future__ import annotations

import io
import json
import struct

import numpy as np

__all__ = ["write_frame", "read_frame"]


def encode_frame(header: dict, arrays=()) -> bytes:
    blobs = []
    for array in arrays:
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        blobs.append(buf.getvalue())
    body = json.dumps({**header, "arrays": len(blobs)}).encode()
    parts = [struct.pack(">I", len(body)), body]
    for blob in blobs:
        parts += [struct.pack(">Q", len(blob)), blob]
    return b"".join(parts)


def write_frame(stream, header: dict, arrays=()) -> None:
    stream.write(encode_frame(header, arrays))
    stream.flush()


def _read_exact(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError          # the other side went away mid-frame
        data += chunk
    return data


def read_frame(stream) -> tuple[dict, list[np.ndarray]]:
    (size,) = struct.unpack(">I", _read_exact(stream, 4))
    header = json.loads(_read_exact(stream, size))
    arrays = []
    for _ in range(header.get("arrays", 0)):
        (n,) = struct.unpack(">Q", _read_exact(stream, 8))
        arrays.append(np.load(io.BytesIO(_read_exact(stream, n)), allow_pickle=False))
    return header, arrays
