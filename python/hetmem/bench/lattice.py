# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench lattice`: the hm-lattice mini-app (apps/lattice) measured.

Four measurements, each side by side in one run:
- Dirac operator: achieved bandwidth (minimal bytes per site x sites / time,
  double and single) against the bound set by the probed DRAM bandwidth at
  the same thread count (the probe's STREAM triad with as many threads as
  the kernel ran with, else a STREAM triad measured now with
  hm-kernel-stream). Target: >= 60% of the bound.
- CGNR vs two-level AMG on a quenched heatbath field near the critical mass,
  AMG setup amortised over 4 right-hand sides. Target: >= 5x, on a field where
  CGNR needs >= 1000 iterations.
- Strong scaling of the Dirac operator and the AMG solve over 1 and 2 ranks.
- Halo exchange: effective bandwidth per rank against message size, per rank
  count; and the mpirun command that runs the same on many nodes.
- Modes (`--parts modes -o DIR`, not in the default set): the AMG solver under
  `hetmem run --mode dram|cache|swap|flat|hybrid` with the fast budget at 25%,
  50% and 100% of its footprint, written as a benchmark results folder that
  `hetmem report DIR` renders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hetmem import __version__, child, output
from hetmem.bench import exit_status, find_program, harness
from hetmem.bench.harness import available_modes
from hetmem.bench.kernels import run_kernel
from hetmem.errors import EnvironmentProblem, HetmemError, SchemaError, UsageError
from hetmem.run import cache
from hetmem.sizes import parse_size

SCHEMA_VERSION = 1
DIRAC_TARGET = 0.60
AMG_TARGET = 5.0
CGNR_MIN_ITERS = 1000
NRHS = 4

# What `hetmem bench --help` lists for this suite.
name = "lattice"
help = "lattice QCD mini-app: Dirac bandwidth vs bound, AMG vs CGNR, scaling, halo exchange"
description = (
    "Runs the Wilson-clover mini-app (apps/lattice): the Dirac operator's bandwidth\n"
    "against the bound from bytes per site and the probed DRAM bandwidth, two-level\n"
    "AMG against CGNR with setup amortized over 4 right-hand sides, strong scaling\n"
    "over 1 and 2 ranks and a halo-exchange benchmark; prints the mpirun command\n"
    "that runs the same on many nodes."
)

# The solver benchmark's field: quenched beta=6.0 heatbath (30 sweeps from a
# cold start), clover csw=1, mass close to critical so that CGNR slows down.
# Scanned here: CGNR needs 885 iterations on 12^4 at m0=-0.6, 635 on 8^4, and
# on 8^3x32 (the long antiperiodic direction lowers the gap) 1395 at -0.6 and
# 2266 at -0.55. The outer FGMRES restart is 100: with restart 25 the AMG solve
# stagnates on this field (restarts discard the low modes the coarse grid
# leaves). The coarse (odd-even reduced) GMRES is capped at 20 iterations per
# cycle: on this field it never reaches its 5e-2 tolerance, and a cap of 35
# gave 30 instead of 31 outer iterations at a higher coarse cost. SAP block
# solves are MR on the odd-even reduced block system (41 -> 32 outer
# iterations against MR on the full block). Three post-smoothing sweeps: with
# two, 40-54 outer iterations instead of 32-34. Setup: the initial phase
# with one SAP sweep per test vector (31 iterations, against 32 with 1+2
# sweeps and 42 with 1+2+3 before the odd-even block solves), 2 bootstrap
# cycles (1 gave 65 iterations); 12 test vectors (34 iterations) cost less
# per right-hand side than 16 (31) once setup is amortised over 4.
SOLVE_FIELD = {
    "lattice": "8 8 8 32",
    "block": "4 4 4 4",
    "gauge": "heatbath",
    "beta": "6.0",
    "sweeps": "30",
    "csw": "1.0",
    "m0": "-0.55",
    "test vectors": "12",
    "setup iter": "2",
    "setup sap": "1",
    "restart": "100",
    "coarse max iterations": "20",
    "post smooth": "3",
    "tolerance": "1e-10",
}
QUICK_FIELD = {**SOLVE_FIELD, "lattice": "8 8 8 8", "m0": "-0.6"}


def lattice_binary() -> Path:
    return find_program("hm-lattice")


def mpirun() -> str:
    path = shutil.which("mpirun") or shutil.which("mpiexec")
    if not path:
        raise EnvironmentProblem("mpirun not found (apt install openmpi-bin libopenmpi-dev)")
    return path


def mpi_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    if os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def mpirun_command(ranks: int, args: list[str], threads: int = 1) -> list[str]:
    cmd = [mpirun(), "-n", str(ranks)]
    if ranks > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    if threads > 1:
        # Open MPI binds each rank to one core when there are at most two
        # ranks: its OpenMP threads would then share that core
        cmd += ["--bind-to", "none"]
    return [*cmd, str(lattice_binary()), *args]


def settings_args(settings: dict[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in settings.items():
        out += ["--set", f"{k}={v}"]
    return out


def run_lattice(
    ranks: int,
    settings: dict[str, str],
    threads: int = 1,
    extra: list[str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Runs hm-lattice on `ranks` MPI ranks; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="hm-lattice-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = mpirun_command(
            ranks, [*settings_args(settings), *(extra or []), "--json", str(out)], threads
        )
        proc = child.run(cmd, env=mpi_env(threads), timeout=timeout)
        if proc.timed_out:
            raise HetmemError(f"hm-lattice timed out after {timeout} s")
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "hm-lattice" in ln]
            msg = lines[0] if lines else f"hm-lattice exit code {proc.returncode}"
            if proc.returncode == 2:
                raise UsageError(msg)
            raise HetmemError(msg)
        try:
            data = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            raise SchemaError(f"hm-lattice result unreadable: {e}") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise SchemaError(f"hm-lattice schema_version {data.get('schema_version')!r}")
    return data


def dram_bandwidth(threads: int) -> tuple[float, str]:
    """GB/s of the fastest memory tier at the thread count the kernel runs
    with (like with like): the probe's STREAM triad measured with exactly
    `threads` threads, else one measured now with hm-kernel-stream."""
    probe = cache.load("probe")
    if probe:
        best = _probe_triad(probe, threads)
        if best:
            return best
    res = run_kernel("stream", ["--bytes", "1G", "--threads", str(threads)])
    return float(res["gbs"]), f"hm-kernel-stream triad now, {threads} thread(s)"


def _probe_triad(probe: dict[str, Any], threads: int) -> tuple[float, str] | None:
    """The best STREAM triad a cached probe measured with `threads` threads."""
    tiers = probe.get("tiers") or []
    items = tiers.values() if isinstance(tiers, dict) else tiers
    best: tuple[float, str] | None = None
    for t in items:
        if not isinstance(t, dict) or t.get("kind", "memory") != "memory":
            continue
        for gbs in _triads_at(t, threads):
            if not best or gbs > best[0]:
                best = (float(gbs), f"probe STREAM triad, {threads} thread(s), {t.get('name')}")
    return best


def _triads_at(t: dict[str, Any], threads: int) -> list[float]:
    """A probed tier's positive triad figures at `threads` threads."""
    stream = t.get("stream")
    if isinstance(stream, dict):
        stream = [stream]
    out = []
    for s in stream if isinstance(stream, list) else []:
        if not isinstance(s, dict) or s.get("threads") != threads:
            continue
        gbs = s.get("triad_gbs")
        if isinstance(gbs, (int, float)) and gbs > 0:
            out.append(gbs)
    return out


def llc_bytes(fsroot: str = "/") -> int | None:
    """Size of CPU 0's last-level cache from sysfs, None when unknown."""
    base = Path(fsroot) / "sys/devices/system/cpu/cpu0/cache"
    best: tuple[int, int] | None = None
    for idx in base.glob("index*"):
        try:
            level = int((idx / "level").read_text())
            size = parse_size((idx / "size").read_text().strip())
        except (OSError, ValueError, HetmemError):
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return best[1] if best else None


def judged_precisions(d: dict[str, Any], llc: int | None = None) -> list[str]:
    """The precisions whose bandwidth is a DRAM figure: operator data at least
    twice the last-level cache (a cache-resident operator would be judged
    against the DRAM bound it does not touch)."""
    llc = llc_bytes() if llc is None else llc
    dims = [int(x) for x in str(d["lattice"]).split()]
    sites = 1
    for n in dims:
        sites *= n
    return [
        p
        for p in ("double", "single")
        if p in d and (llc is None or sites * d[p]["bytes_per_site"] >= 2 * llc)
    ]


# The Wilson-clover operator's data per site in double: 132 complex numbers
# as stored (links and clover), 16 bytes each (hm-lattice's bytes_per_site).
DIRAC_DOUBLE_BYTES = 132 * 16


def beyond_cache_side(llc: int | None, sides: Sequence[int] = (24, 32)) -> int | None:
    """The smallest side L of an L^4 lattice whose operator data in double
    is at least twice the last-level cache (what judged_precisions asks);
    the first when the cache is unknown, None when none is. 24^4 (700 MB)
    was beyond any cache until a 480 MiB L3 held half of it."""
    for n in sides:
        if llc is None or n**4 * DIRAC_DOUBLE_BYTES >= 2 * llc:
            return n
    return None


def bench_dirac(lattice: str, ranks: int, threads: int, bound_gbs: float) -> dict[str, Any]:
    data = run_lattice(
        ranks,
        {
            "lattice": lattice,
            "block": " ".join(["5" if int(lattice.split()[0]) % 5 == 0 else "4"] * 4),
            "gauge": "random",
            "solver": "cgnr",
            "max iterations": "1",
            "dirac reps": "20",
            "storage": "half",
        },
        threads=threads,
    )
    out: dict[str, Any] = {"lattice": lattice, "ranks": ranks, "threads": threads}
    # The bound is the probe's STREAM triad, a best-of-repetitions figure
    # (src/probe/stream.c), so the operator is compared by its best apply
    # too; the mean over the repetitions is reported beside it.
    for prec in ("double", "single", "half"):
        k = data["kernels"].get(f"dirac_{prec}")
        if k is None:
            continue
        best = k.get("gbs_best", k["gbs"])
        out[prec] = {
            "gbs": best,
            "gbs_mean": k["gbs"],
            "gflops": k["gflops"],
            "bytes_per_site": k["bytes_per_site"],
            "seconds_per_apply": k["seconds_per_apply"],
            "seconds_best": k.get("seconds_best", k["seconds_per_apply"]),
            "fraction_of_bound": best / bound_gbs,
            "fraction_of_bound_mean": k["gbs"] / bound_gbs,
        }
    return out


def bench_solvers(field: dict[str, str], ranks: int, threads: int, nrhs_cg: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hm-lattice-field-") as tmp:
        cfg = str(Path(tmp) / "field.cfg")
        gen = {**field, "gauge write": cfg, "solver": "cgnr", "max iterations": "1"}
        gen["dirac reps"] = "1"
        g = run_lattice(ranks, gen, threads=threads)
        use = {**field, "gauge": "file", "gauge file": cfg, "dirac reps": "1", "rhs": "random"}
        use["max iterations"] = "20000"
        # CGNR right-hand sides before and after the AMG run, so that a change
        # of the load on this shared machine hits both solvers alike
        before = max(1, nrhs_cg // 2)
        cg = run_lattice(ranks, {**use, "solver": "cgnr", "nrhs": str(before)}, threads=threads)
        mg = run_lattice(ranks, {**use, "solver": "amg", "nrhs": str(NRHS)}, threads=threads)
        # the same AMG with links, clover, P and D_c stored in 16 bit
        mgh = run_lattice(
            ranks, {**use, "solver": "amg", "nrhs": str(NRHS), "storage": "half"}, threads=threads
        )
        cg_solves = list(cg["solves"])
        if nrhs_cg > before:
            cg2 = run_lattice(
                ranks, {**use, "solver": "cgnr", "nrhs": str(nrhs_cg - before)}, threads=threads
            )
            cg_solves += cg2["solves"]
    mg_solves = mg["solves"]
    t_cg = sum(s["time_s"] for s in cg_solves) / len(cg_solves)
    t_mg = sum(s["time_s"] for s in mg_solves) / len(mg_solves)
    setup = mg["phases"]["setup_s"]
    per_rhs = t_mg + setup / NRHS
    return {
        "field": field,
        "plaquette": g["plaquette"],
        "gauge_s": g["phases"]["gauge_s"],
        "cgnr_iterations": [s["iterations"] for s in cg_solves],
        "cgnr_true_relres": max(s["true_relres"] for s in cg_solves),
        "cgnr_s_per_rhs": t_cg,
        "amg_iterations": [s["iterations"] for s in mg_solves],
        "amg_true_relres": max(s["true_relres"] for s in mg_solves),
        "amg_setup_s": setup,
        "amg_solve_s_per_rhs": t_mg,
        "amg_coarse_share": mg["phases"]["coarse_share"],
        "amg_phases": mg.get("amg_phases", {}),
        "amg_s_per_rhs_with_setup": per_rhs,
        "speedup_with_setup": t_cg / per_rhs,
        "speedup_solve_only": t_cg / t_mg,
        "memory_tags": mg["memory"]["tags"],
        "storage": {name: _storage_summary(r) for name, r in (("single", mg), ("half", mgh))},
    }


def _storage_summary(r: dict[str, Any]) -> dict[str, Any]:
    """One AMG run's figures, for the comparison of preconditioner storage."""
    return {
        "iterations": [s["iterations"] for s in r["solves"]],
        "true_relres": max(s["true_relres"] for s in r["solves"]),
        "setup_s": r["phases"]["setup_s"],
        "solve_s_per_rhs": sum(s["time_s"] for s in r["solves"]) / len(r["solves"]),
        "s_per_rhs_with_setup": sum(s["time_s"] for s in r["solves"]) / len(r["solves"])
        + r["phases"]["setup_s"] / NRHS,
        # peak bytes of these tags (half storage converts from the
        # single copies, so its peak includes both for a moment)
        "tagged_peak_bytes": sum(
            int(r["memory"]["tags"][t]["bytes"]) for t in ("gauge", "clover", "testvec", "coarse")
        ),
    }


def bench_scaling(field: dict[str, str], threads: int) -> list[dict[str, Any]]:
    rows = []
    for ranks in (1, 2):
        d = run_lattice(
            ranks,
            {**field, "solver": "amg", "nrhs": "1", "dirac reps": "10"},
            threads=threads,
        )
        rows.append(
            {
                "ranks": ranks,
                "process_grid": d["process_grid"],
                "dirac_double_s": d["kernels"]["dirac_double"]["seconds_per_apply"],
                "amg_setup_s": d["phases"]["setup_s"],
                "amg_solve_s": d["phases"]["solve_amg_s"],
                "amg_iterations": d["solves"][0]["iterations"],
            }
        )
    base = rows[0]
    for r in rows:
        r["dirac_speedup"] = base["dirac_double_s"] / r["dirac_double_s"]
        r["solve_speedup"] = base["amg_solve_s"] / r["amg_solve_s"]
    return rows


def bench_halo(ranks_list: list[int]) -> list[dict[str, Any]]:
    out = []
    for ranks in ranks_list:
        grid = {1: "1 1 1 1", 2: "1 1 1 2", 4: "1 1 2 2", 8: "1 2 2 2"}.get(ranks)
        if grid is None:
            raise UsageError(f"halo benchmark supports 1, 2, 4 or 8 ranks, not {ranks}")
        d = run_lattice(
            ranks, {"lattice": "16 16 16 16", "process grid": grid}, extra=["--halo-bench"]
        )
        out.append({"ranks": ranks, "process_grid": d["process_grid"], "points": d["points"]})
    return out


MODES_FRACTIONS = (0.25, 0.5, 1.0)
MODES_ALL = ("dram", "cache", "swap", "flat", "hybrid")
MODES_FIELD = {**QUICK_FIELD, "sweeps": "10", "restart": "50", "dirac reps": "1", "solver": "amg"}


def _hetmem(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "hetmem", *args]


def _lattice_cmd(settings: dict[str, str], json_path: Path) -> list[str]:
    # one rank: the MPI singleton start, so `hetmem run` wraps the solver itself
    return [str(lattice_binary()), *settings_args(settings), "--json", str(json_path)]


def _run_checked(cmd: list[str], what: str, timeout: float) -> child.Finished:
    proc = child.run(cmd, env=mpi_env(1), timeout=timeout)
    if proc.timed_out:
        raise HetmemError(f"{what} timed out after {timeout:.0f} s")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise HetmemError(f"{what} failed: {last}")
    return proc


def bench_modes(
    outdir: Path,
    settings: dict[str, str] | None = None,
    fractions: tuple[float, ...] = MODES_FRACTIONS,
    modes: tuple[str, ...] = MODES_ALL,
    repeat: int = 1,
    timeout: float = 600.0,
) -> list[dict[str, Any]]:
    """hm-lattice (AMG setup + solve) under each `hetmem run` mode with the fast
    budget at `fractions` of the solver's footprint, written as a benchmark
    results folder (docs/formats.md) that `hetmem report DIR` renders: one
    case per budget fraction, multiple = footprint / budget, the time being
    the solver's own setup + solve seconds. flat and hybrid use a placement
    from `hetmem profile` + `hetmem advise` at that budget."""
    settings = {**MODES_FIELD, **(settings or {})}
    outdir.mkdir(parents=True, exist_ok=True)
    avail = available_modes()
    use = [m for m in modes if not avail.get(m, "unknown mode")]
    skipped = {m: avail.get(m, "unknown mode") for m in modes if m not in use}
    # footprint: the peak bytes of every tagged structure, from a plain run
    ref = run_lattice(1, settings, timeout=timeout)
    footprint = sum(int(t["bytes"]) for t in ref["memory"]["tags"].values())
    profiles = _modes_profiles(outdir, settings, use, timeout)
    cases = []
    for f in fractions:
        budget = max(int(footprint * f), 16 << 20)
        name = f"lattice-amg-{round(100 * f)}pct"
        placement = outdir / f"placement-{round(100 * f)}pct.toml"
        for m in (m for m in ("flat", "hybrid") if profiles and m in use):
            # hybrid's placement counts the pager's cache (`advise --for`)
            argv = ["advise", "--fast-budget", str(budget), "--for", m, "-o"]
            argv += [str(_for_mode(placement, m)), *profiles]
            _run_checked(_hetmem(argv), "hetmem advise", timeout)
        cases.append((f, budget, name, placement))
    manifest = _modes_manifest(outdir, settings, cases, footprint, use, skipped, repeat)
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    records = []
    with open(outdir / "runs.jsonl", "w") as log:
        for rep in range(repeat):
            for i, (_f, budget, name, placement) in enumerate(cases):
                k = (rep + i) % len(use)
                for mode in use[k:] + use[:k]:
                    rec = _modes_one(settings, name, footprint, budget, mode, rep, placement)
                    records.append(rec)
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
    return records


def _modes_profiles(
    outdir: Path, settings: dict[str, str], use: list[str], timeout: float
) -> list[str]:
    """The profiles of a plain run, when a mode needs a placement."""
    prof_dir = outdir / "profile"
    if any(m in ("flat", "hybrid") for m in use):
        prof_dir.mkdir(exist_ok=True)
        _run_checked(
            _hetmem(["profile", "-o", str(prof_dir / "lattice.prof"), "--"])
            + _lattice_cmd(settings, prof_dir / "result.json"),
            "hetmem profile",
            timeout,
        )
    return sorted(str(p) for p in prof_dir.glob("lattice.prof*")) if prof_dir.exists() else []


def _modes_manifest(
    outdir: Path,
    settings: dict[str, str],
    cases: list[tuple[float, int, str, Path]],
    footprint: int,
    use: list[str],
    skipped: dict[str, str],
    repeat: int,
) -> dict[str, Any]:
    return {
        "schema_version": harness.SCHEMA_VERSION,
        "hetmem_version": __version__,
        "machine": cache.machine_key(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ["hetmem", "bench", "lattice", "--parts", "modes", "-o", str(outdir)],
        "cases": [
            {
                "name": name,
                "kernel": "lattice",
                "args": settings_args(settings),
                "group": "lattice-amg",
                "max_bytes": None,
                "note": f"fast budget {round(100 * f)}% of the {footprint} B footprint",
            }
            for f, _, name, _ in cases
        ],
        "multiples": [footprint / b for _, b, _, _ in cases],
        "modes": use,
        "skipped_modes": skipped,
        "repeat": repeat,
        "budget_bytes": footprint,
        "footprint_bytes": footprint,
        "threads": 1,
        "storage": None,
        "kernel_reps": 1,
        "probe": cache.load("probe"),
    }


def _modes_one(
    settings: dict[str, str],
    name: str,
    footprint: int,
    budget: int,
    mode: str,
    rep: int,
    placement: Path,
) -> dict[str, Any]:
    rc, err, wall, result, stats, kcmd = _modes_exec(settings, budget, mode, placement)
    error, error_kind, time_s, result = _modes_verdict(mode, rc, err, result, stats)
    return {
        "schema_version": 1,
        "case": name,
        "kernel": "lattice",
        "group": "lattice-amg",
        "multiple": footprint / budget,
        "size_bytes": footprint,
        "mode": mode,
        "rep": rep,
        "budget_bytes": budget,
        "threads": 1,
        "command": kcmd,
        "exit_code": rc,
        "wall_s": wall,
        "time_s": time_s,
        "result": result,
        "run_stats": stats,
        "error": error,
        "error_kind": error_kind,
        "finished": time.time(),
    }


def _for_mode(placement: Path, mode: str) -> Path:
    """The placement file a mode runs with: hybrid's beside flat's."""
    return placement.with_name(placement.stem + "-hybrid.toml") if mode == "hybrid" else placement


def _modes_exec(
    settings: dict[str, str], budget: int, mode: str, placement: Path
) -> tuple[int, str, float, Any, Any, list[str]]:
    """Runs hm-lattice under `hetmem run --mode`: exit code, stderr, wall
    seconds, its JSON result and run statistics (None when absent), the
    kernel command."""

    with tempfile.TemporaryDirectory(prefix="hm-lattice-mode-") as tmp:
        res_path, stats_path = Path(tmp) / "result.json", Path(tmp) / "stats.json"
        cmd = ["run", "--mode", mode, "--fast-budget", str(budget), "--stats", str(stats_path)]
        if mode in ("flat", "hybrid"):
            cmd += ["--placement", str(_for_mode(placement, mode))]
        kcmd = _lattice_cmd(settings, res_path)
        t0 = time.perf_counter()
        try:
            proc = child.run(_hetmem([*cmd, "--", *kcmd]), env=mpi_env(1))
            rc, err = proc.returncode, proc.stderr
        except OSError as e:
            rc, err = -1, str(e)
        wall = time.perf_counter() - t0
        return rc, err, wall, _json_or_none(res_path), _json_or_none(stats_path), kcmd


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _modes_verdict(
    mode: str, rc: int, err: str, result: Any, stats: Any
) -> tuple[str, str, float | None, Any]:
    """error, error kind, solver seconds and the result marked verified."""
    error = error_kind = ""
    time_s = None
    if rc != 0:
        error = (err.strip().splitlines() or [f"exit code {rc}"])[-1]
        error_kind = harness.exit_error_kind(mode, stats)
    elif not result:
        error, error_kind = "hm-lattice wrote no JSON result", "output"
    else:
        solves = result.get("solves") or []
        ok = bool(solves) and all(s.get("converged") for s in solves)
        time_s = result["phases"]["setup_s"] + sum(s["time_s"] for s in solves)
        result = {**result, "verified": ok, "time_s": time_s}
        if not ok:
            error, error_kind = "solve did not converge", "verify"
    return error, error_kind, time_s, result


def modes_table(records: list[dict[str, Any]]) -> list[list[str]]:
    """Rows: budget case, mode, solver seconds, efficiency t_dram / t_mode."""
    dram = {(r["case"], r["rep"]): r["time_s"] for r in records if r["mode"] == "dram"}
    rows = []
    for r in records:
        t, base = r["time_s"], dram.get((r["case"], r["rep"]))
        eff = f"{base / t:.2f}" if t and base else "-"
        rows.append(
            [
                r["case"],
                f"{r['budget_bytes'] / 2**20:.0f} MiB",
                r["mode"],
                f"{t:.2f}" if t else "-",
                eff,
                r["error"] or "ok",
            ]
        )
    return rows


def many_nodes_command(nodes: int = 16, per_node: int = 4) -> str:
    ranks = nodes * per_node
    return (
        f"mpirun -n {ranks} --map-by ppr:{per_node}:node --bind-to core -x OMP_NUM_THREADS "
        f"{lattice_binary()} --set 'lattice=32 32 32 64' --set 'process grid=2 2 4 4' "
        f"--set 'mapping=node-blocked' --set 'ranks per node={per_node}' --set solver=all "
        f"--set nrhs=4 --json lattice-{ranks}.json   # and: ... --halo-bench"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="8^4 field, 1 CGNR right-hand side")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank (1)")
    parser.add_argument(
        "--parts",
        default="dirac,solve,scaling,halo",
        help="comma list of dirac, solve, scaling, halo, modes (default: all but modes)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="results folder for --parts modes (for `hetmem report DIR`)",
    )


def run(args: argparse.Namespace) -> int:
    parts = _check_parts(args)
    field = QUICK_FIELD if args.quick else SOLVE_FIELD
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "machine": cache.machine_key(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": bool(args.quick),
    }
    ok = True
    if "dirac" in parts:
        d = _dirac_part(args)
        ok &= d["met"]
        result["dirac"] = d
    if "solve" in parts:
        s = _solve_part(args, field)
        ok &= s["met"]
        result["solve"] = s
    if "scaling" in parts:
        result["scaling"] = bench_scaling(QUICK_FIELD, args.threads)
    if "halo" in parts:
        result["halo"] = bench_halo([2] if args.quick else [2, 4])
    if "modes" in parts:
        recs = bench_modes(args.output)
        result["modes"] = {"folder": str(args.output), "runs": recs}
    result["many_nodes_command"] = many_nodes_command()
    result["all_targets_met"] = ok
    if args.json:
        output.print_json(result)
    else:
        _print(result)
    return exit_status([ok])


def _check_parts(args: argparse.Namespace) -> list[str]:
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in ("dirac", "solve", "scaling", "halo", "modes")]
    if bad:
        raise UsageError(f"unknown part '{bad[0]}' (parts: dirac, solve, scaling, halo, modes)")
    if not parts:
        raise UsageError("--parts: name at least one part (dirac, solve, scaling, halo, modes)")
    if not 1 <= args.threads <= 4096:
        raise UsageError(f"--threads must be 1..4096 (got {args.threads})")
    if "modes" in parts and args.output is None:
        raise UsageError("--parts modes needs -o DIR (the benchmark results folder)")
    return parts


def _dirac_part(args: argparse.Namespace) -> dict[str, Any]:
    bw, src = dram_bandwidth(args.threads)
    # 24^4: 700 MB of operator data in double, 350 MB in single; 32^4
    # where the last-level cache holds half of that
    side = 8 if args.quick else beyond_cache_side(llc_bytes()) or 32
    d = bench_dirac(" ".join([str(side)] * 4), 1, args.threads, bw)
    d["bound_gbs"] = bw
    d["bound_source"] = src
    d["target"] = DIRAC_TARGET
    d["judged"] = judged_precisions(d)
    # every judged precision must reach the target, not only the better one
    d["met"] = bool(d["judged"]) and (
        min(d[p]["fraction_of_bound"] for p in d["judged"]) >= DIRAC_TARGET
    )
    return d


def _solve_part(args: argparse.Namespace, field: dict[str, str]) -> dict[str, Any]:
    s = bench_solvers(field, 1, args.threads, 1 if args.quick else 2)
    s["target"] = AMG_TARGET
    s["cgnr_hard_enough"] = min(s["cgnr_iterations"]) >= CGNR_MIN_ITERS
    s["met"] = s["speedup_with_setup"] >= AMG_TARGET and s["cgnr_hard_enough"]
    return s


def _print(r: dict[str, Any]) -> None:
    con = output.console()
    if "dirac" in r:
        _print_dirac(con, r["dirac"])
    if "solve" in r:
        _print_solve(con, r["solve"])
    if "scaling" in r:
        _print_scaling(r["scaling"])
    if "halo" in r:
        for h in r["halo"]:
            output.table(
                f"Halo exchange, {h['ranks']} ranks, grid {'x'.join(map(str, h['process_grid']))}",
                ["message bytes", "GB/s per rank"],
                [[str(p["message_bytes"]), f"{p['gbs_per_rank']:.3f}"] for p in h["points"]],
            )
    if "modes" in r:
        output.table(
            f"hm-lattice AMG under hetmem run modes ({r['modes']['folder']}; "
            "efficiency = t_dram / t_mode)",
            ["case", "fast budget", "mode", "setup+solve s", "efficiency", "status"],
            modes_table(r["modes"]["runs"]),
        )
    con.print(f"many nodes: {r['many_nodes_command']}")
    con.print("all targets met" if r["all_targets_met"] else "a target was missed")


def _print_dirac(con: Any, d: dict[str, Any]) -> None:
    rows = [
        [
            p,
            f"{d[p]['bytes_per_site']:.0f}",
            f"{d[p]['gbs']:.2f}",
            f"{d[p].get('gbs_mean', d[p]['gbs']):.2f}",
            f"{d[p]['gflops']:.2f}",
            f"{d['bound_gbs']:.1f}",
            f"{100 * d[p]['fraction_of_bound']:.1f}%",
        ]
        for p in ("double", "single", "half")
        if p in d
    ]
    output.table(
        f"Dirac operator {d['lattice']} (bound: {d['bound_source']}, best of reps; "
        "operator: best apply, mean beside it; target 60%)",
        ["precision", "bytes/site", "GB/s", "GB/s mean", "GFlop/s", "bound GB/s", "of bound"],
        rows,
    )
    judged = d.get("judged") or []
    worst = min((d[p]["fraction_of_bound"] for p in judged), default=0.0)
    con.print(
        f"target Dirac >= {100 * DIRAC_TARGET:.0f}% of the bound in every judged precision: "
        f"{100 * worst:.1f}% (the lower) "
        f"{'PASS' if d['met'] else 'MISS'} (judged: {', '.join(judged) or 'none'}; "
        "a precision whose operator data would fit twice in the last-level cache is not)"
    )


def _print_solve(con: Any, s: dict[str, Any]) -> None:
    output.table(
        f"CGNR vs AMG, lattice {s['field']['lattice']} m0 {s['field']['m0']} "
        f"(setup over {NRHS} rhs; target {AMG_TARGET}x)",
        ["solver", "iterations", "true rel. res.", "s per rhs"],
        [
            [
                "CGNR",
                str(s["cgnr_iterations"]),
                f"{s['cgnr_true_relres']:.1e}",
                f"{s['cgnr_s_per_rhs']:.2f}",
            ],
            [
                "AMG (+setup/4)",
                str(s["amg_iterations"]),
                f"{s['amg_true_relres']:.1e}",
                f"{s['amg_s_per_rhs_with_setup']:.2f} (setup {s['amg_setup_s']:.2f})",
            ],
        ],
    )
    _print_amg_storage(s.get("storage") or {})
    _print_amg_phases(s)
    con.print(
        f"speed-up with setup {s['speedup_with_setup']:.2f}x, solve only "
        f"{s['speedup_solve_only']:.2f}x, coarse share {100 * s['amg_coarse_share']:.0f}%"
    )
    hard = "yes" if s["cgnr_hard_enough"] else "NO"
    con.print(
        f"target AMG >= {AMG_TARGET:.0f}x CGNR incl. setup/{NRHS} (CGNR >= {CGNR_MIN_ITERS} "
        f"iterations: {hard}): {s['speedup_with_setup']:.2f}x "
        f"{'PASS' if s['met'] else 'MISS'}"
    )


def _print_amg_storage(st: dict[str, Any]) -> None:
    if not st:
        return
    output.table(
        "AMG preconditioner storage (outer FGMRES and CGNR in double)",
        [
            "storage",
            "iterations",
            "true rel. res.",
            "setup s",
            "s per rhs (+setup/4)",
        ],
        [
            [
                name,
                str(v["iterations"]),
                f"{v['true_relres']:.1e}",
                f"{v['setup_s']:.2f}",
                f"{v['s_per_rhs_with_setup']:.2f}",
            ]
            for name, v in st.items()
        ],
    )


def _print_amg_phases(s: dict[str, Any]) -> None:
    ph = s.get("amg_phases") or {}
    if not ph:
        return
    n = len(s["amg_iterations"])
    setup_keys = ("initial", "bootstrap", "orthonormalise", "assemble")
    solve_keys = ("smoother", "restrict", "prolong", "coarse_solve", "outer")
    output.table(
        f"AMG time per phase (setup once; solve per right-hand side, mean of {n})",
        ["phase", "seconds"],
        [[f"setup: {k}", f"{ph[f'setup_{k}_s']:.3f}"] for k in setup_keys]
        + [[f"solve: {k}", f"{ph[f'solve_{k}_s'] / n:.3f}"] for k in solve_keys],
    )


def _print_scaling(scaling: list[dict[str, Any]]) -> None:
    output.table(
        "Strong scaling (8^4)",
        [
            "ranks",
            "grid",
            "Dirac s",
            "Dirac speed-up",
            "AMG solve s",
            "solve speed-up",
            "iters",
        ],
        [
            [
                str(x["ranks"]),
                "x".join(map(str, x["process_grid"])),
                f"{x['dirac_double_s']:.4f}",
                f"{x['dirac_speedup']:.2f}",
                f"{x['amg_solve_s']:.3f}",
                f"{x['solve_speedup']:.2f}",
                str(x["amg_iterations"]),
            ]
            for x in scaling
        ],
    )
