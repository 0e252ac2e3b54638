# SPDX-License-Identifier: BSD-3-Clause
"""The OS seam: only src/prim may call the operating system.

Rule (issue 20): every system call, ioctl, environment read, clock read and
/proc or /sys access of the C runtime goes through a `_hm_prim_*` function
of src/prim. Code anywhere else under src/ calls those, never libc's
kernel-entering functions, so that there is one place to read for what the
runtime asks of the kernel, one place to fake in tests, and no call that the
preload interposer's own hooks (mmap, munmap, madvise, mremap, sigaction)
could catch by accident. pthread_* is not part of the seam.

The check reads the compiled objects, not the source: for each object built
from src/** except src/prim/** in the C build tree ($HETMEM_CBUILD, default
build/c), `nm -u` lists what it calls, and none of it may be an OS entry point
of OS_CALLS below. Fortified and large-file variants (__read_chk, __open_2,
open64, __fxstat, ...) count as the call they stand for. A failure lists
`object: symbol` for each offending call; the fix is a `_hm_prim_*` wrapper
(src/prim/prim.h, usually src/prim/sys.c) called instead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CBUILD, REPO

# libc wrappers of system calls and libc functions that enter the kernel
# (or read the process environment). Kept in step with the comment at the
# top of src/prim/prim.h.
OS_CALLS = frozenset(
    """
    open openat creat fopen fdopen freopen opendir fdopendir readdir scandir
    read write pread pwrite readv writev preadv pwritev close
    stat fstat lstat fstatat statx statfs fstatfs statvfs fstatvfs
    access faccessat readlink readlinkat realpath
    unlink unlinkat rename renameat renameat2 mkdir mkdirat rmdir
    truncate ftruncate fallocate posix_fallocate fsync fdatasync
    mmap munmap mprotect madvise posix_madvise mremap mlock munlock msync
    mbind move_pages migrate_pages get_mempolicy set_mempolicy
    syscall ioctl fcntl poll ppoll select pselect
    eventfd memfd_create userfaultfd perf_event_open inotify_init inotify_init1
    sysconf getenv secure_getenv setenv unsetenv putenv clearenv
    clock_gettime clock_getres clock_nanosleep gettimeofday time
    nanosleep usleep sleep
    getpid getppid gettid kill tgkill raise sigaction sigprocmask
    sched_getcpu getcpu sched_getaffinity sched_setaffinity sched_yield
    dup dup2 dup3 pipe pipe2 fork vfork execve execv execvp waitpid wait
    socket connect bind listen accept
    gethostname uname getrlimit setrlimit prctl getrusage
    """.split()
)
# Whole families by prefix.
OS_PREFIXES = ("epoll_", "io_uring_")
# glibc's stat family before 2.33, by the name of the call it stands for.
ALIASES = {
    "__xstat": "stat",
    "__lxstat": "lstat",
    "__fxstat": "fstat",
    "__fxstatat": "fstatat",
    "__xstat64": "stat",
    "__lxstat64": "lstat",
    "__fxstat64": "fstat",
    "__fxstatat64": "fstatat",
}

# The source folders under src/ checked one by one ("" is src/ itself).
FOLDERS = ["", "channel", "probe", "hbw", "symbolize", "sdm", "preload"]


def os_call(symbol: str) -> str | None:
    """The OS call symbol stands for, or None if it is not one."""
    name = symbol.split("@")[0]
    name = ALIASES.get(name, name)
    if name.startswith("__"):  # __read_chk, __open_2, __open64_2, ...
        name = name[2:]
        for suffix in ("_chk", "_2"):
            name = name.removesuffix(suffix)
    if name.endswith("64") and name[:-2] in OS_CALLS:  # open64, fopen64, ...
        name = name[:-2]
    if name in OS_CALLS or name.startswith(OS_PREFIXES):
        return name
    return None


def test_os_call_normalises_variants() -> None:
    for sym, call in [
        ("getenv", "getenv"),
        ("__read_chk", "read"),
        ("__open_2", "open"),
        ("__open64_2", "open"),
        ("open64", "open"),
        ("__fxstat", "fstat"),
        ("__pread64_chk", "pread"),
        ("epoll_wait", "epoll_wait"),
    ]:
        assert os_call(sym) == call, sym
    for sym in ("pthread_mutex_lock", "_hm_prim_getenv", "__errno_location", "memcpy", "malloc"):
        assert os_call(sym) is None, sym


def _source_folder(obj: Path) -> str | None:
    """The folder under src/ that obj was compiled from ("" for src/
    itself), or None when it is not built from src/ (tests, bench, apps).
    CMake names objects <target>.dir/<path relative to the source root>.o."""
    parts = obj.parts
    try:
        i = next(k for k, p in enumerate(parts) if p.endswith(".dir"))
    except StopIteration:
        return None
    rel = parts[i + 1 :]
    if len(rel) < 2 or rel[0] != "src":
        return None
    # A stale object (its source since moved or split) is not part of the build.
    if not (REPO / Path(*rel)).with_suffix("").is_file():
        return None
    return rel[1] if len(rel) > 2 else ""


def _objects() -> dict[str, list[Path]]:
    if not CBUILD.is_dir():
        pytest.skip(f"no C build tree at {CBUILD} (set HETMEM_CBUILD or run `make cbuild`)")
    found: dict[str, list[Path]] = {}
    for obj in sorted(CBUILD.rglob("*.o")):
        folder = _source_folder(obj.relative_to(CBUILD))
        if folder is not None and folder != "prim":
            found.setdefault(folder, []).append(obj)
    if not found:
        pytest.skip(f"no objects built from src/ under {CBUILD}: build it first")
    return found


def _violations(objs: list[Path]) -> list[str]:
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("no nm (binutils) on PATH")
    lines = []
    for obj in objs:
        out = subprocess.run(
            [nm, "-u", "-P", str(obj)], capture_output=True, text=True, check=True
        ).stdout
        for line in out.splitlines():
            sym = line.split()[0] if line.split() else ""
            call = os_call(sym)
            if call:
                shown = sym if sym == call else f"{sym} ({call})"
                lines.append(f"{obj.relative_to(CBUILD)}: {shown}")
    return lines


@pytest.mark.parametrize("folder", FOLDERS, ids=[f or "top" for f in FOLDERS])
def test_no_os_call_outside_prim(folder: str) -> None:
    objs = _objects().get(folder)
    if not objs:
        pytest.skip(f"nothing under src/{folder} is built in {CBUILD}")
    bad = _violations(objs)
    assert not bad, (
        f"direct OS calls in src/{folder} (use a _hm_prim_* wrapper of src/prim):\n"
        + "\n".join(bad)
    )


def test_no_os_call_in_other_folders() -> None:
    """A folder added under src/ later is held to the same rule."""
    others = {f: o for f, o in _objects().items() if f not in FOLDERS}
    bad = [line for objs in others.values() for line in _violations(objs)]
    assert not bad, "direct OS calls outside src/prim:\n" + "\n".join(bad)
