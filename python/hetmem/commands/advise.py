# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem advise`: profiles in, a placement (site -> tier) out."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from hetmem import output
from hetmem.errors import UsageError
from hetmem.output import check_output_file
from hetmem.placement import advise as adv
from hetmem.placement import fileformat as plc
from hetmem.placement import limits, pipeline
from hetmem.placement.sitenames import short
from hetmem.sizes import format_num, format_size, parse_budget


class Command:
    name = "advise"
    help = "decide the tier of every allocation site from profiles (exact ILP, any number of tiers)"
    description = (
        "Reads one or more profiles (MPI ranks, repeated runs: merged by call site),\n"
        "estimates each site's time on every tier from its sampled accesses and the\n"
        "tiers' measured bandwidth and latency (hetmem probe; --tiers FILE to give\n"
        "them), and assigns sites to tiers minimising the predicted time, under\n"
        "capacity limits that count live bytes over time (peak concurrent use).\n"
        "Solved exactly with HiGHS up to --max-ilp-sites sites, greedily beyond.\n"
        "--fast-budget is per node; it is divided among the ranks found on each node.\n"
        "Writes a placement file (TOML, docs/formats.md) for hetmem run --placement."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        _add_io_arguments(parser)
        _add_tier_arguments(parser)
        _add_solver_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.benchmark is not None:
            return self.bench(args)
        budget = self.check(args)
        options = pipeline.SolveOptions(
            ranks_per_node=args.ranks_per_node,
            solver=args.solver,
            max_ilp_sites=args.max_ilp_sites,
            time_limit=args.time_limit,
            explain_top=args.explain,
            split=not args.no_split,
            for_mode=args.for_mode,
        )
        got = pipeline.advise_profiles(
            args.profiles,
            budget,
            args.tiers,
            options,
            symbols=not args.no_symbols,
            storage=args.storage,
            no_storage=args.no_storage,
        )
        comment = [
            "hetmem placement: which tier serves each allocation site (docs/formats.md).",
            f"made by: hetmem advise {' '.join(sys.argv[2:])}".rstrip(),
        ]
        if args.output:
            plc.save(got.advice.placement, args.output, comment)
        if args.json:
            output.print_json(_json(got, args.output))
            return 0
        for n in got.notes:  # a note that is a warning says so itself
            prefix = "" if n.startswith("warning: ") else "note: "
            output.err_console().print(prefix + n, markup=False)
        _print_summary(got)
        _print_tiers(got)
        _print_sites(got, args.explain)
        if args.output:
            output.console().print(f"placement written to {args.output}", markup=False)
        return 0

    def check(self, args: argparse.Namespace) -> int:
        """Every option, before any profile is read: the budget in bytes."""
        if args.fast_budget is None:
            raise UsageError("--fast-budget SIZE is required (fast-tier bytes per node)")
        budget = parse_budget(args.fast_budget, "--fast-budget")
        if not args.profiles:
            raise UsageError("give at least one profile file")
        if args.ranks_per_node is not None and args.ranks_per_node < 1:
            raise UsageError("--ranks-per-node must be at least 1")
        if args.max_ilp_sites < 0:
            raise UsageError("--max-ilp-sites must not be negative")
        if not 0 <= args.explain <= 1_000_000:
            raise UsageError("--explain N must be 0 or more")
        if not (math.isfinite(args.time_limit) and args.time_limit > 0):
            raise UsageError("--time-limit S must be a positive number of seconds")
        if args.output:
            check_output_file(args.output, "-o")
        if args.no_storage and (args.tiers or args.storage is not None):
            raise UsageError("--no-storage excludes --storage and --tiers")
        if args.storage is not None:
            if args.tiers:
                raise UsageError(
                    "--storage and --tiers exclude each other (the file names its tiers)"
                )
            if not os.path.isdir(args.storage):
                raise UsageError(f"--storage {args.storage}: not a directory")
        return budget

    def bench(self, args: argparse.Namespace) -> int:
        if args.benchmark < 1:
            raise UsageError("--benchmark needs a positive number of sites")
        r = adv.benchmark(args.benchmark)
        if args.json:
            output.print_json({"schema_version": 1, **r})
            return 0
        output.console().print(
            f"{r['sites']} sites, {r['tiers']} tiers, {r['intervals']} live-set intervals: "
            f"exact ILP {format_num(r['ilp_seconds'])} s wall, "
            f"{format_num(r['ilp_cpu_seconds'])} s CPU "
            f"(optimal: {r['ilp_optimal']}; target "
            f"{r['target_seconds']:g} s: {'met' if r['meets_target'] else 'MISSED'}), "
            f"greedy {format_num(r['greedy_seconds'])} s; greedy reaches "
            f"{100 * r['greedy_over_ilp']:.4f}% of the exact time saved",
            markup=False,
        )
        return 0


def _json(got: pipeline.ProfilesAdvice, placement_file: str | None) -> dict[str, Any]:
    placement = got.advice.placement
    return {
        "schema_version": 1,
        "placement_file": placement_file,
        "notes": got.notes,
        **placement.meta,
        "tiers": [vars(t) for t in placement.tiers],
        "sites": [{**vars(s), "tier_name": placement.tiers[s.tier].name} for s in placement.sites],
    }


def _print_summary(got: pipeline.ProfilesAdvice) -> None:
    res, tiers = got.advice, got.tiers
    m = res.placement.meta
    solver = "exact ILP (HiGHS)" if res.solution.solver == "ilp-highs" else "GREEDY heuristic"
    if res.solution.solver == "ilp-highs" and not res.solution.optimal:
        solver += ", not proven optimal"
    con = output.console()
    con.print(
        f"{len(got.merged.sites)} sites from {len(got.profiles)} profile(s), {len(tiers)} tiers; "
        f"solver: {solver}, {format_num(res.solution.seconds)} s",
        markup=False,
    )
    con.print(
        f"predicted time in allocation sites: {m['predicted_time_s']:.4g} s per process "
        f"(all on {tiers[-1].name}: {res.time_slowest_s:.4g} s; unlimited {tiers[0].name}: "
        f"{res.time_fastest_s:.4g} s); saved {m['predicted_time_saved_s']:.4g} s",
        markup=False,
    )


_TIER_COLUMNS = [
    "tier",
    "kind",
    "GB/s",
    "latency ns",
    "capacity/process",
    "sites",
    "sum of peaks",
    "source",
]


def _print_tiers(got: pipeline.ProfilesAdvice) -> None:
    placement = got.advice.placement
    counts: dict[int, list[int]] = {}
    for s in placement.sites:
        counts.setdefault(s.tier, [0, 0])
        counts[s.tier][0] += 1
        counts[s.tier][1] += s.peak_live_bytes
    output.table(
        "tiers",
        _TIER_COLUMNS,
        [
            [
                t.name,
                t.kind,
                f"{format_num(t.bandwidth_gbs)}",
                f"{format_num(t.latency_ns)}",
                # tier 0's budget is finite even where nothing is left of it
                format_size(pt.capacity_bytes)
                if pt.capacity_bytes or i < len(placement.tiers) - 1
                else "unlimited",
                counts.get(i, [0, 0])[0],
                format_size(counts.get(i, [0, 0])[1]),
                t.source,
            ]
            for i, (t, pt) in enumerate(zip(got.tiers, placement.tiers, strict=True))
        ],
    )


def _tier_text(placement: plc.Placement, s: plc.PSite) -> str:
    name = placement.tiers[s.tier].name
    if not s.split_bytes:
        return name
    return f"{placement.tiers[0].name} {format_size(s.split_bytes)}, then {name}"


def _print_sites(got: pipeline.ProfilesAdvice, explain: int) -> None:
    placement = got.advice.placement
    top = placement.sites[: max(10, explain)]
    labels = plc.site_labels(placement)
    output.table(
        "sites by benefit",
        ["site", "where", "tier", "peak live", "est. accesses", "benefit s"],
        [
            [
                s.id,
                short(label),
                _tier_text(placement, s),
                format_size(s.peak_live_bytes),
                f"{format_num(s.est_accesses)}",
                f"{format_num(s.benefit_s)}",
            ]
            for s, label in zip(top, labels, strict=False)
        ],
    )
    for s in placement.sites[:explain]:
        output.console().print(f"site {s.id}: {s.reason}", markup=False)


def _add_io_arguments(parser: argparse.ArgumentParser) -> None:
    """The profiles read, the budget, and what is written or printed."""
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile files")
    parser.add_argument(
        "--fast-budget",
        metavar="SIZE",
        help="fast-tier bytes per node (e.g. 4G, 512MiB); at most this machine's memory "
        "unless HETMEM_BUDGET_OVER_RAM=1",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the placement here")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--explain",
        nargs="?",
        type=int,
        const=10,
        default=0,
        metavar="N",
        help="say why each of the N (default 10) most beneficial sites went where it did",
    )


def _add_tier_arguments(parser: argparse.ArgumentParser) -> None:
    """Which tiers the placement may use, and who shares the budget."""
    parser.add_argument(
        "--tiers", metavar="FILE", help="tier characteristics as JSON instead of this machine's"
    )
    parser.add_argument(
        "--storage",
        metavar="DIR",
        help="the storage tier is this directory (as `hetmem run --storage DIR` will use), "
        "with its `hetmem probe --storage DIR` figures where they were measured; default: "
        "the default storage directory",
    )
    parser.add_argument(
        "--no-storage",
        action="store_true",
        help="place on this machine's memory tiers only (flat mode on an HBM or CXL "
        "machine: cold sites go to the slowest NUMA node, never to the pager)",
    )
    parser.add_argument(
        "--ranks-per-node", type=int, metavar="N", help="ranks sharing a node's budget"
    )


def _add_solver_arguments(parser: argparse.ArgumentParser) -> None:
    """How the placement is solved and what it is for."""
    parser.add_argument(
        "--solver", choices=("auto", "ilp", "greedy"), default="auto", help="default: auto"
    )
    parser.add_argument(
        "--max-ilp-sites",
        type=int,
        default=limits.MAX_ILP_SITES,
        metavar="N",
        help=f"auto uses the greedy beyond N sites (default {limits.MAX_ILP_SITES})",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=limits.DEFAULT_TIME_LIMIT_S,
        metavar="S",
        help="HiGHS time limit; the best solution found is used after it",
    )
    parser.add_argument(
        "--no-symbols", action="store_true", help="do not symbolize frames (faster)"
    )
    parser.add_argument(
        "--no-split",
        action="store_true",
        help="place whole sites only: by default the fast tier's room that whole sites "
        "leave goes to the first part of the most beneficial large sites (split placement)",
    )
    parser.add_argument(
        "--for",
        dest="for_mode",
        choices=("flat", "hybrid"),
        default="flat",
        help="the mode the placement is for (default flat). hybrid counts the pager's "
        "cache, which gets what tier 0's live blocks leave of the budget: pins and "
        "heads that would take more of it than they save are left to the pager, and "
        "all of them when the placement is priced less than 1.11x better than cache "
        "mode (the model's error)",
    )
    parser.add_argument(
        "--benchmark",
        nargs="?",
        type=int,
        const=limits.MAX_ILP_SITES,
        metavar="SITES",
        help="time the exact solver on a synthetic instance (default 10000 sites, 3 tiers) "
        "against the 2 s target, beside the greedy",
    )
