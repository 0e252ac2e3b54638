# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench seqread`: the pager's device read rate on a sequential scan
against fio's, at the same block size and queue depth, in one run.

Each round runs, in alternating order:

- hm-kernel-scan (sequential read, 2 threads by default) on data of 2x the
  budget under `hetmem run --mode cache`. Every byte the pager reads in
  that run is read during the timed scans (the kernel's initialisation only
  writes), so its device read rate is the bytes it read per scan over the
  median scan time: bytes_read / reps / median(time). The median leaves out
  the first scan, which also writes back what initialisation left dirty.
- fio, sequential O_DIRECT reads (io_uring) of a file of the same size in
  the same storage folder, with the pager's read size (its fetch unit; up
  to 1 MiB in memfd mode) and the most reads it keeps in flight, both taken
  from the run's --stats. fio writes the file first.

- fio again with huge-page buffers (--iomem=shmhuge), where the system has
  enough free hugetlb pages for its reads in flight (--fio-huge auto; on
  requires it). Why: the pager reads into huge pages, and on a virtio disk
  fio's default 4 KiB-page buffers cost it a DMA segment per page, which
  limits its requests (on the 2-CPU VM hetmem is developed on: 1.0-2.0
  GB/s, against 3.0-3.7 GB/s with huge-page buffers). Reserve pages with
  `echo 16 > /proc/sys/vm/nr_hugepages` (root).

Before each run the suite syncs and waits 3 s (--settle), so that neither
side starts on a device still busy with what the run before left. It prints each
round's rates and ratios, and the target (issue 21, target 2):

  pager device read rate / fio read rate >= 0.9 (median of the rounds),

against fio's default buffers, and against its huge-page buffers where
that ran.

It also prints, per side, what the storage tier's block device saw of its
reads (its sysfs stat counters over each run): the mean request size, the
mean time a request took, and the requests in flight these imply at the
run's read rate. Two sides with one read size and depth can still differ
there: the block layer merges adjacent reads submitted together into larger
requests, and a device may serve those slower per byte.

Results: DIR/seqread.json (schema in docs/formats.md) with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hetmem import __version__, child, output
from hetmem.bench import exit_status, find_program, machine
from hetmem.bench.harness import (
    add_output_arguments,
    parse_multiples,
    result_folder,
    target_row,
    verified_line,
)
from hetmem.bench.reference import fio_seq_read
from hetmem.errors import EnvironmentProblem, HetmemError, UsageError
from hetmem.run.checks import default_storage
from hetmem.sizes import format_size, parse_budget

name = "seqread"
help = "the pager's device read rate on a 2x sequential scan vs fio, same block and depth"
description = __doc__.split("\n\n", 1)[1] if __doc__ else ""

SCHEMA_VERSION = 3
KERNEL = "hm-kernel-scan"
GOAL = 0.9
SETTLE_S = 3.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fast-budget", default="256MiB", metavar="SIZE", help="budget (256MiB)")
    parser.add_argument(
        "--size", default="2x", metavar="MULT", help="data as a multiple of the budget (2x)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both (3)")
    parser.add_argument("--reps", type=int, default=5, help="timed scans per run (5)")
    parser.add_argument("--threads", type=int, default=2, help="scan threads (2)")
    parser.add_argument(
        "--storage", metavar="DIR", help="storage folder of both (hetmem's default)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE_S,
        metavar="S",
        help=f"seconds to wait, after a sync, before each run ({SETTLE_S:g})",
    )
    parser.add_argument(
        "--fio-huge",
        choices=("auto", "on", "off"),
        default="auto",
        help="also run fio with huge-page buffers: auto (where enough hugetlb pages "
        "are free; the default), on (required), off",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run (600)")
    add_output_arguments(parser, "seqread")


def _at_least(value: int, low: int, flag: str) -> int:
    if value < low:
        raise UsageError(f"{flag} {value}: must be at least {low}")
    return value


def _settle(value: float) -> float:
    if not 0 <= value <= 600:
        raise UsageError(f"--settle {value:g}: must be between 0 and 600 seconds")
    return value


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Every option checked, before anything runs."""
    mults = parse_multiples(args.size, "--size")
    if len(mults) != 1:
        raise UsageError(f"--size {args.size}: one multiple of the budget, such as 2x")
    fio = shutil.which("fio")
    if not fio:
        raise EnvironmentProblem("fio is not installed (Debian: apt-get install fio)")
    budget = parse_budget(args.fast_budget)
    if args.fio_huge == "on" and machine.hugetlb_free()[0] == 0:
        raise EnvironmentProblem(
            "--fio-huge on: no hugetlb page is free (as root: echo 16 > /proc/sys/vm/nr_hugepages)"
        )
    return {
        "budget": budget,
        "multiple": mults[0],
        "size": int(budget * mults[0]) // 4096 * 4096,
        "rounds": _at_least(args.rounds, 1, "--rounds"),
        # the median scan must not be the first one, which also writes back
        "reps": _at_least(args.reps, 3, "--reps"),
        "threads": _at_least(args.threads, 1, "--threads"),
        "timeout": args.timeout,
        "settle_s": _settle(args.settle),
        "kernel": str(find_program(KERNEL)),
        "fio": fio,
        "storage": str(Path(args.storage or default_storage()).resolve()),
        "fio_huge": args.fio_huge,
    }


def _device_counters(p: dict[str, Any]) -> tuple[int, int, int, int] | None:
    return machine.read_counters(machine.block_stat_file(p["storage"]))


def _add_device(p: dict[str, Any], rec: dict[str, Any], before: Any) -> None:
    """The run's reads as the storage tier's block device saw them (the
    module's help), where it has one and the run measured a rate."""
    after = _device_counters(p)
    if "gbs" in rec:
        shape = machine.read_shape(before, after, rec["gbs"] * 1e9)
        if shape:
            rec["device"] = shape


def fio_huge_ok(p: dict[str, Any], block: int, depth: int) -> bool:
    """Whether to run fio with huge-page buffers for this shape; --fio-huge
    on without the pages is an error."""
    if p["fio_huge"] == "off":
        return False
    if machine.fio_huge_iomem(block, depth):
        return True
    if p["fio_huge"] == "on":
        free, page = machine.hugetlb_free()
        need = machine.huge_pages_needed(block, depth, page)
        raise EnvironmentProblem(
            f"--fio-huge on: fio needs {need} free hugetlb pages, {free} are free "
            f"(as root: echo {need} > /proc/sys/vm/nr_hugepages)"
        )
    return False


def scan_command(p: dict[str, Any], stats: Path) -> list[str]:
    run = [sys.executable, "-m", "hetmem", "run", "--mode", "cache"]
    run += ["--fast-budget", str(p["budget"]), "--storage", p["storage"], "--stats", str(stats)]
    kcmd = [p["kernel"], "--variant", "read", "--bytes", str(p["size"])]
    kcmd += ["--threads", str(p["threads"]), "--reps", str(p["reps"]), "--stat", "median"]
    return [*run, "--", *kcmd]


def pager_rate(result: dict[str, Any], pager: dict[str, Any]) -> dict[str, Any]:
    """The pager's device read rate of one scan run: bytes read per scan
    over the median scan time (see the module's help)."""
    times = [float(t) for t in result.get("times_s") or []]
    read = int((pager.get("counters") or {}).get("bytes_read") or 0)
    if not times or read <= 0:
        raise ValueError("the run reported no scan times or no bytes read")
    med = statistics.median(times)
    return {"bytes_read": read, "scans": len(times), "median_scan_s": med,
            "gbs": read / len(times) / med / 1e9}  # fmt: skip


def pager_io_shape(pager: dict[str, Any]) -> tuple[int, int]:
    """(read size, reads in flight at most) from a run's --stats config."""
    cfg = pager.get("config") or {}
    block = int(cfg.get("read_max_bytes") or cfg.get("fetch_unit") or 0)
    depth = int(cfg.get("reads_in_flight_max") or cfg.get("io_depth") or 0)
    if block <= 0 or depth <= 0:
        raise ValueError("the run's --stats has no read size or depth")
    return block, depth


def run_scan(p: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-seqread-") as tmp:
        stats_file = Path(tmp) / "stats.json"
        cmd = scan_command(p, stats_file)
        env = dict(os.environ, OMP_NUM_THREADS=str(p["threads"]))
        before = _device_counters(p)
        proc = child.run(cmd, env=env, timeout=p["timeout"])
        if proc.timed_out:
            return {"side": "pager", "error": f"timed out after {p['timeout']:.0f} s"}
        rec: dict[str, Any] = {"side": "pager", "command": cmd, "exit_code": proc.returncode,
                               "wall_s": proc.wall_s}  # fmt: skip
        result = verified_line(proc.stdout)
        try:
            pager = json.loads(stats_file.read_text()).get("pager") or {}
        except (OSError, ValueError, AttributeError):
            pager = {}
    if proc.returncode != 0 or result is None:
        rec["error"] = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return rec
    try:
        rec.update(pager_rate(result, pager))
        rec["block_bytes"], rec["depth"] = pager_io_shape(pager)
    except ValueError as e:
        rec["error"] = str(e)
    _add_device(p, rec, before)
    return rec


def run_fio(p: dict[str, Any], block: int, depth: int, huge: bool = False) -> dict[str, Any]:
    """fio in a private folder of the storage tier (no name another user can
    plant a link at), removed after; huge: with huge-page buffers."""
    side = "fio-huge" if huge else "fio"
    tmp = tempfile.mkdtemp(prefix=".hetmem-seqread-", dir=p["storage"])
    before = _device_counters(p)
    try:
        job = fio_seq_read(p["fio"], Path(tmp) / "fio.dat", p["size"], block, depth,
                           iomem="shmhuge" if huge else None)  # fmt: skip
    except HetmemError as e:
        return {"side": side, "error": str(e)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec = {"side": side, "block_bytes": block, "depth": depth,
           "gbs": job["read"]["bw_bytes"] / 1e9}  # fmt: skip
    _add_device(p, rec, before)
    return rec


def run_fios(p: dict[str, Any], shape: tuple[int, int]) -> list[dict[str, Any]]:
    """fio with its default buffers, then with huge-page ones where it may."""
    settle(p)
    out = [run_fio(p, *shape)]
    if fio_huge_ok(p, *shape):
        settle(p)
        out.append(run_fio(p, *shape, huge=True))
    return out


def settle(p: dict[str, Any]) -> None:
    """Lets the storage tier finish what the run before left (write-backs of
    the scan's initialisation, fio's file), so that neither side starts on a
    device that is still busy: fio right after a scan read 1.2 GB/s where it
    read 1.7-1.9 GB/s first in a round."""
    os.sync()
    time.sleep(p["settle_s"])


def one_round(p: dict[str, Any], r: int, shape: tuple[int, int] | None) -> list[dict[str, Any]]:
    """A round's two runs: the scan first in even rounds (and whenever the
    pager's read size and depth are not known yet), fio first in odd ones."""
    fio_first = bool(r % 2) and shape is not None
    out: list[dict[str, Any]] = []
    if fio_first and shape:
        out += run_fios(p, shape)
    settle(p)
    scan = run_scan(p)
    out.append(scan)
    if "error" not in scan:
        shape = (scan["block_bytes"], scan["depth"])
    if not fio_first and shape:
        out += run_fios(p, shape)
    for rec in out:
        rec["round"] = r
    return out


def _ratios(runs: list[dict[str, Any]], ref: str) -> list[float]:
    """pager / ref per round that ran both."""
    out = []
    for k in sorted({r["round"] for r in runs}):
        mine = {r["side"]: r for r in runs if r["round"] == k and "error" not in r}
        if "pager" in mine and ref in mine:
            out.append(mine["pager"]["gbs"] / mine[ref]["gbs"])
    return out


def _target(runs: list[dict[str, Any]], ratios: list[float], what: str) -> dict[str, Any]:
    med = statistics.median(ratios) if ratios else None
    spread = f"rounds {', '.join(f'{x:.2f}' for x in ratios)}" if ratios else "no round ran both"
    target = target_row(f"sequential scan at 2x: pager device read rate / {what}", med, GOAL,
                        spread)  # fmt: skip
    if any(r["side"] == "pager" and "error" in r for r in runs):
        target["pass"] = False  # a failed run of hetmem is a miss
    return target


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round ratios (pager / fio of the same round), their median, the
    target; the same against fio with huge-page buffers where that ran."""
    ratios = _ratios(runs, "fio")
    huge = _ratios(runs, "fio-huge")
    targets = [_target(runs, ratios, "fio")]
    if any(r["side"] == "fio-huge" for r in runs):
        targets.append(_target(runs, huge, "fio with huge-page buffers"))
    pager = [r["gbs"] for r in runs if r["side"] == "pager" and "error" not in r]
    fio = [r["gbs"] for r in runs if r["side"] == "fio" and "error" not in r]
    return {"ratios": ratios, "ratios_huge": huge, "pager_gbs": pager, "fio_gbs": fio,
            "target": targets[0], "targets": targets}  # fmt: skip


def _medians(n: int) -> str:
    return "one run" if n == 1 else f"medians of {n} runs"


def device_lines(runs: list[dict[str, Any]]) -> list[str]:
    """One line per side: the median over its runs of what the device saw.
    Why: two sides at one read size and depth can still differ in the
    requests the device gets (the block layer merges adjacent reads
    submitted together) and in how many it holds at once."""
    out = []
    names = {"pager": "pager", "fio": "fio", "fio-huge": "fio, huge-page buffers"}
    for side, name in names.items():
        devs = [r["device"] for r in runs if r["side"] == side and "device" in r]
        if not devs:
            continue
        kib = statistics.median(d["mean_bytes"] for d in devs) / 1024
        ms = statistics.median(d["mean_latency_ms"] for d in devs)
        fl = statistics.median(d["in_flight"] for d in devs)
        out.append(f"device reads, {name}: {kib:.0f} KiB a request, {ms:.2f} ms each, "
                   f"{fl:.1f} in flight ({_medians(len(devs))})")  # fmt: skip
    return out


def _cell(rec: dict[str, Any]) -> str:
    return f"{rec['gbs']:.2f}" if "gbs" in rec else rec.get("error", "-")


def _print(p: dict[str, Any], runs: list[dict[str, Any]], summ: dict[str, Any]) -> None:
    huge = any(r["side"] == "fio-huge" for r in runs)
    rows = []
    for k in sorted({r["round"] for r in runs}):
        mine = {r["side"]: r for r in runs if r["round"] == k}
        pg = mine.get("pager", {})
        row = [str(k + 1), _cell(pg)]
        for side in ("fio", "fio-huge") if huge else ("fio",):
            fo = mine.get(side, {})
            ratio = pg["gbs"] / fo["gbs"] if "gbs" in pg and "gbs" in fo else None
            row += [_cell(fo), "-" if ratio is None else f"{ratio:.2f}"]
        rows.append(row)
    shape = next((r for r in runs if r["side"] == "fio" and "block_bytes" in r), None)
    how = ""
    if shape:
        how = f" (fio: {format_size(shape['block_bytes'])} reads, depth {shape['depth']})"
    title = f"sequential scan of {format_size(p['size'])}, budget {format_size(p['budget'])}{how}"
    cols = ["round", "pager GB/s", "fio GB/s", "ratio"]
    if huge:
        cols += ["fio huge-page GB/s", "ratio"]
    output.table(title, cols, rows)
    for t in summ["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["pass"]]
        measured = "-" if t["measured"] is None else f"{t['measured']:.2f}"
        print(f"{t['target']}: {measured} (goal {GOAL}; {t['detail']}): {verdict}")
    for line in device_lines(runs):
        print(line)
    if not huge and p["fio_huge"] == "auto":
        print("fio with huge-page buffers: not run (too few free hugetlb pages; "
              "see --help)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    p = plan(args)
    outdir = result_folder(args.output, "seqread")
    runs: list[dict[str, Any]] = []
    shape: tuple[int, int] | None = None
    for r in range(p["rounds"]):
        if not args.json:
            output.err_console().print(f"[round {r + 1}/{p['rounds']}]")
        got = one_round(p, r, shape)
        runs += got
        scan = next((x for x in got if x["side"] == "pager" and "error" not in x), None)
        if scan:
            shape = (scan["block_bytes"], scan["depth"])
    summ = summarize(runs)
    data = {
        "schema_version": SCHEMA_VERSION, "kind": "bench-seqread", "hetmem_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": ["hetmem", "bench", *sys.argv[2:]], "outdir": str(outdir.resolve()),
        "budget_bytes": p["budget"], "size_bytes": p["size"], "threads": p["threads"],
        "reps": p["reps"], "storage": p["storage"], "goal": GOAL, "runs": runs,
        "ratios": summ["ratios"], "ratios_huge": summ["ratios_huge"],
        "targets": summ["targets"],
    }  # fmt: skip
    output.write_atomic(outdir / "seqread.json", json.dumps(data, indent=2))
    if args.json:
        output.print_json(data)
    else:
        _print(p, runs, summ)
    return exit_status(data["targets"])
