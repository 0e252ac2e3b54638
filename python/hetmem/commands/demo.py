# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem demo`: the main job on a fresh machine, in one command.

Quick probe of the tiers, the inventory ranked by it, a small benchmark
matrix (every kernel, 3 sizes, every mode available here) and the report.
Each step is the same verb a user would run by hand; demo only chains them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem.bench import matrix
from hetmem.cli import main
from hetmem.errors import HetmemError


class Command:
    name = "demo"
    help = "probe this machine, run a small benchmark matrix and write the report"
    description = (
        "Runs, in order, what a new user wants to see (under 10 minutes here):\n"
        "  1. hetmem probe --quick        measure every tier (cached for later tools)\n"
        "  2. hetmem tiers                the tiers, ranked by what was measured\n"
        "  3. hetmem bench kernels demo   every kernel at 0.5x, 2x and 4x the fast\n"
        "                                 budget in every mode available here\n"
        "  4. the report                  report.html in the result folder\n"
        "and prints a short summary: the best mode per kernel and its efficiency\n"
        "at 2x the budget."
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
        parser.add_argument("--sizes", default="0.5x,2x,4x", metavar="LIST", help="(0.5x,2x,4x)")
        parser.add_argument("--storage", metavar="DIR", help="storage tier directory")
        parser.add_argument("--repeat", type=int, default=1, help="repetitions (1)")
        parser.add_argument(
            "--fits-repeat",
            type=int,
            default=5,
            metavar="N",
            help="repetitions of the sizes below 1x, for the 'data fits' check (5)",
        )
        parser.add_argument("--skip-probe", action="store_true", help="reuse the cached probe")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def run(self, args: argparse.Namespace) -> int:
        t0 = time.monotonic()
        storage = ["--storage", args.storage] if args.storage else []
        bench = _bench_argv(args, storage)
        _check_bench(bench[2:])
        rc = _run_steps(args.skip_probe, storage, bench)
        report = args.output / "report.json"
        if not report.exists():
            raise HetmemError("the benchmark matrix wrote no report; see above")
        data = json.loads(report.read_text())
        output.console().rule("4. summary")
        if args.json:
            output.print_json(
                {
                    "schema_version": 1,
                    "summary": data["summary"],
                    "report": str(args.output / "report.html"),
                }
            )
        else:
            output.table(
                "best mode per kernel (efficiency = t_dram / t_mode)",
                ["kernel", "size", "best mode", "efficiency", "all modes"],
                [_summary_row(s) for s in data["summary"]],
            )
            output.console().print(
                f"report: {args.output / 'report.html'}  ({time.monotonic() - t0:.0f} s in all)"
            )
        return rc


def _bench_argv(args: argparse.Namespace, storage: list[str]) -> list[str]:
    """`hetmem bench kernels demo ...` with the demo's options."""
    return [
        "bench",
        "kernels",
        "demo",
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


def _run_steps(skip_probe: bool, storage: list[str], bench: list[str]) -> int:
    """Steps 1 to 3 (probe, tiers, the matrix) as the CLI runs them; the
    matrix's exit status."""
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
    return main(bench)


def _summary_row(s: dict[str, Any]) -> list[Any]:
    others = ", ".join(
        f"{m} {100 * e:.0f}%" for m, e in sorted(s["by_mode"].items()) if e is not None
    )
    return [
        s["case"],
        f"{s['multiple']:g}x",
        s["best_mode"],
        f"{100 * s['efficiency']:.1f}%",
        others,
    ]


def _check_bench(argv: list[str]) -> None:
    """The matrix's options are checked before the probe runs (a minute or
    more), so a bad --repeat, --sizes, --fast-budget or --storage is refused
    at once, in one line, instead of after the probe and the tier inventory."""
    parser = argparse.ArgumentParser(add_help=False)
    matrix.add_matrix_arguments(parser)
    ns = parser.parse_args(argv)
    ns.modes = "dram"  # the modes are chosen when the matrix runs (with its notes)
    matrix.make_plan(ns, "kernels")
