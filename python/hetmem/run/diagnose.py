# SPDX-License-Identifier: BSD-3-Clause
"""Why a cache-mode run was slow, from the pager's counters.

`summarize` turns the merged pager statistics of a run into the figures a
user asks about first: how often a fault had to wait for a read, how many
bytes each such read brought in, and how many times the data the program
touched was read back from the storage tier. `blocks_line` names the
blocks read back most, and `hint` adds the one line that says what to
change when the budget is far below the working set. Both go
into `--stats` (`pager_summary`) and, when the pager read the data back at
least twice, onto stderr at the end of the run.
"""

from __future__ import annotations

import math
from typing import Any

from hetmem.sizes import format_size

# Reading the working set back this many times or more is worth the
# figures on stderr and, when the cache could not hold it, the hint (a
# program that writes its data and reads it once more out of core reads it
# back once: that is the tier doing its job; --stats has the figures).
REREAD_HINT = 2.0
# Slack for the pager's own memory (tables, buffers) and rounding in the
# suggested budget, on top of the working set itself.
BUDGET_SLACK = 1.05
# The command's memory outside the pager (HETMEM_BUDGET_PROCESS) taking
# this share of the budget or more is worth a line: the cache was that much
# smaller.
OUTSIDE_HINT = 0.25
# blocks_line: the block lengths it names, and the least share of the bytes
# read that makes one worth naming
BLOCKS_SHOWN = 3
BLOCKS_SHARE = 0.05


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def summarize(pager: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary of a run's merged pager statistics (None without them)."""
    if not pager or not isinstance(pager.get("counters"), dict):
        return None
    c = pager["counters"]
    faults = int(c.get("faults", 0))
    fetches = int(c.get("fetches", 0))
    footprint = int(c.get("footprint_bytes", 0))
    read = int(c.get("bytes_read", 0))
    # the budget's mean over the run where it moved (hybrid mode shares the
    # fast budget with the sites pinned in DRAM), else the one configured
    budget = int(c.get("budget_mean_bytes") or (pager.get("config") or {}).get("dram_budget", 0))
    cache = budget - int(c.get("own_bytes", 0))
    return {
        "schema_version": 1,
        "faults": faults,
        "faults_without_read": _ratio(faults - fetches, faults) if faults >= fetches else None,
        "bytes_per_demand_fetch": _ratio(int(c.get("demand_bytes_read", 0)), fetches),
        "footprint_bytes": footprint,
        "bytes_read": read,
        "times_read_back": _ratio(read, footprint),
        "cache_bytes": max(cache, 0),
        # the most the rest of one process held (HETMEM_BUDGET_PROCESS: the
        # cache got the budget less this), None from a pager that did not measure
        "outside_peak_bytes": int(c["other_peak_bytes"]) if "other_peak_bytes" in c else None,
        "prefetch_accuracy": _ratio(
            int(c.get("prefetch_used", 0)),
            int(c.get("prefetch_used", 0)) + int(c.get("prefetch_wasted", 0)),
        ),
        "bytes_written": int(c.get("bytes_written", 0)),
        # eviction batches whose write-backs a fault waited for (None from
        # a pager before stats version 6)
        "writeback_stalls": int(c["writeback_stalls"]) if "writeback_stalls" in c else None,
        # processes whose pager held data (the figures above are their sums)
        "processes": max(1, int(pager.get("data_processes") or pager.get("processes") or 1)),
        "read_back": [_read_back(e) for e in pager.get("read_back") or []],
    }


def _read_back(e: dict[str, Any]) -> dict[str, Any]:
    """A `read_back` entry with how many times its blocks were read, each."""
    whole = int(e["blocks"]) * int(e["block_bytes"])
    return {**e, "times_read": _ratio(int(e["bytes_read"]), whole)}


def suggested_budget(footprint: int, own: int) -> int:
    """A budget that holds footprint bytes: with the pager's own memory and
    some slack, rounded up to a tenth of a GiB (or to a MiB below 1 GiB)."""
    need = (footprint + own) * BUDGET_SLACK
    step = (1 << 30) / 10 if need >= (1 << 30) else (1 << 20)
    return int(math.ceil(need / step) * step)


def _budget_text(n: int) -> str:
    """4G-style, as --fast-budget takes it."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}G".replace(".0G", "G")
    return f"{math.ceil(n / (1 << 20))}M"


def _reread(summary: dict[str, Any]) -> tuple[float, int] | None:
    """(times read back, footprint) when the pager read the data touched
    back at least REREAD_HINT times because its cache could not hold it."""
    times = summary.get("times_read_back") or 0.0
    foot = summary["footprint_bytes"]
    if times < REREAD_HINT or foot <= summary["cache_bytes"]:
        return None
    return times, foot


def _holding_budget(summary: dict[str, Any], own_bytes: int, outside: bool) -> int:
    """The --fast-budget (per process) that holds each process's share of
    the working set, with the pager's own memory and, when `outside`, the
    most the rest of a process held beside the pager (in cache mode the
    cache gets the budget less that: GROMACS at 16 MiB held 18.2 MiB
    outside it, and a hint without it suggested the 16 MiB it ran with).
    Hybrid's pager counts the pinned sites as outside: not added there."""
    n = max(1, int(summary.get("processes") or 1))
    rest = int(summary.get("outside_peak_bytes") or 0) if outside else 0
    return suggested_budget(summary["footprint_bytes"] // n, own_bytes // n + rest)


def hint(
    summary: dict[str, Any] | None, own_bytes: int, placed_budget: int | None = None
) -> str | None:
    """One line when the run read its working set back at least
    REREAD_HINT times because the cache could not hold it. placed_budget:
    hybrid mode's fast budget, of which the placement's fast-tier sites
    held all but the pager's cache; more budget is then not the answer
    (the advice fills it with sites again), a smaller placement is."""
    if not summary or (reread := _reread(summary)) is None:
        return None
    times, foot = reread
    budget = _holding_budget(summary, own_bytes, outside=placed_budget is None)
    head = f"the command read its {format_size(foot)} working set back {times:.1f} times; "
    if placed_budget is None:
        per = ", per process" if summary.get("processes", 1) > 1 else ""
        return head + f"a budget of {_budget_text(budget)} would hold it (--fast-budget{per})"
    left = (
        f"the placement's fast-tier sites left the pager {format_size(summary['cache_bytes'])} "
        f"of the {format_size(placed_budget)} budget"
    )
    # not "use cache mode": XSBench at 25% re-read its table 4.7 times in
    # hybrid mode behind a 39 MiB cache and still ran 2.4x faster than in
    # cache mode with the whole budget; only a measurement tells
    which = "; which is faster depends on the program: `hetmem recommend` runs both"
    if budget < placed_budget:
        smaller = _budget_text(placed_budget - budget)
        return (
            head + left + f"; a placement advised for --fast-budget {smaller} would leave it "
            f"{_budget_text(budget)}, or --mode cache gives it the whole budget" + which
        )
    return head + left + "; --mode cache gives it the whole budget" + which


def flat_hint(summary: dict[str, Any] | None) -> str | None:
    """One line when flat mode's pager, whose cache is its least by design,
    read the storage-tier sites' data back at least REREAD_HINT times: the
    placement put data there that the program used more than its profile
    showed (the refs sampler sees a page once per interval, however often a
    sweep touches it). Quantum ESPRESSO at 160 MiB: flat read its 112 MiB
    back 1015-1020 times through 6.75 MiB (122-130 s); hybrid ran 7.3 s,
    cache 8.9 s, dram 5.7 s (conv_thr 1e-2, 2 ranks)."""
    if not summary or (reread := _reread(summary)) is None:
        return None
    times, foot = reread
    return (
        f"the storage-tier sites' {format_size(foot)} were read back {times:.1f} times through "
        f"flat mode's {format_size(summary['cache_bytes'])} pager cache: the program used them "
        "more than its profile showed; --mode hybrid gives the pager what the fast-tier sites "
        "leave of the budget (`hetmem recommend` measures both)"
    )


def outside(
    summary: dict[str, Any] | None, budget: int, threshold: int | None, small_blocks: bool = False
) -> str | None:
    """One line when the command's memory outside the pager (heap blocks
    below the threshold, static data, stacks) took at least OUTSIDE_HINT of
    the fast budget, which the cache then did not get. A lower threshold
    pages only blocks of its size and up: bwa mem's 87 MiB outside were
    reads of a few hundred bytes each, which swap paged (18 s at 128 MiB,
    against cache mode stopped after 630 s) and --small-blocks pages too
    (17.8-18.1 s), so the line names all three."""
    peak = (summary or {}).get("outside_peak_bytes") or 0
    if not budget or peak < OUTSIDE_HINT * budget:
        return None
    thr = f"the {format_size(threshold)} threshold" if threshold else "the threshold"
    text = (
        f"the command's own memory outside the pager (allocations below {thr}, "
        f"static data, stacks) reached {format_size(peak)} of the {format_size(budget)} "
        "budget, and the pager's cache got only what it left"
    )
    if small_blocks:
        text += "; with --small-blocks that is the C library's own blocks, stacks and static data"
    else:
        text += "; --small-blocks pages the blocks below the threshold too (up to 1 MiB)"
    if threshold and threshold > 64 << 10:
        lower = max(threshold // 4, 64 << 10) >> 10
        text += (
            f", --threshold {lower}K only those of {lower} KiB and up (`hetmem profile` says "
            "how much they hold)"
        )
    return text + ", swap mode any page (`hetmem recommend` compares)"


def line(summary: dict[str, Any] | None) -> str | None:
    """The end-of-run figures, when the pager read the data touched back at
    least REREAD_HINT times."""
    if not summary or (summary.get("times_read_back") or 0.0) < REREAD_HINT:
        return None
    parts = [f"the pager read {format_size(summary['bytes_read'])}"]
    if summary["times_read_back"] is not None:
        parts.append(f"{summary['times_read_back']:.2f}x the data touched")
    if summary["faults_without_read"] is not None:
        parts.append(f"{summary['faults_without_read']:.0%} of faults waited for no read")
    if summary["bytes_per_demand_fetch"] is not None:
        parts.append(f"{format_size(summary['bytes_per_demand_fetch'])} per demand read")
    if summary.get("bytes_written"):
        wrote = f"wrote back {format_size(summary['bytes_written'])}"
        if summary.get("writeback_stalls"):
            n = summary["writeback_stalls"]
            batches = "batch" if n == 1 else "batches"
            wrote += f" (a fault or a prefetch waited for {n} eviction {batches} to write it)"
        parts.append(wrote)
    return "; ".join(parts)


def blocks_line(summary: dict[str, Any] | None) -> str | None:
    """Which blocks the pager read back most (the lengths that took at least
    BLOCKS_SHARE of what it read, at most BLOCKS_SHOWN), said when `line`
    is: the sum alone does not say whether a few arrays cycled through the
    cache or everything did (LAMMPS at 25%: 3 blocks of 11.5 MiB were read
    205 times each, 7.4 of 17.7 GB; its neighbour list, 155 blocks of 512
    KiB, 55 times)."""
    if not summary or not summary.get("bytes_read"):
        return None
    total = summary["bytes_read"]
    top = [e for e in summary.get("read_back") or [] if e["bytes_read"] >= BLOCKS_SHARE * total]
    if not top:
        return None
    parts = []
    for e in top[:BLOCKS_SHOWN]:
        n, size = e["blocks"], format_size(e["block_bytes"])
        what = (
            f"{n} blocks of {size}, {e['times_read']:.0f} times each"
            if n > 1
            else (f"a block of {size}, {e['times_read']:.0f} times")
        )
        parts.append(f"{what} ({format_size(e['bytes_read'])})")
    return "read back most: " + "; ".join(parts)
