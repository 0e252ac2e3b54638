# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem probe`: measure the memory and storage tiers of this machine."""

from __future__ import annotations

import argparse
import sys

from hetmem import output
from hetmem import probe as probe_mod
from hetmem._native import Context
from hetmem.errors import UsageError
from hetmem.sizes import parse_probe_sizes


class Command:
    name = "probe"
    help = "measure every memory and storage tier (bandwidth, latency, IOPS)"
    description = (
        "Measures each memory tier (a NUMA node with memory) with STREAM copy/\n"
        "scale/add/triad on memory bound to the node, arrays 4x the last-level\n"
        "cache, swept over thread counts, and its idle latency by a random\n"
        "pointer chase; and each storage tier (a directory) with O_DIRECT\n"
        "sequential write/read bandwidth and 4 KiB random-read IOPS and latency\n"
        "at queue depths 1..32 through io_uring. The probe file is unlinked as\n"
        "soon as it is made, so nothing is left behind.\n\n"
        "The result is cached per machine (see `hetmem config`, HETMEM_CACHE_DIR)\n"
        "and used by later tools, e.g. `hetmem tiers` for ranking.\n"
        "--quick takes well under 30 s; the full probe a few minutes at most."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller files")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument(
            "--storage",
            nargs="+",
            action="extend",
            metavar="DIR",
            help="storage-tier directories (default: the storage option, $TMPDIR, /var/tmp)",
        )
        parser.add_argument(
            "--threads",
            nargs="+",
            action="extend",
            type=int,
            metavar="N",
            help="STREAM thread counts (default: 1 up to every CPU this process may use)",
        )
        parser.add_argument(
            "--nodes",
            nargs="+",
            action="extend",
            type=int,
            metavar="N",
            help="NUMA nodes to measure (default: every node with memory)",
        )
        parser.add_argument(
            "--storage-size",
            metavar="SIZE",
            help="probe file size, e.g. 512MiB (default: 256MiB quick, 1GiB full)",
        )
        parser.add_argument(
            "--array-size",
            metavar="SIZE",
            help="STREAM array and latency buffer size (default: 4x the last-level cache)",
        )
        parser.add_argument(
            "--no-storage", action="store_true", help="measure the memory tiers only"
        )
        parser.add_argument("--no-memory", action="store_true", help="measure storage tiers only")

    def run(self, args: argparse.Namespace) -> int:
        size, array = parse_probe_sizes(args.storage_size, args.array_size)
        for n in args.nodes or []:
            if n < 0:
                raise UsageError(f"--nodes {n}: NUMA node numbers are 0 or more")
        with Context() as ctx:
            plan = probe_mod.make_plan(
                ctx,
                quick=args.quick,
                nodes=args.nodes,
                threads=args.threads,
                storage=args.storage,
                storage_bytes=size,
                array_bytes=array,
            )
            if args.no_storage:
                plan.storage = []
            if args.no_memory:
                plan.nodes = []
            show = not args.json and sys.stderr.isatty()
            result = probe_mod.run(plan, ctx, show_progress=show)
        path = probe_mod.save(result)
        if args.json:
            output.print_json(result)
            return 0
        probe_mod.print_tables(result)
        output.console().print(f"probe took {result['seconds']} s; result cached in {path}")
        return 0
