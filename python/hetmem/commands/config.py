# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem config`: the runtime options, their HETMEM_* variables and values."""

from __future__ import annotations

import argparse

from hetmem import output
from hetmem._native import Context


class Command:
    name = "config"
    help = "show the runtime options and their HETMEM_* environment variables"
    description = (
        "Every runtime setting is one row of a table in libhetmem and can be set\n"
        "with its HETMEM_* environment variable. This shows the effective values\n"
        "and where each came from (default, env)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        with Context() as ctx:
            opts = ctx.options()
        if args.json:
            output.print_json({"schema_version": 1, "options": opts})
            return 0
        output.table(
            "hetmem options",
            ["option", "variable", "value", "origin", "meaning"],
            [[o["name"], o["env"], o["value"], o["origin"], o["help"]] for o in opts],
        )
        return 0
