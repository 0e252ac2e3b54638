# SPDX-License-Identifier: BSD-3-Clause
"""Which modes make sense at the user's budget, learnt from one first run.

The first run is in cache mode: it keeps to the budget, so it is safe even
for a program larger than this machine's memory, and its statistics say
how large the data is (the interposer's peak of live large allocations, the
bytes the pager saw touched). From that:
  dram    when the data fits this machine's memory: the reference every
          speed is stated against; a candidate only when it fits the budget
  swap    where it can run (root, a memory cgroup): what a user would
          otherwise pick at the same DRAM limit
  cache   always
  flat,   when a profile can be made (the profile run holds the data in
  hybrid  DRAM, so it must fit this machine's memory) and names sites
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import child
from hetmem.bench import harness
from hetmem.errors import HetmemError
from hetmem.recommend.runs import Run, Setup
from hetmem.sizes import format_size, machine_memory

# The data may take this share of the machine's memory for a run that holds
# all of it in DRAM (dram, the profile run); the rest is the system's.
RAM_SHARE = 0.7
# Swap file: twice the data, at least the budget and 256 MiB.
SWAP_MIN = 256 << 20
MIB = 1 << 20
# the placement each placed mode runs with, in the recommendation's folder
PLACEMENT_FILES = {"flat": "placement.toml", "hybrid": "placement-hybrid.toml"}


@dataclass
class Pilot:
    """What the first run says of the command's data."""

    seconds: float
    large_peak: int  # peak live bytes of allocations >= --threshold
    touched: int  # bytes the pager saw touched
    summary: dict[str, Any]  # diagnose.summarize of its pager
    max_rss: int = 0  # the largest process's peak resident bytes (0: unknown)
    finished: bool = True  # not stopped at the time limit

    @property
    def data_bytes(self) -> int:
        return max(self.large_peak, self.touched)

    @property
    def outside(self) -> int:
        return outside_bytes(self.summary, self.max_rss, self.finished)

    @property
    def memory_bytes(self) -> int:
        """All the command holds: its tiered data and what the pager left
        outside (smaller blocks, static data, stacks). bwa mem's 129 MiB of
        large blocks were half of it: 135 MiB more were small blocks."""
        return self.data_bytes + self.outside


def outside_bytes(summary: dict[str, Any], max_rss: int, finished: bool) -> int:
    """A cache run's memory the pager did not tier: what its process
    measured beside the cache, or all of it when no pager opened (no large
    block) in a run that ended (a stopped one's peak is not known)."""
    if summary.get("outside_peak_bytes") is not None:
        return int(summary["outside_peak_bytes"])
    return max_rss if not summary and finished else 0


def pilot_of(run: Run, limit: float | None = None) -> Pilot:
    """The Pilot of the first run (cache mode): a successful one, or one
    stopped at `limit` seconds, whose sizes are what it had reached then."""
    st = run.stats
    inter = st.get("interposer") or {}
    summ = st.get("pager_summary") or {}
    return Pilot(
        seconds=run.seconds if run.seconds is not None else (limit or 0.0),
        large_peak=int(inter.get("peak_live_large_bytes") or 0),
        touched=int(summ.get("footprint_bytes") or 0),
        summary=summ,
        max_rss=int(st.get("max_rss_bytes") or 0),
        finished=run.ok,
    )


@dataclass
class Choice:
    """The modes to measure and why each other one is left out."""

    modes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    fits_ram: bool = False
    fits_budget: bool = False


def fits_ram(pilot: Pilot) -> bool:
    """Whether the command's data may run in DRAM as is on this machine
    (unknown memory: yes)."""
    ram = machine_memory()
    return ram == 0 or pilot.data_bytes <= RAM_SHARE * ram


def choose(pilot: Pilot, budget: int, wanted: list[str]) -> Choice:
    """The modes of `wanted` worth running after the pilot."""
    c = Choice()
    c.fits_ram = fits_ram(pilot)
    # in DRAM as is, all it holds counts: the tiered data and the rest
    c.fits_budget = pilot.data_bytes <= budget and pilot.max_rss <= budget
    can = harness.available_modes()
    for mode in wanted:
        why = can.get(mode, "unknown mode")
        if not why and mode in ("dram", "flat", "hybrid") and not c.fits_ram:
            why = (
                f"its data ({format_size(pilot.data_bytes)}) does not fit "
                f"{RAM_SHARE:.0%} of this machine's memory ({format_size(machine_memory())})"
            )
            if mode != "dram":
                why = "the profile run holds all data in DRAM, and " + why
        if why:
            c.skipped[mode] = why
        else:
            c.modes.append(mode)
    return c


def swap_size(pilot: Pilot, budget: int) -> int:
    """A swap file that holds what does not fit the budget, with room: a
    whole number of MiB, so that the command line can say 260M."""
    size = max(2 * pilot.data_bytes, budget, SWAP_MIN)
    return -(-size // MIB) * MIB


def profile_and_advise(setup: Setup, modes: Sequence[str]) -> tuple[dict[str, Path], str]:
    """Profiles the command once (`hetmem profile`) and advises a placement
    at the budget for each of modes, flat and hybrid (`hetmem advise --for`:
    hybrid's counts the pager's cache): the placement files by mode, or
    none and why."""
    prof_dir = setup.workdir / "profile"
    prof_dir.mkdir(exist_ok=True)
    for old in prof_dir.glob("run.prof.*"):
        old.unlink()
    tmpl = prof_dir / "run.prof"
    # the runs' threshold: at the default, blocks between the two would
    # match no site of the placement and go to the slowest tier
    thr = [] if setup.threshold is None else ["--threshold", str(setup.threshold)]
    argv = ["-o", str(tmpl), *thr, "--", *setup.argv]
    proc = _hetmem("profile", *argv, log=setup.workdir / "logs")
    if proc.returncode != 0:
        return {}, f"the profile run failed (exit {proc.returncode}; logs/profile.err)"
    profiles = sorted(str(p) for p in prof_dir.glob("run.prof.*"))
    if not profiles:
        return {}, "the profile run wrote no profile (a static binary?)"
    opts = ["--fast-budget", str(setup.budget), "--storage", str(setup.storage)]
    out: dict[str, Path] = {}
    for mode in modes:
        placement = setup.workdir / PLACEMENT_FILES[mode]
        argv = [*profiles, *opts, "--for", mode, "-o", str(placement)]
        proc = _hetmem("advise", *argv, log=setup.workdir / "logs", name=f"advise-{mode}")
        if proc.returncode != 0:
            return {}, f"hetmem advise failed (exit {proc.returncode}; logs/advise-{mode}.err)"
        out[mode] = placement
    return out, ""


def _hetmem(verb: str, *args: str, log: Path, name: str = "") -> child.Finished:
    """`hetmem VERB ARGS` with its output in log/NAME.out and .err (NAME:
    VERB unless given)."""
    name = name or verb
    try:
        with open(log / f"{name}.out", "wb") as fo, open(log / f"{name}.err", "wb") as fe:
            return child.run([sys.executable, "-m", "hetmem", verb, *args], stdout=fo, stderr=fe)
    except OSError as exc:
        raise HetmemError(f"cannot write the logs in '{log}': {exc.strerror}") from None
