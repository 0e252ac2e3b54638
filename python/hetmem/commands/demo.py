"""`hetmem demo`: the main job on a fresh machine, in one command.

Quick probe of the tiers, the inventory ranked by it, a small benchmark
matrix (six kernels, two sizes, every mode available here, repeated), a
placement workload under `hetmem recommend` (flat and hybrid beside dram,
swap and cache, and the answer), the report and a summary. Each step is the
same verb a user would run by hand; demo only chains them, and ends with
the one exit-code rule of the benches (hetmem.bench.exit_status).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem.bench import EXIT_RULE, exit_status, find_program, matrix
from hetmem.cli import main
from hetmem.errors import HetmemError, UsageError
from hetmem.recommend.session import MAX_ROUNDS
from hetmem.sizes import format_size, parse_budget

# The placement workload (bench/placement, hm-placement): two hot arrays
# (20% of the footprint) and three cold ones touched sparsely, at this many
# times the fast budget: the hot ones fit the budget, the whole does not.
PLACEMENT_FOOTPRINT = 4
PLACEMENT_ROUNDS = 3


class Command:
    name = "demo"
    help = "probe this machine, run a small benchmark matrix and write the report"
    description = (
        "Runs, in order, what a new user wants to see (under 10 minutes here):\n"
        "  1. hetmem probe --quick        measure every tier (cached for later tools)\n"
        "  2. hetmem tiers                the tiers, ranked by what was measured\n"
        "  3. hetmem bench kernels demo   six kernels at 0.5x and 2x the fast budget\n"
        "                                 in dram, cache and swap (where it can run),\n"
        "                                 3 repetitions; writes report.html\n"
        "  4. hetmem recommend            a placement workload (hot arrays that fit\n"
        "                                 the budget, cold ones 3x it) in dram, swap,\n"
        "                                 cache, flat and hybrid, and which to use\n"
        "and a summary: per kernel the best mode, its fraction of dram speed and\n"
        "how much faster than swap (95% intervals), then the recommendation.\n"
        "\n" + EXIT_RULE
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output",
            type=Path,
            default=Path("hetmem-demo"),
            metavar="DIR",
            help="result folder (hetmem-demo); rerun with it to resume",
        )
        parser.add_argument("--fast-budget", default="64MiB", metavar="SIZE", help="(64MiB)")
        parser.add_argument("--sizes", default="0.5x,2x", metavar="LIST", help="(0.5x,2x)")
        parser.add_argument("--storage", metavar="DIR", help="storage tier directory")
        parser.add_argument(
            "--repeat", type=int, default=3, help="repetitions, for the 95%% intervals (3)"
        )
        parser.add_argument(
            "--fits-repeat",
            type=int,
            default=3,
            metavar="N",
            help="repetitions of the sizes below 1x, for the 'data fits' check (3)",
        )
        parser.add_argument(
            "--kernels",
            default="demo",
            metavar="LIST",
            help="kernel cases of the matrix, as hetmem bench kernels takes them (demo: six)",
        )
        parser.add_argument(
            "--rounds",
            type=int,
            default=PLACEMENT_ROUNDS,
            metavar="N",
            help=f"rounds of hetmem recommend on the placement workload ({PLACEMENT_ROUNDS})",
        )
        parser.add_argument("--skip-probe", action="store_true", help="reuse the cached probe")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def run(self, args: argparse.Namespace) -> int:
        t0 = time.monotonic()
        storage = ["--storage", args.storage] if args.storage else []
        bench = _bench_argv(args, storage)
        _check_bench(bench[2:])
        if not 1 <= args.rounds <= MAX_ROUNDS:
            raise UsageError(f"--rounds must be 1 to {MAX_ROUNDS}, not {args.rounds}")
        _run_steps(args.skip_probe, storage, bench)
        report = args.output / "report.json"
        if not report.exists():
            raise HetmemError("the benchmark matrix wrote no report; see above")
        data = json.loads(report.read_text())
        output.console().rule("4. flat and hybrid on a placement workload: hetmem recommend")
        rec = _recommend(args, storage)
        rc = exit_status([*matrix.targets_of(data), rec is not None])
        output.console().rule("5. summary")
        summary = {
            "schema_version": 2,
            "summary": data["summary"],
            "recommendation": rec,
            "report": str(args.output / "report.html"),
            "exit_status": rc,
            "seconds": time.monotonic() - t0,
        }
        if args.json:
            output.print_json(summary)
        else:
            _print_summary(summary)
        return rc


def _bench_argv(args: argparse.Namespace, storage: list[str]) -> list[str]:
    """`hetmem bench kernels demo ...` with the demo's options."""
    return [
        "bench",
        "kernels",
        *args.kernels.split(","),
        "--fast-budget",
        args.fast_budget,
        "--sizes",
        args.sizes,
        "--repeat",
        str(args.repeat),
        "--fits-repeat",
        str(args.fits_repeat),
        "--kernel-reps",
        "2",
        "-o",
        str(args.output),
        *storage,
    ]


def _run_steps(skip_probe: bool, storage: list[str], bench: list[str]) -> None:
    """Steps 1 to 3 (probe, tiers, the matrix) as the CLI runs them. The
    matrix's own status is judged again by the demo, from its report."""
    if not skip_probe:
        output.console().rule("1. probe (quick)")
        rc = main(["probe", "--quick", *storage])
        if rc:
            raise HetmemError("the probe failed; see above")
    output.console().rule("2. tiers")
    rc = main(["tiers", *storage])
    if rc:
        raise HetmemError("the tier inventory failed; see above")
    output.console().rule("3. benchmark matrix")
    if main(bench) == 2:
        raise HetmemError("the benchmark matrix could not run; see above")


def _recommend(args: argparse.Namespace, storage: list[str]) -> dict[str, Any] | None:
    """Step 4: `hetmem recommend` on hm-placement's sparse workload at
    PLACEMENT_FOOTPRINT x the budget; its JSON, or None when it gave no
    answer (a missed target of the demo)."""
    budget = parse_budget(args.fast_budget)
    prog = find_program("hm-placement")
    workdir = args.output / "recommend"
    workload = [str(prog), "--variant", "sparse", "--footprint", str(PLACEMENT_FOOTPRINT * budget)]
    argv = ["recommend", "--fast-budget", args.fast_budget, *storage,
            "--rounds", str(args.rounds), "-o", str(workdir), "--", *workload]  # fmt: skip
    rc = main(argv)
    if rc == 2:
        raise HetmemError("hetmem recommend could not run; see above")
    path = workdir / "recommend.json"
    if rc != 0 or not path.exists():
        return None
    rec: dict[str, Any] = json.loads(path.read_text())
    return rec


def _print_summary(summary: dict[str, Any]) -> None:
    con = output.console()
    con.print("[bold]Kernels[/bold] (report.html has the plots and every figure):")
    for s in summary["summary"]:
        text = s.get("text") or f"best mode {s['best_mode']}"
        con.print(f"  {s['case']}: {text}", highlight=False)
    rec = summary["recommendation"]
    if rec is None:
        con.print("[bold]Placement workload:[/bold] hetmem recommend gave no answer; see above")
    else:
        ans = rec["answer"]
        con.print(
            f"[bold]Placement workload[/bold] ({format_size(rec['first_run']['data_bytes'])} "
            f"at a {format_size(rec['budget_bytes'])} budget): use {ans['mode']}",
            highlight=False,
        )
        con.print(f"  {ans['command']}", highlight=False, soft_wrap=True)
    verdict = "every target met" if summary["exit_status"] == 0 else "a target was missed"
    con.print(
        f"report: {summary['report']}  ({summary['seconds']:.0f} s in all; {verdict}; "
        f"exit status {summary['exit_status']})",
        highlight=False,
    )


def _check_bench(argv: list[str]) -> None:
    """The matrix's options are checked before the probe runs (a minute or
    more), so a bad --repeat, --sizes, --fast-budget or --storage is refused
    at once, in one line, instead of after the probe and the tier inventory."""
    parser = argparse.ArgumentParser(add_help=False)
    matrix.add_matrix_arguments(parser)
    ns = parser.parse_args(argv)
    ns.modes = "dram"  # the modes are chosen when the matrix runs (with its notes)
    matrix.make_plan(ns, "kernels")
