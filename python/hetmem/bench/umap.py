# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench umap`: cache mode side by side with LLNL UMap.

Runs hm-kernel-umapcmp's four patterns (sequential read, read-modify-write,
STREAM triad, random 4 KiB reads; 2 threads by default) on data of 2x the
budget, once on malloc'd memory under `hetmem run --mode cache` and once on
UMap regions over files in the storage folder at each UMap page size
(UMAP_PAGESIZE), with the same budget (UMAP_BUFSIZE = budget / page size)
and UMap's default fillers and evictors. UMap is not part of hetmem: build it
yourself and name its libumap.so with --umap-lib; the kernel loads it at run
time. Its files are opened with O_DIRECT, as UMap's own examples do, so that
neither side reads from the page cache (--umap-buffered: through it).

Contenders alternate their order from one repetition to the next. Per
pattern it prints hetmem's median time, UMap's best page size (lowest
median) and its median, their ratio and the target (issue 21, target 4):

  UMap time at its best page size / hetmem time >= 1.3 on every pattern.

Spreads are the lowest and highest of the repetitions; the ratio's spread is
that of the per-repetition ratios. Results: DIR/runs.jsonl (one record per
run) and DIR/umap.json (schema in docs/formats.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hetmem import __version__, child, output
from hetmem.bench import exit_status, find_program
from hetmem.bench.harness import (
    add_output_arguments,
    parse_multiples,
    result_folder,
    target_row,
    verified_line,
)
from hetmem.errors import UsageError
from hetmem.run.checks import default_storage
from hetmem.sizes import format_size, parse_budget, parse_size

name = "umap"
help = "cache mode vs LLNL UMap at its best page size per pattern, with the 1.3x target"
description = __doc__.split("\n\n", 1)[1] if __doc__ else ""

SCHEMA_VERSION = 1
KERNEL = "hm-kernel-umapcmp"
PATTERNS = ("read", "rmw", "triad", "read4k")
GOAL = 1.3
PAGE = 4096
# UMap's Buffer::evict_oldest_pages walks its busy list with a size_t index
# tested i >= 0: with fewer than its batch of 32 evictable pages it reads
# past the start and crashes (seen here at 8 and 16 pages). Page sizes that
# leave the buffer fewer pages than this are left out, with a note.
MIN_UMAP_PAGES = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--umap-lib", required=True, metavar="PATH", help="UMap's libumap.so")
    parser.add_argument("--fast-budget", default="256MiB", metavar="SIZE", help="budget (256MiB)")
    parser.add_argument(
        "--sizes", default="2x", metavar="LIST", help="data sizes as multiples of the budget (2x)"
    )
    parser.add_argument(
        "--umap-pagesizes",
        default="4K,64K,2M",
        metavar="LIST",
        help="UMap page sizes to try; the best per pattern counts (4K,64K,2M)",
    )
    parser.add_argument(
        "--patterns", default=",".join(PATTERNS), metavar="LIST", help="read,rmw,triad,read4k"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of every run (3)")
    parser.add_argument(
        "--kernel-reps", type=int, default=3, help="timed passes in each run; their median counts"
    )
    parser.add_argument(
        "--reads",
        default="32768",
        metavar="N",
        help="random 4 KiB reads per pass, all threads (32768)",
    )
    parser.add_argument("--threads", type=int, default=2, help="kernel threads (2)")
    parser.add_argument(
        "--storage", metavar="DIR", help="storage folder of both (hetmem's default)"
    )
    parser.add_argument(
        "--umap-buffered", action="store_true", help="UMap's files through the page cache"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run (900)")
    add_output_arguments(parser, "umap")


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise UsageError(f"{flag} {value}: must be at least 1")
    return value


def parse_pagesizes(text: str, budget: int) -> list[int]:
    """UMap page sizes: multiples of 4 KiB, each at most the budget."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        ps = parse_size(part, "--umap-pagesizes")
        if ps < PAGE or ps % PAGE:
            raise UsageError(f"--umap-pagesizes {part}: must be a multiple of 4 KiB")
        if ps > budget:
            raise UsageError(f"--umap-pagesizes {part}: larger than the budget")
        if budget // ps < MIN_UMAP_PAGES:
            output.err_console().print(
                f"note: UMap page size {part} left out: a buffer of {budget // ps} pages "
                f"(< {MIN_UMAP_PAGES}) crashes UMap's evictor"
            )
        elif ps not in out:
            out.append(ps)
    if not out:
        raise UsageError(f"--umap-pagesizes: every size leaves UMap < {MIN_UMAP_PAGES} pages")
    return out


def parse_patterns(text: str) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in out if p not in PATTERNS]
    if bad or not out:
        raise UsageError(f"--patterns: '{text}' (known: {','.join(PATTERNS)})")
    return out


def check_lib(kernel: Path, lib: str) -> str:
    """Absolute path of a loadable libumap, or UsageError in one line."""
    path = Path(lib)
    if not path.is_file():
        raise UsageError(f"--umap-lib {lib}: no such file")
    proc = subprocess.run(
        [str(kernel), "--backend", "umap", "--umap-lib", str(path.resolve()), "--lib-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise UsageError(lines[-1] if lines else f"--umap-lib {lib}: cannot load")
    return str(path.resolve())


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Every option checked, before anything runs."""
    budget = parse_budget(args.fast_budget)
    kernel = find_program(KERNEL)
    return {
        "budget": budget,
        "multiples": parse_multiples(args.sizes),
        "pagesizes": parse_pagesizes(args.umap_pagesizes, budget),
        "patterns": parse_patterns(args.patterns),
        "repeat": _positive(args.repeat, "--repeat"),
        "kernel_reps": _positive(args.kernel_reps, "--kernel-reps"),
        "threads": _positive(args.threads, "--threads"),
        "reads": _positive(parse_size(args.reads, "--reads"), "--reads"),
        "kernel": str(kernel),
        "umap_lib": check_lib(kernel, args.umap_lib),
        "storage": str(Path(args.storage or default_storage()).resolve()),
    }


def contenders(p: dict[str, Any]) -> list[str]:
    return ["hetmem", *(f"umap-{format_size(ps)}" for ps in p["pagesizes"])]


def schedule(p: dict[str, Any]) -> list[tuple[int, str, float, str]]:
    """(rep, pattern, multiple, contender), the contenders' order rotated
    by one per repetition and pattern, so that drift hits them alike."""
    who = contenders(p)
    out = []
    for rep in range(p["repeat"]):
        for i, pat in enumerate(p["patterns"]):
            for mult in p["multiples"]:
                k = (rep + i) % len(who)
                out += [(rep, pat, mult, c) for c in who[k:] + who[:k]]
    return out


def command(
    p: dict[str, Any], pattern: str, size: int, who: str, stats: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """Command line and environment of one run (hetmem's with --stats FILE)."""
    kcmd = [p["kernel"], "--variant", pattern, "--bytes", str(size)]
    kcmd += ["--threads", str(p["threads"]), "--reps", str(p["kernel_reps"]), "--stat", "median"]
    if pattern == "read4k":
        kcmd += ["--reads", str(p["reads"])]
    env = dict(os.environ, OMP_NUM_THREADS=str(p["threads"]))
    if who == "hetmem":
        run = [sys.executable, "-m", "hetmem", "run", "--mode", "cache"]
        run += ["--fast-budget", str(p["budget"]), "--storage", p["storage"]]
        run += ["--stats", str(stats)] if stats else []
        run.append("--")
        return run + kcmd, env
    ps = p["pagesizes"][contenders(p).index(who) - 1]
    env.update(UMAP_PAGESIZE=str(ps), UMAP_BUFSIZE=str(p["budget"] // ps))
    kcmd += ["--backend", "umap", "--umap-lib", p["umap_lib"], "--storage", p["storage"]]
    if p.get("umap_buffered"):
        kcmd.append("--umap-buffered")
    return kcmd, env


def execute(p: dict[str, Any], rep: int, pattern: str, mult: float, who: str) -> dict[str, Any]:
    size = int(p["budget"] * mult)
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-umap-") as tmp:
        stats_file = Path(tmp) / "stats.json"
        cmd, env = command(p, pattern, size, who, stats_file if who == "hetmem" else None)
        proc = child.run(cmd, env=env, timeout=p["timeout"])
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
        if proc.timed_out:
            rc, out, err = -1, "", f"timed out after {p['timeout']:.0f} s"
        wall = proc.wall_s
        pager = _pager_figures(stats_file)
    result = verified_line(out)
    error = ""
    if rc != 0 or result is None:
        error = (err.strip().splitlines() or [f"exit code {rc}"])[-1]
    return {
        "schema_version": SCHEMA_VERSION, "rep": rep, "pattern": pattern, "multiple": mult,
        "size_bytes": size, "contender": who, "command": cmd,
        "umap_env": {k: env[k] for k in ("UMAP_PAGESIZE", "UMAP_BUFSIZE") if k in env},
        "exit_code": rc, "wall_s": wall, "pager": pager,
        "time_s": None if error else result["time_s"], "result": result, "error": error,
    }  # fmt: skip


def _pager_figures(stats_file: Path) -> dict[str, Any] | None:
    """What hetmem's pager did in a run: its summary and counters (--stats),
    so a slow pattern can be told from a slow device."""
    try:
        stats = json.loads(stats_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stats, dict):
        return None
    pager = stats.get("pager") or {}
    return {
        "summary": stats.get("pager_summary"),
        "counters": pager.get("counters"),
        "config": pager.get("config"),
    }


def _spread(xs: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize(p: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pattern and size: hetmem, every UMap page size, the best."""
    rows = []
    for pat in p["patterns"]:
        for mult in p["multiples"]:
            mine = [r for r in runs if r["pattern"] == pat and r["multiple"] == mult]
            times = {
                c: {r["rep"]: r["time_s"] for r in mine if r["contender"] == c and not r["error"]}
                for c in contenders(p)
            }
            rows.append(_row(pat, mult, times, [r for r in mine if r["error"]]))
    return rows


def _row(
    pat: str, mult: float, times: dict[str, dict[int, float]], failed: list[dict[str, Any]]
) -> dict[str, Any]:
    stats = {c: _spread(list(t.values())) for c, t in times.items() if t}
    umaps = [c for c in stats if c != "hetmem"]
    best = min(umaps, key=lambda c: stats[c]["median"]) if umaps else None
    ratio = None
    if best and "hetmem" in stats:
        paired = [times[best][k] / v for k, v in times["hetmem"].items() if k in times[best]]
        if paired:
            ratio = _spread(paired)
            ratio["of_medians"] = stats[best]["median"] / stats["hetmem"]["median"]
    hetmem_failed = any(r["contender"] == "hetmem" for r in failed)
    measured = None if ratio is None else ratio["of_medians"]
    detail = f"UMap best at {best[5:]} pages" if best else "no UMap run succeeded"
    target = target_row(f"{pat} at {mult:g}x: UMap time / hetmem time", measured, GOAL, detail)
    if hetmem_failed:  # a failed run of hetmem is a miss, not "not measured"
        target["pass"] = False
    return {
        "pattern": pat, "multiple": mult, "times": stats, "umap_best": best, "ratio": ratio,
        "errors": [f"{r['contender']} rep {r['rep']}: {r['error']}" for r in failed],
        "target": target,
    }  # fmt: skip


def print_rows(rows: list[dict[str, Any]]) -> None:
    def span(s: dict[str, Any] | None, fmt: str = "{:.3f}") -> str:
        if not s:
            return "-"
        return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"

    table = []
    for r in rows:
        best = r["umap_best"]
        ratio = r["ratio"]
        verdict = {True: "met", False: "MISSED", None: "not measured"}[r["target"]["pass"]]
        table.append(
            [
                f"{r['pattern']} {r['multiple']:g}x",
                span(r["times"].get("hetmem")),
                best[5:] if best else "-",
                span(r["times"].get(best) if best else None),
                "-"
                if not ratio
                else f"{ratio['of_medians']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})",
                verdict,
            ]
        )
    cols = ["pattern", "hetmem s", "UMap page", "UMap s", f"ratio (goal {GOAL})", ""]
    output.table("hetmem cache mode vs LLNL UMap (median, min-max)", cols, table)
    for r in rows:
        for e in r["errors"]:
            output.err_console().print(f"failed: {r['pattern']} {r['multiple']:g}x {e}")


def run(args: argparse.Namespace) -> int:
    p = plan(args)
    p.update(timeout=args.timeout, umap_buffered=args.umap_buffered)
    outdir = result_folder(args.output, "umap")
    runs_file = outdir / "runs.jsonl"
    runs_file.unlink(missing_ok=True)
    todo = schedule(p)
    runs = []
    for i, (rep, pat, mult, who) in enumerate(todo, 1):
        if not args.json:
            output.err_console().print(f"[{i}/{len(todo)}] {pat} {mult:g}x {who} (rep {rep + 1})")
        rec = execute(p, rep, pat, mult, who)
        runs.append(rec)
        with runs_file.open("a") as f:
            f.write(json.dumps(rec) + "\n")
    rows = summarize(p, runs)
    data = {
        "schema_version": SCHEMA_VERSION, "kind": "bench-umap", "hetmem_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": ["hetmem", "bench", *sys.argv[2:]], "outdir": str(outdir.resolve()),
        "budget_bytes": p["budget"], "multiples": p["multiples"], "umap_pagesizes": p["pagesizes"],
        "umap_lib": p["umap_lib"], "umap_io": "buffered" if args.umap_buffered else "direct",
        "storage": p["storage"], "threads": p["threads"], "repeat": p["repeat"],
        "kernel_reps": p["kernel_reps"], "reads": p["reads"], "goal": GOAL, "rows": rows,
        "targets": [r["target"] for r in rows],
    }  # fmt: skip
    output.write_atomic(outdir / "umap.json", json.dumps(data, indent=2))
    if args.json:
        output.print_json(data)
    else:
        print_rows(rows)
    return exit_status(data["targets"])
