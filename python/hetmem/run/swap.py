# SPDX-License-Identifier: BSD-3-Clause
"""The swap baseline's parts: a memory cgroup limited to the budget and a
swap file on the storage tier, both made so that no other user can turn
them against root (an fd-held swap file in a private directory, found in
/proc/swaps by device and inode) and removed only by the run that can prove
it made them (owner records, hetmem.run.supervise).

`hetmem run --mode swap` (hetmem.run.launch) puts them together around the command.
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

from hetmem.errors import EnvironmentProblem
from hetmem.output import run_note as note
from hetmem.run import supervise


def read_swaps() -> list[dict[str, Any]]:
    """/proc/swaps as a list of {name, type, size, used, priority} (bytes)."""
    return supervise.read_swaps()


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _controls(cgroup: Path, which: str = "subtree_control") -> list[str]:
    """The controllers a v2 cgroup hands to its children (which=
    "subtree_control") or has itself ("controllers")."""
    return (_read(cgroup / f"cgroup.{which}") or "").split()


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _kv(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


class MemoryCgroup:
    """A memory cgroup for one run, as deep as the kernel allows.

    v1: a child of this process's own memory cgroup. v2: the kernel lets a
    cgroup hand the memory controller to children only if it has no
    processes of its own (or is the root), so a child of our own cgroup is
    impossible where it holds processes (a systemd session scope, a Slurm
    task). The run's cgroup goes beside it instead, under the nearest
    ancestor whose cgroup.subtree_control has memory already; failing that,
    under the nearest one where enabling memory there succeeds. Staying
    below our own ancestors keeps the run inside their limits (a batch
    job's, a container's). `root` is the filesystem root (tests give a
    recorded tree)."""

    def __init__(self, name: str, root: Path = Path("/")) -> None:
        self.name = name
        self.root = root
        self.version, self.candidates = self._locate()
        self.parent = self.candidates[0]
        self.path = self.parent / name

    def _mounts(self) -> list[tuple[str, str, list[str]]]:
        out = []
        with open(self.root / "proc/mounts") as f:
            for line in f:
                p = line.split()
                if len(p) >= 4:
                    out.append((p[1], p[2], p[3].split(",")))
        return out

    def _own(self, controller: str | None) -> str:
        """This process's cgroup path in the hierarchy of controller (None: v2)."""
        with open(self.root / "proc/self/cgroup") as f:
            for line in f:
                hid, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller is None and hid == "0" and ctrls == "":
                    return path
                if controller is not None and controller in ctrls.split(","):
                    return path
        return "/"

    def _locate(self) -> tuple[int, list[Path]]:
        mounts = self._mounts()
        for mnt, fstype, opts in mounts:
            if fstype == "cgroup" and "memory" in opts:
                return 1, [self.root / mnt.lstrip("/") / self._own("memory").lstrip("/")]
        for mnt, fstype, _ in mounts:
            if fstype != "cgroup2":
                continue
            top = self.root / mnt.lstrip("/")
            if "memory" not in _controls(top, "controllers"):
                continue
            own = top / self._own(None).lstrip("/")
            # the root may have children with controllers whatever it holds;
            # any other cgroup of ours holds this process
            chain = [own] if own == top else []
            a = own
            while a != top:
                a = a.parent
                chain.append(a)
            ready = [a for a in chain if "memory" in _controls(a)]
            if ready:
                return 2, [ready[0]]
            able = [a for a in chain if "memory" in _controls(a, "controllers")]
            if able:
                return 2, able
            break
        raise EnvironmentProblem("no memory cgroup controller is mounted (v1 or v2)")

    def create(self, limit: int) -> None:
        if self.version == 2 and "memory" not in _controls(self.parent):
            self._enable_memory()
        try:
            self.path.mkdir()
            if self.version == 1:
                _write(self.path / "memory.limit_in_bytes", str(limit))
            else:
                _write(self.path / "memory.max", str(limit))
                if (self.path / "memory.swap.max").exists():
                    _write(self.path / "memory.swap.max", "max")
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot set up memory cgroup {self.path}: {exc.strerror}"
            ) from None

    def _enable_memory(self) -> None:
        """Enables memory for children at the nearest candidate that lets it
        (the kernel refuses, EBUSY, where the cgroup holds processes)."""
        why = ""
        for a in self.candidates:
            try:
                _write(a / "cgroup.subtree_control", "+memory")
            except OSError as exc:
                why = f"{a}: {exc.strerror}"
                continue
            self.parent, self.path = a, a / self.name
            return
        raise EnvironmentProblem(
            "cgroup v2: no cgroup above this process can give a new cgroup the memory "
            f"controller (last tried {why}); run hetmem where memory is delegated, "
            "e.g. under systemd-run --scope -p Delegate=yes"
        )

    def join(self) -> None:
        """Moves the calling process in (runs in the child before exec)."""
        _write(self.path / "cgroup.procs", str(os.getpid()))

    def stats(self) -> dict[str, Any]:
        p = self.path
        if self.version == 1:
            st = _kv(_read(p / "memory.stat"))
            oom = _kv(_read(p / "memory.oom_control"))
            return {
                "cgroup_version": 1,
                "limit_bytes": _int(_read(p / "memory.limit_in_bytes")),
                "max_usage_bytes": _int(_read(p / "memory.max_usage_in_bytes")),
                "memsw_max_usage_bytes": _int(_read(p / "memory.memsw.max_usage_in_bytes")),
                "failcnt": _int(_read(p / "memory.failcnt")),
                "oom_kill": oom.get("oom_kill"),
                "pgmajfault": st.get("total_pgmajfault", st.get("pgmajfault")),
                "pgpgin": st.get("total_pgpgin", st.get("pgpgin")),
                "pgpgout": st.get("total_pgpgout", st.get("pgpgout")),
            }
        st = _kv(_read(p / "memory.stat"))
        ev = _kv(_read(p / "memory.events"))
        return {
            "cgroup_version": 2,
            "limit_bytes": _int(_read(p / "memory.max")),
            "max_usage_bytes": _int(_read(p / "memory.peak")),
            "swap_max_usage_bytes": _int(_read(p / "memory.swap.peak")),
            "oom_kill": ev.get("oom_kill"),
            "pgmajfault": st.get("pgmajfault"),
            "pswpin": st.get("pswpin"),
            "pswpout": st.get("pswpout"),
        }

    def remove(self) -> None:
        """Kills what the command left behind in the cgroup, then removes it."""
        if not self.path.exists():
            return
        if not supervise.empty_and_remove_cgroup(str(self.path)) and self.path.exists():
            note(f"could not remove cgroup {self.path}")


class SwapFile:
    """A swap file on the storage tier, at the highest priority.

    It lives in a private directory that hetmem makes for it (0700,
    .hetmem-swap-XXXXXXXX/swap beside owner.json, the run's owner record),
    is created with O_EXCL|O_NOFOLLOW, and every later step works on its
    descriptor: the header is written through it (what mkswap writes),
    swapon(2) and swapoff(2) are given /proc/self/fd/N (util-linux's tools
    would resolve a path first), and its /proc/swaps entry is found by
    device and inode, never by name. No one else can put a symlink in its
    place, and clean-up never takes down another swap area."""

    PRIORITY = 32767

    def __init__(self, storage: Path, size: int, owner: supervise.Owner) -> None:
        self.storage = storage
        self.size = size
        self.owner = owner
        self.dir: Path | None = None
        self.entry: dict[str, Any] = {}
        self._dfd = -1
        self._fd = -1

    @property
    def path(self) -> Path | None:
        return self.dir / supervise.SWAP_NAME if self.dir else None

    def create(self) -> dict[str, Any]:
        """Makes the (inactive) file; returns what a run record names of it."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.dir, self._dfd = supervise.make_private_dir(
                self.storage, supervise.SWAP_DIR_PREFIX
            )
            owner = {"owner": self.owner.to_json()}
            supervise.write_json_at(self._dfd, supervise.OWNER_NAME, owner)
            self._fd = os.open(supervise.SWAP_NAME, flags, 0o600, dir_fd=self._dfd)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot create a swap file in {self.storage}: {exc.strerror}"
            ) from None
        st = os.fstat(self._fd)
        self.entry = {"dir": str(self.dir), "dev": st.st_dev, "ino": st.st_ino}
        return self.entry

    def activate(self) -> None:
        try:
            os.posix_fallocate(self._fd, 0, self.size)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot allocate {self.size} bytes for swap file {self.path}: {exc.strerror}"
            ) from None
        try:
            supervise.write_swap_header(self._fd, self.size)
            supervise.swapon_fd(self._fd, self.PRIORITY)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot activate swap file {self.path}: {exc.strerror}"
            ) from None
        if self._listed() is None:
            raise EnvironmentProblem(f"swap file {self.path} is not in /proc/swaps after swapon")

    def _listed(self) -> dict[str, Any] | None:
        return supervise.find_swap(self.entry["dev"], self.entry["ino"]) if self.entry else None

    def used(self) -> int | None:
        s = self._listed()
        return int(s["used"]) if s else None

    def remove(self) -> bool:
        """Deactivates and deletes it; False when it stays (swapoff failed:
        the run record keeps it for a later run's clean-up)."""
        ok = True
        if self._fd >= 0:
            try:
                supervise.swapoff_fd(self._fd)
            except OSError as exc:
                note(f"swapoff {self.path} failed: {exc.strerror}")
                ok = False
            os.close(self._fd)
            self._fd = -1
        if self._dfd >= 0:
            if ok and self.dir is not None:
                with suppress(OSError):
                    supervise.remove_private_dir(self.dir, self._dfd)
            os.close(self._dfd)
            self._dfd = -1
        return ok


def clean_stale(storage: Path) -> list[str]:
    """Removes what earlier hetmem runs that were killed left, and only
    what they provably left: a run record (or a swap directory's owner
    record) whose owner is of this boot and PID namespace and no longer
    runs, or of an earlier boot. A swap area or cgroup named like hetmem's
    without such a record, or owned from another PID namespace (a
    container, another job), is left alone. Returns what it removed."""
    removed: list[str] = []
    for rec in supervise.stale_records():
        removed += supervise.take_down(rec)
    removed += [str(p) for p in supervise.stale_swap_dirs(storage)]
    return removed


class SwapSampler(threading.Thread):
    """Samples the swap file's use while the command runs (its peak is not
    in cgroup v1's counters)."""

    def __init__(self, swap: SwapFile) -> None:
        super().__init__(daemon=True)
        self.swap = swap
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            used = self.swap.used()
            if used is not None:
                self.peak = max(self.peak, used)
