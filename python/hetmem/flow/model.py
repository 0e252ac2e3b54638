"""The analytical model behind `hetmem flow advise` (see
../shared/notes/anchors-workflow.md section 5), made to follow what the
runner does rather than a closed form, because on a machine with few cores
the closed form's max() of pipelined stages misses most of the cost.

Per configuration (mode, tier, ranks p), each rank is a list of phases per
iteration, with the work of each phase in seconds as if it ran alone:

  writer rank:  [serial: wait until every reader finished step s-1]
                compute Cw(p)  (the spec's kernel on 1/p of the domain,
                                measured here: the light profile)
                [parallel: wait for a free slot: step s-slots released]
                put   (n/p) o_put + (V/p) b_put   (+ first touch of a slot)
                commit s
  reader rank:  wait until every writer committed s
                read  (n/p) o_get + (V/p) b_get
                release s
                analytics A(p)
                [serial: acknowledge s]

o and b come from `hetmem flow calibrate`, measured through the same batch
calls the components make. A fluid simulation then plays the ranks
forward: while k ranks are busy (waiting ranks sleep on a condition
variable and use no CPU), a rank in a phase of kind X advances at
1 / slow_X(k), where slow_X(k) is the calibrated time of one unit of X
while k processes run at once, over its time alone: it carries both CPU
oversubscription (k > cores) and the memory-bandwidth contention of
co-running ranks. Serial mode comes out as the sum of phases, parallel mode
as the pipelined max() with its fill and drain over the iteration count,
contention included; the iteration time is the simulated makespan over the
iterations, as the runner measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetmem.flow import kernels
from hetmem.flow.spec import Spec


@dataclass
class Config:
    mode: str
    tier: str
    ranks: int

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.tier}/p{self.ranks}"


def configurations(tiers: list[str], max_ranks: int = 2) -> list[Config]:
    return [
        Config(m, t, p)
        for m in ("serial", "parallel")
        for t in tiers
        for p in range(1, max_ranks + 1)
    ]


def kernel_times(spec: Spec, ranks: list[int]) -> dict[str, dict[int, float]]:
    """A light profile: one rank's kernel time alone for each rank count."""
    out: dict[str, dict[int, float]] = {"writer": {}, "reader": {}}
    for role in ("writer", "reader"):
        c = getattr(spec, role)
        rep = c.repeat
        if c.kernel != "none" and c.seconds > 0:
            rep = kernels.repeat_for_seconds(c.kernel, c.size, c.seconds)
        for p in ranks:
            out[role][p] = kernels.seconds_per_run(c.kernel, c.size, rep, p, spec.step_bytes // p)
    return out


def slowdown(calib: dict[str, Any], kind: str, k: int) -> float:
    """Time of one unit of `kind` while k ranks are busy, over its time alone.
    Without a measurement: CPU sharing only."""
    cores = max(1, int(calib.get("cores", 1)))
    table = calib.get("concurrency", {}).get(kind)
    if not table:
        return max(1.0, k / cores)
    ks = sorted(int(x) for x in table)
    if k <= 1 or not ks:
        return 1.0
    if str(k) in table:
        return max(1.0, float(table[str(k)]))
    top = ks[-1]
    if k > top:  # past what was measured: time-sharing of the busiest measured state
        return max(1.0, float(table[str(top)]) * k / top)
    lo = max(x for x in ks if x < k)
    hi = min(x for x in ks if x > k)
    a, b = float(table[str(lo)]), float(table[str(hi)])
    return max(1.0, a + (b - a) * (k - lo) / (hi - lo))


def io_costs(spec: Spec, tc: dict[str, Any], p: int) -> tuple[float, float, float]:
    """(put, get, first-touch) seconds of one rank per step, alone."""
    n, size = spec.writer.objects, spec.writer.object_bytes
    v = n * size
    gather = size <= tc.get("gather_max", 1 << 62)
    o_get = tc["get_object_s"] if gather else tc.get("get_view_object_s", tc["get_object_s"])
    b_get = tc["get_byte_s"] if gather else tc.get("get_view_byte_s", tc["get_byte_s"])
    put = n / p * tc["put_object_s"] + v / p * tc["put_byte_s"]
    get = n / p * o_get + v / p * b_get
    touch = v / p * float(tc.get("first_touch_byte_s", 0.0))
    return put, get, touch


def first_read(spec: Spec, tc: dict[str, Any], p: int) -> float:
    """Extra seconds of a reader rank's first step (its gather buffer's pages)."""
    size = spec.writer.object_bytes
    if size > tc.get("gather_max", 1 << 62):
        return 0.0
    return spec.step_bytes / p * float(tc.get("first_read_byte_s", 0.0))


@dataclass
class _Phase:
    kind: str  # slowdown table to use; "" for a signal or wait
    work: float = 0.0
    wait: tuple[str, int] | None = None  # ("step"|"slot"|"ack", step)
    signal: tuple[str, int] | None = None  # ("commit"|"release"|"done", step)


def _program(
    role: str,
    iters: int,
    serial: bool,
    slots: int,
    compute: float,
    ckind: str,
    io: float,
    touch: float,
    iokind: str,
    analytics: float,
    akind: str,
) -> list[_Phase]:
    out: list[_Phase] = []
    for s in range(iters):
        if role == "writer":
            if serial and s > 0:
                out.append(_Phase("", wait=("done", s - 1)))
            if compute > 0:
                out.append(_Phase(ckind, compute))
            if s >= slots:
                out.append(_Phase("", wait=("release", s - slots)))
            out.append(_Phase(iokind, io + (touch if s < slots else 0.0)))
            out.append(_Phase("", signal=("commit", s)))
        else:
            out.append(_Phase("", wait=("commit", s)))
            out.append(_Phase(iokind, io + (touch if s == 0 else 0.0)))
            out.append(_Phase("", signal=("release", s)))
            if analytics > 0:
                out.append(_Phase(akind, analytics))
            out.append(_Phase("", signal=("done", s)))
    return out


def simulate(
    programs: list[list[_Phase]], counts: dict[str, int], calib: dict[str, Any]
) -> tuple[float, dict[str, float]]:
    """Plays the ranks' programs forward; returns the makespan and the busy
    seconds per phase kind summed over ranks."""
    # signals: how many ranks have raised (name, step)
    raised: dict[tuple[str, int], int] = {}
    need = {"commit": counts["writer"], "release": counts["reader"], "done": counts["reader"]}
    pc = [0] * len(programs)
    left = [0.0] * len(programs)  # work left in the current phase
    busy: dict[str, float] = {}
    t = 0.0
    for _ in range(10_000_000):
        # advance every rank through signals and satisfied waits, until a
        # pass changes nothing (a signal may release a rank seen earlier)
        moved = True
        while moved:
            moved = False
            for i, prog in enumerate(programs):
                while pc[i] < len(prog) and left[i] <= 0.0:
                    ph = prog[pc[i]]
                    if ph.signal is not None:
                        raised[ph.signal] = raised.get(ph.signal, 0) + 1
                    elif ph.wait is not None:
                        if raised.get(ph.wait, 0) < need[ph.wait[0]]:
                            break
                    elif ph.work > 0:
                        left[i] = ph.work
                        break
                    pc[i] += 1
                    moved = True
        active = [i for i in range(len(programs)) if left[i] > 0.0]
        if not active:
            if all(pc[i] >= len(p) for i, p in enumerate(programs)):
                return t, busy
            raise RuntimeError("flow model: the ranks' programs deadlock")
        k = len(active)
        rates = {i: 1.0 / slowdown(calib, programs[i][pc[i]].kind, k) for i in active}
        dt = min(left[i] / rates[i] for i in active)
        t += dt
        for i in active:
            kind = programs[i][pc[i]].kind
            busy[kind] = busy.get(kind, 0.0) + dt
            left[i] -= dt * rates[i]
            if left[i] <= 1e-12:  # done: the advance loop moves past it
                pc[i] += 1
                left[i] = 0.0
    raise RuntimeError("flow model: simulation did not finish")


def predict(
    spec: Spec, calib: dict[str, Any], ktimes: dict[str, dict[int, float]], cfg: Config
) -> dict[str, Any]:
    tc = calib["tiers"].get(cfg.tier)
    if tc is None:
        raise KeyError(cfg.tier)
    cores = max(1, int(calib.get("cores", 1)))
    p = cfg.ranks
    serial = cfg.mode == "serial"
    slots = 1 if serial else spec.slots
    cw, a = ktimes["writer"][p], ktimes["reader"][p]
    put, get, touch = io_costs(spec, tc, p)
    rtouch = first_read(spec, tc, p)
    iokind = f"io:{cfg.tier}"
    wk, rk = spec.writer.kernel, spec.reader.kernel
    iters = spec.iterations
    progs = [
        _program("writer", iters, serial, slots, cw, wk, put, touch, iokind, 0.0, "")
        for _ in range(p)
    ] + [
        _program("reader", iters, serial, slots, 0.0, "", get, rtouch, iokind, a, rk)
        for _ in range(p)
    ]
    makespan, _busy = simulate(progs, {"writer": p, "reader": p}, calib)
    per_it = makespan / iters
    w_side, r_side = cw + put, get + a
    if serial:
        reason = "interleaved: the phases add up"
    elif 2 * p > cores and (w_side + r_side) * slowdown(calib, wk or "io", 2 * p) / 2 >= max(
        w_side, r_side
    ):
        reason = f"CPU-bound ({2 * p} ranks on {cores} cores)"
    elif w_side >= r_side:
        reason = "writer binds, reader hidden"
    else:
        reason = "reader binds, writer hidden"
    return {
        "config": cfg.label,
        "mode": cfg.mode,
        "tier": cfg.tier,
        "ranks": p,
        "iteration_s": per_it,
        "writer_compute_s": cw,
        "writer_io_s": put,
        "reader_io_s": get,
        "reader_compute_s": a,
        "reason": reason,
    }


def advise(
    spec: Spec,
    calib: dict[str, Any],
    tiers: list[str] | None = None,
    max_ranks: int = 2,
    ktimes: dict[str, dict[int, float]] | None = None,
) -> list[dict[str, Any]]:
    """Every configuration's predicted iteration time, best first."""
    tiers = tiers or list(calib["tiers"])
    missing = [t for t in tiers if t not in calib["tiers"]]
    if missing:
        from hetmem.errors import UsageError

        raise UsageError(
            f"tier {missing[0]} is not calibrated; run `hetmem flow calibrate --tier {missing[0]}`"
        )
    ranks = list(range(1, max_ranks + 1))
    kt = ktimes or kernel_times(spec, ranks)
    rows = [predict(spec, calib, kt, c) for c in configurations(tiers, max_ranks)]
    rows.sort(key=lambda r: r["iteration_s"])
    best = rows[0]["iteration_s"]
    for r in rows:
        r["predicted_slowdown"] = r["iteration_s"] / best if best > 0 else 1.0
    return rows
