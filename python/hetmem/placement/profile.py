# SPDX-License-Identifier: BSD-3-Clause
"""Allocation-site profiles: the reader, its strict validation, and merging.

A profile is what the interposer writes at exit for one process (one MPI
rank): JSON lines, a header, the modules, one record per allocation site and
an end record that makes truncation detectable. The format is documented in
docs/formats.md ("Allocation-site profile"); this module is its reference
reader. Anything that does not follow the format raises SchemaError with a
one-line message naming the file and line.

Sites are identified by their frames: (module, offset) pairs, innermost
first, where a module is named by its GNU build-id (or, when it has none, by
its path) and offset is the return address minus the module's load bias.
That identity survives ASLR; merging truncates frames to the shallowest
depth the merged profiles recorded, so that runs with a different stack
depth still meet.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetmem.errors import SchemaError

MAGIC = "hetmem-profile"
SCHEMA_VERSION = 1
MAX_DEPTH = 64
# fewer intervals than this and a page sampler tells hot from cold poorly
FEW_INTERVALS = 8
MAX_LIVE_POINTS = 1_000_000
MAX_LINE = 16 << 20

# A frame as a hashable key: (module key, offset). The module key is
# "b:<build-id hex>" or, for a module without a build-id, "p:<path>".
FrameKey = tuple[str, int]


@dataclass(frozen=True)
class Module:
    path: str
    build_id: str  # lower-case hex, "" when the module has none

    @property
    def key(self) -> str:
        return f"b:{self.build_id}" if self.build_id else f"p:{self.path}"


@dataclass
class Site:
    """One allocation site of one profile (or of a merge of several)."""

    frames: list[tuple[Module, int]]  # innermost first
    allocs: int = 0
    bytes: int = 0
    max_bytes: int = 0  # largest single allocation
    peak_live_bytes: int = 0
    # Step function of live bytes: [(t_ns, bytes)], t increasing; `bytes` is
    # an upper bound of the live bytes from t until the next point.
    live: list[tuple[int, int]] = field(default_factory=list)
    lifetime_min_ns: int = 0
    lifetime_mean_ns: float = 0.0
    lifetime_max_ns: int = 0
    never_freed: int = 0
    loads: int = 0  # samples
    stores: int = 0  # samples
    # Pages the refs sampler saw touched for the first time (an array being
    # initialised), not in loads or stores (_first_touches weighs them).
    first: int = 0
    random_fraction: float = 0.0
    # Pages touched again and again within the refs sampler's first short
    # window (a random gather, a lookup table; 0 for a sweep), extrapolated
    # to the sampled time: each a dependent access that a pager would serve
    # as a fault (problem.py). From `_short_windows`.
    reuse_pages: float = 0.0
    small_count: int = 0
    small_bytes: int = 0
    est_accesses: float = 0.0  # samples scaled by the sampler period
    sources: int = 1  # profiles merged into this site
    # A large static array (.bss): its one frame is its address (the symbol's
    # link-time address), not a return address.
    static: bool = False

    def key(self, depth: int | None = None) -> tuple[FrameKey, ...]:
        frames = self.frames if depth is None else self.frames[:depth]
        return tuple((m.key, off) for m, off in frames)

    @property
    def accesses_per_byte(self) -> float:
        return self.est_accesses / self.peak_live_bytes if self.peak_live_bytes else 0.0


@dataclass
class Profile:
    path: str
    header: dict[str, Any]
    modules: list[Module]
    sites: list[Site]

    @property
    def rank(self) -> int | None:
        r = self.header.get("rank")
        return r if isinstance(r, int) else None

    @property
    def hostname(self) -> str:
        return str(self.header.get("hostname", ""))

    @property
    def depth(self) -> int:
        return int(self.header["depth"])

    @property
    def wall_ns(self) -> int:
        return int(self.header["wall_ns"])

    @property
    def binary(self) -> Module:
        return self.modules[int(self.header["binary"])]

    @property
    def outside_peak_bytes(self) -> int:
        """The most memory the process held outside its sites (0: not
        recorded, a profile of an older hetmem)."""
        return int(self.header.get("outside_peak_bytes", 0))


class _Ctx:
    """Where in which file a check failed, for one-line messages."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.line = 0

    def fail(self, msg: str) -> SchemaError:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return SchemaError(f"{where}: {msg}")

    def obj(self, rec: Any, what: str) -> dict[str, Any]:
        if not isinstance(rec, dict):
            raise self.fail(f"{what} is not a JSON object")
        return rec

    def int_(self, rec: dict[str, Any], key: str, lo: int = 0, hi: int = 2**64 - 1) -> int:
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"'{key}' must be an integer")
        if not lo <= v <= hi:
            raise self.fail(f"'{key}' = {v} is out of range [{lo}, {hi}]")
        return v

    def opt_int(self, rec: dict[str, Any], key: str, default: int = 0) -> int:
        return self.int_(rec, key) if key in rec else default

    def num(self, rec: dict[str, Any], key: str, lo: float = 0.0, hi: float = math.inf) -> float:
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(f"'{key}' must be a finite number")
        if not lo <= v <= hi:
            raise self.fail(f"'{key}' = {v} is out of range [{lo}, {hi}]")
        return float(v)

    def nums(self, rec: dict[str, Any], key: str, n: int, what: str) -> list[float]:
        """rec[key] as a list of n finite numbers >= 0, else what it must be."""
        v = rec.get(key)
        ok = isinstance(v, list) and len(v) == n
        if ok and all(
            not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x) and x >= 0
            for x in v
        ):
            return [float(x) for x in v]
        raise self.fail(f"'{key}' must be {what}")

    def bool_(self, rec: dict[str, Any], key: str) -> bool:
        v = rec.get(key)
        if not isinstance(v, bool):
            raise self.fail(f"'{key}' must be true or false")
        return v

    def str_(self, rec: dict[str, Any], key: str, allow_empty: bool = True) -> str:
        v = rec.get(key)
        if not isinstance(v, str) or (not allow_empty and not v):
            raise self.fail(f"'{key}' must be a {'non-empty ' if not allow_empty else ''}string")
        if "\0" in v:
            raise self.fail(f"'{key}' holds a NUL character")
        return v


def _build_id(c: _Ctx, rec: dict[str, Any]) -> str:
    bid = c.str_(rec, "build_id").lower()
    if len(bid) % 2 or len(bid) > 128 or any(ch not in "0123456789abcdef" for ch in bid):
        raise c.fail("'build_id' must be an even number of hex digits (at most 64 bytes)")
    return bid


def _parse_header(c: _Ctx, rec: dict[str, Any]) -> dict[str, Any]:
    if rec.get("magic") != MAGIC:
        raise c.fail(f"not a hetmem profile (first line lacks magic '{MAGIC}')")
    ver = rec.get("schema_version")
    if ver != SCHEMA_VERSION:
        raise c.fail(
            f"schema_version {ver!r} is not supported (this hetmem reads {SCHEMA_VERSION})"
        )
    if rec.get("type") != "header":
        raise c.fail("first record must have type 'header'")
    c.int_(rec, "depth", 1, MAX_DEPTH)
    c.int_(rec, "wall_ns")
    c.int_(rec, "threshold")
    c.int_(rec, "pid")
    c.int_(rec, "binary")
    c.int_(rec, "bytes_per_access", 1, 1 << 30)
    c.num(rec, "start_unix", 0.0)
    c.str_(rec, "hostname")
    if rec.get("rank") is not None:
        c.int_(rec, "rank", 0, 2**31 - 1)
    sampler = c.obj(rec.get("sampler"), "'sampler'")
    c.str_(sampler, "name", allow_empty=False)
    c.num(sampler, "period", 0.0)
    for k in ("short_windows", "sampled_us"):
        if k in sampler:
            c.num(sampler, k, 0.0)
    if "short_window_us" in sampler:
        c.nums(sampler, "short_window_us", 2, "[first, second] window lengths (us, >= 0)")
    if "small" in rec:
        small = c.obj(rec["small"], "'small'")
        c.int_(small, "count")
        c.int_(small, "bytes")
    if "threads" in rec:
        c.int_(rec, "threads", 1, 1 << 20)
    if "stopped_by_signal" in rec:
        c.int_(rec, "stopped_by_signal", 0, 127)
    c.opt_int(rec, "outside_peak_bytes")
    return rec


def _parse_site(c: _Ctx, rec: dict[str, Any], modules: list[Module], hdr: dict[str, Any]) -> Site:
    s = Site(frames=_site_frames(c, rec.get("frames"), modules))
    s.allocs = c.int_(rec, "allocs")
    s.bytes = c.int_(rec, "bytes")
    s.max_bytes = c.opt_int(rec, "max_bytes")
    s.peak_live_bytes = c.int_(rec, "peak_live_bytes")
    if s.peak_live_bytes > s.bytes:
        raise c.fail("'peak_live_bytes' exceeds 'bytes' (all bytes ever allocated)")
    s.live = _site_live(c, rec.get("live", []), s.peak_live_bytes, int(hdr["wall_ns"]))
    if s.peak_live_bytes and not s.live:
        # No time series: the conservative reading is peak live bytes all run long.
        s.live = [(0, s.peak_live_bytes)]
    lt = rec.get("lifetime_ns")
    if lt is not None:
        _site_lifetime(c, c.obj(lt, "'lifetime_ns'"), s)
    s.never_freed = c.opt_int(rec, "never_freed")
    if s.never_freed > s.allocs:
        raise c.fail("'never_freed' exceeds 'allocs'")
    samples = c.obj(rec.get("samples", {}), "'samples'")
    s.loads = c.opt_int(samples, "loads")
    s.stores = c.opt_int(samples, "stores")
    s.first = c.opt_int(samples, "first")
    if "random_fraction" in rec:
        s.random_fraction = c.num(rec, "random_fraction", 0.0, 1.0)
    small = c.obj(rec.get("small", {}), "'small'")
    s.small_count = c.opt_int(small, "count")
    s.small_bytes = c.opt_int(small, "bytes")
    if "short" in samples:
        s.reuse_pages = _short_windows(c, samples["short"], hdr["sampler"])
    if "short_reuse" in samples:
        s.reuse_pages = _short_reuse(c, samples["short_reuse"], hdr["sampler"])
    s.est_accesses = (s.loads + s.stores + _first_touches(s, hdr)) * float(hdr["sampler"]["period"])
    if "static" in rec:
        s.static = c.bool_(rec, "static")
    return s


# A window's count is read as reuse only beyond this multiple of what its
# growth to the second window explains: the windows' lengths are each
# mapping's own to within about half (a sweep's reuse read -0.45..+0.3 of
# its first window's pages in repeated runs, a random gather's 0.91-0.93).
SHORT_WINDOW_SLACK = 1.5
# Pairs of short windows that must have seen a site before its reuse
# counts (_short_reuse): with one or two, a sweep whose pass ended inside
# one of them (or whose thread was off the CPU between the reads, on a
# busy machine) is a majority of reuse.
MIN_REUSE_PAIRS = 3


def _short_windows(c: _Ctx, pair: Any, sampler: dict[str, Any]) -> float:
    """Pages reused over the sampled time, from the pages a site touched in
    the refs sampler's short windows after each clear: u1 in the first (w1
    long) and u2 in the second (w2), per window. The growth from one to the
    other is the site's streaming rate, L = (u2 - u1) / (w2 - w1) pages a
    microsecond (a sweep's pages, each touched once a pass); what the first
    window holds beyond L x w1 was touched again within it (reuse: a random
    gather, a table looked up all the time), extrapolated to the sampled
    time. Samples do not show it: a page touched once and one touched all
    interval long are one sample each."""
    if not _int_pair(pair) or min(pair) < 0:
        raise c.fail("'samples.short' must be [first window pages, second window pages]")
    win = _windows(sampler)
    if win is None:
        return 0.0
    n, w1, w2, sampled = win
    u1, u2 = pair[0] / n, pair[1] / n
    rate = max(0.0, (u2 - u1) / (w2 - w1))
    return max(0.0, u1 - SHORT_WINDOW_SLACK * rate * w1) * sampled / w1


def _short_reuse(c: _Ctx, triple: Any, sampler: dict[str, Any]) -> float:
    """Pages reused over the sampled time, from each pair of short windows
    read on its own (libhetmem_preload.so's prof.c): [pairs the site was
    touched in, pairs whose first window held reuse beyond a quarter of its
    pages, reused pages summed over the pairs]. Reuse counts only when most
    of the pairs that saw the site show it: a sweep whose pass ended within
    a pair reads as reuse in that pair alone, and summed over the run it
    weighed as much as a gather touched all run long (LAMMPS's per-atom
    arrays and a small array swept fast were coin flips for the advisor).
    At least MIN_REUSE_PAIRS pairs must have seen the site: one or two
    tell a pass that ended inside them from reuse no better than a coin.
    The mean over all pairs is then extrapolated as in _short_windows."""
    if (
        not isinstance(triple, list)
        or len(triple) != 3
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in triple)
        or triple[1] > triple[0]
    ):
        raise c.fail(
            "'samples.short_reuse' must be [pairs seen, pairs with reuse <= seen, reused pages]"
        )
    seen, reused, pages = triple
    win = _windows(sampler)
    if win is None or seen < MIN_REUSE_PAIRS or 2 * reused < seen:
        return 0.0
    n, w1, _w2, sampled = win
    return pages / n * sampled / w1


def _windows(sampler: dict[str, Any]) -> tuple[float, float, float, float] | None:
    """The header's short windows: (pairs, mean w1, mean w2, sampled time,
    in us), or None when the profile has none to read (checked by
    _parse_header)."""
    n = float(sampler.get("short_windows") or 0)
    w = sampler.get("short_window_us")
    sampled = float(sampler.get("sampled_us") or 0.0)
    if n <= 0 or not isinstance(w, list) or len(w) != 2 or sampled <= 0.0:
        return None
    w1, w2 = float(w[0]), float(w[1])
    return (n, w1, w2, sampled) if 0.0 < w1 < w2 else None


def _int_pair(x: Any) -> bool:
    return (
        isinstance(x, list)
        and len(x) == 2
        and not any(isinstance(v, bool) or not isinstance(v, int) for v in x)
    )


def _site_frames(c: _Ctx, frames_raw: Any, modules: list[Module]) -> list[tuple[Module, int]]:
    if not isinstance(frames_raw, list) or not 1 <= len(frames_raw) <= MAX_DEPTH:
        raise c.fail(f"'frames' must be a list of 1 to {MAX_DEPTH} [module, offset] pairs")
    frames: list[tuple[Module, int]] = []
    for fr in frames_raw:
        if not _int_pair(fr):
            raise c.fail("each frame must be [module index, offset]")
        mi, off = fr
        if not 0 <= mi < len(modules):
            raise c.fail(f"frame names module {mi}, but only {len(modules)} are declared before it")
        if not 0 <= off < 2**64:
            raise c.fail(f"frame offset {off} is out of range")
        frames.append((modules[mi], off))
    return frames


def _first_touches(s: Site, hdr: dict[str, Any]) -> float:
    """What a site's first touches (samples.first) stand for, in samples.

    A page first touched in an interval was written there (a fresh anonymous
    page is mapped by a write), and maybe used again in the same interval:
    one accessed bit cannot tell. In a profile of FEW_INTERVALS intervals or
    more each counts as a load and a store, as every touched page does and
    as before they were told apart. In a shorter one (which `hetmem profile`
    already notes ranks sites poorly) they are left out: there the first
    interval, initialisation, is much of every array's samples. A site seen
    in nothing else keeps them, spread over the intervals it was live for:
    its use fell in the interval that made it, or it was written once and
    never touched again, which its later intervals say by their silence.

    Measured both ways: counted whole, the three cold arrays of
    hm-placement's sparse workload (0.4 s, 4-5 intervals; written once at
    start) weighed as much as its two hot ones, read 32 times, and the
    advisor's choice at a 75% budget was a coin flip; left out in a long
    profile, hpcc's HPL matrix (its phase 1.3 s, the intervals 1.1 s) kept
    1.7k of its 67k page samples (sampler_refs.c)."""
    if not s.first:
        return 0.0
    drains = (hdr.get("sampler") or {}).get("drains")
    n = drains if isinstance(drains, int) and drains > 0 else 1
    if n >= FEW_INTERVALS:
        return 2.0 * s.first
    if s.loads + s.stores:
        return 0.0
    wall = max(int(hdr["wall_ns"]), 1)
    live_ns = 0
    for (t, b), nxt in zip(s.live, [*s.live[1:], (wall, 0)], strict=True):
        if b > 0:
            live_ns += max(nxt[0] - t, 0)
    return 2.0 * s.first / max(1.0, n * min(live_ns, wall) / wall)


def _site_live(c: _Ctx, live_raw: Any, peak: int, wall: int) -> list[tuple[int, int]]:
    if not isinstance(live_raw, list) or len(live_raw) > MAX_LIVE_POINTS:
        raise c.fail("'live' must be a list of [t_ns, bytes] points")
    live: list[tuple[int, int]] = []
    last_t = -1
    for pt in live_raw:
        if not _int_pair(pt):
            raise c.fail("each 'live' point must be [t_ns, bytes] (integers)")
        t, b = pt
        if t <= last_t or t < 0 or t > wall:
            raise c.fail("'live' times must increase strictly and lie within [0, wall_ns]")
        if not 0 <= b <= peak:
            raise c.fail("'live' bytes must lie within [0, peak_live_bytes]")
        last_t = t
        live.append((t, b))
    return live


def _site_lifetime(c: _Ctx, lt: dict[str, Any], s: Site) -> None:
    s.lifetime_min_ns = c.int_(lt, "min")
    s.lifetime_mean_ns = c.num(lt, "mean")
    s.lifetime_max_ns = c.int_(lt, "max")
    if not s.lifetime_min_ns <= s.lifetime_mean_ns <= s.lifetime_max_ns:
        raise c.fail("'lifetime_ns' must satisfy min <= mean <= max")


def _lines(path: Path) -> Iterable[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(f, 1)


def parse_bytes(data: bytes, name: str = "<profile>") -> Profile:
    """Parses a profile held in memory (the fuzzer and tests use this)."""
    return _parse(name, enumerate(data.splitlines(keepends=True), 1))


def load(path: str | Path) -> Profile:
    """Reads and validates one profile file; SchemaError on any defect."""
    p = Path(path)
    try:
        return _parse(str(p), _lines(p))
    except FileNotFoundError as exc:
        raise SchemaError(
            f"{p}: cannot read: {exc.strerror or exc}{_per_process_hint(p)}"
        ) from None
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read: {exc.strerror or exc}") from None


def output_template(output: str) -> str:
    """The file-name template handed to the interposer (docs/formats.md)."""
    return output if "%p" in output else output + ".%r.%p"


def written_files(template: str) -> list[str]:
    """The profiles written for a file-name template: %h, %r and %p expanded
    as wildcards (the rest taken literally), files being written excluded."""
    pat = glob.escape(template).replace("%%", "\0")
    pat = pat.replace("%h", glob.escape(socket.gethostname()))
    pat = pat.replace("%r", "*").replace("%p", "[0-9]*").replace("\0", "%")
    return sorted(f for f in glob.glob(pat) if not _TMP.search(f) and os.path.isfile(f))


_TMP = re.compile(r"\.tmp\d+$")
RUN_PREFIX = ".hetmem-prof-"


def run_template(template: str, token: str) -> str:
    """The template one run hands to the interposer: the file names of
    `template` behind a hidden per-run prefix, so that the run knows exactly
    which files its own processes wrote (not by time: an earlier run's file,
    or one with a clock ahead, is never taken for this run's); publish()
    gives them their names."""
    p = Path(template)
    return str(p.with_name(f"{RUN_PREFIX}{token}-{p.name}"))


def publish(template: str, token: str) -> list[str]:
    """Renames the files a run_template(template, token) run wrote to their
    own names (rename: a file or symlink already there is replaced, never
    followed); returns them. One that cannot be renamed keeps its name."""
    d = Path(template).parent
    prefix = f"{RUN_PREFIX}{token}-"
    out: list[str] = []
    try:
        entries = [e for e in os.scandir(d) if e.name.startswith(prefix)]
    except OSError:
        return out
    for e in entries:
        if _TMP.search(e.name) or e.name.endswith(".tmp") or not e.is_file(follow_symlinks=False):
            continue  # still being written (a process that outlives the run)
        final = d / e.name[len(prefix) :]
        try:
            os.rename(e.path, final)
        except OSError:
            final = Path(e.path)
        out.append(str(final))
    return sorted(out)


def read_header(path: str | Path) -> dict[str, Any] | None:
    """A profile's header record, read without the rest of the file (for
    listing runs); None when it is not readable as one. load() validates."""
    try:
        with open(path, "rb") as f:
            hdr = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return hdr if isinstance(hdr, dict) else None


def sampler_overhead(header: dict[str, Any] | None) -> tuple[str, float] | None:
    """(sampler name, its estimated overhead as a fraction of the run) from
    a profile's header; None without a sampler or an estimate."""
    samp = (header or {}).get("sampler")
    if not isinstance(samp, dict) or samp.get("name") in (None, "none"):
        return None
    ov = samp.get("overhead")
    return (str(samp["name"]), float(ov)) if isinstance(ov, int | float) else None


def _span(path: str) -> tuple[float, float] | None:
    """(start, end) in seconds since the epoch of a profile's process."""
    hdr = read_header(path)
    try:
        start = float(hdr["start_unix"])  # type: ignore[index]
        return start, start + int(hdr["wall_ns"]) / 1e9  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None


def expand(path: str) -> list[str]:
    """The files a profile argument names. A name that is not a file but was
    given to `hetmem profile -o` stands for the per-process files of the
    latest run written under it: the newest file and every file whose process
    ran at the same time as one of those (an MPI job's ranks and launcher
    overlap; an earlier run with the same -o does not). Any other name is
    itself, so a missing file is still reported as missing."""
    if os.path.exists(path) or "%" in path:
        return [path]
    spans = [(*sp, f) for f in written_files(output_template(path)) if (sp := _span(f))]
    if not spans:
        return [path]
    spans.sort(key=lambda s: s[1])
    lo, _, _ = spans[-1]
    run = [spans[-1][2]]
    # walk back in order of end time, joining every process alive within the
    # run's span so far (tolerance: file write and clock granularity)
    for start, end, f in reversed(spans[:-1]):
        if end >= lo - 0.5:
            run.append(f)
            lo = min(lo, start)
    return sorted(run)


def _per_process_hint(p: Path) -> str:
    """`hetmem profile -o FILE` writes FILE.RANK.PID, one per process, so a
    user who then names FILE itself is told which files there are."""
    near = [Path(f).name for f in written_files(output_template(str(p)))]
    if not near:
        return ""
    more = f" and {len(near) - 3} more" if len(near) > 3 else ""
    return f" (profiles are written one per process: {', '.join(near[:3])}{more})"


def _parse(name: str, lines: Iterable[tuple[int, bytes]]) -> Profile:
    c = _Ctx(name)
    header: dict[str, Any] | None = None
    modules: list[Module] = []
    sites: list[Site] = []
    ended = False
    for n, raw in lines:
        c.line = n
        if ended:
            raise c.fail("data after the end record")
        rec = _record(c, raw)
        if header is None:
            header = _parse_header(c, rec)
            continue
        kind = rec.get("type")
        if kind == "module":
            if sites:
                raise c.fail("module records must precede site records")
            modules.append(_parse_module(c, rec, len(modules)))
        elif kind == "site":
            sites.append(_parse_site(c, rec, modules, header))
        elif kind == "end":
            if c.int_(rec, "sites") != len(sites) or c.int_(rec, "modules") != len(modules):
                raise c.fail("end record counts do not match the records read (file damaged)")
            ended = True
        else:
            raise c.fail(f"unknown record type {kind!r}")
    hdr = _check_complete(c, header, ended, len(modules))
    return Profile(path=name, header=hdr, modules=modules, sites=sites)


def _record(c: _Ctx, raw: bytes) -> dict[str, Any]:
    """One line's JSON object."""
    if len(raw) > MAX_LINE:
        raise c.fail("line too long")
    if not raw.endswith(b"\n"):
        raise c.fail("truncated (last line has no newline)")
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):
        raise c.fail("not valid JSON (truncated or corrupt)") from None
    return c.obj(rec, "record")


def _parse_module(c: _Ctx, rec: dict[str, Any], expected: int) -> Module:
    idx = c.int_(rec, "index")
    if idx != expected:
        raise c.fail(f"module index {idx} out of order (expected {expected})")
    return Module(path=c.str_(rec, "path", allow_empty=False), build_id=_build_id(c, rec))


def _check_complete(
    c: _Ctx, header: dict[str, Any] | None, ended: bool, nmodules: int
) -> dict[str, Any]:
    """The header, once the file proved whole."""
    if header is None:
        c.line = 0
        raise c.fail("empty file (not a hetmem profile)")
    if not ended:
        c.line = 0
        raise c.fail("truncated: no end record (did the process die before exit?)")
    if not int(header["binary"]) < nmodules:
        c.line = 1
        raise c.fail("'binary' names a module the file does not declare")
    return header


# --------------------------------------------------------------------------
# Merging


@dataclass
class Merged:
    """Several profiles (ranks, runs) as one set of sites.

    `sites` are the merged sites; `per_profile[p]` maps a merged site index to
    that profile's own site, so that capacity constraints can be stated per
    process (each rank has its own share of the budget).
    """

    profiles: list[Profile]
    depth: int
    sites: list[Site]
    per_profile: list[dict[int, Site]]

    @property
    def modules(self) -> list[Module]:
        seen: dict[str, Module] = {}
        for s in self.sites:
            for m, _ in s.frames:
                seen.setdefault(m.key, m)
        return list(seen.values())

    @property
    def outside_peak_bytes(self) -> int:
        """The most any one process held outside its sites: per process,
        like a site's peak live bytes."""
        return max((p.outside_peak_bytes for p in self.profiles), default=0)


def merge(profiles: Sequence[Profile]) -> Merged:
    """Merges profiles: sites meet when their frames, truncated to the
    shallowest recorded depth, name the same (module, offset) pairs.

    Counts, bytes and estimated accesses add up; peak live bytes is the
    largest of any one process (a per-process quantity); lifetimes combine.
    """
    if not profiles:
        raise SchemaError("no profiles to merge")
    depth = min(p.depth for p in profiles)
    index: dict[tuple[FrameKey, ...], int] = {}
    merged: list[Site] = []
    per_profile: list[dict[int, Site]] = []
    for p in profiles:
        mine: dict[int, Site] = {}
        for s in p.sites:
            key = s.key(depth)
            i = index.get(key)
            if i is None:
                i = index[key] = len(merged)
                merged.append(Site(frames=list(s.frames[:depth]), sources=0, static=s.static))
            m = merged[i]
            if i in mine:
                # Two sites of one profile that differ only beyond the common
                # depth: within this profile they are now one site.
                mine[i] = _combine_same_process(mine[i], s)
            else:
                mine[i] = s
            _accumulate(m, s)
        per_profile.append(mine)
    for i, m in enumerate(merged):
        mine_all = [mine[i] for mine in per_profile if i in mine]
        m.sources = len(mine_all)
        # Peak live bytes is per process: the largest of any one process,
        # after that process's own sites that truncation joined were added.
        m.peak_live_bytes = max(s.peak_live_bytes for s in mine_all)
    return Merged(profiles=list(profiles), depth=depth, sites=merged, per_profile=per_profile)


def _accumulate(m: Site, s: Site) -> None:
    total_freed = (m.allocs - m.never_freed) + (s.allocs - s.never_freed)
    if total_freed:
        m.lifetime_mean_ns = (
            m.lifetime_mean_ns * (m.allocs - m.never_freed)
            + s.lifetime_mean_ns * (s.allocs - s.never_freed)
        ) / total_freed
    if s.allocs - s.never_freed:
        had = m.allocs - m.never_freed
        m.lifetime_min_ns = (
            s.lifetime_min_ns if not had else min(m.lifetime_min_ns, s.lifetime_min_ns)
        )
        m.lifetime_max_ns = max(m.lifetime_max_ns, s.lifetime_max_ns)
    total_acc = m.est_accesses + s.est_accesses
    if total_acc:
        m.random_fraction = (
            m.random_fraction * m.est_accesses + s.random_fraction * s.est_accesses
        ) / total_acc
    m.allocs += s.allocs
    m.bytes += s.bytes
    m.max_bytes = max(m.max_bytes, s.max_bytes)
    m.peak_live_bytes = max(m.peak_live_bytes, s.peak_live_bytes)
    m.never_freed += s.never_freed
    m.loads += s.loads
    m.stores += s.stores
    m.first += s.first
    m.reuse_pages += s.reuse_pages
    m.small_count += s.small_count
    m.small_bytes += s.small_bytes
    m.est_accesses = total_acc


def _combine_same_process(a: Site, b: Site) -> Site:
    """Two sites of one process seen as one: live series add pointwise."""
    out = Site(frames=a.frames, sources=1, static=a.static)
    _accumulate(out, a)
    _accumulate(out, b)
    out.live = add_series([a.live, b.live])
    out.peak_live_bytes = max((v for _, v in out.live), default=0)
    return out


def add_series(series: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Pointwise sum of step functions (each [(t, v)], v holding until the next t)."""
    times = sorted({t for s in series for t, _ in s})
    out: list[tuple[int, int]] = []
    pos = [0] * len(series)
    cur = [0] * len(series)
    for t in times:
        for j, s in enumerate(series):
            while pos[j] < len(s) and s[pos[j]][0] <= t:
                cur[j] = s[pos[j]][1]
                pos[j] += 1
        v = sum(cur)
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out


def module_keys(profile: Profile) -> dict[str, Module]:
    return {m.key: m for m in profile.modules}


def to_json(profile: Profile) -> dict[str, Any]:
    """A summary of a profile for `hetmem profile show --json`."""
    return {
        "path": profile.path,
        "header": profile.header,
        "modules": [{"path": m.path, "build_id": m.build_id} for m in profile.modules],
    }


def dumps(
    header: dict[str, Any], modules: Sequence[tuple[str, str]], sites: Sequence[dict[str, Any]]
) -> str:
    """Reference writer of the format (tests and fuzz seeds use it; the
    interposer writes the same lines from C). header: the header fields
    without magic/schema_version/type; modules: (path, build-id hex);
    sites: site records without "type"."""
    lines = [
        json.dumps({"magic": MAGIC, "schema_version": SCHEMA_VERSION, "type": "header", **header})
    ]
    for i, (path, bid) in enumerate(modules):
        lines.append(json.dumps({"type": "module", "index": i, "path": path, "build_id": bid}))
    for s in sites:
        lines.append(json.dumps({"type": "site", **s}))
    lines.append(json.dumps({"type": "end", "sites": len(sites), "modules": len(modules)}))
    return "\n".join(lines) + "\n"


def default_header(**over: Any) -> dict[str, Any]:
    """A complete header with neutral values (for tests and tools)."""
    h: dict[str, Any] = {
        "binary": 0,
        "pid": 1,
        "rank": None,
        "hostname": "localhost",
        "start_unix": 0.0,
        "wall_ns": 1_000_000_000,
        "depth": 8,
        "threshold": 4096,
        "bytes_per_access": 64,
        "threads": 1,
        "sampler": {"name": "test", "period": 1.0},
        "small": {"count": 0, "bytes": 0},
    }
    h.update(over)
    return h
