"""The partition manifest (manifest.json): which subgraph file is which, and proof it is intact.

Data, not code: a format tag, the model and its network settings, the weights digest, the export
settings, and the subgraphs in execution order (block 0 self_attn, cross_attn, ffn, block 1 ...), each
with file, sha256, size and its input/output tensors; plus the decoder when the model has one.
Every problem is a ManifestError naming the subgraph ("subgraph 4 (block 1 cross_attn)") and the file.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError, ManifestError
from ..core.schema import Field, check_table, is_int, list_of, non_empty_str, one_of, positive_int, read_json
from ..model.config import BRANCHES, NETWORK_KEYS, ModelConfig
from .granularity import parse_granularity

__all__ = ["manifest_sha256", "default_partition_dir", "FORMAT", "FUSED_BRANCH", "MANIFEST_FILE",
           "TensorSpec", "SubgraphEntry", "Manifest", "load_manifest", "manifest_path", "network_settings",
           "subgraph_index", "partition_precision", "FAKE_QUANT"]

# The one format this suite reads and writes; the next change of the manifest's keys raises it, so a
# manifest of the other kind is refused by name.
FORMAT = "anima-partition/4"
FUSED_BRANCH = "block"         # the branch name of a fused subgraph (one or more whole blocks)
MANIFEST_FILE = "manifest.json"
DECODER_BRANCH = "decoder"
# Fake quantisation variants an export can simulate (what-if analysis before converting for INT8); here,
# not beside the ONNX bodies that build them, so that checking an option does not import onnx.
FAKE_QUANT = ("w8a8-ffn",)
def manifest_path(directory) -> Path:
    return Path(directory) / MANIFEST_FILE


def default_partition_dir(cfg: ModelConfig, digest: str, precision: str, fake_quant: str | None = None,
                          blocks=None, granularity: str = "branch") -> Path:
    """out/partitions/<model>-<precision>[-<fake quant>]-<weights digest>[-blocks-...]: one directory per
    distinct export, so `generate` never runs subgraphs from other weights or a partial export."""
    name = f"{cfg.name}-{precision}" + (f"-{fake_quant}" if fake_quant else "") + f"-{digest[:12]}"
    if blocks is not None and list(blocks) != list(range(cfg.blocks)):
        name += "-blocks-" + "_".join(str(b) for b in blocks)
    if granularity != "branch":
        name += "-" + granularity.replace(":", "")
    return Path("out/partitions") / name


def manifest_sha256(directory) -> str:
    """sha256 of manifest.json: the one id of a partition (it holds every subgraph's checksum)."""
    return hashlib.sha256(manifest_path(directory).read_bytes()).hexdigest()


def partition_precision(directory) -> str:
    """The partition's precision as goldens and result keys name it: float16, or e.g. float16+w8a8-ffn."""
    manifest = load_manifest(directory)
    if manifest.conversion:      # a converted partition: what the toolkit built
        return manifest.conversion["precision"]
    quant = manifest.export.get("fake_quant")
    return manifest.export.get("dtype", "unknown") + (f"+{quant}" if quant else "")


def subgraph_index(block: int, branch: str) -> int:
    """Position in the full network's execution order (the board's subgraph number)."""
    return block * len(BRANCHES) + BRANCHES.index(branch)


def network_settings(cfg: ModelConfig) -> dict:
    """The [network] table: what the subgraphs' math depends on (host-only settings are left out)."""
    return {key: getattr(cfg, key) for key in NETWORK_KEYS}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class SubgraphEntry:
    index: int
    block: int | None          # None for the decoder
    branch: str
    file: str                  # relative to the partition directory
    sha256: str
    bytes: int
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    blocks: list[int] | None = None      # a fused subgraph's blocks; None for a branch subgraph

    @property
    def label(self) -> str:
        if self.branch == DECODER_BRANCH:
            return f"subgraph {self.index} (decoder)"
        if self.blocks is not None:
            held = f"block {self.blocks[0]}" if len(self.blocks) == 1 else f"blocks {self.blocks[0]}-{self.blocks[-1]}"
            return f"subgraph {self.index} ({held})"
        return f"subgraph {self.index} (block {self.block} {self.branch})"

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.inputs)
        raise ManifestError(f"{self.label}: no input '{name}' (inputs: {known}; file {self.file})")

    def to_dict(self) -> dict:
        return {"index": self.index, "block": self.block, "branch": self.branch, "file": self.file,
                "sha256": self.sha256, "bytes": self.bytes,
                "inputs": [s.to_dict() for s in self.inputs], "outputs": [s.to_dict() for s in self.outputs],
                **({"blocks": list(self.blocks)} if self.blocks is not None else {})}


@dataclass
class Manifest:
    directory: Path
    format: str
    model: dict
    weights_sha256: str
    export: dict
    subgraphs: list[SubgraphEntry]
    decoder: SubgraphEntry | None = None
    weights_source: str | None = None
    # Set by `harness convert` (harness/toolkit/convert.py): toolkit, target, precision, source ONNX
    # hashes, build seconds and op placement per subgraph. None for an ONNX export.
    conversion: dict | None = None

    @property
    def file(self) -> Path:
        return manifest_path(self.directory)

    @property
    def granularity(self) -> str:
        """branch, block or blocks:K."""
        return str(self.export["granularity"])

    def blocks_held(self) -> set[int]:
        """Every block some subgraph computes (a fused subgraph holds several)."""
        return {b for e in self.subgraphs for b in (e.blocks if e.blocks is not None else [e.block]) if b is not None}

    def entries(self) -> list[SubgraphEntry]:
        return self.subgraphs + ([self.decoder] if self.decoder else [])

    def entry(self, block: int, branch: str) -> SubgraphEntry:
        for e in self.subgraphs:
            if e.block == block and e.branch == branch:
                return e
        raise ManifestError(f"{self.file}: no subgraph for block {block} {branch}")

    def to_dict(self) -> dict:
        return {"format": self.format, "model": self.model, "weights_sha256": self.weights_sha256,
                "weights_source": self.weights_source, "export": self.export,
                "subgraphs": [e.to_dict() for e in self.subgraphs],
                "decoder": self.decoder.to_dict() if self.decoder else None,
                **({"conversion": self.conversion} if self.conversion else {})}

    def save(self) -> None:
        atomic_write_json(self.file, self.to_dict())

    def path_of(self, entry: SubgraphEntry) -> Path:
        """Absolute path of an entry's file; refuses any path that leaves the partition directory."""
        rel = PurePosixPath(entry.file)
        if not entry.file or rel.is_absolute() or Path(entry.file).is_absolute() or ".." in rel.parts \
                or "\\" in entry.file or "\x00" in entry.file:
            raise ManifestError(f"{self.file}: {entry.label}: file {entry.file!r} is not a plain path "
                                f"inside the partition directory")
        root = self.directory.resolve()
        path = root / rel
        if not path.resolve().is_relative_to(root):
            raise ManifestError(f"{self.file}: {entry.label}: file '{entry.file}' resolves to "
                                f"{path.resolve()}, outside the partition directory {root}")
        return path

    # ------------------------------------------------------------ verification

    def verify_structure(self) -> None:
        """Format tag, execution order, indices, complete blocks, decoder placement."""
        where = self.file
        if self.format != FORMAT:
            raise ManifestError(f"{where}: format '{self.format}' is not the one this suite reads ({FORMAT})")
        if not self.subgraphs:
            raise ManifestError(f"{where}: lists no subgraphs")
        blocks = self.model.get("network", {}).get("blocks")
        if not isinstance(blocks, int) or blocks <= 0:
            raise ManifestError(f"{where}: model.network.blocks is missing or not a positive number")
        if self.granularity != "branch":
            self._verify_fused(blocks)
        else:
            self._verify_branches(blocks)
        files = [e.file for e in self.entries()]
        dupes = sorted({f for f in files if files.count(f) > 1})
        if dupes:
            raise ManifestError(f"{where}: file '{dupes[0]}' is listed for more than one subgraph")
        for e in self.entries():
            self.path_of(e)

    def _verify_decoder(self, index: int) -> None:
        if self.decoder is not None and (self.decoder.branch != DECODER_BRANCH or self.decoder.index != index):
            raise ManifestError(f"{self.file}: decoder entry must have branch '{DECODER_BRANCH}' and index "
                                f"{index} (file {self.decoder.file})")

    def _verify_fused(self, blocks: int) -> None:
        """Fused subgraphs: in order, each a run of consecutive blocks following the previous one."""
        where = self.file
        try:
            parse_granularity(self.granularity, blocks)
        except ConfigError as exc:       # worded for the option: said of this file instead
            raise ManifestError(f"{where}: export.granularity: {exc}") from None
        expected = None
        for pos, e in enumerate(self.subgraphs):
            held = e.blocks
            if e.branch != FUSED_BRANCH or not isinstance(held, list) or not held \
                    or not all(isinstance(b, int) and 0 <= b < blocks for b in held) \
                    or held != list(range(held[0], held[0] + len(held))) or e.block != held[0]:
                raise ManifestError(f"{where}: subgraphs[{pos}] ({e.file}): a {self.granularity} subgraph needs "
                                    f"branch '{FUSED_BRANCH}' and blocks, consecutive, within 0..{blocks - 1}")
            if e.index != pos or (expected is not None and held[0] != expected):
                raise ManifestError(f"{where}: {e.label} is out of execution order (file {e.file})")
            expected = held[-1] + 1
        self._verify_decoder(len(self.subgraphs))

    def _verify_branches(self, blocks: int) -> None:
        where = self.file
        previous = -1
        for pos, e in enumerate(self.subgraphs):
            if e.branch not in BRANCHES:
                raise ManifestError(f"{where}: subgraphs[{pos}] ({e.file}): branch '{e.branch}' "
                                    f"is not one of {', '.join(BRANCHES)}")
            if not isinstance(e.block, int) or not 0 <= e.block < blocks:
                raise ManifestError(f"{where}: subgraphs[{pos}] ({e.file}): block {e.block!r} "
                                    f"is outside 0..{blocks - 1}")
            if e.index != subgraph_index(e.block, e.branch):
                raise ManifestError(f"{where}: {e.label}: index should be "
                                    f"{subgraph_index(e.block, e.branch)} for block {e.block} "
                                    f"{e.branch} (file {e.file})")
            if e.index <= previous:
                raise ManifestError(f"{where}: {e.label} is out of execution order "
                                    f"(after subgraph {previous}; file {e.file})")
            previous = e.index
        listed = {(e.block, e.branch) for e in self.subgraphs}
        for block in sorted({e.block for e in self.subgraphs if e.block is not None}):
            missing = [b for b in BRANCHES if (block, b) not in listed]
            if missing:
                raise ManifestError(f"{where}: block {block} lacks its {', '.join(missing)} subgraph")
        self._verify_decoder(blocks * len(BRANCHES))

    def verify_entry(self, entry: SubgraphEntry) -> None:
        """The entry's file exists, has the recorded size and sha256."""
        path = self.path_of(entry)
        what = f"{self.file}: {entry.label}: file '{entry.file}'"
        if not path.is_file():
            raise ManifestError(f"{what} is missing")
        size = path.stat().st_size
        if size != entry.bytes:
            kind = "truncated" if size < entry.bytes else "longer than recorded"
            raise ManifestError(f"{what} is {kind}: {size} bytes, manifest says {entry.bytes}")
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        if digest != entry.sha256:
            raise ManifestError(f"{what} fails its checksum: sha256 {digest[:16]}..., "
                                f"manifest says {entry.sha256[:16]}...")

    def verify(self, check_files: bool = True) -> None:
        self.verify_structure()
        if check_files:
            for entry in self.entries():
                self.verify_entry(entry)


# ---------------------------------------------------------------- loading

def _is(*kinds):
    # JSON true/false are ints to isinstance; a boolean is never a valid index, size or shape.
    return lambda v: isinstance(v, kinds) and not isinstance(v, bool)


_TENSOR = {"name": Field(non_empty_str, "a non-empty string"),
           "shape": Field(list_of(positive_int), "a list of positive whole numbers"),
           "dtype": Field(one_of("float32", "float16"), "float32 or float16")}
_ENTRY = {"index": Field(is_int, "a whole number"), "block": Field(is_int, "a whole number"),
          "branch": Field(non_empty_str, "a branch name"), "file": Field(non_empty_str, "a file name"),
          "sha256": Field(non_empty_str, "a sha256 hex digest"), "bytes": Field(is_int, "a size in bytes"),
          "inputs": Field(_is(list), "a list of tensors"), "outputs": Field(_is(list), "a list of tensors")}
_DECODER = {**_ENTRY, "block": Field(lambda v: v is None or is_int(v), "null", required=False)}
_MANIFEST = {"format": Field(non_empty_str, "a format name"), "model": Field(_is(dict), "a table"),
             "weights_sha256": Field(non_empty_str, "a sha256 hex digest"),
             "export": Field(_is(dict), "a table"), "subgraphs": Field(_is(list), "a list of subgraphs")}
_MODEL = {"name": Field(non_empty_str, "a model name"), "network": Field(_is(dict), "a table")}
# Written by `harness convert` (harness/toolkit/convert.py); an ONNX export has none.
_CONVERSION = {"toolkit_version": Field(non_empty_str, "a version"), "target": Field(non_empty_str, "a platform"),
               "precision": Field(non_empty_str, "a precision"),
               "subgraphs": Field(_is(list), "a list of per-subgraph build records")}
_EXPORT = {key: Field(_is(str, int, dict), "a string, number or table")
           for key in ("dtype", "streams", "opset", "tokens", "text_emb_tokens", "fp32_islands", "granularity")}


def _tensor(obj, where: str) -> TensorSpec:
    check_table(obj, _TENSOR, where, error=ManifestError, extra=True)
    return TensorSpec(obj["name"], tuple(obj["shape"]), obj["dtype"])


def _entry(obj, where: str, decoder: bool = False) -> SubgraphEntry:
    check_table(obj, _DECODER if decoder else _ENTRY, where, error=ManifestError, extra=True)
    e = SubgraphEntry(index=obj["index"], block=obj.get("block"), branch=obj["branch"], file=obj["file"],
                      sha256=obj["sha256"], bytes=obj["bytes"], blocks=obj.get("blocks"))
    where = f"{where} ({e.label}, file {e.file})"
    e.inputs = [_tensor(t, f"{where} input {k}") for k, t in enumerate(obj["inputs"])]
    e.outputs = [_tensor(t, f"{where} output {k}") for k, t in enumerate(obj["outputs"])]
    return e


def _conversion(data: dict, where: str) -> dict | None:
    conversion = data.get("conversion")
    if conversion is None:
        return None
    return check_table(conversion, _CONVERSION, f"{where}: conversion", error=ManifestError, extra=True)


def load_manifest(directory) -> Manifest:
    """Parse and structurally check manifest.json (files are checked by Manifest.verify())."""
    directory = Path(directory)
    path = manifest_path(directory)
    if not path.is_file():
        raise ManifestError(f"{path}: no manifest (is {directory} an exported partition?)")
    data = read_json(path, "manifest", error=ManifestError)
    where = str(path)
    check_table(data, _MANIFEST, where, error=ManifestError, extra=True)
    check_table(data["model"], _MODEL, f"{where}: model", error=ManifestError, extra=True)
    check_table(data["export"], _EXPORT, f"{where}: export", error=ManifestError, extra=True)
    subgraphs = [_entry(e, f"{where}: subgraphs[{k}]") for k, e in enumerate(data["subgraphs"])]
    decoder = data.get("decoder")
    manifest = Manifest(directory=directory, format=data["format"], model=data["model"],
                        weights_sha256=data["weights_sha256"], export=data["export"], subgraphs=subgraphs,
                        decoder=_entry(decoder, f"{where}: decoder", decoder=True) if decoder else None,
                        weights_source=data.get("weights_source"),
                        conversion=_conversion(data, where))
    manifest.verify_structure()
    return manifest


# ---------------------------------------------------------------- inspection


