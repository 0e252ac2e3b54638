# SPDX-License-Identifier: BSD-3-Clause
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
calls the components make; `advise` replaces them with a light profile of
the spec itself: its kernels and its own objects timed in this process for
each rank count (how the work scales with ranks), brought to the level of
one short serial one-rank run of the workflow per tier (run_profile: the
components' own phases, cold caches and fresh processes included), plus
that run's hand-off time per serial iteration; each larger rank count gets
a serial run of its own that sets its figures directly. A fluid simulation then plays the ranks
forward: while k ranks are busy (waiting ranks sleep on a condition
variable and use no CPU), a rank in a phase of kind X advances at
1 / slow_X(k), where slow_X(k) is the calibrated time of one unit of X
while k processes run at once, over its time alone: it carries both CPU
oversubscription (k > cores) and the memory-bandwidth contention of
co-running ranks. Serial mode comes out as the sum of phases, parallel mode
as the pipelined max() with its fill and drain over the iteration count,
contention included; the iteration time is the simulated makespan over the
iterations, as the runner measures it.

Two probes of the spec itself refine slow_X where one kind of work meets
another: a compute phase takes its slowdown from the spec's own writer and
reader kernels measured together in that very mix of ranks (mix_probe,
mixed_slowdown) rather than from k processes of one kind; and a side's I/O,
while the other side's I/O runs beside it (only parallel mode does that),
costs the extra CPU seconds that the spec's bare I/O pipeline measured over
its serial run (io_overlap_profile).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from hetmem.errors import EnvironmentProblem, HetmemError, UsageError
from hetmem.flow import calibrate, kernels, locality, runner, runoff
from hetmem.flow.cpuload import (
    busy_cpu_seconds,  # noqa: F401  (flow.sweep reads model.busy_cpu_seconds)
    cpu_factor,
    external_load,
)
from hetmem.flow.spec import Spec


@dataclass
class Config:
    mode: str
    tier: str
    ranks: int

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.tier}/p{self.ranks}"


def configurations(tiers: list[str], ranks: list[int]) -> list[Config]:
    return [Config(m, t, p) for m in ("serial", "parallel") for t in tiers for p in ranks]


def rank_counts(spec: Spec, max_ranks: int) -> list[int]:
    """The rank counts up to max_ranks that split the writer's objects
    evenly: the only ones `flow run` accepts, so the only ones to advise."""
    return [p for p in range(1, max_ranks + 1) if spec.writer.objects % p == 0]


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


def mix_probe(spec: Spec, p: int) -> dict[str, dict[str, float]]:
    """calibrate.mix_now for the spec's own kernels at p ranks."""

    def job(c: Any) -> tuple[str, int, int]:
        rep = c.repeat
        if c.kernel != "none" and c.seconds > 0:
            rep = kernels.repeat_for_seconds(c.kernel, c.size, c.seconds)
        return (c.kernel, c.size, rep)

    return calibrate.mix_now(job(spec.writer), job(spec.reader), p, reps=1)


def contention(calib: dict[str, Any], kind: str, k: int) -> float:
    """Memory-side slowdown of a unit of `kind` with k ranks on their own
    cores (CPU sharing factored out); past the core count only `cores` run."""
    cores = max(1, int(calib.get("cores", 1)))
    table = calib.get("contention", {}).get(kind)
    k = min(k, cores)
    if not table or k <= 1:
        return 1.0
    if str(k) in table:
        return max(1.0, float(table[str(k)]))
    top = max(int(x) for x in table)
    return max(1.0, float(table[str(min(k, top))]))


def _table(table: dict[str, float], k: int) -> float:
    ks = sorted(int(x) for x in table)
    if k <= 1 or not ks:
        return 1.0
    if str(k) in table:
        return max(1.0, float(table[str(k)]))
    top = ks[-1]
    if k > top:  # past what was measured: time-sharing of the busiest state
        return max(1.0, float(table[str(top)]) * k / top)
    lo = max(x for x in ks if x < k)
    hi = min(x for x in ks if x > k)
    a, b = float(table[str(lo)]), float(table[str(hi)])
    return max(1.0, a + (b - a) * (k - lo) / (hi - lo))


def slowdown(calib: dict[str, Any], kind: str, k: int, load: float = 0.0) -> float:
    """Time of one unit of `kind` while k ranks are busy over its time with
    one rank busy. With a probe taken just now ("concurrency_now": k
    processes of this session running the kind at once) that is measured
    directly, whatever the scheduler does with the other load (autogroups
    share CPU per session, not per process). Otherwise: the calibrated
    memory-side contention times CPU sharing with `load` other busy CPUs."""
    now = calib.get("concurrency_now", {}).get(kind)
    if now:
        return _table(now, k)
    cores = max(1, int(calib.get("cores", 1)))
    return contention(calib, kind, k) * cpu_factor(k, load, cores) / cpu_factor(1, load, cores)


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


def io_profile(spec: Spec, tiers: list[str], ranks: list[int]) -> dict[str, dict[str, float]]:
    """The light profile of the I/O: one writer rank's put of its share of a
    step and one reader rank's read of its share, each alone, through the
    components' own code on the spec's own objects, per tier and rank
    count; steady state and the extra of the first steps (fresh pages)."""
    n, size = spec.writer.objects, spec.writer.object_bytes
    out: dict[str, dict[str, float]] = {}
    for tier in tiers:
        for p in ranks:
            if n % p:
                continue
            try:
                r = calibrate.measure_steps(tier, n // p, size)
            except HetmemError:  # cannot be profiled here: the calibration's figures
                continue
            out[f"{tier}/p{p}"] = {
                "put": r["put"],
                "get": r["get"],
                "put_touch": max(0.0, r["put_first"] - r["put"]),
                "get_touch": max(0.0, r["get_first"] - r["get"]),
            }
    return out


def io_overlap_profile(spec: Spec, io: dict[str, dict[str, float]]) -> dict[str, Any]:
    """How much more a side's I/O costs while the other side's I/O runs at
    the same time, from the spec's own I/O: the workflow with both kernels
    removed, run serial (one side at a time) and parallel (the writer puts
    step s+1 while the reader reads step s; two slots) at each profiled
    tier and rank count, compared in the ranks' own CPU seconds per I/O
    phase, so that the sharing of cores with each other and with other
    load drops out and what is left is what the overlap does to the work
    itself: memory bandwidth shared by two copies of a step, cache lines
    moving between the cores, the second slot's fresh pages (measured on
    this machine: a writer's put 5-30% more CPU time in parallel mode,
    which k processes of one kind on separate channels never see). Sets
    io[key]["overlap"] = {"wi": writer factor, "ri": reader factor}."""

    bare = replace(
        spec,
        writer=replace(spec.writer, kernel="none", seconds=0.0),
        reader=replace(spec.reader, kernel="none", seconds=0.0),
    )
    out: dict[str, Any] = {}
    for key, v in io.items():
        tier, p = key.rsplit("/p", 1)
        memo = (spec.writer.objects, spec.writer.object_bytes, spec.iterations, spec.slots, key)
        if memo not in _OVERLAP:
            try:
                got = {
                    m: runner.run(bare.with_config(mode=m, tier=tier, ranks=int(p)))
                    for m in ("serial", "parallel")
                }
            except HetmemError:
                continue
            f = {}
            for role, tag in (("writer", "wi"), ("reader", "ri")):
                ser = got["serial"][role].get("io_cpu", 0.0)
                par = got["parallel"][role].get("io_cpu", 0.0)
                f[tag] = min(3.0, max(1.0, par / ser)) if ser > 0 else 1.0
            _OVERLAP[memo] = f
        v["overlap"] = dict(_OVERLAP[memo])
        out[key] = v["overlap"]
    return out


# io_overlap_profile's factors by (objects, bytes, iterations, slots,
# tier/pN): CPU seconds, so other load does not move them; a sweep that
# advises again when the load moves reuses them
_OVERLAP: dict[tuple[Any, ...], dict[str, float]] = {}


# The light profile's runs per configuration: until PROFILE_S of workflow
# time, at most PROFILE_RUNS, the median counts. Five, not three: a short
# spec (small-io, 0.2 s a run) had one slow set of three reference runs
# (2.22 ms per iteration against the 1.5 ms its sweep then measured) move
# two predictions by 50%; a long spec still takes one run.
PROFILE_S, PROFILE_RUNS = 1.0, 5


def _profile_runs(
    spec: Spec, tier: str, ranks: int, mode: str = "serial", least: int = 1
) -> list[dict[str, Any]]:
    """Runs of the spec (serial unless told) until PROFILE_S of workflow
    time (at most PROFILE_RUNS), and at least `least` of them: a short run
    is at the mercy of one scheduling hiccup."""
    got: list[dict[str, Any]] = []
    try:
        while len(got) < PROFILE_RUNS and (
            len(got) < least or sum(x["makespan_s"] for x in got) < PROFILE_S
        ):
            got.append(runner.run(spec.with_config(mode=mode, tier=tier, ranks=ranks)))
    except HetmemError:
        pass
    return got


# A parallel reference run's measured / predicted time is kept within this
# range: beyond it the run met something the other configurations will not.
PARALLEL_REF_RANGE = (0.5, 2.0)

# Parallel reference runs per rank count, at least: their median then
# stands against one run in a slow mode. Ranks sharing 2 cores run
# bimodally, and PROFILE_S ends a 0.56 s spec's reference at two runs,
# whose median is their mean: in one full sweep, miniamr-io's one-rank
# reference came out 1.56 times the model and put every parallel one-rank
# prediction 50% high (the advised configuration came out 6% from the
# best). Parallel runs of the specs take 0.3-0.7 s, so the third run costs
# at most that per rank count.
PARALLEL_REF_RUNS = 3


def parallel_reference(
    spec: Spec,
    tiers: list[str],
    kt: dict[str, dict[int, float]],
    io: dict[str, dict[str, float]],
    calib: dict[str, Any],
    load: float,
) -> dict[str, Any]:
    """Parallel mode's level, as run_profile gives serial mode's: for each
    rank count, short parallel runs of the spec on one tier, and the ratio
    of their median iteration time to what the model predicts for that
    configuration. predict() scales every parallel configuration of that
    rank count by it, on every tier. The tier is the one whose parallel
    configuration the model ranks first at that rank count (the spec's own
    channel tier on a tie): the run checks the configuration most likely to
    be advised. Parallel mode is where the model's pieces meet (the ranks of
    both sides sharing the cores, their caches and memory bandwidth, the
    pipeline's hand-offs), and its predictions erred most: in a 12-spec
    sweep, serial ones were within 8% and parallel ones from -17% to +38%
    (4 ranks on 2 cores: compute-heavy specs slower than the fluid sharing
    of the cores, small-object ones faster). Returns {"ranks": {p: {"tier",
    "measured_s", "predicted_s", "factor"}}}."""
    profiled = [t for t in tiers if f"{t}/p1" in io]
    out: dict[str, Any] = {"ranks": {}}
    lo, hi = PARALLEL_REF_RANGE
    cal = {k: v for k, v in calib.items() if k != "parallel_ref"}
    ranks = sorted({int(k.rsplit("/p", 1)[1]) for k in io if k.rsplit("/p", 1)[0] in profiled})
    for p in ranks:
        pred = {
            t: predict(spec, cal, kt, Config("parallel", t, p), io, load)["iteration_s"]
            for t in profiled
            if f"{t}/p{p}" in io
        }
        if not pred:
            continue
        tier = min(pred, key=lambda t: (pred[t], t != spec.tier))
        got = _profile_runs(spec, tier, p, mode="parallel", least=PARALLEL_REF_RUNS)
        if not got:
            continue
        measured = statistics.median(x["iteration_s"] for x in got)
        if pred[tier] <= 0 or measured <= 0:
            continue
        out["ranks"][str(p)] = {
            "tier": tier,
            "measured_s": measured,
            "predicted_s": pred[tier],
            "factor": min(hi, max(lo, measured / pred[tier])),
        }
    return out


def _cpu_share(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase of a serial one-rank profile run ("w", "wi": the writer's
    compute and I/O; "ri", "r": the reader's), the share of its clock time
    that the rank spent on a CPU: what a serial iteration loses off-CPU
    (wake-ups after the hand-off, other load while one side runs). Parallel
    mode's phases run back to back without those hand-offs (measured: a
    writer's stencil in parallel mode takes its CPU seconds on the clock,
    in serial mode 5-10% more), so its predictions take the work at this
    share. 1 where the runs carry no CPU seconds; never below 0.5."""
    out = {}
    for tag, role, ph in (
        ("w", "writer", "compute"),
        ("wi", "writer", "io"),
        ("ri", "reader", "io"),
        ("r", "reader", "compute"),
    ):
        wall = statistics.median(x[role][ph] for x in runs)
        cpu = [x[role].get(f"{ph}_cpu") for x in runs]
        if wall <= 0 or any(c is None for c in cpu):
            out[tag] = 1.0
            continue
        out[tag] = min(1.0, max(0.5, statistics.median(cpu) / wall))
    return out


def _sync(runs: list[dict[str, Any]]) -> float:
    """What a serial iteration takes beyond its four phases (the hand-offs)."""
    phases = [("writer", "compute"), ("writer", "io"), ("reader", "io"), ("reader", "compute")]
    return statistics.median(
        max(0.0, x["iteration_s"] - sum(x[a][b] for a, b in phases)) for x in runs
    )


def run_profile(
    spec: Spec,
    tiers: list[str],
    kt: dict[str, dict[int, float]],
    io: dict[str, dict[str, float]],
    calib: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The light profile of the workflow itself: one serial run with one
    rank per component on each tier (the spec's iterations; one process busy
    at a time, so each phase runs as if alone). The phases of the runner's
    own processes differ from the same work timed in this process: their
    I/O meets cold caches on another core and fresh pages, their kernels
    start cold after the other side's I/O (measured on this machine under
    other helpers' load: the runner's serial put 1.2-5x, its read 1.1-3.8x
    and the analytics kernel 1.5-3x the in-process figures). So the
    in-process figures keep giving how the work scales with ranks, and
    this run gives their level: kt and io are scaled in place by the ratio
    of run to in-process figure at one rank, first-use extras are then
    part of the run's per-iteration means (set to 0), and what a serial
    iteration takes beyond its four phases (the hand-offs: wake-ups of the
    waiting side) becomes a per-iteration "sync" cost of serial mode.

    With several ranks per component the one-rank level is not enough: on
    few cores the ranks of a side meet load imbalance at every hand-off and
    their I/O meets the other rank's (measured: serial two-rank
    configurations 10-90% slower than the one-rank level scaled by the
    in-process figures). So each rank count p > 1 that was profiled gets a
    serial p-rank run of its own: its phases, divided by the slowdown of p
    ranks busy at once that the simulation applies (calib's
    "concurrency_now", when given), set that rank count's kernel and I/O
    figures and its own sync cost."""
    comp: dict[str, list[float]] = {"writer": [], "reader": []}
    out: dict[str, Any] = {}
    for tier in tiers:
        if f"{tier}/p1" in io:
            _profile_tier(spec, tier, io, comp, out)
    for role in ("writer", "reader"):
        base = kt[role].get(1, 0.0)
        if comp[role] and base > 0:
            f = sum(comp[role]) / len(comp[role]) / base
            kt[role] = {p: t * f for p, t in kt[role].items()}
            out[f"{role}_compute"] = f
    _profile_ranks(spec, tiers, kt, io, calib or {}, out)
    return out


def _profile_tier(
    spec: Spec,
    tier: str,
    io: dict[str, dict[str, float]],
    comp: dict[str, list[float]],
    out: dict[str, Any],
) -> None:
    """run_profile's one-rank run on one tier: scales that tier's I/O
    figures in place and adds its compute medians to comp."""
    key = f"{tier}/p1"
    got = _profile_runs(spec, tier, 1)
    if not got:
        return

    def med(role: str, what: str, runs: list[dict[str, Any]] = got) -> float:
        return statistics.median(x[role][what] for x in runs)

    w = {k: med("writer", k) for k in ("compute", "io")}
    rd = {k: med("reader", k) for k in ("compute", "io")}
    r = {"iteration_s": statistics.median(x["iteration_s"] for x in got)}
    fput = w["io"] / io[key]["put"] if io[key]["put"] > 0 else 1.0
    fget = rd["io"] / io[key]["get"] if io[key]["get"] > 0 else 1.0
    sync = _sync(got)
    share = _cpu_share(got)
    for k, v in io.items():
        if k.startswith(f"{tier}/p"):
            v["put"] *= fput
            v["get"] *= fget
            v["put_touch"] = v["get_touch"] = 0.0
            v["sync"] = sync
            v["cpu"] = dict(share)
    comp["writer"].append(w["compute"])
    comp["reader"].append(rd["compute"])
    out[tier] = {
        "iteration_s": r["iteration_s"],
        "runs": len(got),
        "put": fput,
        "get": fget,
        "sync": sync,
    }


def _profile_ranks(
    spec: Spec,
    tiers: list[str],
    kt: dict[str, dict[int, float]],
    io: dict[str, dict[str, float]],
    calib: dict[str, Any],
    out: dict[str, Any],
) -> None:
    """The serial p-rank runs of run_profile, for every profiled p > 1."""
    kinds = {"writer": spec.writer.kernel, "reader": spec.reader.kernel}
    ranks = sorted({int(k.rsplit("/p", 1)[1]) for k in io} - {1})
    for p in ranks:
        comp: dict[str, list[float]] = {"writer": [], "reader": []}
        for tier in tiers:
            key = f"{tier}/p{p}"
            if key not in io or f"{tier}/p1" not in io:
                continue
            got = _profile_runs(spec, tier, p)
            if not got:
                continue
            s_io = slowdown(calib, f"io:{tier}", p) if calib else 1.0

            def med(role: str, what: str, runs: list[dict[str, Any]] = got) -> float:
                return statistics.median(x[role][what] for x in runs)

            io[key]["put"] = med("writer", "io") / s_io
            io[key]["get"] = med("reader", "io") / s_io
            io[key]["put_touch"] = io[key]["get_touch"] = 0.0
            io[key]["sync"] = _sync(got)
            mix = calib.get("mix_now", {}).get(str(p))
            for role in ("writer", "reader"):
                tag = role[0]
                s_k = mixed_slowdown(mix, tag, [tag] * p)
                if s_k is None:
                    s_k = slowdown(calib, kinds[role], p) if calib else 1.0
                comp[role].append(med(role, "compute") / s_k)
            # the CPU share stays the one-rank run's (see _cpu_share): a
            # p-rank run's clock time over its CPU seconds is mostly the
            # sharing of the cores, which only a noisy probe could take out
            # (tried: reader-bound's parallel p2 then came out 9-13% low)
            out[key] = {"runs": len(got), "sync": io[key]["sync"]}
        for role in ("writer", "reader"):
            if comp[role] and kinds[role] != "none":
                kt[role][p] = sum(comp[role]) / len(comp[role])


@dataclass
class _Phase:
    kind: str  # slowdown table to use; "" for a signal or wait
    work: float = 0.0
    wait: tuple[str, int] | None = None  # ("step"|"slot"|"ack", step)
    signal: tuple[str, int] | None = None  # ("commit"|"release"|"done", step)
    role: str = ""  # "w"/"r": writer's/reader's compute; "wi"/"ri": their I/O


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
    sync: float = 0.0,
) -> list[_Phase]:
    out: list[_Phase] = []
    for s in range(iters):
        if role == "writer":
            if serial and s > 0:
                out.append(_Phase("", wait=("done", s - 1)))
            if serial and sync > 0:
                out.append(_Phase("sync", sync))
            if compute > 0:
                out.append(_Phase(ckind, compute, role="w"))
            if s >= slots:
                out.append(_Phase("", wait=("release", s - slots)))
            out.append(_Phase(iokind, io + (touch if s < slots else 0.0), role="wi"))
            out.append(_Phase("", signal=("commit", s)))
        else:
            out.append(_Phase("", wait=("commit", s)))
            out.append(_Phase(iokind, io + (touch if s == 0 else 0.0), role="ri"))
            out.append(_Phase("", signal=("release", s)))
            if analytics > 0:
                out.append(_Phase(akind, analytics, role="r"))
            out.append(_Phase("", signal=("done", s)))
    return out


def mixed_slowdown(
    mix: dict[str, dict[str, float]] | None, role: str, active: list[str]
) -> float | None:
    """A compute phase's slowdown from the table of the spec's own kernels
    measured together (calibrate.mix_now): `active` holds the role of every
    busy rank ("w", "r", or "" for I/O and hand-offs), role is this rank's.
    A busy rank in I/O counts as one of the other side (it is not this
    kernel), or of this side where the other is full. None where the table
    has no such mix."""
    if not mix or role not in mix:
        return None
    a = sum(1 for x in active if x == "w")
    b = sum(1 for x in active if x == "r")
    c = len(active) - a - b
    for own in range(c + 1):  # I/O ranks to the other side first
        key = f"{a + own},{b + c - own}" if role == "w" else f"{a + c - own},{b + own}"
        if key in mix[role]:
            return max(1.0, float(mix[role][key]))
    return None


def simulate(
    programs: list[list[_Phase]],
    counts: dict[str, int],
    calib: dict[str, Any],
    load: float = 0.0,
    mix: dict[str, dict[str, float]] | None = None,
    io_mix: dict[str, float] | None = None,
) -> tuple[float, dict[str, float]]:
    """Plays the ranks' programs forward; returns the makespan and the busy
    seconds per phase kind summed over ranks. mix: the spec's own kernels
    measured together at this rank count (see mixed_slowdown); compute
    phases take their slowdown from it where it has the mix at hand, any
    other phase from the per-kind table of k busy ranks. io_mix: the extra
    work of a writer's ("wi") or reader's ("ri") I/O while the other side's
    I/O runs at the same time (io_overlap_profile)."""
    # signals: how many ranks have raised (name, step)
    raised: dict[tuple[str, int], int] = {}
    need = {"commit": counts["writer"], "release": counts["reader"], "done": counts["reader"]}
    pc = [0] * len(programs)
    left = [0.0] * len(programs)  # work left in the current phase
    busy: dict[str, float] = {}
    t = 0.0
    for _ in range(10_000_000):
        _advance(programs, pc, left, raised, need)
        active = [i for i in range(len(programs)) if left[i] > 0.0]
        if not active:
            if all(pc[i] >= len(p) for i, p in enumerate(programs)):
                return t, busy
            raise RuntimeError("flow model: the ranks' programs deadlock")
        k = len(active)
        roles = [programs[i][pc[i]].role for i in active]
        rates = {}
        for i in active:
            sd = _phase_slowdown(programs[i][pc[i]], roles, k, calib, load, mix, io_mix)
            rates[i] = 1.0 / sd
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


def _advance(
    programs: list[list[_Phase]],
    pc: list[int],
    left: list[float],
    raised: dict[tuple[str, int], int],
    need: dict[str, int],
) -> None:
    """Advances every rank through signals and satisfied waits, until a
    pass changes nothing (a signal may release a rank seen earlier)."""
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


def _phase_slowdown(
    ph: _Phase,
    roles: list[str],
    k: int,
    calib: dict[str, Any],
    load: float,
    mix: dict[str, dict[str, float]] | None,
    io_mix: dict[str, float] | None,
) -> float:
    """How much slower than alone a phase runs among k busy ranks."""
    sd = mixed_slowdown(mix, ph.role, roles) if ph.role in ("w", "r") else None
    if sd is None:
        sd = slowdown(calib, ph.kind, k, load)
    if io_mix and ph.role in ("wi", "ri"):
        other = "ri" if ph.role == "wi" else "wi"
        if other in roles:
            sd *= max(1.0, float(io_mix.get(ph.role, 1.0)))
    return sd


def predict(
    spec: Spec,
    calib: dict[str, Any],
    ktimes: dict[str, dict[int, float]],
    cfg: Config,
    io: dict[str, dict[str, float]] | None = None,
    load: float = 0.0,
) -> dict[str, Any]:
    """One configuration's iteration time. ktimes and io are times alone on
    an idle machine (see advise); load: other CPUs' worth of work sharing
    the cores meanwhile."""
    tc = calib["tiers"].get(cfg.tier)
    if tc is None:
        raise KeyError(cfg.tier)
    cores = max(1, int(calib.get("cores", 1)))
    p = cfg.ranks
    serial = cfg.mode == "serial"
    slots = 1 if serial else spec.slots
    cw, a, put, get, touch, rtouch, sync = _phase_costs(spec, tc, ktimes, cfg, io)
    iokind = f"io:{cfg.tier}"
    wk, rk = spec.writer.kernel, spec.reader.kernel
    iters = spec.iterations
    progs = [
        _program("writer", iters, serial, slots, cw, wk, put, touch, iokind, 0.0, "", sync)
        for _ in range(p)
    ] + [
        _program("reader", iters, serial, slots, 0.0, "", get, rtouch, iokind, a, rk)
        for _ in range(p)
    ]
    mix = calib.get("mix_now", {}).get(str(p))
    io_mix = (io or {}).get(f"{cfg.tier}/p{p}", {}).get("overlap")
    makespan, _busy = simulate(progs, {"writer": p, "reader": p}, calib, load, mix, io_mix)
    per_it = makespan / iters
    ref = (calib.get("parallel_ref") or {}).get("ranks", {}).get(str(p))
    if ref and not serial:
        per_it *= float(ref["factor"])
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
        "reason": _binding_reason(serial, p, load, cores, cw + put, get + a),
        "external_load": load,
        "parallel_ref_factor": float(ref["factor"]) if ref and not serial else None,
    }


def _phase_costs(
    spec: Spec,
    tc: dict[str, Any],
    ktimes: dict[str, dict[int, float]],
    cfg: Config,
    io: dict[str, dict[str, float]] | None,
) -> tuple[float, float, float, float, float, float, float]:
    """Writer compute, reader compute, put, get, first-use extras of put
    and get, and the serial hand-off cost of one configuration."""
    p = cfg.ranks
    cw, a = ktimes["writer"][p], ktimes["reader"][p]
    prof = (io or {}).get(f"{cfg.tier}/p{p}")
    sync = 0.0
    if prof is not None:
        put, get, touch, rtouch = prof["put"], prof["get"], prof["put_touch"], prof["get_touch"]
        sync = float(prof.get("sync", 0.0))
        cpu = prof.get("cpu")
        if cpu and cfg.mode != "serial":  # see _cpu_share
            cw, a = cw * cpu.get("w", 1.0), a * cpu.get("r", 1.0)
            put, get = put * cpu.get("wi", 1.0), get * cpu.get("ri", 1.0)
    else:
        put, get, touch = io_costs(spec, tc, p)
        rtouch = first_read(spec, tc, p)
    return cw, a, put, get, touch, rtouch, sync


def _binding_reason(
    serial: bool, p: int, load: float, cores: int, w_side: float, r_side: float
) -> str:
    if serial:
        return "interleaved: the phases add up"
    f = cpu_factor(2 * p, load, cores)
    if f > 1 and (w_side + r_side) * f / 2 >= max(w_side, r_side):
        return f"CPU-bound ({2 * p} ranks on {cores} cores)"
    if w_side >= r_side:
        return "writer binds, reader hidden"
    return "reader binds, writer hidden"


def advise(
    spec: Spec,
    calib: dict[str, Any],
    tiers: list[str] | None = None,
    max_ranks: int = 2,
    ktimes: dict[str, dict[int, float]] | None = None,
    load: float | None = None,
    inputs: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every configuration's predicted iteration time, best first. Unless
    given a load, profiles the spec's kernels and I/O here and probes how k
    busy ranks share the cores right now (a few seconds): the machine as
    the runs that follow will find it. `inputs`, when given, receives what
    the predictions were made from (load, kernel times, I/O profile,
    concurrency probes, the runoff's runs), so that they can be replayed:
    see replay(). Profiled here, the configurations the model cannot tell
    apart are run a few times and the fastest of them comes first
    (flow/runoff.py); the others follow by prediction."""
    tiers = tiers or list(calib["tiers"])
    missing = [t for t in tiers if t not in calib["tiers"]]
    if missing:
        raise UsageError(
            f"tier {missing[0]} is not calibrated; run `hetmem flow calibrate --tier {missing[0]}`"
        )
    tiers = [t for t in tiers if _runs_here(spec, t)]
    ranks = rank_counts(spec, max_ranks)
    io = None
    if load is None:
        load, kt, io, calib = _profile_here(spec, calib, tiers, ranks, ktimes)
    else:
        kt = ktimes or kernel_times(spec, ranks)
    if inputs is not None:
        inputs.update(
            load=load,
            ktimes={r: {str(p): t for p, t in v.items()} for r, v in kt.items()},
            io=io,
            concurrency_now=calib.get("concurrency_now"),
            mix_now=calib.get("mix_now"),
            parallel_ref=calib.get("parallel_ref"),
        )
    rows = [predict(spec, calib, kt, c, io, load) for c in configurations(tiers, ranks)]
    rows.sort(key=lambda r: r["iteration_s"])
    runs = runoff.run(spec, rows) if io is not None else {}
    if inputs is not None:
        inputs["runoff"] = runs
    return _ranking(rows, runs)


def _ranking(rows: list[dict[str, Any]], runs: dict[str, list[float]]) -> list[dict[str, Any]]:
    """rows (sorted by prediction) with the runoff's choice first."""
    best = rows[0]["iteration_s"]
    for r in rows:
        r["predicted_slowdown"] = r["iteration_s"] / best if best > 0 else 1.0
        got = runs.get(r["config"])
        r["runoff_s"] = statistics.median(got) if got else None
    won = runoff.pick({r["config"]: r["iteration_s"] for r in rows}, runs)
    first = next(r for r in rows if r["config"] == won)
    if won != rows[0]["config"]:
        n = sum(1 for r in rows if r["runoff_s"] is not None)
        first["reason"] = (
            f"measured fastest of the {n} configurations predicted within "
            f"{runoff.RUNOFF_WITHIN:.0%} of each other; {first['reason']}"
        )
    return [first] + [r for r in rows if r is not first]


def _runs_here(spec: Spec, tier: str) -> bool:
    """Whether the spec can run on the tier here: a locality tier needs two
    sockets and the spec's CPU bindings on two nodes, one side on each."""
    if not locality.is_local(tier):
        return True
    try:
        locality.sides(spec.writer.cpus, spec.reader.cpus)
    except (UsageError, EnvironmentProblem):
        return False
    return True


def _profile_here(
    spec: Spec,
    calib: dict[str, Any],
    tiers: list[str],
    ranks: list[int],
    ktimes: dict[str, dict[int, float]] | None,
) -> tuple[float, dict[str, dict[int, float]], dict[str, dict[str, float]], dict[str, Any]]:
    """advise's measurements on this machine now: the external load, kernel
    times, the I/O profile and a copy of calib with the probes of now."""
    load = external_load(0.3)
    kt = ktimes or kernel_times(spec, ranks)
    io = io_profile(spec, tiers, ranks)
    # how k ranks of this session share the cores right now, for the
    # kinds of work this spec has (the profile below is the k = 1 case,
    # and its p-rank runs are brought back to it with these)
    kinds = sorted({c.kernel for c in (spec.writer, spec.reader)} - {"none"})
    kinds += [f"io:{t}" for t in tiers if any(k.startswith(f"{t}/") for k in io)]
    calib = dict(calib)
    calib["concurrency_now"] = calibrate.concurrency_now(kinds, 2 * len(ranks))
    # and how the spec's own writer and reader kernels slow each other
    # in every mix the configurations can have (per rank count: each
    # rank's share of the domain)
    calib["mix_now"] = {str(p): mix_probe(spec, p) for p in ranks}
    # and what the two sides' I/O at once does to each one's I/O
    io_overlap_profile(spec, io)
    run_profile(spec, tiers, kt, io, calib)
    calib["parallel_ref"] = parallel_reference(spec, tiers, kt, io, calib, load)
    return load, kt, io, calib


def replay(
    spec: Spec, calib: dict[str, Any], inputs: dict[str, Any], configs: list[str]
) -> dict[str, float]:
    """The predictions advise() made from `inputs` (what it filled in, as
    saved by `hetmem flow sweep --json` under "advisor_inputs"), made again
    by this model: a change to the model can be judged offline against a
    sweep's measurements without running the workflows again. configs:
    labels "mode/tier/pN"; returns {label: predicted seconds per iteration}."""
    cal = dict(calib)
    cal["concurrency_now"] = inputs.get("concurrency_now") or {}
    cal["mix_now"] = inputs.get("mix_now") or {}
    cal["parallel_ref"] = inputs.get("parallel_ref") or {}
    kt = {r: {int(p): float(t) for p, t in v.items()} for r, v in inputs["ktimes"].items()}
    out = {}
    for label in configs:
        mode, rest = label.split("/", 1)
        tier, p = rest.rsplit("/p", 1)
        cfg = Config(mode, tier, int(p))
        out[label] = predict(spec, cal, kt, cfg, inputs.get("io"), float(inputs["load"]))[
            "iteration_s"
        ]
    return out
