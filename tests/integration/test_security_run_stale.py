# SPDX-License-Identifier: BSD-3-Clause
"""Swap mode's clean-up of earlier runs touches only what it can prove is
theirs (issue 19, finding 4): a swap area named like hetmem's without an
owner record, or one owned from another PID namespace, is left alone;
two concurrent runs do not disturb each other; a record of this namespace
whose process is gone is cleaned up.

The owner record's format (boot id, PID namespace inode, pid, start time
from /proc/PID/stat field 22; a run record in /run/hetmem naming the swap
file by directory, device and inode) is written here by hand, as a
killed run leaves it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, run_hetmem

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="swap mode needs root")
STATE_DIR = Path("/run/hetmem")


def _swaps() -> list[str]:
    with open("/proc/swaps") as f:
        return [ln.split()[0].replace("\\040", " ") for ln in f.readlines()[1:]]


def _make_swap(path: Path, size: int = 16 << 20) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    subprocess.run(["mkswap", str(path)], check=True, capture_output=True)
    subprocess.run(["swapon", str(path)], check=True, capture_output=True)


def _dead_owner(pidns: int | None = None) -> dict[str, int | str]:
    """The owner of a process that has ended (a child started and reaped)."""
    child = subprocess.Popen(["sleep", "0"])
    with open(f"/proc/{child.pid}/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    child.wait()
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    ns = os.stat("/proc/self/ns/pid").st_ino if pidns is None else pidns
    return {"boot": boot, "pidns": ns, "pid": child.pid, "start": start}


def _record(owner: dict[str, int | str], swap: Path) -> Path:
    """What a killed run leaves: its swap directory's owner.json and its
    run record."""
    (swap.parent / "owner.json").write_text(json.dumps({"owner": owner}))
    st = swap.stat()
    name = f"run-{owner['pidns']}-{owner['pid']}-{owner['start']}.json"
    rec = {
        "owner": owner,
        "swap": {"dir": str(swap.parent), "dev": st.st_dev, "ino": st.st_ino},
        "cgroup": None,
        "record": name,
    }
    STATE_DIR.mkdir(mode=0o700, exist_ok=True)
    path = STATE_DIR / name
    path.write_text(json.dumps(rec))
    return path


@pytest.fixture
def base() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="hetmem-stale-", dir="/var/tmp"))
    try:
        yield d
    finally:
        for name in _swaps():
            if name.startswith(str(d)):
                subprocess.run(["swapoff", name], capture_output=True)
        for rec in STATE_DIR.glob("run-*.json") if STATE_DIR.is_dir() else []:
            if str(d) in rec.read_text(errors="replace"):
                rec.unlink()
        shutil.rmtree(d, ignore_errors=True)


def _swap_run(storage: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    return run_hetmem(
        "run", "--mode", "swap", "--fast-budget", "32M", "--swap-size", "32M",
        "--storage", str(storage), "--", *cmd, timeout=120,
    )  # fmt: skip


def _end(proc: subprocess.Popen[str]) -> None:
    """Lets a run that was told to go end, else kills it (and, for
    unshare --kill-child, its whole namespace)."""
    if proc.returncode is not None:
        return
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_pid() -> int:
    """A pid that no process of this namespace has now."""
    with open("/proc/sys/kernel/pid_max") as f:
        top = int(f.read())
    for pid in range(top - 2, 300, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    pytest.skip("no free pid")


def test_swap_named_like_ours_without_a_record_is_left_alone(base: Path) -> None:
    # the old naming, .hetmem-swap-<pid> with a pid that does not run here:
    # without an owner record it is not hetmem's to take down
    old = base / f".hetmem-swap-{_free_pid()}"
    _make_swap(old)
    # the new naming, with a record that names a dead process of another
    # PID namespace (a container's): its pid means nothing here
    d = base / ".hetmem-swap-othernsx"
    d.mkdir(mode=0o700)
    _make_swap(d / "swap")
    other = _dead_owner(pidns=os.stat("/proc/self/ns/pid").st_ino + 1)
    _record(other, d / "swap")
    storage = base / "tier"
    storage.mkdir()
    proc = _swap_run(storage, "true")
    assert proc.returncode == 0, proc.stderr
    assert str(old) in _swaps(), "a swap area without an owner record was taken down"
    assert str(d / "swap") in _swaps(), "another namespace's swap area was taken down"
    assert old.exists() and (d / "swap").exists()


def test_a_stale_record_of_this_namespace_is_cleaned_up(base: Path) -> None:
    d = base / ".hetmem-swap-deadrunx"
    d.mkdir(mode=0o700)
    _make_swap(d / "swap")
    rec = _record(_dead_owner(), d / "swap")
    proc = _swap_run(base, "true")
    assert proc.returncode == 0, proc.stderr
    assert "removed what an earlier interrupted run left" in proc.stderr
    assert str(d / "swap") not in _swaps()
    assert not d.exists() and not rec.exists()


def test_concurrent_swap_runs_do_not_disturb_each_other(base: Path) -> None:
    go = base / "go"
    first = subprocess.Popen(
        [sys.executable, "-m", "hetmem", "run", "--mode", "swap", "--fast-budget", "32M",
         "--swap-size", "32M", "--storage", str(base), "--",
         "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not [s for s in _swaps() if s.startswith(str(base))]:
            assert first.poll() is None and time.monotonic() < deadline, "first run never swapped"
            time.sleep(0.02)
        (mine,) = [s for s in _swaps() if s.startswith(str(base))]
        for _ in range(2):
            second = _swap_run(base, "true")
            assert second.returncode == 0, second.stderr
            assert mine in _swaps(), "the second run took down the first run's swap area"
        go.write_text("")
        _, err = first.communicate(timeout=60)
    finally:
        go.write_text("")
        _end(first)
    assert first.returncode == 0, err
    assert "failed" not in err
    assert not [s for s in _swaps() if s.startswith(str(base))]


def test_a_run_in_another_pid_namespace_is_left_alone(base: Path) -> None:
    """A run inside `unshare --pid` (its pid there is free out here, so
    that a pid check from outside finds it dead) keeps its swap area while
    a run outside starts and ends."""
    if not shutil.which("unshare") or not os.path.exists("/proc/sys/kernel/ns_last_pid"):
        pytest.skip("needs unshare and ns_last_pid")
    inner, outer = base / "inner", base / "outer"
    inner.mkdir()
    outer.mkdir()
    go = base / "go"
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(REPO / "python")))
    script = (
        f"echo {_free_pid() - 1} > /proc/sys/kernel/ns_last_pid; "
        f"{sys.executable} -m hetmem run --mode swap --fast-budget 32M --swap-size 32M "
        f"--storage {inner} -- sh -c 'while [ ! -e {go} ]; do sleep 0.02; done'; exit $?"
    )
    ns = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", script],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not [s for s in _swaps() if s.startswith(str(inner))]:
            assert ns.poll() is None and time.monotonic() < deadline, "the inner run never swapped"
            time.sleep(0.02)
        (theirs,) = [s for s in _swaps() if s.startswith(str(inner))]
        proc = _swap_run(outer, "true")
        assert proc.returncode == 0, proc.stderr
        assert theirs in _swaps(), "another namespace's live swap area was taken down"
        go.write_text("")
        _, err = ns.communicate(timeout=60)
    finally:
        go.write_text("")
        _end(ns)
    assert ns.returncode == 0, err
    assert not [s for s in _swaps() if s.startswith(str(base))]
