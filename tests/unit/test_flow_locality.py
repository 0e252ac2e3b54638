# SPDX-License-Identifier: BSD-3-Clause
"""Channel locality (the seed's LocW / LocR): which node each side runs on
and where the channel goes, from real machines' sysfs trees (tests/golden);
the live run is in the two-socket guest (tests/vm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.flow import calibrate, locality, model
from hetmem.flow.spec import SpecError, check_tier, parse

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
TINY = """
name = "tiny"
iterations = 1
[writer]
objects = 4
object_bytes = 4608
[reader]
"""


def _nodes(machine: str) -> dict[int, list[int]]:
    return locality.socket_nodes(str(GOLDEN / machine))


def test_sockets_are_nodes_with_cpus_and_memory() -> None:
    # two sockets and a CPU-less CXL node: the CXL node is no side
    nodes = _nodes("cxl-expander")
    assert list(nodes) == [0, 1]
    assert nodes[0] == [*range(0, 32), *range(64, 96)]
    assert nodes[1] == [*range(32, 64), *range(96, 128)]
    # SNC-4 on two sockets: eight nodes with CPUs, the HBM nodes without
    assert list(_nodes("xeon-max-flat-snc4")) == list(range(8))
    # one socket (Grace with its GPU memory node), and a one-node VM
    assert list(_nodes("grace-hopper")) == [0]
    assert not locality.available(str(GOLDEN / "grace-hopper"))
    assert not locality.available(str(GOLDEN / "vm"))
    assert locality.available(str(GOLDEN / "optane-kmem"))
    assert locality.socket_nodes(str(GOLDEN / "no-such-machine")) == {}


def test_unbound_sides_take_a_socket_each() -> None:
    nodes = _nodes("cxl-expander")
    s = locality.sides([], [], nodes)
    assert (s.writer_node, s.reader_node) == (0, 1)
    assert s.cpus("writer") == nodes[0] and s.cpus("reader") == nodes[1]
    assert s.node_tier("local:writer") == "node:0"
    assert s.node_tier("local:reader") == "node:1"


def test_bound_sides_keep_their_cpus() -> None:
    nodes = _nodes("cxl-expander")
    # the reader bound on socket 0: the writer goes to the other socket
    s = locality.sides([], [3, 64], nodes)
    assert (s.writer_node, s.reader_node) == (1, 0)
    assert s.cpus("reader") == [3, 64] and s.cpus("writer") == nodes[1]
    assert s.node_tier("local:writer") == "node:1"
    s = locality.sides([40], [1], nodes)
    assert (s.writer_node, s.reader_node, s.cpus("writer")) == (1, 0, [40])


@pytest.mark.parametrize(
    ("writer", "reader", "words"),
    [
        ([0], [1], "both on node 0"),
        ([0, 40], [], "span nodes 0, 1"),
        ([500], [], "CPU 500 is on no NUMA node"),
    ],
)
def test_bad_bindings_are_usage_errors(writer: list[int], reader: list[int], words: str) -> None:
    with pytest.raises(UsageError, match=words) as exc:
        locality.sides(writer, reader, _nodes("cxl-expander"))
    assert "\n" not in str(exc.value)


def test_one_socket_is_an_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match=r"this machine has 1 such node$"):
        locality.sides([], [], _nodes("grace-hopper"))
    with pytest.raises(EnvironmentProblem, match=r"has no such nodes$"):
        locality.sides([], [], {})


def test_resolve_binds_the_components(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes("cxl-expander")
    monkeypatch.setattr(locality, "socket_nodes", lambda fsroot=None: nodes)
    comp = {r: {"ranks": 1, "cpus": [], "kernel": "none"} for r in ("writer", "reader")}
    tier, out, s = locality.resolve("local:reader", comp)
    assert tier == "node:1" and s is not None and s.reader_node == 1
    assert out["writer"]["cpus"] == nodes[0] and out["reader"]["cpus"] == nodes[1]
    assert out["writer"]["kernel"] == "none" and comp["writer"]["cpus"] == []  # a copy
    # any other tier passes through untouched
    assert locality.resolve("node:1", comp) == ("node:1", comp, None)
    # and the calibration measures both locality tiers where there are sockets
    monkeypatch.setattr(locality, "available", lambda fsroot=None: True)
    tiers = calibrate.default_tiers()
    assert tiers[1:3] == ["local:writer", "local:reader"] and tiers[0] == "dram"


def test_spec_tier_words() -> None:
    assert check_tier("local:writer") == "local:writer"
    assert check_tier("local:reader") == "local:reader"
    for bad in ("local:", "local:both", "local"):
        with pytest.raises(SpecError, match="local:writer, local:reader"):
            check_tier(bad)


def test_advisor_leaves_out_locality_the_spec_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = _nodes("cxl-expander")
    monkeypatch.setattr(locality, "socket_nodes", lambda fsroot=None: nodes)
    spec = parse(TINY)
    assert model._runs_here(spec, "local:writer") and model._runs_here(spec, "dram")
    spec.writer.cpus, spec.reader.cpus = [0], [1]  # both on socket 0
    assert not model._runs_here(spec, "local:writer")
    assert not model._runs_here(spec, "local:reader") and model._runs_here(spec, "node:1")
    spec.reader.cpus = [33]
    assert model._runs_here(spec, "local:reader")
    monkeypatch.setattr(locality, "socket_nodes", lambda fsroot=None: {0: [0, 1]})
    assert not model._runs_here(parse(TINY), "local:writer")
