# SPDX-License-Identifier: BSD-3-Clause
"""The end of a run that went through the interposer (cache, flat and
hybrid modes): every process's statistics (one JSON line each) merged into
the run's --stats, and what the user hears of them on stderr.
"""

from __future__ import annotations

import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from hetmem.output import run_note as note
from hetmem.run import diagnose
from hetmem.run.config import RunConfig
from hetmem.sizes import format_size

# block lengths kept in the merged `read_back` (each pager lists 8)
READ_BACK_KEPT = 8


def _read_interposer_stats(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with suppress(OSError), open(path) as f:
        for line in f:
            with suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
    return out


def _sum_numbers(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise sum of the top-level integers (peaks: maximum); other
    fields are taken from the first."""
    total: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                total.setdefault(k, v)
            elif k.startswith("peak") or k in ("table_capacity", "threshold", "other_peak_bytes"):
                total[k] = max(total.get(k, v), v)
            else:
                total[k] = total.get(k, 0) + v
    return total


def _merge_pagers(pagers: list[dict[str, Any]]) -> dict[str, Any]:
    """One pager object for the run: the first process's configuration and
    features, counters summed over every process that opened a pager."""
    merged = dict(pagers[0])
    counters = [p["counters"] for p in pagers if isinstance(p.get("counters"), dict)]
    if counters:
        merged["counters"] = _sum_numbers(counters)
        # the cache the command had: that of the processes whose pager held
        # data (at least 1/16 of the most any held); a helper that opened
        # one for a block or two (Open MPI's orted) would add a whole idle
        # budget to it
        top = max(int(c.get("footprint_bytes") or 0) for c in counters)
        used = [c for c in counters if int(c.get("footprint_bytes") or 0) * 16 >= top] or counters
        for k in ("budget_mean_bytes", "budget_low_bytes", "budget_bytes", "own_bytes"):
            if all(k in c for c in used):
                merged["counters"][k] = sum(int(c[k]) for c in used)
    else:
        merged = _sum_numbers(pagers)
    merged["read_back"] = _merge_read_back(pagers)
    merged["processes"] = len(pagers)
    # the processes whose pager held data: the budget is per process, so a
    # budget to suggest divides their footprint among them
    merged["data_processes"] = len(used) if counters else len(pagers)
    return merged


def _merge_read_back(pagers: list[dict[str, Any]]) -> list[dict[str, int]]:
    """The pagers' `read_back` entries summed by block length over the
    processes, most read first (the pager lists its 8 lengths read most)."""
    by_len: dict[int, dict[str, int]] = {}
    for p in pagers:
        for e in p.get("read_back") or []:
            n = int(e["block_bytes"])
            m = by_len.setdefault(n, {"block_bytes": n, "blocks": 0, "bytes_read": 0})
            m["blocks"] += int(e["blocks"])
            m["bytes_read"] += int(e["bytes_read"])
    return sorted(by_len.values(), key=lambda m: -m["bytes_read"])[:READ_BACK_KEPT]


def _merge_procs(stats: dict[str, Any], procs: list[dict[str, Any]]) -> None:
    """The pagers' and interposers' counters of every process, summed into
    stats (None where no process had one)."""
    pagers = [q["pager"] for q in procs if isinstance(q.get("pager"), dict)]
    stats["pager"] = _merge_pagers(pagers) if pagers else None
    parts = [q["interposer"] for q in procs if isinstance(q.get("interposer"), dict)]
    stats["interposer"] = _sum_numbers(parts) if procs else None


def _note_tiers(stats: dict[str, Any], procs: list[dict[str, Any]], cfg: RunConfig) -> None:
    """The storage-full counters and the pager's figures into stats, and
    what the user hears of them at the end of the run."""
    stats["storage_full"] = _merge_storage_full(procs)
    _note_storage_full(stats["storage_full"], cfg)
    _note_pager(stats, cfg)
    _note_statics(procs)
    _note_forks(stats.get("interposer") or {})
    _note_direct_reads(stats.get("interposer") or {})


def _note_direct_reads(ip: dict[str, Any]) -> None:
    """Direct (O_DIRECT) reads that the interposer read through a bounce
    buffer (dio.c): safe from eviction, at the cost of one copy each."""
    reads = int(ip.get("direct_reads_bounced") or 0)
    if reads:
        note(
            f"{reads} direct (O_DIRECT) read(s) into the pager's memory went through a bounce "
            f"buffer, {format_size(int(ip.get('direct_bytes_bounced') or 0))} copied in, so that "
            "an eviction could not lose what the device wrote"
        )


def _note_forks(ip: dict[str, Any]) -> None:
    """What children forked without exec got of their parent's blocks in
    the pager (fork.c): a copy in plain memory, outside the budget, or
    none (beyond HETMEM_FORK_COPY or half the memory available)."""
    copies, without = int(ip.get("fork_copies") or 0), int(ip.get("forks_without_copy") or 0)
    if copies:
        note(
            f"{copies} child(ren) forked without exec got a copy of their parent's blocks in "
            f"the pager ({format_size(int(ip.get('fork_copied_bytes') or 0))} in all, the "
            f"largest {format_size(int(ip.get('fork_copy_largest_bytes') or 0))}), in plain "
            "memory outside the budget"
        )
    if without:
        note(
            f"{without} child(ren) forked without exec got no copy of their parent's blocks in "
            "the pager (beyond HETMEM_FORK_COPY or half the memory available): a touch of one "
            "kills the child, with a message"
        )


def _note_statics(procs: list[dict[str, Any]]) -> None:
    """Once per program and segment: large static data that stayed in plain
    memory (all of it, or the part written before main), with its size; one
    line per reason (the interposer's statistics list every segment)."""
    said: set[tuple[str, str, str]] = set()
    by_why: dict[str, list[str]] = {}
    for q in procs:
        for st in q.get("statics") or ():
            key = (str(st.get("module")), str(st.get("segment")), str(st.get("symbol") or ""))
            why, size, managed = (
                st.get("why"),
                int(st.get("bytes", 0)),
                int(st.get("managed_bytes", 0)),
            )
            if not why or key in said:
                continue
            said.add(key)
            part = f", {format_size(managed)} of it on a slower tier" if managed else ""
            label = f"{static_label(st)} ({format_size(size)}{part})"
            by_why.setdefault(str(why), []).append(label)
    for why, items in by_why.items():
        if len(items) == 1:
            note(f"{items[0]} is not managed: {why}")
        else:
            note(f"{len(items)} static data areas are not managed ({why}): {'; '.join(items)}")


def static_label(st: dict[str, Any]) -> str:
    """A static entry of the interposer's statistics as the user reads it:
    'static array a of stream', or 'static data of stream (.bss)'."""
    mod = os.path.basename(str(st.get("module")))
    if st.get("symbol"):
        return f"static array {st['symbol']} of {mod}"
    return f"static data of {mod} ({'.bss' if st.get('segment') == 'bss' else '.data'})"


def _note_pager(stats: dict[str, Any], cfg: RunConfig) -> None:
    """The pager's end-of-run figures (in --stats as pager_summary; on
    stderr, in cache and hybrid modes, if the working set was read back
    several times) and the hint when the cache was far below it. Flat mode's
    pager cache is small by design: it says only when that cache re-read
    the storage-tier sites (diagnose.flat_hint)."""
    pager = stats.get("pager")
    summary = diagnose.summarize(pager)
    stats["pager_summary"] = summary
    if cfg.mode == "flat":
        flat = diagnose.flat_hint(summary)
        if flat:
            note(flat)
    if cfg.mode not in ("cache", "hybrid"):
        return
    text = diagnose.line(summary)
    if text:
        note(text)
        blocks = diagnose.blocks_line(summary)
        if blocks:
            note(blocks)
    own = int(((pager or {}).get("counters") or {}).get("own_bytes", 0))
    tip = diagnose.hint(summary, own, cfg.budget if cfg.mode == "hybrid" else None)
    if tip:
        note(tip)
    # hybrid's pager counts tier 0's blocks as outside memory too: cache
    # only; blocks a full storage tier left in DRAM have their own note
    outside = diagnose.outside(summary, cfg.budget, stats.get("threshold"), cfg.small_blocks)
    if outside and cfg.mode == "cache" and not (stats.get("storage_full") or {}).get("fallbacks"):
        note(outside)


def _merge_storage_full(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The storage-full counters of every process (the interposer's
    HETMEM_STORAGE_FULL policy): the policy of the first, counts summed."""
    full = [q["storage_full"] for q in procs if isinstance(q.get("storage_full"), dict)]
    return _sum_numbers(full) if full else None


def _note_storage_full(full: dict[str, Any] | None, cfg: RunConfig) -> None:
    """The end-of-run word on a storage tier that could not back large
    allocations: how many failed (policy error) or how far DRAM went beyond
    the fast budget (policy fallback; an upper bound, as frees of those
    blocks are not tracked)."""
    if not full:
        return
    if full.get("refusals"):
        note(
            f"{full['refusals']} large allocation(s) ({format_size(full['refused_bytes'])}) "
            f"failed: storage tier {cfg.storage} could not back them; free space there, "
            "choose another --storage, or --storage-full fallback"
        )
    if full.get("fallbacks"):
        note(
            f"{full['fallbacks']} large allocation(s) came from DRAM because storage tier "
            f"{cfg.storage} could not back them: up to {format_size(full['fallback_bytes'])} "
            f"beyond the fast budget of {format_size(cfg.budget)}"
        )
