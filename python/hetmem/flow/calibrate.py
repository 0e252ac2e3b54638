"""`hetmem flow calibrate`: what the advisor's model needs from this machine,
per channel tier (cached as the "flow-calibration" result):

- the cost of one put and of one get-and-read through the path the workflow
  components use (Python ranks), as a constant per object plus a cost per
  byte (a two-point fit: 4.5 KB and 4 MiB objects);
- the channel's large-object bandwidth against the number of concurrent
  streams (1..max_streams), measured in C by hm_chan_bench_json;
- the slowdown when a writer and a reader hit the tier at the same time
  (kappa = mixed time / max(put time, get time) - 1).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from hetmem import cache
from hetmem import channel as chan
from hetmem.errors import SchemaError

KIND = "flow-calibration"
SCHEMA = 1
SMALL, LARGE = 4608, 4 << 20


def default_tiers() -> list[str]:
    tiers = ["dram"]
    try:
        nodes = sorted(
            int(n[4:])
            for n in os.listdir("/sys/devices/system/node")
            if n.startswith("node") and n[4:].isdigit()
        )
    except OSError:
        nodes = []
    if len(nodes) > 1:  # with one node, node:0 is the dram tier again
        tiers += [f"node:{n}" for n in nodes]
    storage = os.environ.get("HETMEM_STORAGE") or os.environ.get("TMPDIR") or "/var/tmp"
    tiers.append(f"file:{storage}")
    return tiers


def _python_path(tier: str, size: int, count: int, steps: int = 4) -> tuple[float, float]:
    """Best seconds per object of the components' put loop and get+read loop."""
    name = f"cal-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    chan.create(
        name, tier, slots=2, slot_bytes=count * ((size + 63) // 64 * 64) + 4096, max_objects=count
    )
    try:
        buf = np.random.default_rng(1).integers(0, 255, size * count, dtype=np.uint8)
        objs = [buf[j * size : (j + 1) * size] for j in range(count)]
        keys = [f"o{j}" for j in range(count)]
        dt = np.int64 if size % 8 == 0 else np.uint8
        best_put = best_get = float("inf")
        with chan.Channel(name, "writer", tier) as w, chan.Channel(name, "reader", tier) as r:
            for s in range(steps):
                t0 = time.perf_counter()
                for k, o in zip(keys, objs, strict=True):
                    w.put(k, s, o)
                w.commit(s)
                t1 = time.perf_counter()
                r.wait(s, timeout=60)
                t2 = time.perf_counter()
                acc = 0
                for k in keys:
                    acc += int(r.get(k, s, dt).sum())
                r.release(s)
                t3 = time.perf_counter()
                if s >= 1:  # the first step of each slot pays first-touch faults
                    best_put = min(best_put, (t1 - t0) / count)
                    best_get = min(best_get, (t3 - t2) / count)
        return best_put, best_get
    finally:
        chan.unlink(name, tier)


def calibrate_tier(tier: str, max_streams: int = 2) -> dict[str, Any]:
    sp, sg = _python_path(tier, SMALL, 3000)
    lp, lg = _python_path(tier, LARGE, 12)
    # t(size) = o + size * beta through the two points
    beta_put = max(0.0, (lp - sp) / (LARGE - SMALL))
    beta_get = max(0.0, (lg - sg) / (LARGE - SMALL))
    out: dict[str, Any] = {
        "put_object_s": max(0.0, sp - SMALL * beta_put),
        "get_object_s": max(0.0, sg - SMALL * beta_get),
        "put_byte_s": beta_put,
        "get_byte_s": beta_get,
        "streams": {},
    }
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
    # In the mixed run both sides stream at once and the writer is paced by
    # the pipeline: its time per step against the slower side alone is the
    # contention factor.
    period = mixed["put_mean_ns_per_object"]
    out["kappa"] = max(0.0, period / max(t_put, t_get) - 1.0)
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
    for t in tiers or default_tiers():
        if progress:
            progress(t)
        data["tiers"][t] = calibrate_tier(t, max_streams)
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
