# SPDX-License-Identifier: BSD-3-Clause
"""The machine a benchmark ran on, as the report shows it: CPU model and
cores, kernel, memory, the block device behind the storage tier, and the
hetmem version and commit. Recorded in the result folder's manifest when the
bench runs, so that a report built elsewhere still names the machine."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from hetmem import __version__, probe, sizes
from hetmem.errors import HetmemError
from hetmem.run import cache, checks

SYS_DEV_BLOCK = Path("/sys/dev/block")
UNKNOWN = "unknown"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def describe(storage: str | None) -> dict[str, Any]:
    """What the report prints about this machine; every field is there,
    "unknown" (or null for numbers) where it cannot be read."""
    models = [ln.split(":", 1)[-1].strip() for ln in cache.cpu_models()]
    return {
        "cpu_model": "; ".join(models) or platform.processor() or UNKNOWN,
        "cpus_online": os.cpu_count(),
        "cpus_allowed": probe.allowed_cpus(),
        "kernel": platform.release() or UNKNOWN,
        "arch": platform.machine() or UNKNOWN,
        "ram_bytes": sizes.machine_memory() or None,
        "storage_device": storage_device(storage or _default_storage()),
        "hetmem_version": __version__,
        "git_commit": git_commit(PACKAGE_DIR),
    }


def _default_storage() -> str:
    """Where cache and swap modes put their files when no --storage is given."""
    try:
        return str(checks.default_storage())
    except (OSError, HetmemError):
        return UNKNOWN


def storage_device(path: str) -> dict[str, Any]:
    """The block device that holds `path`: its name, model (sysfs
    device/model, else the driver's name), size and whether the kernel
    calls it rotational; name "none" for a file system on no block device
    (tmpfs, overlay, a network file system)."""
    node = _dev_node(path)
    if node is None:
        return {"path": path, "name": UNKNOWN, "model": UNKNOWN}
    if not node.exists():
        return {
            "path": path,
            "name": "none",
            "model": "no block device (tmpfs, overlay or network)",
        }
    disk = node.resolve()
    if (disk / "partition").exists():
        disk = disk.parent  # a partition's folder sits inside its disk's
    return {
        "path": path,
        "name": disk.name,
        "model": _device_model(disk),
        "size_bytes": _int(disk / "size", 512),
        "rotational": _int(disk / "queue" / "rotational", 1),
    }


def _dev_node(path: str) -> Path | None:
    """/sys/dev/block/MAJOR:MINOR of the device that holds `path` (which may
    not exist: tmpfs, overlay); None when `path` cannot be looked at."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    return SYS_DEV_BLOCK / f"{os.major(dev)}:{os.minor(dev)}"


def block_stat_file(path: str) -> Path | None:
    """The sysfs `stat` file of the block device (or partition) that holds
    `path`; None on a file system without one, or where sysfs has none."""
    node = _dev_node(path)
    if node is None or not (node / "stat").exists():
        return None
    return node / "stat"


def read_counters(stat: Path | None) -> tuple[int, int, int, int] | None:
    """(reads completed, reads merged into others, sectors read, milliseconds
    spent on reads) from a block device's sysfs stat file
    (Documentation/block/stat.rst); None when it cannot be read."""
    if stat is None:
        return None
    words = _read(stat).split()
    if len(words) < 4 or not all(w.isdigit() for w in words[:4]):
        return None
    return int(words[0]), int(words[1]), int(words[2]), int(words[3])


def read_shape(
    before: tuple[int, int, int, int] | None,
    after: tuple[int, int, int, int] | None,
    rate_bps: float,
) -> dict[str, Any] | None:
    """What the device saw of a run's reads, from its counters before and
    after: requests, reads merged into them, mean request size and service
    time, and the requests in flight that these imply at the run's read
    rate (Little's law: rate / size x time). None without reads."""
    if before is None or after is None:
        return None
    reads, merged, sectors, ticks = (a - b for a, b in zip(after, before, strict=True))
    if reads <= 0 or sectors <= 0:
        return None
    size = sectors * 512 / reads
    latency = ticks / reads / 1000
    return {"requests": reads, "merged": merged, "mean_bytes": round(size),
            "mean_latency_ms": round(latency * 1000, 3),
            "in_flight": round(rate_bps / size * latency, 1)}  # fmt: skip


def _device_model(disk: Path) -> str:
    text = _read(disk / "device" / "model")
    if text:
        return text
    driver = disk / "device" / "driver"
    if driver.exists():
        return f"no model in sysfs (driver {driver.resolve().name})"
    return UNKNOWN


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(path: Path, scale: int) -> int | None:
    text = _read(path)
    return int(text) * scale if text.isdigit() else None


def git_commit(where: Path) -> str:
    """The commit of the git checkout whose python/hetmem is `where`
    ("-dirty" appended when tracked files differ from it); for an installed
    package (even one in a virtual environment inside a checkout, which may
    be older than the checkout) the commit it was built from, as the build
    recorded it in build_info.json; "unknown" when neither is known."""
    top = _git(where, "rev-parse", "--show-toplevel")
    if not top or (Path(top) / "python" / "hetmem").resolve() != where.resolve():
        return built_commit(where)
    return _git(where, "describe", "--always", "--dirty", "--abbrev=12") or UNKNOWN


def built_commit(where: Path) -> str:
    """The commit in `where`/build_info.json (written by the CMake build,
    cmake/build_info.cmake), or "unknown"."""
    try:
        commit = json.loads((where / "build_info.json").read_text()).get("git_commit")
    except (OSError, ValueError, AttributeError):
        return UNKNOWN
    return commit if isinstance(commit, str) and commit else UNKNOWN


def _git(where: Path, *args: str) -> str:
    """git's one-line answer in `where`, "" when it fails."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def hugetlb_free(meminfo: str = "/proc/meminfo") -> tuple[int, int]:
    """(free hugetlb pages, their size in bytes) of the default pool."""
    free = size = 0
    try:
        text = Path(meminfo).read_text()
    except OSError:
        return 0, 0
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if key == "HugePages_Free" and words:
            free = int(words[0])
        elif key == "Hugepagesize" and words:
            size = int(words[0]) * 1024
    return free, size


def huge_pages_needed(block: int, depth: int, page: int) -> int:
    """Pages fio's --iomem=shmhuge takes for depth reads of block bytes (one
    buffer, rounded up to whole pages, and one more for its alignment)."""
    return -(-block * depth // page) + 1 if page > 0 else 0


def fio_huge_iomem(block: int, depth: int, meminfo: str = "/proc/meminfo") -> str | None:
    """fio's --iomem for reads like the probe's and the pager's, into huge
    pages: "shmhuge" where enough hugetlb pages are free for depth reads of
    block bytes, else None (fio's default, 4 KiB pages)."""
    free, page = hugetlb_free(meminfo)
    return "shmhuge" if page and free >= huge_pages_needed(block, depth, page) else None
