# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem flow bench`: the channel against ADIOS2 (SST and BP5 engines) on
the same objects, side by side in one run.

Two views of the channel: its C cost (hm_chan_bench_json: one library
call per object), and the Python batch path (one call for a step's puts:
a contiguous buffer with offsets/lengths arrays, `Channel.put_many`; one
call for its zero-copy views: `Channel.get_many`, addresses and lengths;
and the copying variant `get_many_into`). ADIOS2 runs through its Python
package in a separate interpreter (its own processes: writer and reader),
found with --adios-python, $HETMEM_ADIOS_PYTHON, or this interpreter if it
has adios2 (`pip install hetmem[bench]`); without it the channel part runs
alone and the report says so.

Targets: put+get software cost <= 1 us per 4.5 KB object (put, then get by
zero-copy view, with the put's own memcpy of the same bytes, measured in
the same run, taken out), checked for the C path and the Python batch
path alike; and large objects through the DRAM channel at >= 50% of
memcpy bandwidth.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from hetmem._numpy import np
from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.flow import channel as chan
from hetmem.sizes import parse_size

_ADIOS_SCRIPT = r"""
import json, sys, time
import numpy as np
from adios2 import Adios, Stream
role, engine, path, n, size, steps = sys.argv[1:7]
n, size, steps = int(n), int(size), int(steps)
ad = Adios()
io = ad.declare_io(role)
io.set_engine(engine)
if engine == "SST":
    io.set_parameters({"RendezvousReaderCount": "1", "QueueLimit": "2",
                       "QueueFullPolicy": "Block", "OpenTimeoutSecs": "60"})
else:
    io.set_parameters({"OpenTimeoutSecs": "60"})
times = []
if role == "writer":
    data = [np.full(size // 8, i, dtype=np.int64) for i in range(n)]
    with Stream(io, path, "w") as s:
        for st in range(steps):
            for d in data:
                d[0] = st
            t = time.perf_counter()
            s.begin_step()
            for i in range(n):
                s.write(f"o{i}", data[i])
            s.end_step()
            times.append(time.perf_counter() - t)
else:
    bad = 0
    with Stream(io, path, "r") as s:
        for st in range(steps):
            s.begin_step(timeout=120)
            t = time.perf_counter()
            for i in range(n):
                a = s.read(f"o{i}")
                bad += int(a[0] != st) + int(a.nbytes != size)
            s.end_step()
            times.append(time.perf_counter() - t)
    if bad:
        raise SystemExit(f"adios2 reader: {bad} objects wrong")
print(json.dumps({"times": times}))
"""


def adios_python(explicit: str | None = None) -> str | None:
    for cand in (explicit, os.environ.get("HETMEM_ADIOS_PYTHON"), sys.executable):
        if not cand:
            continue
        # the interpreter must print the marker after importing adios2: an
        # exit status of 0 alone would accept any program (/bin/true)
        try:
            proc = subprocess.run(
                [cand, "-c", "import adios2; print('hetmem-adios2-ok')"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            ok = proc.returncode == 0 and "hetmem-adios2-ok" in proc.stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return cand
        if cand == explicit:
            raise EnvironmentProblem(f"--adios-python {cand}: cannot import adios2")
    return None


def adios_version(py: str) -> str:
    r = subprocess.run(
        [py, "-c", "import adios2; print(adios2.__version__)"], capture_output=True, text=True
    )
    return r.stdout.strip()


def _best(times: list[float]) -> float:
    rest = times[1:] if len(times) > 1 else times
    return min(rest)


def run_adios(py: str, engine: str, n: int, size: int, steps: int) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="hetmem-adios-")
    # a name of its own: BP5's reader writes /tmp/NAME_PID_profiling.json
    # whatever the folder (ADIOS2 2.12), removed below
    name = f"hetmem-stream-{uuid.uuid4().hex[:12]}"
    path = os.path.join(tmp, name + (".bp" if engine == "BP5" else ""))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [str(n), str(size), str(steps)]

    def side(role: str) -> list[str]:
        return [py, "-c", _ADIOS_SCRIPT, role, engine, path, *args]

    def run_side(role: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            side(role), capture_output=True, text=True, cwd=tmp, env=env, timeout=600
        )

    try:
        if engine == "SST":
            # SST streams: the reader must be up while the writer runs
            rd = subprocess.Popen(
                side("reader"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=tmp,
                env=env,
            )
            wr = run_side("writer")
            out, err = rd.communicate(timeout=600)
            rrc = rd.returncode
        else:
            wr = run_side("writer")
            rd2 = run_side("reader")
            out, err, rrc = rd2.stdout, rd2.stderr, rd2.returncode
        if wr.returncode or rrc:
            msg = (wr.stderr or err).strip().splitlines()
            return {"error": msg[-1] if msg else "failed"}
        wt = json.loads(wr.stdout.strip().splitlines()[-1])["times"]
        rt = json.loads(out.strip().splitlines()[-1])["times"]
        return {"put_s": _best(wt) / n, "get_s": _best(rt) / n}
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for left in glob.glob(f"/tmp/{glob.escape(name)}*_profiling.json"):
            with contextlib.suppress(OSError):
                os.unlink(left)


def python_path(tier: str, size: int, n: int, steps: int) -> dict[str, float]:
    """Seconds per object of the Python batch path, best of steps after the
    first (as the C bench): put_many + commit; wait + get_many (zero-copy
    views) + release; wait + get_many_into (copy) + release; and a numpy
    copy of the same bytes (the memcpy a put cannot avoid)."""
    name = f"pyb-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    per = (size + 63) // 64 * 64
    chan.create(name, tier, slots=2, slot_bytes=n * per + 4096, max_objects=n, replace=True)
    try:
        keys = chan.Keys([f"o{j}" for j in range(n)])
        buf = np.random.default_rng(1).integers(0, 255, n * size, dtype=np.uint8)
        offs = np.arange(n, dtype=np.uint64) * size
        lens = np.full(n, size, dtype=np.uint64)
        out = np.zeros(n * size, dtype=np.uint8)
        put, view, copy, mc = [], [], [], []
        with chan.Channel(name, "writer", tier) as w, chan.Channel(name, "reader", tier) as r:
            for s in range(2 * max(2, steps)):
                t0 = time.perf_counter()
                w.put_many(keys, s, buf, offs, lens)
                w.commit(s)
                t1 = time.perf_counter()
                r.wait(s, timeout=60)
                t2 = time.perf_counter()
                if s % 2 == 0:
                    ptrs, got = r.get_many(keys, s)
                    t3 = time.perf_counter()
                    view.append(t3 - t2)
                    if int(got.sum()) != n * size or not int(ptrs.min()):
                        raise chan.ChannelError("python path: get_many returned wrong lengths")
                else:
                    got = r.get_many_into(keys, s, out)
                    t3 = time.perf_counter()
                    copy.append(t3 - t2)
                    if not np.array_equal(out[:size], buf[:size]):
                        raise chan.ChannelError("python path: object 0 read back wrong")
                r.release(s)
                t4 = time.perf_counter()
                np.copyto(out, buf)
                mc.append(time.perf_counter() - t4)
                put.append(t1 - t0)
    finally:
        chan.unlink(name, tier)

    def best(v: list[float]) -> float:
        return min(v[1:] if len(v) > 1 else v) / n

    return {
        "put_s": best(put),
        "get_view_s": best(view),
        "get_copy_s": best(copy),
        "memcpy_s": best(mc),
    }


def run(
    small_objects: int = 10000,
    small_bytes: int = 4608,
    large_objects: int = 4,
    large_bytes: int = 64 << 20,
    steps: int = 4,
    tier: str = "dram",
    adios_py: str | None = None,
    engines: tuple[str, ...] = ("SST", "BP5"),
) -> dict[str, Any]:
    res: dict[str, Any] = {"schema_version": 1, "tier": tier}
    cs = chan.bench(tier, small_objects, small_bytes, steps + 1, 1)
    cl = chan.bench(tier, large_objects, large_bytes, steps + 1, 1)
    sw = cs["put_ns_per_object"] + cs["get_view_ns_per_object"] - cs["memcpy_ns_per_object"]
    res["channel_c"] = {"small": cs, "large": cl}
    res["targets"] = {
        "sw_cost_us_per_small_object": sw / 1000,
        "sw_cost_target_us": 1.0,
        "sw_cost_met": sw / 1000 <= 1.0,
        "large_put_over_memcpy": cl["put_gbs"] / cl["memcpy_gbs"],
        "large_get_over_memcpy": cl["get_gbs"] / cl["memcpy_gbs"],
        "large_target": 0.5,
        "large_met": min(cl["put_gbs"], cl["get_gbs"]) / cl["memcpy_gbs"] >= 0.5,
    }
    rows = [_python_row(res, tier, small_objects, small_bytes, large_objects, large_bytes, steps)]
    py = adios_py or adios_python()
    res["adios2"] = {"python": py, "version": adios_version(py) if py else None}
    for eng in engines if py else ():
        s = run_adios(py, eng, small_objects, small_bytes, steps)  # type: ignore[arg-type]
        lg_ = run_adios(py, eng, large_objects, large_bytes, steps)  # type: ignore[arg-type]
        rows.append(_adios_row(eng, s, lg_, large_bytes))
    base = rows[0]
    for r in rows[1:]:
        if "small_put_us" in r:
            r["small_cost_ratio_vs_channel"] = (r["small_put_us"] + r["small_get_us"]) / (
                base["small_put_us"] + base["small_get_us"]
            )
    res["rows"] = rows
    res["objects"] = {
        "small": [small_objects, small_bytes],
        "large": [large_objects, large_bytes],
        "steps": steps,
    }
    return res


def bench(
    small_objects: int, large_bytes: str, steps: int, tier: str, adios_python_arg: str | None
) -> dict[str, Any]:
    """`hetmem flow bench` and `hetmem bench flow`: the options checked (named
    as the command line names them), the ADIOS2 interpreter found, then run()."""
    large = parse_size(large_bytes, "--large-bytes")
    if small_objects < 1:
        raise UsageError("--small-objects: must be >= 1")
    if steps < 1:
        raise UsageError("--steps: must be >= 1")
    if large < 1:
        raise UsageError("--large-bytes: must be at least 1 byte")
    return run(
        small_objects=small_objects,
        large_bytes=large,
        steps=steps,
        tier=tier,
        adios_py=adios_python(adios_python_arg),
    )


def _python_row(
    res: dict[str, Any],
    tier: str,
    small_objects: int,
    small_bytes: int,
    large_objects: int,
    large_bytes: int,
    steps: int,
) -> dict[str, Any]:
    """The channel from Python: its figures and targets into res, its row."""
    ps = python_path(tier, small_bytes, small_objects, steps)
    pl = python_path(tier, large_bytes, large_objects, steps)
    py_sw = ps["put_s"] + ps["get_view_s"] - ps["memcpy_s"]
    res["channel_python"] = {"small": ps, "large": pl}
    res["targets"].update(
        {
            "py_cost_us_per_small_object": (ps["put_s"] + ps["get_view_s"]) * 1e6,
            "py_sw_cost_us_per_small_object": py_sw * 1e6,
            "py_sw_cost_met": py_sw * 1e6 <= 1.0,
        }
    )
    return {
        "system": f"hetmem channel ({tier}, Python batch)",
        "small_put_us": ps["put_s"] * 1e6,
        "small_get_us": ps["get_view_s"] * 1e6,
        "small_get_copy_us": ps["get_copy_s"] * 1e6,
        "large_put_gbs": large_bytes / pl["put_s"] / 1e9,
        "large_get_gbs": large_bytes / pl["get_copy_s"] / 1e9,
    }


def _adios_row(
    eng: str, s: dict[str, float], lg_: dict[str, float], large_bytes: int
) -> dict[str, Any]:
    row: dict[str, Any] = {"system": f"ADIOS2 {eng} (Python)"}
    if "error" in s:
        row["error"] = s["error"]
    else:
        row["small_put_us"] = s["put_s"] * 1e6
        row["small_get_us"] = s["get_s"] * 1e6
    if "error" in lg_:
        row["error"] = lg_["error"]
    else:
        row["large_put_gbs"] = large_bytes / lg_["put_s"] / 1e9
        row["large_get_gbs"] = large_bytes / lg_["get_s"] / 1e9
    return row
