# SPDX-License-Identifier: BSD-3-Clause
"""The numactl surface of `hetmem run`: one NUMA policy for the whole
command (--membind, --interleave, --preferred, --preferred-many,
--weighted-interleave), with numactl's node syntax.

Resolved and checked in hetmem (src/mempolicy/: the nodes must be allowed
to this process and have memory), tried once on a throw-away thread (the
policy is per thread: a kernel that lacks the mode says so before anything
runs), then set in the child between fork and exec, which the command
inherits, as under numactl.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetmem import _native
from hetmem.errors import EnvironmentProblem, NativeError, UsageError

MODES = ("membind", "interleave", "preferred", "preferred-many", "weighted-interleave")


@dataclass(frozen=True)
class Policy:
    mode: str  # one of MODES
    nodes: str  # as written (numactl syntax)
    resolved: dict[str, Any]  # hm_mempolicy_json: nodes, kernel_mode, weights


def resolve(mode: str, nodes: str, fsroot: str | None = None) -> Policy:
    """The policy with its nodes resolved; UsageError for bad input,
    EnvironmentProblem when this kernel lacks the mode. With fsroot (a
    recorded tree: tests), the nodes are resolved there and nothing is
    tried on this kernel."""
    if mode not in MODES:
        raise UsageError(f"NUMA policy '{mode}': expected one of {', '.join(MODES)}")
    with _native.Context(fsroot) as ctx:
        try:
            data = ctx.call_json("hm_mempolicy_json", mode.encode(), nodes.encode())
        except NativeError as exc:
            raise UsageError(f"--{mode}: {exc}") from None
    policy = Policy(mode, nodes, data)
    if fsroot is None:
        _try_on_a_thread(policy)
    return policy


def _try_on_a_thread(policy: Policy) -> None:
    """Sets the policy on a thread that then ends: the kernel's answer,
    without changing this process's own policy."""
    got: list[str] = []

    def attempt() -> None:
        with _native.Context() as ctx:
            rc = ctx.call("hm_mempolicy_apply", policy.mode.encode(), policy.nodes.encode())
            if rc:
                got.append(ctx.last_error() or _native.strerror(rc))

    t = threading.Thread(target=attempt, name="hetmem-mempolicy-check")
    t.start()
    t.join()
    if got:
        raise EnvironmentProblem(got[0])


def child_setup(policy: Policy) -> Callable[[], None]:
    """A preexec function that sets the policy in the child. Everything it
    needs is made here, before the fork; a failure (not seen when it was
    tried) ends the child with 126 and one line, as a shell's exec would."""
    ctx = _native.Context()
    mode, nodes = policy.mode.encode(), policy.nodes.encode()

    def apply() -> None:
        if ctx.call("hm_mempolicy_apply", mode, nodes) != 0:
            msg = (ctx.last_error() or "set_mempolicy failed").encode(errors="replace")
            os.write(2, b"hetmem run: " + msg + b"\n")
            os._exit(126)

    apply.context = ctx  # type: ignore[attr-defined]  # kept alive with the function
    return apply
