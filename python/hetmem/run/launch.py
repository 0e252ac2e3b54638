# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run`: run an unmodified command in one memory mode.

- dram: the command as is (the all-DRAM reference);
- cache: libhetmem_preload.so serves every allocation of at least the
  threshold from pager regions whose DRAM cache is the fast budget;
- swap: the baseline a user gets without hetmem: a memory cgroup limited to
  the budget plus a swap file of sufficient size on the same storage tier;
- flat / hybrid: profile-guided placement. A placement (`hetmem advise`) is
  turned into the compact table (hetmem.placement.fileformat.prepare_for_run, with its
  build-id checks) and handed to the interposer, which matches every
  allocation of at least the threshold to a site and serves it from the
  site's tier: the fastest tier from glibc (DRAM, counted against the fast
  budget), a slower NUMA node with mbind, the storage tier through the pager.
  flat gives the pager a minimal cache; hybrid gives it what the pinned
  (fast-tier) sites leave of the budget (hetmem.run.place).

Whatever the mode, the command's stdin, stdout and stderr are inherited
untouched and its exit status becomes hetmem's (a command killed by signal N
gives 128+N, as in a shell). Everything a user can get wrong is checked
before the command starts: a one-line error and exit status 2 (127 and 126
for a command that is missing or cannot be executed, as a shell gives).

The command dies with hetmem (PR_SET_PDEATHSIG), and what a run makes (swap
area, cgroup, temporary files) is removed by hetmem, or by its supervisor
(hetmem.run.supervise) if hetmem is killed with SIGKILL. A later run removes only
what an earlier one provably left (its owner record says so).

This module validates a run and starts its mode; what the modes share lives
apart: RunConfig (hetmem.run.config), the checks before the command starts
(hetmem.run.checks), the child process and its signals (hetmem.run.proc),
the interposer's end-of-run figures (hetmem.run.report).
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.output import check_output_dir, write_atomic
from hetmem.output import run_note as note
from hetmem.run import mempolicy, supervise
from hetmem.run.checks import (
    check_pager,
    check_storage,
    check_threshold,
    default_storage,
    resolve_command,
    warn_if_not_interposable,
)
from hetmem.run.config import MODES, PLACE_MODES, RunConfig, _cache_env, preload_path
from hetmem.run.place import _run_place, validate_place
from hetmem.run.proc import _Interrupted, _run_tmpdir, _signals, _spawn, _supervised
from hetmem.run.report import _merge_procs, _note_tiers, _read_interposer_stats
from hetmem.run.swap import MemoryCgroup, SwapFile, SwapSampler, clean_stale, read_swaps

SCHEMA_VERSION = 1
CGROUP_PREFIX = supervise.CGROUP_PREFIX
GIB = 1 << 30


# ---------------------------------------------------------------------------
# Validation (before anything runs)
# ---------------------------------------------------------------------------
def validate(cfg: RunConfig) -> None:
    if cfg.mode not in MODES:
        raise UsageError(f"unknown mode '{cfg.mode}' (choose from {', '.join(MODES)})")
    if cfg.auto_fast is not None and cfg.mode not in PLACE_MODES:
        raise UsageError("--auto-fast is for --mode flat or hybrid")
    resolve_command(cfg.command)
    if cfg.stats is not None:  # written after the command: checked before it runs
        check_output_dir(cfg.stats.resolve(), "--stats")
    if cfg.mode == "dram":
        return
    if cfg.budget <= 0:
        raise UsageError(f"--mode {cfg.mode} needs --fast-budget SIZE (or HETMEM_FAST_BUDGET)")
    if cfg.storage is None:
        cfg.storage = default_storage()
    cfg.storage = cfg.storage.resolve()
    if cfg.mode in PLACE_MODES:
        validate_place(cfg)
        return
    if cfg.placement is not None:
        raise UsageError("--placement is for --mode flat or hybrid")
    if cfg.mode == "cache":
        _validate_cache(cfg)
    else:
        _validate_swap(cfg)


def _validate_cache(cfg: RunConfig) -> None:
    assert cfg.storage is not None
    check_threshold(cfg.threshold)
    if not preload_path().exists():
        raise EnvironmentProblem(f"{preload_path()} is missing: reinstall hetmem")
    check_storage(cfg.storage, 1 << 20)
    check_pager(cfg)


def _validate_swap(cfg: RunConfig) -> None:
    assert cfg.storage is not None
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "--mode swap needs root (it creates a memory cgroup and a swap file)"
        )
    check_storage(cfg.storage, 1 << 20)
    free = _free_bytes(cfg.storage)
    if cfg.swap_size is None:
        # The footprint is unknown: 4x the budget, at least 8 GiB, but
        # never more than 90% of what the storage tier has free.
        cfg.swap_size = min(max(4 * cfg.budget, 8 * GIB), int(free * 0.9))
    if cfg.swap_size < cfg.budget or cfg.swap_size < (16 << 20):
        raise UsageError(
            f"swap size {cfg.swap_size} bytes is too small "
            f"(storage '{cfg.storage}' has {free} bytes free)"
        )
    if cfg.swap_size > free:
        raise UsageError(
            f"storage directory '{cfg.storage}' is full: {free} bytes free, "
            f"swap file needs {cfg.swap_size}"
        )


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# ---------------------------------------------------------------------------
# Running the command
# ---------------------------------------------------------------------------
def run(cfg: RunConfig) -> int:
    """Validates cfg, runs the command, writes --stats; returns its exit status."""
    validate(cfg)
    if cfg.mode == "cache" or cfg.mode in PLACE_MODES:
        warn_if_not_interposable(cfg.command, "run")
    stats: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "hetmem-run",
        "mode": cfg.mode,
        "budget": cfg.budget or None,
        "storage": str(cfg.storage) if cfg.storage else None,
        "command": cfg.command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    state: dict[str, Any] = {}
    if cfg.numa is not None:
        policy = mempolicy.resolve(*cfg.numa)
        stats["mempolicy"] = policy.resolved
        state["mempolicy_setup"] = mempolicy.child_setup(policy)
    rc = 0
    try:
        with _signals(state), _supervised(cfg, state):
            if cfg.mode == "dram":
                rc, wall = _spawn(cfg.command, dict(os.environ), state)
            elif cfg.mode == "cache":
                rc, wall = _run_cache(cfg, state, stats)
            elif cfg.mode in PLACE_MODES:
                rc, wall = _run_place(cfg, state, stats)
            else:
                rc, wall = _run_swap(cfg, state, stats)
    except _Interrupted as exc:
        os.write(2, f"hetmem run: interrupted by signal {exc.signum}; cleaned up\n".encode())
        return 128 + exc.signum
    stats["wall_s"] = round(wall, 6)
    stats["max_rss_bytes"] = max_child_rss()
    stats["exit_code"] = rc
    if rc > 128:
        stats["signal"] = rc - 128
    if cfg.stats is not None:
        _write_json(cfg.stats, stats)
    return rc


def max_child_rss() -> int:
    """The largest resident set of the processes this one has waited for
    (getrusage RUSAGE_CHILDREN: the command, or the one of its processes
    the others were waited for by): what the command held in DRAM at its
    peak, tiered or not."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """--stats: never through a symlink, never half-written (write_atomic)."""
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _run_cache(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    stats["threshold"] = cfg.threshold
    stats["fetch_unit"] = cfg.fetch_unit
    with _run_tmpdir(state) as tmp:
        # always read back: a full storage tier is reported with or without --stats
        lines_file = tmp / "interposer.jsonl"
        rc, wall = _spawn(cfg.command, _cache_env(cfg, lines_file), state, adopt=True)
        procs = _read_interposer_stats(lines_file)
    _merge_procs(stats, procs)
    if procs and stats["threshold"] is None:
        stats["threshold"] = procs[0].get("threshold")
    _note_tiers(stats, procs, cfg)
    stats["processes"] = procs
    return rc, wall


def _swap_record(swap: SwapFile, cg: MemoryCgroup, state: dict[str, Any]) -> str:
    """Writes the run's owner record (root's STATE_DIR) naming its swap file
    and cgroup, and tells the supervisor the same; returns the record's name."""
    rec = {"owner": swap.owner.to_json(), "swap": swap.entry, "cgroup": str(cg.path)}
    try:
        name = supervise.save_record(rec)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write the run record in {supervise.STATE_DIR}: {exc.strerror}"
        ) from None
    sup: supervise.Supervisor | None = state.get("supervisor")
    if sup is not None:
        sup.add(swap=swap.entry, cgroup=str(cg.path), record=name)
    return name


def _note_oom(cfg: RunConfig, cgs: dict[str, Any]) -> None:
    assert cfg.swap_size is not None
    # the sampler may miss a short run's peak; v1's memory+swap high-water
    # mark less the memory limit bounds it from below
    used = max(
        int(cgs.get("swap_peak_bytes") or 0),
        int(cgs.get("memsw_max_usage_bytes") or 0) - int(cgs.get("limit_bytes") or 0),
    )
    if used + (16 << 20) < cfg.swap_size:
        # swap was not full: the kernel gave up reclaiming (a working set
        # above the budget thrashes until reclaim makes no progress)
        why = (
            f"reclaim under the {cfg.budget} B budget made no progress with "
            f"{used >> 20} MiB of {cfg.swap_size >> 20} MiB swap in use: the "
            "working set is above the budget"
        )
    else:
        why = "the swap file was full: raise --swap-size"
    note(f"the command was killed by the OOM killer inside the swap cgroup ({why})")


def _run_swap(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    assert cfg.storage is not None and cfg.swap_size is not None
    stale = clean_stale(cfg.storage)
    if stale:
        note(f"removed what an earlier interrupted run left: {', '.join(stale)}")
    others = read_swaps()
    if others:
        names = ", ".join(f"{s['name']} (priority {s['priority']})" for s in others)
        note(
            f"other swap areas are active: {names}; hetmem's swap file has the highest "
            "priority, but the command's pages may also go there"
        )
    stats["swap_size"] = cfg.swap_size
    stats["other_swap"] = others
    owner = supervise.Owner.me()
    cg = MemoryCgroup(f"{CGROUP_PREFIX}{owner.pid}-{owner.start}")
    swap = SwapFile(cfg.storage, cfg.swap_size, owner)
    sampler = SwapSampler(swap)
    record = ""
    try:
        swap.create()
        recorded = cg.path
        record = _swap_record(swap, cg, state)
        swap.activate()
        cg.create(cfg.budget)
        if cg.path != recorded:  # cgroup v2 may have put it elsewhere
            record = _swap_record(swap, cg, state)
        stats["swap_file"] = str(swap.path)
        stats["cgroup"] = str(cg.path)
        sampler.start()
        rc, wall = _spawn(cfg.command, dict(os.environ), state, preexec=cg.join)
        sampler.stop.set()
        sampler.join()
        cgs = cg.stats()
        cgs["swap_peak_bytes"] = sampler.peak
        stats["swap"] = cgs
        if cgs.get("oom_kill"):
            _note_oom(cfg, cgs)
        return rc, wall
    finally:
        state["tearing_down"] = True
        sampler.stop.set()
        cg.remove()
        if swap.remove() and record:
            supervise.drop_record(record)
        state["tearing_down"] = False
