"""One denoising step over the partition, as the board runs it.

Host (FP32): timestep embedding and every block's modulation once per step, patch embed, then for
each subgraph in manifest order LayerNorm + modulation -> cast to the subgraph dtype -> the backend
runs the branch body for the CFG streams -> gate + FP32 residual on the host. Then the final layer.
Every output is checked for NaN/Inf as it arrives; the first bad one stops the run naming where.

Host math is timed by category (`HostTimes`) beside the lifecycle records, so a step splits into
lifecycle stages, host math and the rest (harness bookkeeping).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable

import numpy as np

from .errors import ManifestError, NumericsError
from .model import ops, reference as R
from .model.bundle import ModelBundle
from .partition.manifest import check_input
from .timing import Timed

__all__ = ["PartitionedPipeline", "HostTimes", "check_finite", "batch_of", "pad_batch", "as_rgb"]


class HostTimes:
    """Seconds of host math per (step, category): adaln, embed, cast, residual, final."""

    def __init__(self):
        self.seconds: dict[tuple[int, str], float] = defaultdict(float)

    def timed(self, step: int, category: str) -> Timed:
        return Timed(self._add, (step, category))

    def _add(self, key: tuple, seconds: float) -> None:
        self.seconds[key] += seconds

    def as_dicts(self) -> list[dict]:
        return [{"step": s, "category": c, "seconds": v} for (s, c), v in sorted(self.seconds.items())]


def batch_of(entry) -> int:
    """The subgraph's batch axis: 1 (one call per stream) or the number of streams (one call)."""
    return entry.inputs[0].shape[0]


def pad_batch(array: np.ndarray, batch: int) -> np.ndarray:
    """Fill a subgraph's batch axis by repeating the last stream: one stream (CFG 1) on a partition
    exported for two still runs, at the cost of the unused half (the report says so)."""
    extra = np.repeat(array[-1:], batch - array.shape[0], axis=0)
    return np.concatenate([array, extra])


def check_finite(out: np.ndarray, streams: list[str], step: int, entry) -> None:
    """Raise NumericsError naming (step, block, branch, stream, count) for the first bad stream."""
    # NaN and Inf survive a sum, so a finite sum clears the whole output in one reduction with no
    # temporary array (this runs after every one of a run's thousands of invocations). A sum that
    # overflows on finite values only sends us to the exact count below, which then finds nothing.
    if np.isfinite(np.sum(out, dtype=np.float64)):
        return
    for k, stream in enumerate(streams):
        bad = int(out[k].size - np.count_nonzero(np.isfinite(out[k])))
        if bad:
            raise NumericsError(
                f"NaN/Inf at step {step}, block {entry.block}, branch {entry.branch}, stream {stream} "
                f"(subgraph {entry.index}): {bad} of {out[k].size} values")


class PartitionedPipeline:
    """Velocity of the partitioned network for one latent and its CFG streams."""

    def __init__(self, bundle: ModelBundle, manifest, strategy, contexts: dict[str, np.ndarray],
                 between_invocations: Iterable[Callable[[], None]] = ()):
        self.bundle = bundle
        self.cfg = bundle.cfg
        self.manifest = manifest
        self.strategy = strategy
        self.streams = list(contexts)
        self.context = np.concatenate([contexts[s] for s in self.streams]).astype(np.float32)   # [S, L, C]
        self.between = list(between_invocations)
        self.host = HostTimes()
        self._checked: set[int] = set()
        self._contexts: dict[str, np.ndarray] = {}
        self.padded_to: int | None = None       # set when a subgraph's batch was padded past the streams

    # ------------------------------------------------------------------ one step
    def velocity(self, latent: np.ndarray, sigma: float, step: int) -> dict[str, np.ndarray]:
        w, cfg, host = self.bundle.weights, self.cfg, self.host
        with host.timed(step, "adaln"):
            emb, lora = R.time_embedding(w, cfg, np.array([sigma], np.float32))
            mods = R.modulations(w, cfg, emb, lora)
        with host.timed(step, "embed"):
            tokens = ops.linear(R.patchify(latent, cfg), w["x_embedder.proj.1.weight"])
            x = np.repeat(tokens, len(self.streams), axis=0)                    # [S, N, D] FP32
        for entry in self.manifest.subgraphs:
            shift, scale, gate = mods[(entry.block, entry.branch)]
            with host.timed(step, "adaln"):
                h = R.branch_input(x, shift, scale, cfg.norm_eps)
            out = self._invoke(entry, step, h)
            with host.timed(step, "residual"):
                x = x + gate[:, None, :] * out
        with host.timed(step, "final"):
            v = R.final_layer(w, cfg, x, np.repeat(emb, len(self.streams), 0),
                              np.repeat(lora, len(self.streams), 0), latent.shape[-2:])
        return {s: v[k:k + 1] for k, s in enumerate(self.streams)}

    def _invoke(self, entry, step: int, h: np.ndarray) -> np.ndarray:
        for hook in self.between:       # memory guard: abort between invocations, never inside one
            hook()
        with self.host.timed(step, "cast"):     # host FP32 -> the subgraph's dtype
            inputs = [h.astype(spec.dtype, copy=False) if spec.name == "x" else self._context_as(spec.dtype)
                      for spec in entry.inputs]
        batch = batch_of(entry)
        if entry.index not in self._checked:
            # Shapes are static for the whole run: check each subgraph's inputs against the manifest
            # on its first invocation (step 0), not on every one of the run's thousands of calls.
            for spec, array in zip(entry.inputs, inputs):
                as_run = array[:1] if batch == 1 else pad_batch(array, batch) if batch > len(array) else array
                check_input(entry, spec.name, as_run)
            self._checked.add(entry.index)
        ctx = self.strategy.acquire(entry, step)
        try:
            if batch == len(self.streams):
                outs = [self._run(ctx, entry, step, inputs)]
            elif batch == 1:            # one call per stream while the context stays loaded
                outs = [self._run(ctx, entry, step, [a[k:k + 1] for a in inputs])
                        for k in range(len(self.streams))]
            elif batch > len(self.streams):
                outs = [self._run(ctx, entry, step, [pad_batch(a, batch) for a in inputs])[:len(self.streams)]]
                self.padded_to = batch
            else:
                raise ManifestError(f"{entry.label}: batch axis {batch} cannot serve {len(self.streams)} "
                                    f"streams; export with --streams {len(self.streams)} (or 1)")
        finally:
            self.strategy.finish(entry, step)
        with self.host.timed(step, "cast"):     # back to the FP32 residual stream
            out = np.asarray(outs[0] if len(outs) == 1 else np.concatenate(outs), dtype=np.float32)
        check_finite(out, self.streams, step, entry)
        return out

    def _context_as(self, dtype: str) -> np.ndarray:
        # The text context is the same for the whole run: cast it once per dtype, not per subgraph.
        if dtype not in self._contexts:
            self._contexts[dtype] = self.context.astype(dtype)
        return self._contexts[dtype]

    def _run(self, ctx, entry, step, inputs):
        return self.strategy.run(ctx, entry, step, inputs)[0]

    # ------------------------------------------------------------------ decoder
    def decode(self, latent: np.ndarray, step: int) -> np.ndarray:
        """The decoder subgraph as one more managed model: its output is NaN/Inf-checked like every
        subgraph's, then laid out as an RGB image [H, W, 3] in [0, 1]."""
        entry = self.manifest.decoder
        spec = entry.inputs[0]
        if int(np.prod(spec.shape)) != latent.size:
            raise ManifestError(f"{entry.label} ({entry.file}) takes {spec.name} {list(spec.shape)}; the "
                                f"final latent is {list(latent.shape)}")
        for hook in self.between:
            hook()
        ctx = self.strategy.acquire(entry, step)
        try:
            out = self.strategy.run(ctx, entry, step, [latent.reshape(spec.shape).astype(spec.dtype)])[0]
        finally:
            self.strategy.finish(entry, step)
        out = np.asarray(out, dtype=np.float32)
        bad = int(out.size - np.count_nonzero(np.isfinite(out)))
        if bad:
            raise NumericsError(f"NaN/Inf in the decoder output ({entry.label}, {entry.file}): "
                                f"{bad} of {out.size} values")
        return as_rgb(out, self.cfg.decoder.get("output_range", [0.0, 1.0]), entry)


def as_rgb(out: np.ndarray, value_range, entry) -> np.ndarray:
    """[H, W, 3], [3, H, W] or either with leading/inner unit axes ([1, 3, 1, H, W] from a video VAE)
    -> [H, W, 3] in [0, 1], mapping `value_range` (model.toml [decoder] output_range) onto [0, 1]."""
    image = np.squeeze(out)
    if image.ndim == 3 and image.shape[0] == 3 and image.shape[-1] != 3:
        image = image.transpose(1, 2, 0)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ManifestError(f"{entry.label} ({entry.file}) returned {list(out.shape)}; expected an RGB image "
                            "[H, W, 3] or [3, H, W] (unit axes allowed)")
    lo, hi = (float(v) for v in value_range)
    return np.clip((image - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)
