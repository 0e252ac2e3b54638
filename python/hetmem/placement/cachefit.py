# SPDX-License-Identifier: BSD-3-Clause
"""Hybrid mode's pager cache, counted: what a pinned site takes from it.

In hybrid mode the pager's cache is what tier 0's live blocks leave of the
process's budget, moment by moment (src/preload/route.c). The solver
(problem.py) prices a storage-tier site as if each of its accesses went to
the device, so a pin looks like a pure gain. On hpcc at half its footprint
it was a loss: 32 MiB of FFT work arrays pinned for about a thousand
sampled accesses left the pager 95 MiB for a 128 MiB transform that cache
mode's 127 MiB held, and the single FFT ran 24x slower than in cache mode.

This pass prices a placement with the cache counted, on each profile's
time axis cut wherever a site's live bytes change (segment k):

* P_k, the pager's cache: the process's budget less the rest of the
  process (the profile's outside_peak_bytes) less tier 0's live bytes in k
  (pins, and split heads), at least the pager's least cache;
* H_k: the live bytes in k of the storage-tier sites that have accesses,
  past their heads;
* the pager serves min(1, P_k / H_k) of those accesses from DRAM: it keeps
  the part of its data that fits (src/sdm/evict.c keeps the part of a
  sweep that fits rather than cycling it out), and the accesses are taken
  as spread evenly over the bytes, as split.py takes them;
* a site's accesses are spread over its live time.

A storage-tier site's share of its accesses in k then costs
T0 + (1 - f)(1 - min(1, P_k/H_k))(T_slow - T0) (f: its head's fraction of
it), a pinned site T0. From the solver's placement, pins and heads are
removed one at a time, the removal that lowers the priced time most first,
while one lowers it or leaves it where it was (within TIE): a pin whose
accesses are no denser than the data it takes cache from saves nothing in
this model. A head must do better: keep at least HEAD_MARGIN of the time
split.py credited it with. Its worth rests on where in its block the
accesses fall, which no profile says, and the pager follows where they
move while a head does not (HPL's trailing matrix shrinks: the head of its
matrix idles after the first panels, and a split placement read twice
what cache mode read in HPL, 142 s against 82). A whole pinned site holds
all its accesses wherever they fall (hpcc's DGEMM ran 3.5x faster with one
of its three matrices pinned, a tie in this model). Applies where the
storage tier is the only tier below tier 0; cost: a few numpy passes over
sites x segments per removal.

Last, what is left must beat cache mode (every site through the pager) by
GAIN_MARGIN of cache mode's priced time; otherwise every pin and head goes
to the pager and hybrid mode runs as cache mode does. A pin's worth in
this model comes from its accesses being denser than the data it takes
cache from, and the sampler's counts are noisy there: on hpcc at half its
footprint, placements priced 1.03x and 1.01x better than cache mode ran
0.85x and 1.05x as fast, depending on which DGEMM matrix the noise picked;
on LAMMPS at a quarter of it, 1.05x priced ran 0.95x. The placements that
paid were priced 1.17x to 11x better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hetmem._numpy import np
from hetmem.placement.problem import Problem
from hetmem.placement.profile import Merged
from hetmem.placement.split import Split

MAX_SEGMENTS = 2048  # per profile; beyond, neighbours are averaged by time
TIE = 1e-6  # relative: a removal that changes the priced time less is a tie
# A head stays only if, with the cache counted, it saves at least this part
# of what split.py credited it with: the model cannot see where in a block
# the accesses fall, which is all a head's worth (module docstring).
HEAD_MARGIN = 0.25
# What is left must beat cache mode by this part of cache mode's priced
# time, or everything goes to the pager (module docstring).
GAIN_MARGIN = 0.10


@dataclass
class Axis:
    """One profile's time axis: the sites live in it (merged indices), their
    live bytes per segment, and the share of each site's accesses there."""

    sites: np.ndarray  # (n,) int64
    live: np.ndarray  # (n, K) float64 bytes
    share: np.ndarray  # (n, K) float64, rows sum to 1
    dur: np.ndarray  # (K,) float64 ns


@dataclass
class Refined:
    assign: np.ndarray
    splits: dict[int, Split]
    unpinned: list[int] = field(default_factory=list)
    heads_dropped: list[int] = field(default_factory=list)
    priced_before_s: float = 0.0
    priced_after_s: float = 0.0
    priced_cache_s: float = 0.0  # every site through the pager (cache mode)
    cache_mean_bytes: int = 0  # the pager's cache over time, per process
    as_cache_sites: list[int] = field(default_factory=list)  # left by GAIN_MARGIN
    priced_kept_s: float = 0.0  # the placement given up when as_cache

    @property
    def as_cache(self) -> bool:
        """Within GAIN_MARGIN of cache mode: every site left to the pager."""
        return bool(self.as_cache_sites)


def _cuts(series: Sequence[list[tuple[int, int]]], wall: int) -> np.ndarray:
    """Where segments begin and the last ends: every change of a live
    series, from 0 to the profile's wall time."""
    times = sorted({t for s in series for t, _ in s} | {0, wall})
    if len(times) == 1:  # no time at all: one segment
        times.append(times[0] + 1)
    return np.array(times, dtype=np.float64)


def _step(points: list[tuple[int, int]], starts: np.ndarray, peak: int) -> np.ndarray:
    """A live series sampled at each segment's start (peak throughout when
    the site has no series: a static array)."""
    if not points:
        return np.full(len(starts), float(peak))
    t = np.array([p[0] for p in points], dtype=np.float64)
    v = np.array([0.0] + [float(p[1]) for p in points])
    return v[np.searchsorted(t, starts, side="right")]


def _coalesce(live: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = live.shape[1]
    if k <= MAX_SEGMENTS:
        return live, dur
    b = np.arange(k) * MAX_SEGMENTS // k
    d = np.bincount(b, weights=dur, minlength=MAX_SEGMENTS)
    out = np.stack([np.bincount(b, weights=row * dur, minlength=MAX_SEGMENTS) for row in live])
    return out / np.maximum(d, 1e-300), d


def axes(merged: Merged) -> list[Axis]:
    """Every profile's time axis (hetmem.placement.profile's live series)."""
    out = []
    for prof, mine in zip(merged.profiles, merged.per_profile, strict=True):
        idx = sorted(mine)
        if not idx:
            continue
        cuts = _cuts([mine[i].live for i in idx], int(prof.header.get("wall_ns") or 0))
        starts, dur = cuts[:-1], np.diff(cuts)
        live = np.stack([_step(mine[i].live, starts, mine[i].peak_live_bytes) for i in idx])
        live, dur = _coalesce(live, dur)
        on = (live > 0) * dur
        tot = on.sum(axis=1, keepdims=True)
        share = np.where(tot > 0, on / np.maximum(tot, 1e-300), 1.0 / live.shape[1])
        out.append(Axis(np.array(idx, dtype=np.int64), live, share, dur))
    return out


class _State:
    """A placement as this model sees it, per axis: tier 0's live bytes,
    the storage sites' hot live bytes and their miss cost per segment."""

    def __init__(self, ax: Axis, pinned: np.ndarray, head: np.ndarray, frac: np.ndarray,
                 hot: np.ndarray, dt: np.ndarray) -> None:  # fmt: skip
        s = ax.sites
        h = np.minimum(head[s][:, None], ax.live)
        self.pin = (ax.live * pinned[s][:, None]).sum(axis=0) + (h * ~pinned[s][:, None]).sum(0)
        tail = (ax.live - h) * (~pinned[s] & hot[s])[:, None]
        self.hot = tail.sum(axis=0)
        w = (~pinned[s]) * (1.0 - frac[s]) * dt[s]
        self.miss = (ax.share * w[:, None]).sum(axis=0)


def _priced(pin: np.ndarray, hot: np.ndarray, miss: np.ndarray, base: float,
            floor: float) -> np.ndarray:  # fmt: skip
    """Seconds of device accesses, per row of (rows, K) arrays or for one K."""
    cache = np.maximum(floor, base - pin)
    served = np.where(hot > 0, np.minimum(1.0, cache / np.maximum(hot, 1e-300)), 1.0)
    return ((1.0 - served) * miss).sum(axis=-1)


class Pricer:
    """Prices placements of one problem in hybrid mode (the module's model)."""

    def __init__(self, problem: Problem, merged: Merged, base: float, floor: float) -> None:
        self.axes = axes(merged)
        self.t0 = problem.cost[:, 0].astype(np.float64)
        self.dt = np.maximum(problem.cost[:, -1] - problem.cost[:, 0], 0.0)
        self.hot = np.array([s.est_accesses > 0 for s in merged.sites], dtype=bool)
        self.base, self.floor = float(base), float(floor)
        self.n = problem.nsites

    def _arrays(self, assign: np.ndarray, splits: dict[int, Split]) -> tuple[np.ndarray, ...]:
        pinned = assign == 0
        head = np.zeros(self.n)
        frac = np.zeros(self.n)
        for i, sp in splits.items():
            head[i], frac[i] = float(sp.bytes), sp.fraction
        return pinned, head, frac

    def price(self, assign: np.ndarray, splits: dict[int, Split]) -> float:
        pinned, head, frac = self._arrays(assign, splits)
        dev = 0.0
        for ax in self.axes:
            st = _State(ax, pinned, head, frac, self.hot, self.dt)
            dev += float(_priced(st.pin, st.hot, st.miss, self.base, self.floor))
        return float(self.t0.sum()) + dev / max(len(self.axes), 1)

    def mean_cache(self, assign: np.ndarray, splits: dict[int, Split]) -> float:
        """The pager's cache per process where it works: averaged over each
        profile's segments weighted by the device time priced there (by
        time where none is), then over the profiles. By time alone, LAMMPS
        at 75% of its footprint averaged 21 MiB over a set-up its pins had
        not yet filled, while its steps ran in 7 MiB."""
        pinned, head, frac = self._arrays(assign, splits)
        means = []
        for ax in self.axes:
            st = _State(ax, pinned, head, frac, self.hot, self.dt)
            cache = np.maximum(self.floor, self.base - st.pin)
            served = np.where(st.hot > 0, np.minimum(1.0, cache / np.maximum(st.hot, 1e-300)), 1)
            w = (1.0 - served) * st.miss
            w = w if float(w.sum()) > 0 else ax.dur
            means.append(float((cache * w).sum() / max(float(w.sum()), 1e-300)))
        return sum(means) / len(means) if means else self.base

    def removals(
        self, assign: np.ndarray, splits: dict[int, Split], cands: list[tuple[int, bool]]
    ) -> np.ndarray:
        """The price of the placement without each candidate (site, is_head)."""
        pinned, head, frac = self._arrays(assign, splits)
        total = np.zeros(len(cands))
        for ax in self.axes:
            st = _State(ax, pinned, head, frac, self.hot, self.dt)
            pos = {int(s): r for r, s in enumerate(ax.sites)}
            k = ax.live.shape[1]
            dpin, dhot, dmiss = (np.zeros((len(cands), k)) for _ in range(3))
            for c, (i, is_head) in enumerate(cands):
                r = pos.get(i)
                if r is None:
                    continue
                moved = np.minimum(head[i], ax.live[r]) if is_head else ax.live[r]
                dpin[c], dhot[c] = moved, moved * self.hot[i]
                dmiss[c] = ax.share[r] * self.dt[i] * (frac[i] if is_head else 1.0)
            total += _priced(st.pin - dpin, st.hot + dhot, st.miss + dmiss, self.base, self.floor)
        return total / max(len(self.axes), 1) + float(self.t0.sum())


def refine(
    problem: Problem,
    merged: Merged,
    assign: np.ndarray,
    splits: dict[int, Split],
    base: float,
    floor: float,
) -> Refined:
    """The solver's placement with the pins and heads removed that cost
    hybrid mode's pager more than they save (module docstring)."""
    assign = assign.copy()
    splits = dict(splits)
    pr = Pricer(problem, merged, base, floor)
    cur = before = pr.price(assign, splits)
    out = Refined(assign, splits, priced_before_s=before)
    cands = [(i, False) for i in range(problem.nsites) if assign[i] == 0 and i not in problem.fixed]
    cands += [(i, True) for i in splits]
    while cands:
        prices = pr.removals(assign, splits, cands)
        slack = np.array([HEAD_MARGIN * splits[i].saved_s if h else 0.0 for i, h in cands])
        c = int(np.argmin(prices - slack))
        if prices[c] - slack[c] > cur + TIE * max(abs(cur), 1e-300):
            break
        _leave(problem, assign, splits, out, *cands.pop(c))
        cur = float(prices[c])
    out.priced_cache_s = pr.price(np.full_like(assign, problem.ntiers - 1), {})
    if cands and cur > (1.0 - GAIN_MARGIN) * out.priced_cache_s:
        out.priced_kept_s = cur
        for i, is_head in cands:
            out.as_cache_sites.append(i)
            _leave(problem, assign, splits, out, i, is_head)
        cur = pr.price(assign, splits)
    out.assign, out.splits, out.priced_after_s = assign, splits, cur
    out.cache_mean_bytes = int(pr.mean_cache(assign, splits))
    return out


def _leave(
    problem: Problem,
    assign: np.ndarray,
    splits: dict[int, Split],
    out: Refined,
    i: int,
    is_head: bool,
) -> None:
    """Site i's pin, or its head, left to the pager (in place)."""
    if is_head:
        del splits[i]
        out.heads_dropped.append(i)
    else:
        assign[i] = problem.ntiers - 1
        out.unpinned.append(i)
