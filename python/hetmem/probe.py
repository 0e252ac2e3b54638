# SPDX-License-Identifier: BSD-3-Clause
"""Tier characterization: measure every memory and storage tier of this machine.

The measurements themselves are in libhetmem (src/probe/), one native call per
step through hm_probe_json; this module decides what to measure (memory nodes,
thread counts, storage directories, quick or full), shows progress, builds the
versioned result and caches it per machine (hetmem.run.cache, kind "probe").
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem._native import Context
from hetmem.errors import SchemaError, UsageError
from hetmem.run import cache
from hetmem.sizes import format_size

SCHEMA_VERSION = 1
CACHE_KIND = "probe"
NODE_SYSFS = Path("/sys/devices/system/node")


@dataclass
class Plan:
    """What one probe run measures and how hard."""

    quick: bool = False
    nodes: list[int] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    storage: list[str] = field(default_factory=list)
    storage_bytes: int = 0
    array_bytes: int = 0  # 0: 4x the last-level cache (chosen natively)
    loaded_latency: bool = True  # latency while other threads stream reads
    stream_reps: int = 10
    latency_loads: int = 4_000_000
    latency_reps: int = 5
    rand_seconds: float = 1.0
    qds: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    block_bytes: int = 1 << 20
    seq_depth: int = 8


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]; raises ValueError on anything else."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi) if hi else int(lo)
        if a < 0 or b < a:
            raise ValueError(part)
        out.extend(range(a, b + 1))
    return out


def memory_nodes() -> list[int]:
    """NUMA nodes with memory on the live machine (node 0 without NUMA)."""
    try:
        return parse_cpulist((NODE_SYSFS / "has_memory").read_text()) or [0]
    except (OSError, ValueError):
        return [0]


def allowed_cpus() -> int:
    return len(os.sched_getaffinity(0))


def storage_tier_name(path: str) -> str:
    return f"storage:{path}"


def make_plan(
    ctx: Context,
    *,
    quick: bool,
    nodes: Sequence[int] | None = None,
    threads: Sequence[int] | None = None,
    storage: Sequence[str] | None = None,
    storage_bytes: int = 0,
    array_bytes: int = 0,
) -> Plan:
    """Checks the user's choices and fills in the defaults."""
    have = memory_nodes()
    ncpu = allowed_cpus()
    if nodes:
        for n in nodes:
            if n not in have:
                raise UsageError(f"NUMA node {n} has no memory (nodes with memory: {have})")
    if threads:
        for t in threads:
            if not 1 <= t <= ncpu:
                raise UsageError(f"--threads {t}: this process may use 1..{ncpu} CPUs")
    # Resolved like the tier inventory does, so that names match there.
    dirs = [os.path.realpath(d) for d in (storage or [ctx.default_storage_dir()])]
    plan = Plan(
        quick=quick,
        nodes=list(dict.fromkeys(nodes)) if nodes else have,
        threads=sorted(set(threads)) if threads else list(range(1, ncpu + 1)),
        storage=list(dict.fromkeys(dirs)),
    )
    if quick:
        plan.stream_reps = 3
        plan.latency_loads = 1_000_000
        plan.latency_reps = 3
        plan.rand_seconds = 0.25
        plan.storage_bytes = 256 << 20
        plan.loaded_latency = False
    else:
        plan.storage_bytes = 1 << 30
    if storage_bytes:
        plan.storage_bytes = storage_bytes
    plan.array_bytes = array_bytes
    return plan


def _stream_request(plan: Plan, node: int, threads: int) -> dict[str, Any]:
    req: dict[str, Any] = {
        "test": "stream",
        "numa_node": node,
        "threads": threads,
        "repetitions": plan.stream_reps,
    }
    if plan.array_bytes:
        req["array_bytes"] = plan.array_bytes
    return req


def _storage_request(plan: Plan, path: str, check_only: bool = False) -> dict[str, Any]:
    req: dict[str, Any] = {
        "test": "storage",
        "dir": path,
        "file_bytes": plan.storage_bytes,
        "block_bytes": plan.block_bytes,
        "seq_depth": plan.seq_depth,
        "qds": list(plan.qds),
        "rand_seconds": plan.rand_seconds,
    }
    if check_only:
        req["check_only"] = True
    return req


def request(ctx: Context, req: dict[str, Any]) -> dict[str, Any]:
    """One native measurement (hm_probe_json)."""
    return ctx.call_json("hm_probe_json", json.dumps(req).encode())


def run(plan: Plan, ctx: Context, show_progress: bool = True) -> dict[str, Any]:
    """Measures every tier of the plan; returns the versioned result."""
    # Refuse bad directories before minutes of memory measurements.
    for path in plan.storage:
        request(ctx, _storage_request(plan, path, check_only=True))

    steps: list[tuple[str, Callable[[], None]]] = []
    tiers: list[dict[str, Any]] = []
    for node in plan.nodes:
        tier: dict[str, Any] = {
            "name": f"node{node}",
            "kind": "memory",
            "numa_node": node,
            "stream": [],
            "best": {},
            "latency_ns": None,
        }
        tiers.append(tier)
        steps += _memory_steps(ctx, plan, node, tier)
    for path in plan.storage:
        stier: dict[str, Any] = {"name": storage_tier_name(path), "kind": "storage", "path": path}
        tiers.append(stier)
        steps.append(
            (f"{storage_tier_name(path)}: O_DIRECT", _storage_step(ctx, plan, path, stier))
        )

    started = time.monotonic()
    with output.progress(show_progress) as prog:
        task = prog.add_task("probe", total=len(steps))
        for desc, step in steps:
            prog.update(task, description=desc)
            step()
            prog.advance(task)
    for tier in tiers:
        if tier["kind"] == "memory" and tier["stream"]:
            best = max(tier["stream"], key=lambda s: s["triad_gbs"])
            tier["best"] = {"triad_gbs": best["triad_gbs"], "threads": best["threads"]}
    return {
        "schema_version": SCHEMA_VERSION,
        "machine": cache.machine_key(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": plan.quick,
        "seconds": round(time.monotonic() - started, 2),
        "tiers": tiers,
    }


def _memory_steps(
    ctx: Context, plan: Plan, node: int, tier: dict[str, Any]
) -> list[tuple[str, Callable[[], None]]]:
    """The measurements of one NUMA node, each filling its part of tier."""
    steps: list[tuple[str, Callable[[], None]]] = []
    for t in plan.threads:
        steps.append(
            (
                f"node{node}: STREAM, {t} thread{'s' if t > 1 else ''}",
                _stream_step(ctx, plan, node, t, tier),
            )
        )
    steps.append((f"node{node}: latency", _latency_step(ctx, plan, node, tier)))
    if plan.loaded_latency:
        tier["loaded_latency"] = []
        for k in range(1, allowed_cpus()):
            steps.append(
                (
                    f"node{node}: loaded latency, {k} load threads",
                    _loaded_step(ctx, plan, node, k, tier),
                )
            )
    return steps


def _stream_step(
    ctx: Context, plan: Plan, node: int, t: int, tier: dict[str, Any]
) -> Callable[[], None]:
    def step() -> None:
        r = request(ctx, _stream_request(plan, node, t))
        tier["array_bytes"] = r["array_bytes"]
        tier["stream"].append(
            {k: r[k] for k in ("threads", "copy_gbs", "scale_gbs", "add_gbs", "triad_gbs")}
        )

    return step


def _latency_step(ctx: Context, plan: Plan, node: int, tier: dict[str, Any]) -> Callable[[], None]:
    def step() -> None:
        r = request(
            ctx,
            {
                "test": "latency",
                "numa_node": node,
                "loads": plan.latency_loads,
                "repetitions": plan.latency_reps,
                **({"buffer_bytes": plan.array_bytes} if plan.array_bytes else {}),
            },
        )
        tier["latency_ns"] = r["ns_per_load"]
        tier["latency_buffer_bytes"] = r["buffer_bytes"]

    return step


def _loaded_step(
    ctx: Context, plan: Plan, node: int, k: int, tier: dict[str, Any]
) -> Callable[[], None]:
    def step() -> None:
        r = request(
            ctx,
            {
                "test": "latency",
                "numa_node": node,
                "loads": plan.latency_loads // 2,
                "repetitions": plan.latency_reps,
                "load_threads": k,
                **({"buffer_bytes": plan.array_bytes} if plan.array_bytes else {}),
            },
        )
        tier["loaded_latency"].append(
            {
                "load_threads": k,
                "latency_ns": r["ns_per_load"],
                "load_gbs": r["load_gbs"],
            }
        )

    return step


def _storage_step(ctx: Context, plan: Plan, path: str, stier: dict[str, Any]) -> Callable[[], None]:
    def step() -> None:
        r = request(ctx, _storage_request(plan, path))
        stier.update(
            {
                "seq_read_gbs": r["seq_read_gbs"],
                "seq_write_gbs": r["seq_write_gbs"],
                "file_bytes": r["file_bytes"],
                "block_bytes": r["block_bytes"],
                "seq_depth": r["seq_depth"],
                "randread": [
                    {k: p[k] for k in ("qd", "iops", "lat_us_mean", "lat_us_p50", "lat_us_p99")}
                    for p in r["randread"]
                ],
            }
        )

    return step


def save(result: dict[str, Any]) -> Path:
    return cache.save(CACHE_KIND, result)


def load_cached() -> dict[str, Any] | None:
    """This machine's cached probe result, or None; SchemaError if unusable."""
    data = cache.load(CACHE_KIND)
    if data is None:
        return None
    if data.get("schema_version") != SCHEMA_VERSION or not isinstance(data.get("tiers"), list):
        raise SchemaError(
            f"cached probe result {cache.result_path(CACHE_KIND)} has schema "
            f"{data.get('schema_version')!r}, expected {SCHEMA_VERSION}; run `hetmem probe` again"
        )
    return data


def print_tables(result: dict[str, Any]) -> None:
    mem = [t for t in result["tiers"] if t["kind"] == "memory"]
    sto = [t for t in result["tiers"] if t["kind"] == "storage"]
    if mem:
        _print_memory(mem)
    loaded = [
        [t["name"], p["load_threads"], round(p["load_gbs"], 1), round(p["latency_ns"], 1)]
        for t in mem
        for p in t.get("loaded_latency", [])
    ]
    if loaded:
        output.table(
            "loaded latency (threads streaming reads on other CPUs)",
            ["tier", "load threads", "load GB/s", "latency ns"],
            loaded,
        )
    if sto:
        _print_storage(sto)


def _print_memory(mem: list[dict[str, Any]]) -> None:
    rows = [
        [
            t["name"],
            s["threads"],
            round(s["copy_gbs"], 1),
            round(s["scale_gbs"], 1),
            round(s["add_gbs"], 1),
            round(s["triad_gbs"], 1),
        ]
        for t in mem
        for s in t["stream"]
    ]
    output.table(
        "memory tiers: STREAM GB/s by thread count",
        ["tier", "threads", "copy", "scale", "add", "triad"],
        rows,
    )
    _print_idle_latency(mem)


def _print_idle_latency(mem: list[dict[str, Any]]) -> None:
    """One row per tier: the latency is measured once, by one thread."""
    rows = [
        [
            t["name"],
            format_size(t["latency_buffer_bytes"]) if t.get("latency_buffer_bytes") else None,
            round(t["latency_ns"], 1),
        ]
        for t in mem
        if t.get("latency_ns")
    ]
    if rows:
        output.table(
            "memory idle latency",
            ["tier", "chase buffer", "ns (1 thread)"],
            rows,
        )


def _print_storage(sto: list[dict[str, Any]]) -> None:
    qds = sorted({p["qd"] for t in sto for p in t["randread"]})
    rows = []
    for t in sto:
        by_qd = {p["qd"]: p for p in t["randread"]}
        rows.append(
            [
                t["name"],
                round(t["seq_read_gbs"], 2),
                round(t["seq_write_gbs"], 2),
                *[round(by_qd[q]["iops"] / 1000, 1) if q in by_qd else None for q in qds],
            ]
        )
    output.table(
        "storage tiers (GB/s; 4 KiB random-read kIOPS by queue depth)",
        ["tier", "seq read", "seq write", *[f"qd{q}" for q in qds]],
        rows,
    )
    lat_rows = []
    for t in sto:
        for p in t["randread"]:
            lat_rows.append(
                [
                    t["name"],
                    p["qd"],
                    round(p["lat_us_mean"], 1),
                    round(p["lat_us_p50"], 1),
                    round(p["lat_us_p99"], 1),
                ]
            )
    output.table(
        "storage 4 KiB random-read latency (us)",
        ["tier", "qd", "mean", "p50", "p99"],
        lat_rows,
    )
