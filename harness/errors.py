"""Expected failures: each carries one message naming the file, subgraph or option at fault.

The CLI prints these without a traceback and exits non-zero; anything else is a bug and keeps its
traceback.
"""

__all__ = ["HarnessError", "ConfigError", "WeightsError", "ManifestError", "BackendError",
           "NumericsError", "MemoryGuardTripped", "ToolkitError"]


class HarnessError(Exception):
    """Base of every expected, user-facing failure."""

    exit_code = 2


class ConfigError(HarnessError):
    """A profile, option or CLI value is wrong."""


class WeightsError(HarnessError):
    """A weights file is missing, malformed, or disagrees with the model config."""


class ManifestError(HarnessError):
    """A subgraph manifest or one of its model files is wrong."""


class BackendError(HarnessError):
    """A backend failed a lifecycle stage (load, init, run, release) or is unavailable here."""


class NumericsError(HarnessError):
    """A subgraph produced NaN or Inf."""

    exit_code = 3


class MemoryGuardTripped(HarnessError):
    """MemAvailable fell below the floor or swap grew over the limit."""

    exit_code = 4


class ToolkitError(HarnessError):
    """rknn-toolkit2 is absent, rejected a model or option, or placed an op off the NPU."""
