# SPDX-License-Identifier: BSD-3-Clause
"""The placement problem: tiers, the cost of each site on each tier and
the capacity checks, from merged profiles.

Model (docs/formats.md, "Placement", states it for users):

* Tiers, fastest first, each with a bandwidth BW (GB/s), a latency L (ns)
  and a capacity per process (the fast tier's is the --fast-budget per node
  divided by the ranks on that node; the slowest tier is unlimited).
* A site i has A_i estimated accesses per process (sampled loads and stores,
  and first touches as profile.py weighs them, times the sampler period,
  averaged over the merged profiles), B bytes per
  access (the profile's, a cache line by default), a fraction r_i of random
  accesses and a live-bytes step function per profile.
* Time of site i on tier t:
      T(i,t) = A_i * B / BW_t + (r_i * A_i + R_i) * L_t / threads.
  The first term is streaming traffic at the tier's measured bandwidth, the
  second the exposed latency of dependent random accesses, overlapped across
  the profiled process's threads. R_i, the site's reused pages per process
  (the refs sampler's short windows, profile.Site.reuse_pages), is a lower
  bound of the accesses that find their page wherever the last one left
  it: on the storage tier each is a page fault served from the device (the
  pager's cache is not credited: it is shared, and smaller than the site
  whenever this matters), in memory a cache miss. Without it, a site
  gathered at random all interval long and one swept once an interval
  looked alike to the refs sampler.
* Capacity: for every profile p, every interval k of its time axis (the
  live set changes only at allocation and free events) and every tier t with
  a limit:  sum_i live_p(i,k) * x(i,t) <= cap_t(p). Peak concurrent use
  counts, not the sum of each site's maximum.
* Minimise sum_i sum_t T(i,t) x(i,t), x binary, each site on exactly one
  tier: solved exactly by HiGHS (scipy.optimize.milp) up to
  --max-ilp-sites sites; beyond that (or if HiGHS fails) a greedy by
  benefit density, and the output says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import tiers as inv
from hetmem._numpy import np
from hetmem.errors import EnvironmentProblem, SchemaError, UsageError
from hetmem.placement.profile import Merged
from hetmem.run import cache

MAX_INTERVALS = 4096  # per profile, after exact pruning; beyond: coalesced

# When a tier was neither probed nor rated by HMAT: typical figures by kind
# (GB/s, ns), so that the order of tiers is still right. Marked "nominal".
NOMINAL = {
    "hbm": (400.0, 120.0),
    "dram": (80.0, 90.0),
    "gpu": (200.0, 500.0),
    "cxl": (30.0, 250.0),
    "pmem": (10.0, 350.0),
    "unknown": (20.0, 200.0),
    "storage": (2.0, 100_000.0),
    "memory": (80.0, 90.0),
}


@dataclass
class Tier:
    name: str
    kind: str
    bandwidth_gbs: float
    latency_ns: float
    capacity_bytes: int | None  # per node; None = unlimited
    numa_node: int = -1
    source: str = "nominal"
    path: str = ""


# --------------------------------------------------------------------------
# Tiers


def _pos(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def tiers_from_file(path: str | Path) -> list[Tier]:
    """--tiers FILE: {"tiers": [{"name", "kind", "bandwidth_gbs", "latency_ns",
    "capacity_bytes" (null: unlimited), "numa_node"}]}, any order."""
    raw = _read_tier_list(path)
    out = [_tier_from_entry(path, i, t) for i, t in enumerate(raw)]
    return sorted(out, key=lambda t: -t.bandwidth_gbs)


def _read_tier_list(path: str | Path) -> list[Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"--tiers {path}: cannot read: {exc.strerror or exc}") from None
    except ValueError:
        raise SchemaError(f"--tiers {path}: not valid JSON") from None
    raw = doc.get("tiers") if isinstance(doc, dict) else None
    if not isinstance(raw, list) or not raw:
        raise SchemaError(f'--tiers {path}: want {{"tiers": [...]}} with at least one tier')
    return raw


def _tier_from_entry(path: str | Path, i: int, t: Any) -> Tier:
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        raise SchemaError(f"--tiers {path}: tier {i} needs a name")
    bw, lat = _pos(t.get("bandwidth_gbs")), _pos(t.get("latency_ns"))
    if bw is None or lat is None:
        raise SchemaError(
            f"--tiers {path}: tier {t['name']} needs positive bandwidth_gbs and latency_ns"
        )
    cap = t.get("capacity_bytes")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise SchemaError(
            f"--tiers {path}: tier {t['name']}: capacity_bytes must be an integer or null"
        )
    node = t.get("numa_node", -1)
    return Tier(
        name=t["name"],
        kind=str(t.get("kind", "unknown")),
        bandwidth_gbs=bw,
        latency_ns=lat,
        capacity_bytes=cap,
        numa_node=node if isinstance(node, int) and not isinstance(node, bool) else -1,
        source="file",
    )


def _tier_from_inventory(t: dict[str, Any]) -> Tier:
    kind = str(t.get("kind", "unknown"))
    bw, lat = _measured_figures(t)
    source = "probe" if bw is not None else "nominal"
    hmat = t.get("hmat") if isinstance(t.get("hmat"), dict) else {}
    if bw is None and _pos(hmat.get("read_bandwidth_mibs")):
        bw = float(hmat["read_bandwidth_mibs"]) * 1.048576e-3
        source = "hmat"
    if lat is None and _pos(hmat.get("read_latency_ns")):
        lat = float(hmat["read_latency_ns"])
    nb, nl = NOMINAL.get(kind, NOMINAL["unknown"])
    node = t.get("numa_node")
    cap = t.get("capacity_bytes")
    return Tier(
        name=str(t.get("name", "?")),
        kind=kind,
        bandwidth_gbs=bw or nb,
        latency_ns=lat or nl,
        capacity_bytes=cap if isinstance(cap, int) and cap > 0 else None,
        numa_node=node if isinstance(node, int) else -1,
        source=source,
        path=str(t.get("path") or ""),
    )


def _measured_figures(t: dict[str, Any]) -> tuple[float | None, float | None]:
    """(bandwidth GB/s, latency ns) a probe measured for an inventory tier."""
    meas = t.get("measured") if isinstance(t.get("measured"), dict) else {}
    best = meas.get("best") if isinstance(meas.get("best"), dict) else {}
    # Memory: the best STREAM triad and the pointer-chase latency; storage:
    # sequential O_DIRECT reads and the 4 KiB random-read latency at depth 1
    # (docs/formats.md, "Probe result").
    bw = (
        _pos(best.get("triad_gbs")) or _pos(meas.get("seq_read_gbs")) or _pos(t.get("measured_gbs"))
    )
    lat = _pos(meas.get("latency_ns"))
    rr = meas.get("randread")
    if lat is None and isinstance(rr, list) and rr and isinstance(rr[0], dict):
        us = _pos(rr[0].get("lat_us_mean"))
        lat = us * 1000.0 if us else None
    return bw, lat


def tiers_from_machine(
    storage: str | None = None, no_storage: bool = False
) -> tuple[list[Tier], list[str]]:
    """This machine's tiers: the inventory with cached probe measurements
    (hetmem.tiers), else the cached probe result alone; notes say which.
    storage: the storage tier's directory (default: the default one);
    no_storage: memory tiers only (flat mode on an HBM or CXL machine)."""
    notes: list[str] = []
    entries: list[dict[str, Any]] | None = None
    try:
        entries = inv.inventory(storage=[storage] if storage else None, no_storage=no_storage)[
            "tiers"
        ]
    except ImportError:
        notes.append("tier inventory unavailable; using the cached probe result only")
    except Exception as exc:  # the native library may lack discovery: degrade
        notes.append(f"tier inventory failed ({exc}); using the cached probe result only")
    if entries is None:
        probe = cache.load("probe")
        if probe and isinstance(probe.get("tiers"), list):
            entries = []
            for t in probe["tiers"]:
                if isinstance(t, dict) and not (no_storage and t.get("kind") == "storage"):
                    entries.append({**t, "measured": t})
    if not entries:
        raise EnvironmentProblem(
            "no tier characteristics: run `hetmem probe` first, or pass --tiers FILE"
        )
    tiers = [_tier_from_inventory(t) for t in entries if isinstance(t, dict)]
    nominal = [t.name for t in tiers if t.source == "nominal"]
    if nominal:
        how = f"hetmem probe --storage {storage}" if storage else "hetmem probe"
        notes.append(
            f"no measurement for {', '.join(nominal)}: nominal figures for their kind "
            f"(run `{how}` for measured ones)"
        )
    return sorted(tiers, key=lambda t: -t.bandwidth_gbs), notes


# --------------------------------------------------------------------------
# The problem


@dataclass
class Group:
    """One capacity check: the live bytes of sites in one interval of one
    profile, against that profile's per-process capacity of each tier."""

    caps: list[int | None]  # per tier
    sites: np.ndarray  # site indices (int64)
    live: np.ndarray  # bytes (int64), same length


@dataclass
class Problem:
    cost: np.ndarray  # (S, T) seconds per process
    groups: list[Group]
    fixed: dict[int, int] = field(default_factory=dict)  # site -> tier, outside the solver
    notes: list[str] = field(default_factory=list)
    # reused pages per process (profile.Site.reuse_pages), for --explain
    reuse: np.ndarray | None = None

    @property
    def nsites(self) -> int:
        return int(self.cost.shape[0])

    @property
    def ntiers(self) -> int:
        return int(self.cost.shape[1])


@dataclass
class Solution:
    assign: np.ndarray  # tier per site
    objective: float
    solver: str  # "ilp-highs", "greedy"
    optimal: bool
    seconds: float
    note: str = ""


def intervals_of(
    series: dict[int, list[tuple[int, int]]], limit: int = MAX_INTERVALS
) -> tuple[list[dict[int, int]], bool]:
    """The distinct live sets of one process: one {site: bytes} per interval
    between changes, without those another one dominates (elementwise <=,
    whose constraint is then implied: an exact reduction). Beyond `limit`
    left, neighbours are merged by elementwise maximum (conservative);
    the flag says so."""
    events: dict[int, list[tuple[int, int]]] = {}
    for site, pts in series.items():
        for t, b in pts:
            events.setdefault(t, []).append((site, b))
    cur: dict[int, int] = {}
    kept: list[dict[int, int]] = []
    for t in sorted(events):
        for site, b in events[t]:
            if b:
                cur[site] = b
            else:
                cur.pop(site, None)
        if not cur:
            continue
        v = dict(cur)
        while kept and _dominated(kept[-1], v):
            kept.pop()
        if kept and _dominated(v, kept[-1]):
            continue
        kept.append(v)
    coalesced = False
    while len(kept) > limit:
        coalesced = True
        merged = []
        for j in range(0, len(kept), 2):
            a = dict(kept[j])
            if j + 1 < len(kept):
                for s, b in kept[j + 1].items():
                    a[s] = max(a.get(s, 0), b)
            merged.append(a)
        kept = merged
    return kept, coalesced


def _dominated(a: dict[int, int], b: dict[int, int]) -> bool:
    """a <= b elementwise (a's constraint is implied by b's)."""
    if len(a) > len(b):
        return False
    return all(b.get(s, 0) >= v for s, v in a.items())


def ranks_on_nodes(merged: Merged, ranks_per_node: int | None) -> list[int]:
    """Ranks sharing each profile's node: distinct ranks among profiles of the
    same host (repeated runs of one rank count once)."""
    if ranks_per_node:
        return [ranks_per_node] * len(merged.profiles)
    by_host: dict[str, set[Any]] = {}
    for p in merged.profiles:
        by_host.setdefault(p.hostname, set()).add(p.rank if p.rank is not None else ("pid", 0))
    return [max(1, len(by_host[p.hostname])) for p in merged.profiles]


def build_problem(
    merged: Merged,
    tiers: Sequence[Tier],
    fast_budget: int,
    ranks_per_node: int | None = None,
) -> Problem:
    if not tiers:
        raise UsageError("no tiers to place on")
    notes: list[str] = []
    cost, acc = _cost_matrix(merged, tiers, notes)
    reuse = np.array([s.reuse_pages / len(merged.profiles) for s in merged.sites], dtype=float)
    ranks = ranks_on_nodes(merged, ranks_per_node)
    groups, coalesced_any = _capacity_groups(merged, tiers, fast_budget, ranks)
    if coalesced_any:
        notes.append(
            f"a profile's time axis had more than {MAX_INTERVALS} distinct live sets; "
            "neighbours were merged (capacity checks are conservative there)"
        )
    last = len(tiers) - 1
    fixed = {i: last for i, a in enumerate(acc) if a <= 0.0}
    if acc.size and not (acc > 0.0).any():
        notes.append(
            "warning: the profiles have no access samples (sampler none, or a run too short "
            f"for its sampler): every site is left on the slowest tier ({tiers[last].name}); "
            "profile again with a sampler and a run of a few seconds or more"
        )
    return Problem(cost=cost, groups=groups, fixed=fixed, notes=notes, reuse=reuse)


def _cost_matrix(
    merged: Merged, tiers: Sequence[Tier], notes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """T(site, tier) and the accesses per process of each site."""
    nprof = len(merged.profiles)
    bpa = {int(p.header["bytes_per_access"]) for p in merged.profiles}
    if len(bpa) > 1:
        notes.append(f"profiles disagree on bytes per access {sorted(bpa)}; using the largest")
    b = float(max(bpa))
    threads = max(int(p.header.get("threads", 1)) for p in merged.profiles)
    acc = np.array([s.est_accesses / nprof for s in merged.sites], dtype=float)
    rnd = np.array([s.random_fraction for s in merged.sites], dtype=float)
    ret = np.array([s.reuse_pages / nprof for s in merged.sites], dtype=float)
    bw = np.array([t.bandwidth_gbs * 1e9 for t in tiers])
    lat = np.array([t.latency_ns * 1e-9 for t in tiers])
    dep = rnd * acc + ret
    cost = acc[:, None] * b / bw[None, :] + dep[:, None] * lat[None, :] / threads
    return cost, acc


def _profile_caps(tiers: Sequence[Tier], fast_budget: int, ranks: int) -> list[int | None]:
    """One process's capacity of each tier (None: unlimited)."""
    last = len(tiers) - 1
    caps: list[int | None] = []
    for ti, t in enumerate(tiers):
        node_cap = fast_budget if ti == 0 else t.capacity_bytes
        caps.append(None if ti == last or node_cap is None else node_cap // ranks)
    return caps


def _capacity_groups(
    merged: Merged, tiers: Sequence[Tier], fast_budget: int, ranks: list[int]
) -> tuple[list[Group], bool]:
    """The distinct capacity checks of all profiles; the flag says whether a
    time axis was coalesced."""
    groups: list[Group] = []
    coalesced_any = False
    seen: set[tuple[Any, ...]] = set()
    for p, mine in enumerate(merged.per_profile):
        caps = _profile_caps(tiers, fast_budget, ranks[p])
        if all(c is None for c in caps):
            continue
        series = {i: s.live for i, s in mine.items() if s.live}
        ivs, coalesced = intervals_of(series)
        coalesced_any |= coalesced
        for v in ivs:
            key = (tuple(caps), tuple(sorted(v.items())))
            if key in seen:
                continue
            seen.add(key)
            idx = np.fromiter(v.keys(), dtype=np.int64, count=len(v))
            live = np.fromiter(v.values(), dtype=np.int64, count=len(v))
            groups.append(Group(caps=caps, sites=idx, live=live))
    return groups, coalesced_any


def objective(problem: Problem, assign: np.ndarray) -> float:
    return float(problem.cost[np.arange(problem.nsites), assign].sum())


def violations(problem: Problem, assign: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, tier, excess bytes) for every capacity the assignment breaks."""
    out = []
    for g, grp in enumerate(problem.groups):
        for t, cap in enumerate(grp.caps):
            if cap is None:
                continue
            used = int(grp.live[assign[grp.sites] == t].sum())
            if used > cap:
                out.append((g, t, used - cap))
    return out


# --------------------------------------------------------------------------
# Benchmark instance (hetmem advise --benchmark)


def synthetic_problem(nsites: int, ntiers: int = 3, phases: int = 24, seed: int = 1) -> Problem:
    """An HPC-like instance: Zipf-skewed accesses, log-normal sizes, 30% of
    sites live the whole run and the rest in one of `phases` overlapping
    phases; the fast tier holds a quarter of the peak live footprint."""
    rng = np.random.default_rng(seed)
    acc = np.minimum(rng.zipf(1.3, nsites), 1e5).astype(float) * 1e6
    size = np.minimum(rng.lognormal(16, 2, nsites), 1e11).astype(np.int64) + 4096
    whole = rng.random(nsites) < 0.3
    phase = rng.integers(0, phases, nsites)
    bw = np.array([80.0 / (4**t) for t in range(ntiers)]) * 1e9
    cost = acc[:, None] * 64.0 / bw[None, :]
    groups_live: list[dict[int, int]] = []
    for k in range(phases):
        # phase k overlaps with k+1 in its second half
        groups_live.append(
            {int(s): int(size[s]) for s in np.nonzero(whole | (phase == k) | (phase == k - 1))[0]}
        )
    peak = max(sum(v.values()) for v in groups_live)
    caps: list[int | None] = [peak // 4] + [peak // 2] * (ntiers - 2) + [None]
    groups = [
        Group(
            caps=caps,
            sites=np.fromiter(v.keys(), dtype=np.int64),
            live=np.fromiter(v.values(), dtype=np.int64),
        )
        for v in groups_live
    ]
    return Problem(cost=cost, groups=groups)
