# SPDX-License-Identifier: BSD-3-Clause
"""The benchmark harness: kernels x data sizes x modes x repetitions.

Each run is one kernel process started through `hetmem run --mode M`, so the
harness measures exactly what a user gets. Modes are interleaved inside each
repetition, in an order that rotates, so that noise on this shared machine
hits every mode alike. Every finished run is appended to DIR/runs.jsonl at
once, which makes an interrupted matrix resumable: a second invocation with
the same DIR skips the runs already there.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetmem import __version__, _native, child, sizes
from hetmem.bench import machine
from hetmem.bench.kernels import kernel_path
from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.output import write_atomic
from hetmem.run import cache
from hetmem.run import config as run_config
from hetmem.sizes import format_size

SCHEMA_VERSION = 1
ALL_MODES = ("dram", "cache", "swap", "flat", "hybrid")


@dataclass(frozen=True)
class Case:
    """One benchmark: a kernel binary and its arguments."""

    name: str  # unique label, e.g. "poly-ro-d1024"
    kernel: str  # hm-kernel-<kernel>
    args: tuple[str, ...] = ()
    group: str = ""  # plots group cases by this (e.g. "poly-ro")
    max_bytes: int | None = None  # cap for kernels too slow at large sizes
    note: str = ""
    # Tiles sized from the fast budget (--tile-budget), the same in every
    # mode: what a user of tiered memory would choose.
    budget_tiles: bool = False


def _poly(variant: str, degree: int) -> Case:
    return Case(
        f"poly-{variant}-d{degree}",
        "poly",
        ("--variant", variant, "--degree", str(degree)),
        group=f"poly-{variant}",
    )


# Cases by name; suites below refer to them.
CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("stream-triad", "stream", ("--op", "triad"), group="stream"),
        Case("stream-all", "stream", ("--op", "all"), group="stream"),
        Case("scan-read", "scan", ("--variant", "read"), group="scan"),
        Case("scan-rmw", "scan", ("--variant", "rmw"), group="scan"),
        # Row strips across a column-major matrix, a few KiB of every column
        # per strip: the loop that the pager's fault trace of LAPACK's dgetrf
        # (OpenBLAS's GEMM in an LU's trailing update, as in HPL) matches. In
        # no suite: the pager reads each strip's matrix whole (6-7x the
        # matrix per pass at 2x), a known loss.
        Case("scan-strips", "scan", ("--variant", "strips"), group="scan"),
        # Sums down the columns of a row-major matrix, one word of every row
        # a pass and the same page of each row for 512 passes: how numpy
        # copies a transposed matrix. The pager fills it page by page once
        # it finds the sweep sparse (src/sdm/sparse.c). In no suite: a pass
        # at 4x the budget takes seconds.
        Case("scan-cols", "scan", ("--variant", "cols"), group="scan"),
        *[_poly("ro", d) for d in (16, 64, 256, 1024, 4096)],
        *[_poly("rw", d) for d in (16, 64, 256, 1024, 4096)],
        Case("gemm-blas", "gemm", ("--variant", "blas"), group="gemm"),
        Case("gemm-tiled", "gemm", ("--variant", "tiled"), group="gemm", budget_tiles=True),
        Case(
            "gemm-naive",
            "gemm",
            ("--variant", "naive"),
            group="gemm",
            max_bytes=24 << 20,
            note="O(n^3) without blocking: capped at 24 MiB",
        ),
        Case("lu-lapack", "lu", ("--variant", "lapack"), group="lu"),
        Case("lu-tiled", "lu", ("--variant", "tiled"), group="lu", budget_tiles=True),
        Case("fft3d", "fft", (), group="fft"),
        Case("chase", "chase", (), group="chase"),
        # Random access at 4x the budget runs at device IOPS, not DRAM speed:
        # fixed operation counts keep these cases to seconds in every mode.
        Case("gups-update", "gups", ("--variant", "update", "--updates", "1000000"), group="gups"),
        Case("gups-read4k", "gups", ("--variant", "read4k", "--updates", "65536"), group="gups"),
        Case(
            "gups-update4k", "gups", ("--variant", "update4k", "--updates", "65536"), group="gups"
        ),
    ]
}

SUITES: dict[str, tuple[str, ...]] = {
    # The IMDT study's set (seed 000): synthetic benchmarks and kernels.
    "imdt": (
        "stream-triad",
        "poly-ro-d16",
        "poly-ro-d256",
        "poly-ro-d1024",
        "poly-rw-d1024",
        "gemm-blas",
        "gemm-tiled",
        "lu-lapack",
        "lu-tiled",
        "fft3d",
        "gups-update",
    ),
    # The IMDT study at a realistic scale (budget >= 1 GiB, data 2x and 4x):
    # its compute-bound kernels as a user of tiered memory writes them
    # (tiles sized from the budget), LAPACK's LU beside them, and the FFT.
    "imdt-scale": ("gemm-tiled", "lu-tiled", "lu-lapack", "fft3d"),
    # The software-defined-memory issue's list.
    "sdm": (
        "scan-read",
        "scan-rmw",
        "stream-triad",
        "gups-read4k",
        "gups-update4k",
        "poly-ro-d16",
        "poly-ro-d256",
        "poly-ro-d1024",
    ),
    # Bandwidth against arithmetic intensity (the paper's Figure 7).
    "poly": tuple(n for n in CASES if n.startswith("poly-")),
    # What `hetmem demo` runs: streaming, compute-bound, library (LAPACK-style
    # LU, FFTW) and random-access kernels, small; six, so that 3
    # repetitions of 2 sizes in 3 modes take about 5 minutes here.
    "demo": (
        "stream-triad",
        "scan-read",
        "poly-ro-d1024",
        "lu-tiled",
        "fft3d",
        "gups-read4k",
    ),
}


def resolve_cases(targets: Sequence[str]) -> list[Case]:
    """Suites and case names (or kernel names, meaning all their cases) to cases."""
    if not targets:
        targets = ["imdt"]
    out: list[Case] = []
    for t in targets:
        if t in SUITES:
            names: Iterable[str] = SUITES[t]
        elif t in CASES:
            names = [t]
        else:
            names = [n for n, c in CASES.items() if c.kernel == t or c.group == t]
            if not names:
                known = ", ".join([*SUITES, *sorted({c.kernel for c in CASES.values()})])
                raise UsageError(f"unknown suite or kernel '{t}' (known: {known})")
        for n in names:
            if CASES[n] not in out:
                out.append(CASES[n])
    return out


def parse_multiples(text: str, flag: str = "--sizes") -> list[float]:
    """'0.25x,0.5x,2x,4x' -> [0.25, 0.5, 2.0, 4.0]; errors name `flag`."""
    out = []
    for part in text.split(","):
        p = part.strip().lower().removesuffix("x")
        try:
            v = float(p)
        except ValueError:
            raise UsageError(
                f"{flag}: '{part}' is not a multiple of the budget (e.g. 0.5x,2x,4x)"
            ) from None
        if not 0 < v <= 1024:
            raise UsageError(f"{flag}: '{part}' must be between 0 and 1024x")
        out.append(v)
    if not out:
        raise UsageError("--sizes is empty")
    return out


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    for m in modes:
        if m not in ALL_MODES:
            raise UsageError(f"--modes: unknown mode '{m}' (known: {', '.join(ALL_MODES)})")
    if "dram" not in modes:
        # Efficiency is t_dram / t_mode: without dram there is no reference.
        modes.insert(0, "dram")
    return modes


@dataclass
class Plan:
    cases: list[Case]
    multiples: list[float]
    modes: list[str]
    repeat: int
    budget: int
    threads: int
    storage: str | None
    outdir: Path
    kernel_reps: int = 3
    # Each kernel run repeats past kernel_reps until its timed repetitions sum
    # to this (hm-kernel --min-time): a 10 ms STREAM pass is mostly noise on
    # its own, the best of 50 of them is not.
    kernel_min_time: float = 0.5
    timeout_s: float = 900.0
    extra: dict[str, Any] = field(default_factory=dict)
    # Repetitions of the sizes below the budget (multiple < 1), when more
    # than `repeat`. Such runs are short, and the time of one process varies
    # with where its pages landed (a 0.5x FFT ran 14-35% slower than dram in
    # one process per mode, as fast as dram in the next demo): the 'data
    # fits' check takes the best over several processes for little time.
    fits_repeat: int = 0

    def reps_for(self, multiple: float) -> int:
        return max(self.repeat, self.fits_repeat) if multiple < 1.0 else self.repeat

    def size_for(self, case: Case, multiple: float) -> int:
        size = int(self.budget * multiple)
        if case.max_bytes is not None:
            size = min(size, case.max_bytes)
        return size

    def runs(self) -> list[dict[str, Any]]:
        """Every run, in execution order: repetitions outermost, modes rotated."""
        out = []
        for rep in range(max(self.reps_for(m) for m in self.multiples)):
            i = 0
            for case in self.cases:
                for mult in self.multiples:
                    k = (rep + i) % len(self.modes)
                    order = self.modes[k:] + self.modes[:k]
                    i += 1
                    if rep >= self.reps_for(mult):
                        continue
                    for mode in order:
                        out.append(
                            {
                                "case": case.name,
                                "multiple": mult,
                                "mode": mode,
                                "rep": rep,
                            }
                        )
        return out


def run_key(r: dict[str, Any]) -> tuple[str, float, str, int]:
    return (r["case"], float(r["multiple"]), r["mode"], int(r["rep"]))


def available_modes() -> dict[str, str]:
    """Mode -> reason it cannot run here ('' when it can)."""
    libdir = _native.library_dir()
    out = {"dram": ""}
    out["cache"] = "" if (libdir / "libhetmem_preload.so").exists() else "preload library not built"
    out["swap"] = "" if os.geteuid() == 0 else "needs root (memory cgroup and swapon)"
    try:
        modes = getattr(run_config, "MODES", ("dram", "cache", "swap"))
    except ImportError:
        modes = ()
    for m in ("flat", "hybrid"):
        out[m] = "" if m in modes else "placement modes not available in this build"
    for m in ("cache", "swap"):
        if m not in modes and not out[m]:
            out[m] = "hetmem run does not support it in this build"
    return out


def load_runs(outdir: Path) -> list[dict[str, Any]]:
    path = outdir / "runs.jsonl"
    runs = []
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                runs.append(json.loads(line))
            except ValueError:
                # A line cut short by an interruption: that run is redone.
                continue
    return runs


def _kernel_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def exit_error_kind(mode: str, stats: dict[str, Any] | None) -> str:
    """Kind of a failed run's error from its `hetmem run --stats`: Linux swap
    under a tight memory cgroup can OOM-kill the program, and that is the
    baseline's own result (what a user would get), not a failure of the
    harness or of hetmem."""
    oom = ((stats or {}).get("swap") or {}).get("oom_kill")
    return "baseline-oom" if mode == "swap" and oom else "exit"


def execute_one(plan: Plan, case: Case, multiple: float, mode: str, rep: int) -> dict[str, Any]:
    """Runs one kernel under one mode and returns its record."""
    size = plan.size_for(case, multiple)
    binary = kernel_path(case.kernel)
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-") as tmp:
        stats_file = Path(tmp) / "stats.json"
        cmd = _run_command(plan, mode, stats_file)
        kcmd = [
            str(binary),
            "--bytes",
            str(size),
            "--threads",
            str(plan.threads),
            "--reps",
            str(plan.kernel_reps),
            "--min-time",
            f"{plan.kernel_min_time:g}",
            *case.args,
            *(("--tile-budget", str(plan.budget)) if case.budget_tiles else ()),
        ]
        env = dict(os.environ, OMP_NUM_THREADS=str(plan.threads))
        got = child.run([*cmd, "--", *kcmd], timeout=plan.timeout_s, env=env)
        rc, out, err = got.returncode, got.stdout, got.stderr
        if got.timed_out:
            rc, out, err = -1, "", f"timed out after {plan.timeout_s:.0f} s"
        wall = got.wall_s
        stats = _read_stats(stats_file)
    result = _kernel_json(out)
    error, error_kind = _run_error(rc, err, result, mode, stats)
    return {
        "schema_version": SCHEMA_VERSION,
        "case": case.name,
        "kernel": case.kernel,
        "group": case.group,
        "multiple": multiple,
        "size_bytes": size,
        "mode": mode,
        "rep": rep,
        "budget_bytes": plan.budget,
        "threads": plan.threads,
        "command": kcmd,
        "exit_code": rc,
        "wall_s": wall,
        "time_s": (result or {}).get("time_s"),
        "result": result,
        "run_stats": stats,
        "error": error,
        "error_kind": error_kind,
        "finished": time.time(),
    }


def _run_command(plan: Plan, mode: str, stats_file: Path) -> list[str]:
    """`hetmem run` with the plan's mode, budget and storage."""
    cmd = [
        sys.executable,
        "-m",
        "hetmem",
        "run",
        "--mode",
        mode,
        "--fast-budget",
        str(plan.budget),
        "--stats",
        str(stats_file),
    ]
    if plan.storage:
        cmd += ["--storage", plan.storage]
    return cmd


def _read_stats(stats_file: Path) -> dict[str, Any] | None:
    if not stats_file.exists():
        return None
    try:
        stats: dict[str, Any] | None = json.loads(stats_file.read_text())
    except ValueError:
        stats = None
    return stats


def _run_error(
    rc: int, err: str, result: dict[str, Any] | None, mode: str, stats: dict[str, Any] | None
) -> tuple[str, str]:
    """The error and its kind of one run ("" when it went well)."""
    if rc != 0:
        error = (err.strip().splitlines() or [f"exit code {rc}"])[-1]
        return error, exit_error_kind(mode, stats)
    if result is None:
        return "kernel printed no JSON result", "output"
    if not result.get("verified", False):
        return "kernel result not verified", "verify"
    return "", ""


def write_manifest(plan: Plan, argv: Sequence[str]) -> None:
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "hetmem_version": __version__,
        "machine": cache.machine_key(),
        "machine_info": machine.describe(plan.storage),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": ["hetmem", *argv],
        "cases": [asdict(c) for c in plan.cases],
        "multiples": plan.multiples,
        "modes": plan.modes,
        "repeat": plan.repeat,
        "fits_repeat": plan.fits_repeat,
        "budget_bytes": plan.budget,
        "threads": plan.threads,
        "storage": plan.storage,
        "kernel_reps": plan.kernel_reps,
        "kernel_min_time": plan.kernel_min_time,
        "efficiency_stat": EFFICIENCY_STAT,
        "probe": cache.load("probe"),
        **plan.extra,
    }
    path = plan.outdir / "manifest.json"
    if path.exists():
        old = json.loads(path.read_text())
        same = all(
            old.get(k) == manifest[k]
            for k in (
                "multiples",
                "modes",
                "budget_bytes",
                "threads",
                "kernel_reps",
                "kernel_min_time",
            )
        )
        if not same:
            raise UsageError(
                f"{plan.outdir} holds results of a different matrix; "
                "use another -o directory (or delete it)"
            )
        # Resuming: keep the original creation time, record the new command.
        manifest["created"] = old.get("created", manifest["created"])
        manifest["resumed"] = [*old.get("resumed", []), manifest["command"]]
        manifest["command"] = old.get("command", manifest["command"])
        if manifest["probe"] is None:
            manifest["probe"] = old.get("probe")
        names = {c["name"] for c in manifest["cases"]}
        manifest["cases"] += [c for c in old.get("cases", []) if c["name"] not in names]
    plan.outdir.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(manifest, indent=2))


def execute(
    plan: Plan,
    argv: Sequence[str],
    on_progress: Callable[[int, int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Runs what is missing from plan.outdir; returns every run record there."""
    write_manifest(plan, argv)
    done = {run_key(r) for r in load_runs(plan.outdir) if not r.get("error")}
    todo = [r for r in plan.runs() if run_key(r) not in done]
    cases = {c.name: c for c in plan.cases}
    total = len(todo)
    with open(plan.outdir / "runs.jsonl", "a") as log:
        for i, r in enumerate(todo):
            case = cases[r["case"]]
            label = (
                f"{case.name} {format_size(plan.size_for(case, r['multiple']))} "
                f"({r['multiple']:g}x) {r['mode']}"
            )
            if on_progress:
                on_progress(i, total, label)
            rec = execute_one(plan, case, r["multiple"], r["mode"], r["rep"])
            log.write(json.dumps(rec) + "\n")
            log.flush()
            os.fsync(log.fileno())
    if on_progress:
        on_progress(total, total, "done")
    return load_runs(plan.outdir)


def hard_failures(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed runs that count against hetmem (a baseline OOM-killed does not)."""
    return [
        r for r in latest_runs(runs) if r.get("error") and r.get("error_kind") != "baseline-oom"
    ]


def latest_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (case, multiple, mode, rep): the latest successful one,
    else the latest failure."""
    best: dict[tuple[str, float, str, int], dict[str, Any]] = {}
    for r in runs:
        k = run_key(r)
        old = best.get(k)
        if old is None or (not r.get("error") or old.get("error")):
            best[k] = r
    return list(best.values())


def run_best_time(r: dict[str, Any]) -> float | None:
    """A run's best repetition time: the kernel's time_best_s (the fastest of
    its --reps/--min-time repetitions), else its time_s."""
    res = r.get("result") or {}
    t = res.get("time_best_s") if isinstance(res, dict) else None
    if not isinstance(t, int | float) or t <= 0:
        t = r.get("time_s")
    return float(t) if isinstance(t, int | float) and t > 0 else None


# Efficiency statistic. Each kernel run repeats its operation for at least
# Plan.kernel_min_time (STREAM's convention) and reports its best repetition;
# a mode's time is the best over every run of it (all harness repetitions),
# and efficiency = best t_dram / best t_mode: best-of-N for every mode alike.
# The best is what the hardware and the runtime can do; noise from the other
# load on a shared machine only ever adds time, so it moves medians (a 10 ms
# run in dram mode spread 0.9-2x over runs) but hardly the best. The spread
# (efficiency_min/max, efficiency_median) comes from the ratios paired by
# harness repetition, whose modes ran back to back.
EFFICIENCY_STAT = "best"


def efficiency_table(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Efficiency = t_dram / t_mode per (case, size, mode), see EFFICIENCY_STAT.

    Rows hold the efficiency of the best times, the median, min and max of
    the ratios paired by repetition, how many repetitions were paired, and
    dram's own spread over its repetitions (the noise floor of the ratios)."""
    runs = latest_runs(runs)
    times: dict[tuple[str, float, str], dict[int, float]] = {}
    meta: dict[tuple[str, float], dict[str, Any]] = {}
    failures: dict[tuple[str, float, str], list[str]] = {}
    for r in runs:
        k = (r["case"], float(r["multiple"]), r["mode"])
        meta[(r["case"], float(r["multiple"]))] = r
        t = run_best_time(r)
        if r.get("error") or t is None:
            failures.setdefault(k, []).append(r.get("error") or "no time")
            continue
        times.setdefault(k, {})[int(r["rep"])] = t
    rows = []
    for (case, mult), m in sorted(meta.items()):
        ref = times.get((case, mult, "dram"), {})
        modes = sorted({k[2] for k in [*times, *failures] if k[0] == case and k[1] == mult})
        for mode in modes:
            row = {
                "case": case,
                "group": m.get("group", ""),
                "multiple": mult,
                "size_bytes": m["size_bytes"],
                "mode": mode,
                **_efficiency_figures(ref, times.get((case, mult, mode), {})),
                "dram_spread": _spread(ref),
                "failures": failures.get((case, mult, mode), []),
            }
            rows.append(row)
    return rows


def _spread(t: dict[int, float]) -> float | None:
    """Slowest over fastest of one mode's repetitions: how much the machine
    alone moves a time (null below two repetitions)."""
    return max(t.values()) / min(t.values()) if len(t) >= 2 and min(t.values()) > 0 else None


def _efficiency_figures(ref: dict[int, float], t: dict[int, float]) -> dict[str, Any]:
    """One mode's times against dram's (ref), both by repetition."""
    effs = [ref[rep] / t[rep] for rep in sorted(t) if rep in ref and t[rep] > 0]
    best = min(t.values()) if t else None
    eff = min(ref.values()) / best if ref and best else None
    return {
        "time_s_best": best,
        "time_s_median": statistics.median(t.values()) if t else None,
        "efficiency": eff,
        "efficiency_stat": EFFICIENCY_STAT,
        "efficiency_median": statistics.median(effs) if effs else None,
        "efficiency_min": min(effs) if effs else None,
        "efficiency_max": max(effs) if effs else None,
        "pairs": len(effs),
        "ratios": effs,
    }


def parse_budget(text: str) -> int:
    budget = sizes.parse_budget(text, "--fast-budget")
    if budget < (16 << 20):
        raise UsageError(f"--fast-budget {text}: use at least 16MiB for benchmarks")
    return budget


def target_row(target: str, measured: float | None, goal: float, detail: str) -> dict[str, Any]:
    """One target of a suite's table and JSON: met when measured >= goal,
    not measured (pass None) when measured is None."""
    return {
        "target": target,
        "measured": measured,
        "goal": goal,
        "pass": None if measured is None else measured >= goal,
        "detail": detail,
    }


def add_output_arguments(
    parser: Any, suite: str, *, resumable: bool = False, data: str = "result"
) -> None:
    """A suite's -o DIR (its result folder; resumable: a rerun into it
    resumes) and --json (printing its `data` data)."""
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"result folder (default: hetmem-bench-{suite}-<time>)"
        + ("; reuse it to resume" if resumable else ""),
    )
    parser.add_argument("--json", action="store_true", help=f"print the {data} data as JSON")


def result_folder(output: Path | None, suite: str) -> Path:
    """The result folder -o named (default hetmem-bench-SUITE-<time>),
    created; one line when it cannot be."""
    outdir = output or Path(f"hetmem-bench-{suite}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EnvironmentProblem(f"-o {outdir}: {e.strerror}") from None
    return outdir


def verified_line(stdout: str) -> dict[str, Any] | None:
    """A kernel's result: the last JSON line of its output, if it says the
    result was verified; None otherwise."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) and data.get("verified") is True else None
    return None
