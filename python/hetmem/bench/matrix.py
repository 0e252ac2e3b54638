# SPDX-License-Identifier: BSD-3-Clause
"""Kernel-matrix suites of `hetmem bench` (imdt, poly, kernels, ...).

Every such suite runs the harness (hetmem.bench.harness): kernels x data sizes (as
multiples of the fast budget) x modes x repetitions, interleaved, resumable,
and then writes the report (hetmem.bench.report) into the result folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from hetmem import output
from hetmem.bench import exit_status, harness, report, report_stats
from hetmem.bench.report_stats import pct_cell
from hetmem.errors import UsageError
from hetmem.sizes import format_size

DEFAULT_BUDGET = "256MiB"
DEFAULT_SIZES = "0.5x,2x,4x"


def add_matrix_arguments(
    parser: argparse.ArgumentParser,
    *,
    budget: str = DEFAULT_BUDGET,
    sizes: str = DEFAULT_SIZES,
    repeat: int = 2,
    targets: bool = True,
    modes: str | None = None,
    kernel_reps: int = 3,
    kernel_min_time: float = 0.5,
) -> None:
    if targets:
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="SUITE|KERNEL|CASE",
            help="more suites, kernels or cases to run with this one",
        )
    parser.add_argument(
        "--fast-budget", default=budget, metavar="SIZE", help=f"fast-tier budget ({budget})"
    )
    parser.add_argument(
        "--sizes",
        default=sizes,
        metavar="LIST",
        help=f"data sizes as multiples of the budget ({sizes})",
    )
    parser.add_argument(
        "--modes",
        default=modes,
        metavar="LIST",
        help=f"modes to compare (default: {modes or 'every mode available here'}; dram always)",
    )
    parser.add_argument(
        "--repeat", type=int, default=repeat, help=f"repetitions per run ({repeat})"
    )
    parser.add_argument(
        "--fits-repeat",
        type=int,
        default=0,
        metavar="N",
        help="repetitions of the sizes below 1x, when more than --repeat: short runs "
        "whose time varies most from one process to the next (0: as --repeat)",
    )
    parser.add_argument("--threads", type=int, default=None, help="kernel threads (all CPUs)")
    parser.add_argument("--storage", metavar="DIR", help="storage tier for cache and swap modes")
    harness.add_output_arguments(parser, "<suite>", resumable=True, data="report")
    parser.add_argument("--no-report", action="store_true", help="do not write report.html")
    _add_kernel_rep_arguments(parser, kernel_reps, kernel_min_time)


def _add_kernel_rep_arguments(parser: argparse.ArgumentParser, reps: int, min_time: float) -> None:
    parser.add_argument(
        "--kernel-reps", type=int, default=reps, help=f"repetitions inside each kernel run ({reps})"
    )
    parser.add_argument(
        "--kernel-min-time",
        type=float,
        default=min_time,
        metavar="SECONDS",
        help="each kernel run repeats past --kernel-reps until its timed repetitions "
        f"sum to this; its best repetition counts ({min_time:g})",
    )


def choose_modes(text: str | None) -> tuple[list[str], list[str]]:
    """Modes to run and notes on the ones left out."""
    avail = harness.available_modes()
    if text is None:
        modes = [m for m in ("dram", "cache", "swap") if not avail.get(m)]
        skipped = [f"{m}: {avail[m]}" for m in ("cache", "swap") if avail.get(m)]
        return modes, skipped
    modes = harness.parse_modes(text)
    for m in modes:
        if avail.get(m):
            raise UsageError(f"mode {m} cannot run here: {avail[m]}")
    return modes, []


def make_plan(args: argparse.Namespace, suite: str) -> harness.Plan:
    targets = [suite, *getattr(args, "targets", [])] if suite != "kernels" else args.targets
    if not targets:
        raise UsageError("name kernels or cases, e.g. hetmem bench kernels stream poly-ro-d1024")
    cases = harness.resolve_cases(targets)
    budget = harness.parse_budget(args.fast_budget)
    multiples = harness.parse_multiples(args.sizes)
    modes, skipped = choose_modes(args.modes)
    for s in skipped:
        output.err_console().print(f"note: mode {s}")
    _check_repetitions(args)
    # --threads 0 is refused, not taken as "all CPUs" (it is falsy)
    threads = args.threads if args.threads is not None else len(os.sched_getaffinity(0))
    if threads < 1:
        raise UsageError("--threads must be at least 1")
    if args.storage and not Path(args.storage).is_dir():
        raise UsageError(f"storage directory '{args.storage}' does not exist")
    outdir = args.output or Path(f"hetmem-bench-{suite}-{time.strftime('%Y%m%d-%H%M%S')}")
    if outdir.exists() and not outdir.is_dir():
        raise UsageError(f"{outdir} exists and is not a folder")
    return harness.Plan(
        cases=cases,
        multiples=multiples,
        modes=modes,
        repeat=args.repeat,
        budget=budget,
        threads=threads,
        storage=os.path.realpath(args.storage) if args.storage else None,
        outdir=outdir,
        kernel_reps=args.kernel_reps,
        kernel_min_time=args.kernel_min_time,
        fits_repeat=args.fits_repeat,
    )


def _check_repetitions(args: argparse.Namespace) -> None:
    if args.repeat < 1 or args.repeat > 100:
        raise UsageError("--repeat must be 1..100")
    if not 0 <= args.fits_repeat <= 100:
        raise UsageError("--fits-repeat must be 0..100")
    if args.kernel_reps < 1:
        raise UsageError("--kernel-reps must be at least 1")
    if not 0 <= args.kernel_min_time <= 600:
        raise UsageError("--kernel-min-time must be 0..600 seconds")


def check_options(args: argparse.Namespace, suite: str) -> None:
    """Every option of the matrix, for suites that do other work first (sdm
    probes the storage tier): a bad size or folder is refused at once, not
    after that work. Modes left to the default are chosen (with their notes)
    when the matrix runs."""
    ns = argparse.Namespace(**vars(args))
    if ns.modes is None:
        ns.modes = "dram"
    make_plan(ns, suite)


def execute_with_progress(plan: harness.Plan, argv: list[str], show: bool) -> list[dict[str, Any]]:
    with output.progress(enabled=show) as prog:
        task = prog.add_task("benchmarks", total=None)

        def on_progress(i: int, total: int, label: str) -> None:
            prog.update(task, total=total, completed=i, description=label)

        return harness.execute(plan, argv, on_progress)


def plan_line(plan: harness.Plan) -> str:
    """How many runs and how the count is made, e.g. '8 case(s) x 3 mode(s) x
    (5 rep(s) x 1 size(s) [0.5x] + 1 rep(s) x 2 size(s) [1x, 2x]) = 168 runs':
    sizes below 1x get --fits-repeat repetitions, the others --repeat."""
    by_reps: dict[int, list[float]] = {}
    for m in plan.multiples:
        by_reps.setdefault(plan.reps_for(m), []).append(m)
    head = f"{len(plan.cases)} case(s) x {len(plan.modes)} mode(s) x "
    if len(by_reps) == 1:
        (reps,) = by_reps
        head += f"{len(plan.multiples)} size(s) x {reps} rep(s)"
    else:
        terms = [
            f"{reps} rep(s) x {len(ms)} size(s) [{', '.join(f'{m:g}x' for m in ms)}]"
            for reps, ms in sorted(by_reps.items(), reverse=True)
        ]
        head += f"({' + '.join(terms)})"
    return f"{head} = {len(plan.runs())} runs"


def run_matrix(args: argparse.Namespace, suite: str, argv: list[str]) -> dict[str, Any]:
    """Runs the suite's matrix and writes the report; returns the report data."""
    plan = make_plan(args, suite)
    output.err_console().print(
        f"hetmem bench {suite}: {plan_line(plan)}, "
        f"budget {format_size(plan.budget)}, results in {plan.outdir}"
    )
    execute_with_progress(plan, argv, show=not args.json)
    page, data = report.build([plan.outdir])
    data["outdir"] = str(plan.outdir)
    if not args.no_report:
        output.write_atomic(plan.outdir / "report.html", page)
        output.write_atomic(plan.outdir / "report.json", json.dumps(data, indent=2))
        data["report"] = str(plan.outdir / "report.html")
    return data


# What a check's or target's `pass` prints as: None is a check that could not
# be judged (one repetition, or an interval that reaches the band), no miss
# for the exit status (targets_of).
VERDICTS = {True: "PASS", False: "MISS", None: "UNSURE"}


def verdict(ok: bool | None) -> str:
    """PASS, MISS or UNSURE (numpy's bool_ too)."""
    return VERDICTS[None if ok is None else bool(ok)]


def _ci_cell(r: dict[str, Any]) -> str:
    lo, hi = r.get("efficiency_ci_low"), r.get("efficiency_ci_high")
    if r["mode"] == "dram" or lo is None or hi is None:
        return "-"
    return f"{100 * lo:.1f}-{pct_cell(hi)}"


def _efficiency_cells(r: dict[str, Any]) -> list[str]:
    return [
        r["case"],
        f"{r['multiple']:g}x",
        r["mode"],
        str(r.get("pairs", 0)),
        pct_cell(r.get("efficiency_median")),
        _ci_cell(r),
        report_stats.row_notes(r),
        "; ".join(r["failures"]),
    ]


EFFICIENCY_TITLE = (
    "efficiency t_dram / t_mode: the median over repetitions of the ratio of runs made "
    f"back to back, with its {report_stats.CONFIDENCE:.0%} bootstrap interval (the report's "
    "statistic; noise: above 100% without the interval above 100%)"
)


def efficiency_table(rows: list[dict[str, Any]]) -> Table:
    """The report's efficiency table for the terminal; long failures wrap,
    never cut, and no cell is read as rich markup."""
    t = Table(title=EFFICIENCY_TITLE, title_justify="left")
    # a cell too narrow for a word folds it onto the next line: nothing is cut
    for col in ("case", "size", "mode"):
        t.add_column(col, overflow="fold")
    for col in ("reps", "% of dram", f"{report_stats.CONFIDENCE:.0%} CI"):
        t.add_column(col, justify="right", overflow="fold")
    for col in ("note", "failures"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*(Text(c) for c in _efficiency_cells(r)))
    return t


def _say(text: str) -> None:
    output.console().print(text, markup=False)


def print_check(c: dict[str, Any]) -> None:
    """One check: PASS, MISS or UNSURE with its ratio, and why when it is no pass."""
    ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}"
    if c.get("ratio_ci"):
        lo, hi = c["ratio_ci"]
        ratio += f" ({report_stats.CONFIDENCE:.0%} CI {lo:.2f}-{hi:.2f})"
    _say(f"{verdict(c['pass'])}  {c['check']}: ratio {ratio} ({c['rule']})")
    if c.get("why") and verdict(c["pass"]) != "PASS":
        _say(f"      why: {c['why']}")
    d = c.get("detail")
    if d and "model_storage_s" in d:
        _print_bound(c, d)


def _print_bound(c: dict[str, Any], d: dict[str, Any]) -> None:
    """The STREAM storage bound, and which DRAM figure is which."""
    probe = "-" if d.get("dram_gbs_probe") is None else f"{d['dram_gbs_probe']:.1f}"
    _say(
        f"      bound {c['model']:.4f} = t_dram / t_storage; storage "
        f"{d['model_bytes_read'] / 1e6:.0f} MB read at {d['storage_read_gbs']:.2f} + "
        f"{d['model_bytes_written'] / 1e6:.0f} MB written at {d['storage_write_gbs']:.2f} "
        f"GB/s = {d['model_storage_s']:.3f} s per repetition"
    )
    kernel_is = d.get("dram_gbs_kernel_is") or "this matrix's dram run; used by the bound"
    _say(f"      DRAM {d['dram_gbs_kernel']:.1f} GB/s: {kernel_is}")
    probe_is = d.get("dram_gbs_probe_is") or "no probe stored with the results"
    _say(f"      probe triad {probe} GB/s: {probe_is}")


def print_fits_target(ft: dict[str, Any]) -> None:
    """The data-fits target over its checks; UNSURE when none missed but some
    could not be judged."""
    worst = "-" if ft["worst_ratio"] is None else f"{ft['worst_ratio']:.2f}"
    unsure = ft.get("unsure", 0)
    counts = f"{ft['passed']}/{ft['checks']} checks pass"
    if unsure:
        counts += f", {unsure} unsure (within the noise; more repetitions would tell)"
    _say(
        f"{verdict(ft['pass'])}  target: {ft['target']}: {counts}, "
        f"worst t_mode/t_dram {worst} ({ft['worst']})"
    )


def print_summary(data: dict[str, Any]) -> None:
    output.console().print(efficiency_table(data["efficiency"]))
    for c in data.get("checks", []):
        print_check(c)
    if data.get("fits_target"):
        print_fits_target(data["fits_target"])
    if data.get("report"):
        _say(f"report: {data['report']}")


def targets_of(data: dict[str, Any]) -> list[bool | None]:
    """The verdicts a matrix report's summary prints as PASS/MISS/UNSURE (its
    checks, the data-fits target), and False when a run of hetmem failed: what
    the exit status (hetmem.bench.exit_status) is judged on; None (UNSURE) is
    no miss."""
    verdicts: list[bool | None] = [c["pass"] for c in data.get("checks", [])]
    if data.get("fits_target"):
        verdicts.append(data["fits_target"]["pass"])
    verdicts.append(not data.get("hard_failures"))
    return verdicts


class MatrixSuite:
    """A harness suite under one name."""

    def __init__(self, suite: str, help_text: str, description: str, **defaults: Any) -> None:
        self.name = suite
        self.help = help_text
        self.description = description
        self.defaults = defaults

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_matrix_arguments(parser, **self.defaults)

    def run(self, args: argparse.Namespace) -> int:
        data = run_matrix(args, self.name, ["bench", *sys.argv[2:]])
        if args.json:
            output.print_json(data)
        else:
            print_summary(data)
        return exit_status(targets_of(data))


_MATRIX_DESC = (
    "Runs each kernel through `hetmem run` in every mode, at data sizes given as\n"
    "multiples of the fast budget, interleaving the modes so noise hits them\n"
    "alike; efficiency = t_dram / t_mode as in the study of Intel Memory Drive\n"
    "Technology (IMDT, Mironov et al., MCHPC'18): each kernel run repeats its\n"
    "operation for --kernel-min-time seconds and its best repetition counts; the\n"
    "modes of one of the --repeat repetitions run back to back, and the efficiency\n"
    "shown is the median over the repetitions of these paired ratios, with its 95%\n"
    "bootstrap interval (above 100% without the interval above 100% is marked\n"
    "noise). Sizes below the budget are checked against the target 'every mode\n"
    "within 5% of dram' (PASS, MISS, or UNSURE where one repetition cannot tell).\n"
    "Results go to a folder (-o DIR; run again with the same DIR to resume after\n"
    "an interruption) with report.html and report.json.\n\n"
    "example: hetmem bench {name} --fast-budget 512MiB --sizes 0.5x,2x,4x --repeat 3"
)

SUITES = {
    "imdt": MatrixSuite(
        "imdt",
        "the Intel Memory Drive Technology (IMDT) study's kernels (STREAM, polynomial, "
        "GEMM, LU, FFT, GUPS) in every mode",
        "The benchmark set of Mironov et al. (MCHPC'18), who measured Intel Memory\n"
        "Drive Technology (IMDT: DRAM as a cache over SSDs, run in a hypervisor)\n"
        "against DRAM alone, as hetmem's cache mode does in user space.\n\n"
        + _MATRIX_DESC.format(name="imdt"),
    ),
    "imdt-scale": MatrixSuite(
        "imdt-scale",
        "the IMDT study's compute-bound kernels at a realistic scale: 1 GiB budget, "
        "data 2x and 4x, tiles sized from the budget",
        "The IMDT study (Mironov et al., MCHPC'18) found compute-bound kernels at\n"
        "90-125% of DRAM speed on DRAM-over-SSD memory when they are written for it:\n"
        "segmented (tiled) GEMM and a tiled LU, with the whole DRAM as the cache.\n"
        "This suite runs them so: gemm-tiled and lu-tiled size their tiles from the\n"
        "budget (three tiles take 1/8 of it), and gemm-tiled advises each finished\n"
        "tile of C and row panel of A MADV_COLD (the cache keeps B) and the next\n"
        "step's tiles MADV_WILLNEED (read while this step computes), as lu-tiled\n"
        "does for its next tasks' tiles, beside\n"
        "LAPACK's LU (which the study saw fall) and the 3D FFT, at a 1 GiB budget\n"
        "and data 2x and 4x, in dram and cache mode, one timed repetition per\n"
        "kernel run (each is minutes long).\n"
        "Targets: gemm-tiled >= 85% and lu-tiled >= 80% of dram at every size, and\n"
        "lu-lapack below lu-tiled. A full run takes an hour or more on 2 cores.\n\n"
        + _MATRIX_DESC.format(name="imdt-scale"),
        budget="1GiB",
        sizes="2x,4x",
        modes="dram,cache",
        kernel_reps=1,
        kernel_min_time=0.0,
    ),
    "poly": MatrixSuite(
        "poly",
        "polynomial kernel over degrees 16..4096: bandwidth vs arithmetic intensity",
        "Read-only and read-write Horner polynomials of growing degree, as in Figure 7\n"
        "of the Intel Memory Drive Technology (IMDT) study: arithmetic intensity\n"
        "2 x degree / 8 FLOP per byte (its equation 1: one multiply-add per degree\n"
        "for each 8-byte double read) against the bandwidth drawn.\n\n"
        + _MATRIX_DESC.format(name="poly"),
        sizes="0.5x,4x",
    ),
    "kernels": MatrixSuite(
        "kernels",
        "any kernels or cases: hetmem bench kernels stream lu-tiled ...",
        "Kernels (stream, poly, scan, gemm, lu, fft, chase, gups), case names\n"
        "(stream-triad, poly-ro-d1024, lu-tiled, ...) or suites.\n\n"
        + _MATRIX_DESC.format(name="kernels stream"),
    ),
}
