# SPDX-License-Identifier: BSD-3-Clause
"""Placement files: which tier serves each allocation site.

`hetmem advise` writes a placement as TOML (human-readable, versioned,
documented in docs/formats.md, "Placement"); this module writes it by hand
and reads it back with tomllib under strict validation (SchemaError, one
line, for anything malformed). For the interposer, which has no TOML parser,
`write_compact` turns a placement into a flat line-oriented table that C
parses with a few sscanf calls ("Compact placement" in docs/formats.md);
`prepare_for_run` is what `hetmem run --placement` calls before launching:
load, check build-ids against the binaries on this machine (warn and drop
the sites of a mismatching module), write the compact table.

`match` is the reference implementation of how a captured call stack picks
its site; the interposer implements the same rule.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem import _toml as tomllib
from hetmem import probe
from hetmem.errors import HetmemError, SchemaError
from hetmem.output import write_atomic
from hetmem.placement import symbolize
from hetmem.placement.sitenames import distinct_labels, site_functions

KIND = "hetmem-placement"
SCHEMA_VERSION = 1
COMPACT_MAGIC = "hetmem-placement-compact"
COMPACT_VERSION = 1
MAX_DEPTH = 64


@dataclass
class PTier:
    name: str
    kind: str
    numa_node: int  # -1: not a NUMA node (storage)
    capacity_bytes: int  # per process; 0 = unlimited
    bandwidth_gbs: float
    latency_ns: float
    path: str = ""  # storage directory


@dataclass
class PModule:
    path: str
    build_id: str  # hex, "" when the module has none


@dataclass
class PSite:
    id: int
    tier: int
    frames: list[tuple[int, int]]  # (module index, offset), innermost first
    symbols: list[str] = field(default_factory=list)
    peak_live_bytes: int = 0
    bytes: int = 0
    allocs: int = 0
    est_accesses: float = 0.0
    benefit_s: float = 0.0  # time saved against the slowest tier, per process
    reason: str = ""
    # bytes at the start of each allocation served by the fastest tier, the
    # rest by `tier` (0: none); page-rounded by the interposer
    split_bytes: int = 0


@dataclass
class Placement:
    meta: dict[str, Any]
    tiers: list[PTier]
    modules: list[PModule]
    sites: list[PSite]

    @property
    def binary(self) -> int:
        return int(self.meta.get("binary", 0))

    @property
    def pins_nothing(self) -> bool:
        """Whether every site is on the storage tier, whole (no split head):
        hybrid mode then tiers every block through the pager with the whole
        budget, as cache mode does. True of every `hybrid_as_cache`
        placement, and of one whose sites none fitted beside the pager's
        least cache."""
        if not self.tiers or self.tiers[-1].kind != "storage":
            return False
        last = len(self.tiers) - 1
        return all(s.tier == last and not s.split_bytes for s in self.sites)


# --------------------------------------------------------------------------
# TOML writing (by hand: the standard library only reads TOML)


def _tstr(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:  # lone surrogate (undecodable file name byte)
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _tval(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("non-finite float in a placement")
        return repr(v)
    if isinstance(v, str):
        return _tstr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_tval(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps(p: Placement, comment: Sequence[str] = ()) -> str:
    lines = [f"# {c}" for c in comment]
    lines.append(f"kind = {_tstr(KIND)}")
    lines.append(f"schema_version = {SCHEMA_VERSION}")
    for k, v in p.meta.items():
        if k in ("kind", "schema_version"):
            continue
        lines.append(f"{k} = {_tval(v)}")
    for i, t in enumerate(p.tiers):
        lines += [
            "",
            "[[tiers]]",
            f"index = {i}",
            f"name = {_tstr(t.name)}",
            f"kind = {_tstr(t.kind)}",
            f"numa_node = {t.numa_node}",
            f"capacity_bytes = {t.capacity_bytes}  # per process; 0 = unlimited",
            f"bandwidth_gbs = {_tval(float(t.bandwidth_gbs))}",
            f"latency_ns = {_tval(float(t.latency_ns))}",
        ]
        if t.path:
            lines.append(f"path = {_tstr(t.path)}")
    for i, m in enumerate(p.modules):
        lines += [
            "",
            "[[modules]]",
            f"index = {i}",
            f"path = {_tstr(m.path)}",
            f"build_id = {_tstr(m.build_id)}",
        ]
    for s, label in zip(p.sites, site_labels(p), strict=True):
        frames = ", ".join(f"[{mi}, 0x{off:x}]" for mi, off in s.frames)
        lines += [
            "",
            f"[[sites]]  # {label}" if label else "[[sites]]",
            f"id = {s.id}",
            f"tier = {s.tier}  # {p.tiers[s.tier].name}",
            f"frames = [{frames}]  # [module, offset], innermost first",
            f"symbols = {_tval(s.symbols)}",
            f"peak_live_bytes = {s.peak_live_bytes}",
            f"bytes = {s.bytes}",
            f"allocs = {s.allocs}",
            f"est_accesses = {_tval(float(s.est_accesses))}",
            f"benefit_s = {_tval(float(s.benefit_s))}",
        ]
        if s.split_bytes:
            lines.append(
                f"split_bytes = {s.split_bytes}  # of each allocation on {p.tiers[0].name}, "
                f"the rest on {p.tiers[s.tier].name}"
            )
        if s.reason:
            lines.append(f"reason = {_tstr(s.reason)}")
    return "\n".join(lines) + "\n"


def site_labels(p: Placement) -> list[str]:
    """Each site's name as `profile show` gives it (hetmem.placement.sitenames): its
    innermost frame outside the language runtimes, and the caller frame that
    tells it apart when other sites share that frame."""
    frames, starts = [], []
    for s in p.sites:
        paths = [p.modules[mi].path if 0 <= mi < len(p.modules) else "?" for mi, _ in s.frames]
        syms = [*s.symbols, *[None] * len(s.frames)]  # symbols may be fewer (--no-symbols)
        texts, start, _ = site_functions(paths, [o for _, o in s.frames], syms[: len(paths)])
        frames.append(texts)
        starts.append(start)
    return distinct_labels(frames, starts)


def save(p: Placement, path: str | Path, comment: Sequence[str] = ()) -> None:
    """Writes atomically, so that a reader never sees half a placement."""
    write_atomic(Path(path), dumps(p, comment))


# --------------------------------------------------------------------------
# Reading


class _V:
    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, msg: str) -> SchemaError:
        return SchemaError(f"{self.name}: {msg}")

    def int_(
        self, d: dict[str, Any], key: str, where: str, lo: int = 0, hi: int = 2**64 - 1
    ) -> int:
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.fail(f"{where}: '{key}' must be an integer in [{lo}, {hi}]")
        return v

    def num(self, d: dict[str, Any], key: str, where: str) -> float:
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(f"{where}: '{key}' must be a finite number")
        return float(v)

    def str_(self, d: dict[str, Any], key: str, where: str, allow_empty: bool = False) -> str:
        v = d.get(key)
        if not isinstance(v, str) or (not v and not allow_empty) or "\0" in v or "\n" in v:
            raise self.fail(f"{where}: '{key}' must be a one-line string")
        return v

    def table_list(self, d: dict[str, Any], key: str) -> list[dict[str, Any]]:
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise self.fail(f"'{key}' must be an array of tables ([[{key}]])")
        return v


def loads(text: str, name: str = "<placement>") -> Placement:
    v = _V(name)
    doc = _parse_toml(v, text)
    tiers = [_read_tier(v, i, t) for i, t in enumerate(v.table_list(doc, "tiers"))]
    if not tiers:
        raise v.fail("no tiers")
    modules = [_read_module(v, i, m) for i, m in enumerate(v.table_list(doc, "modules"))]
    sites: list[PSite] = []
    seen: set[int] = set()
    for i, s in enumerate(v.table_list(doc, "sites")):
        sites.append(_read_site(v, i, s, seen, len(tiers), len(modules)))
    meta = {k: val for k, val in doc.items() if k not in ("tiers", "modules", "sites")}
    if "binary" in meta:
        v.int_(meta, "binary", "header", 0, max(0, len(modules) - 1))
    # read by `hetmem run`: hybrid's fetch unit, and its note on flat plans
    if "pager_cache_mean_bytes" in meta:
        v.int_(meta, "pager_cache_mean_bytes", "header", 1, 2**63 - 1)
    if meta.get("for_mode", "flat") not in ("flat", "hybrid"):
        raise v.fail('header: \'for_mode\' must be "flat" or "hybrid"')
    if not isinstance(meta.get("hybrid_as_cache", False), bool):
        raise v.fail("header: 'hybrid_as_cache' must be true or false")
    return Placement(meta=meta, tiers=tiers, modules=modules, sites=sites)


def _parse_toml(v: _V, text: str) -> dict[str, Any]:
    """The TOML document, once its kind and schema version are right."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise v.fail(f"not valid TOML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise v.fail("not valid TOML (nested too deeply)") from None
    if doc.get("kind") != KIND:
        raise v.fail(f"not a hetmem placement (kind is not '{KIND}')")
    ver = doc.get("schema_version")
    if ver != SCHEMA_VERSION:
        raise v.fail(
            f"schema_version {ver!r} is not supported (this hetmem reads {SCHEMA_VERSION})"
        )
    return doc


def _read_tier(v: _V, i: int, t: dict[str, Any]) -> PTier:
    w = f"tier {i}"
    if v.int_(t, "index", w) != i:
        raise v.fail(f"{w}: index out of order")
    return PTier(
        name=v.str_(t, "name", w),
        kind=_token(v, v.str_(t, "kind", w), f"{w}: 'kind'"),
        numa_node=v.int_(t, "numa_node", w, -1, 1 << 20),
        capacity_bytes=v.int_(t, "capacity_bytes", w),
        bandwidth_gbs=v.num(t, "bandwidth_gbs", w),
        latency_ns=v.num(t, "latency_ns", w),
        path=v.str_(t, "path", w, allow_empty=True) if "path" in t else "",
    )


def _read_module(v: _V, i: int, m: dict[str, Any]) -> PModule:
    w = f"module {i}"
    if v.int_(m, "index", w) != i:
        raise v.fail(f"{w}: index out of order")
    bid = v.str_(m, "build_id", w, allow_empty=True).lower()
    if len(bid) % 2 or len(bid) > 128 or any(c not in "0123456789abcdef" for c in bid):
        raise v.fail(f"{w}: 'build_id' must be hex")
    return PModule(path=v.str_(m, "path", w), build_id=bid)


def _read_site(
    v: _V, i: int, s: dict[str, Any], seen: set[int], ntiers: int, nmodules: int
) -> PSite:
    w = f"site {i}"
    sid = v.int_(s, "id", w, 0, 2**32 - 1)
    if sid in seen:
        raise v.fail(f"{w}: duplicate id {sid}")
    seen.add(sid)
    tier = v.int_(s, "tier", w, 0, ntiers - 1)
    frames = _read_frames(v, w, s.get("frames"), nmodules)
    syms = s.get("symbols", [])
    if not isinstance(syms, list) or not all(isinstance(x, str) for x in syms):
        raise v.fail(f"{w}: 'symbols' must be a list of strings")
    return PSite(
        id=sid,
        tier=tier,
        frames=frames,
        symbols=syms,
        peak_live_bytes=v.int_(s, "peak_live_bytes", w),
        bytes=v.int_(s, "bytes", w),
        allocs=v.int_(s, "allocs", w),
        est_accesses=v.num(s, "est_accesses", w),
        benefit_s=v.num(s, "benefit_s", w),
        reason=v.str_(s, "reason", w, allow_empty=True) if "reason" in s else "",
        split_bytes=v.int_(s, "split_bytes", w) if "split_bytes" in s else 0,
    )


def _read_frames(v: _V, w: str, fr: Any, nmodules: int) -> list[tuple[int, int]]:
    if not isinstance(fr, list) or not 1 <= len(fr) <= MAX_DEPTH:
        raise v.fail(f"{w}: 'frames' must hold 1 to {MAX_DEPTH} [module, offset] pairs")
    frames: list[tuple[int, int]] = []
    for f in fr:
        if (
            not isinstance(f, list)
            or len(f) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in f)
            or not 0 <= f[0] < nmodules
            or not 0 <= f[1] < 2**64
        ):
            raise v.fail(f"{w}: bad frame {f!r} (want [module index, offset])")
        frames.append((f[0], f[1]))
    return frames


def parse_bytes(data: bytes, name: str = "<placement>") -> Placement:
    """Parses a placement file's bytes (load and the fuzzer use this)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(f"{name}: not UTF-8 text (not a placement file)") from None
    return loads(text, name)


def _token(v: _V, s: str, what: str) -> str:
    """A word the compact table can hold: letters, digits, '_', '-', '.'."""
    if not s or any(not (c.isascii() and (c.isalnum() or c in "_-.")) for c in s):
        raise v.fail(f"{what} must be one word of letters, digits, '_', '-' or '.'")
    return s


def load(path: str | Path) -> Placement:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse_bytes(data, str(p))


# --------------------------------------------------------------------------
# Matching (the reference for the interposer)


def match(sites: Sequence[PSite], stack: Sequence[tuple[int, int]]) -> PSite | None:
    """The site a captured stack (innermost first, in the placement's module
    numbering) belongs to: among sites whose frames agree with the stack on
    their common length L = min(len(site), len(stack)) >= 1, the one with the
    greatest L; ties go to the lowest site id. A different stack depth
    between profile and run therefore still matches."""
    best: PSite | None = None
    best_len = 0
    for s in sites:
        n = min(len(s.frames), len(stack))
        if n == 0 or list(s.frames[:n]) != list(stack[:n]):
            continue
        if n > best_len or (n == best_len and best is not None and s.id < best.id):
            best, best_len = s, n
    return best


# --------------------------------------------------------------------------
# Build-id checks and the compact table for the interposer


def check_modules(
    p: Placement,
    build_id_of: Callable[[str], str | None],
    binary: str | None = None,
) -> tuple[Placement, list[str]]:
    """Drops the sites of modules whose file here has another build-id.

    build_id_of(path) gives the build-id of a file on this machine (None when
    the file is absent: such a module is kept, the interposer checks it by
    build-id when it is loaded). binary: the program about to run, checked
    against the placement's binary module. Returns the checked placement and
    one warning per mismatching module."""
    warnings: list[str] = []
    bad: set[int] = set()
    for i, m in enumerate(p.modules):
        have = _build_id_or_none(build_id_of, _path_here(p, i, binary, build_id_of))
        if have is None or not m.build_id:
            continue
        if have != m.build_id:
            bad.add(i)
    for i in sorted(bad):
        m = p.modules[i]
        n = sum(1 for s in p.sites if any(mi == i for mi, _ in s.frames))
        where = _path_here(p, i, binary, build_id_of)
        warnings.append(
            f"{where}: build-id differs from the placement's ({m.build_id[:12]}...): the "
            f"placement was made for another build; ignoring its {n} site(s)"
        )
    kept = [s for s in p.sites if not any(mi in bad for mi, _ in s.frames)]
    return Placement(meta=dict(p.meta), tiers=p.tiers, modules=p.modules, sites=kept), warnings


def _build_id_or_none(build_id_of: Callable[[str], str | None], path: str) -> str | None:
    try:
        return build_id_of(path)
    except HetmemError:
        return None


def _path_here(
    p: Placement, i: int, binary: str | None, build_id_of: Callable[[str], str | None]
) -> str:
    """The file whose build-id module i must have here."""
    m = p.modules[i]
    if binary is not None and i == p.binary and _same_program(binary, m, build_id_of):
        # the command is the placement's program: a rebuild of it is
        # checked here; any other command (mpirun, srun, a script) only
        # launches it, and the recorded path is checked as for any module
        return binary
    return m.path


# Programs that start the placement's program rather than being it.
LAUNCHERS = frozenset(
    ("mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "prun", "srun", "aprun",
     "jsrun", "ibrun", "flux", "charmrun", "env", "time", "numactl", "taskset", "nice")
)  # fmt: skip


def _same_program(
    command: str, recorded: PModule, build_id_of: Callable[[str], str | None]
) -> bool:
    """Whether the command to run stands for the program a placement was
    made for (so a build-id mismatch means another build of it), rather
    than something that starts it: an MPI or batch launcher, a wrapper
    such as env or numactl, a script (not ELF), or any program while the
    recorded one is still there as profiled (`sh -c './app ...'`, python,
    timeout, perf: their build-id was compared with the program's, and a
    valid placement was dropped whole). A program of the same file name
    always counts as the same."""
    name = os.path.basename(command)
    if name == os.path.basename(recorded.path):
        return True
    if name in LAUNCHERS:
        return False
    if recorded.build_id and _build_id_or_none(build_id_of, recorded.path) == recorded.build_id:
        return False
    try:
        with open(command, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def compact(p: Placement) -> str:
    """The flat table the interposer reads (docs/formats.md, "Compact placement")."""
    out = [f"{COMPACT_MAGIC} {COMPACT_VERSION}", f"tiers {len(p.tiers)}"]
    for i, t in enumerate(p.tiers):
        out.append(
            f"tier {i} {t.kind} {t.numa_node} {t.capacity_bytes} {_oneline(t.path or t.name)}"
        )
    out.append(f"modules {len(p.modules)}")
    for i, m in enumerate(p.modules):
        out.append(f"module {i} {m.build_id or '-'} {_oneline(m.path)}")
    out.append(f"sites {len(p.sites)}")
    for s in sorted(p.sites, key=lambda s: s.id):
        frames = " ".join(f"{mi}:{off:x}" for mi, off in s.frames)
        out.append(f"site {s.id} {s.tier} {len(s.frames)} {frames}")
    for s in sorted(p.sites, key=lambda s: s.id):
        if s.split_bytes and s.tier > 0:
            out.append(f"split {s.id} {s.split_bytes}")
    out.append("end")
    return "\n".join(out) + "\n"


def _oneline(s: str) -> str:
    if "\n" in s or "\r" in s or "\0" in s:
        raise SchemaError(f"path {s!r} cannot be written to the compact table")
    return s


def parse_compact(text: str) -> Placement:
    """Reads a compact table back (tests use it to prove the C contract is
    self-consistent; the interposer has its own C reader)."""
    v = _V("<compact>")
    lines = text.split("\n")
    if not text.endswith("\n") or lines[-1] != "":
        raise v.fail("truncated")
    r = _CompactLines(v, lines[:-1])
    if r.next() != [COMPACT_MAGIC, str(COMPACT_VERSION)]:
        raise v.fail("bad magic or version")
    try:
        tiers = [_compact_tier(r, i) for i in range(int(r.next()[1]))]
        modules = [_compact_module(r, i) for i in range(int(r.next()[1]))]
        sites = [_compact_site(r) for _ in range(int(r.next()[1]))]
        by_id = {s.id: s for s in sites}
        f = r.next()
        while f[0] == "split" and len(f) == 3 and int(f[1]) in by_id:
            by_id[int(f[1])].split_bytes = int(f[2])
            f = r.next()
    except (ValueError, IndexError):
        raise v.fail("malformed line") from None
    if f != ["end"]:
        raise v.fail("missing end")
    return Placement(meta={}, tiers=tiers, modules=modules, sites=sites)


class _CompactLines:
    """The compact table's lines, split into words, one at a time."""

    def __init__(self, v: _V, lines: list[str]) -> None:
        self.v = v
        self._it = iter(lines)

    def next(self) -> list[str]:
        try:
            return next(self._it).split(" ")
        except StopIteration:
            raise self.v.fail("truncated") from None


def _compact_tier(r: _CompactLines, i: int) -> PTier:
    f = r.next()
    if f[0] != "tier" or int(f[1]) != i:
        raise r.v.fail("bad tier line")
    return PTier(" ".join(f[5:]), f[2], int(f[3]), int(f[4]), 0.0, 0.0)


def _compact_module(r: _CompactLines, i: int) -> PModule:
    f = r.next()
    if f[0] != "module" or int(f[1]) != i:
        raise r.v.fail("bad module line")
    return PModule(" ".join(f[3:]), "" if f[2] == "-" else f[2])


def _compact_site(r: _CompactLines) -> PSite:
    f = r.next()
    if f[0] != "site" or len(f) != 4 + int(f[3]):
        raise r.v.fail("bad site line")
    frames = [(int(a), int(b, 16)) for a, b in (x.split(":") for x in f[4:])]
    return PSite(id=int(f[1]), tier=int(f[2]), frames=frames)


def prepare_for_run(
    placement_path: str | Path,
    compact_path: str | Path,
    command: str | None = None,
    build_id_of: Callable[[str], str | None] | None = None,
    fast_capacity: int | None = None,
    memory_nodes: Callable[[], list[int]] | None = None,
) -> list[str]:
    """What `hetmem run --placement FILE` does before launching: validates
    the placement, checks build-ids (command: the program to run, resolved
    on PATH) and the NUMA nodes of its tiers, writes the compact table,
    returns the warnings to print. fast_capacity: bytes per process for the
    fastest tier, replacing the placement's (`hetmem run --fast-budget`
    divided by the ranks per node)."""
    p = load(placement_path)
    if memory_nodes is None:
        memory_nodes = probe.memory_nodes
    here = memory_nodes()
    node_warnings = []
    for i, t in enumerate(p.tiers):
        if t.numa_node >= 0 and t.numa_node not in here:
            n = sum(1 for s in p.sites if s.tier == i)
            node_warnings.append(
                f"tier {i} ({t.name}, {t.kind}) is NUMA node {t.numa_node}, which this machine "
                f"has no memory on (nodes {','.join(map(str, here))}): its {n} site(s) go to "
                "the next tier, or to glibc's memory if none is slower (a placement made "
                "for another machine? advise again here)"
            )
    if fast_capacity is not None:
        if fast_capacity < 0:
            raise SchemaError("fast-tier capacity must not be negative")
        p.tiers[0].capacity_bytes = fast_capacity
    if build_id_of is None:
        build_id_of = _build_id_here
    binary = None
    if command is not None:
        binary = command if os.sep in command else shutil.which(command)
    checked, warnings = check_modules(p, build_id_of, binary)
    warnings = node_warnings + warnings
    write_atomic(Path(compact_path), compact(checked))
    return warnings


def _build_id_here(path: str) -> str | None:
    if not path or not os.path.exists(path):
        return None
    return symbolize.build_id(path)
