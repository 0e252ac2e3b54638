# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem profile`: record allocation sites of a command, or show a profile."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from hetmem import output
from hetmem.errors import UsageError
from hetmem.placement import profile as prof
from hetmem.placement.record import SAMPLERS, record
from hetmem.placement.sitenames import short
from hetmem.placement.sites import load_one, site_rows
from hetmem.placement.symbolize import Symbolizer
from hetmem.sizes import format_num, format_size, parse_duration_ms, parse_size


def _signame(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return f"signal {sig}"


def _ns(ns: float) -> str:
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= div:
            return f"{format_num(ns / div)} {unit}"
    return f"{ns:.0f} ns"


def _count(text: str) -> int:
    """--top's N: a whole number of sites, 0 for all."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"not a number of sites: {text!r}")
    return n


class _ShowParser(argparse.ArgumentParser):
    """`profile show`'s own options (they follow the verb's REMAINDER):
    bad usage is a UsageError, one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"profile show: {message}")


def _show_parser() -> argparse.ArgumentParser:
    p = _ShowParser(
        prog="hetmem profile show",
        description="List a profile's allocation sites, hottest first: source file:line and "
        "function, bytes, peak live bytes, lifetime, estimated accesses per byte.",
    )
    p.add_argument("file", metavar="FILE", help="a profile that hetmem profile wrote")
    p.add_argument("--json", action="store_true", help="print JSON (docs/formats.md)")
    p.add_argument("--top", type=_count, default=0, metavar="N", help="only the N hottest sites")
    return p


class Command:
    name = "profile"
    help = "record which allocation sites a command uses and how hot they are; show a profile"
    description = (
        "hetmem profile [-o FILE] -- CMD ARGS...   records every allocation site of CMD\n"
        "  (call stack as module build-id + offset, sizes, lifetimes, live bytes over\n"
        "  time, sampled accesses), one profile per process / MPI rank.\n"
        "hetmem profile show FILE [--json] [--top N] lists the sites of a profile with\n"
        "  source file:line and function (from DWARF), bytes, peak live bytes,\n"
        "  lifetime and estimated accesses per byte, hottest first.\n"
        "The file format is documented in docs/formats.md."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            default="hetmem.prof",
            help="profile file name template: %%h host, %%r MPI rank ('norank' outside MPI), "
            "%%p pid; '.%%r.%%p' is appended when it has no %%p (default hetmem.prof)",
        )
        parser.add_argument(
            "--sampler",
            default="auto",
            choices=SAMPLERS,
            help="access sampler: auto (default: the first of pebs, ibs, spe, damon, refs "
            "that works here, else portable), pebs (Intel PEBS mem-loads/mem-stores), ibs (AMD "
            "IBS op), spe (Arm SPE), damon (DAMON vaddr monitoring, needs root), refs (the "
            "kernel's referenced bits per mapping, via /proc/self/smaps and clear_refs; safe "
            "with MPI single-copy transfers), portable (page-protection sampling; breaks "
            "system calls and other processes' copies that touch a sampled page), none; a "
            "named one this machine lacks is an error",
        )
        parser.add_argument(
            "--depth", type=int, default=8, metavar="N", help="frames per site, 1..64 (8)"
        )
        parser.add_argument(
            "--threshold",
            metavar="SIZE",
            default="1MiB",
            help="allocations of at least SIZE are recorded one by one; smaller ones are "
            "counted per caller (default 1MiB, as hetmem run)",
        )
        parser.add_argument(
            "--period",
            default="10ms",
            metavar="TIME",
            help="access sampler period: 10ms, 500us, 1s; a bare number is milliseconds "
            "(default 10ms; HETMEM_SAMPLE_PERIOD takes the same units)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON (show)")
        parser.add_argument(
            "--top", type=_count, default=0, metavar="N", help="show only the N hottest sites"
        )
        parser.add_argument(
            "argv",
            nargs=argparse.REMAINDER,
            metavar="show FILE | -- CMD ARGS",
            help="`show FILE`, or `--` and the command to profile",
        )

    def run(self, args: argparse.Namespace) -> int:
        argv = list(args.argv)
        if argv and argv[0] == "show":
            shown = _show_parser().parse_args(argv[1:])
            return self.show(shown.file, args.json or shown.json, shown.top or args.top)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise UsageError(
                "give a command to profile (hetmem profile -- CMD ARGS) or `show FILE`"
            )
        return record(
            argv,
            args.output,
            args.depth,
            parse_size(args.threshold, "--threshold"),
            args.sampler,
            parse_duration_ms(args.period, "--period"),
        )

    def show(self, path: str, as_json: bool, top: int) -> int:
        path, p = load_one(path)
        sym = Symbolizer()
        rows = site_rows(p, sym)
        if top > 0:
            rows = rows[:top]
        if as_json:
            output.print_json(
                {
                    "schema_version": 1,
                    "profile": path,
                    "header": p.header,
                    "modules": [{"path": m.path, "build_id": m.build_id} for m in p.modules],
                    "sites": rows,
                    "symbolization_problems": sym.problems,
                }
            )
            return 0
        _print_header(path, p)
        for key, msg in sym.problems.items():
            output.err_console().print(f"warning: cannot symbolize {key}: {msg}", markup=False)
        _print_sites(rows)
        return 0


def _sampler_text(h: dict[str, Any]) -> str:
    """'sampler NAME (PERIOD accesses per sample[, every T ms][, estimated overhead X])'."""
    # the portable sampler's rounds; a precise sampler's interval only drains buffers
    iv = h["sampler"].get("interval_us") if h["sampler"]["name"] == "portable" else None
    every = f", every {iv / 1000:g} ms" if iv else ""
    ov = prof.sampler_overhead(h)
    tail = f", estimated overhead {ov[1]:.1%})" if ov else ")"
    period = f"{h['sampler']['period']:g} accesses per sample"
    return f"sampler {h['sampler']['name']} ({period}{every}{tail}"


def _print_header(path: str, p: prof.Profile) -> None:
    h = p.header
    rank = "" if h.get("rank") is None else f", rank {h['rank']}"
    output.console().print(
        f"{path}: {p.binary.path} (pid {h['pid']}{rank} on {h['hostname'] or '?'}), "
        f"{len(p.sites)} sites, wall {_ns(h['wall_ns'])}, " + _sampler_text(h),
        markup=False,
    )
    if h.get("stopped_by_signal"):
        output.console().print(
            f"note: the run was stopped by {_signame(h['stopped_by_signal'])}: the profile "
            "covers it up to then",
            markup=False,
        )


_SITE_COLUMNS = [
    "#",
    "site",
    "allocs",
    "bytes",
    "peak live",
    "lifetime (mean)",
    "est. accesses",
    "acc/byte",
]


def _lifetime(row: dict[str, Any]) -> str:
    """The mean lifetime of the freed blocks; the never-freed ones (alive at
    exit: their lifetime is the run's) are said as such, not counted as 0."""
    nf, allocs = row["never_freed"], row["allocs"]
    if nf >= allocs:
        return "never freed"
    mean = _ns(row["lifetime_ns"]["mean"])
    return f"{mean} ({nf} never freed)" if nf else mean


def _print_sites(rows: list[dict[str, Any]]) -> None:
    # reused pages (the refs sampler's short windows) only where some site has them
    reuse = any(r.get("reuse_pages", 0) > 0 for r in rows)
    output.table(
        "allocation sites, hottest first",
        _SITE_COLUMNS + (["reused pages"] if reuse else []),
        [
            [
                r["index"],
                short(r["label"]),
                r["allocs"],
                format_size(r["bytes"]),
                format_size(r["peak_live_bytes"]),
                _lifetime(r),
                f"{format_num(r['est_accesses'])}",
                f"{format_num(r['accesses_per_byte'])}",
            ]
            + ([f"{format_num(r['reuse_pages'])}" if r["reuse_pages"] else "-"] if reuse else [])
            for r in rows
        ],
    )
