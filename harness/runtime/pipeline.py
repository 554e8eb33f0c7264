"""One denoising step over the partition, as the board runs it.

Host (FP32): timestep embedding and every block's modulation once per step (or, when the schedule is
known before the first step, for every step at once: `precompute_modulations`), patch embed, then for
each subgraph in manifest order LayerNorm + modulation -> cast to the subgraph dtype -> the backend
runs the branch body for the CFG streams -> AdaLN gate + FP32 residual on the host. Then the final layer.
The two halves are separate (`hidden_state`, `final_velocity`) so that Spectrum can forecast the
last hidden state on a step where no subgraph runs.
Every output is checked for NaN/Inf as it arrives; the first bad one stops the run naming where.
A fused partition (granularity block or blocks:K) does LayerNorm, modulation and the AdaLN-gated residual
inside each subgraph: the host feeds it the stream and each branch's shift, scale and AdaLN gate,
and adds the delta it returns to the FP32 residual stream (harness/partition/fused.py says why).

Host math is timed by category (`HostTimes`) beside the lifecycle records, so a step splits into
lifecycle stages, host math and the rest (harness bookkeeping).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from ..core.errors import ManifestError, NumericsError
from ..core.imageio import as_rgb
from ..core.timing import Timed
from ..model import ops
from ..model import reference as R
from ..model.bundle import ModelBundle
from ..model.config import BRANCHES
from ..partition.checks import check_input, check_outputs
from ..partition.fused import MOD_PARTS, mod_input
from ..partition.manifest import SubgraphEntry
from .casts import cast

__all__ = ["PartitionedPipeline", "Invocation", "check_finite", "check_image_finite", "batch_of"]


@dataclass(frozen=True)
class Invocation:
    """What an observer sees of one invocation: the subgraph, where in the run it is, the inputs
    exactly as the backend got them (the subgraph's dtype, all streams along axis 0) and the output
    cast back to FP32. Observers (calibration capture, accuracy analysis) must not modify them."""

    entry: SubgraphEntry
    step: int
    sigma: float
    streams: tuple[str, ...]
    inputs: tuple[np.ndarray, ...]
    output: np.ndarray


def _host_blas(blas: ThreadpoolController):
    """One BLAS thread for the host's GEMMs (at most a few rows each: the modulations, the embedder,
    the final layer). OpenBLAS's workers busy-wait between calls; beside onnxruntime's threads and on
    a loaded machine its two threads made anima-2b's modulation pass 7-25x slower than one
    (docs/full-size.md), and they spin on the cores the subgraph runs need. `blas` is the pipeline's
    controller: finding the loaded BLAS libraries (threadpool_limits does it on every call) cost
    ~4 ms, three times a step."""
    return blas.limit(limits=1, user_api="blas")


class HostTimes:
    """Seconds of host math per (step, category): adaln, embed, cast, residual, final, forecast."""

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
    # In the output's own dtype: a float64 sum converts every element first, 4x slower at full width.
    if np.isfinite(np.sum(out)):
        return
    for k, stream in enumerate(streams):
        bad = int(out[k].size - np.count_nonzero(np.isfinite(out[k])))
        if bad:
            raise NumericsError(
                f"NaN/Inf at step {step}, block {entry.block}, branch {entry.branch}, stream {stream} "
                f"(subgraph {entry.index}): {bad} of {out[k].size} values")


def check_image_finite(image: np.ndarray, what: str) -> None:
    """Raise NumericsError naming `what` (the decoder subgraph, or the model) for NaN/Inf in an image:
    a PNG would clip them into plausible pixels and the image would still be written."""
    if np.isfinite(np.sum(image, dtype=np.float64)):
        return
    bad = int(image.size - np.count_nonzero(np.isfinite(image)))
    if bad:
        raise NumericsError(f"NaN/Inf in the image from {what}: {bad} of {image.size} values")


class PartitionedPipeline:
    """Velocity of the partitioned network for one latent and its CFG streams."""

    def __init__(self, bundle: ModelBundle, manifest, strategy, text_embs: dict[str, np.ndarray],
                 between_invocations: Iterable[Callable[[SubgraphEntry], None]] = (),
                 observers: Iterable[Callable[[Invocation], None]] = ()):
        self.bundle = bundle
        self.cfg = bundle.cfg
        self.manifest = manifest
        self.strategy = strategy
        self.streams = list(text_embs)
        # Stream batching: every stream of every image in flight shares each loaded context. Rows
        # are stream-major: [cond image 0..N-1, uncond image 0..N-1].
        self.images = text_embs[self.streams[0]].shape[0]
        self.rows = [s if self.images == 1 else f"{s} image {i}" for s in self.streams for i in range(self.images)]
        self.text_emb = np.concatenate([text_embs[s] for s in self.streams]).astype(np.float32)   # [S*N, L, C]
        self.between = list(between_invocations)
        self.observers = list(observers)
        self.sigma = float("nan")
        self.host = HostTimes()
        self._blas = ThreadpoolController()        # the BLAS libraries loaded now (numpy's), found once
        self._checked: set[int] = set()
        self._text_embs: dict[str, np.ndarray] = {}
        self._emb: tuple | None = None
        self._schedule: dict[float, int] = {}      # sigma -> row of the precomputed modulations
        self._mods: list[dict] = []              # per schedule row: {(block, branch): (shift, scale, AdaLN gate)}
        self.padded_to: int | None = None       # set when a subgraph's batch was padded past the streams

    # ------------------------------------------------------------------ one step
    def velocity(self, latent: np.ndarray, sigma: float, step: int) -> dict[str, np.ndarray]:
        return self.final_velocity(self.hidden_state(latent, sigma, step), sigma, step, latent.shape[-2:])

    def hidden_state(self, latent: np.ndarray, sigma: float, step: int) -> dict[str, np.ndarray]:
        """Every subgraph in order: {stream: [images, T, D]} FP32, the input of the final layer."""
        w, cfg, host = self.bundle.weights, self.cfg, self.host
        self.sigma = sigma
        with host.timed(step, "adaln"), _host_blas(self._blas):
            emb, lora = self._time_embedding(sigma, step)
            mods = self._step_modulations(sigma, emb, lora)
        with host.timed(step, "embed"), _host_blas(self._blas):
            tokens = ops.linear(R.patchify(latent, cfg), w["x_embedder.proj.1.weight"])
            x = np.concatenate([tokens] * len(self.streams))                    # [S*N, T, D] FP32
        if self.manifest.granularity != "branch":
            x = self._fused_stream(x, mods, step)
        else:
            x = R.residual_stream(x, mods, cfg.norm_eps, ((e.block, e.branch, e) for e in self.manifest.subgraphs),
                                  lambda entry, h: self._invoke(entry, step, h),
                                  timed=lambda category: host.timed(step, category))
        n = self.images
        return {s: x[k * n:(k + 1) * n] for k, s in enumerate(self.streams)}

    def final_velocity(self, hidden: dict[str, np.ndarray], sigma: float, step: int,
                       latent_hw: tuple[int, int]) -> dict[str, np.ndarray]:
        """The final layer on given hidden states (computed or forecast) with this step's embedding."""
        with self.host.timed(step, "final"), _host_blas(self._blas):
            emb, lora = self._time_embedding(sigma, step)
            x = np.concatenate([hidden[s] for s in self.streams])          # [S*N, T, D], stream-major
            v = R.final_layer(self.bundle.weights, self.cfg, x, np.repeat(emb, len(x), 0),
                              np.repeat(lora, len(x), 0), latent_hw)
        n = len(x) // len(self.streams)
        return {s: v[k * n:(k + 1) * n] for k, s in enumerate(self.streams)}

    def precompute_modulations(self, sigmas, step: int = 0) -> None:
        """Every block's modulation for every sigma of the schedule in one pass over the AdaLN layers.

        The modulations depend on the timestep only, and the schedule is known before the first step:
        each layer is read from the mapped checkpoint once per run instead of once per step (0.66 GiB
        of FP32 per step on anima-2b), and kept are the results, 3 x D floats per branch and step
        (39 MiB for anima-2b's 20 steps). The time goes to `step`'s AdaLN host time.
        """
        with self.host.timed(step, "adaln"), _host_blas(self._blas):
            w, cfg = self.bundle.weights, self.cfg
            sigmas = [float(s) for s in sigmas]
            # One sigma at a time, as a step would compute it (a batched GEMM rounds otherwise, and the
            # FP16 subgraphs turn that last FP32 bit into a different latent), but each layer read once.
            embs = [R.time_embedding(w, cfg, np.array([s], np.float32)) for s in sigmas]
            per_sigma: list[dict] = [{} for _ in sigmas]
            for block in range(cfg.blocks):
                prefix = f"blocks.{block}."
                layers = {k: w[k] for k in w if k.startswith(prefix) and ".adaln_modulation_" in k}
                for k, (emb, lora) in enumerate(embs):
                    per_sigma[k].update(R.modulations(layers, cfg, emb, lora, range(block, block + 1)))
            self._mods = per_sigma
            self._schedule = {s: k for k, s in enumerate(sigmas)}

    def _step_modulations(self, sigma: float, emb, lora) -> dict:
        k = self._schedule.get(sigma)
        if k is None:               # off the precomputed schedule: this step's own pass
            return R.modulations(self.bundle.weights, self.cfg, emb, lora)
        return self._mods[k]

    def _time_embedding(self, sigma: float, step: int):
        # Once per step: the final layer of a computed step reuses the blocks' embedding, a forecast
        # step (no block ran) computes its own.
        if self._emb is None or self._emb[0] != step:
            self._emb = (step, *R.time_embedding(self.bundle.weights, self.cfg, np.array([sigma], np.float32)))
        return self._emb[1:]

    def _fused_stream(self, x: np.ndarray, mods: dict, step: int) -> np.ndarray:
        """Fused subgraphs in order: each takes the stream and its blocks' modulations (one row per
        stream row, all equal), returns the delta of the stream, added here in FP32."""
        rows = (len(x), 1, x.shape[-1])
        for entry in self.manifest.subgraphs:
            with self.host.timed(step, "adaln"):
                feeds = {mod_input(b, branch, part): np.broadcast_to(value[:, None, :], rows)
                         for b in entry.blocks for branch in BRANCHES
                         for part, value in zip(MOD_PARTS, mods[(b, branch)])}
            delta = self._invoke(entry, step, x, feeds)
            with self.host.timed(step, "residual"):
                x = x + delta
        return x

    def _invoke(self, entry, step: int, h: np.ndarray, feeds: dict | None = None) -> np.ndarray:
        """One subgraph: `h` as its x, the text embedding, `feeds` (a fused
        subgraph's modulations, one row per stream row like x) by name."""
        for hook in self.between:       # memory guard: abort between invocations, never inside one
            hook(entry)
        feeds = feeds or {}
        with self.host.timed(step, "cast"):     # host FP32 -> the subgraph's dtype
            inputs = [cast(h, spec.dtype) if spec.name == "x"
                      else feeds[spec.name].astype(spec.dtype) if spec.name in feeds
                      else self._text_emb_as(spec.dtype) for spec in entry.inputs]
        batch = batch_of(entry)
        if entry.index not in self._checked:
            # Shapes are static for the whole run: check each subgraph's inputs against the manifest
            # on its first invocation (step 0), not on every one of the run's thousands of calls.
            for spec, array in zip(entry.inputs, inputs):
                check_input(entry, spec.name, pad_batch(array, batch) if batch > len(array) else array[:batch])
            self._checked.add(entry.index)
        rows = len(self.rows)
        if rows % batch and batch < rows:
            raise ManifestError(f"{entry.label}: batch axis {batch} does not divide the {rows} "
                                f"stream rows in flight ({len(self.streams)} streams x {self.images} images)")
        ctx = self.strategy.acquire(entry, step)
        try:
            if batch == rows:
                outs = [self._run(ctx, entry, step, inputs)]
            elif batch > rows:          # one stream (CFG 1) on a partition exported for two
                outs = [self._run(ctx, entry, step, [pad_batch(a, batch) for a in inputs])[:rows]]
                self.padded_to = batch
            else:                       # several calls while the context stays loaded
                outs = [self._run(ctx, entry, step, [a[k:k + batch] for a in inputs])
                        for k in range(0, rows, batch)]
        finally:
            self.strategy.finish(entry, step)
        with self.host.timed(step, "cast"):     # back to the FP32 residual stream
            out = cast(outs[0] if len(outs) == 1 else np.concatenate(outs), np.float32)
        if self.observers:
            # Before the NaN check, so an analysis still sees the invocation that stops the run.
            seen = Invocation(entry, step, self.sigma, tuple(self.rows), tuple(inputs), out)
            for observe in self.observers:
                observe(seen)
        check_finite(out, self.rows, step, entry)
        return out

    def _text_emb_as(self, dtype: str) -> np.ndarray:
        # The text embedding is the same for the whole run: cast it once per dtype, not per subgraph.
        if dtype not in self._text_embs:
            self._text_embs[dtype] = cast(self.text_emb, dtype)
        return self._text_embs[dtype]

    def _run(self, ctx, entry, step, inputs):
        # Shape, dtype and count on every invocation: a wrong shape broadcasts silently otherwise.
        return check_outputs(entry, self.strategy.run(ctx, entry, step, inputs))

    # ------------------------------------------------------------------ decoder
    def decode(self, latent: np.ndarray, step: int) -> np.ndarray:
        """The decoder subgraph as one more managed model: its output is NaN/Inf-checked like every
        subgraph's, then laid out as an RGB image [H, W, 3] in [0, 1]."""
        entry = self.manifest.decoder
        spec = entry.inputs[0]
        if int(np.prod(spec.shape)) != latent[:1].size:
            raise ManifestError(f"{entry.label} ({entry.file}) takes {spec.name} {list(spec.shape)}; the "
                                f"final latent is {list(latent.shape[1:])} per image")
        for hook in self.between:
            hook(entry)
        ctx = self.strategy.acquire(entry, step)
        try:           # one decoder context serves every image in flight, one call each
            outs = [np.asarray(self._run(ctx, entry, step, [one.reshape(spec.shape).astype(spec.dtype)]),
                               dtype=np.float32)
                    for one in np.split(latent, latent.shape[0])]
        finally:
            self.strategy.finish(entry, step)
        for out in outs:            # a PNG would clip NaN into plausible pixels
            check_image_finite(out, f"{entry.label}, file {entry.file}")
        value_range = self.cfg.decoder.get("output_range", [0.0, 1.0])
        images = [as_rgb(out, value_range, entry) for out in outs]
        return images[0] if len(images) == 1 else np.stack(images)
