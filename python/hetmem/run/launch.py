"""`hetmem run`: run an unmodified command in one memory mode.

- dram: the command as is (the all-DRAM reference);
- cache: libhetmem_preload.so serves every allocation of at least the
  threshold from pager regions whose DRAM cache is the fast budget;
- swap: the baseline a user gets without hetmem: a memory cgroup limited to
  the budget plus a swap file of sufficient size on the same storage tier;
- flat / hybrid: profile-guided placement. A placement (`hetmem advise`) is
  turned into the compact table (hetmem.placement.fileformat.prepare_for_run, with its
  build-id checks) and handed to the interposer, which matches every
  allocation of at least the threshold to a site and serves it from the
  site's tier: the fastest tier from glibc (DRAM, counted against the fast
  budget), a slower NUMA node with mbind, the storage tier through the pager.
  flat gives the pager a minimal cache; hybrid gives it what the pinned
  (fast-tier) sites leave of the budget.

Whatever the mode, the command's stdin, stdout and stderr are inherited
untouched and its exit status becomes hetmem's (a command killed by signal N
gives 128+N, as in a shell). Everything a user can get wrong is checked
before the command starts: a one-line error and exit status 2 (127 and 126
for a command that is missing or cannot be executed, as a shell gives).

The command dies with hetmem (PR_SET_PDEATHSIG), and what a run makes (swap
area, cgroup, temporary files) is removed by hetmem, or by its supervisor
(hetmem.run.supervise) if hetmem is killed with SIGKILL. A later run removes only
what an earlier one provably left (its owner record says so).
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
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import _native
from hetmem.errors import (
    CommandNotExecutable,
    CommandNotFound,
    EnvironmentProblem,
    HetmemError,
    NativeError,
    UsageError,
)
from hetmem.output import check_output_dir, check_shared_dir, write_atomic
from hetmem.output import run_note as note
from hetmem.placement import fileformat as placement_mod
from hetmem.run import autofast, diagnose, mempolicy, supervise
from hetmem.run.swap import MemoryCgroup, SwapFile, SwapSampler, clean_stale, read_swaps
from hetmem.sizes import format_size, parse_size

SCHEMA_VERSION = 1
MODES = ("dram", "cache", "swap", "flat", "hybrid")
PLACE_MODES = ("flat", "hybrid")
STORAGE_FULL_POLICIES = ("error", "fallback")  # the interposer's HETMEM_STORAGE_FULL
PRELOAD_NAME = "libhetmem_preload.so"
CGROUP_PREFIX = supervise.CGROUP_PREFIX
GIB = 1 << 30


@dataclass
class RunConfig:
    mode: str
    command: list[str]
    budget: int = 0
    storage: Path | None = None
    stats: Path | None = None
    threshold: int | None = None
    swap_size: int | None = None
    placement: Path | None = None
    storage_full: str | None = None
    fetch_unit: int = 0
    notes: list[str] = field(default_factory=list)
    # (mode, nodes): the whole command's NUMA policy, as numactl sets it
    numa: tuple[str, str] | None = None
    # (min, max) bytes: unmatched allocations to the fastest tier (autohbw)
    auto_fast: tuple[int, int] | None = None


# ---------------------------------------------------------------------------
# Validation (before anything runs)
# ---------------------------------------------------------------------------
def default_storage() -> Path:
    """The storage option's default, as the runtime resolves it."""
    with _native.Context() as ctx:
        return Path(ctx.default_storage_dir())


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


def resolve_command(argv: list[str]) -> str:
    """The path of the command's executable, as the shell would find it: a
    missing one is CommandNotFound (exit 127), one that exists but cannot be
    run CommandNotExecutable (126), as a shell gives."""
    if not argv:
        raise UsageError("no command given: hetmem run [OPTIONS] -- CMD [ARGS...]")
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


def preload_path() -> Path:
    return _native.library_dir() / PRELOAD_NAME


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


def validate(cfg: RunConfig) -> None:
    if cfg.mode not in MODES:
        raise UsageError(f"unknown mode '{cfg.mode}' (choose from {', '.join(MODES)})")
    if cfg.auto_fast is not None and cfg.mode not in PLACE_MODES:
        raise UsageError("--auto-fast is for --mode flat or hybrid")
    resolve_command(cfg.command)
    if cfg.stats is not None:  # written after the command: checked before it runs
        check_output_dir(cfg.stats.resolve(), "--stats")
    if cfg.mode == "dram":
        return
    if cfg.budget <= 0:
        raise UsageError(f"--mode {cfg.mode} needs --fast-budget SIZE (or HETMEM_FAST_BUDGET)")
    if cfg.storage is None:
        cfg.storage = default_storage()
    cfg.storage = cfg.storage.resolve()
    if cfg.mode in PLACE_MODES:
        validate_place(cfg)
        return
    if cfg.placement is not None:
        raise UsageError("--placement is for --mode flat or hybrid")
    if cfg.mode == "cache":
        _validate_cache(cfg)
    else:
        _validate_swap(cfg)


def _validate_cache(cfg: RunConfig) -> None:
    assert cfg.storage is not None
    if cfg.threshold is not None and cfg.threshold < os.sysconf("SC_PAGE_SIZE"):
        raise UsageError("--threshold must be at least one page")
    if not preload_path().exists():
        raise EnvironmentProblem(f"{preload_path()} is missing: reinstall hetmem")
    check_storage(cfg.storage, 1 << 20)
    check_pager(cfg)


def _validate_swap(cfg: RunConfig) -> None:
    assert cfg.storage is not None
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "--mode swap needs root (it creates a memory cgroup and a swap file)"
        )
    check_storage(cfg.storage, 1 << 20)
    free = _free_bytes(cfg.storage)
    if cfg.swap_size is None:
        # The footprint is unknown: 4x the budget, at least 8 GiB, but
        # never more than 90% of what the storage tier has free.
        cfg.swap_size = min(max(4 * cfg.budget, 8 * GIB), int(free * 0.9))
    if cfg.swap_size < cfg.budget or cfg.swap_size < (16 << 20):
        raise UsageError(
            f"swap size {cfg.swap_size} bytes is too small "
            f"(storage '{cfg.storage}' has {free} bytes free)"
        )
    if cfg.swap_size > free:
        raise UsageError(
            f"storage directory '{cfg.storage}' is full: {free} bytes free, "
            f"swap file needs {cfg.swap_size}"
        )


def validate_place(cfg: RunConfig) -> None:
    if cfg.placement is None and cfg.auto_fast is None:
        raise UsageError(
            f"--mode {cfg.mode} needs --placement FILE (from `hetmem advise`) or --auto-fast"
        )
    if cfg.threshold is not None and cfg.threshold < os.sysconf("SC_PAGE_SIZE"):
        raise UsageError("--threshold must be at least one page")
    if not preload_path().exists():
        raise EnvironmentProblem(f"{preload_path()} is missing: reinstall hetmem")
    if cfg.placement is None:
        return
    if not cfg.placement.is_file():
        raise UsageError(f"placement file '{cfg.placement}' does not exist")
    p = placement_mod.load(cfg.placement)  # SchemaError: one line, exit 2
    if any(t.kind == "storage" for t in p.tiers):
        assert cfg.storage is not None
        check_storage(cfg.storage, 1 << 20)
        check_pager(cfg)


def pinned_bytes(p: placement_mod.Placement, budget: int) -> int:
    """Fast-tier bytes the placement pins: the sum of its fast sites' peak
    live bytes (an upper bound of their concurrent use) and of its split
    sites' heads, at most the budget."""
    fast = sum(s.peak_live_bytes for s in p.sites if s.tier == 0)
    heads = sum(s.split_bytes for s in p.sites if s.tier > 0 and s.split_bytes)
    return min(budget, fast + heads)


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# ---------------------------------------------------------------------------
# Running the command
# ---------------------------------------------------------------------------
class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_FORWARDED = (signal.SIGTERM, signal.SIGHUP)
_TTY_SIGNALS = (signal.SIGINT, signal.SIGQUIT)


@contextmanager
def _signals(state: dict[str, Any]) -> Iterator[None]:
    """While a child runs, SIGTERM and SIGHUP are forwarded to it and SIGINT
    and SIGQUIT are left to it (the terminal sends them to the whole
    foreground group, as with a shell). With no child running, any of them
    interrupts hetmem, whose clean-up then runs."""

    def handler(signum: int, frame: object) -> None:
        proc = state.get("proc")
        if proc is not None and proc.poll() is None:
            if signum in _FORWARDED:
                with suppress(ProcessLookupError):
                    proc.send_signal(signum)
            return
        if state.get("spawning"):
            # The child may exist while Popen has not returned yet (a busy
            # child can starve this process on a small machine): _spawn
            # forwards it once the child is known, or raises it if none came.
            if signum in _FORWARDED:
                state.setdefault("pending", signum)
            return
        if state.get("tearing_down"):
            state["late_signal"] = signum
            return
        raise _Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in (*_FORWARDED, *_TTY_SIGNALS)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _spawn(
    argv: list[str],
    env: dict[str, str],
    state: dict[str, Any],
    preexec: Callable[[], None] | None = None,
) -> tuple[int, float]:
    """Runs argv with inherited fds; returns (exit status as a shell gives it,
    wall s). The child dies with hetmem (PR_SET_PDEATHSIG: SIGKILL when the
    thread that forked it, this one, ends), and a supervisor in
    state["supervisor"] is told its pid."""
    t0 = time.perf_counter()
    state["spawning"] = True
    parent = os.getpid()

    policy = state.get("mempolicy_setup")

    def child_setup() -> None:
        supervise.die_with_parent(parent)
        if policy is not None:
            policy()
        if preexec is not None:
            preexec()

    try:
        proc = subprocess.Popen(argv, env=env, preexec_fn=child_setup)
    except (OSError, subprocess.SubprocessError) as exc:
        state["spawning"] = False
        if "pending" in state:
            raise _Interrupted(state.pop("pending")) from None
        raise _spawn_error(argv[0], exc) from None
    state["proc"] = proc
    state["spawning"] = False
    sup: supervise.Supervisor | None = state.get("supervisor")
    start = supervise.start_time(proc.pid)
    if sup is not None and start is not None:
        sup.add(procs=[[proc.pid, start]])
    pending = state.pop("pending", None)
    if pending is not None:
        with suppress(ProcessLookupError):
            proc.send_signal(pending)
    rc = proc.wait()
    wall = time.perf_counter() - t0
    state["proc"] = None
    return (128 - rc if rc < 0 else rc), wall


def _spawn_error(name: str, exc: OSError | subprocess.SubprocessError) -> HetmemError:
    """exec's failure as a shell reports it: 127 for a missing file (a
    script's missing interpreter too), 126 for anything else."""
    if not isinstance(exc, OSError):
        return EnvironmentProblem(f"cannot start '{name}': {exc}")
    if exc.errno == errno.ENOENT:
        return CommandNotFound(f"cannot run '{name}': {exc.strerror}")
    return CommandNotExecutable(f"cannot run '{name}': {exc.strerror}")


def _read_interposer_stats(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with suppress(OSError), open(path) as f:
        for line in f:
            with suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
    return out


def _sum_numbers(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise sum of the top-level integers (peaks: maximum); other
    fields are taken from the first."""
    total: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                total.setdefault(k, v)
            elif k.startswith("peak") or k in ("table_capacity", "threshold"):
                total[k] = max(total.get(k, v), v)
            else:
                total[k] = total.get(k, 0) + v
    return total


def _merge_pagers(pagers: list[dict[str, Any]]) -> dict[str, Any]:
    """One pager object for the run: the first process's configuration and
    features, counters summed over every process that opened a pager."""
    merged = dict(pagers[0])
    counters = [p["counters"] for p in pagers if isinstance(p.get("counters"), dict)]
    if counters:
        merged["counters"] = _sum_numbers(counters)
    else:
        merged = _sum_numbers(pagers)
    merged["processes"] = len(pagers)
    return merged


def _cache_env(cfg: RunConfig, stats_file: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    so = str(preload_path())
    env["LD_PRELOAD"] = so + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["HETMEM_FAST_BUDGET"] = str(cfg.budget)
    env["HETMEM_STORAGE"] = str(cfg.storage)
    if cfg.threshold is not None:
        env["HETMEM_ALLOC_THRESHOLD"] = str(cfg.threshold)
    if cfg.storage_full is not None:
        env["HETMEM_STORAGE_FULL"] = cfg.storage_full
    if stats_file is not None:
        env["HETMEM_STATS"] = str(stats_file)
    else:
        env.pop("HETMEM_STATS", None)
    return env


def run(cfg: RunConfig) -> int:
    """Validates cfg, runs the command, writes --stats; returns its exit status."""
    validate(cfg)
    if cfg.mode == "cache" or cfg.mode in PLACE_MODES:
        warn_if_not_interposable(cfg.command, "run")
    stats: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "hetmem-run",
        "mode": cfg.mode,
        "budget": cfg.budget or None,
        "storage": str(cfg.storage) if cfg.storage else None,
        "command": cfg.command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    state: dict[str, Any] = {}
    if cfg.numa is not None:
        policy = mempolicy.resolve(*cfg.numa)
        stats["mempolicy"] = policy.resolved
        state["mempolicy_setup"] = mempolicy.child_setup(policy)
    rc = 0
    try:
        with _signals(state), _supervised(cfg, state):
            if cfg.mode == "dram":
                rc, wall = _spawn(cfg.command, dict(os.environ), state)
            elif cfg.mode == "cache":
                rc, wall = _run_cache(cfg, state, stats)
            elif cfg.mode in PLACE_MODES:
                rc, wall = _run_place(cfg, state, stats)
            else:
                rc, wall = _run_swap(cfg, state, stats)
    except _Interrupted as exc:
        os.write(2, f"hetmem run: interrupted by signal {exc.signum}; cleaned up\n".encode())
        return 128 + exc.signum
    stats["wall_s"] = round(wall, 6)
    stats["exit_code"] = rc
    if rc > 128:
        stats["signal"] = rc - 128
    if cfg.stats is not None:
        _write_json(cfg.stats, stats)
    return rc


@contextmanager
def _supervised(cfg: RunConfig, state: dict[str, Any]) -> Iterator[None]:
    """A supervisor for the modes that make something to remove (swap
    area, cgroup, temporary files): if hetmem is killed with SIGKILL it
    removes them and the command. dram mode makes nothing: the command's
    PR_SET_PDEATHSIG is enough."""
    if cfg.mode == "dram":
        yield
        return
    try:
        sup = supervise.Supervisor().start()
    except OSError as exc:
        raise EnvironmentProblem(f"cannot start the clean-up supervisor: {exc.strerror}") from None
    state["supervisor"] = sup
    try:
        yield
    finally:
        state.pop("supervisor", None)
        sup.close()


@contextmanager
def _run_tmpdir(state: dict[str, Any]) -> Iterator[Path]:
    """A temporary directory that the supervisor removes should hetmem die."""
    with tempfile.TemporaryDirectory(prefix="hetmem-run-") as tmp:
        sup: supervise.Supervisor | None = state.get("supervisor")
        if sup is not None:
            sup.add(trees=[tmp])
        yield Path(tmp)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """--stats: never through a symlink, never half-written (write_atomic)."""
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _run_cache(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    stats["threshold"] = cfg.threshold
    stats["fetch_unit"] = cfg.fetch_unit
    with _run_tmpdir(state) as tmp:
        # always read back: a full storage tier is reported with or without --stats
        lines_file = tmp / "interposer.jsonl"
        rc, wall = _spawn(cfg.command, _cache_env(cfg, lines_file), state)
        procs = _read_interposer_stats(lines_file)
    pagers = [p["pager"] for p in procs if isinstance(p.get("pager"), dict)]
    stats["pager"] = _merge_pagers(pagers) if pagers else None
    stats["interposer"] = (
        _sum_numbers([p["interposer"] for p in procs if isinstance(p.get("interposer"), dict)])
        if procs
        else None
    )
    _note_tiers(stats, procs, cfg)
    if procs and stats["threshold"] is None:
        stats["threshold"] = procs[0].get("threshold")
    stats["processes"] = procs
    return rc, wall


def _note_tiers(stats: dict[str, Any], procs: list[dict[str, Any]], cfg: RunConfig) -> None:
    """The storage-full counters and the pager's figures into stats, and
    what the user hears of them at the end of the run."""
    stats["storage_full"] = _merge_storage_full(procs)
    _note_storage_full(stats["storage_full"], cfg)
    _note_pager(stats, cfg.mode in ("cache", "hybrid"))
    _note_statics(procs)


def _note_statics(procs: list[dict[str, Any]]) -> None:
    """Once per program and segment: large static data that stayed in plain
    memory (all of it, or the part written before main), with its size and
    why; the interposer's statistics list every segment."""
    said: set[tuple[str, str]] = set()
    for q in procs:
        for st in q.get("statics") or ():
            key = (str(st.get("module")), str(st.get("segment")))
            why, size, managed = (
                st.get("why"),
                int(st.get("bytes", 0)),
                int(st.get("managed_bytes", 0)),
            )
            if not why or key in said:
                continue
            said.add(key)
            part = f", {format_size(managed)} of it behind the pager" if managed else ""
            seg = ".bss" if key[1] == "bss" else ".data"
            note(
                f"static data of {os.path.basename(key[0])} ({seg}, {format_size(size)}{part}) "
                f"is not managed: {why}"
            )


def _note_pager(stats: dict[str, Any], say: bool) -> None:
    """The pager's end-of-run figures (in --stats as pager_summary; on
    stderr, when say, if the working set was read back several times) and
    the hint when the budget was far below it. Flat mode does not say them:
    its pager's cache is small by design, the placement put those sites on
    the storage tier."""
    pager = stats.get("pager")
    summary = diagnose.summarize(pager)
    stats["pager_summary"] = summary
    if not say:
        return
    text = diagnose.line(summary)
    if text:
        note(text)
    own = int(((pager or {}).get("counters") or {}).get("own_bytes", 0))
    tip = diagnose.hint(summary, own)
    if tip:
        note(tip)


def _merge_storage_full(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The storage-full counters of every process (the interposer's
    HETMEM_STORAGE_FULL policy): the policy of the first, counts summed."""
    full = [q["storage_full"] for q in procs if isinstance(q.get("storage_full"), dict)]
    return _sum_numbers(full) if full else None


def _note_storage_full(full: dict[str, Any] | None, cfg: RunConfig) -> None:
    """The end-of-run word on a storage tier that could not back large
    allocations: how many failed (policy error) or how far DRAM went beyond
    the fast budget (policy fallback; an upper bound, as frees of those
    blocks are not tracked)."""
    if not full:
        return
    if full.get("refusals"):
        note(
            f"{full['refusals']} large allocation(s) ({format_size(full['refused_bytes'])}) "
            f"failed: storage tier {cfg.storage} could not back them; free space there, "
            "choose another --storage, or --storage-full fallback"
        )
    if full.get("fallbacks"):
        note(
            f"{full['fallbacks']} large allocation(s) came from DRAM because storage tier "
            f"{cfg.storage} could not back them: up to {format_size(full['fallback_bytes'])} "
            f"beyond the fast budget of {format_size(cfg.budget)}"
        )


def _merge_placement(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-site outcomes summed over the processes of the command."""
    pls = [p["placement"] for p in procs if isinstance(p.get("placement"), dict)]
    if not pls:
        return None
    out: dict[str, Any] = {
        "place_mode": pls[0].get("place_mode"),
        "pager_budget": pls[0].get("pager_budget"),
        "processes": len(pls),
        "huge_page_size": pls[0].get("huge_page_size", 0),
        "huge_page_bytes": sum(pl.get("huge_page_bytes", 0) for pl in pls),
        "auto_fast": pls[0].get("auto_fast"),  # the interposer's reading of the range
    }
    tiers: list[dict[str, Any]] = [dict(t) for t in pls[0].get("tiers", [])]
    for pl in pls[1:]:
        for t, o in zip(tiers, pl.get("tiers", []), strict=False):
            t["allocations"] += o.get("allocations", 0)
            t["live_bytes"] += o.get("live_bytes", 0)
            t["peak_bytes"] = max(t["peak_bytes"], o.get("peak_bytes", 0))
    out["tiers"] = tiers

    def add(a: dict[str, Any], b: dict[str, Any]) -> None:
        a["allocations"] = a.get("allocations", 0) + b.get("allocations", 0)
        a["overflows"] = a.get("overflows", 0) + b.get("overflows", 0)
        old = a.get("bytes", [])
        new = b.get("bytes", [])
        a["bytes"] = [x + y for x, y in zip(old + [0] * (len(new) - len(old)), new, strict=False)]
        if len(old) > len(new):
            a["bytes"] += old[len(new) :]

    unmatched: dict[str, Any] = {}
    sites: dict[int, dict[str, Any]] = {}
    for pl in pls:
        add(unmatched, pl.get("unmatched", {}))
        for s in pl.get("sites", []):
            cur = sites.setdefault(
                int(s["id"]),
                {"id": s["id"], "tier": s["tier"], "split_bytes": s.get("split_bytes", 0)},
            )
            cur["split_allocations"] = cur.get("split_allocations", 0) + s.get(
                "split_allocations", 0
            )
            add(cur, s)
    out["unmatched"] = unmatched
    out["sites"] = [sites[k] for k in sorted(sites)]
    out["overflows"] = sum(s["overflows"] for s in out["sites"]) + unmatched.get("overflows", 0)
    cache = [pl.get("match_cache", {}) for pl in pls]
    out["match_cache"] = {
        "hits": sum(c.get("hits", 0) for c in cache),
        "misses": sum(c.get("misses", 0) for c in cache),
    }
    return out


def _note_outcomes(
    pl: dict[str, Any] | None, fallbacks: int, fast: int, have_stats: bool, slowest: str
) -> None:
    """Allocations that a full tier sent to a slower one, that no tier could
    serve, or that matched no site (and went to the slowest tier): the user
    hears of them at the end of the run."""
    if not pl:
        return
    um = pl.get("unmatched") or {}
    if um.get("allocations"):
        note(
            f"{um['allocations']} large allocation(s) ({format_size(sum(um.get('bytes', [])))}) "
            f"matched no site of the placement and went to its slowest tier, {slowest}; a "
            "profile of a run of this build that makes them places them"
        )
    if fallbacks:
        note(
            f"{fallbacks} large allocation(s) could not be served by any tier of the "
            "placement and came from glibc's memory"
            + ("" if have_stats else "; --stats FILE gives the run's counters")
        )
    if not pl.get("overflows"):
        return
    down = 0
    for s in pl.get("sites", []):
        down += sum(b for t, b in enumerate(s.get("bytes", [])) if t > s["tier"])
    note(
        f"{pl['overflows']} allocation(s) of placed sites found their tier full and went to a "
        f"slower one ({format_size(down)}; fast capacity {format_size(fast)} per process)"
        + ("" if have_stats else "; --stats FILE gives them per site")
    )


def _write_compact(cfg: RunConfig, compact: Path, stats: dict[str, Any]) -> tuple[list[str], str]:
    """The interposer's table: from --placement, else (--auto-fast alone)
    made from this machine's tiers; returns the warnings to print and the
    slowest tier's name."""
    if cfg.placement is None:
        p, notes = autofast.machine_placement()
        p.tiers[0].capacity_bytes = cfg.budget
        write_atomic(compact, placement_mod.compact(p))
        for n in notes:
            note(n)
        stats["fast_capacity"] = cfg.budget
        return [], p.tiers[-1].name
    p = placement_mod.load(cfg.placement)
    fast = cfg.budget if cfg.mode == "flat" else pinned_bytes(p, cfg.budget)
    stats["fast_capacity"] = fast
    warnings = placement_mod.prepare_for_run(
        cfg.placement, compact, cfg.command[0], fast_capacity=fast
    )
    return warnings, p.tiers[-1].name if p.tiers else "?"


def _run_place(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    stats["placement_file"] = str(cfg.placement) if cfg.placement else None
    stats["threshold"] = cfg.threshold
    if cfg.auto_fast is not None:
        stats["auto_fast"] = {"min": cfg.auto_fast[0], "max": cfg.auto_fast[1]}
        if cfg.threshold is None or cfg.threshold > cfg.auto_fast[0]:
            # the interposer sees only allocations of at least the threshold
            cfg.threshold = max(cfg.auto_fast[0], os.sysconf("SC_PAGE_SIZE"))
            stats["threshold"] = cfg.threshold
    with _run_tmpdir(state) as tmp:
        compact = tmp / "placement.compact"
        warnings, slowest = _write_compact(cfg, compact, stats)
        fast = stats["fast_capacity"]
        for w in warnings:
            os.write(2, f"hetmem run: warning: {w}\n".encode())
        stats["warnings"] = warnings
        # always read back: a site that did not fit is reported with or
        # without --stats
        lines_file = tmp / "interposer.jsonl"
        env = _cache_env(cfg, lines_file)
        env["HETMEM_PLACEMENT"] = str(compact)
        env["HETMEM_PLACE_MODE"] = cfg.mode
        if cfg.auto_fast is not None:
            env["HETMEM_AUTO_FAST"] = autofast.env_value(cfg.auto_fast)
        env.pop("HETMEM_PROFILE", None)
        rc, wall = _spawn(cfg.command, env, state)
        procs = _read_interposer_stats(lines_file)
    pagers = [q["pager"] for q in procs if isinstance(q.get("pager"), dict)]
    stats["pager"] = _merge_pagers(pagers) if pagers else None
    stats["interposer"] = (
        _sum_numbers([q["interposer"] for q in procs if isinstance(q.get("interposer"), dict)])
        if procs
        else None
    )
    stats["placement"] = _merge_placement(procs)
    _note_tiers(stats, procs, cfg)
    # a full storage tier's fallbacks have their own note
    full_fallbacks = (stats["storage_full"] or {}).get("fallbacks", 0)
    fallbacks = (stats["interposer"] or {}).get("fallbacks", 0) - full_fallbacks
    _note_outcomes(
        stats["placement"],
        fallbacks,
        fast,
        cfg.stats is not None,
        slowest,
    )
    if procs and stats["threshold"] is None:
        stats["threshold"] = procs[0].get("threshold")
    stats["processes"] = procs
    return rc, wall


def _swap_record(swap: SwapFile, cg: MemoryCgroup, state: dict[str, Any]) -> str:
    """Writes the run's owner record (root's STATE_DIR) naming its swap file
    and cgroup, and tells the supervisor the same; returns the record's name."""
    rec = {"owner": swap.owner.to_json(), "swap": swap.entry, "cgroup": str(cg.path)}
    try:
        name = supervise.save_record(rec)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write the run record in {supervise.STATE_DIR}: {exc.strerror}"
        ) from None
    sup: supervise.Supervisor | None = state.get("supervisor")
    if sup is not None:
        sup.add(swap=swap.entry, cgroup=str(cg.path), record=name)
    return name


def _note_oom(cfg: RunConfig, cgs: dict[str, Any]) -> None:
    assert cfg.swap_size is not None
    # the sampler may miss a short run's peak; v1's memory+swap high-water
    # mark less the memory limit bounds it from below
    used = max(
        int(cgs.get("swap_peak_bytes") or 0),
        int(cgs.get("memsw_max_usage_bytes") or 0) - int(cgs.get("limit_bytes") or 0),
    )
    if used + (16 << 20) < cfg.swap_size:
        # swap was not full: the kernel gave up reclaiming (a working set
        # above the budget thrashes until reclaim makes no progress)
        why = (
            f"reclaim under the {cfg.budget} B budget made no progress with "
            f"{used >> 20} MiB of {cfg.swap_size >> 20} MiB swap in use: the "
            "working set is above the budget"
        )
    else:
        why = "the swap file was full: raise --swap-size"
    note(f"the command was killed by the OOM killer inside the swap cgroup ({why})")


def _run_swap(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    assert cfg.storage is not None and cfg.swap_size is not None
    stale = clean_stale(cfg.storage)
    if stale:
        note(f"removed what an earlier interrupted run left: {', '.join(stale)}")
    others = read_swaps()
    if others:
        names = ", ".join(f"{s['name']} (priority {s['priority']})" for s in others)
        note(
            f"other swap areas are active: {names}; hetmem's swap file has the highest "
            "priority, but the command's pages may also go there"
        )
    stats["swap_size"] = cfg.swap_size
    stats["other_swap"] = others
    owner = supervise.Owner.me()
    cg = MemoryCgroup(f"{CGROUP_PREFIX}{owner.pid}-{owner.start}")
    swap = SwapFile(cfg.storage, cfg.swap_size, owner)
    sampler = SwapSampler(swap)
    record = ""
    try:
        swap.create()
        recorded = cg.path
        record = _swap_record(swap, cg, state)
        swap.activate()
        cg.create(cfg.budget)
        if cg.path != recorded:  # cgroup v2 may have put it elsewhere
            record = _swap_record(swap, cg, state)
        stats["swap_file"] = str(swap.path)
        stats["cgroup"] = str(cg.path)
        sampler.start()
        rc, wall = _spawn(cfg.command, dict(os.environ), state, preexec=cg.join)
        sampler.stop.set()
        sampler.join()
        cgs = cg.stats()
        cgs["swap_peak_bytes"] = sampler.peak
        stats["swap"] = cgs
        if cgs.get("oom_kill"):
            _note_oom(cfg, cgs)
        return rc, wall
    finally:
        state["tearing_down"] = True
        sampler.stop.set()
        cg.remove()
        if swap.remove() and record:
            supervise.drop_record(record)
        state["tearing_down"] = False
