# SPDX-License-Identifier: BSD-3-Clause
"""Swap mode against another local user (issue 19, finding 1).

An attacker running as `nobody` loops over the storage directory: each
`.hetmem-swap-*` entry it can rename it moves away and replaces with a
symbolic link to a victim file (or, for a directory, to one of its own
holding such a link). Root's hetmem must never write the victim (mkswap's
header) nor activate it, and no swap area of the run may stay active.

- world-writable without the sticky bit: the run is refused, one line
  saying how to fix it (as is --stats into such a directory);
- sticky (1777), root's 0700, and a directory the attacker owns (where it
  can rename anything): the run works, the victim is untouched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_hetmem

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="swap mode and setuid need root")
pytestmark = needs_root

# The attacker: stdlib only, runs as nobody until the stop file appears
# (or 300 s pass: a guard, should the test die without stopping it).
ATTACKER = r"""
import os, sys, time
d, victim, trap, stop = sys.argv[1:5]
won = 0
end = time.monotonic() + 300
while not os.path.exists(stop) and time.monotonic() < end:
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    for name in names:
        p = os.path.join(d, name)
        if not name.startswith(".hetmem-swap-") or name.endswith(".moved") or os.path.islink(p):
            continue
        try:
            isdir = os.path.isdir(p)
            os.rename(p, p + ".moved")
            os.symlink(trap if isdir else victim, p)
            won += 1
        except OSError:
            pass
print(won, flush=True)
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _active_inodes() -> list[tuple[int, int, str]]:
    out = []
    with open("/proc/swaps") as f:
        for line in f.readlines()[1:]:
            name = line.split()[0].replace("\\040", " ")
            try:
                st = os.stat(name)
            except OSError:
                continue
            out.append((st.st_dev, st.st_ino, name))
    return out


def _swapoff_under(base: Path, victim: Path) -> None:
    vst = os.stat(victim) if victim.exists() else None
    for dev, ino, name in _active_inodes():
        if name.startswith(str(base)) or (vst and (dev, ino) == (vst.st_dev, vst.st_ino)):
            subprocess.run(["swapoff", name], capture_output=True)


@pytest.fixture
def arena() -> Iterator[dict[str, Path]]:
    """A root-owned 0755 base in /var/tmp (nobody must reach into it; swap
    files cannot live on tmpfs) with a victim file and the attacker's trap
    directory (its `swap` links to the victim)."""
    base = Path(tempfile.mkdtemp(prefix="hetmem-sec-", dir="/var/tmp"))
    base.chmod(0o755)
    victim = base / "victim"
    victim.write_bytes(b"V" * (4 << 20))
    victim.chmod(0o644)
    trap = base / "trap"
    trap.mkdir()
    os.symlink(victim, trap / "swap")
    os.chown(trap, NOBODY, NOBODY)
    try:
        yield {"base": base, "victim": victim, "trap": trap}
    finally:
        _swapoff_under(base, victim)
        shutil.rmtree(base, ignore_errors=True)


def _python_for_nobody() -> str:
    """A Python interpreter that nobody may run (a pyenv shim under /root
    is not one)."""
    for py in ("/usr/bin/python3", "/usr/local/bin/python3", os.path.realpath(sys.executable)):
        try:
            ok = subprocess.run(
                [py, "-c", "pass"], user=NOBODY, group=NOBODY, extra_groups=[], timeout=60
            )
        except OSError:
            continue
        if ok.returncode == 0:
            return py
    pytest.skip("no Python interpreter that nobody may run")


class Attacker:
    def __init__(self, d: Path, arena: dict[str, Path]) -> None:
        self.stop = arena["base"] / "stop"
        py = _python_for_nobody()
        self.proc = subprocess.Popen(
            [py, "-c", ATTACKER, str(d), str(arena["victim"]), str(arena["trap"]), str(self.stop)],
            stdout=subprocess.PIPE,
            text=True,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
        )

    def finish(self) -> int:
        self.stop.write_text("")
        try:
            out, _ = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return int(out.strip() or 0)


def _storage(arena: dict[str, Path], mode: int, owner: int = 0) -> Path:
    d = arena["base"] / f"storage-{mode:o}-{owner}"
    d.mkdir()
    os.chown(d, owner, owner)
    d.chmod(mode)
    return d


def _swap_run(storage: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    return run_hetmem(
        "run", "--mode", "swap", "--fast-budget", "32M", "--swap-size", "32M",
        "--storage", str(storage), "--", *cmd, timeout=120,
    )  # fmt: skip


def _assert_untouched(arena: dict[str, Path], before: str) -> None:
    victim = arena["victim"]
    assert not victim.is_symlink() and _sha(victim) == before, "the victim file was written"
    vst = os.stat(victim)
    active = _active_inodes()
    assert (vst.st_dev, vst.st_ino) not in [(d, i) for d, i, _ in active], "victim is swap"
    assert not [n for _, _, n in active if n.startswith(str(arena["base"]))], active


def test_world_writable_storage_without_sticky_bit_is_refused(arena) -> None:
    storage = _storage(arena, 0o777)
    before = _sha(arena["victim"])
    marker = arena["base"] / "ran"
    attacker = Attacker(storage, arena)
    try:
        proc = _swap_run(storage, "touch", str(marker))
    finally:
        attacker.finish()
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "chmod +t" in lines[0] and str(storage) in lines[0], proc.stderr
    assert not marker.exists(), "the command ran"
    assert [p.name for p in storage.iterdir()] == []
    _assert_untouched(arena, before)


@pytest.mark.parametrize("mode", ["cache", "dram"])
def test_world_writable_dirs_are_refused_for_every_output(arena, mode: str) -> None:
    # the pager's backing files (--storage) and --stats go through the same check
    ww = _storage(arena, 0o777)
    opts = (
        ["--mode", "cache", "--fast-budget", "64M", "--storage", str(ww)]
        if mode == "cache"
        else ["--mode", "dram", "--stats", str(ww / "s.json")]
    )
    proc = run_hetmem("run", *opts, "--", "true")
    assert proc.returncode == 2 and "chmod +t" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(ww.iterdir())


@pytest.mark.parametrize(
    ("mode", "owner"),
    [(0o1777, 0), (0o700, 0), (0o755, NOBODY)],
    ids=["sticky-world-writable", "root-0700", "owned-by-the-attacker"],
)
def test_attacker_cannot_redirect_the_swap_file(arena, mode: int, owner: int) -> None:
    storage = _storage(arena, mode, owner)
    before = _sha(arena["victim"])
    attacker = Attacker(storage, arena)
    procs = []
    try:
        for _ in range(4):  # each run is one more race for the attacker
            procs.append(_swap_run(storage, "sh", "-c", "exit 5"))
            _assert_untouched(arena, before)
    finally:
        attacker.finish()
    for proc in procs:
        # the attacker may make a run fail (it renamed its directory away),
        # never make it write or activate the victim
        assert proc.returncode in (5, 2), proc.stderr
        assert proc.returncode == 5 or len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert any(p.returncode == 5 for p in procs) or owner == NOBODY
    _assert_untouched(arena, before)
    # no file of root's stays (empty directories the attacker renamed may)
    left = []
    for dirpath, _, files in os.walk(storage):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            if st.st_uid == 0 and stat.S_ISREG(st.st_mode):
                left.append(os.path.join(dirpath, f))
    assert not left
