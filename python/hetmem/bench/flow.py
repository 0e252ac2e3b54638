# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench flow`: the workflow channel against ADIOS2 (see hetmem.flow.bench).

Also the options and the report of `hetmem flow bench`, which runs the same.
"""

from __future__ import annotations

import argparse
from typing import Any

from hetmem import output
from hetmem.bench import exit_status
from hetmem.errors import UsageError
from hetmem.flow import bench
from hetmem.flow import spec as specmod

name = "flow"
help = "workflow channel vs ADIOS2 SST and BP5: per-object cost and large-object bandwidth"
description = (
    "The same objects through the hetmem channel and through ADIOS2's Python\n"
    "package (SST and BP5 engines), side by side in one run. Same as\n"
    "`hetmem flow bench`; see `hetmem flow bench --help` for the options."
)


def tier_arg(text: str) -> str:
    """argparse type of a channel tier option."""
    try:
        return specmod.check_tier(text, "--channel")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bench_tier_arg(text: str) -> str:
    """argparse type of flow bench's --tier: one process runs both sides, so
    a locality tier (which binds them to two nodes) is refused."""
    tier = tier_arg(text)
    if tier.startswith("local:"):
        raise argparse.ArgumentTypeError(
            f"'{tier}' binds a writer and a reader to two nodes; the bench runs both in"
            " one process: give node:N"
        )
    return tier


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bench_arguments(parser)


def run(args: argparse.Namespace) -> int:
    res = bench.bench(
        args.small_objects, args.large_bytes, args.steps, args.tier, args.adios_python
    )
    if args.json:
        output.print_json(res)
    else:
        print_bench(res)
    return exit_status(verdicts(res))


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the channel-vs-ADIOS2 bench (also `hetmem bench flow`)."""
    p.add_argument("--tier", type=bench_tier_arg, default="dram", help="channel tier (dram)")
    p.add_argument(
        "--small-objects", type=int, default=10000, help="4.5 KB objects per step (10000)"
    )
    p.add_argument("--large-bytes", default="64MiB", help="size of each large object (64MiB)")
    p.add_argument("--steps", type=int, default=4, help="steps per measurement (4)")
    p.add_argument("--adios-python", help="interpreter that has the adios2 package")
    p.add_argument("--json", action="store_true", help="print JSON")


def print_bench(res: dict[str, Any]) -> None:
    """Human report of a bench result (also used by `hetmem flow bench`)."""
    _print_channel(res)
    _print_systems(res)
    _print_targets(res)


def _print_channel(res: dict[str, Any]) -> None:
    cs = res["channel_c"]["small"]
    cl = res["channel_c"]["large"]
    output.table(
        f"channel ({res['tier']}) in C: {cs['objects']} x {cs['object_bytes']} B and "
        f"{cl['objects']} x {cl['object_bytes'] >> 20} MiB per step",
        ["measure", "put", "get (view)", "get (copy)", "memcpy"],
        [
            [
                "ns per small object",
                cs["put_ns_per_object"],
                cs["get_view_ns_per_object"],
                cs["get_copy_ns_per_object"],
                cs["memcpy_ns_per_object"],
            ],
            ["GB/s large objects", cl["put_gbs"], "", cl["get_gbs"], cl["memcpy_gbs"]],
        ],
    )
    ps = res["channel_python"]["small"]
    output.table(
        f"the channel's Python batch path ({res['tier']}): {cs['objects']} x "
        f"{cs['object_bytes']} B per step, one call per step each way",
        ["measure", "put_many", "get_many (view)", "get_many_into (copy)", "numpy copy"],
        [
            [
                "us per small object",
                round(ps["put_s"] * 1e6, 3),
                round(ps["get_view_s"] * 1e6, 3),
                round(ps["get_copy_s"] * 1e6, 3),
                round(ps["memcpy_s"] * 1e6, 3),
            ]
        ],
    )


def _system_row(r: dict[str, Any]) -> list[Any]:
    return [
        r["system"],
        _r(r.get("small_put_us")),
        _r(r.get("small_get_us")),
        _r(r.get("large_put_gbs"), 3),
        _r(r.get("large_get_gbs"), 3),
        f"{r['small_cost_ratio_vs_channel']:.1f}x" if "small_cost_ratio_vs_channel" in r else "",
        r.get("error", ""),
    ]


def _print_systems(res: dict[str, Any]) -> None:
    output.table(
        "same objects through Python: the channel against ADIOS2",
        ["system", "put us/obj", "get us/obj", "put GB/s", "get GB/s", "cost vs channel", "error"],
        [_system_row(r) for r in res["rows"]],
    )
    ad = res["adios2"]
    if not ad["python"]:
        output.console().print(
            "ADIOS2: NOT INSTALLED (no interpreter with the adios2 package; install the "
            "'bench' extra, pip install 'hetmem\\[bench]', or pass --adios-python PY): "
            "the channel was measured alone, not compared"
        )
    else:
        output.console().print(f"ADIOS2 {ad['version']} from {ad['python']}")


def verdicts(res: dict[str, Any]) -> list[bool]:
    """The three targets the report prints as PASS/MISS."""
    t = res["targets"]
    return [t["sw_cost_met"], t["py_sw_cost_met"], t["large_met"]]


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _print_targets(res: dict[str, Any]) -> None:
    t = res["targets"]
    cs = res["channel_c"]["small"]
    con = output.console()
    total = cs["put_ns_per_object"] + cs["get_view_ns_per_object"]
    con.print(
        f"target put+get <= 1 us per 4.5 KB object, C path: {total / 1000:.2f} us with the "
        f"copy, {max(0.0, t['sw_cost_us_per_small_object']):.2f} us beyond memcpy -> "
        f"{_verdict(t['sw_cost_met'])}"
    )
    con.print(
        f"target put+get <= 1 us per 4.5 KB object, Python batch path: "
        f"{t['py_cost_us_per_small_object']:.2f} us with the copy, "
        f"{max(0.0, t['py_sw_cost_us_per_small_object']):.2f} us beyond memcpy -> "
        f"{_verdict(t['py_sw_cost_met'])}"
    )
    con.print(
        f"target large objects >= 50% of memcpy: put {t['large_put_over_memcpy'] * 100:.0f}%, "
        f"get {t['large_get_over_memcpy'] * 100:.0f}% -> {_verdict(t['large_met'])}"
    )


def _r(v: float | None, nd: int = 2) -> float | str:
    return "" if v is None else round(v, nd)
