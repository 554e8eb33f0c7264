"""A DiT checkpoint read the way the board needs it: the host's tensors only, or one block at a time.

The host runs the timestep embedder, every block's AdaLN modulation layers, the patch embedder and
the final layer (docs/architecture.md section 6); the NPU subgraphs hold everything else. On anima-2b the
host's share is 0.195 B of 1.96 B parameters (0.73 GiB as FP32), so reading only it keeps the host
within the board write-up's 0.8-1.0 GiB for host weights and buffers, where loading the whole DiT
would take 4-8 GB.

Opening checks the header against the model profile before any data is read: every expected key
present with its shape and a float dtype, the file long enough for each tensor. A key prefix (full
training checkpoints say `net.`) is detected from where the expected keys are found and reported;
tensors the model does not use (Anima bundles its LLM adapter, `llm_adapter.*`) are counted and
ignored. Every problem is one line naming the file and the tensor.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..core.errors import WeightsError
from . import digest_cache
from .config import ModelConfig
from .safetensors_io import FLOAT_DTYPES, SafetensorsFile
from .weights import combine_digests, expected_shapes, tensor_digest

__all__ = ["load_weights", "Checkpoint", "as_source", "group_of", "is_host_key"]

_NPU_MODULES = ("self_attn", "cross_attn", "mlp")
# Top-level modules of the DiT itself: a tensor there that the profile does not expect means the
# checkpoint is another network (more blocks, other widths), never something to ignore.
_DIT_GROUPS = ("x_embedder", "t_embedder", "t_embedding_norm", "blocks", "final_layer")


def group_of(key: str) -> str:
    """'blocks.3.mlp.layer1.weight' -> 'blocks.mlp'; 't_embedder.1.linear_1.weight' -> 't_embedder'."""
    parts = key.split(".")
    if parts[0] == "blocks" and len(parts) > 2:
        return f"blocks.{parts[2]}"
    return parts[0]


def is_host_key(key: str) -> bool:
    """True for the tensors the host computes with; False for the NPU subgraphs' tensors."""
    parts = key.split(".")
    return not (parts[0] == "blocks" and len(parts) > 2 and parts[2] in _NPU_MODULES)


def role_of(group: str, known: bool) -> str:
    if not known:
        return "ignored"
    return "NPU" if group.startswith("blocks.") and group.split(".")[1] in _NPU_MODULES else "host"


class TensorSource:
    """Where an export or a host load gets its float32 tensors from (a file or a dict)."""

    cfg: ModelConfig
    source: str
    _digest: str | None = None

    def read(self, keys) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def keys(self) -> list[str]:
        raise NotImplementedError

    def block_tensors(self, block: int) -> dict[str, np.ndarray]:
        prefix = f"blocks.{block}."
        return self.read([k for k in self.keys() if k.startswith(prefix)])

    def known_digest(self) -> str | None:
        """The digest if it was already computed (an export then skips hashing)."""
        return self._digest

    def digest(self) -> str:
        """weights_digest of every expected tensor, read one at a time."""
        if self._digest is None:
            self._digest = combine_digests({k: tensor_digest(k, self.read([k])[k]) for k in self.keys()})
        return self._digest


def _checked(value: np.ndarray, key: str, shape: tuple, source: str) -> np.ndarray:
    if tuple(value.shape) != tuple(shape):
        raise WeightsError(f"{source}: tensor '{key}' has shape {list(value.shape)}, expected {list(shape)}")
    bad = int(value.size - np.count_nonzero(np.isfinite(value)))
    if bad:
        raise WeightsError(f"{source}: tensor '{key}' has {bad} non-finite values")
    return value


class DictSource(TensorSource):
    """Tensors already in memory (random test weights, the embedded model's small dict)."""

    def __init__(self, tensors: dict, cfg: ModelConfig, source: str = "weights"):
        self.cfg, self.source, self.tensors = cfg, source, tensors
        self.shapes = expected_shapes(cfg)
        self._digest = None

    def keys(self) -> list[str]:
        return [k for k in self.shapes if k in self.tensors]

    def read(self, keys) -> dict[str, np.ndarray]:
        out = {}
        for key in keys:
            if key not in self.tensors:
                raise WeightsError(f"{self.source}: missing tensor '{key}' (profile {self.cfg.name})")
            out[key] = _checked(np.asarray(self.tensors[key], dtype=np.float32), key, self.shapes[key],
                                self.source)
        return out


class Checkpoint(TensorSource):
    """A safetensors checkpoint checked against a profile; tensors read on demand as float32."""

    def __init__(self, path: str | Path, cfg: ModelConfig):
        self.cfg = cfg
        self.file = SafetensorsFile(path)
        self.source = str(self.file.path)
        self.shapes = expected_shapes(cfg)
        self.prefix = self._detect_prefix()
        self.extra = sorted(k for k in self.file.tensors
                            if not k.startswith(self.prefix) or k[len(self.prefix):] not in self.shapes)
        self._check_header()
        self._digest = None
        self.digest_info: dict | None = None      # how the digest was obtained: seconds, cached

    def _digest_scope(self) -> str:
        # The digest covers the profile's tensors: a record is per file and per set of shapes.
        return hashlib.sha256(repr((self.prefix, sorted(self.shapes.items()))).encode()).hexdigest()[:16]

    def known_digest(self) -> str | None:
        """The digest if already computed here or remembered for this unchanged file."""
        if self._digest is None:
            self._digest = digest_cache.lookup(self.file.path, self._digest_scope(),
                                               digest_cache.file_identity(self.file.path))
            if self._digest is not None:
                self.digest_info = {"seconds": 0.0, "cached": True}
        return self._digest

    def digest(self) -> str:
        """weights_digest of every expected tensor: remembered per file while its size, mtime_ns and
        inode are unchanged (harness.model.digest_cache), else streamed one tensor at a time."""
        if self._digest is None:
            start = time.perf_counter()
            identity = digest_cache.file_identity(self.file.path)
            found = digest_cache.lookup(self.file.path, self._digest_scope(), identity)
            cached = found is not None
            if found is None:
                found = super().digest()
                digest_cache.store(self.file.path, self._digest_scope(), identity, found)
            self._digest = found
            self.digest_info = {"seconds": time.perf_counter() - start, "cached": cached}
            return found
        return self._digest

    # ---------------------------------------------------------------- header checks
    def _detect_prefix(self) -> str:
        anchor = "x_embedder.proj.1.weight"
        found = sorted(k[: -len(anchor)] for k in self.file.tensors if k.endswith(anchor)
                       and (len(k) == len(anchor) or k[-len(anchor) - 1] == "."))
        if not found:
            raise WeightsError(f"{self.source}: missing tensor '{anchor}' (not a Cosmos-Predict2 DiT "
                               f"checkpoint for profile {self.cfg.name}?)")
        if len(found) > 1:
            raise WeightsError(f"{self.source}: tensor '{anchor}' appears under several key prefixes "
                               f"({', '.join(repr(p) for p in found)}); keep one DiT per file")
        return found[0]

    def _check_header(self) -> None:
        for key in self.extra:
            inner = key[len(self.prefix):] if key.startswith(self.prefix) else None
            if inner is not None and inner.split(".")[0] in _DIT_GROUPS:
                raise WeightsError(f"{self.source}: unexpected tensor '{key}' for profile {self.cfg.name} "
                                   f"({self.cfg.blocks} blocks, width {self.cfg.width}): another network?")
        for key, shape in self.shapes.items():
            info = self.file.tensors.get(self.prefix + key)
            stored = self.prefix + key
            if info is None:
                raise WeightsError(f"{self.source}: missing tensor '{stored}' (profile {self.cfg.name})")
            if info.shape != tuple(shape):
                raise WeightsError(f"{self.source}: tensor '{stored}' has shape {list(info.shape)}, "
                                   f"profile {self.cfg.name} expects {list(shape)}")
            if info.dtype not in FLOAT_DTYPES:
                raise WeightsError(f"{self.source}: tensor '{stored}' has dtype {info.dtype}; supported: "
                                   f"{', '.join(FLOAT_DTYPES)}")

    # ---------------------------------------------------------------- reading
    def keys(self) -> list[str]:
        return list(self.shapes)

    def read(self, keys) -> dict[str, np.ndarray]:
        out = {}
        for key in keys:
            if key not in self.shapes:
                raise WeightsError(f"{self.source}: '{key}' is not a tensor of profile {self.cfg.name}")
            out[key] = _checked(self.file.read_f32(self.prefix + key), self.prefix + key, self.shapes[key],
                                self.source)
        return out

    def close(self) -> None:
        self.file.close()

    # ---------------------------------------------------------------- what was found
    @property
    def dtypes(self) -> dict[str, int]:
        """Stored dtype -> number of model tensors in it."""
        return dict(Counter(self.file.tensors[self.prefix + k].dtype for k in self.shapes))

    def extra_groups(self) -> dict[str, int]:
        return dict(Counter(group_of(k) for k in self.extra))

    def summary_line(self) -> str:
        """One line: dtype, the prefix (never stripped silently), and what is ignored."""
        parts = [f"{self.source}: {len(self.shapes)} tensors of {self.cfg.name} "
                 f"({', '.join(f'{d} {n}' for d, n in sorted(self.dtypes.items()))})"]
        parts.append(f"key prefix '{self.prefix}' stripped" if self.prefix else "no key prefix")
        if self.extra:
            groups = ", ".join(f"{g} {n}" for g, n in sorted(self.extra_groups().items()))
            parts.append(f"{len(self.extra)} other tensors ignored ({groups})")
        return "; ".join(parts)

    def groups(self) -> list[dict]:
        """Per group: tensors, parameters, stored bytes, dtypes and who needs it (host, NPU, ignored)."""
        rows: dict[str, dict] = {}
        for key, info in self.file.tensors.items():
            known = key.startswith(self.prefix) and key[len(self.prefix):] in self.shapes
            name = group_of(key[len(self.prefix):] if known else key)
            row = rows.setdefault(name, {"group": name, "tensors": 0, "params": 0, "bytes": 0,
                                         "dtypes": set(), "role": role_of(name, known)})
            row["tensors"] += 1
            row["params"] += info.params
            row["bytes"] += info.end - info.start
            row["dtypes"].add(info.dtype)
        order = {"host": 0, "NPU": 1, "ignored": 2}
        return [{**r, "dtypes": sorted(r["dtypes"])}
                for r in sorted(rows.values(), key=lambda r: (order[r["role"]], r["group"]))]


def as_source(weights, cfg: ModelConfig, source: str = "weights") -> TensorSource:
    """A TensorSource for a Checkpoint, a path to one, or an in-memory dict of tensors."""
    if isinstance(weights, TensorSource):
        return weights
    if isinstance(getattr(weights, "checkpoint", None), TensorSource):
        return weights.checkpoint       # a bundle's host weights: export reads the blocks from the file
    if isinstance(weights, (str, Path)):
        return Checkpoint(weights, cfg)
    return DictSource(weights, cfg, source)


def load_weights(path: str | Path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Every DiT tensor of a checkpoint as float32 (BF16, F16 or F32 on disk; a key prefix is
    detected, other tensors ignored). The board's path reads less: see Checkpoint."""
    checkpoint = Checkpoint(path, cfg)
    try:
        return checkpoint.read(checkpoint.keys())
    finally:
        checkpoint.close()
