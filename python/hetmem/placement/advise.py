"""The placement advisor: which tier serves each allocation site.

Model (docs/formats.md, "Placement", states it for users):

* Tiers, fastest first, each with a bandwidth BW (GB/s), a latency L (ns)
  and a capacity per process (the fast tier's is the --fast-budget per node
  divided by the ranks on that node; the slowest tier is unlimited).
* A site i has A_i estimated accesses per process (sampled loads and stores
  times the sampler period, averaged over the merged profiles), B bytes per
  access (the profile's, a cache line by default), a fraction r_i of random
  accesses and a live-bytes step function per profile.
* Time of site i on tier t:  T(i,t) = A_i * B / BW_t + r_i * A_i * L_t / threads.
  The first term is streaming traffic at the tier's measured bandwidth, the
  second the exposed latency of dependent random accesses, overlapped across
  the profiled process's threads.
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
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import tiers as inv
from hetmem._numpy import np
from hetmem.errors import EnvironmentProblem, SchemaError, UsageError
from hetmem.placement.fileformat import Placement, PModule, PSite, PTier
from hetmem.placement.limits import DEFAULT_TIME_LIMIT_S, MAX_ILP_SITES
from hetmem.placement.profile import Merged, Module
from hetmem.placement.sitenames import raw_frame
from hetmem.placement.symbolize import Symbolizer
from hetmem.run import cache
from hetmem.sizes import format_size

MAX_INTERVALS = 4096  # per profile, after exact pruning; beyond: coalesced
# HiGHS stops when the proven gap to the optimum is below this fraction of
# the time saved: far below what the cost model can resolve.
MIP_REL_GAP = 1e-5
PRESOLVE = False

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


@contextmanager
def _native_stdout_silenced() -> Iterator[None]:
    """HiGHS (C++) prints some diagnostics straight to file descriptor 1,
    which would corrupt `--json` output: point fd 1 at /dev/null meanwhile."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


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


def tiers_from_machine() -> tuple[list[Tier], list[str]]:
    """This machine's tiers: the inventory with cached probe measurements
    (hetmem.tiers), else the cached probe result alone; notes say which."""
    notes: list[str] = []
    entries: list[dict[str, Any]] | None = None
    try:
        entries = inv.inventory()["tiers"]
    except ImportError:
        notes.append("tier inventory unavailable; using the cached probe result only")
    except Exception as exc:  # the native library may lack discovery: degrade
        notes.append(f"tier inventory failed ({exc}); using the cached probe result only")
    if entries is None:
        probe = cache.load("probe")
        if probe and isinstance(probe.get("tiers"), list):
            entries = []
            for t in probe["tiers"]:
                if isinstance(t, dict):
                    entries.append({**t, "measured": t})
    if not entries:
        raise EnvironmentProblem(
            "no tier characteristics: run `hetmem probe` first, or pass --tiers FILE"
        )
    tiers = [_tier_from_inventory(t) for t in entries if isinstance(t, dict)]
    nominal = [t.name for t in tiers if t.source == "nominal"]
    if nominal:
        notes.append(
            f"no measurement for {', '.join(nominal)}: nominal figures for their kind "
            "(run `hetmem probe` for measured ones)"
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
    ranks = ranks_on_nodes(merged, ranks_per_node)
    groups, coalesced_any = _capacity_groups(merged, tiers, fast_budget, ranks)
    if coalesced_any:
        notes.append(
            f"a profile's time axis had more than {MAX_INTERVALS} distinct live sets; "
            "neighbours were merged (capacity checks are conservative there)"
        )
    last = len(tiers) - 1
    fixed = {i: last for i, a in enumerate(acc) if a <= 0.0}
    return Problem(cost=cost, groups=groups, fixed=fixed, notes=notes)


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
    bw = np.array([t.bandwidth_gbs * 1e9 for t in tiers])
    lat = np.array([t.latency_ns * 1e-9 for t in tiers])
    cost = acc[:, None] * b / bw[None, :] + (rnd * acc)[:, None] * lat[None, :] / threads
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


def solve_greedy(problem: Problem, start: np.ndarray | None = None) -> Solution:
    """Sites by benefit density (time saved on the best tier against the
    worst, per byte of peak live use), each on the cheapest tier that still
    has room in every interval it is live in. start: a feasible assignment
    to complete (its sites off the slowest tier stay where they are)."""
    t0 = time.perf_counter()
    last = problem.ntiers - 1
    assign = np.full(problem.nsites, last, dtype=np.int64)
    memb = _memberships(problem)
    remaining = [[math.inf if c is None else c for c in grp.caps] for grp in problem.groups]
    placed = _take_start(start, last, assign, memb, remaining)
    peak = np.array([max((b for _, b in m), default=0) for m in memb], dtype=float)
    gain = problem.cost[:, last] - problem.cost.min(axis=1)
    density = gain / np.maximum(peak, 1.0)
    for s in np.argsort(-density, kind="stable").tolist():
        if s in problem.fixed:
            assign[s] = problem.fixed[s]
            continue
        if s in placed:
            continue
        _place_cheapest(problem, s, assign, memb[s], remaining)
    return Solution(
        assign=assign,
        objective=objective(problem, assign),
        solver="greedy",
        optimal=False,
        seconds=time.perf_counter() - t0,
    )


def _memberships(problem: Problem) -> list[list[tuple[int, int]]]:
    """Per site: (group, live bytes) of every capacity check it is in."""
    memb: list[list[tuple[int, int]]] = [[] for _ in range(problem.nsites)]
    for g, grp in enumerate(problem.groups):
        for s, b in zip(grp.sites.tolist(), grp.live.tolist(), strict=True):
            memb[s].append((g, b))
    return memb


def _take_start(
    start: np.ndarray | None,
    last: int,
    assign: np.ndarray,
    memb: list[list[tuple[int, int]]],
    remaining: list[list[float]],
) -> set[int]:
    """Puts the start's sites off the slowest tier in place; returns them."""
    placed: set[int] = set()
    if start is None:
        return placed
    for s in np.nonzero(start != last)[0].tolist():
        t = int(start[s])
        assign[s] = t
        placed.add(s)
        for g, b in memb[s]:
            remaining[g][t] -= b
    return placed


def _place_cheapest(
    problem: Problem,
    s: int,
    assign: np.ndarray,
    mine: list[tuple[int, int]],
    remaining: list[list[float]],
) -> None:
    for t in np.argsort(problem.cost[s], kind="stable").tolist():
        if all(remaining[g][t] >= b for g, b in mine):
            for g, b in mine:
                remaining[g][t] -= b
            assign[s] = t
            return


@dataclass
class _IlpModel:
    """The integer program over the free sites: x(i, t) for the tiers t
    faster than the slowest (k of them), costs relative to the slowest."""

    free: np.ndarray  # site indices the solver decides
    assign: np.ndarray  # tier per site, the fixed ones already set
    k: int
    scale: float
    c: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    constraints: list[Any]

    @property
    def nvar(self) -> int:
        return int(self.c.size)


def solve_ilp(problem: Problem, time_limit: float = DEFAULT_TIME_LIMIT_S) -> Solution:
    """The exact integer program, solved by HiGHS."""
    t0 = time.perf_counter()
    s_n, t_n = problem.nsites, problem.ntiers
    free = np.array([s for s in range(s_n) if s not in problem.fixed], dtype=np.int64)
    assign = np.full(s_n, t_n - 1, dtype=np.int64)
    for s, t in problem.fixed.items():
        assign[s] = t
    if free.size == 0:
        return Solution(assign, objective(problem, assign), "ilp-highs", True, 0.0)
    model = _ilp_model(problem, free, assign)
    lp_x = _lp_relaxation(model.c, model.lb, model.ub, model.constraints, time_limit)
    fixed_n = 0
    if lp_x is None:
        incumbent = solve_greedy(problem)
    else:
        incumbent, fixed_n, proven = _lp_incumbent(problem, model, lp_x)
        if proven:
            # The LP bound already proves the incumbent optimal within the gap.
            incumbent.solver, incumbent.optimal = "ilp-highs", True
            incumbent.seconds = time.perf_counter() - t0
            incumbent.note = (
                f"proven within {MIP_REL_GAP:g} of the optimum by the LP bound "
                "(no branching needed)"
            )
            return incumbent
    res = _milp(model, time_limit)
    seconds = time.perf_counter() - t0
    core = f"{model.nvar - fixed_n} of {model.nvar} variables left after reduced-cost fixing"
    if res.x is None:
        return _no_milp_solution(res, incumbent, seconds, core)
    return _ilp_readout(problem, model, res, incumbent, lp_x, seconds, core)


def _ilp_model(problem: Problem, free: np.ndarray, assign: np.ndarray) -> _IlpModel:
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    from scipy.optimize import LinearConstraint
    from scipy.sparse import csr_matrix

    # Variables x(i, t) for the tiers t faster than the slowest only; the
    # slowest tier takes what is left (x(i, last) = 1 - sum_t x(i, t)). The
    # costs are then the time saved against the slowest tier, whose scale
    # does not drown small sites in the sum of large ones, and a variable
    # that saves nothing is left out.
    k = problem.ntiers - 1
    rel = problem.cost[free, :k] - problem.cost[free, k][:, None]
    scale = float(np.abs(rel).max()) or 1.0
    nvar = free.size * k
    c = (rel / scale).ravel()
    ub = (c < 0).astype(float)
    model = _IlpModel(free, assign, k, scale, c, np.zeros(nvar), ub, [])
    if k > 1:
        rows = np.repeat(np.arange(free.size), k)
        a_one = csr_matrix((np.ones(nvar), (rows, np.arange(nvar))), shape=(free.size, nvar))
        model.constraints.append(LinearConstraint(a_one, 0.0, 1.0))
    _add_capacity_rows(problem, model)
    return model


def _add_capacity_rows(problem: Problem, model: _IlpModel) -> None:
    """Capacity rows, each scaled by 1/cap so that tolerances are relative."""
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    from scipy.optimize import LinearConstraint
    from scipy.sparse import csr_matrix

    k, ub, assign = model.k, model.ub, model.assign
    col_of = np.full(problem.nsites, -1, dtype=np.int64)
    col_of[model.free] = np.arange(model.free.size)
    r_i: list[np.ndarray] = []
    c_i: list[np.ndarray] = []
    v_i: list[np.ndarray] = []
    for grp in problem.groups:
        cols_s = col_of[grp.sites]
        inside = cols_s >= 0
        fixed_sites = grp.sites[~inside]
        live = grp.live[inside]
        sc = cols_s[inside]
        for t, cap in enumerate(grp.caps[:k]):
            if cap is None:
                continue
            room = cap - int(grp.live[~inside][assign[fixed_sites] == t].sum())
            sel = (live > 0) & (ub[sc * k + t] > 0)
            if not sel.any():
                continue
            if room <= 0:
                ub[sc[sel] * k + t] = 0.0
                continue
            if int(live[sel].sum()) <= room:
                continue  # cannot bind
            r_i.append(np.full(int(sel.sum()), len(r_i)))
            c_i.append(sc[sel] * k + t)
            v_i.append(live[sel].astype(float) / room)
    if r_i:
        a_cap = csr_matrix(
            (np.concatenate(v_i), (np.concatenate(r_i), np.concatenate(c_i))),
            shape=(len(r_i), model.nvar),
        )
        model.constraints.append(LinearConstraint(a_cap, -np.inf, 1.0))


def _lp_incumbent(
    problem: Problem,
    model: _IlpModel,
    lp_x: tuple[np.ndarray, float, np.ndarray, np.ndarray],
) -> tuple[Solution, int, bool]:
    """The incumbent from LP rounding, how many variables reduced-cost fixing
    settled, and whether the LP bound proves the incumbent optimal."""
    free, k = model.free, model.k
    x_lp, z_lp, red_lo, red_up = lp_x
    # LP rounding: keep what the relaxation put wholly on a tier, then let
    # the greedy fill what is left. Its value is usually within a few
    # items of the bound, which lets reduced-cost fixing settle almost
    # every variable.
    whole = x_lp.reshape(free.size, k) >= 1 - 1e-9
    start = model.assign.copy()
    start[free] = np.where(whole.any(axis=1), np.argmax(whole, axis=1), k)
    incumbent = solve_greedy(problem, start)
    if violations(problem, incumbent.assign):  # LP tolerances: start from scratch
        incumbent = solve_greedy(problem)
    fixed_n = _fix_by_reduced_cost(
        model.c, model.lb, model.ub, incumbent.assign[free], k, x_lp, z_lp, red_lo, red_up
    )
    z_inc = float(
        ((problem.cost[free] - problem.cost[free, k][:, None]) / model.scale)[
            np.arange(free.size), np.minimum(incumbent.assign[free], k - 1)
        ]
        @ (incumbent.assign[free] < k)
    )
    return incumbent, fixed_n, z_inc - z_lp <= MIP_REL_GAP * abs(z_inc)


def _milp(model: _IlpModel, time_limit: float) -> Any:
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    from scipy.optimize import Bounds, milp

    with _native_stdout_silenced():
        return milp(
            model.c,
            integrality=np.ones(model.nvar),
            bounds=Bounds(model.lb, model.ub),
            constraints=model.constraints,
            options={
                "mip_rel_gap": MIP_REL_GAP,
                "time_limit": float(time_limit),
                "presolve": PRESOLVE,
            },
        )


def _no_milp_solution(res: Any, incumbent: Solution, seconds: float, core: str) -> Solution:
    if res.status == 2:
        # Nothing better than the greedy exists: it is optimal.
        incumbent.solver, incumbent.optimal, incumbent.seconds = "ilp-highs", True, seconds
        incumbent.note = core + "; the LP-rounded solution is optimal"
        return incumbent
    incumbent.seconds = seconds
    incumbent.note = f"HiGHS found no solution ({res.message.strip()}); greedy used instead"
    return incumbent


def _ilp_readout(
    problem: Problem,
    model: _IlpModel,
    res: Any,
    incumbent: Solution,
    lp_x: tuple[np.ndarray, float, np.ndarray, np.ndarray] | None,
    seconds: float,
    core: str,
) -> Solution:
    """HiGHS's assignment, repaired and compared with the incumbent."""
    free, k, assign = model.free, model.k, model.assign
    x = np.round(res.x.reshape(free.size, k))
    on = x.max(axis=1) > 0.5
    assign[free] = np.where(on, np.argmax(x, axis=1), k)
    notes = [core]
    optimal = res.status == 0
    if not optimal:
        notes.append(f"HiGHS stopped early ({res.message.strip()}): best solution found")
    bad = violations(problem, assign)
    if bad:
        assign = _repair(problem, assign)
        notes.append("rounding repaired")
    value = objective(problem, assign)
    if incumbent.objective < value:
        assign, value = incumbent.assign, incumbent.objective
        notes.append("the LP-rounded solution was better than HiGHS's")
    if lp_x is not None and not (optimal and not bad):
        notes.extend(_lp_bound_note(problem, k, value, -lp_x[1] * model.scale))
    return Solution(assign, value, "ilp-highs", optimal and not bad, seconds, "; ".join(notes))


def _lp_bound_note(problem: Problem, k: int, value: float, bound: float) -> list[str]:
    """How far from the optimum it can be at most, by the LP bound, as a
    share of the time saved."""
    saved = float(problem.cost[:, k].sum()) - value
    if saved > 0 and bound >= saved:
        return [
            f"the optimum saves at most {100 * (bound - saved) / saved:.3g}% more time (LP bound)"
        ]
    return []


def _lp_relaxation(
    c: np.ndarray, lb: np.ndarray, ub: np.ndarray, constraints: list[Any], time_limit: float
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray] | None:
    """x, objective and reduced costs (at lower, at upper bounds) of the LP
    relaxation; None when HiGHS does not solve it."""
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    from scipy.optimize import linprog
    from scipy.sparse import vstack

    a_ub = b_ub = None
    if constraints:
        a_ub = vstack([con.A for con in constraints]).tocsr()
        b_ub = np.concatenate([np.broadcast_to(con.ub, con.A.shape[0]) for con in constraints])
    with _native_stdout_silenced():
        lp = linprog(
            c,
            A_ub=a_ub,
            b_ub=b_ub,
            bounds=np.column_stack([lb, ub]),
            method="highs",
            options={"time_limit": float(time_limit)},
        )
    if lp.status != 0 or lp.x is None:
        return None
    return lp.x, float(lp.fun), np.asarray(lp.lower.marginals), np.asarray(lp.upper.marginals)


def _fix_by_reduced_cost(
    c: np.ndarray,
    lb: np.ndarray,
    ub: np.ndarray,
    inc_assign: np.ndarray,
    k: int,
    x_lp: np.ndarray,
    z_lp: float,
    red_lo: np.ndarray,
    red_up: np.ndarray,
) -> int:
    """Classic reduced-cost fixing (exact): with the LP bound z_lp and an
    incumbent of value z_inc, a variable whose reduced cost exceeds
    z_inc - z_lp would make any solution worse than the incumbent if it
    left its bound, so it is fixed there. What is left is the "core" that
    branch and bound must decide. Tightens lb/ub in place; returns how many
    variables it fixed."""
    x_inc = np.zeros(c.size)
    on = inc_assign < k
    x_inc[np.nonzero(on)[0] * k + inc_assign[on]] = 1.0
    x_inc *= ub  # a tier choice that saves nothing has the same value at x = 0
    z_inc = float(c @ x_inc)
    gap = z_inc - z_lp
    tol = 1e-9 * max(1.0, abs(z_inc)) + 1e-12
    if gap < -tol:
        return 0  # inconsistent numbers: fix nothing
    gap = max(gap, 0.0)
    fix0 = (x_lp <= 1e-9) & (red_lo > gap + tol) & (ub > 0)
    fix1 = (x_lp >= 1 - 1e-9) & (-red_up > gap + tol) & (ub > 0)
    ub[fix0] = 0.0
    lb[fix1] = 1.0
    return int(fix0.sum() + fix1.sum())


def _repair(problem: Problem, assign: np.ndarray) -> np.ndarray:
    """Moves the least dense sites of an overfull interval one tier slower
    until every capacity holds (only ever needed for solver tolerances)."""
    assign = assign.copy()
    last = problem.ntiers - 1
    for _ in range(problem.nsites * problem.ntiers):
        bad = violations(problem, assign)
        if not bad:
            break
        g, t, _excess = bad[0]
        grp = problem.groups[g]
        on = grp.sites[assign[grp.sites] == t]
        gain = problem.cost[on, last] - problem.cost[on, t]
        victim = int(on[int(np.argmin(gain))])
        assign[victim] = min(last, t + 1)
    return assign


def solve(
    problem: Problem,
    solver: str = "auto",
    max_ilp_sites: int = MAX_ILP_SITES,
    time_limit: float = DEFAULT_TIME_LIMIT_S,
) -> Solution:
    free = problem.nsites - len(problem.fixed)
    if solver == "greedy":
        return solve_greedy(problem)
    if solver == "auto" and free > max_ilp_sites:
        sol = solve_greedy(problem)
        sol.note = (
            f"{free} sites exceed the exact solver's limit ({max_ilp_sites}): greedy "
            "heuristic used, not proven optimal"
        )
        return sol
    return solve_ilp(problem, time_limit)


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
        f"on {tiers[t].name}: saves {saved:.3g} s against {tiers[last].name}"
        f" (accesses-per-byte rank {density_rank})"
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
                f"{tiers[b].name} would save {cost[t] - cost[b]:.3g} s more but the site "
                f"alone needs {format_size(mine)}, more than its {format_size(cap)}"
            )
            continue
        reasons.append(
            f"{tiers[b].name} would save {cost[t] - cost[b]:.3g} s more but is full at this "
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
) -> Advice:
    tiers = list(tiers)
    problem = build_problem(merged, tiers, fast_budget, ranks_per_node)
    sol = solve(problem, solver, max_ilp_sites, time_limit)
    last = len(tiers) - 1
    idx = np.arange(problem.nsites)
    benefit = problem.cost[:, last] - problem.cost[idx, sol.assign]
    order = sorted(
        range(problem.nsites), key=lambda i: (-benefit[i], -merged.sites[i].est_accesses)
    )
    modules = _ModuleTable()
    modules.index(merged.profiles[0].binary)
    if symbolizer is not None:
        symbolizer.prefetch(
            (m.key, m.path, m.build_id, off) for s in merged.sites for m, off in s.frames
        )
    explainer = _Explainer(problem, sol, tiers, explain_top, merged)
    sites = [
        _placed_site(merged, i, sol, benefit, modules, symbolizer, explainer.reason(rank_i, i))
        for rank_i, i in enumerate(order)
    ]
    ranks = ranks_on_nodes(merged, ranks_per_node)
    ptiers = _placement_tiers(tiers, fast_budget, max(ranks))
    t_slow = float(problem.cost[:, last].sum())
    t_fast = float(problem.cost.min(axis=1).sum())
    meta = _placement_meta(merged, sol, fast_budget, max(ranks), profile_names, t_slow, t_fast)
    placement = Placement(meta=meta, tiers=ptiers, modules=modules.modules, sites=sites)
    return Advice(
        placement=placement,
        solution=sol,
        problem=problem,
        tiers=tiers,
        notes=list(problem.notes),
        order=order,
        time_slowest_s=t_slow,
        time_placed_s=sol.objective,
        time_fastest_s=t_fast,
    )


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
        "cost_model": "T(site,tier) = A*B/BW + r*A*L/threads (docs/formats.md)",
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
    ) -> None:
        self.problem, self.sol, self.tiers, self.top = problem, sol, tiers, explain_top
        dens = np.array([s.accesses_per_byte for s in merged.sites])
        self.dens_rank = np.empty(problem.nsites, dtype=np.int64)
        self.dens_rank[np.argsort(-dens, kind="stable")] = np.arange(1, problem.nsites + 1)

    def reason(self, rank_i: int, i: int) -> str:
        if rank_i >= self.top:
            return ""
        return explain(self.problem, self.sol, self.tiers, i, int(self.dens_rank[i]))


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
    if sym is not None:
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
