# SPDX-License-Identifier: BSD-3-Clause
"""The placement advisor: which tier serves each allocation site.

hetmem.placement.problem states the model and builds it from the merged
profiles, hetmem.placement.solve solves it; here: the placement file that
`hetmem advise` writes, the reasons it gives for the sites, and the
solver benchmark (`hetmem advise --benchmark`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetmem._numpy import np
from hetmem.placement import cachefit
from hetmem.placement.fileformat import Placement, PModule, PSite, PTier
from hetmem.placement.limits import DEFAULT_TIME_LIMIT_S, MAX_ILP_SITES
from hetmem.placement.problem import (
    Problem,
    Solution,
    Tier,
    build_problem,
    ranks_on_nodes,
    synthetic_problem,
)
from hetmem.placement.profile import Merged, Module
from hetmem.placement.sitenames import raw_frame
from hetmem.placement.sites import static_name
from hetmem.placement.solve import solve, solve_greedy, solve_ilp
from hetmem.placement.split import Split, split_sites
from hetmem.placement.symbolize import Symbolizer
from hetmem.sizes import format_num, format_size

# The pager's least cache per process when a site is on the storage tier:
# 16 fetch units of 256 KiB and 4 MiB for its tables (src/preload/init.c,
# hm__place_floor). It comes out of the fast budget, so that the DRAM
# sites and the pager's cache together keep to it; the interposer enforces
# the same limit on tier 0. A placement with split sites streams the rest
# of their blocks through the pager: it keeps a larger cache, a quarter of
# the process's fast budget up to 32 MiB (STREAM_FLOOR_MAX; init.c says
# why), taken from the room the heads would get, never from whole sites.
PAGER_FLOOR = 8 << 20
STREAM_FLOOR_MAX = 32 << 20


def stream_floor(budget: int) -> int:
    """The pager's least cache beside split sites, for a process with this
    fast budget (at least PAGER_FLOOR)."""
    return max(PAGER_FLOOR, min(STREAM_FLOOR_MAX, budget // 4))


# --------------------------------------------------------------------------
# Explanations


def explain(
    problem: Problem, sol: Solution, tiers: Sequence[Tier], site: int, density_rank: int
) -> str:
    last = problem.ntiers - 1
    t = int(sol.assign[site])
    cost = problem.cost[site]
    if site in problem.fixed:
        return f"no sampled accesses: left on the slowest tier ({tiers[last].name})"
    best = int(np.argmin(cost))
    saved = cost[last] - cost[t]
    head = (
        f"on {tiers[t].name}: saves {format_num(saved)} s against {tiers[last].name}"
        f" (accesses-per-byte rank {density_rank})"
    )
    if problem.reuse is not None and problem.reuse[site] > 0:
        head += (
            f"; {format_num(problem.reuse[site])} pages touched again within milliseconds, each "
            "priced at a tier's latency (a random gather, not a sweep)"
        )
    if t == best:
        usage = _tightest(problem, sol, site, t)
        return head + ("; fits" + usage if usage else "; its tier has no capacity limit")
    # A faster tier would have been better: say what filled it.
    reasons = []
    for b in range(t):
        if cost[b] >= cost[t]:
            continue
        g, used, cap, mine = _binding(problem, sol, site, b)
        if g is None:
            continue
        grp = problem.groups[g]
        others = grp.sites[(sol.assign[grp.sites] == b) & (grp.sites != site)]
        dens = (cost[last] - cost[b]) / max(1, mine)
        denser = [
            int(o)
            for o in others
            if (problem.cost[o, last] - problem.cost[o, b])
            / max(1, int(grp.live[grp.sites == o][0]))
            >= dens
        ]
        if mine > cap:
            reasons.append(
                f"{tiers[b].name} would save {format_num(cost[t] - cost[b])} s more but the site "
                f"alone needs {format_size(mine)}, more than its {format_size(cap)}"
            )
            continue
        reasons.append(
            f"{tiers[b].name} would save {format_num(cost[t] - cost[b])} s more but is full "
            f"at this "
            f"site's busiest time ({format_size(used)} of {format_size(cap)} used, it needs "
            f"{format_size(mine)}); {len(denser)} of the {len(others)} sites there gain more "
            "per byte"
        )
    return head + ("; " + "; ".join(reasons) if reasons else "")


def _tightest(problem: Problem, sol: Solution, site: int, t: int) -> str:
    worst = None
    for grp in problem.groups:
        cap = grp.caps[t]
        if cap is None or site not in grp.sites:
            continue
        used = int(grp.live[sol.assign[grp.sites] == t].sum())
        if worst is None or used / max(cap, 1) > worst[0] / max(worst[1], 1):
            worst = (used, cap)
    if worst is None:
        return ""
    return (
        f": at its busiest time the tier holds {format_size(worst[0])} of {format_size(worst[1])}"
    )


def _binding(
    problem: Problem, sol: Solution, site: int, t: int
) -> tuple[int | None, int, int, int]:
    """The interval where moving site to tier t overflows it the most."""
    best: tuple[int | None, int, int, int] = (None, 0, 0, 0)
    over = -math.inf
    for g, grp in enumerate(problem.groups):
        cap = grp.caps[t]
        if cap is None:
            continue
        hit = np.nonzero(grp.sites == site)[0]
        if hit.size == 0:
            continue
        mine = int(grp.live[hit[0]])
        used = int(grp.live[sol.assign[grp.sites] == t].sum())
        if used + mine - cap > over:
            over = used + mine - cap
            best = (g, used, cap, mine)
    return best if over > 0 else (None, 0, 0, 0)


# --------------------------------------------------------------------------
# From profiles to a placement


@dataclass
class Advice:
    placement: Placement
    solution: Solution
    problem: Problem
    tiers: list[Tier]
    notes: list[str]
    order: list[int]  # merged-site indices, largest benefit first
    time_slowest_s: float
    time_placed_s: float
    time_fastest_s: float


def advise(
    merged: Merged,
    tiers: Sequence[Tier],
    fast_budget: int,
    ranks_per_node: int | None = None,
    solver: str = "auto",
    max_ilp_sites: int = MAX_ILP_SITES,
    time_limit: float = DEFAULT_TIME_LIMIT_S,
    symbolizer: Symbolizer | None = None,
    explain_top: int = 0,
    profile_names: Sequence[str] = (),
    split: bool = True,
    for_mode: str = "flat",
) -> Advice:
    """The placement for `hetmem run --mode for_mode` (flat or hybrid: in
    hybrid mode the pager's cache is counted, hetmem.placement.cachefit)."""
    tiers = list(tiers)
    b = _budget_problem(merged, tiers, fast_budget, ranks_per_node)
    problem = b.problem
    sol = solve(problem, solver, max_ilp_sites, time_limit)
    fit = None
    splits = (
        split_sites(problem, sol, merged, _hold(b.reserve, b.per_proc, b.ranks)) if split else {}
    )
    if for_mode == "hybrid" and b.reserve and len(tiers) == 2:
        base = b.per_proc - merged.outside_peak_bytes
        fit = cachefit.refine(problem, merged, sol.assign, splits, base, PAGER_FLOOR)
        sol.assign, splits = fit.assign, fit.splits
    hold = _hold(b.reserve, b.per_proc, b.ranks) if splits else 0
    if hold:
        problem.notes.append(
            f"{format_size(hold)} more of it is left to the pager's cache, which the rest of "
            "the split sites streams through"
        )
    if fit is not None:
        problem.notes.extend(_fit_notes(fit))
    last = len(tiers) - 1
    idx = np.arange(problem.nsites)
    benefit = problem.cost[:, last] - problem.cost[idx, sol.assign]
    for i, sp in splits.items():
        benefit[i] += sp.saved_s
    placed_s = sol.objective - sum(sp.saved_s for sp in splits.values())
    if fit is not None:
        placed_s = fit.priced_after_s
    order = sorted(
        range(problem.nsites), key=lambda i: (-benefit[i], -merged.sites[i].est_accesses)
    )
    explainer = _Explainer(problem, sol, tiers, explain_top, merged, splits, fit)
    modules, sites = _placed_sites(merged, sol, benefit, order, symbolizer, explainer, splits)
    t_slow = float(problem.cost[:, last].sum())
    t_fast = float(problem.cost.min(axis=1).sum())
    meta = _placement_meta(merged, sol, b.whole_budget, max(b.ranks), profile_names, t_slow, t_fast)
    _advice_meta(meta, b, hold, t_slow, placed_s, splits, for_mode, fit)
    ptiers = _placement_tiers(tiers, b.sites_budget, max(b.ranks))
    placement = Placement(meta=meta, tiers=ptiers, modules=modules.modules, sites=sites)
    return Advice(
        placement=placement,
        solution=sol,
        problem=problem,
        tiers=tiers,
        notes=list(problem.notes),
        order=order,
        time_slowest_s=t_slow,
        time_placed_s=placed_s,
        time_fastest_s=t_fast,
    )


@dataclass
class _Budget:
    """The fast budget divided: the pager's reserve, the rest of the process
    (outside) and what is left to the sites, per node."""

    problem: Problem
    ranks: list[int]
    reserve: int
    outside: int
    whole_budget: int

    @property
    def sites_budget(self) -> int:
        return self.whole_budget - self.reserve - self.outside

    @property
    def per_proc(self) -> int:
        return self.whole_budget // max(max(self.ranks), 1)


def _budget_problem(
    merged: Merged, tiers: list[Tier], fast_budget: int, ranks_per_node: int | None
) -> _Budget:
    """The assignment problem on what the budget leaves the sites, with
    notes saying what was set aside and why."""
    ranks = ranks_on_nodes(merged, ranks_per_node)
    reserve = pager_reserve(tiers, fast_budget, max(ranks))
    outside = outside_reserve(merged, fast_budget - reserve, max(ranks)) if reserve else 0
    sites_budget = fast_budget - reserve - outside
    problem = build_problem(merged, tiers, sites_budget, ranks_per_node)
    if reserve:
        problem.notes.append(
            f"{format_size(reserve)} of the fast budget per node is left to the pager's cache "
            "in front of the storage tier's sites"
        )
    if outside:
        problem.notes.append(
            f"{format_size(outside)} of it is left to the rest of the process "
            f"({format_size(merged.outside_peak_bytes)} at most outside its sites in the "
            "profile: small blocks, libraries' data, stacks), which the budget bounds too"
        )
    if len(tiers) > 1 and sites_budget // max(max(ranks), 1) <= 0:
        problem.notes.append(
            "the fast budget leaves no room for allocation sites after the pager's cache and "
            "the rest of the process: every site goes to a slower tier, as in cache mode; "
            "give a larger --fast-budget or run in cache mode"
        )
    return _Budget(
        problem=problem, ranks=ranks, reserve=reserve, outside=outside, whole_budget=fast_budget
    )


def _placed_sites(
    merged: Merged,
    sol: Solution,
    benefit: np.ndarray,
    order: list[int],
    symbolizer: Symbolizer | None,
    explainer: _Explainer,
    splits: dict[int, Split],
) -> tuple[_ModuleTable, list[PSite]]:
    """The placement's sites, largest benefit first, named and explained."""
    modules = _ModuleTable()
    modules.index(merged.profiles[0].binary)
    if symbolizer is not None:
        symbolizer.prefetch(
            (m.key, m.path, m.build_id, off) for s in merged.sites for m, off in s.frames
        )
    sites = [
        _placed_site(merged, i, sol, benefit, modules, symbolizer, explainer.reason(rank_i, i))
        for rank_i, i in enumerate(order)
    ]
    for ps in sites:
        if ps.id in splits:
            ps.split_bytes = splits[ps.id].bytes
    return modules, sites


def _advice_meta(
    meta: dict[str, Any],
    b: _Budget,
    hold: int,
    t_slow: float,
    placed_s: float,
    splits: dict[int, Split],
    for_mode: str,
    fit: cachefit.Refined | None,
) -> None:
    """What the advisor set aside and predicted, in the placement's meta."""
    meta["pager_reserve_node_bytes"] = b.reserve + hold
    meta["outside_node_bytes"] = b.outside
    meta["predicted_time_saved_s"] = t_slow - placed_s
    meta["predicted_time_s"] = placed_s
    if splits:
        meta["split_sites"] = len(splits)
    meta["for_mode"] = for_mode
    if fit is not None:
        meta["cache_model"] = "hybrid: the pager's cache counted (hetmem.placement.cachefit)"
        meta["predicted_time_cache_mode_s"] = fit.priced_cache_s
        meta["pager_cache_mean_bytes"] = fit.cache_mean_bytes
        if fit.as_cache:
            meta["hybrid_as_cache"] = True


def _hold(reserve: int, per_proc: int, ranks: list[int]) -> int:
    """More of the pager's cache per node when there are heads (stream_floor)."""
    return (stream_floor(per_proc) - PAGER_FLOOR) * max(ranks) if reserve else 0


def _fit_notes(fit: cachefit.Refined) -> list[str]:
    moved = len(fit.unpinned) + len(fit.heads_dropped)
    if fit.as_cache:
        gain = fit.priced_cache_s / max(fit.priced_kept_s, 1e-300)
        return [
            f"hybrid: every site left to the pager, as in cache mode: the best placement "
            f"found was priced only {gain:.2f}x better than cache mode "
            f"({format_num(fit.priced_kept_s)} "
            f"against {format_num(fit.priced_cache_s)} s per process), less than the "
            f"{1 / (1 - cachefit.GAIN_MARGIN):.2f}x the model's error needs "
            "(hetmem.placement.cachefit)"
        ]
    if not moved:
        return [
            "hybrid: with the pager's cache counted, every pin and head saves time "
            f"(predicted {format_num(fit.priced_after_s)} s per process; cache mode "
            f"{format_num(fit.priced_cache_s)} s)"
        ]
    return [
        f"hybrid: {len(fit.unpinned)} site(s) left to the pager and {len(fit.heads_dropped)} "
        "head(s) dropped: with the pager's cache counted they saved too little of what they "
        "took from it "
        f"(predicted {format_num(fit.priced_before_s)} -> "
        f"{format_num(fit.priced_after_s)} s per process; "
        f"cache mode {format_num(fit.priced_cache_s)} s)"
    ]


def _placement_meta(
    merged: Merged,
    sol: Solution,
    fast_budget: int,
    ranks: int,
    profile_names: Sequence[str],
    t_slow: float,
    t_fast: float,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "generated_by": "hetmem advise",
        "created_unix": int(time.time()),
        "binary": 0,
        "profiles": [str(x) for x in profile_names],
        "merged_profiles": len(merged.profiles),
        "depth": merged.depth,
        "fast_budget_node_bytes": fast_budget,
        "ranks_per_node": ranks,
        "solver": sol.solver,
        "optimal": bool(sol.optimal),
        "solve_seconds": round(sol.seconds, 4),
        "predicted_time_saved_s": t_slow - sol.objective,
        "predicted_time_s": sol.objective,
        "predicted_time_all_slowest_s": t_slow,
        "predicted_time_unlimited_fastest_s": t_fast,
        "cost_model": "T(site,tier) = A*B/BW + (r*A + R)*L/threads (docs/formats.md)",
    }
    if sol.note:
        meta["solver_note"] = sol.note
    return meta


class _ModuleTable:
    """Modules in first-use order of the sites, the profiled binary first."""

    def __init__(self) -> None:
        self.modules: list[PModule] = []
        self._index: dict[str, int] = {}

    def index(self, m: Module) -> int:
        if m.key not in self._index:
            self._index[m.key] = len(self.modules)
            self.modules.append(PModule(path=m.path, build_id=m.build_id))
        return self._index[m.key]


class _Explainer:
    """The reasons for the first explain_top sites of the order."""

    def __init__(
        self,
        problem: Problem,
        sol: Solution,
        tiers: Sequence[Tier],
        explain_top: int,
        merged: Merged,
        splits: dict[int, Split],
        fit: cachefit.Refined | None = None,
    ) -> None:
        self.problem, self.sol, self.tiers, self.top = problem, sol, tiers, explain_top
        self.splits, self.merged = splits, merged
        self.left = set(fit.unpinned + fit.heads_dropped) if fit else set()
        self.as_cache = set(fit.as_cache_sites) if fit else set()
        dens = np.array([s.accesses_per_byte for s in merged.sites])
        self.dens_rank = np.empty(problem.nsites, dtype=np.int64)
        self.dens_rank[np.argsort(-dens, kind="stable")] = np.arange(1, problem.nsites + 1)

    def reason(self, rank_i: int, i: int) -> str:
        if rank_i >= self.top:
            return ""
        if i in self.as_cache:
            return (
                f"left to the pager ({self.tiers[-1].name}), in hybrid mode: the placement "
                "as a whole was priced too close to cache mode to be worth the model's error "
                "(--for hybrid)"
            )
        if i in self.left:
            return (
                f"left to the pager ({self.tiers[-1].name}), in hybrid mode: with its cache "
                f"counted, {self.tiers[0].name} would save less than the cache it took from "
                "the storage-tier data live beside it (--for hybrid)"
            )
        why = explain(self.problem, self.sol, self.tiers, i, int(self.dens_rank[i]))
        sp = self.splits.get(i)
        if sp is None:
            return why
        t = int(self.sol.assign[i])
        return (
            f"split: the first {format_size(sp.bytes)} of each allocation "
            f"({sp.fraction:.0%} of its peak {format_size(self.merged.sites[i].peak_live_bytes)}) "
            f"on {self.tiers[0].name}, the rest on {self.tiers[t].name}, "
            f"saving {format_num(sp.saved_s)} s "
            f"more: the room {self.tiers[0].name} had left after whole sites, with the site's "
            f"accesses taken as spread evenly over it (a profile does not say where in a block "
            f"they fall); whole, {why}"
        )


def _placed_site(
    merged: Merged,
    i: int,
    sol: Solution,
    benefit: np.ndarray,
    modules: _ModuleTable,
    sym: Symbolizer | None,
    reason: str,
) -> PSite:
    s = merged.sites[i]
    symbols = []
    if sym is not None and s.static:
        symbols.append(static_name(sym, s)[0])
    elif sym is not None:
        for m, off in s.frames:
            loc = sym.lookup(m.key, m.path, m.build_id, off)
            symbols.append(str(loc) if loc else raw_frame(m.path, off))
    return PSite(
        id=i,
        tier=int(sol.assign[i]),
        frames=[(modules.index(m), off) for m, off in s.frames],
        symbols=symbols,
        peak_live_bytes=s.peak_live_bytes,
        bytes=s.bytes,
        allocs=s.allocs,
        est_accesses=s.est_accesses,
        benefit_s=float(benefit[i]),
        reason=reason,
    )


def pager_reserve(tiers: Sequence[Tier], fast_budget: int, ranks: int) -> int:
    """Bytes of a node's fast budget kept for the pagers' least caches: one
    per process, when the slowest tier is the storage tier."""
    if not tiers or tiers[-1].kind != "storage" or len(tiers) < 2:
        return 0
    return min(fast_budget, PAGER_FLOOR * ranks)


def outside_reserve(merged: Merged, room: int, ranks: int) -> int:
    """Bytes of a node's fast budget kept for the memory of its processes
    outside their sites, as the profile measured it (`hetmem run` bounds
    the whole process by its budget, and in flat and hybrid mode that
    memory is charged to the pager's share: planned into tier 0 instead,
    LAMMPS's 7 MiB of it left its pager a few hundred KiB). Only beside
    the pager: a NUMA tier's placement bounds tier 0 alone."""
    return max(0, min(room, merged.outside_peak_bytes * ranks))


def _placement_tiers(tiers: Sequence[Tier], fast_budget: int, ranks: int) -> list[PTier]:
    last = len(tiers) - 1
    ptiers = []
    for ti, t in enumerate(tiers):
        node_cap = fast_budget if ti == 0 else t.capacity_bytes
        per_proc = 0 if ti == last or node_cap is None else node_cap // ranks
        ptiers.append(
            PTier(
                name=t.name,
                kind=t.kind,
                numa_node=t.numa_node,
                capacity_bytes=per_proc,
                bandwidth_gbs=t.bandwidth_gbs,
                latency_ns=t.latency_ns,
                path=t.path,
            )
        )
    return ptiers


def benchmark(
    nsites: int = MAX_ILP_SITES, ntiers: int = 3, target_s: float = 2.0
) -> dict[str, Any]:
    """Solves the synthetic instance exactly and greedily, side by side."""
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    import scipy.optimize  # noqa: F401  (its import is not solving time)

    p = synthetic_problem(nsites, ntiers)
    t0, c0 = time.perf_counter(), time.process_time()
    exact = solve_ilp(p)
    t_ilp, c_ilp = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    greedy = solve_greedy(p)
    t_greedy = time.perf_counter() - t0
    slow = float(p.cost[:, -1].sum())
    return {
        "sites": nsites,
        "tiers": ntiers,
        "intervals": len(p.groups),
        "ilp_seconds": t_ilp,
        # CPU time of this process: what the solve costs without the other
        # work a shared machine runs meanwhile (HiGHS runs one thread here).
        "ilp_cpu_seconds": c_ilp,
        "ilp_optimal": exact.optimal,
        "ilp_note": exact.note,
        "greedy_seconds": t_greedy,
        "target_seconds": target_s,
        "meets_target": t_ilp <= target_s,
        "saved_ilp_s": slow - exact.objective,
        "saved_greedy_s": slow - greedy.objective,
        "greedy_over_ilp": (slow - greedy.objective) / max(slow - exact.objective, 1e-300),
    }
