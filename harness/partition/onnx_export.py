"""ONNX export of the partition: one model per (block, branch) body, plus the decoder.

Each graph mirrors harness.model.reference op for op (same operand order, same constants), so the
onnxruntime backend and the RKNN converter see exactly the math the FP32 reference defines. Shapes are
static: x [S, N, D] (S = CFG streams served per run), cross-attention also text_emb [S, L, C]; output
y [S, N, D]. Opset <= 19 because the RKNN converter rejects newer, hence GELU is written in primitive ops.

Float16 export keeps weights and graph inputs/outputs in float16. onnxruntime's CPU provider lacks
float16 kernels for many ops; it would silently wrap them in casts. We probe which ones (per op type,
on the installed onnxruntime) and insert explicit Cast-to-float32 around exactly those nodes, so every
op output is still rounded to float16 like on the NPU, and the manifest lists them as `fp32_islands`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..core.atomic import atomic_write_bytes
from ..core.errors import ConfigError
from ..model.checkpoint import as_source
from ..model.config import BRANCHES, ModelConfig
from ..model.embedded import interp_matrix
from ..model.weights import combine_digests, tensor_digest
from .bodies import BODIES, check_fake_quant, ffn_body
from .fused import build_fused_body, fused_inputs
from .granularity import Granularity, parse_granularity
from .graph import DEFAULT_OPSET, DTYPES, Graph, check_opset
from .manifest import (
    FORMAT,
    FUSED_BRANCH,
    Manifest,
    SubgraphEntry,
    TensorSpec,
    manifest_path,
    network_settings,
    subgraph_index,
)

__all__ = ["ExportSettings", "export_partition", "build_subgraph", "build_decoder", "subgraph_file", "planned_files"]

DECODER_FILE = "decoder.onnx"


def _check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype '{dtype}' is not supported (choose {' or '.join(DTYPES)})")
    return dtype


def _check_streams(streams: int) -> int:
    if not isinstance(streams, int) or isinstance(streams, bool) or streams <= 0:
        raise ConfigError(f"streams must be a positive whole number, got {streams!r}")
    return streams


# ---------------------------------------------------------------- float16 kernel probe


# ---------------------------------------------------------------- graph builder


# ---------------------------------------------------------------- the bodies, op for op


def _check_block(cfg: ModelConfig, block: int) -> int:
    if not isinstance(block, (int, np.integer)) or not 0 <= int(block) < cfg.blocks:
        raise ConfigError(f"block {block!r} is out of range: {cfg.name} has blocks 0..{cfg.blocks - 1}")
    return int(block)


def _build(weights: dict, cfg: ModelConfig, block: int, branch: str, dtype: str, streams: int,
           opset: int, fake_quant: str | None = None) -> tuple[onnx.ModelProto, list[str]]:
    block = _check_block(cfg, block)
    if branch not in BODIES:
        raise ConfigError(f"branch '{branch}' is unknown (known: {', '.join(BRANCHES)})")
    g = Graph(_check_dtype(dtype), check_opset(opset))
    _check_streams(streams)
    x_shape = [streams, cfg.tokens, cfg.width]
    inputs = [helper.make_tensor_value_info("x", g.elem, x_shape)]
    if branch == "cross_attn":
        inputs.append(helper.make_tensor_value_info("text_emb", g.elem,
                                                    [streams, cfg.text_emb_tokens, cfg.text_emb_dim]))
    if branch == "ffn":
        ffn_body(g, weights, cfg, block, streams, check_fake_quant(fake_quant))
    else:
        BODIES[branch](g, weights, cfg, block, streams)
    outputs = [helper.make_tensor_value_info("y", g.elem, x_shape)]
    index = subgraph_index(block, branch)
    model = g.model(f"block{block}_{branch}", inputs, outputs,
                    f"{cfg.name} subgraph {index}: block {block} {branch} body ({dtype})",
                    {"model": cfg.name, "block": block, "branch": branch, "index": index, "dtype": dtype})
    return model, g.islands


def _build_fused(weights: dict, cfg: ModelConfig, blocks: list[int], dtype: str, streams: int, opset: int,
                 fake_quant: str | None = None) -> tuple[onnx.ModelProto, list[str]]:
    g = Graph(_check_dtype(dtype), check_opset(opset))
    inputs = fused_inputs(g, cfg, blocks, _check_streams(streams))
    build_fused_body(g, weights, cfg, blocks, streams, check_fake_quant(fake_quant))
    outputs = [helper.make_tensor_value_info("y", g.elem, [streams, cfg.tokens, cfg.width])]
    held = f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {blocks[0]}-{blocks[-1]}"
    model = g.model(f"blocks{blocks[0]}_{blocks[-1]}", inputs, outputs,
                    f"{cfg.name}: {held} fused, AdaLN modulation, AdaLN gate and residual add inside; y = the "
                    f"residual delta ({dtype})",
                    {"model": cfg.name, "blocks": ",".join(map(str, blocks)), "branch": FUSED_BRANCH, "dtype": dtype})
    return model, g.islands


def fused_file(index: int, blocks: list[int]) -> str:
    held = f"block{blocks[0]:02d}" if len(blocks) == 1 else f"blocks{blocks[0]:02d}-{blocks[-1]:02d}"
    return f"{index:02d}_{held}.onnx"


def build_subgraph(weights: dict, cfg: ModelConfig, block: int, branch: str, dtype: str = "float32",
                   streams: int = 2, opset: int = DEFAULT_OPSET, fake_quant: str | None = None) -> onnx.ModelProto:
    """The ONNX model of one branch body of one block (inputs x [, text_emb], output y)."""
    return _build(weights, cfg, block, branch, dtype, streams, opset, fake_quant)[0]


def build_decoder(cfg: ModelConfig, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """embedded.decode as a graph: latent [1, 1, H, W] -> image [1, H*s, W*s, 3] float32."""
    check_opset(opset)
    if cfg.latent_channels != 1 or not cfg.decoder:
        raise ConfigError(f"{cfg.name}: no exportable decoder (needs a [decoder] table and a "
                          f"1-channel latent; has {cfg.latent_channels} channels)")
    scale = int(cfg.decoder.get("scale", 4))
    bg = np.asarray(cfg.decoder.get("background", [0, 0, 0]), dtype=np.float32)
    fg = np.asarray(cfg.decoder.get("foreground", [1, 1, 1]), dtype=np.float32)
    h, w = cfg.latent_size
    g = Graph("float32", opset)
    lat = g.op("Reshape", ["latent", g.ints("latent/shape", [h, w])], "latent_2d")
    rows = g.op("MatMul", [g.const("interp_h", interp_matrix(h, scale)), lat], "upsample_h")
    up = g.op("MatMul", [rows, g.const("interp_w_t", interp_matrix(w, scale).T.copy())], "upsample_w")
    # (up + 1) * 0.5 clipped to [0, 1], then bg + level * (fg - bg)
    level = g.op("Mul", [g.op("Add", [up, g.const("one", 1.0)], "shift"), g.const("half", 0.5)], "level_raw")
    level = g.op("Clip", [level, g.const("zero_f", 0.0), g.const("one_f", 1.0)], "level_clip")
    # NHWC with a batch axis of 1: the toolkit keeps every op of this layout on the NPU, while a
    # final reshape to the rank-3 [H, W, 3] runs on the CPU (its layer table shows it). The host drops
    # the batch axis (PartitionedPipeline.decode).
    level = g.op("Reshape", [level, g.ints("level/shape", [1, h * scale, w * scale, 1])], "level")
    mixed = g.op("Mul", [level, g.const("fg_minus_bg", fg - bg)], "tint")
    g.op("Add", [g.const("background", bg), mixed], "image")
    inputs = [helper.make_tensor_value_info("latent", TensorProto.FLOAT, [1, 1, h, w])]
    outputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, h * scale, w * scale, 3])]
    return g.model("decoder", inputs, outputs, f"{cfg.name} decoder: bilinear x{scale}, two colours",
                   {"model": cfg.name, "branch": "decoder"})


# ---------------------------------------------------------------- whole partition

def subgraph_file(block: int, branch: str) -> str:
    return f"{subgraph_index(block, branch):02d}_block{block:02d}_{branch}.onnx"


def _specs(model: onnx.ModelProto, which) -> list[TensorSpec]:
    out = []
    for vi in which(model.graph):
        t = vi.type.tensor_type
        out.append(TensorSpec(vi.name, tuple(d.dim_value for d in t.shape.dim),
                              helper.tensor_dtype_to_np_dtype(t.elem_type).name))
    return out


def _write(model: onnx.ModelProto, out_dir: Path, file: str, index: int, block, branch) -> SubgraphEntry:
    data = model.SerializeToString()
    onnx.checker.check_model(data)     # the bytes we write, serialised once
    atomic_write_bytes(out_dir / file, data)
    return SubgraphEntry(index=index, block=block, branch=branch, file=file,
                         sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                         inputs=_specs(model, lambda g: g.input), outputs=_specs(model, lambda g: g.output))


def _select_blocks(cfg: ModelConfig, blocks) -> list[int]:
    if blocks is None:
        return list(range(cfg.blocks))
    chosen = sorted({_check_block(cfg, b) for b in blocks})
    if not chosen:
        raise ConfigError("no blocks selected for export")
    return chosen


def _has_decoder(cfg: ModelConfig) -> bool:
    return _decoder_source(cfg) is not None or (cfg.latent_channels == 1 and bool(cfg.decoder))


def _groups(chosen: list[int], granularity: Granularity) -> list[list[int]]:
    """The fused subgraphs' blocks: runs of `granularity.blocks` consecutive chosen blocks."""
    runs: list[list[int]] = []
    for b in chosen:
        if runs and runs[-1][-1] == b - 1 and len(runs[-1]) < granularity.blocks:
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs


def planned_files(cfg: ModelConfig, blocks=None, granularity: str = "branch") -> int:
    """How many ONNX files an export of `blocks` writes (for a caller's progress display)."""
    g = parse_granularity(granularity, cfg.blocks)
    chosen = _select_blocks(cfg, blocks)
    bodies = len(_groups(chosen, g)) if g.fused else len(chosen) * len(BRANCHES)
    return bodies + int(_has_decoder(cfg))


@dataclass(frozen=True)
class ExportSettings:
    """What an export is asked to make (export_partition's arguments of the same names)."""
    precision: str = "float32"
    streams: int = 2
    opset: int = DEFAULT_OPSET
    blocks: list[int] | None = None
    fake_quant: str | None = None
    granularity: str = "branch"
    weights_source: str | None = None


def export_partition(weights, cfg: ModelConfig, out_dir, settings: ExportSettings | None = None,
                     on_file: Callable[[], None] | None = None) -> Manifest:
    """Write one ONNX file per subgraph (+ decoder.onnx when the model has one) and manifest.json.

    `weights` is a Checkpoint (or its path) or a dict of tensors. Tensors are read one block at a time
    and dropped when the block's three subgraphs are written, so peak memory is one block's tensors
    and one subgraph's graph, not the model. The weights digest is hashed tensor by tensor on the way
    (the blocks not exported are read for it too, one tensor at a time).
    settings (ExportSettings): precision float32 or float16 is the graphs' element type (the manifest's
    export dtype); streams, the opset, the blocks (None: all); fake_quant="w8a8-ffn" simulates INT8 FFN
    linears (weights and activations) in the graph dtype.
    on_file() is called after each file is written (the CLI draws its progress bar with it; the
    exporter itself prints nothing).
    granularity: branch (3 subgraphs per block), block or blocks:K (fused: harness/partition/fused.py).
    """
    s = settings or ExportSettings()
    dtype, streams, opset, fake_quant = s.precision, s.streams, s.opset, s.fake_quant
    gran = parse_granularity(s.granularity, cfg.blocks)
    _check_dtype(dtype)
    check_fake_quant(fake_quant)
    _check_streams(streams)
    check_opset(opset)
    chosen = _select_blocks(cfg, s.blocks)
    source = as_source(weights, cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # An interrupted export must not leave an old manifest vouching for half-replaced files.
    manifest_path(out_dir).unlink(missing_ok=True)
    decoder_file = _decoder_source(cfg)
    advance = on_file or (lambda: None)
    entries: list[SubgraphEntry] = []
    islands: dict[str, list[str]] = {}
    hashes: dict[str, bytes] = {}
    known = source.known_digest()       # e.g. computed for the default directory name
    for group in (_groups(chosen, gran) if gran.fused else [[b] for b in chosen]):
        w = {}
        for block in group:
            w.update(source.block_tensors(block))
        if known is None:
            hashes.update((k, tensor_digest(k, v)) for k, v in w.items())
        if gran.fused:
            model, islands[FUSED_BRANCH] = _build_fused(w, cfg, group, dtype, streams, opset, fake_quant)
            entry = _write(model, out_dir, fused_file(len(entries), group), len(entries), group[0], FUSED_BRANCH)
            entry.blocks = list(group)
            entries.append(entry)
            advance()
            continue
        for branch in BRANCHES:
            model, wrapped = _build(w, cfg, group[0], branch, dtype, streams, opset, fake_quant)
            islands[branch] = wrapped
            entries.append(_write(model, out_dir, subgraph_file(group[0], branch),
                                  subgraph_index(group[0], branch), group[0], branch))
            del model
            advance()
        del w
    decoder = None
    if _has_decoder(cfg):
        model = onnx.load(decoder_file) if decoder_file else build_decoder(cfg, opset)
        decoder = _write(model, out_dir, DECODER_FILE, len(entries) if gran.fused else cfg.subgraphs,
                         None, "decoder")
        advance()
    for key in source.keys() if known is None else ():   # the rest: host tensors, blocks not exported
        if key not in hashes:
            hashes[key] = tensor_digest(key, source.read([key])[key])
    export = {"dtype": dtype, "streams": streams, "opset": opset, "latent_size": list(cfg.latent_size),
              "tokens": cfg.tokens, "text_emb_tokens": cfg.text_emb_tokens, "blocks": chosen,
              "fp32_islands": {b: islands[b] for b in (*BRANCHES, FUSED_BRANCH) if islands.get(b)},
              "granularity": str(gran)}
    if fake_quant:
        export["fake_quant"] = fake_quant
    if decoder_file:
        export["decoder_source"] = str(decoder_file)
    manifest = Manifest(directory=out_dir, format=FORMAT,
                        model={"name": cfg.name, "network": network_settings(cfg)},
                        weights_sha256=known or combine_digests(hashes),
                        weights_source=s.weights_source or getattr(source, "source", None),
                        export=export, subgraphs=entries, decoder=decoder)
    manifest.save()
    return manifest


def _decoder_source(cfg: ModelConfig) -> Path | None:
    """The user's decoder ONNX named in model.toml ([decoder] onnx), checked to exist and load."""
    name = cfg.decoder.get("onnx")
    if not name:
        return None
    path = Path(cfg.source).parent / name
    if not path.is_file():
        raise ConfigError(f"{cfg.source}: [decoder] onnx = '{name}' but {path} does not exist")
    return path
