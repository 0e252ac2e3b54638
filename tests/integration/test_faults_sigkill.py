# SPDX-License-Identifier: BSD-3-Clause
"""SIGKILL of hetmem itself (issue 19, finding 6): within a few seconds
nothing of the run remains: not the command (PR_SET_PDEATHSIG), nor its
swap area, its cgroup, its temporary files or its backing files (the
clean-up supervisor that outlives hetmem)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import needs_pager

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="swap mode needs root")
GONE_WITHIN = 30.0  # a hang guard: the clean-up takes well under a second here

# a placement with the two tiers of this machine and no site: every large
# allocation is unmatched and goes to the storage tier through the pager
PLACEMENT = """kind = "hetmem-placement"
schema_version = 1
binary = 0
solver = "ilp-highs"
profiles = ["a.prof"]

[[tiers]]
index = 0
name = "node0"
kind = "dram"
numa_node = 0
capacity_bytes = 1048576
bandwidth_gbs = 80.0
latency_ns = 90.0

[[tiers]]
index = 1
name = "storage"
kind = "storage"
numa_node = -1
capacity_bytes = 0
bandwidth_gbs = 2.0
latency_ns = 100000.0

[[modules]]
index = 0
path = "/bin/sh"
build_id = "867ab73e3a680fe6aaa5389ebeb62516237ec093"
"""

MODES = {
    "dram": (["--mode", "dram"], []),
    "cache": (["--mode", "cache", "--fast-budget", "64M"], [needs_pager]),
    "swap": (["--mode", "swap", "--fast-budget", "64M", "--swap-size", "64M"], [needs_root]),
    "flat": (["--mode", "flat", "--fast-budget", "64M"], [needs_pager]),
    "hybrid": (["--mode", "hybrid", "--fast-budget", "64M"], [needs_pager]),
}


def _alive(pid: int) -> bool:
    """True while pid is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _our_swaps(under: Path) -> list[str]:
    with open("/proc/swaps") as f:
        names = [ln.split()[0] for ln in f.readlines()[1:]]
    return [n for n in names if n.startswith(str(under))]


def _cgroups(pid: int) -> list[str]:
    found = []
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        for dirpath, dirnames, _ in os.walk(root):
            mine = [d for d in dirnames if d.startswith(f"hetmem-run-{pid}")]
            found += [os.path.join(dirpath, d) for d in mine]
            if dirpath.count("/") > 8:
                dirnames.clear()
    return found


def _leftovers(hetmem_pid: int, app: int, tier: Path, tmp: Path) -> list[str]:
    left = [f"the command (pid {app})"] if _alive(app) else []
    left += _our_swaps(tier) + _cgroups(hetmem_pid)
    left += [str(p) for p in (*tier.iterdir(), *tmp.iterdir())]
    return left


@pytest.fixture
def run_dirs(tmp_path: Path) -> Iterator[tuple[dict[str, Path], list[int]]]:
    d = {"tier": tmp_path / "tier", "tmp": tmp_path / "tmp", "pid": tmp_path / "app.pid"}
    d["tier"].mkdir()
    d["tmp"].mkdir()
    d["placement"] = tmp_path / "p.toml"
    d["placement"].write_text(PLACEMENT)
    runs: list[int] = []
    yield d, runs
    # whatever the outcome, nothing of the run stays
    if d["pid"].exists():
        app = int(d["pid"].read_text() or 0)
        if app and _alive(app):
            with open(f"/proc/{app}/cmdline", "rb") as f:
                if b"sleep" in f.read():
                    os.kill(app, signal.SIGKILL)
    for name in _our_swaps(d["tier"]):
        subprocess.run(["swapoff", name], capture_output=True)
    for pid in runs:
        for cg in _cgroups(pid):
            for _ in range(100):
                try:
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.mark.parametrize("mode", [pytest.param(m, marks=MODES[m][1]) for m in MODES])
def test_sigkill_of_hetmem_leaves_nothing(
    mode: str, run_dirs: tuple[dict[str, Path], list[int]]
) -> None:
    dirs, runs = run_dirs
    opts = list(MODES[mode][0])
    if mode in ("flat", "hybrid"):
        opts += ["--placement", str(dirs["placement"])]
    # the command says its pid (the exec'd sleep keeps it)
    app_cmd = f"echo $$ > {dirs['pid']}.tmp && mv {dirs['pid']}.tmp {dirs['pid']} && exec sleep 600"
    # stderr to a file: a surviving command must not hold the test's pipe
    err = dirs["pid"].with_name("stderr")
    with open(err, "w") as errf:
        hetmem = subprocess.Popen(
            [sys.executable, "-m", "hetmem", "run", *opts, "--storage", str(dirs["tier"]),
             "--", "sh", "-c", app_cmd],
            stdout=subprocess.DEVNULL, stderr=errf, env=dict(os.environ, TMPDIR=str(dirs["tmp"])),
        )  # fmt: skip
    runs.append(hetmem.pid)
    try:
        deadline = time.monotonic() + 60
        while not dirs["pid"].exists():
            assert hetmem.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        app = int(dirs["pid"].read_text())
        if mode == "swap":
            assert _our_swaps(dirs["tier"]) and _cgroups(hetmem.pid)
        if mode != "dram":
            assert list(dirs["tmp"].iterdir()) or mode == "swap"
        hetmem.kill()
        hetmem.wait()
        deadline = time.monotonic() + GONE_WITHIN
        while _leftovers(hetmem.pid, app, dirs["tier"], dirs["tmp"]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not _leftovers(hetmem.pid, app, dirs["tier"], dirs["tmp"]), err.read_text()
    finally:
        if hetmem.poll() is None:
            hetmem.kill()
            hetmem.wait()
