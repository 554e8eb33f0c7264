"""Whether a LAVA session may run the gates here: `python -m harness.lab.node BOARD_PROFILE` prints why
not and exits 1 when the profile gates on the NPU (`require_npu`) and this machine has no usable NPU
device node; the session then raises that as the lab's failure (lava-test-raise), not the change's.
A profile that does not require the NPU (the lab test's host) passes."""
from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import HarnessError
from ..core.schema import read_toml
from ..gates.smoke import npu_node_problem

__all__ = ["node_problem", "main"]


def node_problem(profile: Path, root: Path = Path("/")) -> str | None:
    """Why the gates of `profile` cannot run on this machine's NPU, or None."""
    suite = read_toml(profile, "board profile").get("suite", {})
    if not suite.get("require_npu", False):
        return None
    problem = npu_node_problem(root)
    return f"{profile} requires the NPU: {problem}" if problem else None


def main(argv: list[str] | None = None) -> int:
    [profile] = sys.argv[1:] if argv is None else argv
    try:
        problem = node_problem(Path(profile))
    except HarnessError as exc:      # an unreadable profile: printed for the session to raise
        problem = str(exc)
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
