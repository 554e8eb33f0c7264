"""Memory sizes as the options and data files write them ("1.5GiB", "16MiB", "512M", 4096)."""
from __future__ import annotations

import math
import numbers
import re

from .errors import ConfigError

__all__ = ["parse_size"]


# Memory is counted in pages, and /proc/meminfo's "kB" already means KiB: every suffix is binary,
# so "512M", "512MB" and "512MiB" are all 512 * 2^20 bytes.
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(b|[kmgt](?:i?b)?)?\s*$", re.IGNORECASE)


def parse_size(value) -> int:
    """Parse "1.5GiB", "16MiB", "512M", "4096" or an int number of bytes into bytes.

    K/M/G/T with or without "B"/"iB" are all binary multiples. Raises ConfigError naming the value.
    """
    if isinstance(value, bool):
        raise ConfigError(f"memory size {value!r}: expected bytes or a string like '16MiB'")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ConfigError(f"memory size {value!r}: must not be negative")
        return int(value)
    if not isinstance(value, str):
        # A bare float (e.g. 1.5 from TOML) has no unit and would silently mean 1 byte.
        raise ConfigError(f"memory size {value!r}: expected bytes (int) or a string like '1.5GiB'")
    match = _SIZE_RE.match(value)
    if not match:
        raise ConfigError(f"memory size {value!r}: expected a number with an optional unit "
                          "(B, K/KiB, M/MiB, G/GiB, T/TiB), e.g. '1.5GiB' or '16MiB'")
    number, unit = match.groups()
    if unit is None and "." in number:
        # "1.5" on a command line means GiB to a person and 2 bytes to a parser: make them say.
        raise ConfigError(f"memory size {value!r}: a fractional size needs a unit, e.g. '{number}GiB'")
    size = float(number) * _UNITS[(unit or "b")[0].lower()]
    if not math.isfinite(size):
        raise ConfigError(f"memory size {value!r}: not a finite size")
    return int(round(size))
