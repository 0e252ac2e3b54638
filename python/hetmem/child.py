# SPDX-License-Identifier: BSD-3-Clause
"""A command run by a hetmem verb (a bench run, a recommendation's run),
stopped cleanly when it runs too long or hetmem itself is stopped.

Most such commands are `hetmem run ...`, which holds things only it can
remove: a swap file switched on, a memory cgroup, backing files, and the
program it started. subprocess.run's timeout (and its way out on Ctrl-C)
sends SIGKILL to `hetmem run` alone: the program it started ran on as an
orphan, taking a CPU from every later run of a benchmark, and a swap file
stayed on. Here the command gets SIGTERM first (`hetmem run` passes it to
its program and removes what it made), SIGKILL only when it has not ended
within a grace period, and then whatever is left of its process group is
killed: a script's shell dies of SIGTERM while the program it started
runs on.

The command runs in a session of its own, so a terminal's Ctrl-C reaches
hetmem alone, which stops the command as above; output goes to files (a
pipe that fills while hetmem polls for the exit would block the command).
SIGTERM and SIGHUP, which by default end Python with no clean-up at all,
raise Interrupted within stop_on_signals() (the CLI runs every verb so):
the running command is stopped as above, temporary folders are removed.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, NamedTuple

from hetmem.errors import HetmemError

# After SIGTERM, `hetmem run` stops the command and removes what it made (a
# swap file, a memory cgroup, backing files); this is how long it may take.
TERM_GRACE_S = 60.0
# How often the exit is polled where there is no pidfd (os.wait4 has no timeout).
POLL_S = 0.02


class Interrupted(HetmemError):
    """SIGTERM or SIGHUP stopped hetmem (after its clean-up): exit status
    128 + the signal, as a shell gives."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_on_signals(
    signals: Sequence[int] = STOP_SIGNALS,
    exc: Callable[[int], BaseException] = Interrupted,
) -> Iterator[None]:
    """Within it, each of `signals` raises exc(signum) in the main thread,
    so that clean-up runs. A signal ignored when this began stays ignored
    (nohup's SIGHUP); outside the main thread, where Python cannot set a
    handler, it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise exc(signum)

    old = {s: signal.getsignal(s) for s in signals}
    for s, h in old.items():
        if h != signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:  # None: set outside Python, cannot be put back
                signal.signal(s, h)


class Finished(NamedTuple):
    """How a command ended. returncode as subprocess gives it (-N: killed
    by signal N); stdout and stderr the text written, when captured ("" when
    they went to files the caller gave); max_rss the largest process of its
    tree, in bytes; timed_out: it ran past the timeout and was stopped."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss: int
    timed_out: bool


def run(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[bytes] | None = None,
    grace_s: float = TERM_GRACE_S,
) -> Finished:
    """Runs argv to its end, or stops it `timeout` seconds after its start
    (see the module's text). stdout/stderr: open files to write to; None
    captures that stream and returns it as text. Any exception while it
    runs (KeyboardInterrupt, a signal turned into one) stops it the same
    way and is raised again. OSError when argv cannot be started."""
    with _Stream(stdout) as out, _Stream(stderr) as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
        )  # fmt: skip
        deadline = None if timeout is None else t0 + timeout
        try:
            status, ru = _wait(proc.pid, deadline)
        except BaseException:
            try:
                stop(proc.pid, grace_s)
            finally:
                proc.returncode = -signal.SIGKILL  # reaped: Popen must not wait again
            raise
        timed_out = status is None
        if status is None:
            status, ru = stop(proc.pid, grace_s)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        return Finished(
            proc.returncode, _text(out, stdout), _text(err, stderr), wall,
            ru.ru_maxrss * 1024, timed_out,
        )  # fmt: skip


def stop(pid: int, grace_s: float = TERM_GRACE_S) -> tuple[int, Any]:
    """SIGTERM to pid, SIGKILL if it has not ended within grace_s; then
    SIGKILL to what is left of its process group (pid leads it). Its wait
    status and rusage."""
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        status, ru = _wait(pid, time.perf_counter() + grace_s)
    except BaseException:  # a second Ctrl-C: no more grace
        _kill(pid)
        raise
    if status is None:
        return _kill(pid)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return status, ru


def _kill(pid: int) -> tuple[int, Any]:
    """SIGKILL to pid's process group, then pid reaped."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status, ru = os.wait4(pid, 0)
    return status, ru


def _wait(pid: int, deadline: float | None) -> tuple[int | None, Any]:
    """(wait status, rusage) of pid, or (None, None) at the deadline. Woken
    by the exit itself through a pidfd (a bench's wall time is not rounded
    up to a poll); polled where the kernel has none (before Linux 5.3)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = -1
    try:
        while True:
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got:
                return status, ru
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return None, None
            if fd < 0:
                time.sleep(POLL_S if left is None else min(POLL_S, left))
            else:
                select.select([fd], [], [], left)
    finally:
        if fd >= 0:
            os.close(fd)


class _Stream:
    """The caller's file, or a temporary one that captures the stream."""

    def __init__(self, given: IO[bytes] | None) -> None:
        self.given = given
        self.tmp: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.given is not None:
            return self.given
        self.tmp = tempfile.TemporaryFile()
        return self.tmp

    def __exit__(self, *exc: object) -> None:
        if self.tmp is not None:
            self.tmp.close()


def _text(f: IO[bytes], given: IO[bytes] | None) -> str:
    if given is not None:
        return ""
    f.seek(0)
    return f.read().decode(errors="replace")
