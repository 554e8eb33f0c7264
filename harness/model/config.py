"""Model profiles: the network's shape as data (TOML), loaded into a frozen dataclass.

Profiles live in models/profiles/*.toml (anima-2b, cosmos-tiny) and in each model directory's
model.toml (the embedded model). Every derived size (head_dim, RoPE split, token count) is
computed here once so the math modules never re-derive it differently.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.schema import Field, check_table, is_number, positive_int, read_toml

__all__ = ["ModelConfig", "load_profile", "load_model_dir", "PROFILES_DIR", "EMBEDDED_DIR",
           "REPO_ROOT", "BRANCHES", "NETWORK_KEYS", "FORMAT"]

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES_DIR = REPO_ROOT / "models" / "profiles"
EMBEDDED_DIR = REPO_ROOT / "models" / "embedded"

# model.toml / profile `format` (optional: a file without one is read as this one); the next
# change of the file's keys raises it, so a file of the other kind is refused by name.
FORMAT = 2

# Execution order of the three branch bodies inside every block (the board's subgraph order).
BRANCHES = ("self_attn", "cross_attn", "ffn")

NETWORK_KEYS = {
    "blocks": int, "width": int, "heads": int, "ffn_ratio": int, "latent_channels": int,
    "padding_mask": bool, "patch_spatial": int, "patch_temporal": int, "text_emb_dim": int,
    "adaln_lora_rank": int, "rope_ratio_h": float, "rope_ratio_w": float, "rope_ratio_t": float,
    "timestep_multiplier": float, "norm_eps": float,
}

_POSITIVE = {"blocks", "width", "heads", "ffn_ratio", "latent_channels", "patch_spatial", "patch_temporal",
             "text_emb_dim", "adaln_lora_rank"}
_NETWORK = {key: Field(positive_int, "a positive whole number") if key in _POSITIVE
            else Field(lambda v: isinstance(v, bool), "true or false") if kind is bool
            else Field(is_number, "a number") for key, kind in NETWORK_KEYS.items()}


@dataclass(frozen=True)
class ModelConfig:
    name: str
    blocks: int
    width: int
    heads: int
    ffn_ratio: int
    latent_channels: int
    padding_mask: bool
    patch_spatial: int
    patch_temporal: int
    text_emb_dim: int
    adaln_lora_rank: int
    rope_ratio_h: float
    rope_ratio_w: float
    rope_ratio_t: float
    timestep_multiplier: float
    norm_eps: float
    latent_size: tuple[int, int]
    text_emb_tokens: int
    sampler: dict = field(default_factory=dict)
    prompt: dict = field(default_factory=dict)
    decoder: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    raw_gates: dict = field(default_factory=dict)
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def ffn_hidden(self) -> int:
        return self.width * self.ffn_ratio

    @property
    def in_channels(self) -> int:
        return self.latent_channels + (1 if self.padding_mask else 0)

    @property
    def patch_features(self) -> int:
        return self.in_channels * self.patch_spatial ** 2 * self.patch_temporal

    @property
    def out_features(self) -> int:
        return self.latent_channels * self.patch_spatial ** 2 * self.patch_temporal

    @property
    def tokens(self) -> int:
        h, w = self.latent_size
        return (h // self.patch_spatial) * (w // self.patch_spatial)

    @property
    def rope_dims(self) -> tuple[int, int, int]:
        """(dim_t, dim_h, dim_w) split of head_dim (docs/architecture.md section 3)."""
        dim_h = (self.head_dim // 6) * 2
        return self.head_dim - 2 * dim_h, dim_h, dim_h

    @property
    def subgraphs(self) -> int:
        return self.blocks * len(BRANCHES)


def _parse(data: dict, source: str) -> ModelConfig:
    if data.get("format", FORMAT) != FORMAT:
        raise ConfigError(f"{source}: format {data['format']!r} is not one this suite reads ({FORMAT})")
    net = data.get("network")
    if not isinstance(net, dict):
        raise ConfigError(f"{source}: missing [network] table")
    check_table(net, _NETWORK, f"{source} [network]", extra=True)
    values: dict[str, Any] = {key: (float(net[key]) if kind is float else net[key])
                              for key, kind in NETWORK_KEYS.items()}
    if values["width"] % values["heads"]:
        raise ConfigError(f"{source}: width {values['width']} is not divisible by heads {values['heads']}")
    if (values["width"] // values["heads"]) % 2:
        raise ConfigError(f"{source}: head_dim must be even for split-half RoPE")
    image = data.get("image", {})
    latent_size = tuple(image.get("latent_size", ()))
    if len(latent_size) != 2 or any(s % values["patch_spatial"] for s in latent_size):
        raise ConfigError(f"{source}: [image] latent_size must be two multiples of patch_spatial")
    files = {k: data[k] for k in ("weights", "prompt_encoder") if k in data}
    return ModelConfig(
        name=str(data.get("name", Path(source).stem)),
        latent_size=latent_size,
        text_emb_tokens=int(image.get("text_emb_tokens", 1)),
        sampler=dict(data.get("sampler", {})),
        prompt=dict(data.get("prompt", {})),
        decoder=dict(data.get("decoder", {})),
        files=files,
        raw_gates=dict(data.get("gates", {})),
        source=source,
        **values,
    )


def load_profile(name_or_path: str | Path) -> ModelConfig:
    """Load a profile by name (models/profiles/NAME.toml) or by path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILES_DIR / f"{name_or_path}.toml"
        if not path.exists():
            known = sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))
            raise ConfigError(f"unknown profile '{name_or_path}' (known: {', '.join(known)})")
    return _parse(read_toml(path, "profile file"), str(path))


def load_model_dir(model_dir: str | Path) -> ModelConfig:
    """Load model.toml of a model directory (the embedded model or an exported partition)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir}: model directory does not exist")
    return load_profile(model_dir / "model.toml")
