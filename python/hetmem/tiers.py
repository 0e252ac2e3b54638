# SPDX-License-Identifier: BSD-3-Clause
"""The tier inventory: libhetmem's discovery, plus cached probe measurements.

libhetmem finds the tiers (NUMA nodes from sysfs, HMAT, memory_tiering, DAX
provenance, GPU memory, hwloc on the live machine; storage directories with
statfs) and ranks them by ratings. When `hetmem probe` has measured this
machine, its bandwidths outrank the ratings: a measured tier is placed by
what it delivered, and "probe" joins its sources.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Sequence
from typing import Any

from hetmem._native import Context
from hetmem.run import cache

SCHEMA_VERSION = 1


def _storage_args(storage: Sequence[str] | None, no_storage: bool) -> tuple[Any, int]:
    """The (array, count) pair hm_tiers_json takes: NULL/0 means the default
    directory, an empty non-NULL array means no storage tier at all."""
    if no_storage:
        return (ctypes.c_char_p * 1)(), 0
    if not storage:
        return None, 0
    arr = (ctypes.c_char_p * len(storage))(*(s.encode() for s in storage))
    return arr, len(storage)


def inventory(
    fsroot: str | None = None,
    storage: Sequence[str] | None = None,
    no_storage: bool = False,
    use_probe: bool = True,
) -> dict[str, Any]:
    """The inventory as a dict ({"schema_version": 1, "tiers": [...]}).

    fsroot None means the HETMEM_FSROOT option (itself "/"). Cached probe
    results are merged only for the live machine: they were measured here.
    """
    arr, n = _storage_args(storage, no_storage)
    with Context(fsroot) as ctx:
        data: dict[str, Any] = ctx.call_json("hm_tiers_json", arr, n)
    if use_probe and data.get("fsroot", "/").strip("/") == "":
        probe = cache.load("probe")
        if probe is not None:
            merge_probe(data, probe)
    return data


def _positive(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def measured_gbs(entry: dict[str, Any]) -> float | None:
    """The bandwidth a probe entry measured (GB/s): the best STREAM triad for
    memory (`best.triad_gbs`, else the highest over the `stream` sweep),
    sequential O_DIRECT reads for storage."""
    best = entry.get("best")
    if isinstance(best, dict) and _positive(best.get("triad_gbs")):
        return _positive(best.get("triad_gbs"))
    stream = entry.get("stream")
    if isinstance(stream, dict):
        stream = [stream]
    if isinstance(stream, list):
        bws = [_positive(s.get("triad_gbs")) for s in stream if isinstance(s, dict)]
        good = [b for b in bws if b]
        if good:
            return max(good)
    return _positive(entry.get("seq_read_gbs"))


def _probe_key(entry: dict[str, Any]) -> str | None:
    """The inventory name a probe entry describes. Storage entries are matched
    by resolved path, so /tmp/../var/tmp and /var/tmp are one tier."""
    path = entry.get("path")
    if entry.get("kind") == "storage" and isinstance(path, str):
        return f"storage:{os.path.realpath(path)}"
    name = entry.get("name")
    return name if isinstance(name, str) else None


def merge_probe(data: dict[str, Any], probe: dict[str, Any]) -> None:
    """Attaches probe measurements to the tiers they name and re-ranks.

    A probe file of another schema is ignored (and said so in the result):
    an old cache must not break the inventory.
    """
    if probe.get("schema_version") != 1 or not isinstance(probe.get("tiers"), list):
        data["probe"] = {"used": False, "reason": "cached probe result has another schema"}
        return
    by_name: dict[str, dict[str, Any]] = {}
    for t in probe["tiers"]:
        key = _probe_key(t) if isinstance(t, dict) else None
        if key:
            by_name[key] = t
    used = 0
    for tier in data["tiers"]:
        entry = by_name.get(tier["name"])
        if entry is None:
            continue
        tier["measured"] = {k: v for k, v in entry.items() if k not in ("name", "kind")}
        bw = measured_gbs(entry)
        if bw is not None:
            tier["measured_gbs"] = bw
        if "probe" not in tier["source"]:
            tier["source"].append("probe")
        used += 1
    data["probe"] = {"used": used > 0, "tiers_measured": used}
    if used:
        rerank(data)


def rerank(data: dict[str, Any]) -> None:
    """Ranks measured tiers by measured bandwidth, within memory and within
    storage. Unmeasured tiers keep their places; measured ones are reordered
    among the places measured tiers held, since ratings and measurements are
    not in comparable units."""
    tiers = data["tiers"]
    memory = [t for t in tiers if t["kind"] != "storage"]
    storage = [t for t in tiers if t["kind"] == "storage"]
    any_measured = False
    all_memory_measured = bool(memory)
    for group in (memory, storage):
        slots = [i for i, t in enumerate(group) if "measured_gbs" in t]
        ordered = sorted((group[i] for i in slots), key=lambda t: -t["measured_gbs"])
        for i, t in zip(slots, ordered, strict=True):
            group[i] = t
            t["ranked_by"] = "probe"
            any_measured = True
        if group is memory and len(slots) != len(memory):
            all_memory_measured = False
    data["tiers"] = memory + storage
    for rank, t in enumerate(data["tiers"]):
        t["rank"] = rank
    if any_measured:
        base = data.get("ranking", "kind")
        data["ranking"] = "probe" if all_memory_measured else f"probe,{base}"
