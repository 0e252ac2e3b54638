# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem flow calibrate`: what the advisor's model needs from this machine
(cached as the "flow-calibration" result):

- per channel tier, the cost of one rank's put of a step and of its read
  (one batch call each, every byte summed), through the very code the
  workflow components run (component.Writing / component.Reading), as a
  cost per object plus a cost per byte (least squares over 4.5 KB to
  16 MiB objects), and the extra cost of a step's first use of fresh pages
  (a new channel slot for the writer, the gather buffer for the reader);
- contention: the time of one unit of each kind of work (the stencil and
  polynomial kernels, the tier's put+read) while k = 1..cores processes
  run it at once, over its time alone ("concurrency"), and the same with
  the CPU sharing with other load on the machine (measured from
  /proc/stat meanwhile) factored out ("contention"): what is left is the
  memory side, which the model multiplies with its own CPU-sharing factor
  (ranks + other load over cores) to get how a writer and a reader
  computing at once on shared cores slow each other;
- the channel's large-object bandwidth against the number of concurrent
  streams and its per-object cost, measured in C (hm_chan_bench_json),
  reported beside the Python-level costs.

On a machine with two sockets the locality tiers (local:writer,
local:reader: the seed's LocW and LocR) are calibrated too: the put runs on
the writer's node, the read on the reader's, the channel on the local
side's node (hetmem.flow.locality). The C figures of a locality tier are
those of its node tier, unbound: they do not tell the two sides apart.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from hetmem import _native
from hetmem._numpy import np
from hetmem.errors import SchemaError
from hetmem.flow import channel as chan
from hetmem.flow import component, cpuload, kernels, locality
from hetmem.probe import memory_nodes
from hetmem.run import cache

KIND = "flow-calibration"
SCHEMA = 2
SMALL, LARGE = 4608, 4 << 20
# (objects, bytes) per step of the put/read fit: the shipped specs' range
POINTS = [(3000, 4608), (600, 4608), (200, 64 << 10), (48, 256 << 10), (12, 4 << 20), (4, 16 << 20)]


def default_tiers() -> list[str]:
    tiers = ["dram"]
    nodes = memory_nodes()
    if len(nodes) > 1:  # with one node, node:0 is the dram tier again
        tiers += [f"node:{n}" for n in nodes]
    if locality.available():
        tiers += list(locality.TIERS)
    with _native.Context() as ctx:
        tiers.append(f"file:{ctx.default_storage_dir()}")
    return tiers


def _sides(tier: str) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """(channel tier, writer CPUs, reader CPUs): a locality tier on its
    node, each side on its own; any other tier unbound."""
    if not locality.is_local(tier):
        return tier, (), ()
    s = locality.sides([], [])
    return s.node_tier(tier), s.writer_cpus, s.reader_cpus


def measure_steps(tier: str, count: int, size: int, steps: int = 5) -> dict[str, Any]:
    """Seconds per step of the components' put and read of count objects of
    size bytes (slots=2, as in parallel mode): first uses and steady state.
    A locality tier: each side bound to its own node meanwhile."""
    tier, wcpus, rcpus = _sides(tier)
    name = f"cal-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    chan.create(
        name, tier, slots=2, slot_bytes=count * ((size + 63) // 64 * 64) + 4096, max_objects=count
    )
    try:
        keys = [f"w0.o{j}" for j in range(count)]
        with locality.running_on(wcpus):  # each side's buffers on its node
            wr = component.Writing(keys, size, 1)
        with locality.running_on(rcpus):
            rd = component.Reading(keys, size)
        puts, gets = [], []
        with chan.Channel(name, "writer", tier) as w, chan.Channel(name, "reader", tier) as r:
            for s in range(steps):
                with locality.running_on(wcpus):
                    t0 = time.perf_counter()
                    wr.write(w, s)
                    t1 = time.perf_counter()
                with locality.running_on(rcpus):
                    r.wait(s, timeout=60)
                    t2 = time.perf_counter()
                    _, bad = rd.read(r, s)
                    r.release(s)
                    t3 = time.perf_counter()
                if bad:
                    raise RuntimeError("calibration read a torn step")
                puts.append(t1 - t0)
                gets.append(t3 - t2)
        steady_p = float(np.median(puts[2:]))
        steady_g = float(np.median(gets[1:]))
        return {
            "n": count,
            "v": count * size,
            "put": steady_p,
            "get": steady_g,
            "put_first": (puts[0] + puts[1]) / 2,
            "get_first": gets[0],
        }
    finally:
        chan.unlink(name, tier)


def _fit(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Least squares t = n o + v b, relative errors weighted alike."""
    a = np.array([[r["n"] / r[key], r["v"] / r[key]] for r in rows])
    y = np.ones(len(rows))
    (o, b), *_ = np.linalg.lstsq(a, y, rcond=None)
    if o < 0 or b < 0:  # fall back to the two ends
        small, large = rows[0], rows[-1]
        b = max(
            0.0,
            (large[key] / large["n"] - small[key] / small["n"])
            / (large["v"] / large["n"] - small["v"] / small["n"]),
        )
        o = max(0.0, small[key] / small["n"] - b * small["v"] / small["n"])
    return float(o), float(b)


def python_costs(tier: str) -> dict[str, Any]:
    rows = [measure_steps(tier, n, size) for n, size in POINTS]
    gmax = component.GATHER_MAX
    gathered = [r for r in rows if r["v"] / r["n"] <= gmax]
    viewed = [r for r in rows if r["v"] / r["n"] > gmax]
    po, pb = _fit(rows, "put")
    go, gb = _fit(gathered, "get")
    vo, vb = _fit(viewed, "get") if len(viewed) >= 2 else (go, gb)
    big = [r for r in rows if r["v"] >= 32 << 20] or rows[-1:]
    touch = float(np.median([max(0.0, r["put_first"] - r["put"]) / r["v"] for r in big]))
    bigg = [r for r in gathered if r["v"] >= 8 << 20] or gathered[-1:]
    rtouch = float(np.median([max(0.0, r["get_first"] - r["get"]) / r["v"] for r in bigg]))
    return {
        "put_object_s": po,
        "put_byte_s": pb,
        "get_object_s": go,
        "get_byte_s": gb,
        "get_view_object_s": vo,
        "get_view_byte_s": vb,
        "gather_max": gmax,
        "first_touch_byte_s": touch,
        "first_read_byte_s": rtouch,
        "points": rows,
    }


# ---- concurrency: k processes running the same kind of work ----


def _unit(kind: str) -> Callable[[], object]:
    """One unit of work of a kind, built in the process that runs it."""
    if kind == "stencil":
        k = kernels.Kernel("stencil", 500, 4)
        return k.run
    if kind == "poly":
        k = kernels.Kernel("poly", 400000, 16)
        return k.run
    tier, wcpus, rcpus = _sides(kind.split(":", 1)[1])
    name = f"calk-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    count, size = 256, 16 << 10
    chan.create(name, tier, slots=2, slot_bytes=count * size + 4096, max_objects=count)
    keys = [f"w0.o{j}" for j in range(count)]
    with locality.running_on(wcpus):
        wr = component.Writing(keys, size, 1)
    with locality.running_on(rcpus):
        rd = component.Reading(keys, size)
    w = chan.Channel(name, "writer", tier)
    r = chan.Channel(name, "reader", tier)
    chan.unlink(name, tier)  # the open handles keep it mapped
    step = [0]

    def io() -> None:
        s = step[0]
        with locality.running_on(wcpus):
            wr.write(w, s)
        with locality.running_on(rcpus):
            r.wait(s, timeout=60)
            rd.read(r, s)
            r.release(s)
        step[0] = s + 1

    return io


def _worker(kind: str, seconds: float, barrier: Any, q: Any) -> None:
    try:
        fn = _unit(kind)
        fn()
        fn()
        barrier.wait(timeout=60)
        t_end = time.perf_counter() + seconds
        times = []
        while True:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
            if t + times[-1] >= t_end:
                break
        q.put(float(np.mean(times)))
    except Exception as exc:
        q.put(f"{type(exc).__name__}: {exc}")


def _gather(procs: list[Any], q: Any, timeout: float) -> list[Any]:
    """Starts the worker processes and returns what each put on q (a worker
    that failed puts its error as a string, raised here); stragglers are
    killed."""
    for p in procs:
        p.start()
    try:
        got = [q.get(timeout=timeout) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    errs = [g for g in got if isinstance(g, str)]
    errs += [g[1] for g in got if isinstance(g, tuple) and isinstance(g[1], str)]
    if errs:
        raise RuntimeError(f"calibration worker failed: {errs[0]}")
    return got


def unit_time(kind: str, k: int, seconds: float = 0.6) -> float:
    """Mean time of one unit of kind over k processes running it at once."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(k)
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, seconds, barrier, q)) for _ in range(k)]
    return float(np.mean(_gather(procs, q, 120)))


def concurrency(
    kinds: list[str], max_k: int, reps: int = 2
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], float]:
    """Per kind: the measured slowdown with k = 1..max_k processes at once,
    and the memory-side contention left once the CPU sharing with the
    other load measured meanwhile is factored out; and that load."""
    raw: dict[str, dict[str, float]] = {}
    mem: dict[str, dict[str, float]] = {}
    loads = []
    for kind in kinds:
        # interleave the k's, best of reps: other load on a shared machine
        # only ever adds time
        best = {k: float("inf") for k in range(1, max_k + 1)}
        ratio = {k: float("inf") for k in range(1, max_k + 1)}
        for _ in range(reps):
            load = cpuload.external_load(0.3)
            loads.append(load)
            t = {k: unit_time(kind, k) for k in range(1, max_k + 1)}
            for k in best:
                best[k] = min(best[k], t[k])
                f = cpuload.cpu_factor(k, load, max_k) / cpuload.cpu_factor(1, load, max_k)
                ratio[k] = min(ratio[k], t[k] / t[1] / f)
        raw[kind] = {str(k): best[k] / best[1] for k in best}
        mem[kind] = {str(k): max(1.0, ratio[k]) for k in best}
    return raw, mem, float(np.median(loads)) if loads else 0.0


def concurrency_now(kinds: list[str], max_k: int, seconds: float = 0.25) -> dict[str, Any]:
    """Per kind, {k: time of a unit with k processes at once over k = 1},
    k = 1..max_k, measured now (k interleaved, one pass)."""
    out: dict[str, Any] = {}
    for kind in kinds:
        t = {k: unit_time(kind, k, seconds) for k in range(1, max_k + 1)}
        out[kind] = {str(k): t[k] / t[1] for k in t}
    return out


def calibrate_tier(tier: str, max_streams: int = 2) -> dict[str, Any]:
    out = python_costs(tier)
    tier = _sides(tier)[0]  # the C bench: a locality tier's node, unbound
    out["streams"] = {}
    for k in range(1, max_streams + 1):
        b = chan.bench(tier, objects=16, object_bytes=LARGE, steps=4, streams=k)
        out["streams"][str(k)] = {
            "put_gbs": b["aggregate_put_gbs"],
            "get_gbs": b["aggregate_get_gbs"],
        }
    alone = chan.bench(tier, objects=16, object_bytes=LARGE, steps=6, streams=1, mix=False)
    mixed = chan.bench(tier, objects=16, object_bytes=LARGE, steps=6, streams=1, mix=True)
    t_put = alone["put_mean_ns_per_object"]
    t_get = alone["get_copy_mean_ns_per_object"]
    out["kappa"] = max(0.0, mixed["put_mean_ns_per_object"] / max(t_put, t_get) - 1.0)
    small = chan.bench(tier, objects=2000, object_bytes=SMALL, steps=4, streams=1)
    out["c_put_ns_per_object"] = small["put_ns_per_object"]
    out["c_get_view_ns_per_object"] = small["get_view_ns_per_object"]
    out["memcpy_ns_per_object"] = small["memcpy_ns_per_object"]
    return out


def run(
    tiers: list[str] | None = None,
    max_streams: int = 2,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": SCHEMA,
        "machine": cache.machine_key(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cores": len(os.sched_getaffinity(0)),
        "tiers": {},
    }
    tiers = tiers or default_tiers()
    for t in tiers:
        if progress:
            progress(t)
        data["tiers"][t] = calibrate_tier(t, max_streams)
    if progress:
        progress("concurrency")
    raw, mem, load = concurrency(
        ["stencil", "poly", *(f"io:{t}" for t in tiers)], int(data["cores"])
    )
    data["concurrency"], data["contention"], data["external_load"] = raw, mem, load
    cache.save(KIND, data)
    return data


def load() -> dict[str, Any] | None:
    data = cache.load(KIND)
    if data is None:
        return None
    if data.get("schema_version") != SCHEMA or not isinstance(data.get("tiers"), dict):
        raise SchemaError(
            f"{cache.result_path(KIND)}: flow calibration of another version; "
            "run `hetmem flow calibrate` again"
        )
    return data


# ---- the spec's own kernels running together ----


def _mix_worker(
    job: tuple[str, str, int, int, int], seconds: float, barrier: Any, done: Any, n: int, q: Any
) -> None:
    """Runs one rank's kernel over and over; records its units until it has
    `seconds` of them, then keeps running (unrecorded) until every worker
    has its own, so that each recorded unit met the full mix."""
    tag, kind, size, repeat, ranks = job
    try:
        k = kernels.Kernel(kind, size, repeat, ranks)
        k.run()
        barrier.wait(timeout=120)
        t0 = time.perf_counter()
        times: list[float] = []
        counted = False
        while True:
            t = time.perf_counter()
            k.run()
            dt = time.perf_counter() - t
            if not counted:
                times.append(dt)
                if t + dt - t0 >= seconds:
                    counted = True
                    with done.get_lock():
                        done.value += 1
            if counted and done.value >= n:
                break
        q.put((tag, float(np.mean(times))))
    except Exception as exc:
        q.put((tag, f"{type(exc).__name__}: {exc}"))


def _mix_once(jobs: list[tuple[str, str, int, int, int]], seconds: float) -> dict[str, float]:
    """Mean unit time per tag (mean over that tag's workers), all at once."""
    ctx = mp.get_context("fork")
    barrier, done, q = ctx.Barrier(len(jobs)), ctx.Value("i", 0), ctx.Queue()
    procs = [
        ctx.Process(target=_mix_worker, args=(j, seconds, barrier, done, len(jobs), q))
        for j in jobs
    ]
    got = _gather(procs, q, 300)
    out: dict[str, list[float]] = {}
    for tag, t in got:
        out.setdefault(tag, []).append(float(t))
    return {tag: float(np.mean(v)) for tag, v in out.items()}


def mix_now(
    writer: tuple[str, int, int],
    reader: tuple[str, int, int],
    p: int,
    seconds: float = 0.25,
    reps: int = 2,
) -> dict[str, dict[str, float]]:
    """How the spec's own compute phases slow each other when they run at
    once, measured now: the writer's kernel and the reader's kernel, each
    at one rank's share of p ranks, for every mix of a writer ranks and b
    reader ranks computing together (0 <= a, b <= p). Returns
    {"w": {"a,b": slowdown}, "r": {"a,b": slowdown}}: the time of one of
    the writer's (reader's) units in that mix over its time alone. A
    kernel of kind "none" has no table. This is what the model's fluid
    simulation needs where a writer and a reader of different kinds share
    the cores: k processes of one kind (concurrency_now) differ from a
    mix of a memory-bound stencil and a compute-bound polynomial, and
    from each other's cache footprint once the ranks time-share a core.
    Each mix is measured reps times in interleaved passes and the best
    kept: other load on a shared machine only ever adds time."""
    roles = {"w": writer, "r": reader}
    live = {t: c for t, c in roles.items() if c[0] != "none"}
    out: dict[str, dict[str, float]] = {t: {} for t in live}
    if not live:
        return out
    mixes = [(a, b) for a in range(p + 1) for b in range(p + 1) if a + b > 0]
    mixes = [(a, b) for a, b in mixes if _mix_runs(a, b, live)]
    times = _mix_times(writer, reader, p, mixes, seconds, reps)
    for t in live:
        alone = times[(1, 0) if t == "w" else (0, 1)][t]
        for (a, b), got in times.items():
            if t in got:
                out[t][f"{a},{b}"] = got[t] / alone
    return out


def _mix_runs(a: int, b: int, live: dict[str, Any]) -> bool:
    """Whether a mix of a writers and b readers has only sides that compute."""
    return (a == 0 or "w" in live) and (b == 0 or "r" in live)


def _mix_times(
    writer: tuple[str, int, int],
    reader: tuple[str, int, int],
    p: int,
    mixes: list[tuple[int, int]],
    seconds: float,
    reps: int,
) -> dict[tuple[int, int], dict[str, float]]:
    """The best time per unit of each side in each mix, over reps passes."""
    times: dict[tuple[int, int], dict[str, float]] = {}
    for _ in range(max(1, reps)):
        for a, b in mixes:
            jobs = [("w", *writer, p)] * a + [("r", *reader, p)] * b
            got = _mix_once(jobs, seconds)
            old = times.setdefault((a, b), got)
            for t, v in got.items():
                old[t] = min(old[t], v)
    return times
