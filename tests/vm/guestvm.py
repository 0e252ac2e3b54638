# SPDX-License-Identifier: BSD-3-Clause
"""Boots a QEMU guest with a given NUMA shape and runs one command in it.

The guest runs Debian's own kernel (linux-image-amd64) on the host's root
filesystem, shared read-only over 9p, so the guest runs this checkout's
build and .venv without copying anything. A tiny initramfs (busybox, the
9p and overlay modules) mounts it under an overlay whose writes stay in
the guest's memory (every host path, a checkout under /tmp too, is where
it is on the host), chroots and runs the command; its output, exit
status and any files it writes under $HM_VM_OUT come back through a
second, writable 9p share.

TCG by default: a guest boots to its command in about 4 s here. KVM
(nested, in a Firecracker VM) does not help: a bzImage hangs right after
the bootloader (nothing after "Probing EDD", even with earlyprintk); the
uncompressed vmlinux booted through its PVH entry gets further, but took
50 s to reach the kernel's memory set-up and then stopped on a KVM
internal error (emulation failure on a cmpxchg16b). HETMEM_VM_ACCEL=kvm
asks for KVM anyway.

Nothing here is hetmem's own code: this is the test bench that lets
hetmem's NUMA paths meet a kernel with CPU-less memory nodes and HMAT.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# what the initramfs loads (Debian's kernel builds them as modules); their
# dependencies come from modules.dep
_MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay"]

_INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /mnt /lower /rw
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.list); do
  insmod "/mods/$m" || echo "hm-vm: insmod $m failed"
done
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o ro,cache=loose,$o hostroot /lower || { echo "hm-vm: no host root"; poweroff -f; }
# the host's tree, every path as on the host (a checkout under /tmp too),
# writable with the writes kept in the guest's memory
mount -t tmpfs rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work root /mnt \
  || { echo "hm-vm: no overlay"; poweroff -f; }
mount -t proc proc /mnt/proc
mount -t sysfs sys /mnt/sys
mount -t devtmpfs dev /mnt/dev
mkdir -p /mnt/dev/shm /mnt/hm-out
mount -t tmpfs -o mode=1777 shm /mnt/dev/shm
mount -t 9p -o $o,cache=none out /mnt/hm-out
mount -t debugfs none /mnt/sys/kernel/debug 2>/dev/null
echo "hm-vm: up"
chroot /mnt /bin/sh -c '. /hm-out/env.sh; cd "$HM_VM_CWD"; /bin/sh /hm-out/cmd.sh' \
  >/mnt/hm-out/log 2>&1
echo $? > /mnt/hm-out/rc
sync
poweroff -f
"""


@dataclass
class Shape:
    """A guest's memory shape: nodes with (MiB, cpus), HMAT entries."""

    name: str
    nodes: list[tuple[int, str]]  # (size MiB, "0-1" or "" for CPU-less)
    # (initiator, target, latency ns, bandwidth MB/s)
    hmat: list[tuple[int, int, int, int]] = field(default_factory=list)
    cpus: int = 2
    doc: str = ""
    # an emulated NVDIMM (MiB, node) on a CPU-less node with no memory at
    # boot: the guest onlines it as system RAM through dax kmem (ndctl,
    # daxctl), the Optane KMEM-DAX path, into a lower memory tier
    nvdimm: tuple[int, int] | None = None
    # MiB of a virtio disk (/dev/vda, unformatted): a storage tier with
    # O_DIRECT for the pager (the overlay root has none)
    disk: int = 0
    # MiB of an emulated CXL type-3 memory device behind a CXL host bridge
    # and root port, with a 4 GiB fixed memory window: the guest makes a
    # region of it (cxl-cli), a devdax namespace (ndctl) and system RAM
    # (daxctl, kmem) on a node of its own. QEMU 7.2's device is persistent
    # memory only (volatile came in 8.0), so the region is a pmem one, and
    # its memory is emulated as MMIO: discovery works, but a process bound
    # there hung the guest (TCG), so nothing runs on that node.
    cxl_type3: int = 0

    def qemu_args(self) -> list[str]:
        mem = sum(n[0] for n in self.nodes)
        machine = "q35" + (",hmat=on" if self.hmat else "") + (",nvdimm=on" if self.nvdimm else "")
        machine += ",cxl=on" if self.cxl_type3 else ""
        args = ["-machine", machine, "-smp", str(self.cpus), "-m", f"{mem}M"]
        if self.nvdimm:
            size, node = self.nvdimm
            args[-1] += f",slots=2,maxmem={mem + size + 1024}M"
            args += ["-object", f"memory-backend-ram,id=nv{node},size={size}M"]
            args += ["-device", f"nvdimm,memdev=nv{node},id=nvdimm{node},node={node}"]
        for i, (mib, cpus) in enumerate(self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{i},size={mib}M"]
            spec = f"node,nodeid={i},memdev=m{i}"
            if cpus:
                spec += "".join(f",cpus={c}" for c in cpus.split(";"))
            elif self.hmat:
                spec += ",initiator=0"
            args += ["-numa", spec]
        if self.nvdimm:
            args += ["-numa", f"node,nodeid={self.nvdimm[1]},initiator=0"]
        for ini, tgt, lat, bw in self.hmat:
            base = f"hmat-lb,initiator={ini},target={tgt},hierarchy=memory"
            args += ["-numa", f"{base},data-type=access-latency,latency={lat}"]
            args += ["-numa", f"{base},data-type=access-bandwidth,bandwidth={bw}M"]
        return args

    def device_args(self) -> list[str]:
        """Devices that must come after the 9p shares: PCI devices without a
        bus of their own go on the last one made, and a CXL host bridge
        takes only CXL ports."""
        if not self.cxl_type3:
            return []
        return [
            "-object", f"memory-backend-ram,id=cxlmem,size={self.cxl_type3}M",
            "-object", "memory-backend-ram,id=cxllsa,size=64M",
            "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
            "-device", "cxl-rp,port=0,bus=cxl.1,id=cxlrp0,chassis=0,slot=2",
            "-device", "cxl-type3,bus=cxlrp0,memdev=cxlmem,lsa=cxllsa,id=cxl-pmem0",
            "-M", "cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G",
        ]  # fmt: skip


SHAPES = {
    # seed 003's KNL in flat mode: MCDRAM is a CPU-less node, rated faster
    "knl-flat": Shape(
        "knl-flat",
        nodes=[(1536, "0-1"), (512, "")],
        hmat=[(0, 0, 120, 90000), (0, 1, 150, 400000)],
        doc="node 0 CPUs+DDR, node 1 CPU-less MCDRAM-like (HMAT: higher bandwidth)",
    ),
    # KNL in SNC-2 flat mode: two MCDRAM nodes (hbw_set_policy's BIND_ALL
    # and INTERLEAVE span both, BIND takes one)
    "knl-snc": Shape(
        "knl-snc",
        nodes=[(1024, "0-1"), (256, ""), (256, "")],
        hmat=[(0, 0, 120, 90000), (0, 1, 150, 400000), (0, 2, 150, 400000)],
        doc="node 0 CPUs+DDR, nodes 1 and 2 CPU-less MCDRAM-like (HMAT: higher bandwidth)",
    ),
    # Optane in KMEM-DAX mode / a CXL expander: a CPU-less node rated slower
    "cxl": Shape(
        "cxl",
        nodes=[(1024, "0-1"), (1024, "")],
        hmat=[(0, 0, 100, 80000), (0, 1, 300, 20000)],
        doc="node 0 CPUs+DRAM, node 1 CPU-less CXL-like (HMAT: slower, farther)",
    ),
    # Optane PMem in KMEM-DAX mode: an NVDIMM onlined as a CPU-less node
    "optane-kmem": Shape(
        "optane-kmem",
        nodes=[(768, "0-1")],
        hmat=[(0, 0, 100, 80000), (0, 1, 350, 10000)],
        nvdimm=(1024, 1),
        doc="node 0 CPUs+DRAM, node 1 an NVDIMM onlined by dax kmem (a lower memory tier)",
    ),
    # a CXL memory expander for real: QEMU's emulated type-3 device, onlined
    # as system RAM (no HMAT: the kernel's CXL path names its node)
    "cxl-type3": Shape(
        "cxl-type3",
        nodes=[(1024, "0-1")],
        cxl_type3=512,
        doc="node 0 CPUs+DRAM, node 1 an emulated CXL type-3 device onlined through kmem",
    ),
    "two-socket": Shape(
        "two-socket",
        nodes=[(1024, "0"), (1024, "1")],
        doc="two nodes with one CPU each",
        disk=512,
    ),
}


def kernel() -> tuple[Path, Path]:
    """Debian's kernel image and its module tree (the newest installed)."""
    imgs = sorted(Path("/boot").glob("vmlinuz-*"))
    for img in reversed(imgs):
        mods = Path("/lib/modules") / img.name.removeprefix("vmlinuz-")
        if (mods / "modules.dep").exists():
            return img, mods
    raise FileNotFoundError("no /boot/vmlinuz-* with modules (apt install linux-image-amd64)")


def missing() -> str:
    """Why no guest can boot here, or "" when one can."""
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86_64 is not installed (apt install qemu-system-x86)"
    if not Path("/bin/busybox").exists():
        return "busybox is not installed (apt install busybox-static)"
    try:
        kernel()
    except FileNotFoundError as e:
        return str(e)
    return ""


def _module_order(mods: Path, wanted: list[str]) -> list[Path]:
    """`wanted` and what they need, each after its dependencies."""
    dep: dict[str, list[str]] = {}
    for line in (mods / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        dep[path] = needs.split()
    by_name = {Path(p).name.split(".ko")[0]: p for p in dep}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for d in dep.get(path, []):
            visit(d)
        order.append(path)

    for name in wanted:
        if name in by_name:  # absent: built into this kernel
            visit(by_name[name])
    return [mods / p for p in order]


def build_initramfs(dest: Path) -> Path:
    """The initramfs (newc cpio): busybox, the modules, the init."""
    img, mods = kernel()
    out = dest / f"initramfs-{img.name}.cpio"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        root = Path(tmp)
        for d in ("bin", "mods", "proc", "sys", "dev", "mnt"):
            (root / d).mkdir()
        shutil.copy("/bin/busybox", root / "bin" / "busybox")
        names = []
        for src in _module_order(mods, _MODULES):
            shutil.copy(src, root / "mods" / src.name)
            names.append(src.name)
        (root / "modules.list").write_text("\n".join(names) + "\n")
        (root / "init").write_text(_INIT)
        (root / "init").chmod(0o755)
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        part = out.with_suffix(".part")
        with open(part, "wb") as f:
            subprocess.run(
                ["cpio", "-o", "-H", "newc", "--quiet"],
                input="\n".join(files).encode(),
                cwd=root,
                stdout=f,
                check=True,
            )
        part.rename(out)
    return out


@dataclass
class Result:
    rc: int | None  # None: the guest never ran the command to its end
    log: str  # what the command printed
    console: str  # the guest's console
    out: Path  # files the command left under $HM_VM_OUT
    seconds: float


def _accel(kvm: bool) -> list[str]:
    return ["-accel", "kvm", "-cpu", "host"] if kvm else ["-accel", "tcg", "-cpu", "max"]


# A guest that has not reached its init ("hm-vm: up") after this much
# QEMU CPU time, or this much wall time, hung at boot: alone here a boot
# takes 6 s (6.4 CPU-s). A fresh CI run once waited its whole 900 s on a
# guest that never got past "Booting from ROM" (the console was quiet, so
# where it hung was not recorded; now the kernel's log is kept). A hang at
# boot is the emulator's, not hetmem's: that guest is booted again.
BOOT_CPU_S = 90.0
BOOT_WALL_S = 300.0
BOOT_TRIES = 3
_UP = "hm-vm: up"


def _cpu_seconds(pid: int) -> float:
    """User and system time of process `pid` (all its threads), or 0."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Console:
    """QEMU's console, read by a thread as it comes, so that the watchdog
    can see whether the guest reached its init."""

    def __init__(self, stream: IO[str]) -> None:
        self.parts: list[str] = []
        self.up = threading.Event()
        self._t = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._t.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.parts.append(line)
            if _UP in line:
                self.up.set()

    def text(self) -> str:
        self._t.join(timeout=10)
        return "".join(self.parts)


def _verdict(
    p: subprocess.Popen, con: _Console, t0: float, timeout: float, stop: threading.Event | None
) -> str | None:
    """Why QEMU must be stopped now, or None."""
    if stop is not None and stop.is_set():
        return "stopped: the test session ended"
    wall = time.monotonic() - t0
    if wall > timeout:
        return "timed out"
    if not con.up.is_set():
        cpu = _cpu_seconds(p.pid)
        if cpu > BOOT_CPU_S or wall > BOOT_WALL_S:
            return f"hung at boot: no '{_UP}' after {wall:.0f} s ({cpu:.0f} CPU-s)"
    return None


def _qemu(cmd: list[str], timeout: float, stop: threading.Event | None) -> tuple[str, bool]:
    """Runs QEMU to its end, `timeout`, `stop` (checked every second) or a
    hang at boot; returns its console, and whether it hung at boot."""
    t0 = time.monotonic()
    # nice 19: a guest booted beside other tests (tests/vm/test_vm.py) takes
    # the CPU they leave, not theirs: at nice 0 one took a core from a
    # profiler test whose short windows then saw its program off the CPU
    with subprocess.Popen(
        ["nice", "-n", "19", *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", stdin=subprocess.DEVNULL,
    ) as p:  # fmt: skip
        con = _Console(p.stdout)
        while True:
            try:
                p.wait(timeout=1.0)
                return con.text(), False
            except subprocess.TimeoutExpired:
                why = _verdict(p, con, t0, timeout, stop)
                if why:
                    p.kill()
                    p.wait()
                    return con.text() + f"\n[hm-vm: {why}]\n", why.startswith("hung")


def run(
    shape: Shape,
    script: str,
    out: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 600,
    kvm: bool | None = None,
    stop: threading.Event | None = None,
) -> Result:
    """Boots `shape`, runs `script` (sh) in the guest, returns its result."""
    out.mkdir(parents=True, exist_ok=True)
    # built afresh into this run's own directory (under a second): a shared
    # cache in /tmp could be another local user's
    initrd = build_initramfs(out)
    img, _ = kernel()
    envs = {"HM_VM_OUT": "/hm-out", "HM_VM_SHAPE": shape.name, **(env or {})}
    envs["HM_VM_CWD"] = cwd or os.getcwd()
    (out / "env.sh").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in envs.items()))
    (out / "cmd.sh").write_text(script)
    for stale in ("rc", "log"):
        (out / stale).unlink(missing_ok=True)
    if kvm is None:
        kvm = os.environ.get("HETMEM_VM_ACCEL", "tcg") == "kvm"
    cmd = ["qemu-system-x86_64", *_accel(kvm), *shape.qemu_args()]
    cmd += ["-kernel", str(img), "-initrd", str(initrd), "-nographic", "-no-reboot"]
    # cryptomgr.notests: Debian's kernel runs its crypto self-tests at boot,
    # and under TCG one of them once spun a vCPU for the whole 420 s boot
    # timeout (soft lockup in cryptomgr_test, guest knl-flat); hetmem's
    # checks use no kernel crypto
    cmd += ["-append", "console=ttyS0 panic=-1 rdinit=/init cryptomgr.notests"]
    share = "security_model=none"
    cmd += ["-virtfs", f"local,path=/,mount_tag=hostroot,{share},readonly=on,multidevs=remap"]
    cmd += ["-virtfs", f"local,path={out},mount_tag=out,{share},multidevs=remap"]
    if shape.disk:
        cmd += ["-drive", f"file={out / 'disk.img'},format=raw,if=virtio,cache=none"]
    cmd += shape.device_args()
    t0 = time.monotonic()
    console = ""
    for _ in range(BOOT_TRIES):
        if shape.disk:  # a fresh disk for each boot
            with open(out / "disk.img", "wb") as f:
                f.truncate(shape.disk << 20)  # sparse
        text, hung = _qemu(cmd, timeout - (time.monotonic() - t0), stop)
        console += text
        if not hung:
            break
    rc_file, log_file = out / "rc", out / "log"
    rc = int(rc_file.read_text()) if rc_file.exists() else None
    log = log_file.read_text(errors="replace") if log_file.exists() else ""
    return Result(rc, log, console, out, time.monotonic() - t0)
