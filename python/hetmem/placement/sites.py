# SPDX-License-Identifier: BSD-3-Clause
"""A profile's sites as `hetmem profile show` lists them: symbolized frames,
the name people can tell apart, hottest first; and the one profile a path
stands for."""

from __future__ import annotations

from typing import Any

from hetmem.errors import UsageError
from hetmem.placement import profile as prof
from hetmem.placement.sitenames import (
    distinct_labels,
    first_user_frame,
    frame_text,
    raw_frame,
    site_functions,
)
from hetmem.placement.symbolize import Location, Symbolizer


def load_one(path: str) -> tuple[str, prof.Profile]:
    """The one profile `path` stands for (a file, or the `-o` name of a run
    whose launcher wrote a profile beside its one rank's), and its file."""
    loaded = {f: prof.load(f) for f in prof.expand(path)}
    if len(loaded) > 1:
        # a launcher's profile has no site: with one rank, show the rank
        loaded = {f: p for f, p in loaded.items() if p.sites} or loaded
    if len(loaded) > 1:
        raise UsageError(
            f"{path} stands for {len(loaded)} per-process profiles of one run: "
            f"{', '.join(loaded)}; show one of them"
        )
    ((path, p),) = loaded.items()
    return path, p


def frame_inputs(
    sites: list[prof.Site], depth: int | None = None
) -> list[tuple[str, str, str, int]]:
    out = []
    for s in sites:
        for m, off in s.frames[:depth]:
            out.append((m.key, m.path, m.build_id, off))
    return out


def static_name(sym: Symbolizer, site: prof.Site) -> tuple[str, str | None]:
    """A static array's name, 'static a (stream .bss)', and its symbol
    (None in a file without symbols: then 'static .bss of stream+0x4000').
    Its frame is its own address, not a return address: looked up at
    offset + 1, which the symbolizer's return-address rule takes back."""
    m, off = site.frames[0]
    loc = sym.lookup(m.key, m.path, m.build_id, off + 1)
    name = loc.function if loc is not None and loc.function else None
    if name:
        return f"static {name} ({m.path.rsplit('/', 1)[-1]} .bss)", name
    return f"static .bss of {raw_frame(m.path, off)}", None


def describe_frames(sym: Symbolizer, site: prof.Site, depth: int | None = None) -> list[str]:
    """Each frame as 'function at file:line (module+0xoffset)' or
    'module+0xoffset'; a static array's as static_name gives it."""
    if site.static:
        return [static_name(sym, site)[0]]
    out = []
    for m, off in site.frames[:depth]:
        loc = sym.lookup(m.key, m.path, m.build_id, off)
        known = loc is not None and bool(loc.function or loc.file)
        out.append(frame_text(m.path, off, str(loc) if known else None))
    return out


def user_frame(site: prof.Site) -> int:
    """The index of the site's innermost frame outside the language runtimes
    (0 when every frame is in one)."""
    return first_user_frame([m.path for m, _ in site.frames])


def _functions(sym: Symbolizer, site: prof.Site) -> tuple[list[str], int, Location | None]:
    """The site's frames as functions (inlined ones expanded), the index of
    the first outside the language runtimes, and its place."""
    if site.static:
        text, name = static_name(sym, site)
        return [text], 0, Location(name, None, 0) if name else None
    locs = [sym.lookup(m.key, m.path, m.build_id, off) for m, off in site.frames]
    known = [loc if loc is not None and (loc.function or loc.file) else None for loc in locs]
    texts, start, (k, pos) = site_functions(
        [m.path for m, _ in site.frames],
        [off for _, off in site.frames],
        [str(loc) if loc else None for loc in known],
    )
    if k < len(known) and known[k] is None:  # no symbol: its first caller with one
        k, pos = next((t for t in range(k + 1, len(known)) if known[t]), k), 0
    loc = known[k] if k < len(known) else None
    return texts, start, loc.chain()[pos] if loc else None


def site_rows(p: prof.Profile, sym: Symbolizer) -> list[dict[str, Any]]:
    sym.prefetch(frame_inputs(p.sites))
    rows, functions, starts = [], [], []
    for i, s in enumerate(p.sites):
        texts, start, loc = _functions(sym, s)
        functions.append(texts)
        starts.append(start)
        rows.append(
            {
                "index": i,
                "user_frame": user_frame(s),
                "function": loc.function if loc else None,
                "file": loc.file if loc else None,
                "line": loc.line if loc else 0,
                "frames": [
                    {"module": m.path, "build_id": m.build_id, "offset": off} for m, off in s.frames
                ],
                "symbols": describe_frames(sym, s),
                "allocs": s.allocs,
                "bytes": s.bytes,
                "max_bytes": s.max_bytes,
                "peak_live_bytes": s.peak_live_bytes,
                "lifetime_ns": {
                    "min": s.lifetime_min_ns,
                    "mean": s.lifetime_mean_ns,
                    "max": s.lifetime_max_ns,
                },
                "never_freed": s.never_freed,
                "static": s.static,
                "samples": {"loads": s.loads, "stores": s.stores, "first": s.first},
                "est_accesses": s.est_accesses,
                "accesses_per_byte": s.accesses_per_byte,
                "random_fraction": s.random_fraction,
                "reuse_pages": s.reuse_pages,
                "small": {"count": s.small_count, "bytes": s.small_bytes},
            }
        )
    for r, label in zip(rows, distinct_labels(functions, starts), strict=True):
        r["label"] = label
    rows.sort(key=lambda r: -r["est_accesses"])
    return rows
