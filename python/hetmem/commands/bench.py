# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench`: benchmark suites, each a subcommand (see hetmem.bench)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from hetmem.bench import EXIT_RULE, SUITES
from hetmem.bench.matrix import SUITES as MATRIX
from hetmem.errors import UsageError


def _suite(name: str) -> Any:
    if name in MATRIX:
        return MATRIX[name]
    return importlib.import_module(f"hetmem.bench.{name}")


class Command:
    name = "bench"
    help = "run benchmark suites side by side against the baselines (dram, swap, ...)"
    description = (
        "Benchmark suites that measure hetmem side by side with what a user would\n"
        "otherwise use, in one run, interleaved, and print the ratios.\n\n"
        "  sdm        cache mode vs dram vs Linux swap, with the pager's targets\n"
        "  imdt       the kernels of the Intel Memory Drive Technology (IMDT) study\n"
        "             in every mode, efficiency vs data size\n"
        "  imdt-scale its compute-bound kernels tiled at a 1 GiB budget, 2x and 4x\n"
        "  poly       polynomial bandwidth vs arithmetic intensity\n"
        "  kernels    any kernels or cases (hetmem bench kernels stream lu-tiled)\n"
        "  reference  probe STREAM triad vs a McCalpin-style STREAM built with the\n"
        "             same flags; probe O_DIRECT sequential read vs fio\n"
        "  flow       workflow channel vs ADIOS2 SST and BP5\n"
        "  lattice    lattice QCD mini-app benchmarks\n"
        "  placement  flat and hybrid placement vs dram, cache and swap\n"
        "  budgets    every mode at 25/50/75% fast budgets: ecoHMEM's bars\n"
        "  apps       real applications (hpcc, LAMMPS) in every mode, outputs checked\n"
        "  tiering    the kernel's tiering (demotion, NUMA balancing) vs flat, hybrid\n"
        "  umap       cache mode vs LLNL UMap (--umap-lib) at its best page size\n"
        "  seqread    the pager's device read rate on a 2x scan vs fio, same block\n"
        "             size and queue depth\n\n"
        "Kernel-matrix suites write a result folder with report.html (see hetmem report).\n\n"
        + EXIT_RULE
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="suite", metavar="SUITE", parser_class=type(parser))
        for name in SUITES:
            mod = _suite(name)
            p = sub.add_parser(
                name,
                # argparse %-formats help: a suite's "25%" must not be read
                # as a directive.
                help=mod.help.replace("%", "%%"),
                description=f"{mod.description}\n\n{EXIT_RULE}",
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            mod.add_arguments(p)
            p.set_defaults(_suite=mod)

    def run(self, args: argparse.Namespace) -> int:
        mod = getattr(args, "_suite", None)
        if mod is None:
            raise UsageError("name a suite, e.g. hetmem bench sdm (see hetmem bench --help)")
        return int(mod.run(args))
