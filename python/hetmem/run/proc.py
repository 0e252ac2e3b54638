# SPDX-License-Identifier: BSD-3-Clause
"""The command as a child process of `hetmem run` (and `hetmem profile`):
spawning it, its exit status as a shell gives it, the signals hetmem
forwards to it or leaves to it, and the supervisor and temporary directory
that are cleaned up even if hetmem is killed (hetmem.run.supervise).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hetmem.errors import CommandNotExecutable, CommandNotFound, EnvironmentProblem, HetmemError
from hetmem.output import run_note as note
from hetmem.run import supervise
from hetmem.run.config import RunConfig


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


# How long `hetmem run` waits, once the command has ended, for the
# processes it started that outlive it (an Open MPI singleton's daemon
# ends just after the program): their statistics lines are then in.
ORPHAN_WAIT_S = 2.0


def _spawn(
    argv: list[str],
    env: dict[str, str],
    state: dict[str, Any],
    preexec: Callable[[], None] | None = None,
    adopt: bool = False,
) -> tuple[int, float]:
    """Runs argv with inherited fds; returns (exit status as a shell gives it,
    wall s). The child dies with hetmem (PR_SET_PDEATHSIG: SIGKILL when the
    thread that forked it, this one, ends), and a supervisor in
    state["supervisor"] is told its pid. adopt: the command's processes
    that outlive it are waited for, up to ORPHAN_WAIT_S (the interposer
    of each writes its statistics line at exit, into a folder that is
    removed after the run); wall time is the command's alone."""
    t0 = time.perf_counter()
    state["spawning"] = True
    parent = os.getpid()
    if adopt:
        adopt = supervise.adopt_orphans()

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
    if adopt:
        _wait_orphans(sup)
    return (128 - rc if rc < 0 else rc), wall


def _wait_orphans(sup: supervise.Supervisor | None) -> None:
    """The command's processes that outlived it, waited for; one note for
    those still running after ORPHAN_WAIT_S."""
    keep = {sup.pid} if sup is not None and sup.pid is not None else set()
    left = supervise.reap_children(keep, ORPHAN_WAIT_S)
    if left:
        note(
            f"{len(left)} process(es) the command started still run "
            f"{ORPHAN_WAIT_S:g} s after it ended (pid {', '.join(map(str, left))}): "
            "their statistics are not in this run's"
        )


def _spawn_error(name: str, exc: OSError | subprocess.SubprocessError) -> HetmemError:
    """exec's failure as a shell reports it: 127 for a missing file (a
    script's missing interpreter too), 126 for anything else."""
    if not isinstance(exc, OSError):
        return EnvironmentProblem(f"cannot start '{name}': {exc}")
    if exc.errno == errno.ENOENT:
        return CommandNotFound(f"cannot run '{name}': {exc.strerror}")
    return CommandNotExecutable(f"cannot run '{name}': {exc.strerror}")


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
