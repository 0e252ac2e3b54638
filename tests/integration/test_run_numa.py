# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run --membind/--interleave/...` on this machine's kernel: the
command runs under the policy (its own /proc/self/numa_maps says so), its
exit status and output pass through, and bad nodes are one-line errors.
Placement over several nodes is checked in the guests of tests/vm."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import run_hetmem

SHOW = "head -n1 /proc/self/numa_maps; exit 7"


def _policy(numa_maps_line: str) -> str:
    """The policy words of a numa_maps line ("prefer (many):0" has a space)."""
    m = re.match(r"^[0-9a-f]+ (.*?) (?:file=|anon=|heap|stack|mapped=|N\d)", numa_maps_line)
    assert m, numa_maps_line
    return m.group(1)


def _kernel_at_least(major: int, minor: int) -> bool:
    rel = os.uname().release.split("-")[0].split(".")
    return (int(rel[0]), int(rel[1])) >= (major, minor)


@pytest.mark.parametrize(
    ("flag", "nodes", "policy"),
    [
        ("--membind", "0", "bind:0"),
        ("--interleave", "all", "interleave:0"),
        ("--preferred", "0", "prefer:0"),
        ("--preferred-many", "+0", "prefer (many):0"),
        ("--weighted-interleave", "0", "weighted interleave:0"),
    ],
)
def test_the_command_runs_under_the_policy(flag: str, nodes: str, policy: str, tmp_path: Path):
    if flag == "--weighted-interleave" and not _kernel_at_least(6, 9):
        pytest.skip("weighted interleave needs Linux 6.9")
    stats = tmp_path / "s.json"
    p = run_hetmem("run", flag, nodes, "--stats", str(stats), "--", "sh", "-c", SHOW)
    assert p.returncode == 7, p.stderr  # the command's status, unchanged
    assert _policy(p.stdout) == policy, p.stdout
    got = json.loads(stats.read_text())
    assert got["mode"] == "dram"  # a policy alone runs the command as is
    assert got["mempolicy"]["mode"] == flag[2:] and got["mempolicy"]["nodes"] == [0]


def test_without_a_policy_the_command_keeps_the_default(tmp_path: Path) -> None:
    p = run_hetmem("run", "--mode", "dram", "--", "sh", "-c", SHOW)
    assert p.returncode == 7 and _policy(p.stdout) == "default"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--membind", "63"], "--membind: nodes '63': node 63 is not available here"),
        (["--interleave", "!0"], "no node left"),
        (["--preferred", "zero"], "expected N, N-M"),
        (["--membind", "0", "--interleave", "0"], "not allowed with argument"),
    ],
)
def test_bad_nodes_exit_2_with_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    p = run_hetmem("run", *args, "--", "touch", str(marker))
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not marker.exists()  # the command never started
