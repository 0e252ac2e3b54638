# SPDX-License-Identifier: BSD-3-Clause
"""A benchmark stopped mid-run (SIGTERM from a batch system's time limit,
Ctrl-C) stops the kernel it was running and removes its temporary folder:
before, SIGTERM ended the bench's Python with no clean-up, and the kernel
ran on as an orphan under `hetmem run`, taking a CPU from whatever was
measured next; Ctrl-C or a timeout killed `hetmem run` with SIGKILL, so it
could not stop its program either."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import as_from_a_terminal


def _with_env(marker: str) -> list[int]:
    """Pids of the processes whose environment holds TMPDIR=marker."""
    want = f"TMPDIR={marker}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if want in env.split(b"\0") and stat.rsplit(")", 1)[1].split()[0] != "Z":
            pids.append(int(d.name))
    return pids


def _kernel_pid(tmp: str, bench: subprocess.Popen[str], within: float) -> int:
    end = time.monotonic() + within
    while time.monotonic() < end and bench.poll() is None:
        for pid in _with_env(tmp):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if os.path.basename(exe) == "hm-kernel-poly":
                return pid
        time.sleep(0.05)
    return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_bench_stops_its_kernel_and_removes_its_files(
    tmp_path: Path, sig: signal.Signals
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    # a kernel that runs for a minute unless stopped
    argv = [sys.executable, "-m", "hetmem", "bench", "kernels", "poly-ro-d1024",
            "--modes", "dram", "--sizes", "0.5x", "--fast-budget", "32M", "--repeat", "1",
            "--kernel-min-time", "60", "--no-report", "-o", str(tmp_path / "out")]  # fmt: skip
    bench = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    try:
        kernel = _kernel_pid(str(tmp), bench, 60)
        assert kernel, bench.communicate(timeout=60)
        # one signal to the bench alone, as `kill` or a scheduler sends it
        # (a terminal's Ctrl-C reaches the whole foreground group)
        bench.send_signal(sig)
        _out, err = bench.communicate(timeout=60)
        want = 130 if sig == signal.SIGINT else 128 + sig
        assert bench.returncode == want, err
        last = err.strip().splitlines()[-1]
        said = "interrupted" if sig == signal.SIGINT else "stopped by SIGTERM"
        assert last == f"hetmem bench: {said}", err
        # nothing of it runs on, and its temporary folders are gone
        end = time.monotonic() + 10
        while _with_env(str(tmp)) and time.monotonic() < end:
            time.sleep(0.05)
        assert _with_env(str(tmp)) == []
        assert list(tmp.iterdir()) == []
    finally:
        for pid in _with_env(str(tmp)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
