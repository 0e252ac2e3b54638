# SPDX-License-Identifier: BSD-3-Clause
"""The answer: the best mode, how much faster, the command line, and why.

The candidates are the modes that keep to the budget (cache, flat, hybrid,
swap), and dram too when the data fits the budget. The best is the one with
the lowest median time over its successful runs; its speed is stated
against dram and swap as ratios of medians with bootstrap intervals
(hetmem.stats). When the runner-up's interval against the best still holds
1, the two are within the noise of this machine and the answer says so.
The reasons come from the pager's statistics of the best mode's runs (or of
the cache runs): the data against the budget, how many faults waited for a
read, how much each read brought, how often the data was read back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetmem.recommend import plan
from hetmem.recommend.runs import SMALL, Run, Setup
from hetmem.run import diagnose
from hetmem.sizes import format_size
from hetmem.stats import Ratio, ratio

# Faults that waited for no read: at least this share means the pager's
# read-ahead kept up with the command (streaming). Below it, demand reads
# smaller than this mean faults at scattered addresses (random access).
PREFETCHED = 0.8
STREAMING_READ = 64 << 10
# Memory outside the pager in cache mode (the budget bounds it too) from
# this share of the budget up is worth a reason: bwa mem's reads took 87 of
# 128 MiB, and its index cycled through the rest.
UNTIERED_SHARE = 0.25
# The modes that keep to the budget, in the order of the simplest to use
# first (a tie in time goes to the one that needs the least set-up).
BUDGET_MODES = ("cache", SMALL, "hybrid", "flat", "swap")


@dataclass
class Answer:
    """The recommendation; `mode` is None when no candidate ran."""

    mode: str | None
    command: str = ""
    vs_dram: Ratio | None = None  # t_dram / t_best: the fraction of dram speed
    vs_swap: Ratio | None = None  # t_swap / t_best: times faster than swap
    runner_up: tuple[str, Ratio] | None = None
    why: list[str] = field(default_factory=list)


def times(runs: Sequence[Run], mode: str) -> list[float]:
    return [r.seconds for r in runs if r.mode == mode and r.seconds is not None]


def failures(runs: Sequence[Run], mode: str) -> list[Run]:
    return [r for r in runs if r.mode == mode and not r.ok]


def _candidates(
    runs: Sequence[Run], modes: Sequence[str], fits_budget: bool, budget: int
) -> list[str]:
    """The modes that may be the answer: those that ran within the budget,
    and of them those that completed every round where any did. A mode that
    failed in some rounds is no answer beside one that never failed, however
    fast the rounds it survived (Linux swap, OOM-killed in 2 of 3 rounds,
    was otherwise recommended for its third)."""
    allowed = [m for m in BUDGET_MODES if m in modes and not _over_budget(runs, m, budget)]
    if fits_budget and "dram" in modes:
        allowed.insert(0, "dram")
    ran = [m for m in allowed if times(runs, m)]
    return [m for m in ran if not failures(runs, m)] or ran


def _over_budget(runs: Sequence[Run], mode: str, budget: int) -> bool:
    """Cache mode whose memory outside the pager alone exceeded the budget
    in a run: it did not keep to it (its small blocks ran in DRAM beside a
    cache of a few units), so its time is not one at this budget."""
    if mode != "cache":
        return False
    return max((_outside(r) for r in runs if r.mode == mode and r.ok), default=0) > budget


def _outside(run: Run) -> int:
    st = run.stats
    return plan.outside_bytes(
        st.get("pager_summary") or {}, int(st.get("max_rss_bytes") or 0), run.ok
    )


def _ranked(runs: Sequence[Run], cands: list[str]) -> list[str]:
    """Fastest median first; equal medians keep the simpler mode first."""
    return sorted(cands, key=lambda m: (statistics.median(times(runs, m)), cands.index(m)))


def decide(
    runs: Sequence[Run],
    modes: Sequence[str],
    setup: Setup,
    memory_bytes: int,
    fits_budget: bool,
) -> Answer:
    cands = _candidates(runs, modes, fits_budget, setup.budget)
    if not cands:
        return Answer(None, why=["no mode ran the command to the end; see the failures above"])
    order = _ranked(runs, cands)
    best = order[0]
    ans = Answer(best, setup.command_line(best))
    t_best = times(runs, best)
    if best != "dram" and times(runs, "dram"):
        ans.vs_dram = ratio(times(runs, "dram"), t_best)
    if best != "swap" and times(runs, "swap"):
        ans.vs_swap = ratio(times(runs, "swap"), t_best)
    if len(order) > 1:
        ans.runner_up = (order[1], ratio(times(runs, order[1]), t_best))
    ans.why = reasons(runs, best, setup.budget, memory_bytes, fits_budget)
    ans.why += comparisons(runs, modes, ans, setup.budget)
    return ans


def _cache_summary(runs: Sequence[Run]) -> dict[str, Any]:
    """The pager summary of the last good cache-mode run: there every large
    allocation goes through the pager, so its counters describe the
    command's whole access pattern against the budget (in flat and hybrid
    the pager sees only the sites placed on the storage tier). Else that of
    a cache run stopped at the time limit: what it did by then is why it
    was slow."""
    seen = [r for r in runs if r.mode in ("cache", SMALL) and r.stats.get("pager_summary")]
    good = [r for r in seen if r.ok] or [r for r in seen if r.kind == "timeout"]
    return dict(good[-1].stats["pager_summary"]) if good else {}


def reasons(
    runs: Sequence[Run],
    best: str,
    budget: int,
    memory_bytes: int,
    fits_budget: bool,
) -> list[str]:
    """Why the best mode is best: the data against the budget, the access
    pattern the pager saw in cache mode, what the placement did."""
    out: list[str] = []
    if fits_budget:
        out.append("the data fits the budget, so nothing needs a slower tier")
    elif memory_bytes:
        out.append(
            f"the command's memory ({format_size(memory_bytes)}) is "
            f"{memory_bytes / budget:.1f}x the budget ({format_size(budget)})"
        )
    summ = _cache_summary(runs)
    outside = int(summ.get("outside_peak_bytes") or 0)
    if not fits_budget and outside >= UNTIERED_SHARE * budget:
        out.append(
            f"in cache mode memory hetmem does not tier (allocations below --threshold, "
            f"static data, stacks) took {format_size(outside)} of the budget, and the pager's "
            "cache got only what it left"
        )
    out += _pattern(summ)
    placed = _placement(runs, best)
    if placed:
        out.append(placed)
    return out


def _pattern(s: dict[str, Any]) -> list[str]:
    """The access pattern in cache mode, in the user's words."""
    hits = s.get("faults_without_read")
    per_read = s.get("bytes_per_demand_fetch")
    back = s.get("times_read_back")
    out = []
    if hits is not None:
        if hits >= PREFETCHED:
            kind = "in cache mode the pager's read-ahead kept up: streaming access"
        elif per_read is not None and per_read < STREAMING_READ:
            kind = "in cache mode faults waited for small reads: random access"
        else:
            kind = "in cache mode many faults waited for a read"
        detail = f"{hits:.0%} of faults waited for no read"
        if per_read is not None:
            detail += f"; {format_size(per_read)} per demand read"
        out.append(f"{kind} ({detail})")
    if back is not None and back >= 1.5:
        out.append(
            f"in cache mode the pager read the data back {back:.1f} times: "
            "the data cycles through a cache smaller than it"
        )
        blocks = diagnose.blocks_line(s)
        if blocks:
            out.append(f"in cache mode it {blocks}")
    return out


def _placement(runs: Sequence[Run], best: str) -> str:
    if best not in ("flat", "hybrid"):
        return ""
    good = [r for r in runs if r.mode == best and r.ok and r.stats.get("placement")]
    if not good:
        return ""
    pl = good[-1].stats["placement"]
    sites = pl.get("sites") or []
    fast = sum(1 for s in sites if s.get("tier") == 0)
    text = f"the placement keeps {fast} of {len(sites)} allocation sites in DRAM"
    if best == "hybrid" and pl.get("pager_budget"):
        text += f", and the pager caches the rest in {format_size(pl['pager_budget'])}"
    return text


def comparisons(runs: Sequence[Run], modes: Sequence[str], ans: Answer, budget: int) -> list[str]:
    """What happened to the others: failures and near ties."""
    out = []
    if ans.runner_up and not ans.runner_up[1].significant_above_one:
        m, r = ans.runner_up
        out.append(f"{m} is within this machine's noise of {ans.mode} ({r.text()} slower)")
    for m in modes:
        bad = failures(runs, m)
        if bad and not times(runs, m):
            out.append(f"{m} could not run it: {bad[-1].error}")
        elif bad:
            n = len(bad) + len(times(runs, m))
            why = "no mode completed every run" if m == ans.mode else "not an answer"
            out.append(f"{m} failed in {len(bad)} of {n} runs ({bad[-1].error}): {why}")
    if "cache" in modes and _over_budget(runs, "cache", budget):
        peak = max(_outside(r) for r in runs if r.mode == "cache" and r.ok)
        out.append(
            f"cache is not a candidate: memory outside its pager reached {format_size(peak)}, "
            f"more than the budget ({format_size(budget)}), so it did not keep to it"
        )
    return out
