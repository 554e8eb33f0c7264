"""The embedded model's text side and image side, in plain numpy.

Prompt encoder: a fixed word vocabulary -> `text_emb_tokens` tokens of `text_emb_dim`, each the sum of a
word embedding and a position embedding (padding fills the rest). The empty prompt is all padding:
that is the unconditional stream CFG mixes against, and the one it was trained on with prompt dropout.

Decoder: the latent *is* the 16x16 digit (1 channel, [-1, 1]); decoding upsamples it bilinearly
(half-pixel centres) and maps it between two RGB colours. It is linear up to the final clip, so the
same math exports to ONNX as two MatMuls.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import ConfigError, WeightsError

__all__ = ["PromptEncoder", "tokenize", "interp_matrix", "decode", "digits_latents",
           "DIGIT_WORDS", "PROMPT_KEYS", "digit_classifier",
           "latents_to_digits_features"]

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
PROMPT_KEYS = ("prompt_encoder.token_embedding.weight", "prompt_encoder.position_embedding.weight")


def tokenize(prompt: str, vocab: list[str], length: int) -> np.ndarray:
    """Word ids padded with 0 to `length`. Unknown words are an error naming the word."""
    words = prompt.lower().split()
    if len(words) > length:
        raise ConfigError(f"prompt has {len(words)} words; the model takes at most {length}")
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.zeros(length, dtype=np.int64)
    for pos, word in enumerate(words):
        if word not in index or word == vocab[0]:
            raise ConfigError(f"prompt word '{word}' is not in the vocabulary "
                              f"({' '.join(vocab[1:])})")
        ids[pos] = index[word]
    return ids


class PromptEncoder:
    """Embedding lookup + learned positions; weights from prompt_encoder.safetensors."""

    def __init__(self, token_embedding: np.ndarray, position_embedding: np.ndarray, vocab: list[str]):
        self.token_embedding = np.asarray(token_embedding, dtype=np.float32)
        self.position_embedding = np.asarray(position_embedding, dtype=np.float32)
        self.vocab = list(vocab)
        if self.token_embedding.shape[0] != len(self.vocab):
            raise WeightsError(f"prompt encoder has {self.token_embedding.shape[0]} word embeddings "
                               f"but the vocabulary has {len(self.vocab)} words")

    @classmethod
    def from_file(cls, path: str | Path, vocab: list[str]) -> PromptEncoder:
        from .weights import read_safetensors
        tensors = read_safetensors(path)
        missing = [k for k in PROMPT_KEYS if k not in tensors]
        if missing:
            raise WeightsError(f"{path}: missing key '{missing[0]}'")
        return cls(tensors[PROMPT_KEYS[0]], tensors[PROMPT_KEYS[1]], vocab)

    @property
    def length(self) -> int:
        return self.position_embedding.shape[0]

    def encode(self, prompt: str) -> np.ndarray:
        """[text_emb_tokens, text_emb_dim] float32 text embedding of one prompt."""
        ids = tokenize(prompt, self.vocab, self.length)
        return self.token_embedding[ids] + self.position_embedding


def interp_matrix(n_in: int, scale: int) -> np.ndarray:
    """[n_in*scale, n_in] bilinear resampling with half-pixel centres and clamped edges."""
    n_out = n_in * scale
    src = (np.arange(n_out) + 0.5) / scale - 0.5
    src = np.clip(src, 0.0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    m = np.zeros((n_out, n_in), dtype=np.float64)
    m[np.arange(n_out), lo] += 1.0 - frac
    m[np.arange(n_out), hi] += frac
    return m.astype(np.float32)


def decode(latent: np.ndarray, scale: int, background, foreground) -> np.ndarray:
    """[1, H, W] latent in [-1, 1] -> [H*scale, W*scale, 3] float32 image in [0, 1]."""
    rows, cols = latent.shape[-2:]
    lat = np.asarray(latent, dtype=np.float32).reshape(rows, cols)
    ah = interp_matrix(lat.shape[0], scale)
    aw = interp_matrix(lat.shape[1], scale)
    level = np.clip((ah @ lat @ aw.T + 1.0) * 0.5, 0.0, 1.0)[..., None]
    bg = np.asarray(background, dtype=np.float32)
    fg = np.asarray(foreground, dtype=np.float32)
    return (bg + level * (fg - bg)).astype(np.float32)


def digits_latents() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits as 16x16 latents in [-1, 1] ([n, 1, 16, 16]) and their labels.

    Used by the training tool and by the quality test's classifier (scikit-learn is a test/train
    dependency only, hence the local import).
    """
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = digits.images.astype(np.float32) / 8.0 - 1.0     # 0..16 -> -1..1
    up = interp_matrix(8, 2)
    latents = np.einsum("hi,nij,wj->nhw", up, images, up)[:, None]
    return latents.astype(np.float32), digits.target.astype(np.int64)


def digit_classifier():
    """An SVC trained on the real 8x8 digits: the judge of whether a sample shows the prompted digit.

    scikit-learn is a test/tool dependency only (local import).
    """
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC
    digits = load_digits()
    return SVC(gamma=0.001, C=10.0).fit(digits.data, digits.target)


def latents_to_digits_features(latents: np.ndarray) -> np.ndarray:
    """[n, 1, 16, 16] latents in [-1, 1] -> [n, 64] 8x8 features on the digits' 0..16 scale."""
    pooled = latents.reshape(len(latents), 8, 2, 8, 2).mean(axis=(2, 4))
    return np.clip((pooled + 1.0) * 8.0, 0.0, 16.0).reshape(len(latents), 64)
