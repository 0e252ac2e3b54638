# SPDX-License-Identifier: BSD-3-Clause
"""Workflow specs (TOML). Every error names the field: `writer.objects: ...`.

name = "gtc-io"
iterations = 6
[writer]                  # the simulation
ranks = 1                 # I/O concurrency: processes of this component
cpus = [0]                # CPU of rank i is cpus[i % len]; omit: no binding
kernel = "stencil"        # stencil | poly | none
size = 512                # stencil: grid side; poly: elements
repeat = 20               # stencil: sweeps; poly: degree
seconds = 0.2             # instead of repeat: size the kernel by time
objects = 24              # objects per iteration (all ranks together)
object_bytes = "4MiB"
[reader]                  # the analytics: same keys except objects
...
[channel]
tier = "dram"             # dram | node:N | local:writer | local:reader | file:DIR | dax:DIR
slots = 2                 # parallel mode queue limit (serial uses 1)
mode = "parallel"         # default execution mode
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hetmem import _toml as tomllib
from hetmem.errors import UsageError, shown
from hetmem.sizes import parse_size

KERNELS = ("stencil", "poly", "none")
MODES = ("serial", "parallel")


class SpecError(UsageError):
    """A malformed workflow spec; the message names the field."""


@dataclass
class Component:
    ranks: int = 1
    cpus: list[int] = field(default_factory=list)
    kernel: str = "none"
    size: int = 0
    repeat: int = 0
    seconds: float = 0.0
    objects: int = 0
    object_bytes: int = 0


@dataclass
class Spec:
    name: str
    iterations: int
    writer: Component
    reader: Component
    tier: str = "dram"
    slots: int = 2
    mode: str = "parallel"
    launcher: str = "process"
    description: str = ""
    path: str = ""

    @property
    def step_bytes(self) -> int:
        return self.writer.objects * self.writer.object_bytes

    def with_config(
        self, mode: str | None = None, tier: str | None = None, ranks: int | None = None
    ) -> Spec:
        s = replace(self, writer=replace(self.writer), reader=replace(self.reader))
        if mode:
            s.mode = mode
        if tier:
            s.tier = tier
        if ranks:
            s.writer.ranks = ranks
            s.reader.ranks = ranks
        return s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(d: dict[str, Any], key: str, where: str, default: int | None, lo: int = 0) -> int:
    v = d.get(key, default)
    if v is None:
        raise SpecError(f"{where}.{key}: missing (an integer)")
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{where}.{key}: expected an integer, got {v!r}")
    if v < lo:
        raise SpecError(f"{where}.{key}: must be >= {lo}, got {v}")
    return v


def _size(d: dict[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if v is None:
        raise SpecError(f"{where}.{key}: missing (a size such as 4608 or 4MiB)")
    if isinstance(v, bool):
        raise SpecError(f"{where}.{key}: expected a size, got {v!r}")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        try:
            n = parse_size(v, f"{where}.{key}")
        except UsageError as exc:
            raise SpecError(str(exc)) from None
    else:
        raise SpecError(f"{where}.{key}: expected a size, got {v!r}")
    if n <= 0:
        raise SpecError(f"{where}.{key}: must be positive")
    return n


def _component(d: Any, where: str, writer: bool) -> Component:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: missing table [{where}]")
    known = {"ranks", "cpus", "kernel", "size", "repeat", "seconds"}
    if writer:
        known |= {"objects", "object_bytes"}
    for k in d:
        if k not in known:
            raise SpecError(
                f"{where}.{shown(k)}: unknown key (expected one of {', '.join(sorted(known))})"
            )
    c = Component()
    c.ranks = _int(d, "ranks", where, 1, lo=1)
    if c.ranks > 64:
        raise SpecError(f"{where}.ranks: at most 64")
    cpus = d.get("cpus", [])
    if not isinstance(cpus, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cpus
    ):
        raise SpecError(f"{where}.cpus: expected a list of CPU numbers, got {cpus!r}")
    c.cpus = cpus
    c.kernel = d.get("kernel", "none")
    if c.kernel not in KERNELS:
        raise SpecError(f"{where}.kernel: {c.kernel!r} is not one of {', '.join(KERNELS)}")
    if c.kernel != "none":
        _kernel_work(d, where, c)
    if writer:
        c.objects = _int(d, "objects", where, None, lo=1)
        c.object_bytes = _size(d, "object_bytes", where)
        if c.objects % c.ranks:
            raise SpecError(
                f"{where}.objects: {c.objects} objects do not split evenly over {c.ranks} ranks"
            )
    return c


def _kernel_work(d: dict[str, Any], where: str, c: Component) -> None:
    """A kernel's size and its work per step: repeat times, or seconds."""
    c.size = _int(d, "size", where, None, lo=8)
    secs = d.get("seconds")
    if secs is None:
        c.repeat = _int(d, "repeat", where, None, lo=1)
        return
    if isinstance(secs, bool) or not isinstance(secs, int | float) or not 0 <= secs <= 3600:
        raise SpecError(f"{where}.seconds: expected 0..3600 seconds, got {secs!r}")
    c.seconds = float(secs)
    if "repeat" in d:
        raise SpecError(f"{where}.repeat: give repeat or seconds, not both")


def parse(text: str, path: str = "<spec>") -> Spec:
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    known = {"name", "description", "iterations", "writer", "reader", "channel", "launcher"}
    for k in d:
        if k not in known:
            raise SpecError(f"{shown(k)}: unknown key (expected one of {', '.join(sorted(known))})")
    name = d.get("name", Path(path).stem)
    if not isinstance(name, str) or not name:
        raise SpecError(f"name: expected a non-empty string, got {name!r}")
    iterations = _int(d, "iterations", "workflow", None, lo=1)
    w = _component(d.get("writer"), "writer", True)
    r = _component(d.get("reader"), "reader", False)
    ch = d.get("channel", {})
    if not isinstance(ch, dict):
        raise SpecError("channel: expected a table [channel]")
    for k in ch:
        if k not in ("tier", "slots", "mode"):
            raise SpecError(f"channel.{shown(k)}: unknown key (expected tier, slots, mode)")
    tier = ch.get("tier", "dram")
    check_tier(tier, "channel.tier")
    slots = _int(ch, "slots", "channel", 2, lo=2)
    mode = ch.get("mode", "parallel")
    if mode not in MODES:
        raise SpecError(f"channel.mode: {mode!r} is not serial or parallel")
    launcher = d.get("launcher", "process")
    if launcher not in ("process", "mpirun"):
        raise SpecError(f"launcher: {launcher!r} is not process or mpirun")
    desc = d.get("description", "")
    if not isinstance(desc, str):
        raise SpecError("description: expected a string")
    return Spec(name, iterations, w, r, tier, slots, mode, launcher, desc, path)


def check_tier(tier: Any, what: str = "tier") -> str:
    ok = isinstance(tier, str) and (
        tier in ("dram", "shm", "local:writer", "local:reader")
        or (tier.startswith("node:") and tier[5:].isdigit())
        or (tier.startswith(("file:", "dax:")) and len(tier.split(":", 1)[1]) > 0)
    )
    if not ok:
        raise SpecError(
            f"{what}: {tier!r} is not dram, node:N, local:writer, local:reader, file:DIR or dax:DIR"
        )
    return str(tier)


def load(path: str | Path) -> Spec:
    p = Path(path)
    if not p.exists():
        shipped = Path(__file__).parent / "specs" / f"{p.name.removesuffix('.toml')}.toml"
        if shipped.exists():
            p = shipped
        else:
            raise SpecError(
                f"{path}: no such spec file (shipped specs: {', '.join(shipped_names())})"
            )
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a workflow spec (not UTF-8 text; TOML expected)") from None
    return parse(text, str(p))


def shipped_names() -> list[str]:
    return sorted(p.stem for p in (Path(__file__).parent / "specs").glob("*.toml"))
