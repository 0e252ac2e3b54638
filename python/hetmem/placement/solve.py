# SPDX-License-Identifier: BSD-3-Clause
"""Solving the placement problem: the exact integer program (HiGHS, after
an LP bound, LP rounding and reduced-cost fixing), the greedy by benefit
density, and the choice between them (hetmem.placement.problem states the
model)."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hetmem._numpy import np
from hetmem.placement.limits import DEFAULT_TIME_LIMIT_S, MAX_ILP_SITES
from hetmem.placement.problem import Problem, Solution, objective, violations
from hetmem.sizes import format_num

# HiGHS stops when the proven gap to the optimum is below this fraction of
# the time saved: far below what the cost model can resolve.
MIP_REL_GAP = 1e-5
PRESOLVE = False


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
    if free.size == 0 or t_n == 1:  # nothing to decide: one tier takes every site
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
            f"the optimum saves at most {format_num(100 * (bound - saved) / saved)}% more time "
            "(LP bound)"
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
