"""The safetensors file format at the byte level: header, memory-mapped tensor reads, streamed writes.

Layout (the format's public spec): 8 bytes little-endian header length, a JSON header
{key: {"dtype", "shape", "data_offsets": [start, end]}, "__metadata__": {...}}, then the data
region; offsets are relative to its start. The header is parsed here rather than through
`safetensors.numpy`, because that API refuses BF16 (numpy has no bfloat16) and reads whole files.
A tensor is read through a memory map and converted to float32 on the way out; the pages it touched
are handed back to the kernel, so reading a 4 GB checkpoint tensor by tensor never holds more than
one tensor resident. Writing streams too: the header is computed from shapes alone, then each
tensor's bytes are appended as they are produced.
"""
from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..core.errors import WeightsError

__all__ = ["SafetensorsFile", "FLOAT_DTYPES", "bf16_bits_to_f32", "f32_to_bf16_bits", "write_streamed"]

# safetensors dtype tag -> (numpy dtype of the stored bits, bytes per element). BF16 is read as
# uint16 bits and widened: bf16 is the top half of a float32, so the conversion is exact.
FLOAT_DTYPES: dict[str, tuple[np.dtype, int]] = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2),
                                                 "BF16": (np.dtype("<u2"), 2)}
_MAX_HEADER = 100 * 2 ** 20     # the format's own limit on the JSON header


@dataclass(frozen=True)
class TensorInfo:
    key: str            # as stored in the file (prefix included)
    dtype: str          # the safetensors tag: F32, F16, BF16, I8, ...
    shape: tuple[int, ...]
    start: int          # absolute byte offsets in the file
    end: int

    @property
    def params(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch does when casting float32 to bfloat16 (finite inputs)."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))
    return (rounded >> 16).astype(np.uint16)


class SafetensorsFile:
    """One safetensors file opened for reading: the header parsed and checked against the file size."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise WeightsError(f"{self.path}: weights file not found")
        self.size = self.path.stat().st_size
        self.tensors, self.metadata = self._read_header()
        self._fh: BinaryIO | None = None
        self._map: mmap.mmap | None = None

    def _read_header(self) -> tuple[dict[str, TensorInfo], dict]:
        where = str(self.path)
        with open(self.path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise WeightsError(f"{where}: not a readable safetensors file ({self.size} bytes, no header)")
            (length,) = struct.unpack("<Q", head)
            if length > min(_MAX_HEADER, self.size - 8):
                raise WeightsError(f"{where}: not a readable safetensors file (header length {length} does not fit "
                                   f"in {self.size} bytes)")
            try:
                header = json.loads(fh.read(length))
            except (UnicodeDecodeError, ValueError) as exc:
                raise WeightsError(f"{where}: not a readable safetensors file (header is not JSON: {exc})") from None
        if not isinstance(header, dict):
            raise WeightsError(f"{where}: not a readable safetensors file (header is not a JSON object)")
        metadata = header.pop("__metadata__", {}) or {}
        base = 8 + length
        tensors = {}
        for key, entry in header.items():
            tensors[key] = self._entry(key, entry, base, where)
        return tensors, metadata

    def _entry(self, key: str, entry, base: int, where: str) -> TensorInfo:
        try:
            dtype, shape, (start, end) = entry["dtype"], tuple(int(s) for s in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise WeightsError(f"{where}: tensor '{key}' has a malformed header entry {entry!r}") from None
        info = TensorInfo(key, str(dtype), shape, base + int(start), base + int(end))
        if info.end > self.size:
            raise WeightsError(f"{where}: tensor '{key}' ends at byte {info.end} but the file has "
                               f"{self.size} bytes (truncated file?)")
        if info.dtype in FLOAT_DTYPES and info.end - info.start != info.params * FLOAT_DTYPES[info.dtype][1]:
            raise WeightsError(f"{where}: tensor '{key}' holds {info.end - info.start} bytes, "
                               f"{info.dtype} {list(shape)} needs {info.params * FLOAT_DTYPES[info.dtype][1]}")
        return info

    # ---------------------------------------------------------------- reading
    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            self._fh = fh = open(self.path, "rb")
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map

    def read_f32(self, key: str) -> np.ndarray:
        """The tensor as a new float32 array (BF16/F16/F32 on disk); any other dtype names the tensor."""
        info = self.tensors[key]
        if info.dtype not in FLOAT_DTYPES:
            raise WeightsError(f"{self.path}: tensor '{key}' has dtype {info.dtype}; supported: "
                               f"{', '.join(FLOAT_DTYPES)}")
        stored, _ = FLOAT_DTYPES[info.dtype]
        mm = self._mapped()
        raw = np.frombuffer(mm, dtype=stored, count=info.params, offset=info.start).reshape(info.shape)
        if info.dtype == "BF16":
            out = bf16_bits_to_f32(raw)
        else:
            out = raw.astype(np.float32)      # always a copy: the map is released below
        del raw
        self._drop_pages(mm, info.start, info.end)
        return out

    @staticmethod
    def _drop_pages(mm: mmap.mmap, start: int, end: int) -> None:
        # The copy is made; the file pages we touched would otherwise stay in this process's RSS/PSS
        # until the map closes, and a streamed read of every tensor would map the whole file.
        page = mmap.PAGESIZE
        lo = start - start % page
        if end > lo and hasattr(mm, "madvise"):
            mm.madvise(mmap.MADV_DONTNEED, lo, min(end, len(mm)) - lo)


def write_streamed(path: str | Path, specs: Iterable[tuple[str, str, tuple[int, ...]]],
                   produce: Callable[[str], np.ndarray] | None, metadata: dict | None = None) -> int:
    """Write a safetensors file tensor by tensor; `produce(key)` returns the stored-dtype array.

    specs: (key, dtype tag, shape) in file order. Only one tensor is in memory at a time. Written to
    a temporary name and renamed, so a killed writer never leaves a file that looks complete.
    produce None writes the header only and leaves the data a hole (a sparse file whose values read as
    zeros): a full-size checkpoint for header-only readers without gigabytes on disk.
    Returns the file size.
    """
    from ..core.atomic import atomic_path
    specs = list(specs)
    header, offset = {}, 0
    for key, dtype, shape in specs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * FLOAT_DTYPES[dtype][1]
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)           # the spec pads the header so the data is 8-aligned
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        if produce is None:
            fh.truncate(8 + len(text) + offset)
            return 8 + len(text) + offset
        for key, dtype, shape in specs:
            array = np.ascontiguousarray(produce(key))
            stored, _ = FLOAT_DTYPES[dtype]
            if array.dtype != stored or tuple(array.shape) != tuple(shape):
                raise ValueError(f"{key}: produced {array.dtype} {array.shape}, declared {dtype} {shape}")
            fh.write(array.data.cast("B"))
    return 8 + len(text) + offset
