# SPDX-License-Identifier: BSD-3-Clause
"""Channel locality: the seed's LocW and LocR configurations.

On a machine with two sockets (NUMA nodes with CPUs and memory), the
simulation (writer) and the analytics (reader) run on different sockets,
and the channel's memory is on one of them:

- `local:writer` (LocW): the channel on the writer's node; its puts are
  local, the reader's gets cross the interconnect;
- `local:reader` (LocR): the channel on the reader's node; remote writes,
  local reads.

A component whose spec binds CPUs (`cpus = [...]`) stays on them; its node
is theirs (they must share one). An unbound component is bound here to
every CPU of a node: the writer to the first node with CPUs and memory,
the reader to the next one that is not the writer's. The channel is then
created on `node:N` of the local side, like any node tier.

resolve() turns a locality tier and the components' settings into the
node tier and the bindings a run uses; every other tier passes through.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hetmem import tiers
from hetmem.errors import EnvironmentProblem, HetmemError, UsageError

TIERS = ("local:writer", "local:reader")


@dataclass(frozen=True)
class Sides:
    """Where each component runs: its node and the CPUs it is bound to."""

    writer_node: int
    reader_node: int
    writer_cpus: tuple[int, ...]
    reader_cpus: tuple[int, ...]

    def node_tier(self, tier: str) -> str:
        """The node tier of a locality tier: the local side's node."""
        return f"node:{self.writer_node if tier == 'local:writer' else self.reader_node}"

    def cpus(self, role: str) -> list[int]:
        return list(self.writer_cpus if role == "writer" else self.reader_cpus)


def is_local(tier: str) -> bool:
    return tier in TIERS


def socket_nodes(fsroot: str | None = None) -> dict[int, list[int]]:
    """NUMA nodes with both CPUs and memory -> their CPUs, from the tier
    inventory (libhetmem's discovery; fsroot as in hetmem.tiers.inventory);
    empty where it finds none."""
    try:
        data = tiers.inventory(fsroot, no_storage=True, use_probe=False)
    except HetmemError:
        return {}
    nodes = {t["numa_node"]: sorted(t["cpus"]) for t in data.get("tiers", [])
             if t.get("numa_node") is not None and t.get("cpus")}  # fmt: skip
    return dict(sorted(nodes.items()))


def available(fsroot: str | None = None) -> bool:
    """Whether this machine has the two sockets the locality tiers need."""
    return len(socket_nodes(fsroot)) >= 2


def _node_of(role: str, cpus: list[int], nodes: dict[int, list[int]]) -> int:
    owners = {n for c in cpus for n, cs in nodes.items() if c in cs}
    lost = [c for c in cpus if not any(c in cs for cs in nodes.values())]
    if lost:
        raise UsageError(
            f"{role}.cpus: CPU {lost[0]} is on no NUMA node with memory (nodes: "
            + ", ".join(f"{n} has CPUs {_cpulist(c)}" for n, c in nodes.items())
            + ")"
        )
    if len(owners) != 1:
        raise UsageError(
            f"{role}.cpus: {_cpulist(cpus)} span nodes {', '.join(map(str, sorted(owners)))};"
            " a channel local to one side needs that side on one node"
        )
    return owners.pop()


def _cpulist(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def sides(
    writer_cpus: list[int], reader_cpus: list[int], nodes: dict[int, list[int]] | None = None
) -> Sides:
    """Each component's node and CPUs for a locality tier; EnvironmentProblem
    on a machine with fewer than two sockets, UsageError for bindings that
    put both sides on one node or one side on several."""
    nodes = socket_nodes() if nodes is None else nodes
    if len(nodes) < 2:
        raise EnvironmentProblem(
            "channel local:writer / local:reader: the writer and the reader run on two"
            " NUMA nodes with CPUs and memory (two sockets); this machine has"
            f" {len(nodes) or 'no'} such node{'' if len(nodes) == 1 else 's'}"
        )
    w = _node_of("writer", writer_cpus, nodes) if writer_cpus else None
    r = _node_of("reader", reader_cpus, nodes) if reader_cpus else None
    if w is None:
        w = next(n for n in nodes if n != r)
    if r is None:
        r = next(n for n in nodes if n != w)
    if w == r:
        raise UsageError(
            f"writer.cpus and reader.cpus are both on node {w}: a channel local to one"
            " side needs the writer and the reader on two nodes"
        )
    return Sides(w, r, tuple(writer_cpus or nodes[w]), tuple(reader_cpus or nodes[r]))


def resolve(tier: str, comp: dict[str, Any]) -> tuple[str, dict[str, Any], Sides | None]:
    """(channel tier, component settings, sides) for a run on `tier`: a
    locality tier becomes its node tier and binds the components; any other
    tier is returned as it is, with no sides."""
    if not is_local(tier):
        return tier, comp, None
    s = sides(list(comp["writer"]["cpus"]), list(comp["reader"]["cpus"]))
    out = {role: {**comp[role], "cpus": s.cpus(role)} for role in ("writer", "reader")}
    return s.node_tier(tier), out, s


@contextmanager
def running_on(cpus: list[int] | tuple[int, ...]) -> Iterator[None]:
    """This thread bound to cpus for the block (no binding when empty)."""
    if not cpus:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)
