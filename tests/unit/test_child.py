# SPDX-License-Identifier: BSD-3-Clause
"""hetmem.child: a command a verb runs is stopped cleanly (SIGTERM first,
so that `hetmem run` removes what it made; then SIGKILL to what is left of
its process group), on a timeout and when hetmem itself is stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from hetmem import child

# A command's time limit in the timeout tests: long enough for Python to
# start and install its handler on a loaded machine (a SIGTERM before that
# kills it with -15 and no clean-up), short enough to keep the tests quick.
TIMEOUT_S = 5.0

# Traps SIGTERM: writes `term` in its folder and exits 7. Starts a
# grandchild first that ignores SIGTERM and records its pid.
TRAPS = r"""
import os, signal, subprocess, sys, time
d = sys.argv[1]
g = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(os.path.join(d, "grandchild"), "w").write(str(g.pid))
def on_term(s, f):
    open(os.path.join(d, "term"), "w").write("1")
    sys.exit(7)
if sys.argv[2] == "trap":
    signal.signal(signal.SIGTERM, on_term)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(d, "ready"), "w").write("1")
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _no_grandchild_left(tmp_path: Path):
    """A failed test leaves no sleeping grandchild behind."""
    yield
    pid = tmp_path / "grandchild"
    if pid.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_a_timed_out_command_gets_sigterm_and_its_group_is_killed(tmp_path: Path) -> None:
    got = child.run([sys.executable, "-c", TRAPS, str(tmp_path), "trap"], timeout=TIMEOUT_S)
    assert got.timed_out and got.returncode == 7, got
    assert (tmp_path / "term").exists()  # it had its clean-up
    # the grandchild that ignored SIGTERM was killed with the group
    assert _gone(int((tmp_path / "grandchild").read_text()))


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    t0 = time.monotonic()
    got = child.run(
        [sys.executable, "-c", TRAPS, str(tmp_path), "ignore"], timeout=TIMEOUT_S, grace_s=0.5
    )
    assert got.timed_out and got.returncode == -signal.SIGKILL, got
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "term").exists()
    assert _gone(int((tmp_path / "grandchild").read_text()))


def test_output_beyond_a_pipe_is_captured_whole(tmp_path: Path) -> None:
    # 4 MiB on stdout and a line on stderr: a pipe holds 64 KiB
    code = "import sys; sys.stdout.write('x' * (4 << 20)); sys.stderr.write('done\\n')"
    got = child.run([sys.executable, "-c", code], timeout=60)
    assert not got.timed_out and got.returncode == 0
    assert got.stdout == "x" * (4 << 20) and got.stderr == "done\n"
    assert got.max_rss > 0 and got.wall_s > 0


def test_files_given_receive_the_output(tmp_path: Path) -> None:
    with open(tmp_path / "o", "wb") as fo, open(tmp_path / "e", "wb") as fe:
        got = child.run([sys.executable, "-c", "print('out'); exit(3)"], stdout=fo, stderr=fe)
    assert got.returncode == 3 and got.stdout == "" and not got.timed_out
    assert (tmp_path / "o").read_text() == "out\n"


def test_an_exception_while_waiting_stops_the_command_and_goes_on(tmp_path: Path) -> None:
    """As Ctrl-C or a SIGTERM turned into an exception does: the command
    gets its SIGTERM and clean-up, and the exception reaches the caller."""

    def ready_then_raise(signum: int, frame: object) -> None:
        if (tmp_path / "ready").exists():
            signal.setitimer(signal.ITIMER_REAL, 0)  # once
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, ready_then_raise)
    signal.setitimer(signal.ITIMER_REAL, 0.2, 0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            child.run([sys.executable, "-c", TRAPS, str(tmp_path), "trap"], timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert (tmp_path / "term").exists()
    assert _gone(int((tmp_path / "grandchild").read_text()))


def test_stop_on_signals_raises_interrupted_and_keeps_what_was_ignored() -> None:
    old_term = signal.getsignal(signal.SIGTERM)
    old_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with child.stop_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)  # ignored before: still ignored
            with pytest.raises(child.Interrupted) as err:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs at the next bytecode
        assert err.value.exit_code == 128 + signal.SIGTERM
        assert str(err.value) == "stopped by SIGTERM"
        # and the handlers are as before
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == old_term
    finally:
        signal.signal(signal.SIGHUP, old_hup)
