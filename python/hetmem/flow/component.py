# SPDX-License-Identifier: BSD-3-Clause
"""One rank of a workflow component, run as its own process by the runner
(`python -m hetmem.flow.component ARGS`, directly or under mpirun).

Writer rank: per iteration, compute (the kernel), then put its share of the
objects (one batch call) and commit the step. Reader rank: wait for the
step, read its share of the objects (one batch call; every byte, and a
stamp that proves the step is whole),
release it, then run the analytics kernel. Each phase is timed on the
clock and in the rank's own CPU seconds (what it did, whatever else shared
its core). Serial mode adds an
acknowledgement channel (readers -> writers): a writer computes step s only
after every reader finished step s-1, so the phases interleave.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from hetmem._numpy import np
from hetmem.flow import channel as chan
from hetmem.flow import kernels

TIMEOUT = 120.0


def _barrier(sync: Path, who: str) -> float:
    (sync / f"ready.{who}").write_text(str(os.getpid()))
    go = sync / "go"
    t_end = time.monotonic() + TIMEOUT
    while not go.exists():
        if time.monotonic() > t_end:
            raise SystemExit(f"{who}: no go signal from the runner within {TIMEOUT:.0f} s")
        time.sleep(0.0005)
    return time.monotonic()


def channel_pages(path: str) -> dict[str, int]:
    """Where the kernel put the pages of the channel file at path that this
    process maps, per NUMA node, from /proc/self/numa_maps (the file may be
    unlinked: the runner removes it once every rank has it open). Read
    once, after the last step: a few ms of a Python process's maps."""
    pages: dict[str, int] = {}
    if not path:
        return pages
    want = (f"file={path} ", f"file={path}\\040", f"file={path}\n")
    with open("/proc/self/numa_maps") as f:
        for line in f:
            if not any(w in line for w in want):
                continue
            for field in line.split():
                node, eq, count = field[1:].partition("=")
                if field.startswith("N") and eq and node.isdigit():
                    pages[node] = pages.get(node, 0) + int(count)
    return pages


def _bind(cpus: list[int], rank: int) -> None:
    if cpus:
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


GATHER_MAX = 256 << 10  # objects up to this size are read by one gather copy


class Reading:
    """A reader rank's read of its share of one step, the same code for the
    runner and for `hetmem flow calibrate`: one library call for all keys,
    then every byte summed, and each object's first word checked against
    the step (the writer stamps it)."""

    def __init__(self, keys: list[str], size: int) -> None:
        self.keys = chan.Keys(keys)
        self.size = size
        self.words = size % 8 == 0
        self.gather = size <= GATHER_MAX
        self.out = np.empty(len(keys) * size if self.gather else 0, dtype=np.uint8)

    def read(self, ch: chan.Channel, step: int) -> tuple[int, int]:
        """(checksum, objects whose stamp is not step)."""
        if not self.keys.keys:
            return 0, 0
        if self.gather:
            ch.get_many_into(self.keys, step, self.out)
            if self.words:
                w = self.out.view(np.int64)
                return int(w.sum()), int(np.count_nonzero(w[:: self.size // 8] != step))
            return int(self.out.sum(dtype=np.int64)), 0
        dt = np.int64 if self.words else np.uint8
        total = bad = 0
        for v in ch.views(self.keys, step, dt):
            if self.words and v[0] != step:
                bad += 1
            total += int(v.sum())
        return total, bad


def fill(nbytes: int, seed: int) -> np.ndarray:
    """nbytes of varied content, every 8 bytes their own (no two pages
    alike), made at memory speed: a multiplicative hash of the word index.
    A writer rank makes its whole step's buffer before the start, so this
    is start-up time of every run: numpy's random integers took 0.3 s for
    the 64-96 MiB steps of the gtc, miniamr and large-io specs, this 0.1 s
    (the first touch of the pages, which any fill pays)."""
    words = np.arange((nbytes + 7) // 8, dtype=np.uint64)
    words *= np.uint64(0x9E3779B97F4A7C15)
    words += np.uint64(seed)
    return words.view(np.uint8)[:nbytes]


class Writing:
    """A writer rank's objects: n objects of size bytes in one buffer, put
    with one library call per step, each stamped with the step first."""

    def __init__(self, keys: list[str], size: int, seed: int) -> None:
        n = len(keys)
        self.keys = chan.Keys(keys)
        self.buf = fill(n * size, seed)
        self.offs = np.arange(n, dtype=np.uint64) * size
        self.lens = np.full(n, size, dtype=np.uint64)
        self.stamps = self.buf.view(np.int64)[:: size // 8] if size % 8 == 0 else None

    def write(self, ch: chan.Channel, step: int) -> None:
        if self.stamps is not None:
            self.stamps[:] = step
        if len(self.keys):
            ch.put_many(self.keys, step, self.buf, self.offs, self.lens)
        ch.commit(step)


def writer(cfg: dict, rank: int, sync: Path) -> dict:
    w = cfg["writer"]
    pw = w["ranks"]
    n = w["objects"] // pw
    size = w["object_bytes"]
    _bind(w["cpus"], rank)
    k = kernels.make(w["kernel"], w["size"], w["repeat"], pw)
    out = Writing([f"w{rank}.o{j}" for j in range(n)], size, rank)
    ch = chan.Channel.open(cfg["channel"], "writer", cfg["tier"], rank)
    ch.set_timeout(TIMEOUT)
    ack = chan.Channel.open(cfg["ack"], "reader", "dram", rank) if cfg["ack"] else None
    iters = []
    t_go = _barrier(sync, f"writer.{rank}")
    for s in range(cfg["iterations"]):
        t0 = time.monotonic()
        if ack is not None and s > 0:
            ack.wait(s - 1, timeout=TIMEOUT)
            ack.release(s - 1)
        t1, c1 = time.monotonic(), time.thread_time()
        if k is not None:
            k.run()
        t2, c2 = time.monotonic(), time.thread_time()
        out.write(ch, s)
        t3, c3 = time.monotonic(), time.thread_time()
        iters.append(
            {
                "wait": t1 - t0,
                "compute": t2 - t1,
                "io": t3 - t2,
                "compute_cpu": c2 - c1,
                "io_cpu": c3 - c2,
            }
        )
    t_end = time.monotonic()
    pages = channel_pages(cfg.get("channel_path", ""))
    ch.close()
    if ack is not None:
        ack.close()
    return {
        "role": "writer",
        "rank": rank,
        "t_go": t_go,
        "t_end": t_end,
        "iterations": iters,
        "cpus": sorted(os.sched_getaffinity(0)),
        "channel_pages": pages,
    }


def reader(cfg: dict, rank: int, sync: Path) -> dict:
    w, r = cfg["writer"], cfg["reader"]
    pw, pr = w["ranks"], r["ranks"]
    n = w["objects"] // pw
    size = w["object_bytes"]
    _bind(r["cpus"], rank)
    k = kernels.make(r["kernel"], r["size"], r["repeat"], pr)
    keys = [f"w{wr}.o{j}" for wr in range(pw) for j in range(n) if (wr * n + j) % pr == rank]
    rd = Reading(keys, size)
    ch = chan.Channel.open(cfg["channel"], "reader", cfg["tier"], rank)
    ack = chan.Channel.open(cfg["ack"], "writer", "dram", rank) if cfg["ack"] else None
    iters = []
    bad = 0
    total = 0
    t_go = _barrier(sync, f"reader.{rank}")
    for s in range(cfg["iterations"]):
        t0 = time.monotonic()
        ch.wait(s, timeout=TIMEOUT)
        t1, c1 = time.monotonic(), time.thread_time()
        got, wrong = rd.read(ch, s)
        total += got
        bad += wrong
        ch.release(s)
        t2, c2 = time.monotonic(), time.thread_time()
        if k is not None:
            k.run()
        if ack is not None:
            ack.commit(s)
        t3, c3 = time.monotonic(), time.thread_time()
        iters.append(
            {
                "wait": t1 - t0,
                "io": t2 - t1,
                "compute": t3 - t2,
                "io_cpu": c2 - c1,
                "compute_cpu": c3 - c2,
            }
        )
    t_end = time.monotonic()
    pages = channel_pages(cfg.get("channel_path", ""))
    ch.close()
    if ack is not None:
        ack.close()
    return {
        "role": "reader",
        "cpus": sorted(os.sched_getaffinity(0)),
        "channel_pages": pages,
        "rank": rank,
        "t_go": t_go,
        "t_end": t_end,
        "iterations": iters,
        "objects_read": len(keys) * cfg["iterations"],
        "stamp_errors": bad,
        "checksum": total & 0xFFFFFFFF,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hetmem.flow.component")
    p.add_argument("--config", required=True, help="resolved run configuration (JSON)")
    p.add_argument("--role", choices=("writer", "reader"), required=True)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--rank-offset", type=int, default=0, help="under mpirun: rank - offset")
    args = p.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    rank = args.rank
    if rank < 0:
        world = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMIX_RANK")
        if world is None:
            sys.stderr.write("no --rank and not under mpirun\n")
            return 2
        rank = int(world) - args.rank_offset
    sync = Path(cfg["sync_dir"])
    try:
        fn = writer if args.role == "writer" else reader
        res = fn(cfg, rank, sync)
    except chan.ChannelError as exc:
        sys.stderr.write(f"{args.role} rank {rank}: {exc}\n")
        return 3
    (sync / f"result.{args.role}.{rank}.json").write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
