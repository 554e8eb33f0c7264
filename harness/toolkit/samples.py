"""The inputs a conversion calibrates and checks a subgraph with when no capture is given: one module
below convert and split, which both use them."""
from __future__ import annotations

import numpy as np

from ..partition.manifest import SubgraphEntry

__all__ = ["sample_inputs"]


def sample_inputs(entry: SubgraphEntry, count: int, seed: int) -> list[list[np.ndarray]]:
    """Unit-scale random inputs of the entry's shapes: the branch inputs are LayerNorm-ed activations
    and the text embedding, both of order one; the decoder's latent is a unit normal too."""
    rng = np.random.default_rng(seed + entry.index)
    return [[rng.standard_normal(spec.shape).astype(spec.dtype) for spec in entry.inputs]
            for _ in range(count)]
