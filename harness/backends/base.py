"""The backend protocol, mirroring the board's RKNNLite lifecycle: load -> init -> run* -> release.

A Context is one subgraph on one backend. Backends do no timing themselves: the lifecycle module
times every stage in one place, so every backend is measured the same way.

Every context that has loaded something is counted as live until it is released; tests use
`live_contexts()` to prove that failures leave nothing loaded.
"""
from __future__ import annotations

import abc
import functools
import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import BackendError, ConfigError
from .registry import BACKENDS, ORIGIN, REFUSED

__all__ = ["BackendOptions", "Context", "create_context", "live_contexts", "backend_options", "backend_class",
           "BACKENDS", "run_options"]

_live_lock = threading.Lock()
_live: set[int] = set()


def live_contexts() -> int:
    """How many contexts are loaded and not yet released, across all backends."""
    with _live_lock:
        return len(_live)


@dataclass(frozen=True)
class BackendOptions:
    """Which backend a run uses and the settings its contexts are made with: built once where the run
    is asked for (a command's arguments, the suite's settings, a saved report) by `backend_options`,
    and passed inward whole, to every context of the run, also in prefetch workers.

    settings: the keys the backend itself checked (Context.parse_options), e.g. core_mask for rknnlite,
    a fault's fields for faults, profile_data and time_scale for board-sim. Read them with `get`.
    """
    backend: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    def with_settings(self, changes: Mapping[str, Any]) -> BackendOptions:
        """The same backend with some settings changed (a core mask under test, say)."""
        return replace(self, settings={**self.settings, **changes})

    def without(self, *keys: str) -> BackendOptions:
        return replace(self, settings={k: v for k, v in self.settings.items() if k not in keys})

    def as_dict(self) -> dict:
        """The settings as a run report keeps them."""
        return dict(self.settings)


class Context(abc.ABC):
    """One subgraph's runtime context. `label` names it in every error ("subgraph 4 (block 1 cross_attn)")."""

    backend_name = "abstract"
    exclusive_options: tuple[str, ...] = ()    # refused when another backend runs

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        """Validate this backend's suite options (raise ConfigError naming the option)."""
        return {}

    @classmethod
    def run_options(cls, options: BackendOptions) -> BackendOptions:
        """Complete the context options once per run (before contexts are made, in any process)."""
        return options

    @classmethod
    def import_runtime(cls) -> None:
        """Import the runtime's own module now (before a run is under way), not at the first init:
        a stop signal that lands inside a C extension's import is reported by Python as that import
        failing, not as the stop it was. The base class's runtime is imported with it: nothing to do."""
        return None

    @classmethod
    def between_invocations(cls, options: BackendOptions) -> list:
        """Callables the pipeline calls with the next subgraph's manifest entry before every invocation
        (a simulated board's host time)."""
        return []

    def __init__(self, label: str, options: BackendOptions | None = None):
        self.label = label
        self.options = options or BackendOptions(self.backend_name)

    # Subclasses implement the four stages; they raise BackendError naming self.label and the stage.
    @abc.abstractmethod
    def load(self, path: Path) -> None: ...

    @abc.abstractmethod
    def init(self) -> None: ...

    @abc.abstractmethod
    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]: ...

    @abc.abstractmethod
    def release(self) -> None: ...

    def _mark_live(self) -> None:
        with _live_lock:
            _live.add(id(self))

    def _mark_released(self) -> None:
        with _live_lock:
            _live.discard(id(self))

    def error(self, stage: str, detail: str) -> BackendError:
        return BackendError(f"{self.backend_name}: {self.label}: {stage} failed: {detail}")


def _check_known(backend: str) -> None:
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend '{backend}' (known: {', '.join(sorted(BACKENDS))})")


def create_context(options: BackendOptions, label: str) -> Context:
    """One context of `options.backend`, named `label` in its errors."""
    _check_known(options.backend)
    return backend_class(options.backend)(label, options)


def backend_options(backend: str, values: dict, cfg) -> BackendOptions:
    """The context options for `backend` from the suite's option values (command line or board
    profile). Every backend validates the options it owns, so a bad value fails whichever backend
    runs; an exclusive option (such as --fault) given to another backend is refused, not ignored, and
    so is an installed backend that would shadow another (registry.REFUSED)."""
    if REFUSED:
        raise ConfigError(REFUSED[0])
    _check_known(backend)
    chosen: dict = {}
    for name in BACKENDS:
        cls = backend_class(name)
        parsed = cls.parse_options(values, cfg)
        if name == backend:
            chosen = parsed
            continue
        for option in cls.exclusive_options:
            if values.get(option) is not None:
                flag = "--" + option.replace("_", "-")
                raise ConfigError(f"{flag} {values[option]}: only --backend {name} reads it, "
                                  f"this run uses {backend}")
    return BackendOptions(backend, chosen)


@functools.cache
def backend_class(backend: str) -> type[Context]:
    """The Context class of a backend, importing its module (and runtime) on first use. An installed
    backend that cannot be imported, or is not a Context, is one error naming its distribution."""
    module_name, cls_name = BACKENDS[backend].split(":")
    if backend not in ORIGIN:
        return getattr(importlib.import_module(module_name), cls_name)
    where = f"backend '{backend}' ({ORIGIN[backend]}: {BACKENDS[backend]})"
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise BackendError(f"{where}: cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Context)):
        raise BackendError(f"{where}: is not a subclass of harness.backends.base.Context")
    return cls


def run_options(options: BackendOptions) -> BackendOptions:
    """The context options of one run, completed once by the backend (Context.run_options), so
    every context of the run, also in prefetch workers, shares what it decides."""
    _check_known(options.backend)
    return backend_class(options.backend).run_options(options)
