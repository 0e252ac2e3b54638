"""Sizes as users write them: 4096, 64K, 512MiB, 4G, 1.5GB.

K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024 (what numactl and Slurm users
mean); kB/MB/GB/TB are powers of 1000. The C runtime parses the same way
(hm_parse_size); tests check both agree.
"""

from __future__ import annotations

import re

from hetmem.errors import UsageError

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TIB": 1 << 40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in text, or UsageError naming `what`."""
    m = _RE.match(text)
    unit = m.group(2) if m else ""
    # Case does not matter: "kb" and "KB" are decimal, "k" and "KiB" binary.
    key = unit.upper()
    if not m or key not in _UNITS:
        raise UsageError(f"{what}: '{text}' is not a size (examples: 4096, 64K, 512MiB, 4G)")
    value = float(m.group(1)) * _UNITS[key]
    if value != int(value):
        raise UsageError(f"{what}: '{text}' is not a whole number of bytes")
    if value >= 2**64:
        raise UsageError(f"{what}: '{text}' is too large")
    return int(value)


def format_size(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units, three significant digits."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
