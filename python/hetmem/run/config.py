# SPDX-License-Identifier: BSD-3-Clause
"""What `hetmem run` is asked for (RunConfig, the modes) and the environment
that carries it to the interposer (libhetmem_preload.so) in the command.

A module of its own so that hetmem.run.launch, hetmem.run.place and the
helpers they share can all use it without importing one another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hetmem import _native

MODES = ("dram", "cache", "swap", "flat", "hybrid")
PLACE_MODES = ("flat", "hybrid")
STORAGE_FULL_POLICIES = ("error", "fallback")  # the interposer's HETMEM_STORAGE_FULL
PRELOAD_NAME = "libhetmem_preload.so"


@dataclass
class RunConfig:
    mode: str
    command: list[str]
    budget: int = 0
    storage: Path | None = None
    stats: Path | None = None
    threshold: int | None = None
    swap_size: int | None = None
    placement: Path | None = None
    storage_full: str | None = None
    small_blocks: bool = False  # cache mode: the pager's heap serves small blocks too
    fetch_unit: int = 0
    notes: list[str] = field(default_factory=list)
    # (mode, nodes): the whole command's NUMA policy, as numactl sets it
    numa: tuple[str, str] | None = None
    # (min, max) bytes: unmatched allocations to the fastest tier (autohbw)
    auto_fast: tuple[int, int] | None = None


def preload_path() -> Path:
    return _native.library_dir() / PRELOAD_NAME


def _cache_env(cfg: RunConfig, stats_file: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    so = str(preload_path())
    env["LD_PRELOAD"] = so + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["HETMEM_FAST_BUDGET"] = str(cfg.budget)
    env["HETMEM_STORAGE"] = str(cfg.storage)
    # the budget bounds the command's memory, as the swap baseline's memory
    # cgroup does: the pager's cache gets what the rest of the process leaves
    env.setdefault("HETMEM_BUDGET_PROCESS", "1")
    if cfg.threshold is not None:
        env["HETMEM_ALLOC_THRESHOLD"] = str(cfg.threshold)
    if cfg.storage_full is not None:
        env["HETMEM_STORAGE_FULL"] = cfg.storage_full
    if cfg.small_blocks:
        env["HETMEM_SMALL_BLOCKS"] = "1"
    if stats_file is not None:
        env["HETMEM_STATS"] = str(stats_file)
    else:
        env.pop("HETMEM_STATS", None)
    return env
