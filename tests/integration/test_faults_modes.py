# SPDX-License-Identifier: BSD-3-Clause
"""Faults injected into whole `hetmem run`s, in every mode that tiers memory
(issue 19): the storage tier fills up or fails while the program runs, and
the program itself is killed. Whatever happens, the run ends (never a hang),
says what went wrong in one line, passes the program's fate on as a shell
would, and leaves nothing behind.

The storage tier is a small ext4 image loop-mounted in a private mount
namespace (`unshare -m`) around hetmem, so the mount goes away with the run
whatever the outcome. A failing tier is made real with FS_IOC_SHUTDOWN: every
later read and write of the filesystem fails with EIO, as on a device that
went away (device-mapper's error target is not in this kernel)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults_sigkill import PLACEMENT, _cgroups, _our_swaps

from conftest import CBUILD, needs_pager

TARGET = CBUILD / "hm_full_target"

pytestmark = [
    needs_pager,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("unshare"),
        reason="needs root, mkfs.ext4 and unshare (a loop-mounted filesystem)",
    ),
]

TIERED = ["cache", "flat", "hybrid"]

# Fills 64 MiB (4x the budget: most of it is written back to the tier), shuts
# the tier's filesystem down, then reads the start back: the pager must read
# it from the failed tier. A run that printed "survived" read zeros or hung.
SHUTDOWN_THEN_READ = """
import fcntl, os, struct, sys
buf = bytearray(64 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1 + (i >> 12) % 251
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.ioctl(fd, 0x8004587D, struct.pack("I", 2))  # FS_IOC_SHUTDOWN, NOLOGFLUSH
print("tier shut down", flush=True)
total = sum(buf[i] for i in range(0, 8 << 20, 4096))
print("survived", total, flush=True)
"""


def _tier_image(tmp_path: Path, size: str) -> tuple[Path, Path]:
    img, mnt = tmp_path / "tier.img", tmp_path / "tier"
    subprocess.run(["truncate", "-s", size, str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    mnt.mkdir()
    return img, mnt


def _mode_args(mode: str, tmp_path: Path) -> list[str]:
    args = ["--mode", mode, "--fast-budget", "16M"]
    if mode in ("flat", "hybrid"):
        # no site: every large allocation is unmatched and goes to the
        # placement's slowest tier, the storage tier, through the pager
        placement = tmp_path / "p.toml"
        placement.write_text(PLACEMENT)
        args += ["--placement", str(placement)]
    return args


def _run_on_tier(
    tmp_path: Path, size: str, hetmem_args: list[str], command: list[str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """hetmem run HETMEM_ARGS --storage TIER -- COMMAND with TIER a fresh
    ext4 of SIZE mounted for this run alone."""
    img, mnt = _tier_image(tmp_path, size)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    if "HETMEM_LIBDIR" in os.environ:  # a developer's build tree
        env["HETMEM_LIBDIR"] = os.environ["HETMEM_LIBDIR"]
    env.update(FULL_IMG=str(img), FULL_MNT=str(mnt))
    script = 'mount -o loop "$FULL_IMG" "$FULL_MNT" && exec "$@"'
    run = [sys.executable, "-m", "hetmem", "run", *hetmem_args, "--storage", str(mnt), "--",
           *command]  # fmt: skip
    try:
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *run],
            env=env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    finally:
        img.unlink()


def _hetmem_lines(stderr: str) -> list[str]:
    """hetmem's lines, less the warning that the placement (made for no
    program in particular) names another build."""
    return [ln for ln in stderr.splitlines()
            if ln.startswith("hetmem") and "build-id differs" not in ln]  # fmt: skip


@pytest.mark.skipif(not TARGET.exists(), reason="hm_full_target not built")
@pytest.mark.parametrize("mode", TIERED)
@pytest.mark.parametrize("policy", ["error", "fallback"])
def test_tier_filling_up_mid_run(tmp_path: Path, mode: str, policy: str) -> None:
    """200 MiB asked in 8 MiB blocks of a 64 MiB tier: the first blocks fit,
    the later ones meet a full tier. error: they fail (the program sees NULL
    and ENOMEM and goes on); fallback: they come from DRAM, counted. Every
    byte the program was given reads back; the end-of-run note says which."""
    stats = tmp_path / "run.json"
    args = [*_mode_args(mode, tmp_path), "--storage-full", policy, "--stats", str(stats)]
    proc = _run_on_tier(tmp_path, "64M", args, [str(TARGET), "200", "8"])
    assert proc.returncode == 0, proc.stderr
    counts = {k: int(v) for k, v in (w.split("=") for w in proc.stdout.split())}
    assert counts["bad"] == 0 and counts["served"] + counts["refused"] == 25
    full = json.loads(stats.read_text())["storage_full"]
    assert full["policy"] == policy
    if policy == "error":
        assert counts["refused"] >= 10 and counts["enomem"] == counts["refused"]
        assert full["refusals"] == counts["refused"]
    else:
        assert counts["served"] == 25 and full["fallbacks"] >= 10
    # counted once, as what it was: not also as "no tier could serve it"
    assert json.loads(stats.read_text())["interposer"]["fallbacks"] == full["fallbacks"]
    lines = _hetmem_lines(proc.stderr)
    if mode in ("flat", "hybrid"):  # what this site-less placement does, said as usual
        unmatched = [ln for ln in lines if "matched no site of the placement" in ln]
        assert len(unmatched) == 1, proc.stderr
        lines.remove(unmatched[0])
    assert len(lines) == 2, proc.stderr  # the interposer's line, the run's note
    assert "is full" in lines[0] and lines[1].startswith("hetmem run: note: ")
    assert ("failed" if policy == "error" else "beyond the fast budget") in lines[1]


@pytest.mark.parametrize("mode", TIERED)
def test_tier_failing_mid_run_ends_the_program_in_one_line(tmp_path: Path, mode: str) -> None:
    """A tier that fails under the program (EIO) ends it with one line that
    names the tier and the error, and SIGBUS (exit 135, as a shell gives for
    a failing memory-mapped file): never zeros read as data, never a hang."""
    mnt = tmp_path / "tier"
    command = [sys.executable, "-c", SHUTDOWN_THEN_READ, str(mnt)]
    proc = _run_on_tier(tmp_path, "256M", _mode_args(mode, tmp_path), command, timeout=120)
    assert "survived" not in proc.stdout, proc.stdout
    assert proc.returncode == 128 + signal.SIGBUS, proc.stderr
    lines = _hetmem_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hetmem: I/O error on the storage tier {mnt}")
    assert "Input/output error" in lines[0]
    # Usually the read of the start is what fails. The fill's write-back can
    # still be under way when the tier goes down, and then it fails first and
    # may end the program before its print: the same outcome, said as such.
    if "tier shut down" not in proc.stdout:
        assert "cannot write back" in lines[0], proc.stderr


@pytest.mark.parametrize("mode", [*TIERED, "swap"])
def test_program_killed_by_sigkill_leaves_nothing(tmp_path: Path, mode: str) -> None:
    """The program (not hetmem) dies of SIGKILL in the middle of its work:
    hetmem exits 137 as a shell would, and removes what the run made (swap
    area, cgroup, backing files)."""
    tier = tmp_path / "tier"
    tier.mkdir()
    args = _mode_args(mode, tmp_path) if mode != "swap" else [
        "--mode", "swap", "--fast-budget", "16M", "--swap-size", "64M"]  # fmt: skip
    work = f"{TARGET} 64 8 >/dev/null; kill -KILL $$" if TARGET.exists() else "kill -KILL $$"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", "run", *args, "--storage", str(tier), "--",
         "sh", "-c", work],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert "Traceback" not in err
    assert list(tier.iterdir()) == []
    assert _our_swaps(tier) == []
    assert _cgroups(proc.pid) == []
