"""A model directory loaded for running: config, the host's DiT tensors, prompt encoder, decoder.

Only the tensors the host computes with are read (checkpoint.is_host_key): the NPU subgraphs bring
their own weights. The monolithic reference forward needs every tensor and asks for them explicitly
(`all_weights`), so nothing on the board's path pays for the whole DiT.

Of the host's tensors, the per-block AdaLN modulation layers are 90 % (0.66 of 0.73 GiB as FP32 on
anima-2b) and are used once per step, to compute that step's modulations. They stay in the
memory-mapped file and are read (converted to FP32) when a step computes its modulations, then
dropped: the file pages are the kernel's reclaimable page cache, not the process's memory. That
keeps the run's own memory inside the board write-up's 0.8-1.0 GiB host budget beside a loaded
context; the cost is reading 0.33 GiB of BF16 per step (~120 s per step on the board).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from .checkpoint import Checkpoint, is_host_key
from .config import ModelConfig, load_model_dir
from .embedded import PromptEncoder, decode

__all__ = ["ModelBundle", "load_bundle", "check_text_emb"]


def _streamed(key: str) -> bool:
    """The per-block AdaLN modulation layers: read each step from the mapped file, not kept."""
    return key.startswith("blocks.") and ".adaln_modulation_" in key


class HostWeights(Mapping):
    """The host's tensors by key: the small ones resident as FP32, the AdaLN modulation layers read
    from the checkpoint on each access (the caller drops them after use)."""

    def __init__(self, checkpoint: Checkpoint, keys: list[str]):
        self.checkpoint = checkpoint
        self.streamed = [k for k in keys if _streamed(k)]
        self.resident = checkpoint.read([k for k in keys if not _streamed(k)])
        self._keys = set(keys)

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.resident:
            return self.resident[key]
        if key in self._keys:
            return self.checkpoint.read([key])[key]
        raise KeyError(key)

    def __iter__(self):
        return iter([*self.resident, *self.streamed])

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def resident_bytes(self) -> int:
        return sum(v.nbytes for v in self.resident.values())


def check_text_emb(array, cfg: ModelConfig, where: str) -> np.ndarray:
    """A text embedding [text_emb_tokens, text_emb_dim] (or [1, L, C]) as float32 [1, L, C]."""
    array = np.asarray(array)
    want = (cfg.text_emb_tokens, cfg.text_emb_dim)
    shape = tuple(array.shape[1:]) if array.ndim == 3 and array.shape[0] == 1 else tuple(array.shape)
    if shape != want or not np.issubdtype(array.dtype, np.floating):
        raise ConfigError(f"{where}: text embedding is {array.dtype} {list(array.shape)}; {cfg.name} takes "
                          f"float [{want[0]}, {want[1]}] (text_emb_tokens, text_emb_dim)")
    bad = int(array.size - np.count_nonzero(np.isfinite(array)))
    if bad:
        raise ConfigError(f"{where}: text embedding has {bad} NaN/Inf values")
    return array.reshape(1, *want).astype(np.float32)


@dataclass
class ModelBundle:
    cfg: ModelConfig
    weights: Mapping            # the host's tensors only, float32 (HostWeights, or a plain dict)
    encoder: PromptEncoder | None
    model_dir: Path
    checkpoint: Checkpoint | None = None

    def text_emb(self, prompt: str) -> np.ndarray:
        """The prompt encoder's text embedding [text_emb_tokens, text_emb_dim], shape-checked."""
        if self.encoder is None:
            raise ConfigError(f"model {self.cfg.name} has no prompt encoder here ({self.model_dir}); "
                              "give text-embedding files instead of a prompt (generate --text-emb, "
                              "or golden cases with 'text_emb')")
        return check_text_emb(self.encoder.encode(prompt), self.cfg, f"prompt encoder of {self.cfg.name}")[0]

    def decode(self, latent: np.ndarray) -> np.ndarray:
        """The reference backend's decode: the model's decoder ONNX when model.toml names one
        ([decoder] onnx), else the embedded model's fixed decoder."""
        d = self.cfg.decoder
        if d.get("onnx"):
            return _run_decoder_onnx(self.model_dir / d["onnx"], latent, d.get("output_range", [0.0, 1.0]))
        return decode(latent, int(d.get("scale", 4)), d.get("background", [0, 0, 0]),
                      d.get("foreground", [1, 1, 1]))

    @property
    def weights_source(self):
        """What an export reads its block tensors from: the checkpoint, one block at a time."""
        return self.checkpoint if self.checkpoint is not None else self.weights

    def all_weights(self) -> Mapping:
        """Every DiT tensor (the monolithic reference forward only; gigabytes on anima-2b)."""
        if self.checkpoint is None:
            return self.weights
        return self.checkpoint.read(self.checkpoint.keys())

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the DiT weights as a partition manifest records them (weights_sha256),
        streamed over the checkpoint one tensor at a time."""
        if self.checkpoint is not None:
            return self.checkpoint.digest()
        from .weights import weights_digest
        return weights_digest(self.weights)

    @property
    def digest_info(self) -> dict | None:
        """How the digest was had: {"seconds", "cached"} (a checkpoint hashed once and remembered while
        the file is unchanged); None before it was asked for, or for weights in memory."""
        return getattr(self.checkpoint, "digest_info", None)

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.cfg.latent_channels, *self.cfg.latent_size)


def load_bundle(model_dir: str | Path) -> ModelBundle:
    model_dir = Path(model_dir)
    cfg = load_model_dir(model_dir)
    if "weights" not in cfg.files:
        raise ConfigError(f"{cfg.source}: missing 'weights' (file name of the DiT weights)")
    checkpoint = Checkpoint(model_dir / cfg.files["weights"], cfg)
    weights = HostWeights(checkpoint, [k for k in checkpoint.keys() if is_host_key(k)])
    # Anima's text encoder (Qwen3 + adapter) does not run here: without `prompt_encoder` the model
    # takes precomputed text embeddings (generate --text-emb, golden cases with `text_emb` files).
    encoder = (PromptEncoder.from_file(model_dir / cfg.files["prompt_encoder"], cfg.prompt.get("vocab", []))
               if "prompt_encoder" in cfg.files else None)
    return ModelBundle(cfg, weights, encoder, model_dir, checkpoint)


def _run_decoder_onnx(path: Path, latent: np.ndarray, value_range) -> np.ndarray:
    import onnxruntime as ort

    from ..core.imageio import as_rgb
    if not path.is_file():
        raise ConfigError(f"decoder {path} does not exist ([decoder] onnx in model.toml)")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    out = session.run(None, {spec.name: latent.reshape([int(d) for d in spec.shape]).astype(np.float32)})[0]
    entry = type("Decoder", (), {"label": "decoder", "file": path.name})
    return as_rgb(np.asarray(out, dtype=np.float32), value_range, entry)
