# SPDX-License-Identifier: BSD-3-Clause
"""A workflow run that is stopped leaves nothing (issue 19, finding 10):
`hetmem flow run` with its channel in a storage directory, ended by
SIGTERM (what `timeout` sends), SIGHUP, SIGINT or SIGKILL mid-run: its
channel file, its sync directory and its ranks are gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults_sigkill import _alive

from conftest import as_from_a_terminal

# long enough to be stopped mid-run (it is never let finish)
LONG = """
name = "long"
iterations = 100000
[writer]
ranks = 1
kernel = "stencil"
size = 64
repeat = 2
objects = 40
object_bytes = 4608
[reader]
ranks = 1
kernel = "poly"
size = 1000
repeat = 3
[channel]
tier = "dram"
"""
GONE_WITHIN = 30.0  # a hang guard; the clean-up takes well under a second


def _ranks(pid: int) -> list[int]:
    """The runner's ranks: its children that run hetmem.flow.component."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and b"hetmem.flow.component" in cmd:
                out.append(int(d))
    return out


@pytest.fixture
def flow_dirs(tmp_path: Path) -> Iterator[dict[str, Path]]:
    d = {"storage": tmp_path / "tier", "tmp": tmp_path / "tmp", "spec": tmp_path / "long.toml"}
    d["storage"].mkdir()
    d["tmp"].mkdir()
    d["spec"].write_text(LONG)
    ranks: list[int] = []
    yield {**d, "ranks": ranks}
    for pid in ranks:  # a rank the runner failed to end
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_stopped_flow_run_leaves_nothing(flow_dirs, sig: signal.Signals) -> None:
    storage, tmp = flow_dirs["storage"], flow_dirs["tmp"]
    err = tmp.parent / "stderr"
    with open(err, "w") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hetmem", "flow", "run", str(flow_dirs["spec"]),
             "--channel", f"file:{storage}"],
            stdout=subprocess.DEVNULL, stderr=errf, env=dict(os.environ, TMPDIR=str(tmp)),
            preexec_fn=as_from_a_terminal,
        )  # fmt: skip
    try:
        # mid-run: the ranks were let go (the runner's sync directory has "go")
        deadline = time.monotonic() + 120
        while not list(tmp.glob("hetmem-flow-*/go")):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the workflow never started"
            time.sleep(0.02)
        ranks = _ranks(proc.pid)
        flow_dirs["ranks"].extend(ranks)
        assert len(ranks) == 2
        proc.send_signal(sig)
        proc.wait(timeout=120)
        deadline = time.monotonic() + GONE_WITHIN
        while (list(storage.iterdir()) or list(tmp.iterdir()) or any(map(_alive, ranks))) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not list(storage.iterdir()), "the channel file was left"
    assert not list(tmp.iterdir()), "the sync directory was left"
    assert not [p for p in ranks if _alive(p)], "a rank was left running"
    expected = -sig if sig == signal.SIGKILL else 128 + sig
    assert proc.returncode == expected, err.read_text()
    if sig != signal.SIGKILL:
        lines = err.read_text().strip().splitlines()
        assert len(lines) == 1 and "interrupted" in lines[0], lines


def test_flow_run_stopped_before_the_ranks_start_leaves_nothing(flow_dirs) -> None:
    """SIGTERM while the channel file exists and the ranks start."""
    storage, tmp = flow_dirs["storage"], flow_dirs["tmp"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", "flow", "run", str(flow_dirs["spec"]),
         "--channel", f"file:{storage}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, TMPDIR=str(tmp)),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(storage.glob("hetmem-chan-flow-*")):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the channel never appeared"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not list(storage.iterdir()) and not list(tmp.iterdir())
