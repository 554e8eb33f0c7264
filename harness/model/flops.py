"""The arithmetic of one denoise step, counted from the model config: what a FLOP bound divides.

Counted are the GEMMs of the three branch bodies (2 FLOPs per multiply-accumulate); the host's
AdaLN, norms, softmax and residual are O(N*D) and left out, so the bound is a lower bound.
Per block and stream, with N image tokens, M text tokens, D width, C text width, F FFN hidden:
  self-attention   q/k/v/o projections 4*N*D^2, scores and weighted sum 2*N^2*D
  cross-attention  q/o projections 2*N*D^2, k/v over the text 2*M*C*D, scores and sum 2*N*M*D
  FFN              2*N*D*F (8*N*D^2 at ratio 4)
"""
from __future__ import annotations

from .config import BRANCHES, ModelConfig

__all__ = ["branch_macs", "branch_flops", "step_flops"]


def branch_macs(cfg: ModelConfig, branch: str) -> int:
    """Multiply-accumulates of one branch body for one stream."""
    n, m, d, c, f = cfg.tokens, cfg.text_emb_tokens, cfg.width, cfg.text_emb_dim, cfg.ffn_hidden
    if branch == "self_attn":
        return 4 * n * d * d + 2 * n * n * d
    if branch == "cross_attn":
        return 2 * n * d * d + 2 * m * c * d + 2 * n * m * d
    if branch == "ffn":
        return 2 * n * d * f
    raise ValueError(f"unknown branch {branch!r} (one of {', '.join(BRANCHES)})")


def branch_flops(cfg: ModelConfig, branch: str, streams: int = 1) -> int:
    """FLOPs of one branch body for `streams` CFG streams."""
    return 2 * branch_macs(cfg, branch) * streams


def step_flops(cfg: ModelConfig, streams: int) -> int:
    """FLOPs of every branch body of every block for one step of `streams` streams."""
    return cfg.blocks * sum(branch_flops(cfg, b, streams) for b in BRANCHES)
