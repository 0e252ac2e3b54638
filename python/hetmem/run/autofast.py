# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run --auto-fast MIN[:MAX]`: memkind's autohbw without a profile.

Allocations of MIN..MAX bytes that match no placement site go to the
fastest memory tier (within --fast-budget); the rest stay where the
command's memory comes from anyway. Without --placement, the placement
is made here from the machine's tiers: the fastest memory tier first, the
DRAM local to the CPUs last. The interposer reads the range from
HETMEM_AUTO_FAST (src/preload/route.c, _hm_pl_place_want).
"""

from __future__ import annotations

import time
from typing import Any

from hetmem import tiers as inv
from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.placement import fileformat as pf
from hetmem.sizes import parse_size


def parse(text: str) -> tuple[int, int]:
    """'MIN' or 'MIN:MAX' (sizes) -> (min, max); UsageError otherwise."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo = parse_size(lo_text, "--auto-fast")
        hi = parse_size(hi_text, "--auto-fast") if sep else (1 << 64) - 1
    except UsageError:
        raise UsageError(
            f"--auto-fast '{text}': expected MIN or MIN:MAX, sizes such as 1M:64M"
        ) from None
    if lo <= 0 or hi < lo:
        raise UsageError(f"--auto-fast '{text}': needs 0 < MIN <= MAX")
    return lo, hi


def env_value(rng: tuple[int, int]) -> str:
    return f"{rng[0]}:{rng[1]}"


def _memory_tiers() -> list[dict[str, Any]]:
    try:
        data = inv.inventory(no_storage=True)
    except Exception as exc:  # the native library's one-line message
        raise EnvironmentProblem(f"--auto-fast: cannot list this machine's tiers: {exc}") from None
    # memory tiers with memory (an empty node cannot serve)
    mem = [t for t in data["tiers"] if t.get("numa_node") is not None]
    mem = [t for t in mem if t.get("kind") != "storage"]
    mem = [t for t in mem if t.get("capacity_bytes") != 0]
    if not mem:
        raise EnvironmentProblem("--auto-fast: this machine reports no memory tier")
    return sorted(mem, key=lambda t: t["rank"])


def machine_placement() -> tuple[pf.Placement, list[str]]:
    """Tiers [fastest, local DRAM] (one tier when they are the same node)."""
    mem = _memory_tiers()
    fast = mem[0]
    local = next((t for t in mem if t.get("cpus")), mem[-1])
    chosen = [fast] if local is fast else [fast, local]
    tiers = [
        pf.PTier(name=t["name"], kind=t["kind"], numa_node=int(t["numa_node"]),
                 capacity_bytes=0, bandwidth_gbs=0.0, latency_ns=0.0)
        for t in chosen
    ]  # fmt: skip
    notes = []
    if len(tiers) == 1:
        notes.append(
            f"the fastest tier, {fast['name']} ({fast['kind']}), is where the command's memory "
            "comes from anyway: --auto-fast changes nothing here"
        )
    meta = {"kind": "hetmem-placement", "schema_version": 1, "generated_by": "hetmem run "
            "--auto-fast", "created_unix": int(time.time()), "binary": 0}  # fmt: skip
    return pf.Placement(meta=meta, tiers=tiers, modules=[], sites=[]), notes
