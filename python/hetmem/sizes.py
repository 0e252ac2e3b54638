# SPDX-License-Identifier: BSD-3-Clause
"""Sizes as users write them: 4096, 64K, 512MiB, 4G, 1.5GB.

K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024 (what numactl and Slurm users
mean); kB/MB/GB/TB are powers of 1000. The C runtime parses the same way
(hm_parse_size); tests check both agree.

Budgets (--fast-budget of every verb) go through parse_budget: more than
zero and at most this machine's memory, unless HETMEM_BUDGET_OVER_RAM=1 (the
same option the runtime reads) says a larger one is meant.
"""

from __future__ import annotations

import math
import os
import re

from hetmem.errors import UsageError, shown

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
# ASCII only (re.ASCII): the C parser's isspace() knows no other blanks
_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$", re.ASCII)


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in text, or UsageError naming `what`."""
    m = _RE.match(text)
    unit = m.group(2) if m else ""
    # Case does not matter: "kb" and "KB" are decimal, "k" and "KiB" binary.
    key = unit.upper()
    if not m or key not in _UNITS:
        raise UsageError(f"{what}: '{shown(text)}' is not a size (examples: 4096, 64K, 512MiB, 4G)")
    value = float(m.group(1)) * _UNITS[key]
    # checked first: int() of an infinite value (a number of 309 digits) raises
    if not math.isfinite(value) or value >= 2**64:
        raise UsageError(f"{what}: '{shown(text)}' is too large")
    if value != int(value):
        raise UsageError(f"{what}: '{shown(text)}' is not a whole number of bytes")
    return int(value)


OVER_RAM_ENV = "HETMEM_BUDGET_OVER_RAM"
_YES = ("1", "true", "on", "yes")
_NO = ("0", "false", "off", "no", "")


_DURATION_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_duration_ms(text: str, what: str = "duration") -> float:
    """Milliseconds in text ('10ms', '500us', '1.5s'; a bare number is ms),
    or UsageError naming `what`. HETMEM_SAMPLE_PERIOD takes the same units."""
    m = _RE.match(text)
    unit = (m.group(2) if m else "").lower() or "ms"
    if not m or unit not in _DURATION_MS:
        raise UsageError(f"{what}: '{shown(text)}' is not a duration (examples: 10ms, 500us, 2s)")
    value = float(m.group(1)) * _DURATION_MS[unit]
    if not math.isfinite(value):
        raise UsageError(f"{what}: '{shown(text)}' is too large")
    return value


# Wall-clock limits of whole runs (hetmem recommend --time): seconds and up,
# a bare number in seconds. Kept apart from parse_duration_ms, whose units
# the C runtime's sampling period shares.
_SECONDS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def parse_seconds(text: str, what: str = "duration") -> float:
    """Seconds in text ('90', '90s', '5min', '1.5h'; a bare number is
    seconds), more than zero; UsageError naming `what` otherwise."""
    m = _RE.match(text)
    unit = (m.group(2) if m else "").lower() or "s"
    if not m or unit not in _SECONDS:
        raise UsageError(f"{what}: '{shown(text)}' is not a duration (examples: 90s, 5min, 1h)")
    value = float(m.group(1)) * _SECONDS[unit]
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what}: '{shown(text)}' must be more than zero and finite")
    return value


def parse_percent(text: str, what: str) -> float:
    """The number in '25%' (strictly between 0 and 100), or UsageError
    naming `what`."""
    num = text.strip().removesuffix("%")
    try:
        pct = float(num)
    except ValueError:
        pct = -1.0
    if num == text.strip() or not 0 < pct < 100:
        raise UsageError(
            f"{what}: '{shown(text)}' is not a percentage between 0% and 100% (e.g. 25%,50%)"
        )
    return pct


def budget_over_ram_allowed() -> bool:
    """HETMEM_BUDGET_OVER_RAM read as the runtime reads a boolean option."""
    text = os.environ.get(OVER_RAM_ENV, "").lower()  # no blanks, as the runtime reads it
    if text in _YES:
        return True
    if text in _NO:
        return False
    raise UsageError(f"{OVER_RAM_ENV}='{shown(text)}' is not a boolean (1 or 0)")


def machine_memory() -> int:
    """Physical memory of this machine in bytes (MemTotal); 0 if unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def parse_budget(text: str, flag: str = "--fast-budget", minimum: int = 1) -> int:
    """A fast-tier budget: a size of at least `minimum` bytes and at most this
    machine's memory unless HETMEM_BUDGET_OVER_RAM=1. Every verb that takes a
    budget checks it here, before any work starts: a typo such as 1T must
    not reach the runtime, whose metadata grows with the budget."""
    budget = parse_size(text, flag)
    if budget < minimum:
        least = "more than 0" if minimum <= 1 else f"at least {format_size(minimum)}"
        raise UsageError(f"{flag} {shown(text)}: the budget must be {least}")
    ram = machine_memory()
    if ram and budget > ram and not budget_over_ram_allowed():
        raise UsageError(
            f"{flag} {shown(text)}: more than this machine's memory ({format_size(ram)}); "
            f"set {OVER_RAM_ENV}=1 if that is meant"
        )
    return budget


def budget_or_env(flag_value: str | None) -> int:
    """--fast-budget, else $HETMEM_FAST_BUDGET, checked as every verb checks a
    budget (parse_budget); 0 when neither is given."""
    if flag_value is not None:
        return parse_budget(flag_value, "--fast-budget")
    env = os.environ.get("HETMEM_FAST_BUDGET")
    return parse_budget(env, "HETMEM_FAST_BUDGET") if env else 0


def parse_positive(text: str, flag: str, most: int = 0, why: str = "") -> int:
    """A size of at least one byte and, when `most` is given, at most that
    (`why` says what the limit is)."""
    n = parse_size(text, flag)
    if n < 1:
        raise UsageError(f"{flag} {shown(text)}: must be more than 0")
    if most and n > most:
        raise UsageError(f"{flag} {shown(text)}: at most {format_size(most)} ({why})")
    return n


def parse_array_size(text: str, flag: str = "--array-size") -> int:
    """A STREAM array size: STREAM maps three such arrays, so each may take at
    most a quarter of this machine's memory."""
    ram = machine_memory()
    return parse_positive(text, flag, ram // 4, "a quarter of this machine's memory: 3 arrays")


def parse_probe_sizes(storage_size: str | None, array_size: str | None) -> tuple[int, int]:
    """--storage-size and --array-size of the probe and its reference bench, in
    bytes; 0 for one not given (the probe's default)."""
    size = array = 0
    if storage_size is not None:
        size = parse_positive(storage_size, "--storage-size")
    if array_size is not None:
        array = parse_array_size(array_size, "--array-size")
    return size, array


def format_num(x: float) -> str:
    """Three significant digits, never "1e+05": 0.0123, 4.56, 789; from
    1000 on, whole with thousands separators (100,000)."""
    text = f"{x:.3g}"
    return f"{x:,.0f}" if "e+" in text else text


def format_size(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units, three significant digits."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            if unit == "B":
                return f"{int(value)} B"
            # 1000-1023 of a unit: .3g would print "1e+03"
            return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def size_arg(n: int) -> str:
    """n bytes as the shortest exact size an option takes back (parse_size):
    2G, 260M, 4K, else the bytes."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)
