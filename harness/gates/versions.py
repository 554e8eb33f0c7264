"""Versions as the board and the files give them, read exactly (the stack preflight and the smoke tier).

Grammar: the text, stripped, is
    empty                          unreadable: the source exists and names no version
    [v]<PEP 440 version>           packaging.version (pre-releases 2.5.0b0, 2.3.0rc1; two-part 2.5)
    [v]<PEP 440 release>-<label>   a git-describe or dirty build (2.3.0-dirty, v2.5.0-3-gabc): read as the
                                   local version <release>+<label>, so it sorts after the release, never equal
    anything else                  not a version: shown, never matched nor ordered

A version is a *release* only with exactly three parts and no pre, post, dev or local part: only a
release can match a combination of toolkit/compatibility.toml (whose rows name x.y.z releases), so
2.5, 2.3.0rc1 and 2.3.0-dirty are never taken for 2.5.0 or 2.3.0. Ordering is PEP 440's: 2.5 is not
older than 2.5.0 (they sort equal), 2.3.0rc1 is older than 2.3.0, 2.3.0-dirty is not.
Every version is shown as the text read, never as a normalised form.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

__all__ = ["Read", "read", "shown"]

_DESCRIBED = re.compile(r"(\d+(?:\.\d+)*)-([A-Za-z0-9][A-Za-z0-9.-]*)")


@dataclass(frozen=True)
class Read:
    text: str                   # as given, stripped
    version: Version | None     # None: empty or not a version

    @property
    def release(self) -> bool:
        v = self.version
        return (v is not None and len(v.release) == 3 and v.pre is None and v.post is None
                and v.dev is None and v.local is None)

    def older_than(self, other: Read) -> bool:
        return self.version is not None and other.version is not None and self.version < other.version

    def kind(self) -> str:
        """'' for a release; else what the text is, for a reader who sees it beside a release."""
        v = self.version
        if not self.text:
            return "unreadable: an empty version"
        if v is None:
            return "not a version"
        if v.local is not None:
            return "a local or dirty build"
        if v.pre is not None or v.dev is not None:
            return "a pre-release"
        if v.post is not None:
            return "a post-release"
        return "" if len(v.release) == 3 else f"{len(v.release)} parts, not x.y.z"


def read(text: str) -> Read:
    text = text.strip()
    bare = text[1:] if text[:1] in ("v", "V") else text
    try:
        return Read(text, Version(bare) if bare else None)
    except InvalidVersion:
        pass
    match = _DESCRIBED.fullmatch(bare)
    if match:
        try:
            return Read(text, Version(f"{match[1]}+{match[2].replace('-', '.')}"))
        except InvalidVersion:
            pass
    return Read(text, None)


def shown(text: str | None, absent: str) -> str:
    """The version as read, with what it is when not a release; `absent` when there is no source at all."""
    if text is None:
        return absent
    what = read(text)
    if not what.text:
        return "unreadable (an empty version)"
    kind = what.kind()
    return f"{what.text} ({kind})" if kind else what.text
