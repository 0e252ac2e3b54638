# SPDX-License-Identifier: BSD-3-Clause
"""One recommendation, from the first run to the answer.

1. a first run in cache mode (not counted): the data's size and the time
   one run takes (plan.Pilot), stopped at --time (cache mode then counts
   as failed, and the other modes get the same limit);
2. the modes worth measuring (plan.choose), a profile and a placement
   when flat and hybrid are among them (hybrid dropped beside cache when
   its placement pins nothing: _as_cache);
3. rounds, each running every mode once in an order that rotates from
   round to round, so that the machine's drift hits every mode alike; at
   least MIN_ROUNDS, then more while the time allows (--time), up to
   --rounds; a mode that failed is not run again (its failure is its
   result: the same command fails the same way);
4. the answer (decide.decide).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem.errors import HetmemError
from hetmem.output import write_atomic
from hetmem.placement import fileformat
from hetmem.recommend import decide, plan
from hetmem.recommend.runs import SMALL, Run, Setup, run_once
from hetmem.sizes import format_size

SCHEMA_VERSION = 1
MIN_ROUNDS = 2  # one round gives no spread, so no interval
MAX_ROUNDS = 10
MODES = ("dram", "swap", "cache", "flat", "hybrid")
# A run may take this many times the first run before it is stopped (swap
# can be ten times slower than cache), and never less than this.
RUN_TIMEOUT_FACTOR = 20.0
RUN_TIMEOUT_MIN_S = 120.0


class NoAnswer(HetmemError):
    """The command ran under no mode (exit 1: it ran, nothing to recommend)."""

    exit_code = 1


class Refused(HetmemError):
    """`hetmem run` refused the command before it started (bad input): its
    message and exit status (2, or 126/127 for the command, as a shell)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code in (2, 126, 127) else 2


@dataclass
class Options:
    argv: list[str]
    budget: int
    storage: Path
    workdir: Path
    budget_text: str = ""  # as the user wrote it, for the command line
    time_s: float = 300.0
    rounds: int | None = None  # None: as many as time_s allows
    modes: tuple[str, ...] = MODES
    threshold: int | None = None
    # measure hybrid even where its placement pins nothing (it then runs as
    # cache mode): bench budgets does, to show the tie rather than assume it
    hybrid_as_cache_runs: bool = False


@dataclass
class Result:
    options: Options
    setup: Setup
    pilot: plan.Pilot
    choice: plan.Choice
    runs: list[Run] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    answer: decide.Answer | None = None


Say = Callable[[str], None]


def round_order(modes: list[str], r: int) -> list[str]:
    """Round r's order: the modes rotated by r places."""
    k = r % len(modes) if modes else 0
    return modes[k:] + modes[:k]


def recommend(opts: Options, say: Say = lambda _: None, note: Say = lambda _: None) -> Result:
    """Runs the whole recommendation; NoAnswer when no mode ran the command.
    `say` is told each step (a progress display), `note` what the user
    should read (printed)."""
    t0 = time.monotonic()
    setup = Setup(list(opts.argv), opts.budget, opts.storage, opts.workdir, opts.threshold)
    setup.budget_text = opts.budget_text or str(opts.budget)
    (opts.workdir / "logs").mkdir(parents=True, exist_ok=True)
    say("first run (cache mode, not counted): how large is the data, how long is a run")
    # bounded by --time, the whole session's: bwa mem at half its footprint
    # ran 630 s in cache mode without finishing (swap: 18 s), and a session
    # of --time 3min waited for it
    setup.timeout_s = opts.time_s
    first = run_once(setup, "cache", 0)
    stopped = first.kind == "timeout" and bool(first.stats)
    if not first.ok and not stopped:
        _first_failed(first, setup)
    pilot = plan.pilot_of(first, setup.timeout_s)
    choice = plan.choose(pilot, opts.budget, list(opts.modes))
    setup.swap_size = plan.swap_size(pilot, opts.budget)
    if not stopped:
        setup.timeout_s = max(RUN_TIMEOUT_MIN_S, RUN_TIMEOUT_FACTOR * pilot.seconds)
    res = Result(opts, setup, pilot, choice)
    if _small_blocks(pilot, choice, opts.budget):
        choice.modes.insert(choice.modes.index("cache") + 1, SMALL)
        note(_small_note(pilot, opts.budget))
    if stopped:
        res.runs.append(first)  # cache's result: it does not run again
        note(_stopped(setup.timeout_s))
    else:
        note(_estimate(pilot, choice, opts))
    _placement(res, say)
    _rounds(res, t0, say)
    res.seconds = time.monotonic() - t0
    res.answer = decide.decide(
        res.runs, choice.modes, setup, pilot.memory_bytes, choice.fits_budget
    )
    write_atomic(opts.workdir / "recommend.json", json.dumps(as_dict(res), indent=1) + "\n")
    if res.answer.mode is None:
        raise NoAnswer("no mode ran the command to the end: " + "; ".join(res.answer.why))
    return res


def _estimate(pilot: plan.Pilot, choice: plan.Choice, opts: Options) -> str:
    """What the first run says of the time ahead (swap may take longer)."""
    least = opts.rounds or MIN_ROUNDS
    runs = least * len(choice.modes) + (1 if {"flat", "hybrid"} & set(choice.modes) else 0)
    ahead = runs * pilot.seconds
    text = (
        f"one run took {pilot.seconds:.1f} s; {least} round(s) of {len(choice.modes)} modes "
        f"take about {_minutes(ahead)} or more"
    )
    if ahead > opts.time_s:
        text += f", beyond --time {_minutes(opts.time_s)}: a smaller input would answer sooner"
    return text


def _small_blocks(pilot: plan.Pilot, choice: plan.Choice, budget: int) -> bool:
    """Cache mode with --small-blocks is measured too when memory the pager
    did not tier (blocks below the threshold, mostly) took UNTIERED_SHARE of
    the budget in the first run: bwa mem's 87 MiB of reads at 128 MiB left
    the pager too little to finish in 630 s, and with the heap it ran beside
    swap (17.8-18.1 s against 17.2-17.9 s); LAMMPS's 43 MiB of neighbour
    pages at 96 MiB ran 5.4-5.6 s with it and 4.7-4.8 s without."""
    return (
        "cache" in choice.modes
        and not choice.fits_budget
        and pilot.outside >= decide.UNTIERED_SHARE * budget
    )


def _small_note(pilot: plan.Pilot, budget: int) -> str:
    return (
        f"in the first run memory outside the pager took {format_size(pilot.outside)} of the "
        f"{format_size(budget)} budget: cache mode is measured with --small-blocks too "
        f"({SMALL}), which pages blocks below the threshold"
    )


def _stopped(limit: float) -> str:
    """What a first run stopped at the time limit means for the rest."""
    return (
        f"the first run (cache mode) did not end within --time {_minutes(limit)} and was "
        "stopped: cache mode counts as failed and each other mode gets the same limit (the "
        "data size is what it had touched by then; a longer --time runs it to the end)"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _first_failed(run: Run, setup: Setup) -> None:
    if run.kind == "setup":
        # hetmem run refused before the command started: bad input
        raise Refused(run.error.removeprefix("hetmem run: error: "), run.exit_code)
    what = f"the command failed in its first run (cache mode, {_failure(run)})"
    if run.kind != "exit":
        raise NoAnswer(what)
    # Did hetmem break it, or does it fail anyway (a wrong input, a test
    # program that exits 1 on an unexpected result)? One plain run tells,
    # which is what the user would try next (XSBench exits 1 whenever its
    # checksum is not that of a default-sized run).
    pilot = plan.pilot_of(run)
    if not plan.fits_ram(pilot):
        # a plain run would need more memory than the node has
        raise NoAnswer(
            f"{what}; not run without hetmem: its data ({format_size(pilot.data_bytes)}) "
            "does not fit this machine's memory"
        )
    plain = run_once(setup, "dram", 0)
    logs = setup.workdir / "logs"
    if plain.ok:
        raise NoAnswer(
            f"{what}; it runs to the end without hetmem (dram mode): a hetmem problem, "
            f"please report it with {logs}/cache.err and {logs}/cache.out"
        )
    raise NoAnswer(
        f"the command fails without hetmem too (dram mode, {_failure(plain)}; cache mode, "
        f"{_failure(run)}): recommend measures a command that runs to the end and exits 0 "
        f"(its output: {logs}/dram.out)"
    )


def _failure(run: Run) -> str:
    """'exit 3: its last line on stderr', or 'exit status 3, no message...'."""
    if run.kind == "timeout" or run.error.startswith("exit status"):
        return run.error
    return f"exit {run.exit_code}: {run.error}"


def _placement(res: Result, say: Say) -> None:
    placed = [m for m in res.choice.modes if m in ("flat", "hybrid")]
    if not placed:
        return
    say("profile run and placement (hetmem profile, hetmem advise)")
    paths, why = plan.profile_and_advise(res.setup, placed)
    for m in placed:
        if m not in paths:
            res.choice.modes.remove(m)
            res.choice.skipped[m] = why
    res.setup.placement = paths.get("flat")
    res.setup.placement_hybrid = paths.get("hybrid")
    if _as_cache(res, paths.get("hybrid")):
        res.choice.modes.remove("hybrid")
        res.choice.skipped["hybrid"] = AS_CACHE


# why hybrid is not run when its placement pins nothing
AS_CACHE = (
    "its placement leaves every site to the pager (`hetmem advise --for hybrid` found no "
    "pin priced clearly better than cache mode): it would run as cache mode, which is measured"
)


def _as_cache(res: Result, hybrid: Path | None) -> bool:
    """Whether hybrid's placement makes it cache mode in all but name, and
    cache mode is measured anyway: a run of it would only cost the user its
    time (LAMMPS at 25% and hpcc at 50% of their footprints: one run each
    round, 40-150 s, measuring a tie by construction)."""
    if hybrid is None or res.options.hybrid_as_cache_runs or "cache" not in res.choice.modes:
        return False
    return fileformat.load(hybrid).pins_nothing


def _rounds(res: Result, t0: float, say: Say) -> None:
    opts = res.options
    live = [m for m in res.choice.modes if not any(r.mode == m for r in res.runs)]
    most = opts.rounds or MAX_ROUNDS
    least = opts.rounds or MIN_ROUNDS
    while res.rounds < most and live:
        r, start = res.rounds, time.monotonic()
        for mode in round_order(live, r):
            say(f"round {r + 1}: {mode}")
            run = run_once(res.setup, mode, r + 1)
            res.runs.append(run)
            if not run.ok:
                live.remove(mode)
        res.rounds += 1
        took = time.monotonic() - start
        if res.rounds >= least and time.monotonic() - t0 + took > opts.time_s:
            break


def as_dict(res: Result) -> dict[str, Any]:
    """The result as recommend.json and --json print it (docs/formats.md)."""
    ans = res.answer or decide.Answer(None)
    per_mode = {m: _mode_dict(res, m) for m in res.choice.modes}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "hetmem-recommend",
        "command": res.options.argv,
        "budget_bytes": res.options.budget,
        "storage": str(res.options.storage),
        "first_run": _pilot_dict(res.pilot),
        "fits_budget": res.choice.fits_budget,
        "fits_memory": res.choice.fits_ram,
        "rounds": res.rounds,
        "seconds": res.seconds,
        "modes": per_mode,
        "skipped": res.choice.skipped,
        "answer": {
            "mode": ans.mode,
            "command": ans.command,
            "vs_dram": ans.vs_dram.as_dict() if ans.vs_dram else None,
            "vs_swap": ans.vs_swap.as_dict() if ans.vs_swap else None,
            "runner_up": {"mode": ans.runner_up[0], "slower": ans.runner_up[1].as_dict()}
            if ans.runner_up
            else None,
            "why": ans.why,
        },
        "runs": [r.as_dict() for r in res.runs],
    }


def _pilot_dict(p: plan.Pilot) -> dict[str, Any]:
    return {
        "seconds": p.seconds,
        "data_bytes": p.data_bytes,
        "memory_bytes": p.memory_bytes,
        "large_peak_bytes": p.large_peak,
        "touched_bytes": p.touched,
        "max_rss_bytes": p.max_rss,
    }


def _mode_dict(res: Result, mode: str) -> dict[str, Any]:
    ts = decide.times(res.runs, mode)
    fails = decide.failures(res.runs, mode)
    return {
        "seconds": ts,
        "median_s": statistics.median(ts) if ts else None,
        "failed": len(fails),
        "error": fails[-1].error if fails else "",
        "error_kind": fails[-1].kind if fails else "",
    }
