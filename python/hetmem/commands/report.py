# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem report`: an HTML page and JSON from benchmark result folders."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hetmem import output
from hetmem.bench import report


class Command:
    name = "report"
    help = "render benchmark results as a self-contained HTML page (and JSON)"
    description = (
        "Reads one or more folders written by `hetmem bench -o DIR` and writes a\n"
        "self-contained HTML page (plots inline, no network needed) with the same\n"
        "numbers as JSON beside it (report.json next to report.html).\n\n"
        "example: hetmem report results/ -o report.html"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="result folders")
        parser.add_argument(
            "-o", "--output", type=Path, default=None, help="HTML file (default: DIR/report.html)"
        )
        parser.add_argument("--json", action="store_true", help="print the report data as JSON")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing file")

    def run(self, args: argparse.Namespace) -> int:
        out, data = report.write(args.dirs, args.output, args.force)
        if args.json:
            output.print_json(data)
            return 0
        output.console().print(f"report: {out}  (data: {out.with_suffix('.json')})")
        _print_summary(data)
        return 0


def _print_summary(data: dict[str, Any]) -> None:
    for s in data["summary"]:
        output.console().print(f"{s['case']}: {s['text']}")
    for c in data["checks"]:
        verdict = {True: "PASS", False: "MISS", None: "UNSURE"}[c["pass"]]
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}"
        why = f"; {c['why']}" if c.get("why") else ""
        output.console().print(f"{verdict}  {c['check']}: ratio {ratio} ({c['rule']}{why})")
    ft = data.get("fits_target")
    if ft:
        output.console().print(
            f"{'PASS' if ft['pass'] else 'MISS'}  target: {ft['target']}: "
            f"{ft['passed']}/{ft['checks']} checks pass (worst: {ft['worst']})"
        )
    if data["failed_runs"]:
        oom = len(data["failed_runs"]) - data["hard_failures"]
        output.console().print(
            f"{len(data['failed_runs'])} failed run(s), {oom} of them the swap baseline "
            "OOM-killed in its memory cgroup: see the report"
        )
