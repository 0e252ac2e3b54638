# SPDX-License-Identifier: BSD-3-Clause
"""hetmem's public Python API: what the `hetmem` verbs do, as functions.

These are the names `hetmem/__init__.py` exports (its `__all__`) and
docs/api.md documents. They are thin and stable: the modules beneath them
(hetmem.tiers, hetmem.probe, hetmem.placement, hetmem.run) may change
between releases, these signatures do not without a CHANGELOG entry.
Every error a caller can cause is a hetmem.HetmemError subclass.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import probe as _probe
from hetmem import sizes as _sizes
from hetmem import tiers as _tiers
from hetmem._native import Context
from hetmem.errors import UsageError
from hetmem.placement import fileformat as _placement
from hetmem.placement import pipeline as _pipeline
from hetmem.placement.fileformat import Placement
from hetmem.placement.profile import Profile
from hetmem.run import launch as _launch
from hetmem.run.config import MODES, RunConfig

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------
# sizes


def parse_size(text: str) -> int:
    """Bytes in a size as users write it.

    Args:
        text: "4096", "64K", "512MiB", "4G", "1.5GB". K/M/G/T and
            KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB powers of 1000;
            case does not matter.

    Returns:
        The number of bytes.

    Raises:
        UsageError: not a size, not a whole number of bytes, or 2**64 or more.

    Example:
        >>> parse_size("512MiB")
        536870912
    """
    return _sizes.parse_size(text)


def format_size(n: float) -> str:
    """A byte count for people: binary units, three significant digits.

    Args:
        n: bytes.

    Returns:
        "1.5 KiB", "512 MiB", "37 B".

    Example:
        >>> format_size(1536)
        '1.5 KiB'
    """
    return _sizes.format_size(n)


def parse_budget(text: str) -> int:
    """A fast-tier budget (--fast-budget): a size of more than zero bytes and
    at most this machine's memory, unless HETMEM_BUDGET_OVER_RAM=1.

    Args:
        text: a size, as for parse_size.

    Returns:
        The budget in bytes.

    Raises:
        UsageError: not a size, zero, or more than this machine's memory.

    Example:
        >>> parse_budget("64M")
        67108864
    """
    return _sizes.parse_budget(text)


# ---------------------------------------------------------------------------
# tiers


def discover_tiers(
    storage: Sequence[PathLike] | None = None,
    *,
    no_storage: bool = False,
    fsroot: PathLike | None = None,
) -> dict[str, Any]:
    """The memory and storage tiers of this machine, ranked fastest first
    (what `hetmem tiers --json` prints; docs/formats.md, "Tier inventory").

    Args:
        storage: storage-tier directories; None: the default one
            ($HETMEM_STORAGE, else $TMPDIR, else /var/tmp).
        no_storage: memory tiers only.
        fsroot: read a recorded /sys tree under this directory instead of
            the live machine's (tests/golden holds some).

    Returns:
        {"schema_version": 1, "tiers": [...], ...}; each tier a dict with
        "name", "kind" (dram, hbm, cxl, pmem, gpu, storage, unknown),
        "rank" (0 fastest), "capacity_bytes" and where each fact came from.
        Measurements of `hetmem probe` on this machine are merged in.

    Raises:
        NativeError: libhetmem is missing or failed (a bad fsroot).
        UsageError: a storage directory that cannot be used.

    Example:
        >>> fastest = discover_tiers(no_storage=True)["tiers"][0]
        >>> fastest["rank"], fastest["kind"] in ("dram", "hbm", "cxl", "pmem", "gpu")
        (0, True)
    """
    dirs = [os.fspath(s) for s in storage] if storage is not None else None
    root = os.fspath(fsroot) if fsroot is not None else None
    return _tiers.inventory(root, dirs, no_storage)


def measure_tiers(
    *,
    quick: bool = True,
    storage: Sequence[PathLike] | None = None,
    nodes: Sequence[int] | None = None,
    threads: Sequence[int] | None = None,
    progress: bool = False,
    save: bool = True,
) -> dict[str, Any]:
    """Measure every tier (what `hetmem probe` does): STREAM bandwidth per
    thread count and pointer-chase latency per NUMA node, O_DIRECT
    sequential bandwidth and 4 KiB IOPS per queue depth per storage
    directory. Takes 10-30 s quick, minutes in full.

    Args:
        quick: fewer repetitions and a 256 MiB storage file.
        storage: storage directories to measure; None: the default one.
        nodes: NUMA nodes to measure; None: every node with memory.
        threads: thread counts for STREAM; None: 1 to the CPUs allowed.
        progress: show a progress bar on stderr.
        save: cache the result for this machine, where discover_tiers,
            advise and `hetmem tiers` read it.

    Returns:
        The versioned probe result (docs/formats.md, "Probe results").

    Raises:
        UsageError: a node without memory, a thread count out of range or a
            storage directory that cannot be used.
        NativeError: a measurement failed in libhetmem.
    """
    dirs = [os.fspath(s) for s in storage] if storage is not None else None
    with Context() as ctx:
        plan = _probe.make_plan(ctx, quick=quick, nodes=nodes, threads=threads, storage=dirs)
        result = _probe.run(plan, ctx, show_progress=progress)
    if save:
        _probe.save(result)
    return result


def cached_measurements() -> dict[str, Any] | None:
    """This machine's last measure_tiers / `hetmem probe` result.

    Returns:
        The probe result as measure_tiers returned it, or None if this
        machine was never probed.

    Raises:
        SchemaError: the cached file is of another version or malformed.

    Example:
        >>> probe = cached_measurements()
        >>> probe is None or probe["schema_version"] == 1
        True
    """
    return _probe.load_cached()


# ---------------------------------------------------------------------------
# profiles and placement


def load_profiles(*paths: PathLike) -> list[Profile]:
    """Read profiles written by `hetmem profile -o FILE`.

    Args:
        paths: profile files; a name given to `hetmem profile -o` stands for
            the per-process files (FILE.RANK.PID) of its latest run. A
            launcher's profile (mpirun's: no allocation site) is left out.

    Returns:
        One Profile per process: .path, .header (dict), .modules, .sites
        (each Site with its frames, bytes, peak_live_bytes, est_accesses).

    Raises:
        SchemaError: a file is missing, truncated or of another version.
    """
    _names, profiles, _notes = _pipeline.gather_profiles([os.fspath(p) for p in paths])
    return profiles


@dataclass
class Advice:
    """What advise decided: the placement and what to know about it."""

    placement: Placement  # tiers, modules and sites; .meta has the predictions
    notes: list[str] = field(default_factory=list)  # as `hetmem advise` prints them
    profiles: list[str] = field(default_factory=list)  # the files merged


def advise(
    profiles: Sequence[PathLike],
    fast_budget: int | str,
    *,
    output: PathLike | None = None,
    storage: PathLike | None = None,
    no_storage: bool = False,
    solver: str = "auto",
    split: bool = True,
    for_mode: str = "flat",
) -> Advice:
    """Decide the tier of every allocation site (what `hetmem advise` does):
    an exact integer program (HiGHS) under the tiers' capacities, the
    fastest tier limited to fast_budget per node.

    Args:
        profiles: profile files, as for load_profiles (MPI ranks and
            repeated runs are merged by call site).
        fast_budget: fast-tier bytes per node (an int, or a size such as
            "8G"); divided among the ranks found on each node.
        output: also write the placement file (TOML) here, for
            run_command(..., placement=output).
        storage: the storage tier's directory; None: the default one.
        no_storage: place on memory tiers only (flat mode on HBM or CXL).
        solver: "auto", "ilp" or "greedy".
        split: give the fast tier's room that whole sites leave to the first
            part of the most beneficial large sites.
        for_mode: the mode the placement is for, "flat" or "hybrid" (which
            counts the pager's cache: pins and heads that take more of it
            than they save are left to the pager).

    Returns:
        Advice: .placement (.sites each with .tier, an index into
        .placement.tiers), .notes, .profiles.

    Raises:
        UsageError: a bad budget, no profile, a bad solver name or mode.
        SchemaError: a profile that cannot be read.
    """
    if for_mode not in ("flat", "hybrid"):
        raise UsageError(f"advise: for_mode must be 'flat' or 'hybrid', not {for_mode!r}")
    budget = fast_budget if isinstance(fast_budget, int) else parse_budget(fast_budget)
    if budget < 1:
        raise UsageError("advise: fast_budget must be more than 0 bytes")
    if not profiles:
        raise UsageError("advise: give at least one profile file")
    options = _pipeline.SolveOptions(solver=solver, split=split, for_mode=for_mode)
    got = _pipeline.advise_profiles(
        [os.fspath(p) for p in profiles],
        budget,
        None,
        options,
        storage=os.fspath(storage) if storage is not None else None,
        no_storage=no_storage,
    )
    if output is not None:
        _placement.save(got.advice.placement, output, ["hetmem placement (hetmem.advise)"])
    return Advice(got.advice.placement, got.notes, got.names)


def load_placement(path: PathLike) -> Placement:
    """Read a placement file written by advise or `hetmem advise -o`.

    Returns:
        The Placement: .tiers, .modules, .sites, .meta.

    Raises:
        SchemaError: the file is malformed or of another version.
    """
    return _placement.load(path)


# ---------------------------------------------------------------------------
# running a command


def run_command(
    command: Sequence[str],
    mode: str = "dram",
    *,
    fast_budget: int | str | None = None,
    storage: PathLike | None = None,
    placement: PathLike | None = None,
    stats: PathLike | None = None,
) -> int:
    """Run a command in a memory mode (what `hetmem run` does); its stdin,
    stdout and stderr are this process's.

    Args:
        command: the program and its arguments.
        mode: "dram" (as is), "cache" (DRAM of fast_budget in front of
            the storage tier, served by hetmem's pager), "swap" (the Linux
            baseline: a memory cgroup and a swap file; root only), "flat" or
            "hybrid" (per-site placement from advise; needs placement).
        fast_budget: DRAM the command may use (bytes or a size such as
            "4G"); needed by every mode but dram.
        storage: the storage-tier directory; None: the default one.
        placement: the placement file, for flat and hybrid.
        stats: write the run's statistics (the pager's and interposer's
            counters, wall time, exit code) as JSON to this file.

    Returns:
        The command's exit status (128+N when signal N ended it).

    Raises:
        UsageError: a bad mode or option, or a missing budget.
        CommandNotFound, CommandNotExecutable: the command (exit codes 127,
            126, as a shell gives).
        EnvironmentProblem: the machine lacks what the mode needs.

    Example:
        >>> run_command(["sh", "-c", "exit 3"])
        3
    """
    if mode not in MODES:
        raise UsageError(f"unknown mode '{mode}' (choose from {', '.join(MODES)})")
    budget = fast_budget if isinstance(fast_budget, int) or fast_budget is None else None
    if isinstance(fast_budget, str):
        budget = parse_budget(fast_budget)
    cfg = RunConfig(
        mode=mode,
        command=[os.fspath(c) for c in command],
        budget=budget or 0,
        storage=Path(storage) if storage is not None else None,
        stats=Path(stats) if stats is not None else None,
        placement=Path(placement) if placement is not None else None,
    )
    return _launch.run(cfg)
