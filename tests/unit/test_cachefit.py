# SPDX-License-Identifier: BSD-3-Clause
"""Hybrid placement with the pager's cache counted (hetmem.placement.cachefit)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_advise import _storage_tiers, parse, prof_text, seg_site, tiers

from hetmem.placement import advise as A
from hetmem.placement import cachefit as CF
from hetmem.placement import profile as P

MIB = 1 << 20
BUDGET = 64 * MIB  # the pager's least cache (8 MiB) leaves 56 MiB for pins


def _merged(sites):
    return P.merge([parse(prof_text(sites))])


def _tiers_of(res):
    return {s.frames[0][1]: s.tier for s in res.placement.sites}


def test_a_pin_that_takes_a_phase_s_cache_is_left_to_the_pager(monkeypatch):
    # phase 2 sweeps X and Y (40 MiB each, equally hot) beside a work array
    # W touched a few times. The solver pins X and W (48 of 56 MiB): with
    # the cache counted, W's 8 MiB served the pager's Y better than W.
    # (X alone is priced within GAIN_MARGIN of cache mode: see below.)
    monkeypatch.setattr(CF, "GAIN_MARGIN", 0.0)
    sites = [
        seg_site(0x10, [(500, 1000, 40 * MIB)], 1000),  # X
        seg_site(0x20, [(500, 1000, 40 * MIB)], 1000),  # Y
        seg_site(0x30, [(500, 1000, 8 * MIB)], 2),  # W
    ]
    flat = A.advise(_merged(sites), _storage_tiers(), BUDGET, split=False)
    assert sorted(_tiers_of(flat).values()) == [0, 0, 1] and _tiers_of(flat)[0x30] == 0
    hyb = A.advise(
        _merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid", explain_top=3
    )
    got = _tiers_of(hyb)
    assert got[0x30] == 1 and sorted(got.values()) == [0, 1, 1], got
    why = {s.frames[0][1]: s.reason for s in hyb.placement.sites}
    assert why[0x30].startswith("left to the pager"), why
    meta = hyb.placement.meta
    assert meta["for_mode"] == "hybrid" and flat.placement.meta["for_mode"] == "flat"
    # priced with the cache counted: below the solver's placement and cache mode
    assert meta["predicted_time_s"] < meta["predicted_time_cache_mode_s"]
    assert any("1 site(s) left to the pager" in n for n in hyb.notes), hyb.notes
    # the whole budget in the first half of the run, 24 MiB in the second,
    # where the pager works: its mean where it works is 24 MiB
    assert meta["pager_cache_mean_bytes"] == pytest.approx(24 * MIB, rel=1e-3)
    # X's pin, priced below cache mode by less than the margin, goes too;
    # each site says why it left
    monkeypatch.setattr(CF, "GAIN_MARGIN", 0.10)
    hyb = A.advise(
        _merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid", explain_top=3
    )
    assert set(_tiers_of(hyb).values()) == {1} and hyb.placement.meta["hybrid_as_cache"]
    why = {s.frames[0][1]: s.reason for s in hyb.placement.sites}
    # X or Y (a tie for the solver) was the pin the margin took
    assert sum("too close to cache mode" in why[a] for a in (0x10, 0x20)) == 1, why
    assert "would save less than the cache it took" in why[0x30], why


def test_a_dense_pin_stays():
    # X is ten times as hot as Y: pinned, it saves more than its cache serves Y
    sites = [
        seg_site(0x10, [(0, 1000, 40 * MIB)], 10000),
        seg_site(0x20, [(0, 1000, 40 * MIB)], 1000),
    ]
    hyb = A.advise(_merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid")
    assert _tiers_of(hyb) == {0x10: 0, 0x20: 1}
    # the pager's cache over time: the budget less the pinned 40 MiB
    assert hyb.placement.meta["pager_cache_mean_bytes"] == 24 * MIB
    assert any("every pin and head saves time" in n for n in hyb.notes), hyb.notes


def test_a_pin_in_a_phase_that_fits_cache_mode_is_left_to_the_pager():
    # phase 1: a hot 30 MiB array alone, which cache mode's 64 MiB holds
    # whole. Pinned, it costs nothing there; but it lives on into phase 2,
    # where its 30 MiB are what the pager needed for Z (48 MiB, hot).
    sites = [
        seg_site(0x10, [(0, 1000, 30 * MIB)], 3000),  # lives throughout, hot early
        seg_site(0x20, [(600, 1000, 48 * MIB)], 3000),
    ]
    merged = _merged(sites)
    flat = A.advise(merged, _storage_tiers(), BUDGET, split=False)
    assert _tiers_of(flat)[0x10] == 0
    hyb = A.advise(_merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid")
    # 0x10's accesses are spread over its whole life: 40% in phase 2, at
    # 0x20's density or less, so Z's misses outweigh what the pin saves
    assert _tiers_of(hyb)[0x10] == 1


def test_a_head_at_a_tie_is_dropped_and_flat_keeps_it():
    # one 120 MiB array swept alone: a head holds what the cache would
    sites = [seg_site(0x10, [(0, 1000, 120 * MIB)], 5000)]
    flat = A.advise(_merged(sites), _storage_tiers(), BUDGET)
    assert flat.placement.sites[0].split_bytes > 0
    hyb = A.advise(_merged(sites), _storage_tiers(), BUDGET, for_mode="hybrid")
    assert not hyb.placement.sites[0].split_bytes
    assert "split_sites" not in hyb.placement.meta
    assert any("1 head(s) dropped" in n for n in hyb.notes), hyb.notes


def test_a_head_must_keep_a_margin_of_what_the_split_credited(monkeypatch):
    # beside a sparse 16 MiB array the head gains a little with the cache
    # counted (it takes the sparse array's cache): less than HEAD_MARGIN of
    # the time the split was credited with, so it goes
    sites = [
        seg_site(0x10, [(0, 1000, 120 * MIB)], 5000),
        seg_site(0x20, [(0, 1000, 16 * MIB)], 50),
    ]
    hyb = A.advise(_merged(sites), _storage_tiers(), BUDGET, for_mode="hybrid")
    assert all(not s.split_bytes for s in hyb.placement.sites)
    meta = hyb.placement.meta
    assert meta["predicted_time_s"] == pytest.approx(meta["predicted_time_cache_mode_s"])
    # not a tie: without the margins the head stays, priced below cache mode
    monkeypatch.setattr(CF, "HEAD_MARGIN", 0.0)
    monkeypatch.setattr(CF, "GAIN_MARGIN", 0.0)
    keep = A.advise(_merged(sites), _storage_tiers(), BUDGET, for_mode="hybrid")
    assert any(s.split_bytes for s in keep.placement.sites)
    meta = keep.placement.meta
    assert meta["predicted_time_s"] < meta["predicted_time_cache_mode_s"]


def test_a_placement_priced_close_to_cache_mode_runs_as_cache_mode(monkeypatch):
    # three 40 MiB arrays swept together, X a little hotter: pinning X
    # (40 of 56 MiB) is priced a few percent below cache mode, within the
    # model's error, so every site goes to the pager
    sites = [
        seg_site(0x10, [(0, 1000, 40 * MIB)], 1100),
        seg_site(0x20, [(0, 1000, 40 * MIB)], 1000),
        seg_site(0x30, [(0, 1000, 40 * MIB)], 1000),
    ]
    hyb = A.advise(
        _merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid", explain_top=3
    )
    assert set(_tiers_of(hyb).values()) == {1}, _tiers_of(hyb)
    meta = hyb.placement.meta
    assert meta["hybrid_as_cache"] is True
    assert meta["predicted_time_s"] == pytest.approx(meta["predicted_time_cache_mode_s"])
    note = next(n for n in hyb.notes if "as in cache mode" in n)
    assert "1.11x" in note, note
    why = {s.frames[0][1]: s.reason for s in hyb.placement.sites}
    assert "too close to cache mode" in why[0x10], why
    # the pin itself is priced below cache mode: without the margin it stays
    monkeypatch.setattr(CF, "GAIN_MARGIN", 0.0)
    keep = A.advise(_merged(sites), _storage_tiers(), BUDGET, split=False, for_mode="hybrid")
    assert _tiers_of(keep)[0x10] == 0 and "hybrid_as_cache" not in keep.placement.meta
    kept = keep.placement.meta
    assert kept["predicted_time_s"] < kept["predicted_time_cache_mode_s"]
    assert kept["predicted_time_s"] > 0.9 * kept["predicted_time_cache_mode_s"]
    # with nothing pinned the pager has the pin's 40 MiB more
    assert meta["pager_cache_mean_bytes"] - kept["pager_cache_mean_bytes"] == 40 * MIB


def test_memory_tiers_alone_are_not_refined():
    sites = [seg_site(0x10 + i, [(0, 1000, 40 * MIB)], 100 * (i + 1)) for i in range(3)]
    ts = tiers(2, [56 * MIB, None])
    flat = A.advise(_merged(sites), ts, 56 * MIB, split=False)
    hyb = A.advise(_merged(sites), ts, 56 * MIB, split=False, for_mode="hybrid")
    assert _tiers_of(flat) == _tiers_of(hyb)
    assert "predicted_time_cache_mode_s" not in hyb.placement.meta


@pytest.mark.parametrize("seed", range(6))
def test_removal_prices_match_pricing_each_placement(seed):
    # the vectorised prices of every removal are the prices of the
    # placements without it, on random phased instances of two profiles
    rng = np.random.default_rng(seed)
    profs = []
    for r in range(2):
        sites = []
        for i in range(7):
            a = int(rng.integers(0, 800))
            b = int(rng.integers(a + 1, 1000))
            sites.append(seg_site(0x10 + i, [(a, b, int(rng.integers(1, 40)) * MIB)],
                                  int(rng.integers(0, 5000))))  # fmt: skip
        profs.append(parse(prof_text(sites, rank=r)))
    merged = P.merge(profs)
    res = A.advise(merged, _storage_tiers(), BUDGET, split=False)
    pr = CF.Pricer(res.problem, merged, BUDGET, A.PAGER_FLOOR)
    assign = np.array([rng.integers(0, 2) for _ in range(res.problem.nsites)])
    cands = [(i, False) for i in range(res.problem.nsites) if assign[i] == 0]
    got = pr.removals(assign, {}, cands)
    for c, (i, _) in enumerate(cands):
        moved = assign.copy()
        moved[i] = 1
        assert got[c] == pytest.approx(pr.price(moved, {}), rel=1e-9)
    assert pr.price(np.ones_like(assign), {}) >= pr.price(np.zeros_like(assign), {})


def test_advise_cli_for_hybrid(tmp_path, hetmem):
    prof = tmp_path / "a.prof"
    prof.write_text(prof_text([
        seg_site(0x10, [(500, 1000, 40 * MIB)], 1000),
        seg_site(0x20, [(500, 1000, 40 * MIB)], 1000),
        seg_site(0x30, [(500, 1000, 8 * MIB)], 2),
    ]))  # fmt: skip
    out = tmp_path / "p.toml"
    proc = hetmem("advise", str(prof), "--fast-budget", "64M", "--no-split", "--for", "hybrid",
                  "--storage", str(tmp_path), "--json", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert any("left to the pager" in n for n in doc["notes"]), doc["notes"]
    assert 'for_mode = "hybrid"' in out.read_text()
    bad = hetmem("advise", str(prof), "--fast-budget", "64M", "--for", "cache")
    assert bad.returncode == 2 and "--for" in bad.stderr
