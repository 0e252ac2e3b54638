# SPDX-License-Identifier: BSD-3-Clause
"""numactl's node syntax for `hetmem run --membind/--interleave/...`,
resolved against recorded trees (the allowed nodes of /proc/self/status and
the nodes with memory); the live policy is checked in tests/vm (nodes) and
tests/integration/test_run_numa.py (this machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem.errors import UsageError
from hetmem.run import mempolicy


def _tree(root: Path, allowed: str, has_memory: str, weights: dict[int, int] | None = None) -> str:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/status").write_text(
        f"Name:\tx\nCpus_allowed_list:\t0-1\nMems_allowed:\t0f\nMems_allowed_list:\t{allowed}\n"
    )
    node = root / "sys/devices/system/node"
    node.mkdir(parents=True)
    (node / "has_memory").write_text(has_memory + "\n")
    wi = root / "sys/kernel/mm/mempolicy/weighted_interleave"
    wi.mkdir(parents=True)
    for n, w in (weights or {}).items():
        (wi / f"node{n}").write_text(f"{w}\n")
    return str(root)


@pytest.fixture
def four(tmp_path: Path) -> str:
    # nodes 0-3 allowed; node 3 has no memory (a CPU-only node)
    return _tree(tmp_path, "0-3", "0-2", {0: 3, 1: 1})


@pytest.mark.parametrize(
    ("mode", "spec", "want"),
    [
        ("membind", "0,2", [0, 2]),
        ("membind", "1-2", [1, 2]),
        ("interleave", "all", [0, 1, 2]),
        ("interleave", "!1", [0, 2]),
        ("membind", "+1", [1]),
        ("membind", "!+0", [1, 2]),
        ("preferred", "2", [2]),
        ("preferred-many", "0,2", [0, 2]),
    ],
)
def test_node_syntax(four: str, mode: str, spec: str, want: list[int]) -> None:
    p = mempolicy.resolve(mode, spec, fsroot=four)
    assert p.resolved["nodes"] == want
    assert p.resolved["mode"] == mode


def test_weighted_interleave_reports_the_system_weights(four: str) -> None:
    p = mempolicy.resolve("weighted-interleave", "0-1", fsroot=four)
    assert p.resolved["weights"] == {"0": 3, "1": 1}
    assert p.resolved["kernel_mode"] == 6 and p.resolved["since_linux"] == "6.9"


@pytest.mark.parametrize(
    ("mode", "spec", "says"),
    [
        ("membind", "3", "node 3 is not available here (nodes with memory: 0-2)"),
        ("membind", "7", "node 7 is not available"),
        ("membind", "+3", "node 3 is not available"),  # only 3 usable nodes: +0..+2
        ("membind", "1-0", "expected N, N-M"),
        ("membind", "", "expected N, N-M"),
        ("membind", "0,,1", "expected N, N-M"),
        ("interleave", "!all", "no node left"),
        ("preferred", "0,1", "--preferred takes one node"),
        ("local", "0", "expected one of membind"),
    ],
)
def test_bad_nodes_are_one_line_usage_errors(four: str, mode: str, spec: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        mempolicy.resolve(mode, spec, fsroot=four)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_cpuset_limits_the_nodes(tmp_path: Path) -> None:
    root = _tree(tmp_path, "0,2", "0-2")
    assert mempolicy.resolve("membind", "+1", fsroot=root).resolved["nodes"] == [2]
    assert mempolicy.resolve("interleave", "all", fsroot=root).resolved["nodes"] == [0, 2]
    with pytest.raises(UsageError, match="node 1 is not available"):
        mempolicy.resolve("membind", "1", fsroot=root)
