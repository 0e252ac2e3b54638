# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run`: run an unmodified command in dram, cache or swap mode."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from hetmem.errors import UsageError
from hetmem.output import check_output_file
from hetmem.run import autofast
from hetmem.run.config import MODES, STORAGE_FULL_POLICIES, RunConfig
from hetmem.run.launch import run
from hetmem.run.mempolicy import MODES as POLICY_MODES
from hetmem.sizes import budget_or_env, parse_positive, parse_size


class Command:
    name = "run"
    help = "run a command with DRAM extended by a storage tier (cache) or a baseline"
    description = (
        "Runs CMD with its memory in one mode; its stdin, stdout, stderr and exit\n"
        "status pass through unchanged (killed by signal N: 128+N, like a shell).\n"
        "\n"
        "  dram   the command as is: the all-DRAM reference\n"
        "  cache  allocations of at least --threshold (malloc family, aligned\n"
        "         allocations, calloc, realloc, large anonymous mmap) come from\n"
        "         hetmem's pager: a DRAM cache of --fast-budget over backing files\n"
        "         in --storage; smaller ones stay in libc. The budget applies to\n"
        "         each process of the command that makes large allocations\n"
        "  swap   the baseline without hetmem: a memory cgroup limited to\n"
        "         --fast-budget plus a swap file in --storage (needs root; both\n"
        "         are removed afterwards, also when the command fails)\n"
        "  flat   profile-guided placement (--placement from `hetmem advise`): each\n"
        "         allocation of at least --threshold is matched to its site and\n"
        "         served by the site's tier: the fastest from DRAM within\n"
        "         --fast-budget, a slower NUMA node with mbind, or the storage tier\n"
        "         through the pager with a minimal cache; when a tier is full the\n"
        "         next slower one serves (counted in --stats)\n"
        "  hybrid flat, but the pager's cache gets what the fast-tier sites leave\n"
        "         of --fast-budget, moment by moment (a site's peak is held for it\n"
        "         only while its blocks are live), and large anonymous mmaps, which\n"
        "         no profile places, go to the pager as in cache mode; advise the\n"
        "         placement with `hetmem advise --for hybrid`\n"
        "\n"
        "Sizes accept 4096, 64K, 512MiB, 4G, 1.5GB. Examples:\n"
        "  hetmem run --mode cache --fast-budget 4G --storage /mnt/nvme --stats s.json -- ./app\n"
        "  hetmem run --membind 1 -- ./app          # numactl --membind 1 ./app\n"
        "  hetmem run --interleave all -- ./app     # spread pages over every node"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _add_mode_arguments(parser)
        _add_tier_arguments(parser)
        _add_numa_arguments(parser)
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    def run(self, args: argparse.Namespace) -> int:
        command = list(args.command)
        if command and command[0] == "--":
            command = command[1:]
        if args.stats is not None:
            check_output_file(args.stats, "--stats")
        numa = next(
            ((m, getattr(args, m.replace("-", "_"))) for m in POLICY_MODES
             if getattr(args, m.replace("-", "_")) is not None),
            None,
        )  # fmt: skip
        auto = autofast.parse(args.auto_fast) if args.auto_fast is not None else None
        budget = budget_or_env(args.fast_budget)
        if args.mode is None and not (auto or numa) and budget <= 0:
            # `hetmem run ./app`: the default mode needs a budget; say what to add
            raise UsageError(
                "no --fast-budget: the default mode (cache) needs one, e.g. --fast-budget 4G; "
                "--mode dram runs the command as it is"
            )
        mode = args.mode or ("flat" if auto else "dram" if numa else "cache")
        if args.small_blocks and mode != "cache":
            raise UsageError(f"--small-blocks is for cache mode, not --mode {mode}")
        cfg = RunConfig(
            mode=mode,
            command=command,
            budget=budget,
            storage=args.storage,
            stats=args.stats,
            threshold=_size(args.threshold, "--threshold", parse_size),
            swap_size=_size(args.swap_size, "--swap-size", parse_positive),
            placement=args.placement,
            storage_full=_storage_full(args.storage_full),
            small_blocks=args.small_blocks,
            numa=numa,
            auto_fast=auto,
        )
        return run(cfg)


def _storage_full(flag_value: str | None) -> str | None:
    """--storage-full, else $HETMEM_STORAGE_FULL checked here (the interposer
    would refuse a bad one only once the command had started)."""
    if flag_value is not None:
        return flag_value
    env = os.environ.get("HETMEM_STORAGE_FULL") or None  # empty: the default, as in C
    if env is not None and env not in STORAGE_FULL_POLICIES:
        raise UsageError(
            f"HETMEM_STORAGE_FULL must be {' or '.join(STORAGE_FULL_POLICIES)}, not '{env}'"
        )
    return env


def _size(text: str | None, flag: str, parse: Callable[[str, str], int]) -> int | None:
    """An optional size option: None when not given; given but empty is an error."""
    return None if text is None else parse(text, flag)


def _add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """What runs where: the mode, the budget, the storage tier, the statistics."""
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="memory mode (cache; dram when a NUMA policy is given alone)",
    )
    parser.add_argument(
        "--fast-budget",
        metavar="SIZE",
        help="DRAM the command may use (default $HETMEM_FAST_BUDGET), per process: the "
        "pager's cache gets what the rest of the process leaves of it, measured every "
        "100 ms; at most this machine's memory unless HETMEM_BUDGET_OVER_RAM=1",
    )
    parser.add_argument(
        "--storage",
        metavar="DIR",
        type=Path,
        help="storage-tier directory for backing or swap files "
        "(default $HETMEM_STORAGE, else $TMPDIR, else /var/tmp)",
    )
    parser.add_argument(
        "--stats", metavar="FILE", type=Path, help="write run statistics as JSON to FILE"
    )


def _add_tier_arguments(parser: argparse.ArgumentParser) -> None:
    """What the tiers serve: the threshold, small blocks, swap, placement, a full storage tier."""
    parser.add_argument(
        "--threshold",
        metavar="SIZE",
        help="cache, flat, hybrid: smallest allocation served from a tier (default 1MiB; "
        "smaller blocks count against the budget outside the pager: a program with much "
        "memory in them wants less, as the end-of-run note says)",
    )
    parser.add_argument(
        "--small-blocks",
        action="store_true",
        help="cache mode: page blocks below the threshold too (up to 1 MiB, from a heap "
        "in the pager's memory), for programs whose memory is mostly small blocks; a "
        "process forked without exec cannot use its parent's (default "
        "$HETMEM_SMALL_BLOCKS)",
    )
    parser.add_argument(
        "--swap-size",
        metavar="SIZE",
        help="swap mode: swap file size (default 4x the budget, at least 8G, "
        "at most 90%% of the free space)",
    )
    parser.add_argument(
        "--placement",
        metavar="FILE",
        type=Path,
        help="flat and hybrid modes: placement TOML written by `hetmem advise`",
    )
    parser.add_argument(
        "--storage-full",
        choices=STORAGE_FULL_POLICIES,
        help="cache, flat, hybrid: when the storage tier cannot back a large "
        "allocation, fail it with a one-line error (error, the default) or serve it "
        "from DRAM beyond the budget, counted in the end-of-run summary (fallback); "
        "default $HETMEM_STORAGE_FULL",
    )
    parser.add_argument(
        "--auto-fast",
        metavar="MIN[:MAX]",
        help="flat and hybrid modes: allocations of MIN..MAX bytes that match no placement "
        "site go to the fastest memory tier within --fast-budget, without a profile "
        "(memkind's AUTO_HBW_SIZE; --placement optional; implies --mode flat)",
    )


def _add_numa_arguments(parser: argparse.ArgumentParser) -> None:
    """The whole command's NUMA policy, as numactl sets it."""
    numa = parser.add_argument_group(
        "NUMA policy of the whole command, as numactl sets it",
        "NODES in numactl's syntax: 0,2-3, all, !1 (all but 1), +1 (relative to the "
        "nodes this process may use). In flat and hybrid modes the placement's own "
        "bindings take precedence for the sites it places.",
    ).add_mutually_exclusive_group()
    for flag, what in (
        ("membind", "allocate only from NODES"),
        ("interleave", "interleave pages over NODES"),
        ("preferred", "prefer NODE, fall back to others"),
        ("preferred-many", "prefer NODES, fall back to others (Linux 5.15+)"),
        ("weighted-interleave", "interleave by the system's per-node weights (Linux 6.9+; "
         "/sys/kernel/mm/mempolicy/weighted_interleave)"),
    ):  # fmt: skip
        numa.add_argument(
            f"--{flag}", metavar="NODE" if flag == "preferred" else "NODES", help=what
        )
