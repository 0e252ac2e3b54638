# SPDX-License-Identifier: BSD-3-Clause
"""Runs a workflow spec: creates the channel, launches every rank as a
process (plain, or one MPMD `mpirun`), releases them together, collects
their timings and removes everything it made, whatever happens: an
exception, SIGTERM, SIGHUP or SIGINT (each ends the run through its
clean-up), or SIGKILL (the channel files are unlinked as soon as every
rank has opened them, the ranks die with the runner by PR_SET_PDEATHSIG,
and a supervisor process removes what is left before that point)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from hetmem import child
from hetmem.errors import EnvironmentProblem, HetmemError
from hetmem.flow import channel as chan
from hetmem.flow import kernels, locality
from hetmem.flow.spec import Spec
from hetmem.run import supervise

START_TIMEOUT = 60.0


class FlowFailed(HetmemError):
    """A component failed; the message carries its own error line."""


class FlowInterrupted(HetmemError):
    """SIGTERM, SIGHUP or SIGINT ended the run (after its clean-up); exit
    status 128 + the signal, as a shell gives."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}; the channel and its files are removed")
        self.exit_code = 128 + signum


_STOP = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def resolve(spec: Spec) -> dict[str, Any]:
    """Fixes every kernel's repeat count (sizing by seconds measures here)."""
    out: dict[str, Any] = {}
    for role in ("writer", "reader"):
        c = getattr(spec, role)
        rep = c.repeat
        if c.kernel != "none" and c.seconds > 0:
            rep = kernels.repeat_for_seconds(c.kernel, c.size, c.seconds)
        out[role] = {
            "ranks": c.ranks,
            "cpus": c.cpus,
            "kernel": c.kernel,
            "size": c.size,
            "repeat": rep,
            "objects": spec.writer.objects,
            "object_bytes": spec.writer.object_bytes,
        }
    return out


def _mpirun() -> str:
    path = shutil.which("mpirun")
    if not path:
        raise EnvironmentProblem(
            "launcher mpirun: mpirun is not installed (apt install openmpi-bin)"
        )
    return path


def _commands(cfg_path: Path, spec: Spec, launcher: str) -> list[list[str]]:
    py = [sys.executable, "-m", "hetmem.flow.component", "--config", str(cfg_path)]
    pw, pr = spec.writer.ranks, spec.reader.ranks
    if launcher == "mpirun":
        cmd = [_mpirun(), "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["-np", str(pw), *py, "--role", "writer", "--rank-offset", "0", ":"]
        cmd += ["-np", str(pr), *py, "--role", "reader", "--rank-offset", str(pw)]
        return [cmd]
    cmds = [[*py, "--role", "writer", "--rank", str(i)] for i in range(pw)]
    cmds += [[*py, "--role", "reader", "--rank", str(i)] for i in range(pr)]
    return cmds


def run(
    spec: Spec,
    mode: str | None = None,
    tier: str | None = None,
    launcher: str | None = None,
    timeout: float = 600.0,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    mode = mode or spec.mode
    tier = tier or spec.tier
    launcher = launcher or spec.launcher
    # a locality tier (local:writer, local:reader) is a node tier with the
    # components bound to two sockets
    ctier, comp, sides = locality.resolve(tier, resolved or resolve(spec))
    pw, pr = spec.writer.ranks, spec.reader.ranks
    tag = f"flow-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ack = f"{tag}-ack" if mode == "serial" else ""
    with child.stop_on_signals(_STOP, FlowInterrupted), supervise.Supervisor() as sup:
        sync = Path(tempfile.mkdtemp(prefix="hetmem-flow-"))
        sup.add(trees=[str(sync)])
        created: list[tuple[str, str]] = []
        procs: list[subprocess.Popen[bytes]] = []
        try:
            _create_channels(spec, mode, ctier, tag, ack, sup, created)
            cfg = {
                "channel": tag,
                "tier": ctier,
                "channel_path": chan.path(tag, ctier) if ctier.startswith("node:") else "",
                "ack": ack,
                "iterations": spec.iterations,
                "sync_dir": str(sync),
                **comp,
            }
            _launch(_commands(sync / "config.json", spec, launcher), cfg, sync, sup, procs)
            t_go = _release(procs, sync, pw + pr, created)
            _wait(procs, timeout)
            _check_procs(procs, sync, early=False)
            results = [json.loads(f.read_text()) for f in sorted(sync.glob("result.*.json"))]
            if len(results) != pw + pr:
                raise FlowFailed(f"{pw + pr - len(results)} components left no result")
            out = _summarize(spec, mode, tier, launcher, comp, results, t_go)
            if sides is not None:
                out["channel_tier"] = ctier
                out["nodes"] = {"writer": sides.writer_node, "reader": sides.reader_node}
            return out
        finally:
            _clean_up(procs, created, sync)


def _create_channels(
    spec: Spec,
    mode: str,
    tier: str,
    tag: str,
    ack: str,
    sup: supervise.Supervisor,
    created: list[tuple[str, str]],
) -> None:
    pw, pr = spec.writer.ranks, spec.reader.ranks
    per_obj = (spec.writer.object_bytes + 63) // 64 * 64
    slot_bytes = per_obj * spec.writer.objects + (1 << 20)
    # the supervisor and the clean-up hear of each file before it exists: a
    # signal at any point leaves none behind (the names are this run's own)
    sup.add(paths=[chan.path(tag, tier)] + ([chan.path(ack, "dram")] if ack else []))
    created.append((tag, tier))
    chan.create(
        tag,
        tier,
        slots=1 if mode == "serial" else spec.slots,
        writers=pw,
        readers=pr,
        slot_bytes=slot_bytes,
        max_objects=spec.writer.objects,
        timeout=120.0,
        replace=True,
    )
    if ack:
        created.append((ack, "dram"))
        chan.create(
            ack, "dram", slots=2, writers=pr, readers=pw, slot_bytes=1 << 16, max_objects=16
        )


def _launch(
    cmds: list[list[str]],
    cfg: dict[str, Any],
    sync: Path,
    sup: supervise.Supervisor,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """Starts the ranks (or mpirun); each dies with this process."""
    (sync / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    pypath = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pypath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    parent = os.getpid()
    for i, cmd in enumerate(cmds):
        with open(sync / f"stderr.{i}", "wb") as err:
            p = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                preexec_fn=lambda: supervise.die_with_parent(parent),
            )
        procs.append(p)
        start = supervise.start_time(p.pid)
        if start is not None:
            sup.add(procs=[[p.pid, start]])


def _release(
    procs: list[subprocess.Popen[bytes]], sync: Path, want: int, created: list[tuple[str, str]]
) -> float:
    """Waits until every rank has opened the channels, unlinks their files
    (the ranks' mappings stay: nothing is left to remove after a SIGKILL)
    and lets the ranks go; returns the time of the go."""
    t_end = time.monotonic() + START_TIMEOUT
    while len(list(sync.glob("ready.*"))) < want:
        _check_procs(procs, sync, early=True)
        if time.monotonic() > t_end:
            raise FlowFailed(f"components did not start within {START_TIMEOUT:.0f} s")
        time.sleep(0.002)
    for name, t in created:
        chan.unlink(name, t)
    created.clear()
    t_go = time.monotonic()
    (sync / "go").write_text("")
    return t_go


def _wait(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.wait(timeout=max(0.1, left))
        except subprocess.TimeoutExpired:
            raise FlowFailed(f"the workflow ran past {timeout:.0f} s") from None


def _clean_up(
    procs: list[subprocess.Popen[bytes]], created: list[tuple[str, str]], sync: Path
) -> None:
    """Kills what still runs and removes the channels and the sync
    directory; a second signal meanwhile does not cut it short."""
    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP}
    try:
        for p in procs:
            if p.poll() is None:
                with suppress(ProcessLookupError):
                    p.kill()
                p.wait()
        for name, t in created:
            chan.unlink(name, t)
        shutil.rmtree(sync, ignore_errors=True)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _check_procs(procs: list[subprocess.Popen[bytes]], sync: Path, early: bool) -> None:
    for i, p in enumerate(procs):
        rc = p.poll()
        if rc is None or (rc == 0 and not early):
            continue
        if rc == 0:
            continue
        text = (sync / f"stderr.{i}").read_text(errors="replace").strip().splitlines()
        line = text[-1] if text else f"exit code {rc}"
        raise FlowFailed(f"a component failed (exit {rc}): {line}")


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def _summarize(
    spec: Spec,
    mode: str,
    tier: str,
    launcher: str,
    comp: dict[str, Any],
    results: list[dict[str, Any]],
    t_go: float,
) -> dict[str, Any]:
    makespan = max(r["t_end"] for r in results) - t_go
    out: dict[str, Any] = {
        "schema_version": 1,
        "spec": spec.name,
        "mode": mode,
        "tier": tier,
        "launcher": launcher,
        "ranks": {"writer": spec.writer.ranks, "reader": spec.reader.ranks},
        "iterations": spec.iterations,
        "objects": spec.writer.objects,
        "object_bytes": spec.writer.object_bytes,
        "makespan_s": makespan,
        "iteration_s": makespan / spec.iterations,
        "kernels": {
            role: {k: comp[role][k] for k in ("kernel", "size", "repeat")} for role in comp
        },
    }
    for role in ("writer", "reader"):
        rows = [it for r in results if r["role"] == role for it in r["iterations"]]
        out[role] = {k: _mean(rows, k) for k in ("compute", "io", "wait", "compute_cpu", "io_cpu")}
    readers = [r for r in results if r["role"] == "reader"]
    out["objects_read"] = sum(r["objects_read"] for r in readers)
    out["stamp_errors"] = sum(r["stamp_errors"] for r in readers)
    if out["stamp_errors"]:
        raise FlowFailed(f"{out['stamp_errors']} objects were read from the wrong step")
    # what the kernel says: each side's CPUs, and (node tiers) where the
    # pages of the channel it mapped lie, per NUMA node
    out["cpus"] = {
        role: _union([r.get("cpus", []) for r in results if r["role"] == role])
        for role in ("writer", "reader")
    }
    pages = {
        role: _summed([r.get("channel_pages", {}) for r in results if r["role"] == role])
        for role in ("writer", "reader")
    }
    if any(pages.values()):
        out["channel_pages"] = pages
    return out


def _union(lists: list[list[int]]) -> list[int]:
    return sorted({c for cs in lists for c in cs})


def _summed(rows: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        for node, n in row.items():
            out[node] = out.get(node, 0) + n
    return out
