"""One cached virtualenv per rknn-toolkit2 version, outside the checkout.

The toolkit pins numpy<=1.26.4 and onnx<=1.18 and imports torch, so it cannot share the suite's
environment: it runs in its own interpreter (harness/toolkit/remote/worker.py). The environments live under
${ANIMA_TOOLKIT_HOME:-~/.cache/anima-npu/toolkit}/<version>, so every worktree and CI run on one machine
shares them. A stamp holding the digest of the version's pins (toolkit/versions.toml) marks a finished
environment; a missing or different stamp means "create again".
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from ..core.errors import ConfigError, ToolkitError
from ..core.locks import file_lock

__all__ = ["default_version", "toolkit_python", "main"]

VERSIONS_FILE = Path(__file__).resolve().parents[2] / "toolkit" / "versions.toml"
STAMP = ".anima-pins.sha256"


def _table() -> dict:
    with open(VERSIONS_FILE, "rb") as fh:
        return tomllib.load(fh)


def default_version() -> str:
    return _table()["default"]


def known_versions() -> list[str]:
    return sorted(_table()["versions"])


def _pins(version: str) -> dict:
    versions = _table()["versions"]
    if version not in versions:
        raise ConfigError(f"toolkit version '{version}' is not in {VERSIONS_FILE.name} "
                          f"(known: {', '.join(sorted(versions))})")
    return versions[version]


def toolkit_home() -> Path:
    home = os.environ.get("ANIMA_TOOLKIT_HOME")
    return Path(home) if home else Path.home() / ".cache" / "anima-npu" / "toolkit"


def env_dir(version: str) -> Path:
    return toolkit_home() / version


def pins_digest(version: str) -> str:
    """Digest of what the environment is built from: its pins and the interpreter's version."""
    pins = _pins(version)
    text = json.dumps({"toolkit": pins["toolkit"], "requirements": pins["requirements"],
                       "python": sys.version_info[:2]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _is_current(version: str) -> bool:
    stamp = env_dir(version) / STAMP
    return (env_dir(version) / "bin" / "python").exists() and stamp.exists() \
        and stamp.read_text().strip() == pins_digest(version)


def toolkit_python(version: str) -> Path:
    """The interpreter of a finished, current environment; a ToolkitError saying how to make one."""
    _pins(version)
    if not _is_current(version):
        raise ToolkitError(f"toolkit environment {version} is absent or out of date at "
                           f"{env_dir(version)}: create it with bin/toolkit-env {version}")
    return env_dir(version) / "bin" / "python"


def _say(text: str) -> None:
    print(f"[toolkit-env] {text}", file=sys.stderr, flush=True)


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        tail = [line for line in done.stdout.splitlines() if line.strip()][-12:]
        print("\n".join(tail), file=sys.stderr)
        raise ToolkitError(f"toolkit environment: `pip install {' '.join(args)}` failed "
                           f"(exit {done.returncode}; pip's last lines above)")


def create_env(version: str) -> Path:
    """Build (or re-build when its pins changed) the environment of `version`; return its python.

    A lock serialises two worktrees creating the same version; the stamp is written last, so an
    interrupted build is never taken for a finished one.
    """
    pins = _pins(version)
    target = env_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{version}.lock"):
        if _is_current(version):
            return target / "bin" / "python"
        _say(f"creating rknn-toolkit2 {version} in {target} (first use or pins changed; a few minutes)")
        shutil.rmtree(target, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(target)], check=True)
        python = target / "bin" / "python"
        # The dependencies first, with torch pinned to the CPU build on disk; then the toolkit without
        # its own dependency list, whose torch<=2.4 would pull a CUDA build (see versions.toml).
        _pip(python, *pins["requirements"])
        _pip(python, "--no-deps", pins["toolkit"])
        probe = subprocess.run([str(python), "-c", "from rknn.api import RKNN"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if probe.returncode != 0:
            last = [line for line in probe.stdout.splitlines() if line.strip()][-1:]
            raise ToolkitError(f"toolkit environment {version}: `from rknn.api import RKNN` fails: "
                               f"{last[0] if last else 'exit ' + str(probe.returncode)}")
        (target / STAMP).write_text(pins_digest(version) + "\n")
        _say(f"rknn-toolkit2 {version} ready: {python}")
        return python


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        # --all: every version in versions.toml (bin/test builds them all, so no toolkit test skips).
        versions = known_versions() if args == ["--all"] else [args[0] if args else default_version()]
        for version in versions:
            print(create_env(version))
    except (ConfigError, ToolkitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
