# SPDX-License-Identifier: BSD-3-Clause
"""The swap baseline's memory cgroup on cgroup v2, on recorded trees.

This machine's memory controller is on cgroup v1 (the real v1 path runs in
test_run's swap tests). Fresh Debian and most distributions mount only v2,
where the kernel lets a cgroup give children the memory controller only if
it holds no processes of its own, or is the root: a child of a systemd
session scope or a Slurm task cgroup is impossible. These trees are laid
out as the kernel shows them (cgroup.controllers, cgroup.subtree_control,
/proc/self/cgroup as `0::PATH`), and check where hetmem puts the run's
cgroup and what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem.errors import EnvironmentProblem
from hetmem.run.swap import MemoryCgroup

SCOPE = "/user.slice/user-0.slice/session-3.scope"


def _tree(tmp: Path, own: str, cgroups: dict[str, tuple[str, str]]) -> Path:
    """cgroups: path -> (cgroup.controllers, cgroup.subtree_control)."""
    (tmp / "proc/self").mkdir(parents=True)
    (tmp / "proc/mounts").write_text(
        "proc /proc proc rw,nosuid 0 0\n"
        "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
    )
    (tmp / "proc/self/cgroup").write_text(f"0::{own}\n")
    for path, (ctrls, sub) in cgroups.items():
        d = tmp / "sys/fs/cgroup" / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.controllers").write_text(ctrls + "\n")
        (d / "cgroup.subtree_control").write_text(sub + "\n")
        (d / "cgroup.procs").write_text("")
    return tmp / "sys/fs/cgroup"


def _systemd(tmp: Path, user_slice_sub: str) -> Path:
    return _tree(
        tmp,
        SCOPE,
        {
            "/": ("cpuset cpu io memory pids", "cpu io memory pids"),
            "/user.slice": ("cpu io memory pids", "memory pids"),
            "/user.slice/user-0.slice": ("memory pids", user_slice_sub),
            SCOPE: ("pids", ""),
        },
    )


def test_beside_our_scope_when_its_parent_gives_memory(tmp_path: Path) -> None:
    top = _systemd(tmp_path, "memory pids")
    cg = MemoryCgroup("hetmem-run-7", root=tmp_path)
    assert cg.version == 2
    cg.create(128 << 20)
    run = top / "user.slice/user-0.slice/hetmem-run-7"
    assert cg.path == run and (run / "memory.max").read_text() == str(128 << 20)
    # never the scope itself: it holds processes, the kernel would refuse
    assert not (top / SCOPE.lstrip("/") / "hetmem-run-7").exists()
    cg.join()
    assert (run / "cgroup.procs").read_text().strip().isdigit()


def test_nearest_ancestor_that_gives_memory_already(tmp_path: Path) -> None:
    top = _systemd(tmp_path, "pids")
    cg = MemoryCgroup("hetmem-run-8", root=tmp_path)
    cg.create(64 << 20)
    assert cg.path == top / "user.slice/hetmem-run-8"
    # nothing enabled where it was not: user-0.slice is left as it was
    assert (top / "user.slice/user-0.slice/cgroup.subtree_control").read_text() == "pids\n"


def test_at_the_root_memory_is_enabled_for_children(tmp_path: Path) -> None:
    # a VM or container without systemd: the process is in the root cgroup,
    # which the kernel lets give memory to children whatever it holds
    top = _tree(tmp_path, "/", {"/": ("cpu memory pids", "")})
    cg = MemoryCgroup("hetmem-run-9", root=tmp_path)
    cg.create(32 << 20)
    assert cg.path == top / "hetmem-run-9"
    assert (top / "cgroup.subtree_control").read_text() == "+memory"


def test_refused_everywhere_is_one_clear_error(tmp_path: Path) -> None:
    top = _systemd(tmp_path, "")
    for d in ("", "user.slice", "user.slice/user-0.slice"):
        f = top / d / "cgroup.subtree_control"
        f.unlink()
        f.mkdir()  # writing it fails, as the kernel's EBUSY would
    cg = MemoryCgroup("hetmem-run-10", root=tmp_path)
    with pytest.raises(EnvironmentProblem, match="no cgroup above this process") as exc:
        cg.create(32 << 20)
    assert "\n" not in str(exc.value)
    assert not list(top.rglob("hetmem-run-10"))


def test_v1_memory_hierarchy_wins_when_both_are_mounted(tmp_path: Path) -> None:
    _systemd(tmp_path, "memory")
    with open(tmp_path / "proc/mounts", "a") as f:
        f.write("cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n")
    with open(tmp_path / "proc/self/cgroup", "a") as f:
        f.write("4:memory:/batch/job1\n")
    cg = MemoryCgroup("hetmem-run-11", root=tmp_path)
    assert cg.version == 1
    assert cg.path == tmp_path / "sys/fs/cgroup/memory/batch/job1/hetmem-run-11"


def test_no_memory_controller_anywhere(tmp_path: Path) -> None:
    _tree(tmp_path, "/", {"/": ("cpu pids", "cpu pids")})
    with pytest.raises(EnvironmentProblem, match="no memory cgroup controller"):
        MemoryCgroup("hetmem-run-12", root=tmp_path)
