"""Expected failures: each carries one message naming the file, subgraph or option at fault.

The CLI prints these without a traceback and exits non-zero; anything else is a bug and keeps its
traceback.
"""

__all__ = ["HarnessError", "ConfigError", "WeightsError", "ManifestError", "BackendError", "NumericsError",
           "MemoryGuardTripped", "ToolkitError", "StorageError", "RunStopped", "Interrupted", "Terminated",
           "HungUp", "Quit"]


def one_line(text: str) -> str:
    """A message on one line: a runtime's multi-line error (onnxruntime's are) joined with ' | '."""
    return " | ".join(part.strip() for part in str(text).splitlines() if part.strip())


class HarnessError(Exception):
    """Base of every expected, user-facing failure. Its message is always one line."""

    exit_code = 2

    def __init__(self, message: str = ""):
        super().__init__(one_line(message))


class ConfigError(HarnessError):
    """A profile, option or CLI value is wrong."""


class WeightsError(HarnessError):
    """A weights file is missing, malformed, or disagrees with the model config."""


class ManifestError(HarnessError):
    """A partition manifest or one of its subgraph files is wrong."""


class BackendError(HarnessError):
    """A backend failed a lifecycle stage (load, init, run, release) or is unavailable here."""

    # What the runtime printed itself during the failing call (kept off the terminal; the run report keeps it).
    runtime_log: str = ""


class NumericsError(HarnessError):
    """A subgraph produced NaN or Inf."""

    exit_code = 3


class MemoryGuardTripped(HarnessError):
    """MemAvailable fell below the floor or swap grew over the limit."""

    exit_code = 4


class ToolkitError(HarnessError):
    """rknn-toolkit2 is absent, rejected a model or option, or placed an op off the NPU."""


class StorageError(HarnessError):
    """An output (report, image, artifact, history) cannot be written: names the user's path."""


class RunStopped(KeyboardInterrupt):
    """A run stopped by a signal. A KeyboardInterrupt, so pytest and every `finally` treat it as
    Ctrl-C: contexts are released and the partial report is written, marked with `status`."""

    status = "interrupted"
    exit_code = 130


class Interrupted(RunStopped):
    """SIGINT (Ctrl-C)."""


class Terminated(RunStopped):
    """SIGTERM (a CI runner's cancel, `kill`, a container stop)."""

    status = "terminated"
    exit_code = 143


class HungUp(Terminated):
    """SIGHUP: the terminal went away (an SSH connection to the board dropped). Stops like SIGTERM."""

    exit_code = 129


class Quit(Terminated):
    """SIGQUIT (Ctrl-\\ at a terminal). Stops like SIGTERM, without the core dump."""

    exit_code = 131
