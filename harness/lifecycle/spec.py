"""`--lifecycle` values and the strategy they make.

    on-demand | resident | lru:K | pinned:K | pinned:@I,J,A-B | prefetch:K

pinned:K keeps the K subgraphs whose lifecycle costs most on the board: FFNs first (0.510 s load +
init + release each), then self-attention (0.423 s), then cross-attention (0.200 s), each in
execution order (boards/data/rock5c-anima.toml [lifecycle_per_model]). pinned:@... names the
subgraph indices to keep instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import BackendOptions, run_options
from ..core.errors import ConfigError
from .local import Lru, OnDemand, Pinned, Resident
from .prefetch import Prefetch

__all__ = ["LifecycleSpec", "parse_lifecycle", "make_strategy", "PIN_ORDER", "pinned_subset"]

# Branches by the board's measured mean lifecycle per subgraph, most expensive first.
PIN_ORDER = ("ffn", "self_attn", "cross_attn")
_USAGE = "on-demand, resident, lru:K, pinned:K, pinned:@I,J,A-B or prefetch:K (K a positive whole number)"


@dataclass(frozen=True)
class LifecycleSpec:
    kind: str                           # on-demand, resident, lru, pinned, prefetch
    k: int | None = None
    indices: tuple[int, ...] | None = None   # pinned:@...

    def __str__(self) -> str:
        if self.indices is not None:
            return f"pinned:@{','.join(map(str, self.indices))}"
        return self.kind if self.k is None else f"{self.kind}:{self.k}"


def _bad(spec: str, why: str = "") -> ConfigError:
    return ConfigError(f"--lifecycle {spec!r}: {why or 'expected ' + _USAGE}")


def _positive(spec: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise _bad(spec)
    return int(text)


def _indices(spec: str, text: str) -> tuple[int, ...]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise _bad(spec, f"'{part}' is not a subgraph index or range A-B")
        out.update(range(int(lo), int(hi or lo) + 1))
    if not out:
        raise _bad(spec, "name at least one subgraph index after '@'")
    return tuple(sorted(out))


def parse_lifecycle(spec: str) -> LifecycleSpec:
    text = str(spec).strip().lower()
    kind, _, arg = text.partition(":")
    if kind in ("on-demand", "resident") and not arg:
        return LifecycleSpec(kind)
    if kind in ("lru", "prefetch") and arg:
        return LifecycleSpec(kind, _positive(spec, arg))
    if kind == "pinned" and arg.startswith("@"):
        return LifecycleSpec(kind, indices=_indices(spec, arg[1:]))
    if kind == "pinned" and arg:
        return LifecycleSpec(kind, _positive(spec, arg))
    raise _bad(spec)


def pinned_subset(spec: LifecycleSpec, manifest) -> frozenset[int]:
    """The subgraph indices pinned:... keeps, checked against the manifest."""
    known = {e.index for e in manifest.subgraphs}
    if spec.indices is not None:
        unknown = [i for i in spec.indices if i not in known]
        if unknown:
            raise ConfigError(f"--lifecycle {spec}: no subgraph {unknown[0]} in {manifest.file} "
                              f"(subgraphs {min(known)}..{max(known)})")
        return frozenset(spec.indices)
    if _count(spec) > len(known):
        raise ConfigError(f"--lifecycle {spec}: the partition has only {len(known)} subgraphs")
    ranked = sorted(manifest.subgraphs, key=lambda e: (PIN_ORDER.index(e.branch)
                                                       if e.branch in PIN_ORDER else len(PIN_ORDER), e.index))
    return frozenset(e.index for e in ranked[:spec.k])


def _count(spec: LifecycleSpec) -> int:
    """The count of lru:N, prefetch:N and pinned:N (parse_lifecycle gives these kinds one)."""
    assert spec.k is not None, spec
    return spec.k


def make_strategy(spec: LifecycleSpec | str, options: BackendOptions, recorder, manifest):
    """The strategy for one run over `manifest` (its close() must be called whatever happens)."""
    spec = parse_lifecycle(spec) if isinstance(spec, str) else spec
    options = run_options(options)
    if spec.kind == "on-demand":
        return OnDemand(options, recorder, manifest.path_of)
    if spec.kind == "resident":
        return Resident(options, recorder, manifest.path_of)
    if spec.kind == "lru":
        return Lru(options, recorder, manifest.path_of, _count(spec))
    if spec.kind == "pinned":
        return Pinned(options, recorder, manifest.path_of, pinned_subset(spec, manifest), str(spec))
    entries = list(manifest.subgraphs) + ([manifest.decoder] if manifest.decoder else [])
    return Prefetch(options, recorder, manifest.path_of, manifest.subgraphs, _count(spec), entries=entries)
