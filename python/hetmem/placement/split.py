# SPDX-License-Identifier: BSD-3-Clause
"""Split placement: the fast tier's room that whole sites leave, given to
the first part of the most beneficial large sites that did not fit.

The solver places whole sites; three equally hot arrays that together need
4x the fast budget then all land on the slow tier, each larger than the
budget, and the fast tier stays empty. After the solve, this pass fills what
is left of the fastest tier's capacity in every interval with page-granular
prefixes: a site on a slower tier, one live block at a time, gets the first
`split_bytes` of each allocation on the fastest tier (the interposer maps
that head in DRAM and the rest on the site's tier at the following
addresses). Sites are taken by time saved per byte, as the fractional
knapsack does. The profile says how often a site is accessed, not where in
it: the model takes the accesses as spread evenly over the site, so a
fraction f on the fast tier saves f of the difference between the tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetmem._numpy import np
from hetmem.placement.problem import Problem, Solution
from hetmem.placement.profile import Merged

# a head smaller than this is not worth a second mapping per allocation
MIN_SPLIT_BYTES = 1 << 20
PAGE = 4096


@dataclass
class Split:
    site: int
    bytes: int  # the head of each allocation on the fastest tier
    fraction: float  # of the site's peak live bytes
    saved_s: float  # time saved against the site's tier, per process


def _room(problem: Problem, assign: np.ndarray) -> list[float]:
    """The fastest tier's capacity left in each capacity check."""
    room = []
    for g in problem.groups:
        cap = g.caps[0]
        if cap is None:
            room.append(float("inf"))
            continue
        on_fast = assign[g.sites] == 0
        room.append(float(cap) - float(g.live[on_fast].sum()))
    return room


def _members(problem: Problem) -> dict[int, list[int]]:
    """Per site: the capacity checks it is live in."""
    out: dict[int, list[int]] = {}
    for gi, g in enumerate(problem.groups):
        for s, live in zip(g.sites.tolist(), g.live.tolist(), strict=True):
            if live > 0:
                out.setdefault(s, []).append(gi)
    return out


def _candidates(problem: Problem, sol: Solution, merged: Merged) -> list[int]:
    """Sites on a slower tier, with accesses, one live block at a time
    (the head is per allocation), large enough to split; best per byte first."""
    out = []
    for i, s in enumerate(merged.sites):
        t = int(sol.assign[i])
        peak = s.peak_live_bytes
        if t == 0 or i in problem.fixed or peak < 2 * MIN_SPLIT_BYTES:
            continue
        if s.max_bytes and peak > s.max_bytes:  # several live at once
            continue
        if problem.cost[i, t] - problem.cost[i, 0] > 0:
            out.append(i)
    return sorted(out, key=lambda i: -(problem.cost[i, int(sol.assign[i])] - problem.cost[i, 0])
                  / merged.sites[i].peak_live_bytes)  # fmt: skip


def split_sites(problem: Problem, sol: Solution, merged: Merged, hold: int = 0) -> dict[int, Split]:
    """The heads to put on the fastest tier, by site index; `hold` bytes of
    the room in every interval stay free (the pager's larger cache)."""
    if problem.ntiers < 2 or not problem.groups:
        return {}
    room = [r - hold for r in _room(problem, sol.assign)]
    members = _members(problem)
    out: dict[int, Split] = {}
    for i in _candidates(problem, sol, merged):
        groups = members.get(i, [])
        if not groups:
            continue
        peak = merged.sites[i].peak_live_bytes
        avail = min(room[g] for g in groups)
        head = int(min(avail, peak - PAGE)) // PAGE * PAGE
        if head < MIN_SPLIT_BYTES:
            continue
        for g in groups:
            room[g] -= head
        t = int(sol.assign[i])
        f = head / peak
        out[i] = Split(i, head, f, f * float(problem.cost[i, t] - problem.cost[i, 0]))
    return out
