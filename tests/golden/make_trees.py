# SPDX-License-Identifier: BSD-3-Clause
"""Builds the sysfs trees under tests/golden/ that the tier-inventory tests replay.

    python tests/golden/make_trees.py            # rebuild the constructed machines
    python tests/golden/make_trees.py --record vm  # record this machine as "vm"
    python tests/golden/make_trees.py --record x --from ROOT --out DIR
                                                 # record a tree under ROOT into DIR/x

Each machine is a folder holding the files (and symlinks) the kernel lays out
and that discovery reads, plus a few realistic extras. The constructed ones
follow the kernel's documented interfaces (Documentation/ABI/stable/
sysfs-devices-node, admin-guide/mm/numaperf.rst, memory-tiers, dax bus) and
published facts about the platforms (../shared/notes/anchors-tiers.md).
expected.json next to each tree is written by tests/unit/test_tiers.py with
HM_UPDATE_GOLDEN=1 and then reviewed by eye.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = "sys/devices/system/node"
TIERING = "sys/devices/virtual/memory_tiering"


class Tree:
    def __init__(self, name: str, out: Path = HERE) -> None:
        self.root = out / name
        keep = self.root / "expected.json"
        saved = keep.read_text() if keep.exists() else None
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        if saved is not None:
            keep.write_text(saved)

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text if text.endswith("\n") or text == "" else text + "\n")

    def link(self, rel: str, target: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, p)

    # ---- node-level helpers ----
    def masks(self, online: str, possible: str, has_cpu: str, has_memory: str, normal: str) -> None:
        self.write(f"{NODE}/online", online)
        self.write(f"{NODE}/possible", possible)
        self.write(f"{NODE}/has_cpu", has_cpu)
        self.write(f"{NODE}/has_memory", has_memory)
        self.write(f"{NODE}/has_normal_memory", normal)
        self.write(f"{NODE}/has_generic_initiator", "")

    def node(self, n: int, cpus: list[int], total_kb: int, free_kb: int, dist: list[int]) -> None:
        d = f"{NODE}/node{n}"
        self.write(f"{d}/cpulist", cpulist(cpus))
        self.write(f"{d}/cpumap", cpumap(cpus))
        self.write(f"{d}/distance", " ".join(str(x) for x in dist))
        self.write(f"{d}/meminfo", meminfo(n, total_kb, free_kb))
        for c in cpus[:4]:  # a few of the cpuN links, as the kernel makes them
            self.link(f"{d}/cpu{c}", f"../../cpu/cpu{c}")

    def hmat(
        self,
        target: int,
        initiators: list[int],
        rbw: int,
        wbw: int,
        rlat: int,
        wlat: int,
        access: tuple[str, ...] = ("access0", "access1"),
    ) -> None:
        for acc in access:
            d = f"{NODE}/node{target}/{acc}/initiators"
            self.write(f"{d}/read_bandwidth", str(rbw))
            self.write(f"{d}/write_bandwidth", str(wbw))
            self.write(f"{d}/read_latency", str(rlat))
            self.write(f"{d}/write_latency", str(wlat))
            for i in initiators:
                self.link(f"{d}/node{i}", f"../../../node{i}")
                self.link(f"{NODE}/node{i}/{acc}/targets/node{target}", f"../../../node{target}")

    def tiers(self, levels: dict[int, str]) -> None:
        for level, nodelist in levels.items():
            self.write(f"{TIERING}/memory_tier{level}/nodelist", nodelist)
            self.write(f"{TIERING}/memory_tier{level}/uevent", "")

    def dax(self, dev: str, device_path: str, target: int, kmem: bool = True) -> None:
        """A dax device at sys/<device_path>/<dev> and its bus links."""
        full = f"{device_path}/{dev}"
        self.write(f"sys/{full}/target_node", str(target))
        self.write(f"sys/{full}/size", "0")
        self.link(f"sys/bus/dax/devices/{dev}", f"../../../{full}")
        if kmem:
            self.link(f"sys/bus/dax/drivers/kmem/{dev}", f"../../../../{full}")


def cpulist(cpus: list[int]) -> str:
    out, i = [], 0
    s = sorted(cpus)
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def cpumap(cpus: list[int]) -> str:
    bits = 0
    for c in cpus:
        bits |= 1 << c
    nwords = max(1, (max(cpus, default=0) // 32) + 1)
    words = [(bits >> (32 * w)) & 0xFFFFFFFF for w in reversed(range(nwords))]
    return ",".join(f"{w:08x}" for w in words)


def meminfo(n: int, total_kb: int, free_kb: int) -> str:
    used = total_kb - free_kb
    rows = [
        ("MemTotal", total_kb),
        ("MemFree", free_kb),
        ("MemUsed", used),
        ("SwapCached", 0),
        ("Active", used // 3),
        ("Inactive", used // 2),
        ("Active(anon)", used // 10),
        ("Inactive(anon)", used // 20),
        ("Active(file)", used // 4),
        ("Inactive(file)", used // 3),
        ("Unevictable", 0),
        ("Mlocked", 0),
        ("Dirty", 12),
        ("Writeback", 0),
        ("FilePages", used // 2),
        ("Mapped", used // 50),
        ("AnonPages", used // 8),
        ("Shmem", used // 100),
        ("KernelStack", 1200),
        ("PageTables", 900),
        ("SecPageTables", 0),
        ("NFS_Unstable", 0),
        ("Bounce", 0),
        ("WritebackTmp", 0),
        ("KReclaimable", used // 40),
        ("Slab", used // 30),
        ("SReclaimable", used // 40),
        ("SUnreclaim", used // 120),
        ("AnonHugePages", 0),
        ("ShmemHugePages", 0),
        ("ShmemPmdMapped", 0),
        ("FileHugePages", 0),
        ("FilePmdMapped", 0),
    ]
    lines = [f"Node {n} {k + ':':<16}{v:>10} kB" for k, v in rows]
    lines += [
        f"Node {n} HugePages_Total:     0",
        f"Node {n} HugePages_Free:      0",
        f"Node {n} HugePages_Surp:      0",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Machines
# ---------------------------------------------------------------------------


def optane_kmem() -> None:
    """2-socket Cascade Lake (24 cores/socket, HT), 192 GB DDR4 per socket, 6x128 GB
    Optane PMem per socket in App Direct, each region one devdax namespace onlined
    with `daxctl reconfigure-device --mode=system-ram`: CPU-less nodes 2 and 3 in
    memory_tier22 (kmem's default without HMAT data), no HMAT."""
    t = Tree("optane-kmem")
    t.masks("0-3", "0-3", "0-1", "0-3", "0-1")
    s0 = list(range(0, 24)) + list(range(48, 72))
    s1 = list(range(24, 48)) + list(range(72, 96))
    t.node(0, s0, 195853104, 151220476, [10, 21, 17, 28])
    t.node(1, s1, 198140392, 180331920, [21, 10, 28, 17])
    t.node(2, [], 759169024, 759003112, [17, 28, 10, 28])
    t.node(3, [], 759169024, 759118420, [28, 17, 28, 10])
    t.tiers({4: "0-1", 22: "2-3"})
    nd = "devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0012:00/ndbus0"
    t.dax("dax0.0", f"{nd}/region0/dax0.0", 2)
    t.dax("dax1.0", f"{nd}/region1/dax1.0", 3)
    t.write(f"sys/{nd}/region0/numa_node", "0")
    t.write(f"sys/{nd}/region1/numa_node", "1")


def xeon_max_flat_snc4() -> None:
    """2-socket Xeon Max 9480 (56 cores/socket, HT) in flat mode with SNC4: nodes 0-7
    are DDR5 quadrants with CPUs (128 GB each), nodes 8-15 the CPU-less HBM2e
    quadrants (16 GB each). SLIT makes local HBM look farther (13) than local DDR (10);
    HMAT rates each HBM quadrant at ~2.7x the DDR quadrant's bandwidth, with a
    slightly higher latency. All nodes sit in memory_tier4 (boot memory)."""
    t = Tree("xeon-max-flat-snc4")
    t.masks("0-15", "0-15", "0-7", "0-15", "0-15")

    def dist(a: int, b: int) -> int:
        if a == b:
            return 10
        sa, sb = (a % 8) // 4, (b % 8) // 4
        hbm_a, hbm_b = a >= 8, b >= 8
        if sa == sb:
            if not hbm_a and not hbm_b:
                return 12
            if hbm_a != hbm_b:
                return 13 if a % 4 == b % 4 else 14
            return 14
        if not hbm_a and not hbm_b:
            return 21
        return 23

    for n in range(16):
        sock, quad = (n % 8) // 4, n % 4
        row = [dist(n, m) for m in range(16)]
        if n < 8:
            base = sock * 56 + quad * 14
            cpus = list(range(base, base + 14)) + list(range(112 + base, 112 + base + 14))
            total = 130384328 if n == 0 else 131626304
            t.node(n, cpus, total, total - 2097152 - 1000 * n, row)
            t.hmat(n, [n], 76800, 76800, 115, 115)
        else:
            t.node(n, [], 16252928, 16121344 - 512 * n, row)
            t.hmat(n, [n - 8], 204800, 204800, 130, 130)
    t.tiers({4: "0-15"})


def cxl_expander() -> None:
    """2-socket Sapphire Rapids with a 128 GB CXL Type-3 memory expander behind socket 0,
    onlined from a CXL region (ACPI0017 root, decoder, region, dax_region) by kmem:
    CPU-less node 2 in memory_tier22, no HMAT/CDAT performance data exposed."""
    t = Tree("cxl-expander")
    t.masks("0-2", "0-2", "0-1", "0-2", "0-1")
    s0 = list(range(0, 32)) + list(range(64, 96))
    s1 = list(range(32, 64)) + list(range(96, 128))
    t.node(0, s0, 262414476, 240113220, [10, 21, 14])
    t.node(1, s1, 264222172, 255106044, [21, 10, 24])
    t.node(2, [], 132120576, 132118016, [14, 24, 10])
    t.tiers({4: "0-1", 22: "2"})
    cxl = "devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0"
    t.dax("dax0.0", cxl, 2)
    t.write("sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/mode", "ram")


def grace_hopper() -> None:
    """GH200: Grace (72 Neoverse V2 cores) with 480 GB LPDDR5X as node 0, the H100's
    96 GB HBM3 onlined by the NVIDIA driver as CPU-less node 1 (coherent over
    NVLink-C2C). Nodes 2-8 are possible (reserved for MIG partitions) but offline.
    The driver reports the GPU's node in /proc/driver/nvidia/gpus/<bus>/numa_status."""
    t = Tree("grace-hopper")
    t.masks("0-1", "0-8", "0", "0-1", "0")
    t.node(0, list(range(72)), 490717184, 470123648, [10, 80])
    t.node(1, [], 99857408, 99701760, [80, 10])
    t.tiers({4: "0-1"})
    gpu = "proc/driver/nvidia/gpus/0009:01:00.0"
    t.write(f"{gpu}/numa_status", "Node: 1\nStatus: online")
    t.write(f"{gpu}/information", "Model: \t\t NVIDIA GH200 480GB\nBus Location: \t 0009:01:00.0")


def malformed() -> None:
    """Broken files everywhere: garbage meminfo and distance on node 0, garbage HMAT
    values and a dangling dax link on CPU-less node 1, a garbage cpulist on node 2,
    unreadable has_memory, and a malformed memory tier nodelist. Discovery must
    degrade each fact to unknown, not crash."""
    t = Tree("malformed")
    t.masks("0-2", "0-3", "0,2", "zzz", "0")
    d = f"{NODE}/node0"
    t.write(f"{d}/cpulist", "0-3")
    t.write(f"{d}/meminfo", "Node 0 MemTotal:  lots kB\nNode 0 MemFree: -5 kB")
    t.write(f"{d}/distance", "10 banana 20")
    d = f"{NODE}/node1"
    t.write(f"{d}/cpulist", "")
    t.write(f"{d}/meminfo", meminfo(1, 8388608, 8000000))
    t.write(f"{d}/distance", "20 10 20 30 40")  # more entries than online nodes
    t.write(f"{d}/access0/initiators/read_bandwidth", "fast")
    t.write(f"{d}/access0/initiators/read_latency", "-3")
    t.write(f"{d}/access0/initiators/write_bandwidth", "")
    t.link("sys/bus/dax/devices/dax0.0", "../../../devices/nowhere/dax0.0")
    d = f"{NODE}/node2"
    t.write(f"{d}/cpulist", "4-x")
    t.write(f"{d}/meminfo", meminfo(2, 4194304, 4000000))
    t.write(f"{d}/distance", "20 20 10")
    t.tiers({4: "0,2", 22: "1-"})


# ---------------------------------------------------------------------------
# Recording the live machine
# ---------------------------------------------------------------------------

LIVE_FILES = [
    f"{NODE}/online",
    f"{NODE}/possible",
    f"{NODE}/has_cpu",
    f"{NODE}/has_memory",
    f"{NODE}/has_normal_memory",
    f"{NODE}/has_generic_initiator",
]
NODE_FILES = ["cpulist", "cpumap", "distance", "meminfo"]
DAX = "sys/bus/dax"
NVIDIA = "proc/driver/nvidia/gpus"
# Read only by a kernel without CONFIG_NUMA (no node folder): one node.
NO_NUMA_FILES = ["proc/meminfo", "sys/devices/system/cpu/online"]


class Recorder:
    """Copies what src/tiers.c reads under an fsroot from src into a Tree,
    files as text and links as links, skipping what cannot be read (as
    discovery degrades it to unknown). Keep it in step with src/tiers.c:
    tests/integration/test_make_trees.py records every golden tree and compares."""

    def __init__(self, src: Path, tree: Tree) -> None:
        self.src, self.tree = src, tree

    def file(self, rel: str) -> None:
        try:
            text = (self.src / rel).read_text(errors="replace")
        except OSError:  # absent, a folder, or refused by the kernel
            return
        self.tree.write(rel, text)

    def link(self, rel: str) -> str | None:
        p = self.src / rel
        if not p.is_symlink():
            return None
        target = os.readlink(p)
        self.tree.link(rel, target)
        return target

    def files_in(self, rel: str) -> None:
        """The plain files of a folder, its links as links."""
        folder = self.src / rel
        for f in sorted(folder.iterdir()) if folder.is_dir() else []:
            if f.is_symlink():
                self.link(f"{rel}/{f.name}")
            elif f.is_file():
                self.file(f"{rel}/{f.name}")

    def nodes(self) -> None:
        for rel in LIVE_FILES:
            self.file(rel)
        for node in sorted((self.src / NODE).glob("node[0-9]*")):
            d = f"{NODE}/{node.name}"
            for f in NODE_FILES:
                self.file(f"{d}/{f}")
            # HMAT: the ratings and the initiator links of each access class
            for acc in ("access0", "access1"):
                self.files_in(f"{d}/{acc}/initiators")
            for index in sorted((node / "memory_side_cache").glob("index[0-9]*")):
                self.files_in(f"{d}/memory_side_cache/{index.name}")

    def tiering(self) -> None:
        for tier in sorted((self.src / TIERING).glob("memory_tier*")):
            self.file(f"{TIERING}/{tier.name}/nodelist")

    def dax(self) -> None:
        """Each device's link (its provenance is in the path), its
        target_node at the link's end, and kmem's link when it onlined it."""
        for dev in sorted((self.src / DAX / "devices").glob("*")):
            target = self.link(f"{DAX}/devices/{dev.name}")
            if target is None:
                continue
            self.link(f"{DAX}/drivers/kmem/{dev.name}")
            real = (dev.parent / target).resolve()
            try:
                rel = real.relative_to(self.src.resolve())
            except ValueError:  # points outside the tree: left dangling
                continue
            self.file(f"{rel}/target_node")

    def nvidia(self) -> None:
        for gpu in sorted((self.src / NVIDIA).glob("*")):
            self.file(f"{NVIDIA}/{gpu.name}/numa_status")
            self.file(f"{NVIDIA}/{gpu.name}/information")

    def run(self) -> None:
        if not (self.src / NODE).is_dir():
            for rel in NO_NUMA_FILES:
                self.file(rel)
        self.nodes()
        self.tiering()
        self.dax()
        self.nvidia()


def record(name: str, src: Path = Path("/"), out: Path = HERE) -> Path:
    """Records the machine under src (the live one by default) as out/name:
    only what discovery reads (node0 alone has hundreds of memoryN links
    that are not needed). Returns the tree's folder."""
    tree = Tree(name, out)
    Recorder(src, tree).run()
    return tree.root


MACHINES = {
    "optane-kmem": optane_kmem,
    "xeon-max-flat-snc4": xeon_max_flat_snc4,
    "cxl-expander": cxl_expander,
    "grace-hopper": grace_hopper,
    "malformed": malformed,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="NAME", help="record this machine's /sys as NAME")
    ap.add_argument(
        "--from", dest="src", metavar="ROOT", default="/", help="record the tree under ROOT"
    )
    ap.add_argument(
        "--out", metavar="DIR", default=str(HERE), help="record into DIR/NAME (tests/golden)"
    )
    ap.add_argument("machines", nargs="*", help="constructed machines to rebuild (default: all)")
    args = ap.parse_args()
    if args.record:
        print(record(args.record, Path(args.src), Path(args.out)))
        return 0
    for name in args.machines or MACHINES:
        if name not in MACHINES:
            sys.stderr.write(f"unknown machine {name}; known: {', '.join(MACHINES)}\n")
            return 2
        MACHINES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
