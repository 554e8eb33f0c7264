"""The stack preflight: before any npu test on the board, the four versions that must fit together, read
without opening a runtime context, judged against toolkit/compatibility.toml.

    converted_with   the rknn-toolkit2 version each .rknn file of the partition records (its own description)
    wheel            the rknn-toolkit-lite2 wheel installed (package metadata)
    librknnrt        the runtime library the wheel will open (telemetry: the version string in its bytes)
    driver           the RKNPU kernel driver (telemetry: debugfs / procfs)

Versions are read exactly (harness/gates/versions.py: 2.5, 2.3.0rc1, 2.3.0-dirty are shown as written and
match no x.y.z row; an empty one is "unreadable", not absent). A stack on a "bad" combination fails in one
line naming the versions the combination names, what happens on it and what to install; a librknnrt older
than the converting toolkit is refused as the smoke tier's version check refuses it (smoke.version_problem);
a partition whose files two toolkit versions built, or whose files disagree with the manifest's conversion
record, fails. The project's own target stack passes as "target"; one the table does not know as "unknown".
Field reports behind the table: airockchip/rknn-toolkit2#281 and #254 ("Invalid RKNN model version 6"),
jaylfc/taOS#42 (a 2.3.0 file segfaults on librknnrt 2.3.2).
"""
from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..core.errors import ConfigError, HarnessError
from ..core.schema import Field, check_table, non_empty_str, one_of, read_toml
from ..model.config import REPO_ROOT
from ..partition.declared import rknn_version
from ..partition.manifest import load_manifest
from ..results.telemetry import board_identity
from .smoke import version_problem
from .versions import read, shown

__all__ = ["COMPATIBILITY", "load_table", "preflight", "read_stack"]

COMPATIBILITY = REPO_ROOT / "toolkit" / "compatibility.toml"
COMPONENTS = {"converted_with": "rknn-toolkit2", "wheel": "rknn-toolkit-lite2", "librknnrt": "librknnrt",
              "driver": "RKNPU driver"}


@dataclass
class Stack:
    """The board's versions; `converted_with` maps each toolkit version to the .rknn files recording it."""
    converted_with: dict[str, list[str]] = field(default_factory=dict)
    wheel: str | None = None
    librknnrt: str | None = None
    driver: str | None = None
    recorded: str | None = None     # the manifest's conversion record (toolkit_version), None without one

    def line(self) -> str:
        files = "; ".join(f"rknn-toolkit2 {shown(v, '')} ({len(f)} .rknn file(s))"
                          for v, f in sorted(self.converted_with.items()))
        return (f"{files or 'no .rknn file in the partition'}; "
                f"rknn-toolkit-lite2 {shown(self.wheel, 'not installed')}, "
                f"librknnrt {shown(self.librknnrt, 'not found')}, RKNPU driver {shown(self.driver, 'not readable')}")


@dataclass(frozen=True)
class Verdict:
    kind: str           # "bad", "good", "target" or "unknown"
    line: str


def _wheel_version() -> str | None:
    try:
        return importlib.metadata.version("rknn-toolkit-lite2")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_stack(partition: Path | None, root: str | Path = "/") -> Stack:
    """The versions under `root` (the suite's --telemetry-root) and of `partition`'s .rknn files. Raises
    ManifestError naming the file when a .rknn file has no model description."""
    identity = board_identity(root)
    stack = Stack(wheel=_wheel_version(), librknnrt=identity.get("runtime_lib"), driver=identity.get("npu_driver"))
    if partition is not None:
        manifest = load_manifest(partition)
        stack.recorded = (manifest.conversion or {}).get("toolkit_version")
        for entry in manifest.entries():
            path = manifest.path_of(entry)
            if path.suffix == ".rknn":
                stack.converted_with.setdefault(rknn_version(path), []).append(path.name)
    return stack


# ---------------------------------------------------------------- the table

def _specifiers(value) -> bool:
    values = value if isinstance(value, list) else [value]
    try:
        return bool(values) and all(isinstance(v, str) and SpecifierSet(v) is not None for v in values)
    except InvalidSpecifier:
        return False


_SPEC = Field(_specifiers, "a version specifier such as '==2.3.0' or a list of them", required=False)
_COMBINATION = {**{name: _SPEC for name in COMPONENTS}, "verdict": Field(one_of("bad", "good", "target"),
                                                                       "'bad', 'good' or 'target'"),
                "symptom": Field(non_empty_str, "what happens on this stack", required=False),
                "install": Field(non_empty_str, "what to install instead", required=False),
                "source": Field(lambda v: non_empty_str(v) or (isinstance(v, list) and bool(v)
                                                               and all(map(non_empty_str, v))),
                                "the report's address, or a list of them"),
                "reported": Field(non_empty_str, "what the source reports")}


def load_table(path: Path = COMPATIBILITY) -> list[dict]:
    """The combinations of the compatibility table, checked; ConfigError naming the file and the entry."""
    data = read_toml(path, "compatibility table")
    check_table(data, {"format": Field(one_of(1), "1"), "combination": Field(lambda v: isinstance(v, list),
                                                                            "a list of [[combination]] tables")},
                str(path))
    for i, row in enumerate(data["combination"], 1):
        where = f"{path}: combination {i}"
        check_table(row, _COMBINATION, where)
        if not any(name in row for name in COMPONENTS):
            raise ConfigError(f"{where}: names no version ({', '.join(COMPONENTS)})")
        if row["verdict"] == "bad" and not ("symptom" in row and "install" in row):
            raise ConfigError(f"{where}: a bad combination must say its 'symptom' and what to 'install'")
    return data["combination"]


def _matches(row: dict, versions: dict) -> bool:
    """Every version the row names is a release (x.y.z, nothing after) its specifiers hold."""
    for name in COMPONENTS:
        if name not in row:
            continue
        version = read(versions.get(name) or "")
        specs = row[name] if isinstance(row[name], list) else [row[name]]
        if version.version is None or not version.release \
                or not any(version.version in SpecifierSet(s) for s in specs):
            return False
    return True


def _sources(row: dict) -> str:
    sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
    return ", ".join(re.sub(r"^https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)$", r"\1#\2", s)
                     for s in sources)


def _named(row: dict, versions: dict) -> str:
    return " with ".join(f"{COMPONENTS[n]} {versions[n]}" for n in COMPONENTS if n in row)


def _partition_problem(stack: Stack) -> str | None:
    """Two toolkit versions in one partition, or files the manifest's conversion record does not describe."""
    used = sorted(stack.converted_with.items())
    if len(used) > 1:
        return ("the partition was built by " + str(len(used)) + " rknn-toolkit2 versions: "
                + ", ".join(f"{v} ({len(f)} .rknn file(s), e.g. {f[0]})" for v, f in used)
                + ": convert it again with one toolkit")
    if used and stack.recorded is not None and used[0][0] != stack.recorded:
        version, files = used[0]
        return (f"the manifest's conversion record says rknn-toolkit2 {stack.recorded} but its .rknn files were "
                f"built by {version} ({len(files)} file(s), e.g. {files[0]}): convert the partition again")
    return None


def _kind(table: list[dict], versions: dict) -> str | None:
    for row in table:
        if _matches(row, versions) and row["verdict"] == "bad":
            return None
    kinds = [r["verdict"] for r in table if r["verdict"] != "bad" and _matches(r, versions)]
    return "good" if "good" in kinds else "target" if "target" in kinds else "unknown"


def judge(stack: Stack, table: list[dict]) -> Verdict:
    """The stack against the table, each toolkit version of the partition in turn: a mixed or mis-recorded
    partition, the first bad combination, else good when every toolkit version is on a good combination,
    target when on the project's target stack, else unknown."""
    problem = _partition_problem(stack)
    if problem:
        return Verdict("bad", f"stack preflight: {problem}")
    kinds = []
    versions_used: list[tuple[str | None, list[str]]] = sorted(stack.converted_with.items()) or [(None, [])]
    for converted_with, files in versions_used:
        versions = {"converted_with": converted_with, "wheel": stack.wheel, "librknnrt": stack.librknnrt,
                    "driver": stack.driver}
        which = f" ({len(files)} .rknn file(s), e.g. {files[0]})" if files else ""
        older = version_problem({"api": stack.librknnrt}, converted_with) if stack.librknnrt else None
        if older:
            return Verdict("bad", f"stack preflight: {older}")
        for row in table:
            if _matches(row, versions) and row["verdict"] == "bad":
                return Verdict("bad", f"stack preflight: {_named(row, versions)}{which} is a known-bad combination: "
                                      f"{row['symptom']} ({_sources(row)}); install {row['install']}")
        kinds.append(_kind(table, versions))
    if kinds and all(k == "good" for k in kinds):
        return Verdict("good", f"stack preflight: a known-good combination: {stack.line()}")
    if kinds and all(k in ("good", "target") for k in kinds):
        return Verdict("target", f"stack preflight: the project's target stack (built and simulated here, no "
                                 f"board report yet; passes): {stack.line()}")
    return Verdict("unknown", f"stack preflight: combination unknown to {COMPATIBILITY.relative_to(REPO_ROOT)} "
                              f"(passes): {stack.line()}")


def preflight(partition: Path | None, root: str | Path = "/", table_path: Path = COMPATIBILITY) -> Verdict:
    """read_stack + judge; a HarnessError (a .rknn file without its description, a bad table) is a bad verdict."""
    try:
        return judge(read_stack(partition, root), load_table(table_path))
    except HarnessError as exc:
        return Verdict("bad", f"stack preflight: {exc}")
