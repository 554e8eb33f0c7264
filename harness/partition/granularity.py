"""Partition granularity: how much of the network one subgraph holds.

- `branch`: one subgraph per branch of a block (self-attention, cross-attention, FFN), 3 per block;
  the host does the AdaLN LayerNorm, modulation and gated residual adds between them.
- `block`: one subgraph per block, its AdaLN LayerNorm, modulation and gated residual adds inside.
- `blocks:K`: K consecutive blocks per subgraph (the last one holds what is left).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import ConfigError

__all__ = ["Granularity", "parse_granularity", "BRANCH", "BRANCHES_PER_BLOCK"]

BRANCHES_PER_BLOCK = 3


@dataclass(frozen=True)
class Granularity:
    blocks: int          # blocks per subgraph; 0 for branch

    @property
    def fused(self) -> bool:
        return self.blocks > 0

    def __str__(self) -> str:
        return "branch" if not self.fused else "block" if self.blocks == 1 else f"blocks:{self.blocks}"

    def groups(self, num_blocks: int) -> list[list[int]]:
        """The blocks of each fused subgraph, in execution order (branch: one group per block)."""
        size = max(1, self.blocks)
        return [list(range(s, min(s + size, num_blocks))) for s in range(0, num_blocks, size)]

    def subgraphs(self, num_blocks: int) -> int:
        """Body subgraphs of a partition of `num_blocks` blocks."""
        return num_blocks * BRANCHES_PER_BLOCK if not self.fused else len(self.groups(num_blocks))


BRANCH = Granularity(0)


def parse_granularity(text: str, num_blocks: int | None = None) -> Granularity:
    """`branch`, `block` or `blocks:K` (K from 1 to the model's blocks when known)."""
    text = str(text).strip()
    if text == "branch":
        return BRANCH
    if text == "block":
        return Granularity(1)
    head, _, count = text.partition(":")
    if head != "blocks" or not count.isdigit() or int(count) < 1:
        raise ConfigError(f"--granularity {text}: choose branch, block or blocks:K (K a whole number >= 1)")
    if num_blocks is not None and int(count) > num_blocks:
        raise ConfigError(f"--granularity {text}: the model has {num_blocks} blocks")
    return Granularity(int(count))
