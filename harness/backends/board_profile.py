"""A board profile data file (boards/data/*.toml): the board's measured figures, in the layout of
boards/data/rock5c-anima.toml, plus a [sim] table of what was assumed.

The simulated board and the planner both read it through `BoardProfile`, so a figure that is
missing or not a number is one error naming the file and the key.
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..model.config import REPO_ROOT

__all__ = ["load_board_profile", "DEFAULT_BOARD_DATA", "BRANCH_ORDER", "fits"]

DEFAULT_BOARD_DATA = REPO_ROOT / "boards" / "data" / "rock5c-anima.toml"
BRANCH_ORDER = ("self_attn", "cross_attn", "ffn")
_STAGE_KEYS = {"load": "load_rknn", "init": "init_runtime", "release": "release"}


@dataclass(frozen=True)
class BoardProfile:
    path: Path
    data: dict

    def get(self, dotted: str, kind=float):
        """A figure by dotted key ('lifecycle_pass.load_rknn'), checked to be a `kind`."""
        node = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"{self.path}: missing '{dotted}'")
            node = node[part]
        if kind is float and isinstance(node, (int, float)) and not isinstance(node, bool):
            return float(node)
        if kind is not float and isinstance(node, kind):
            return node
        raise ConfigError(f"{self.path}: '{dotted}' is {node!r}, expected {getattr(kind, '__name__', kind)}")

    # -- lifecycle and inference ----------------------------------------------------------------
    @property
    def subgraphs(self) -> int:
        return self.get("model.subgraphs", int)

    @property
    def blocks(self) -> int:
        return self.get("model.blocks", int)

    @property
    def pass_stage_sum(self) -> float:
        """load + init + release of one pass over all subgraphs, unrounded where the data has it."""
        lp = self.data.get("lifecycle_pass", {})
        return self.get("lifecycle_pass.stage_sum_unrounded" if "stage_sum_unrounded" in lp
                        else "lifecycle_pass.stage_sum")

    def stage_shares(self) -> dict[str, float]:
        """Each stage's share of a pass (ASSUMED to hold for every branch: [sim] stage_split)."""
        seconds = {s: self.get(f"lifecycle_pass.{k}") for s, k in _STAGE_KEYS.items()}
        total = sum(seconds.values())
        return {s: v / total for s, v in seconds.items()}

    def lifecycle_of(self, branch: str) -> float:
        """Measured mean load+init+release of one subgraph of `branch`; the decoder (not measured)
        gets the mean over the pass (ASSUMPTION, [sim] decoder_lifecycle)."""
        if branch in BRANCH_ORDER:
            return self.get(f"lifecycle_per_model.{branch}")
        return self.pass_stage_sum / self.subgraphs

    def stage_seconds(self, branch: str) -> dict[str, float]:
        total = self.lifecycle_of(branch)
        return {s: total * share for s, share in self.stage_shares().items()}

    def core_per_invocation(self, branch: str) -> float:
        """Inference seconds of one invocation serving the measured streams (float16, 20-step run)."""
        if branch not in BRANCH_ORDER:
            return 0.0
        short = {"self_attn": "self", "cross_attn": "cross", "ffn": "ffn"}[branch]
        return self.get(f"denoise_20_steps.float16.{short}_core_per_step") / self.blocks

    def host_per_invocation(self) -> float:
        """The board's host CPU seconds per invocation (AdaLN, casts, residual, the loop), derived
        from measured figures: (per_step - core per step - lifecycle wall per pass) / subgraphs,
        spread evenly over the invocations (ASSUMPTION, [sim] simulate_host)."""
        core = sum(self.core_per_invocation(b) for b in BRANCH_ORDER) * self.blocks
        per_step = self.get("denoise_20_steps.float16.per_step")
        return (per_step - core - self.get("lifecycle_pass.wall_with_loop")) / self.subgraphs

    def host_before(self, bodies: int) -> float:
        """The board's host seconds before one invocation of a subgraph holding `bodies` branch
        bodies (1 for a branch subgraph or the decoder, 3 x K for K fused blocks), by [plan]
        host_model "unchanged": a step's host seconds are the branch partition's at every
        granularity, each subgraph's share in proportion to the bodies it holds (an upper bound for
        fused subgraphs, whose AdaLN moved to the NPU). The planner's estimate and board-sim's
        pause before each invocation both come from here, so they agree."""
        _check_models(self, ("host_model",))
        return self.host_per_invocation() * bodies

    # -- memory ---------------------------------------------------------------------------------
    def probe_rows(self) -> list[dict]:
        rows = self.get("residency_probe", list)
        for k, row in enumerate(rows):
            for key in ("contexts", "pss_added_mib"):
                if not isinstance(row, dict) or not isinstance(row.get(key), (int, float)):
                    raise ConfigError(f"{self.path}: residency_probe row {k + 1} has no number '{key}'")
        return rows

    def sim(self, key: str, kind=float):
        return self.get(f"sim.{key}", kind)


_KNOWN_MODELS = {"lifecycle_model": "fixed + per MiB", "pss_model": "fixed + per MiB",
                 "npu_model": "unchanged", "host_model": "unchanged"}


@dataclass(frozen=True)
class Fits:
    weights_mib: dict[str, float]      # branch -> weight MiB
    lifecycle: tuple[float, float]     # seconds: fixed per context, per weight MiB
    pss: tuple[float, float]           # added MiB: fixed per context, per weight MiB

    def pss_of(self, weight_mib: float) -> float:
        return self.pss[0] + self.pss[1] * weight_mib

    def lifecycle_of(self, weight_mib: float) -> float:
        return self.lifecycle[0] + self.lifecycle[1] * weight_mib


def _check_models(profile, keys=None) -> None:
    for key, known in _KNOWN_MODELS.items():
        if keys is not None and key not in keys:
            continue
        named = profile.get(f"plan.{key}", str)
        if named != known:
            raise ConfigError(f"{profile.path}: [plan] {key} = '{named}': the planner knows '{known}'")


def fits(profile) -> Fits:
    """Least-squares fits of lifecycle and PSS per context against the contexts' weight MiB."""
    _check_models(profile)
    branches = profile.get("model.branches", list)
    weights = {b: profile.get(f"plan.context_weights_mib.{b}") for b in branches}
    a = np.array([[1.0, weights[b]] for b in branches])
    y = np.array([profile.lifecycle_of(b) for b in branches])
    life = np.linalg.lstsq(a, y, rcond=None)[0]
    rows = profile.probe_rows()
    a = np.array([[r["contexts"], sum(weights[branches[i % len(branches)]] for i in range(int(r["contexts"])))]
                  for r in rows], dtype=float)
    pss = np.linalg.lstsq(a, np.array([r["pss_added_mib"] for r in rows], dtype=float), rcond=None)[0]
    return Fits(weights, (float(life[0]), float(life[1])), (float(pss[0]), float(pss[1])))


@functools.lru_cache(maxsize=8)
def _load(path: Path) -> BoardProfile:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--board-profile-data {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"--board-profile-data {path}: is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--board-profile-data {path}: not valid TOML ({exc})") from None
    profile = BoardProfile(path, data)
    for branch in BRANCH_ORDER:           # fail at load, not mid-run, on a profile without figures
        profile.stage_seconds(branch)
        profile.core_per_invocation(branch)
    return profile


def load_board_profile(path: str | Path | None = None) -> BoardProfile:
    return _load(Path(path or DEFAULT_BOARD_DATA).resolve())
