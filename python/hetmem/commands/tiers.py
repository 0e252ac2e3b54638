# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem tiers`: the memory and storage tiers of this machine, fastest first."""

from __future__ import annotations

import argparse
import os
from typing import Any

from hetmem import output
from hetmem.sizes import format_size
from hetmem.tiers import inventory

KIND_HELP = "dram, hbm, pmem, cxl, gpu, storage or unknown"


def cpu_ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's cpulist form)."""
    out: list[str] = []
    i = 0
    s = sorted(cpus)
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


# What each figure's label in the GB/s and ns columns means: the probe
# measures memory tiers with STREAM triad and storage tiers with sequential
# O_DIRECT reads (hetmem.tiers.measured_gbs), latency by a pointer chase.
LABELS = {
    "triad": "STREAM triad, probed",
    "seq-read": "sequential O_DIRECT read, probed",
    "hmat-read": "the firmware's (HMAT) read rating",
    "hwloc": "hwloc's bandwidth attribute",
    "chase": "idle latency of one thread's random pointer chase, probed",
}


def _bandwidth(t: dict[str, Any]) -> str:
    """GB/s and what the figure is (measured beats rated)."""
    if "measured_gbs" in t:
        what = "seq-read" if t["kind"] == "storage" else "triad"
        return f"{t['measured_gbs']:.1f} {what}"
    hmat = t.get("hmat") or {}
    if hmat.get("read_bandwidth_mibs"):
        return f"{hmat['read_bandwidth_mibs'] * 1048576 / 1e9:.1f} hmat-read"
    hw = t.get("hwloc") or {}
    if hw.get("bandwidth_mibs"):
        return f"{hw['bandwidth_mibs'] * 1048576 / 1e9:.1f} hwloc"
    return ""


def _latency(t: dict[str, Any]) -> str:
    measured = t.get("measured") or {}
    for key in ("idle_latency_ns", "latency_ns"):
        v = measured.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return f"{v:.0f} chase"
    hmat = t.get("hmat") or {}
    if hmat.get("read_latency_ns"):
        return f"{hmat['read_latency_ns']} hmat-read"
    return ""


def legend(tiers: list[dict[str, Any]]) -> str:
    """The meaning of every label the GB/s and ns cells of these tiers use."""
    cells = [f(t) for t in tiers for f in (_bandwidth, _latency)]
    used = {c.split(" ", 1)[1] for c in cells if c}
    parts = [f"{k}: {v}" for k, v in LABELS.items() if k in used]
    return "GB/s, ns: " + ("; ".join(parts) or "not measured, not rated")


_SHORT = {"memory_tiering": "mt", "nvidia": "nv"}


def _sources(t: dict[str, Any]) -> str:
    """Compact sources for the table: 'sysfs hmat mt4 dax'."""
    out = []
    for s in t["source"]:
        if s == "memory_tiering" and t.get("memory_tier") is not None:
            out.append(f"mt{t['memory_tier']}")
        else:
            out.append(_SHORT.get(s, s))
    return " ".join(out)


def _size(v: int | None) -> str:
    return "?" if v is None else format_size(v)


class Command:
    name = "tiers"
    help = "list the memory and storage tiers, fastest first"
    description = (
        "Finds every NUMA node that holds memory and every storage directory given,\n"
        f"classifies each tier ({KIND_HELP}) and ranks them\n"
        "fastest first (rank 0): by measured bandwidth when `hetmem probe` has run on\n"
        "this machine, else by HMAT ratings, else by the kernel's memory tier and the\n"
        "kind. Node distances are never used to rank (on Xeon Max, HBM is 'farther').\n"
        "\n"
        "Sources: /sys/devices/system/node, nodeN/access{0,1} (HMAT), /sys/devices/\n"
        "virtual/memory_tiering, /sys/bus/dax (PMem/CXL provenance), the NVIDIA\n"
        "driver's GPU memory nodes, hwloc (live machine) and statfs for storage.\n"
        "\n"
        "examples:\n"
        "  hetmem tiers\n"
        "  hetmem tiers --json --storage /scratch --storage /var/tmp\n"
        "  hetmem tiers --fsroot tests/golden/xeon-max-flat-snc4 --no-storage"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument(
            "--fsroot",
            metavar="DIR",
            default=None,
            help="read /sys and /proc under DIR (a recorded tree); default $HETMEM_FSROOT or /",
        )
        parser.add_argument(
            "--storage",
            metavar="DIR",
            action="append",
            default=None,
            help="a storage-tier directory (repeatable); default $HETMEM_STORAGE, "
            "else $TMPDIR, else /var/tmp",
        )
        parser.add_argument("--no-storage", action="store_true", help="list memory tiers only")
        parser.add_argument(
            "--no-probe",
            action="store_true",
            help="ignore cached `hetmem probe` results (rank by ratings only)",
        )

    def run(self, args: argparse.Namespace) -> int:
        data = inventory(
            fsroot=args.fsroot or os.environ.get("HETMEM_FSROOT") or None,
            storage=args.storage,
            no_storage=args.no_storage,
            use_probe=not args.no_probe,
        )
        if args.json:
            output.print_json(data)
            return 0
        rows = [_row(t) for t in data["tiers"]]
        notes = [n for t in data["tiers"] for n in _notes(t)]
        output.table(
            f"tiers, fastest first (ranked by {data.get('ranking', '?')})",
            [
                "rank",
                "name",
                "kind",
                "capacity",
                "free",
                "CPUs",
                "GB/s",
                "ns",
                "source",
            ],
            rows,
        )
        notes += [legend(data["tiers"]), "mtN: the kernel's memory_tierN"]
        for n in notes:
            output.console().print(n, markup=False)
        return 0


def _row(t: dict[str, Any]) -> list[Any]:
    return [
        t["rank"],
        t["name"],
        t["kind"],
        _size(t["capacity_bytes"]),
        _size(t["free_bytes"]),
        cpu_ranges(t["cpus"]) or "-",
        _bandwidth(t),
        _latency(t),
        _sources(t),
    ]


def _notes(t: dict[str, Any]) -> list[str]:
    notes = [f"warning: {w}" for w in t.get("warnings", [])]
    if t["kind"] == "storage":
        notes.append(
            f"{t['name']}: {t['fs_type']}, O_DIRECT "
            + ("supported" if t["o_direct"] else "not supported")
        )
    return notes
