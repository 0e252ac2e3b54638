# SPDX-License-Identifier: BSD-3-Clause
"""What `hetmem run` (and `hetmem profile`) check before the command starts:
the command can be run, the storage tier is usable, the pager opens with the
run's settings. Each problem is a one-line error (hetmem.errors) and exit
status 2, or 127 and 126 for a command that is missing or cannot be
executed, as a shell gives.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import tempfile
from pathlib import Path

from hetmem import _native
from hetmem.errors import (
    CommandNotExecutable,
    CommandNotFound,
    EnvironmentProblem,
    NativeError,
    UsageError,
)
from hetmem.output import check_shared_dir
from hetmem.run.config import RunConfig
from hetmem.sizes import parse_size


def default_storage() -> Path:
    """The storage option's default, as the runtime resolves it."""
    with _native.Context() as ctx:
        return Path(ctx.default_storage_dir())


def check_threshold(threshold: int | None) -> None:
    """The interposer's threshold, when given: at least one page (a block
    below a page cannot have pages of its own on a tier)."""
    if threshold is not None and threshold < os.sysconf("SC_PAGE_SIZE"):
        raise UsageError("--threshold must be at least one page")


def check_storage(path: Path, need_bytes: int) -> None:
    """A directory the pager or a swap file can use: exists, writable, not
    full, and not one where any user could swap hetmem's files for symlinks."""
    if not path.exists():
        raise UsageError(f"storage directory '{path}' does not exist")
    if not path.is_dir():
        raise UsageError(f"storage directory '{path}' is not a directory")
    check_shared_dir(path, "--storage")
    try:
        fd, probe = tempfile.mkstemp(prefix=".hetmem-check-", dir=path)
    except OSError as exc:
        raise UsageError(f"storage directory '{path}' is not writable: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free < need_bytes:
        raise UsageError(
            f"storage directory '{path}' is full: {free} bytes free, {need_bytes} needed"
        )


def _search_path(name: str) -> list[str]:
    dirs = (os.environ.get("PATH") or os.defpath).split(os.pathsep)
    return [os.path.join(d or ".", name) for d in dirs]


def resolve_command(argv: list[str], verb: str = "run") -> str:
    """The path of the command's executable, as the shell would find it: a
    missing one is CommandNotFound (exit 127), one that exists but cannot be
    run CommandNotExecutable (126), as a shell gives. verb: the hetmem verb
    whose usage the error for no command shows."""
    if not argv:
        raise UsageError(f"no command given: hetmem {verb} [OPTIONS] -- CMD [ARGS...]")
    exe = argv[0]
    if "/" not in exe:
        found = shutil.which(exe)
        if found and not os.path.isdir(found):
            return found
        present = [p for p in _search_path(exe) if os.path.exists(p)]
        if not present:
            raise CommandNotFound(f"'{exe}': command not found")
        exe = present[0]
    if not os.path.exists(exe):
        raise CommandNotFound(f"'{exe}': no such file")
    if os.path.isdir(exe):
        raise CommandNotExecutable(f"'{exe}': is a directory")
    if not os.access(exe, os.X_OK):
        raise CommandNotExecutable(f"'{exe}': permission denied (not executable)")
    return exe


def is_static_elf(path: str) -> bool:
    """True for an ELF executable without a program interpreter (PT_INTERP):
    statically linked, so the dynamic loader never runs and LD_PRELOAD, the
    interposer's only way in, is ignored. Scripts and unreadable files: False."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
                return False
            end = "<" if ident[5] == 1 else ">"
            if ident[4] == 2:
                (phoff,) = struct.unpack_from(end + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
            else:
                (phoff,) = struct.unpack_from(end + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 42)
            if phnum == 0 or phentsize < 4:
                return False
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    types = [struct.unpack_from(end + "I", table, i * phentsize)[0] for i in range(phnum)
             if (i + 1) * phentsize <= len(table)]  # fmt: skip
    PT_INTERP = 3
    return PT_INTERP not in types


def warn_if_not_interposable(argv: list[str], verb: str) -> None:
    """One warning when the command's own executable cannot load the interposer."""
    exe = resolve_command(argv)
    if is_static_elf(exe):
        what = "profiled" if verb == "profile" else "tiered"
        msg = (
            f"hetmem {verb}: warning: {argv[0]} is statically linked: LD_PRELOAD cannot reach "
            f"its allocations, so its own memory is not {what} (programs it starts may be)\n"
        )
        os.write(2, msg.encode())


def check_pager(cfg: RunConfig) -> None:
    """Opens (and closes) a pager with the run's settings through libhetmem.so,
    so that a bad budget, storage tier or missing userfaultfd permission is
    reported here rather than from inside the command."""
    so = _native.lib()
    with _native.Context() as ctx:
        opts = {o["name"]: o["value"] for o in ctx.options()}
    unit = parse_size(opts.get("fetch_unit", "0") or "0", "HETMEM_FETCH_UNIT")
    if unit and cfg.budget < unit:
        raise UsageError(
            f"fast budget {cfg.budget} bytes is smaller than one fetch unit ({unit} bytes)"
        )
    if not _native.has_pager():
        raise EnvironmentProblem("this build of hetmem has no pager: cache mode is unavailable")
    with _native.Context() as ctx:
        ctx.set_option("fast_budget", str(cfg.budget))
        ctx.set_option("storage", str(cfg.storage))
        pc = _native.PagerConfig()
        pc.size = ctypes.sizeof(pc)
        so.hm_pager_config_default(ctx.handle, ctypes.byref(pc))
        cfg.fetch_unit = int(pc.fetch_unit)
        if cfg.budget < cfg.fetch_unit:
            raise UsageError(
                f"fast budget {cfg.budget} bytes is smaller than one fetch unit "
                f"({cfg.fetch_unit} bytes)"
            )
        pc.dram_budget = cfg.budget
        storage = str(cfg.storage).encode()
        pc.backing_dir = storage
        pager = ctypes.c_void_p()
        rc = so.hm_pager_open(ctx.handle, ctypes.byref(pc), ctypes.byref(pager))
        if rc:
            raise NativeError(
                f"cannot start cache mode: {ctx.last_error() or _native.strerror(rc)}", rc
            )
        so.hm_pager_close(pager)
