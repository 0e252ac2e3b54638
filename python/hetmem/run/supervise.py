# SPDX-License-Identifier: BSD-3-Clause
"""What a run leaves behind goes when the run goes, even by SIGKILL, and
clean-up touches only what a run can prove is its own.

- Owner: who made a resource: the boot id, the PID namespace, the pid and
  that process's start time (/proc/PID/stat field 22). Its maker is gone
  when the owner is of another boot (nothing of it survives a reboot), or of
  this boot and this PID namespace while the pid is dead or names a process
  that started at another time. A pid of another namespace cannot be
  checked from here: its resources are never taken for stale.
- Run record: a swap-mode run writes one JSON file into STATE_DIR (a 0700
  directory of root's) naming its swap area (private directory, device,
  inode) and its cgroup; stale_records() yields those whose owner is gone.
- Supervisor: a small process that hetmem starts (this file run as a script:
  it imports nothing but the standard library, so that it starts fast and
  needs nothing else). It reads what to remove from a pipe whose write end
  only hetmem holds. hetmem says "bye" once it has cleaned up itself; when
  hetmem dies without saying it (SIGKILL), the pipe closes, and the
  supervisor kills the command and removes the swap area, the cgroup, the
  files and directories it was told of.

Every file here is created with O_EXCL|O_NOFOLLOW in a directory hetmem has
just made (0700) or verified to be its own, and later steps work on the file
descriptor (swapon(2) and swapoff(2) are given /proc/self/fd/N, which the
kernel opens as exactly that inode), never on a path someone else could
have replaced with a symlink.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

STATE_DIR = Path("/run/hetmem")
SWAP_DIR_PREFIX = ".hetmem-swap-"
SWAP_NAME = "swap"
OWNER_NAME = "owner.json"
CGROUP_PREFIX = "hetmem-run-"
CGROUP_ROOT = "/sys/fs/cgroup/"
SWAP_FLAG_PREFER = 0x8000
SWAP_FLAG_PRIO_MASK = 0x7FFF
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_JSON = 1 << 16

_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------------------
# Owners
# ---------------------------------------------------------------------------
def boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def pid_ns() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields from the third (state) on; None when no such
    process is visible."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot; None when no such
    process is visible."""
    fields = _stat_fields(pid)
    # fields[0] is field 3 (state): field 22 (starttime) is fields[19]
    return int(fields[19]) if fields and len(fields) > 19 else None


def adopt_orphans() -> bool:
    """Makes this process the reaper of the descendants that outlive their
    parent (PR_SET_CHILD_SUBREAPER), so that `hetmem run` can wait for them
    (reap_children); False where the kernel refuses."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children(parent: int) -> list[int]:
    """The pids whose parent is `parent`, from /proc."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields and len(fields) > 1 and int(fields[1]) == parent:
                out.append(int(name))
    return out


def reap_children(keep: set[int], timeout: float) -> list[int]:
    """Waits up to timeout s for this process's children other than keep
    (orphans it adopted: adopt_orphans) to end, reaping them; returns those
    still running then. Only their pids are waited for, so the children
    that subprocess.Popen objects own (the supervisor) are left to them."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for pid in children(os.getpid()):
            if pid in keep:
                continue
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if not done:
                left.append(pid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _proc_is_ours() -> bool:
    """True when /proc shows this PID namespace (a process moved into a new
    namespace without its own /proc mount sees the outer one's pids)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


@dataclass(frozen=True)
class Owner:
    boot: str
    pidns: int
    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> Owner:
        start = start_time(pid)
        if start is None:
            raise OSError(errno.ESRCH, f"no process {pid}")
        return cls(boot_id(), pid_ns(), pid, start)

    @classmethod
    def me(cls) -> Owner:
        return cls.of(os.getpid())

    def to_json(self) -> dict[str, Any]:
        return {"boot": self.boot, "pidns": self.pidns, "pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, d: Any) -> Owner | None:
        if not isinstance(d, dict):
            return None
        boot, ns, pid, start = (d.get(k) for k in ("boot", "pidns", "pid", "start"))
        if not isinstance(boot, str) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (ns, pid, start)
        ):
            return None
        return cls(boot, int(ns), int(pid), int(start))  # type: ignore[arg-type]

    def gone(self) -> bool:
        """True only when it is certain that the owning process has ended."""
        if self.boot != boot_id():
            return True
        if self.pidns != pid_ns() or not _proc_is_ours():
            return False
        return start_time(self.pid) != self.start


# ---------------------------------------------------------------------------
# Files that no one else can have replaced
# ---------------------------------------------------------------------------
def _private(fd: int, what: str) -> None:
    """Refuses a directory that is not ours alone (0700, our uid)."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(errno.EPERM, f"{what} is not a private directory of this user")


def open_private_dir(path: Path) -> int:
    """An O_NOFOLLOW fd on path, refused (OSError) unless it is a directory
    of ours alone: a symlink or someone else's directory is never used."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        _private(fd, str(path))
    except OSError:
        os.close(fd)
        raise
    return fd


def make_private_dir(parent: Path, prefix: str) -> tuple[Path, int]:
    """A new 0700 directory under parent and an O_NOFOLLOW fd on it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    return path, open_private_dir(path)


def state_dir_fd() -> int:
    """An fd on STATE_DIR (root's 0700 directory for run records), made
    when missing; refused when it is a symlink or someone else's."""
    with suppress(FileExistsError):
        os.mkdir(STATE_DIR, 0o700)
    return open_private_dir(STATE_DIR)


def write_json_at(dfd: int, name: str, data: dict[str, Any]) -> None:
    """Writes name in the directory dfd: a new file (O_EXCL, never through
    a symlink) renamed over the old one."""
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)  # fmt: skip
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise


def read_json_at(dfd: int, name: str) -> dict[str, Any] | None:
    """A JSON object from a regular file of ours in dfd; None otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000 and st.st_uid == os.geteuid()):
            return None
        data = json.loads(os.read(fd, _MAX_JSON))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------------
# Swap areas through file descriptors
# ---------------------------------------------------------------------------
def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def write_swap_header(fd: int, size: int) -> None:
    """What mkswap writes (a version-1 header, no bad pages, a random UUID),
    written through fd so that no path is followed."""
    page = os.sysconf("SC_PAGE_SIZE")
    pages = size // page
    if pages < 10:
        raise OSError(errno.EINVAL, f"a swap area needs at least 10 pages, not {pages}")
    hdr = bytearray(page)
    struct.pack_into("=III", hdr, 1024, 1, pages - 1, 0)
    hdr[1036:1052] = os.urandom(16)
    hdr[page - 10 :] = b"SWAPSPACE2"
    if os.pwrite(fd, bytes(hdr), 0) != page:
        raise OSError(errno.EIO, "short write of the swap header")
    os.fsync(fd)


def swapon_fd(fd: int, priority: int) -> None:
    flags = SWAP_FLAG_PREFER | (priority & SWAP_FLAG_PRIO_MASK)
    _check(_libc.swapon(f"/proc/self/fd/{fd}".encode(), flags), "swapon")


def swapoff_fd(fd: int) -> bool:
    """Deactivates the swap area on fd's inode; False when it was not active."""
    if _libc.swapoff(f"/proc/self/fd/{fd}".encode()) == 0:
        return True
    if ctypes.get_errno() == errno.EINVAL:
        return False
    _check(-1, "swapoff")
    return False


def _unescape(name: str) -> str:
    """/proc/swaps writes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(name):
        code = name[i + 1 : i + 4]
        if name[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def read_swaps() -> list[dict[str, Any]]:
    """/proc/swaps as a list of {name, type, size, used, priority} (bytes)."""
    out: list[dict[str, Any]] = []
    with suppress(OSError), open("/proc/swaps") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if len(parts) >= 5:
                out.append(
                    {
                        "name": _unescape(parts[0]),
                        "type": parts[1],
                        "size": int(parts[2]) * 1024,
                        "used": int(parts[3]) * 1024,
                        "priority": int(parts[4]),
                    }
                )
    return out


def find_swap(dev: int, ino: int) -> dict[str, Any] | None:
    """The /proc/swaps entry of the inode (dev, ino): names are compared by
    what they are (os.stat), never by how they are spelled."""
    for s in read_swaps():
        try:
            st = os.stat(s["name"])
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino):
            return s
    return None


def remove_swap(entry: dict[str, Any]) -> bool:
    """Takes down a swap area a record names ({dir, dev, ino}): swapoff and
    unlink only when the file in the directory is that inode. True when
    something was removed."""
    try:
        dfd = os.open(str(entry["dir"]), _DIR_FLAGS)
    except (OSError, KeyError, TypeError):
        return False
    try:
        _private(dfd, str(entry["dir"]))
        fd = os.open(SWAP_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (entry.get("dev"), entry.get("ino")):
                return False
            swapoff_fd(fd)
        finally:
            os.close(fd)
        remove_private_dir(Path(entry["dir"]), dfd)
        return True
    except OSError:
        return False
    finally:
        os.close(dfd)


def remove_private_dir(path: Path, dfd: int) -> None:
    """Unlinks what hetmem puts in a private directory, then the directory
    (only while its name still is that directory)."""
    for name in (SWAP_NAME, OWNER_NAME):
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)
    st, here = os.fstat(dfd), os.lstat(path)
    if (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino):
        os.rmdir(path)


# ---------------------------------------------------------------------------
# Cgroups and processes
# ---------------------------------------------------------------------------
def remove_cgroup(path: str) -> bool:
    """Kills the processes of a cgroup hetmem made and removes it (a path
    that is not a hetmem cgroup under CGROUP_ROOT is left alone)."""
    if not (path.startswith(CGROUP_ROOT) and os.path.basename(path).startswith(CGROUP_PREFIX)):
        return False
    if os.path.realpath(path) != path or not os.path.isdir(path):
        return False
    return empty_and_remove_cgroup(path)


def empty_and_remove_cgroup(path: str) -> bool:
    """SIGKILLs the cgroup's processes until none is left (at most 10 s),
    then removes it (the kernel refuses while exiting tasks linger: retried
    for 5 s). True when it was removed."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pids = []
        if not pids:
            break
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for _ in range(100):
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            time.sleep(0.05)
    return False


def kill_process(pid: int, start: int) -> bool:
    """SIGKILL to pid if it still is the process that started at start."""
    if start_time(pid) != start:
        return False
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        return True
    return False


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: SIGKILL when the parent (the thread
    that forked it) ends. Closes the race of a parent that ended before."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------
def take_down(rec: dict[str, Any]) -> list[str]:
    """Removes everything rec names; returns what it removed. The run
    record goes last, and only once its swap area and cgroup are gone (a
    failed swapoff leaves it for a later run to retry)."""
    removed: list[str] = []
    for proc in rec.get("procs", []):
        with suppress(TypeError, ValueError):
            if kill_process(int(proc[0]), int(proc[1])):
                removed.append(f"the command (pid {proc[0]})")
    cg = rec.get("cgroup")
    if isinstance(cg, str) and remove_cgroup(cg):
        removed.append(cg)
    sw = rec.get("swap")
    if isinstance(sw, dict) and remove_swap(sw):
        removed.append(f"{sw['dir']}/{SWAP_NAME}")
    removed += _remove_files(rec)
    name = rec.get("record")
    active = isinstance(sw, dict) and find_swap(sw.get("dev", -1), sw.get("ino", -1))
    if isinstance(name, str) and not active and not (isinstance(cg, str) and os.path.isdir(cg)):
        drop_record(name)
    return removed


def _remove_files(rec: dict[str, Any]) -> list[str]:
    """The record's folder trees and files, removed; returns those gone."""
    removed: list[str] = []
    for tree in rec.get("trees", []):
        if os.path.isdir(tree) and not os.path.islink(tree):
            shutil.rmtree(tree, ignore_errors=True)
            removed.append(tree)
    for path in rec.get("paths", []):
        with suppress(OSError):
            os.unlink(path)
            removed.append(path)
    return removed


def drop_record(name: str) -> None:
    """Deletes a run record from STATE_DIR (after its resources went)."""
    if "/" in name:
        return
    with suppress(OSError):
        dfd = state_dir_fd()
        try:
            os.unlink(name, dir_fd=dfd)
        finally:
            os.close(dfd)


def save_record(rec: dict[str, Any]) -> str:
    """Writes a run record into STATE_DIR; returns its name there."""
    owner = Owner.from_json(rec.get("owner"))
    assert owner is not None
    name = f"run-{owner.pidns}-{owner.pid}-{owner.start}.json"
    rec["record"] = name
    dfd = state_dir_fd()
    try:
        write_json_at(dfd, name, rec)
    finally:
        os.close(dfd)
    return name


def stale_records() -> Iterator[dict[str, Any]]:
    """The run records in STATE_DIR whose owner is gone."""
    try:
        dfd = state_dir_fd()
    except OSError:
        return
    try:
        names = [n for n in os.listdir(dfd) if n.startswith("run-") and n.endswith(".json")]
        for name in names:
            rec = read_json_at(dfd, name)
            owner = Owner.from_json((rec or {}).get("owner"))
            if rec is not None and owner is not None and rec.get("record") == name:
                if owner.gone():
                    yield rec
    finally:
        os.close(dfd)


def stale_swap_dirs(storage: Path) -> Iterator[Path]:
    """Private swap directories in storage (hetmem's, by name, owner and
    mode) whose owner.json says their run is gone and whose swap file is
    not an active swap area (files of an earlier boot, mostly)."""
    with suppress(OSError):
        for entry in storage.iterdir():
            if not entry.name.startswith(SWAP_DIR_PREFIX):
                continue
            try:
                dfd = os.open(entry, _DIR_FLAGS)
            except OSError:
                continue
            try:
                _private(dfd, str(entry))
                owner = Owner.from_json((read_json_at(dfd, OWNER_NAME) or {}).get("owner"))
                if owner is None or not owner.gone():
                    continue
                with suppress(FileNotFoundError):
                    st = os.stat(SWAP_NAME, dir_fd=dfd, follow_symlinks=False)
                    if find_swap(st.st_dev, st.st_ino) is not None:
                        continue
                remove_private_dir(entry, dfd)
                yield entry
            except OSError:
                continue
            finally:
                os.close(dfd)


# ---------------------------------------------------------------------------
# The supervisor
# ---------------------------------------------------------------------------
class Supervisor:
    """The parent's end: start() runs the supervisor, add() tells it what
    to remove should hetmem die, close() says bye and waits for it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Supervisor:
        # -I: no environment, no user site, not the script's directory on
        # sys.path (a module of this package there could shadow the stdlib's)
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        # Wait for its "ready": its interpreter's start-up (tens of ms of CPU)
        # is then over before the command starts, instead of competing with
        # the command on a small machine (and only in the modes that have a
        # supervisor, not in the dram runs they are compared with).
        assert self._proc.stdout is not None
        ready = self._proc.stdout.read(1)
        self._proc.stdout.close()
        if ready != b"r":
            self._proc.wait()
            raise OSError(errno.ECHILD, "the clean-up supervisor did not start")
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def add(self, **item: Any) -> None:
        """procs=[[pid, start]], cgroup=path, swap={dir, dev, ino},
        trees=[dir], paths=[file], record=name."""
        self._send(item)

    def _send(self, msg: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        stdin: IO[bytes] = self._proc.stdin
        # a safety net: if it is gone, hetmem's own clean-up still runs
        with suppress(OSError, ValueError):
            stdin.write(json.dumps(msg).encode() + b"\n")
            stdin.flush()

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        with suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.write(b'{"bye": true}\n')
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> Supervisor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge(rec: dict[str, Any], msg: dict[str, Any]) -> None:
    for k, v in msg.items():
        if isinstance(v, list):
            rec.setdefault(k, []).extend(v)
        else:
            rec[k] = v


def serve(stream: int = 0) -> int:
    """The supervisor's loop: collect what to remove until the pipe closes;
    remove it unless hetmem said bye."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    rec: dict[str, Any] = {}
    buf, bye = b"", False
    os.write(1, b"r")  # ready: Supervisor.start waits for it
    os.close(1)
    while True:
        try:
            chunk = os.read(stream, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            with suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict):
                    bye = bye or bool(msg.pop("bye", False))
                    _merge(rec, msg)
    if bye:
        return 0
    removed = take_down(rec)
    if removed:
        os.write(2, f"hetmem: the run ended abruptly; removed {', '.join(removed)}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(serve())
