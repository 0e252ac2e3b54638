# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run --mode flat` and `--mode hybrid`: profile-guided placement.

The placement (`hetmem advise`, or with --auto-fast alone one made from
this machine's tiers) is turned into the interposer's compact table; after
the run, the per-site outcomes of every process are summed and the
allocations that did not go where the placement said are reported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hetmem.errors import EnvironmentProblem, UsageError
from hetmem.output import run_note as note
from hetmem.output import write_atomic
from hetmem.placement import fileformat as placement_mod
from hetmem.run import autofast
from hetmem.run.checks import check_pager, check_storage, check_threshold
from hetmem.run.config import RunConfig, _cache_env, preload_path
from hetmem.run.proc import _run_tmpdir, _spawn
from hetmem.run.report import _merge_procs, _note_tiers, _read_interposer_stats
from hetmem.sizes import format_size


def validate_place(cfg: RunConfig) -> None:
    if cfg.placement is None and cfg.auto_fast is None:
        raise UsageError(
            f"--mode {cfg.mode} needs --placement FILE (from `hetmem advise`) or --auto-fast"
        )
    check_threshold(cfg.threshold)
    if not preload_path().exists():
        raise EnvironmentProblem(f"{preload_path()} is missing: reinstall hetmem")
    if cfg.placement is None:
        return
    if not cfg.placement.is_file():
        raise UsageError(f"placement file '{cfg.placement}' does not exist")
    p = placement_mod.load(cfg.placement)  # SchemaError: one line, exit 2
    if any(t.kind == "storage" for t in p.tiers):
        assert cfg.storage is not None
        check_storage(cfg.storage, 1 << 20)
        check_pager(cfg)


def pinned_bytes(p: placement_mod.Placement, budget: int) -> int:
    """Fast-tier bytes the placement pins: the sum of its fast sites' peak
    live bytes (an upper bound of their concurrent use) and of its split
    sites' heads, at most the budget."""
    fast = sum(s.peak_live_bytes for s in p.sites if s.tier == 0)
    heads = sum(s.split_bytes for s in p.sites if s.tier > 0 and s.split_bytes)
    return min(budget, fast + heads)


def _merge_placement(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-site outcomes summed over the processes of the command."""
    pls = [p["placement"] for p in procs if isinstance(p.get("placement"), dict)]
    if not pls:
        return None
    out: dict[str, Any] = {
        "place_mode": pls[0].get("place_mode"),
        "pager_budget": pls[0].get("pager_budget"),
        "processes": len(pls),
        "huge_page_size": pls[0].get("huge_page_size", 0),
        "huge_page_bytes": sum(pl.get("huge_page_bytes", 0) for pl in pls),
        "auto_fast": pls[0].get("auto_fast"),  # the interposer's reading of the range
    }
    tiers: list[dict[str, Any]] = [dict(t) for t in pls[0].get("tiers", [])]
    for pl in pls[1:]:
        for t, o in zip(tiers, pl.get("tiers", []), strict=False):
            t["allocations"] += o.get("allocations", 0)
            t["live_bytes"] += o.get("live_bytes", 0)
            t["peak_bytes"] = max(t["peak_bytes"], o.get("peak_bytes", 0))
    out["tiers"] = tiers

    def add(a: dict[str, Any], b: dict[str, Any]) -> None:
        a["allocations"] = a.get("allocations", 0) + b.get("allocations", 0)
        a["overflows"] = a.get("overflows", 0) + b.get("overflows", 0)
        old = a.get("bytes", [])
        new = b.get("bytes", [])
        a["bytes"] = [x + y for x, y in zip(old + [0] * (len(new) - len(old)), new, strict=False)]
        if len(old) > len(new):
            a["bytes"] += old[len(new) :]

    unmatched: dict[str, Any] = {}
    sites: dict[int, dict[str, Any]] = {}
    for pl in pls:
        add(unmatched, pl.get("unmatched", {}))
        for s in pl.get("sites", []):
            cur = sites.setdefault(
                int(s["id"]),
                {"id": s["id"], "tier": s["tier"], "split_bytes": s.get("split_bytes", 0)},
            )
            cur["split_allocations"] = cur.get("split_allocations", 0) + s.get(
                "split_allocations", 0
            )
            add(cur, s)
    out["unmatched"] = unmatched
    out["sites"] = [sites[k] for k in sorted(sites)]
    out["overflows"] = sum(s["overflows"] for s in out["sites"]) + unmatched.get("overflows", 0)
    cache = [pl.get("match_cache", {}) for pl in pls]
    out["match_cache"] = {
        "hits": sum(c.get("hits", 0) for c in cache),
        "misses": sum(c.get("misses", 0) for c in cache),
    }
    return out


def _note_outcomes(
    pl: dict[str, Any] | None,
    fallbacks: int,
    fast: int,
    have_stats: bool,
    slowest: str,
    mmaps: int = 0,
) -> None:
    """Allocations that a full tier sent to a slower one, that no tier could
    serve, or that matched no site (and went to the slowest tier): the user
    hears of them at the end of the run. mmaps: hybrid's anonymous mmaps,
    which the pager serves as in cache mode (no profile has their sites):
    counted among the unmatched, not noted."""
    if not pl:
        return
    um = pl.get("unmatched") or {}
    n = um.get("allocations", 0) - mmaps
    if n > 0:
        size = "" if mmaps else f" ({format_size(sum(um.get('bytes', [])))})"
        note(
            f"{n} large allocation(s){size} matched no site of the placement and went to its "
            f"slowest tier, {slowest}; a profile of a run of this build that makes them "
            "places them"
        )
    if fallbacks:
        note(
            f"{fallbacks} large allocation(s) could not be served by any tier of the "
            "placement and came from glibc's memory"
            + ("" if have_stats else "; --stats FILE gives the run's counters")
        )
    if not pl.get("overflows"):
        return
    down = 0
    for s in pl.get("sites", []):
        down += sum(b for t, b in enumerate(s.get("bytes", [])) if t > s["tier"])
    note(
        f"{pl['overflows']} allocation(s) of placed sites found their tier full and went to a "
        f"slower one ({format_size(down)}; fast capacity {format_size(fast)} per process)"
        + ("" if have_stats else "; --stats FILE gives them per site")
    )


def place_unit(cache: int) -> int:
    """The pager's fetch unit for a cache of this many bytes: the largest of
    256, 128 and 64 KiB of which it holds 100 (hm__place_unit in
    src/preload/init.c, which applies it to the least cache)."""
    return next((u for u in (256 << 10, 128 << 10) if cache >= 100 * u), 64 << 10)


def _hybrid_unit(cfg: RunConfig, p: placement_mod.Placement) -> int:
    """Hybrid mode's fetch unit from the cache the advisor expects the pager
    to have on average (`advise --for hybrid`'s pager_cache_mean_bytes);
    0: the interposer's own choice from its least cache."""
    mean = p.meta.get("pager_cache_mean_bytes")  # a positive int (fileformat.load)
    if cfg.mode != "hybrid" or mean is None:
        return 0
    return place_unit(min(mean, cfg.budget))


def _write_compact(
    cfg: RunConfig, compact: Path, stats: dict[str, Any]
) -> tuple[list[str], str, int]:
    """The interposer's table: from --placement, else (--auto-fast alone)
    made from this machine's tiers; returns the warnings to print, the
    slowest tier's name and hybrid's fetch unit (0: the interposer's)."""
    if cfg.placement is None:
        p, notes = autofast.machine_placement()
        p.tiers[0].capacity_bytes = cfg.budget
        write_atomic(compact, placement_mod.compact(p))
        for n in notes:
            note(n)
        stats["fast_capacity"] = cfg.budget
        return [], p.tiers[-1].name, 0
    p = placement_mod.load(cfg.placement)
    flat_made = p.meta.get("for_mode") == "flat" and p.tiers and p.tiers[-1].kind == "storage"
    if cfg.mode == "hybrid" and flat_made:
        note(
            "the placement was advised for flat mode: `hetmem advise --for hybrid` counts the "
            "pager's cache, which hybrid mode's pins take from"
        )
    # (a placement without sites has the note on unmatched allocations)
    if cfg.mode == "hybrid" and p.sites and p.pins_nothing:
        why = (
            "`hetmem advise --for hybrid` priced its best placement within the model's error "
            "of cache mode"
            if p.meta.get("hybrid_as_cache") is True
            else "no site is on a faster tier, and none is split"
        )
        note(
            f"the placement leaves every site to the pager ({why}): this run is cache mode in "
            "all but name"
        )
    fast = cfg.budget if cfg.mode == "flat" else pinned_bytes(p, cfg.budget)
    stats["fast_capacity"] = fast
    warnings = placement_mod.prepare_for_run(
        cfg.placement, compact, cfg.command[0], fast_capacity=fast
    )
    return warnings, p.tiers[-1].name if p.tiers else "?", _hybrid_unit(cfg, p)


def _run_place(cfg: RunConfig, state: dict[str, Any], stats: dict[str, Any]) -> tuple[int, float]:
    stats["placement_file"] = str(cfg.placement) if cfg.placement else None
    stats["threshold"] = cfg.threshold
    if cfg.auto_fast is not None:
        stats["auto_fast"] = {"min": cfg.auto_fast[0], "max": cfg.auto_fast[1]}
        if cfg.threshold is None or cfg.threshold > cfg.auto_fast[0]:
            # the interposer sees only allocations of at least the threshold
            cfg.threshold = max(cfg.auto_fast[0], os.sysconf("SC_PAGE_SIZE"))
            stats["threshold"] = cfg.threshold
    with _run_tmpdir(state) as tmp:
        compact = tmp / "placement.compact"
        warnings, slowest, unit = _write_compact(cfg, compact, stats)
        fast = stats["fast_capacity"]
        for w in warnings:
            os.write(2, f"hetmem run: warning: {w}\n".encode())
        stats["warnings"] = warnings
        # always read back: a site that did not fit is reported with or
        # without --stats
        lines_file = tmp / "interposer.jsonl"
        env = _cache_env(cfg, lines_file)
        env["HETMEM_PLACEMENT"] = str(compact)
        env["HETMEM_PLACE_MODE"] = cfg.mode
        if unit:  # a unit the user set stays
            env.setdefault("HETMEM_FETCH_UNIT", str(unit))
        if cfg.auto_fast is not None:
            env["HETMEM_AUTO_FAST"] = autofast.env_value(cfg.auto_fast)
        env.pop("HETMEM_PROFILE", None)
        rc, wall = _spawn(cfg.command, env, state, adopt=True)
        procs = _read_interposer_stats(lines_file)
    _merge_procs(stats, procs)
    stats["placement"] = _merge_placement(procs)
    if procs and stats["threshold"] is None:
        stats["threshold"] = procs[0].get("threshold")
    _note_tiers(stats, procs, cfg)
    # a full storage tier's fallbacks have their own note
    full_fallbacks = (stats["storage_full"] or {}).get("fallbacks", 0)
    fallbacks = (stats["interposer"] or {}).get("fallbacks", 0) - full_fallbacks
    # the interposer's own figure: the budget less the pager's least cache
    # when a tier is the storage tier
    tiers = (stats["placement"] or {}).get("tiers") or [{}]
    _note_outcomes(
        stats["placement"],
        fallbacks,
        int(tiers[0].get("capacity") or fast),
        cfg.stats is not None,
        slowest,
        (stats["interposer"] or {}).get("mmap_allocations", 0) if cfg.mode == "hybrid" else 0,
    )
    stats["processes"] = procs
    return rc, wall
