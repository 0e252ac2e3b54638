# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench budgets`: every mode at several fast budgets, side by side.

ecoHMEM (the placement seed) compares its placements across fast-memory
sizes, not at one; this suite draws those bars on this machine. For each
workload and each budget (25%, 50% and 75% of the footprint by default),
one `hetmem recommend` session with a fixed number of rounds runs dram,
swap, cache, flat and hybrid interleaved, the order rotating from round to
round, flat and hybrid from that budget's own profile and placements
(hybrid's advised `--for hybrid`). Each
mode's speed is a fraction of dram's: dram's median time over the mode's,
with a 95% bootstrap interval (hetmem.stats).

The workloads are hm-placement's sparse and sweep (two hot arrays, 20% of
the footprint, and three cold ones touched sparsely or swept), or any
command given after `--` (an application from `hetmem bench apps`, say),
with --footprint its data size when budgets are percentages.

Target, per workload and budget: the better of flat and hybrid at least as
fast as cache. It is missed only when cache is faster beyond the noise
(the interval of cache's speed over the placed mode's lies above 1).
-o DIR keeps each session's folder (placement, logs, recommend.json),
budgets.json and bars.svg.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from hetmem import output
from hetmem.bench import exit_status, find_program, report_plots
from hetmem.bench.placement import check_footprint
from hetmem.errors import UsageError
from hetmem.output import write_atomic
from hetmem.recommend import session
from hetmem.recommend.decide import times
from hetmem.run.checks import check_storage, check_threshold, default_storage, resolve_command
from hetmem.sizes import format_size, parse_percent, parse_positive, parse_size
from hetmem.stats import Ratio, ratio

name = "budgets"
help = "every mode at 25/50/75% fast budgets (ecoHMEM's bars), flat/hybrid vs cache"
description = __doc__.split("\n\n", 1)[1] if __doc__ else ""

SCHEMA_VERSION = 1
VARIANTS = ("sparse", "sweep")
PLACED = ("flat", "hybrid")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--footprint",
        default="512MiB",
        metavar="SIZE",
        help="the workload's data size; budgets in %% are of it (512MiB)",
    )
    parser.add_argument(
        "--budgets",
        default="25%,50%,75%",
        metavar="LIST",
        help="fast budgets: percentages of --footprint or sizes (25%%,50%%,75%%)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        metavar="LIST",
        help="hm-placement workloads, when no command is given (sparse,sweep)",
    )
    parser.add_argument("--rounds", default="3", metavar="N", help="rounds of every mode (3)")
    parser.add_argument("--modes", default=",".join(session.MODES), metavar="LIST",
                        help=f"modes ({','.join(session.MODES)})")  # fmt: skip
    parser.add_argument("--storage", metavar="DIR", help="storage tier (default as hetmem run)")
    parser.add_argument(
        "--threshold",
        metavar="SIZE",
        help="smallest allocation on a tier, for the profile and the cache, flat and hybrid "
        "runs (as hetmem run; default 1MiB): 256K for an application whose data is in "
        "blocks below 1 MiB, as LAMMPS's neighbour pages are",
    )
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", help="keep files in DIR")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="[-- CMD ARGS...]")


def parse_budgets(text: str, footprint: int) -> list[int]:
    """'25%,50%,1G' -> bytes, each more than 0 and less than the footprint
    when given in percent."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part.endswith("%"):
            pct = parse_percent(part, "--budgets")
            out.append(int(footprint * pct / 100) // 4096 * 4096)
        elif part:
            out.append(parse_size(part, "--budgets"))
    if not out or min(out) < (16 << 20):
        raise UsageError("--budgets: name one or more budgets, each at least 16MiB")
    return out


def _workloads(args: argparse.Namespace, footprint: int) -> list[tuple[str, list[str]]]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if cmd:
        resolve_command(cmd, "bench budgets")
        return [(Path(cmd[0]).name, cmd)]
    prog = str(find_program("hm-placement"))
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise UsageError(f"--variants: choose from {','.join(VARIANTS)}")
    return [(v, [prog, "--variant", v, "--footprint", str(footprint)]) for v in names]


def run(args: argparse.Namespace) -> int:
    footprint = parse_size(args.footprint, "--footprint")
    check_footprint(footprint)
    budgets = parse_budgets(args.budgets, footprint)
    rounds = parse_positive(args.rounds, "--rounds", session.MAX_ROUNDS)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or any(m not in session.MODES for m in modes):
        raise UsageError(f"--modes: choose from {','.join(session.MODES)}")
    threshold = parse_size(args.threshold, "--threshold") if args.threshold else None
    check_threshold(threshold)
    storage = Path(args.storage or default_storage()).resolve()
    check_storage(storage, 1 << 20)
    workloads = _workloads(args, footprint)
    data = {"schema_version": SCHEMA_VERSION, "kind": "bench-budgets", "footprint": footprint,
            "rounds": rounds, "threshold": threshold, "workloads": []}  # fmt: skip
    plan = _Plan(footprint, rounds, modes, storage, threshold)
    if args.output is None:
        with tempfile.TemporaryDirectory(prefix="hetmem-bench-budgets-") as tmp:
            _measure(data, workloads, budgets, plan, Path(tmp))
    else:
        output.check_output_dir(args.output, "-o")
        if args.output.exists() and not args.output.is_dir():
            raise UsageError(f"-o {args.output}: is a file; name a folder")
        args.output.mkdir(mode=0o700, exist_ok=True)
        _measure(data, workloads, budgets, plan, args.output)
        _keep(data, args.output)
    if args.json:
        output.print_json(data)
    else:
        _print(data)
    return exit_status(data["targets"])


class _Plan(NamedTuple):
    footprint: int
    rounds: int
    modes: tuple[str, ...]
    storage: Path
    threshold: int | None = None


def _measure(
    data: dict[str, Any],
    workloads: list[tuple[str, list[str]]],
    budgets: list[int],
    plan: _Plan,
    work: Path,
) -> None:
    for wname, argv in workloads:
        points = [_point(wname, argv, b, plan, work) for b in budgets]
        data["workloads"].append({"name": wname, "command": argv, "budgets": points})
    data["targets"] = [p["target"] for w in data["workloads"] for p in w["budgets"]]


def _point(wname: str, argv: list[str], budget: int, plan: _Plan, work: Path) -> dict[str, Any]:
    """One session of every mode at one budget."""
    frac, modes = budget / plan.footprint, plan.modes
    _say(f"{wname} at {format_size(budget)} ({frac:.0%} of {format_size(plan.footprint)}): "
         f"{plan.rounds} round(s) of {', '.join(modes)}")  # fmt: skip
    opts = session.Options(argv=argv, budget=budget, storage=plan.storage,
                           workdir=work / f"{wname}-{budget >> 20}M", time_s=1e9,
                           rounds=plan.rounds, modes=modes, threshold=plan.threshold,
                           hybrid_as_cache_runs=True)  # fmt: skip
    try:
        res = session.recommend(opts)
        runs, skipped, error = res.runs, res.choice.skipped, ""
    except session.NoAnswer as exc:
        runs, skipped, error = [], {}, str(exc)
    speeds = {m: _speed(runs, m) for m in modes if times(runs, m) or m == "dram"}
    return {"budget": budget, "fraction": frac, "modes": speeds, "skipped": skipped,
            "error": error, "target": placed_vs_cache(runs, wname, frac)}  # fmt: skip


def _speed(runs: list[Any], mode: str) -> dict[str, Any]:
    t, d = times(runs, mode), times(runs, "dram")
    r = ratio(d, t) if t and d else None
    return {"seconds": t, "vs_dram": r.as_dict() if r else None}


def placed_vs_cache(runs: list[Any], wname: str, frac: float) -> dict[str, Any]:
    """The target row: the faster (by median) of flat and hybrid against
    cache; pass None when either side did not run."""
    placed = [m for m in PLACED if times(runs, m)]
    row: dict[str, Any] = {"target": f"{wname} at {frac:.0%}: flat or hybrid >= cache"}
    if not placed or not times(runs, "cache"):
        return {**row, "pass": None, "why": "flat, hybrid or cache did not run"}
    best = min(placed, key=lambda m: statistics.median(times(runs, m)))
    r: Ratio = ratio(times(runs, "cache"), times(runs, best))  # > 1: placed faster
    ok = not r.significant_below_one
    why = f"{best} runs at {r.text()} cache's speed"
    why += "" if ok else ": cache is faster beyond the noise"
    return {**row, "pass": ok, "mode": best, "ratio": r.as_dict(), "why": why}


def _keep(data: dict[str, Any], out: Path | None) -> None:
    if out is None:
        return
    write_atomic(out / "budgets.json", json.dumps(data, indent=1) + "\n")
    svg = bars_svg(data)
    if svg:
        write_atomic(out / "bars.svg", svg)


def bars_svg(data: dict[str, Any]) -> str | None:
    """Grouped bars per workload: budgets on x, one bar per mode at its
    percent of dram speed, the 95% interval as an error bar."""
    wls = data["workloads"]
    if not wls:
        return None
    plt = report_plots.pyplot()
    fig, axes = plt.subplots(1, len(wls), figsize=(5.5 * len(wls), 3.6), squeeze=False)
    for ax, w in zip(axes[0], wls, strict=True):
        _bars(ax, w)
    return report_plots.svg_fit(fig)


def _bars(ax: Any, w: dict[str, Any]) -> None:
    modes = [m for m in session.MODES if m != "dram" and any(m in p["modes"] for p in w["budgets"])]
    width = 0.8 / max(len(modes), 1)
    for i, m in enumerate(modes):
        xs, ys, lo, hi = [], [], [], []
        for j, p in enumerate(w["budgets"]):
            v = (p["modes"].get(m) or {}).get("vs_dram")
            if v:
                xs.append(j + (i - (len(modes) - 1) / 2) * width)
                ys.append(100 * v["value"])
                lo.append(100 * (v["value"] - (v["ci_low"] or v["value"])))
                hi.append(100 * ((v["ci_high"] or v["value"]) - v["value"]))
        ax.bar(xs, ys, width, yerr=[lo, hi], label=m, capsize=2)
    ax.set_xticks(range(len(w["budgets"])), [f"{p['fraction']:.0%}" for p in w["budgets"]])
    ax.set_xlabel("fast budget / footprint")
    ax.set_ylabel("% of dram speed")
    ax.set_title(w["name"])
    ax.axhline(100, color="black", linestyle="--", linewidth=0.8)
    ax.set_ylim(0, max(110.0, ax.get_ylim()[1]))
    ax.legend(fontsize="small")


def _say(text: str) -> None:
    output.err_console().print(f"hetmem bench budgets: {text}", markup=False, highlight=False)


def _print(data: dict[str, Any]) -> None:
    for w in data["workloads"]:
        shown = [m for m in session.MODES if m != "dram"]
        rows = [
            [f"{p['fraction']:.0%}", format_size(p["budget"]), *(_cell(p, m) for m in shown)]
            for p in w["budgets"]
        ]
        cols = ["budget", "bytes", *shown]
        output.table(f"{w['name']}: % of dram speed (95% CI)", cols, rows)
    for t in data["targets"]:
        verdict = {True: "PASS", False: "MISS", None: "UNSURE"}[t["pass"]]
        output.console().print(f"{verdict}  {t['target']}: {t['why']}", highlight=False)


def _cell(p: dict[str, Any], mode: str) -> str:
    v = (p["modes"].get(mode) or {}).get("vs_dram")
    if not v:
        return p["skipped"].get(mode, "-") if mode in p["skipped"] else "-"
    if v["ci_low"] is None:
        return f"{100 * v['value']:.0f}%"
    return f"{100 * v['value']:.0f}% ({100 * v['ci_low']:.0f}-{100 * v['ci_high']:.0f})"
