"""`hetmem bench flow`: the workflow channel against ADIOS2 (see hetmem.flow.bench)."""

from __future__ import annotations

import argparse

name = "flow"
help = "workflow channel vs ADIOS2 SST and BP5: per-object cost and large-object bandwidth"
description = (
    "The same objects through the hetmem channel and through ADIOS2's Python\n"
    "package (SST and BP5 engines), side by side in one run. Same as\n"
    "`hetmem flow bench`; see `hetmem flow bench --help` for the options."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hetmem.commands.flow import add_bench_arguments

    add_bench_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from hetmem.commands.flow import Command

    return Command()._bench(args)
