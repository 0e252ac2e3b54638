# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem recommend`: which mode for this command at this budget, and how
much faster, measured on this machine."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from hetmem import output
from hetmem.errors import UsageError
from hetmem.recommend import Options, Result, as_dict, recommend
from hetmem.recommend.session import MAX_ROUNDS, MODES, Refused
from hetmem.run.checks import check_storage, check_threshold, default_storage, resolve_command
from hetmem.sizes import budget_or_env, format_size, parse_positive, parse_seconds, parse_size
from hetmem.stats import Ratio


class Command:
    name = "recommend"
    help = "measure a command under every sensible mode and say which to use"
    description = (
        'Answers "which mode, and how much faster?" for one command at one fast\n'
        "budget, by measuring it here:\n"
        "  1. a first run in cache mode (not counted): how large the data is;\n"
        "     stopped at --time, when cache mode counts as failed\n"
        "  2. the modes that make sense: dram when the data fits this machine's\n"
        "     memory (the reference), swap where it can run (root), cache, and\n"
        "     flat and hybrid from one profile run and `hetmem advise` (hybrid\n"
        "     not when its placement pins nothing: it would run as cache mode)\n"
        "  3. rounds that run every mode once, in rotating order, at least 2,\n"
        "     more while --time allows\n"
        "and prints the best mode that keeps to the budget, its speed against\n"
        "dram and swap (ratio of median times, 95% bootstrap interval), the\n"
        "command line to use from now on, and why (from the pager's counters).\n"
        "Everything it wrote (placement, profile, logs, recommend.json) stays in\n"
        "-o DIR; the command line it gives refers to that folder's placement.\n"
        "The command runs many times, with an empty stdin, its output in\n"
        "DIR/logs: give it an input that runs for seconds to a minute.\n"
        "\n"
        "A command that fails in its first run is run once more without\n"
        "hetmem, to tell whether hetmem or the command is at fault.\n\n"
        "Exit status: 0 an answer, 1 no mode ran the command to the end,\n"
        "2 bad input. Example:\n"
        "  hetmem recommend --fast-budget 4G --storage /mnt/nvme -- ./app input.dat"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--fast-budget",
            metavar="SIZE",
            help="DRAM the command may use, as in hetmem run (default $HETMEM_FAST_BUDGET)",
        )
        parser.add_argument(
            "--storage", metavar="DIR", type=Path, help="storage-tier directory (as hetmem run)"
        )
        parser.add_argument(
            "--time",
            default="5min",
            metavar="DURATION",
            help="wall-clock time to spend, e.g. 90s, 5min (5min); at least 2 rounds run",
        )
        parser.add_argument(
            "--rounds",
            metavar="N",
            help=f"exactly N rounds of every mode, whatever the time (1..{MAX_ROUNDS})",
        )
        parser.add_argument(
            "--modes",
            default=",".join(MODES),
            metavar="LIST",
            help=f"modes to consider ({','.join(MODES)})",
        )
        parser.add_argument(
            "--threshold", metavar="SIZE", help="smallest allocation on a tier (as hetmem run)"
        )
        parser.add_argument(
            "-o",
            "--output",
            type=Path,
            default=Path("hetmem-recommend"),
            metavar="DIR",
            help="folder for the placement, profile and logs (hetmem-recommend)",
        )
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    def run(self, args: argparse.Namespace) -> int:
        created = not args.output.exists()
        opts = _options(args)
        try:
            res = _measure(opts, quiet=args.json)
        except Refused:
            if created:  # bad input leaves nothing behind
                shutil.rmtree(opts.workdir, ignore_errors=True)
            raise
        if args.json:
            output.print_json(as_dict(res))
        else:
            _print(res)
        return 0


def _options(args: argparse.Namespace) -> Options:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    budget = budget_or_env(args.fast_budget)
    if budget <= 0:
        raise UsageError("--fast-budget is needed: the DRAM the command may use, e.g. 4G")
    resolve_command(argv, "recommend")
    storage = (args.storage or default_storage()).absolute()
    check_storage(storage, 1 << 20)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UsageError(f"--modes: unknown mode(s) {','.join(bad)}; choose from {MODES}")
    opts = Options(
        argv=argv,
        budget=budget,
        budget_text=args.fast_budget or os.environ.get("HETMEM_FAST_BUDGET", ""),
        storage=storage,
        workdir=args.output.absolute(),
        time_s=parse_seconds(args.time, "--time"),
        rounds=parse_positive(args.rounds, "--rounds", MAX_ROUNDS) if args.rounds else None,
        modes=modes,
        threshold=parse_size(args.threshold, "--threshold") if args.threshold else None,
    )
    check_threshold(opts.threshold)
    _check_workdir(args.output)  # made last: nothing is created for bad input
    return opts


def _check_workdir(path: Path) -> None:
    """-o DIR: a folder of ours, made private to this user (it will hold a
    placement file that later runs read)."""
    output.check_output_dir(path, "-o")
    if path.exists() and not path.is_dir():
        raise UsageError(f"-o {path}: is a file; name a folder")
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise UsageError(f"-o {path}: belongs to another user")
    if st.st_mode & 0o022:
        # others could swap the placement the answer's command line reads
        raise UsageError(f"-o {path}: others may write to it; run `chmod go-w {path}`")


def _measure(opts: Options, quiet: bool) -> Result:
    """recommend() with its steps on a progress display (a terminal only:
    bad input then stays one line) and its notes printed unless quiet."""
    with output.progress(enabled=not quiet) as prog:
        task = prog.add_task("first run (cache mode, not counted)", total=None)

        def note(text: str) -> None:
            if not quiet:
                prog.console.print(f"hetmem recommend: {text}", highlight=False, markup=False)

        return recommend(opts, lambda text: prog.update(task, description=text), note)


def _ratio_text(r: Ratio | None, what: str) -> str:
    return f"{what}: {r.text()}" if r else ""


def _print(res: Result) -> None:
    d = as_dict(res)
    rows = []
    for mode, m in d["modes"].items():
        med = f"{m['median_s']:.3f}" if m["median_s"] is not None else "-"
        rows.append([mode, len(m["seconds"]), med, m["error"] or ""])
    for mode, why in d["skipped"].items():
        rows.append([mode, 0, "-", f"not run: {why}"])
    output.console().print(
        f"{res.rounds} round(s) in {res.seconds:.0f} s; the command's memory "
        f"{format_size(res.pilot.memory_bytes)} ({format_size(res.pilot.data_bytes)} in "
        f"blocks of --threshold and up), budget {format_size(res.options.budget)}",
        highlight=False,
    )
    output.table("", ["mode", "runs", "median s", "note"], rows)
    ans = res.answer
    assert ans is not None and ans.mode is not None
    con = output.console()
    con.print(f"[bold]Use {ans.mode}.[/bold]", highlight=False)
    # swap failed in a later round (a failed mode runs no more): its ratio is
    # of the rounds it finished, and the reasons below say it failed
    swap = d["modes"].get("swap") or {}
    partial = ", in the rounds swap finished," if swap.get("failed") else ""
    for line in (
        _ratio_text(ans.vs_swap, f"faster than swap{partial} by"),
        _ratio_text(ans.vs_dram, "speed against dram (dram's time over this one's)"),
    ):
        if line:
            con.print(f"  {line}", highlight=False)
    con.print("From now on:", highlight=False)
    con.print(f"  {ans.command}", highlight=False, soft_wrap=True)
    con.print("Why:", highlight=False)
    for w in ans.why:
        con.print(f"  - {w}", highlight=False)
    con.print(f"details: {res.options.workdir / 'recommend.json'}", highlight=False)
