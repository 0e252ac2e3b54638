# SPDX-License-Identifier: BSD-3-Clause
"""The advisor: exactness against brute force, capacity over time, merging
of ranks, the placement file and its compact form, bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from hetmem.errors import SchemaError
from hetmem.placement import advise as A
from hetmem.placement import fileformat as PL
from hetmem.placement import problem as PB
from hetmem.placement import profile as P
from hetmem.placement import solve as SV
from hetmem.placement import symbolize

BID = "ab" * 20
WALL = 1000


def prof_text(sites, rank=None, host="n1", depth=4, **hdr):
    return P.dumps(
        P.default_header(rank=rank, hostname=host, depth=depth, wall_ns=WALL, **hdr),
        [("/bin/app", BID)],
        sites,
    )


def parse(text: str) -> P.Profile:
    return P.parse_bytes(text.encode(), "t.prof")


def seg_site(off, segments, loads, random_fraction=0.0):
    """A site live as the given [start, end, bytes) segments (may overlap)."""
    times = sorted({t for a, b, _ in segments for t in (a, b)})
    live = []
    for t in times:
        v = sum(x for a, b, x in segments if a <= t < b)
        if not live or live[-1][1] != v:
            live.append([t, v])
    peak = max(v for _, v in live)
    return {
        "frames": [[0, off]],
        "allocs": len(segments),
        "bytes": sum(x for _, _, x in segments),
        "max_bytes": max(x for _, _, x in segments),
        "peak_live_bytes": peak,
        "live": [[t, v] for t, v in live if t <= WALL],
        "samples": {"loads": loads, "stores": 0},
        "random_fraction": random_fraction,
    }


def tiers(n, caps):
    bw = [100.0, 25.0, 5.0, 1.0][:n]
    lat = [100.0, 300.0, 1000.0, 5000.0][:n]
    return [
        PB.Tier(
            name=f"t{i}",
            kind="dram",
            bandwidth_gbs=bw[i],
            latency_ns=lat[i],
            capacity_bytes=caps[i],
        )
        for i in range(n)
    ]


def brute_force(merged: P.Merged, problem: PB.Problem, ts, budget, ranks):
    """Every assignment, checked against the raw live series at every event
    time (independently of the advisor's interval reduction)."""
    s_n, t_n = problem.nsites, problem.ntiers
    caps = [budget] + [t.capacity_bytes for t in ts[1:-1]]
    best = None
    for assign in itertools.product(range(t_n), repeat=s_n):
        ok = True
        for p, mine in enumerate(merged.per_profile):
            times = sorted({t for s in mine.values() for t, _ in s.live})
            for t in times:
                use = [0] * t_n
                for i, s in mine.items():
                    v = 0
                    for tt, b in s.live:
                        if tt <= t:
                            v = b
                    use[assign[i]] += v
                for tier, cap in enumerate(caps):
                    if cap is not None and use[tier] > cap // ranks[p]:
                        ok = False
            if not ok:
                break
        if ok:
            val = sum(problem.cost[i, assign[i]] for i in range(s_n))
            if best is None or val < best[0]:
                best = (val, assign)
    return best


def random_instance(rng, nsites, nprof):
    profiles = []
    for p in range(nprof):
        sites = []
        for i in range(nsites):
            segs = []
            for _ in range(int(rng.integers(1, 3))):
                a = int(rng.integers(0, WALL - 10))
                b = int(rng.integers(a + 1, WALL + 1))
                segs.append((a, b, int(rng.integers(1, 100))))
            sites.append(
                seg_site(
                    0x1000 + i,
                    segs,
                    int(rng.integers(0, 1000)),
                    random_fraction=float(rng.choice([0.0, 0.5])),
                )
            )
        profiles.append(parse(prof_text(sites, rank=p)))
    return profiles


@pytest.mark.parametrize("seed", range(12))
def test_ilp_is_exact_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    ntiers = 2 + seed % 2  # 2 and 3 tiers
    nsites = 5 if ntiers == 3 else 7
    nprof = 1 + seed % 3 // 2  # some instances merge two ranks
    merged = P.merge(random_instance(rng, nsites, nprof))
    budget = int(rng.integers(60, 200))
    ts = tiers(ntiers, [None, int(rng.integers(50, 150)), None][:ntiers])
    problem = PB.build_problem(merged, ts, budget)
    ranks = PB.ranks_on_nodes(merged, None)
    assert ranks == [nprof] * nprof  # distinct ranks on one host share it
    exact = brute_force(merged, problem, ts, budget, ranks)
    sol = SV.solve_ilp(problem)
    assert sol.optimal and sol.solver == "ilp-highs"
    assert not PB.violations(problem, sol.assign)
    base = float(problem.cost[:, -1].sum())
    # Optimal within the solver's proven relative gap on the time saved.
    assert sol.objective <= exact[0] + SV.MIP_REL_GAP * (base - exact[0]) + 1e-15
    greedy = SV.solve_greedy(problem)
    assert not PB.violations(problem, greedy.assign)
    assert greedy.objective >= exact[0] - 1e-15


def test_capacity_counts_peak_concurrent_use_not_sum_of_maxima():
    # Three 100-byte phases, one after the other: the sum of the maxima (300)
    # exceeds the 150-byte budget; the peak concurrent use (100) does not.
    sites = [seg_site(0x10 + i, [(i * 300, i * 300 + 300, 100)], 100 + i) for i in range(3)]
    merged = P.merge([parse(prof_text(sites))])
    problem = PB.build_problem(merged, tiers(2, [None, None]), 150)
    sol = SV.solve(problem)
    assert list(sol.assign) == [0, 0, 0]
    # Overlapping lifetimes: only one of them fits, the one with most accesses.
    sites = [seg_site(0x10 + i, [(0, 500, 100)], 100 + i) for i in range(3)]
    merged = P.merge([parse(prof_text(sites))])
    problem = PB.build_problem(merged, tiers(2, [None, None]), 150)
    sol = SV.solve(problem)
    assert list(sol.assign) == [1, 1, 0]


def test_three_tiers_time_varying():
    # Fast tier 100 B, middle 150 B: two overlapping hot 100-byte sites and
    # a third later one. Exact: hot -> fast, next -> middle, late -> fast.
    sites = [
        seg_site(0x10, [(0, 400, 100)], 1000),
        seg_site(0x20, [(100, 500, 100)], 500),
        seg_site(0x30, [(600, 900, 100)], 10),
    ]
    merged = P.merge([parse(prof_text(sites))])
    problem = PB.build_problem(merged, tiers(3, [None, 150, None]), 100)
    sol = SV.solve(problem)
    assert list(sol.assign) == [0, 1, 0]


def test_cost_model_by_hand():
    s = seg_site(0x10, [(0, 10, 64)], 10, random_fraction=0.5)
    merged = P.merge([parse(prof_text([s], sampler={"name": "x", "period": 100.0}, threads=2))])
    ts = tiers(2, [None, None])
    problem = PB.build_problem(merged, ts, 1 << 30)
    acc = 10 * 100.0
    for t in range(2):
        want = acc * 64 / (ts[t].bandwidth_gbs * 1e9) + 0.5 * acc * ts[t].latency_ns * 1e-9 / 2
        assert problem.cost[0, t] == pytest.approx(want)


SHORT_SAMPLER = {"name": "refs", "period": 64.0, "short_windows": 10,
                 "short_window_us": [1000.0, 3000.0], "sampled_us": 100000.0}  # fmt: skip


def test_short_windows_price_reused_pages_at_each_tiers_latency():
    """Per window 50 pages in the first 1 ms, 70 by 3 ms: a stream of 10
    pages a ms, and 50 - 1.5 x 10 = 35 pages reused in the first window
    (3500 over the 100 ms sampled), each at a tier's latency spread over
    the threads; the accesses stay the samples'."""
    s = seg_site(0x10, [(0, 10, 64)], 300)
    s["samples"]["short"] = [500, 700]
    merged = P.merge([parse(prof_text([s], sampler=SHORT_SAMPLER, threads=2))])
    site = merged.sites[0]
    assert site.reuse_pages == pytest.approx(3500.0)
    assert site.est_accesses == pytest.approx(300 * 64.0)
    ts = tiers(2, [None, None])
    problem = PB.build_problem(merged, ts, 1 << 30)
    acc = 300 * 64.0
    for t in range(2):
        want = acc * 64 / (ts[t].bandwidth_gbs * 1e9) + 3500 * ts[t].latency_ns * 1e-9 / 2
        assert problem.cost[0, t] == pytest.approx(want)


def test_a_sweep_has_no_reuse():
    """Windows whose pages grow in proportion to their length (a sweep)
    reuse nothing, within the slack for the windows' lengths; nor do
    profiles without short windows."""
    s = seg_site(0x10, [(0, 10, 64)], 300)
    for pair in ([20, 60], [25, 60], [15, 60]):
        s["samples"]["short"] = pair
        swept = P.merge([parse(prof_text([s], sampler=SHORT_SAMPLER))])
        assert swept.sites[0].reuse_pages == 0.0, pair
    s["samples"]["short"] = [500, 700]
    old = P.merge([parse(prof_text([s], sampler={"name": "refs", "period": 64.0}))])
    assert old.sites[0].reuse_pages == 0.0


def test_reuse_counts_when_most_pairs_show_it():
    """short_reuse [seen, with reuse, pages]: 350 reused pages over 10
    pairs of 1 ms is 3500 over the 100 ms sampled, when at least half the
    pairs that saw the site show reuse, and at least 3 saw it; a sweep
    that stopped within 2 of its 10 pairs shows it in those only, and has
    none. It overrides the summed pair."""
    s = seg_site(0x10, [(0, 10, 64)], 300)
    s["samples"]["short"] = [500, 700]
    for triple, want in (([10, 10, 350], 3500.0), ([10, 5, 350], 3500.0),
                         ([10, 4, 350], 0.0), ([10, 2, 350], 0.0), ([4, 2, 350], 3500.0),
                         ([3, 2, 350], 3500.0), ([2, 2, 350], 0.0), ([0, 0, 0], 0.0)):  # fmt: skip
        s["samples"]["short_reuse"] = triple
        site = P.merge([parse(prof_text([s], sampler=SHORT_SAMPLER))]).sites[0]
        assert site.reuse_pages == pytest.approx(want), triple


@pytest.mark.parametrize("bad", [[1, 2], [2, 3, 1], [1, 1, -1], [1, 0, 2.5], [True, 0, 1], "x"])
def test_bad_short_reuse_is_a_one_line_error(bad):
    s = seg_site(0x10, [(0, 10, 64)], 300)
    s["samples"]["short_reuse"] = bad
    with pytest.raises(SchemaError, match=r"samples\.short_reuse"):
        parse(prof_text([s], sampler=SHORT_SAMPLER))


@pytest.mark.parametrize("bad", [[1], [1, -1], [1, 2.5], "x"])
def test_bad_short_windows_are_one_line_errors(bad):
    s = seg_site(0x10, [(0, 10, 64)], 300)
    s["samples"]["short"] = bad
    with pytest.raises(SchemaError, match=r"samples\.short"):
        parse(prof_text([s], sampler=SHORT_SAMPLER))


@pytest.mark.parametrize("bad", [-1, 2.5, "x", True, None])
def test_bad_first_touches_are_one_line_errors(bad):
    s = seg_site(0x10, [(0, 10, 64)], 300)
    s["samples"]["first"] = bad
    with pytest.raises(SchemaError, match=r"'first'") as e:
        parse(prof_text([s]))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "key, bad, message",
    [
        ("short_window_us", [1.0], "short_window_us"),
        ("short_window_us", "x", "short_window_us"),
        ("short_window_us", [1.0, -2.0], "short_window_us"),
        ("short_windows", -1, "short_windows"),
        ("sampled_us", "x", "sampled_us"),
    ],
)
def test_bad_short_window_headers_are_one_line_errors(key, bad, message):
    s = seg_site(0x10, [(0, 10, 64)], 300)
    with pytest.raises(SchemaError, match=message) as e:
        parse(prof_text([s], sampler={**SHORT_SAMPLER, key: bad}))
    assert "\n" not in str(e.value)


def test_the_gathered_site_takes_the_fast_tier_from_a_larger_swept_one():
    """Of two sites the budget cannot hold together, the one with more
    interval samples (swept) loses the fast tier to the smaller one that
    its short windows show touched again and again (gathered at random)."""
    swept = seg_site(0x10, [(0, WALL, 48 << 20)], 2000)
    swept["samples"]["short"] = [100, 300]
    gathered = seg_site(0x20, [(0, WALL, 24 << 20)], 1000)
    gathered["samples"]["short"] = [900, 1000]
    merged = P.merge([parse(prof_text([swept, gathered], sampler=SHORT_SAMPLER))])
    ts = tiers(2, [56 << 20, None])
    sol = SV.solve(PB.build_problem(merged, ts, 56 << 20))
    assert list(sol.assign) == [1, 0]
    problem = PB.build_problem(merged, ts, 56 << 20)
    why = A.explain(problem, sol, ts, 1, 1)
    assert "touched again within milliseconds" in why, why
    assert "within milliseconds" not in A.explain(problem, sol, ts, 0, 2)
    for site in (swept, gathered):  # without short windows: the swept one
        del site["samples"]["short"]
    merged = P.merge([parse(prof_text([swept, gathered], sampler=SHORT_SAMPLER))])
    assert list(SV.solve(PB.build_problem(merged, ts, 56 << 20)).assign) == [0, 1]


def test_first_touches_count_whole_only_in_a_long_profile():
    """In a profile of fewer than 8 intervals an array written once at
    start (first touches, and a few sparse loads later) loses the fast tier
    to a smaller one read in every later interval, however many pages it
    first touched; a site seen only when its pages were first touched is
    credited them (a load and a store each) once over the intervals it was
    live for. In a longer profile every first touch counts whole."""

    def sites():
        cold = seg_site(0x10, [(0, WALL, 68 << 20)], 4)
        cold["samples"]["first"] = 17477
        hot = seg_site(0x20, [(0, WALL, 25 << 20)], 3000)
        hot["samples"]["first"] = 6400
        born = seg_site(0x30, [(WALL // 2, WALL, 16 << 20)], 0)  # live half the run
        born["samples"]["first"] = 4096
        return [cold, hot, born]

    def merged(drains):
        samp = {**P.default_header()["sampler"], "drains": drains}
        return P.merge([parse(prof_text(sites(), sampler=samp))])

    short = merged(4)
    per = float(short.profiles[0].header["sampler"]["period"])
    assert [s.first for s in short.sites] == [17477, 6400, 4096]
    est = [s.est_accesses / per for s in short.sites]
    assert est == [4, 3000, pytest.approx(2 * 4096 / 2)]  # born: 2 of 4 intervals
    ts = tiers(2, [70 << 20, None])
    assert list(SV.solve(PB.build_problem(short, ts, 70 << 20)).assign) == [1, 0, 0]
    long = merged(8)
    est = [s.est_accesses / per for s in long.sites]
    assert est == [4 + 2 * 17477, 3000 + 2 * 6400, 2 * 4096]


def test_budget_is_divided_among_ranks_on_a_node():
    def run(host_b, rpn=None):
        a = parse(prof_text([seg_site(0x10, [(0, 10, 100)], 50)], rank=0, host="n1"))
        b = parse(prof_text([seg_site(0x10, [(0, 10, 100)], 50)], rank=1, host=host_b))
        merged = P.merge([a, b])
        problem = PB.build_problem(merged, tiers(2, [None, None]), 150, rpn)
        return SV.solve(problem).assign[0], PB.ranks_on_nodes(merged, rpn)

    assert run("n1") == (1, [2, 2])  # 75 B per rank: does not fit
    assert run("n2") == (0, [1, 1])  # one rank per node: fits
    assert run("n1", rpn=1) == (0, [1, 1])
    # Repeated runs of one rank do not count as more ranks.
    a = parse(prof_text([seg_site(0x10, [(0, 10, 100)], 50)], rank=0))
    assert PB.ranks_on_nodes(P.merge([a, a]), None) == [1, 1]


def test_zero_access_sites_stay_slow_and_greedy_fallback_is_stated():
    sites = [seg_site(0x10 + i, [(0, 10, 10)], 0 if i == 0 else 10 * i) for i in range(5)]
    merged = P.merge([parse(prof_text(sites))])
    problem = PB.build_problem(merged, tiers(2, [None, None]), 1 << 20)
    sol = SV.solve(problem)
    assert sol.assign[0] == 1 and all(sol.assign[1:] == 0)
    sol = SV.solve(problem, max_ilp_sites=2)
    assert sol.solver == "greedy" and "greedy" in sol.note


def test_interval_reduction_is_exact_and_bounded():
    series = {0: [(0, 5), (10, 0)], 1: [(5, 7), (20, 0)], 2: [(30, 1), (40, 0)]}
    ivs, coalesced = PB.intervals_of(series)
    assert not coalesced
    # {0:5} is dominated by {0:5, 1:7}; {1:7} too; {2:1} stands alone.
    assert ivs == [{0: 5, 1: 7}, {2: 1}]
    many = {i: [(2 * i, 1), (2 * i + 1, 0)] for i in range(100)}
    ivs, coalesced = PB.intervals_of(many, limit=10)
    assert coalesced and len(ivs) <= 10
    assert all(any(v.get(i) == 1 for v in ivs) for i in range(100))


def test_ten_thousand_sites():
    r = A.benchmark(10_000, 3)
    print(
        f"\n10,000 sites, 3 tiers: ILP {r['ilp_seconds']:.3f} s, "
        f"greedy {r['greedy_seconds']:.3f} s, "
        f"greedy/ILP time saved {r['greedy_over_ilp']:.6f}"
    )
    assert r["ilp_optimal"]
    assert r["greedy_over_ilp"] <= 1 + 1e-9


# --------------------------------------------------------------------------
# Placement files


def make_placement():
    return PL.Placement(
        meta={"binary": 0, "solver": "ilp-highs", "predicted_time_saved_s": 1.5, "profiles": ["a"]},
        tiers=[
            PL.PTier("node0", "dram", 0, 1 << 20, 80.0, 90.0),
            PL.PTier("storage:/var/tmp", "storage", -1, 0, 2.0, 1e5, path="/var/tmp"),
        ],
        modules=[PL.PModule("/bin/app", BID), PL.PModule('/lib/we"ird\\ name.so', "")],
        sites=[
            PL.PSite(3, 0, [(0, 0x10), (0, 0x20)], ["f at a.c:1"], 100, 200, 2, 10.0, 0.5, "hot"),
            PL.PSite(1, 1, [(1, 0x30)], [], 50, 50, 1, 0.0, 0.0),
            PL.PSite(7, 1, [(0, 0x10), (0, 0x21)], [], 50, 50, 1, 0.0, 0.0),
        ],
    )


def test_placement_toml_roundtrip(tmp_path):
    p = make_placement()
    path = tmp_path / "p.toml"
    PL.save(p, path, ["a comment"])
    q = PL.load(path)
    assert q.tiers == p.tiers and q.modules == p.modules and q.sites == p.sites
    assert q.meta["predicted_time_saved_s"] == 1.5 and q.meta["profiles"] == ["a"]
    assert "0x10" in path.read_text()  # offsets in hex, as tools print them


VERSION = "schema_version = 1"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.replace("schema_version = 1", "schema_version = 9"), "schema_version 9"),
        (lambda t: t.replace('kind = "hetmem-placement"', 'kind = "x"'), "not a hetmem placement"),
        (lambda t: t[: len(t) // 2], ""),  # truncated
        (lambda t: t.replace("tier = 0", "tier = 5"), "'tier'"),
        (lambda t: t.replace("[0, 0x10], [0, 0x20]", "[4, 0x10]"), "bad frame"),
        (lambda t: t.replace("id = 7", "id = 3"), "duplicate"),
        (lambda t: t.replace("frames = [[1, 0x30]]", "frames = []"), "'frames'"),
        (lambda t: t + "\n[[sites]]\nid = 9\n", "'tier'"),
        (lambda t: "\0\0garbage", "TOML"),
        (lambda t: t.replace(VERSION, VERSION + "\npager_cache_mean_bytes = -5"), "'pager_cache"),
        (lambda t: t.replace(VERSION, VERSION + '\nfor_mode = "cache"'), "'for_mode'"),
        (lambda t: t.replace(VERSION, VERSION + '\nhybrid_as_cache = "yes"'), "'hybrid_as_cache'"),
    ],
)
def test_bad_placements_are_one_line_schema_errors(mutate, message):
    good = PL.dumps(make_placement())
    PL.loads(good)
    with pytest.raises(SchemaError) as exc:
        PL.loads(mutate(good), "p.toml")
    assert "\n" not in str(exc.value) and message in str(exc.value)


def test_match_innermost_first_any_depth():
    sites = make_placement().sites
    # Deeper run-time stack than profiled: matches on the site's frames.
    assert PL.match(sites, [(0, 0x10), (0, 0x20), (0, 0x99), (0, 0x98)]).id == 3
    # Shallower stack: matches on the common prefix; tie -> lowest id.
    assert PL.match(sites, [(0, 0x10)]).id == 3
    assert PL.match(sites, [(0, 0x10), (0, 0x21)]).id == 7
    assert PL.match(sites, [(0, 0x10), (0, 0x22)]) is None
    assert PL.match(sites, [(0, 0x20), (0, 0x10)]) is None  # order matters
    assert PL.match(sites, []) is None


def test_compact_roundtrip():
    p = make_placement()
    text = PL.compact(p)
    assert text.startswith("hetmem-placement-compact 1\n") and text.endswith("end\n")
    q = PL.parse_compact(text)
    assert [(s.id, s.tier, s.frames) for s in q.sites] == sorted(
        (s.id, s.tier, s.frames) for s in p.sites
    )
    assert [(m.path, m.build_id) for m in q.modules] == [(m.path, m.build_id) for m in p.modules]
    assert [(t.kind, t.numa_node, t.capacity_bytes) for t in q.tiers] == [
        (t.kind, t.numa_node, t.capacity_bytes) for t in p.tiers
    ]
    with pytest.raises(SchemaError):
        PL.parse_compact(text[:-4])


def test_build_id_mismatch_warns_and_drops_sites(tmp_path):
    real = symbolize.build_id("/bin/true")
    assert len(real) >= 16
    p = make_placement()
    p.modules[0] = PL.PModule("/bin/true", "cd" * 20)  # made for another build
    p.modules[1] = PL.PModule("/bin/true", real)
    src = tmp_path / "p.toml"
    PL.save(p, src)
    out = tmp_path / "p.compact"
    warnings = PL.prepare_for_run(src, out)
    assert len(warnings) == 1 and "build-id differs" in warnings[0] and "2 site(s)" in warnings[0]
    q = PL.parse_compact(out.read_text())
    assert [s.id for s in q.sites] == [1]
    # The program about to run is checked against the placement's binary
    # when it is that program (the same name: here a copy built elsewhere)...
    p.modules[0] = PL.PModule("/somewhere/else/true", real)
    PL.save(p, src)
    assert PL.prepare_for_run(src, out, command="/bin/true") == []
    assert len(PL.parse_compact(out.read_text()).sites) == 3
    p.modules[0] = PL.PModule("/somewhere/else/true", "cd" * 20)
    PL.save(p, src)
    (w,) = PL.prepare_for_run(src, out, command="/bin/true")
    assert w.startswith("/bin/true: build-id differs")
    # ...or is another program (a rebuilt copy under another name)...
    assert len(PL.prepare_for_run(src, out, command="/bin/ls")) == 1
    # ...and not when the command launches it (mpirun, srun, env, a script):
    # the recorded path is checked as for any other module (absent here: kept)
    launcher = tmp_path / "mpirun"
    launcher.write_bytes(Path("/bin/ls").read_bytes())
    launcher.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(0o755)
    for cmd in (launcher, script):
        assert PL.prepare_for_run(src, out, command=str(cmd)) == []
        assert len(PL.parse_compact(out.read_text()).sites) == 3
    # ...nor when any other program starts it while the recorded program is
    # there as profiled (`sh -c './app'`, python, timeout): /bin/ls was a
    # rebuild above only because the recorded file was absent
    p.modules[0] = PL.PModule("/bin/true", real)
    PL.save(p, src)
    for cmd in ("/bin/sh", "/bin/ls"):
        assert PL.prepare_for_run(src, out, command=cmd) == []
        assert len(PL.parse_compact(out.read_text()).sites) == 3
    PL.prepare_for_run(src, out, command="/bin/true", fast_capacity=12345)
    assert PL.parse_compact(out.read_text()).tiers[0].capacity_bytes == 12345


# --------------------------------------------------------------------------
# The command


def test_advise_cli(tmp_path, hetmem):
    sites = [seg_site(0x10 + i, [(0, 500, 100)], 10 * (i + 1)) for i in range(4)]
    prof = tmp_path / "a.prof"
    prof.write_text(prof_text(sites))
    tf = tmp_path / "tiers.json"
    tf.write_text(
        json.dumps(
            {
                "tiers": [
                    {"name": "slow", "bandwidth_gbs": 2, "latency_ns": 1e5, "capacity_bytes": None},
                    {"name": "fast", "bandwidth_gbs": 80, "latency_ns": 90},
                ]
            }
        )
    )
    out = tmp_path / "p.toml"
    proc = hetmem(
        "advise", str(prof), "--fast-budget", "250", "--tiers", str(tf), "-o", str(out),
        "--json", "--explain", "3", "--no-symbols",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["solver"] == "ilp-highs" and data["optimal"] is True
    on_fast = sorted(s["id"] for s in data["sites"] if s["tier_name"] == "fast")
    assert on_fast == [2, 3]  # the two most accessed fit 250 B
    assert data["sites"][0]["reason"].startswith("on fast")
    assert data["predicted_time_saved_s"] > 0
    p = PL.load(out)
    assert p.tiers[0].name == "fast" and p.tiers[0].capacity_bytes == 250
    proc = hetmem("advise", str(prof), "--fast-budget", "250", "--tiers", str(tf), "--explain")
    assert proc.returncode == 0 and "site 3: on fast" in proc.stdout


def test_advise_leaves_out_launcher_profiles(tmp_path, hetmem):
    # `hetmem profile -- mpirun -np 2 app`: two ranks' profiles and mpirun's,
    # which has no rank (and a site of its own: blocks of 256 KiB and more);
    # it must neither count as a rank nor be the binary
    sites = [seg_site(0x10 + i, [(0, 500, 100)], 10 * (i + 1)) for i in range(2)]
    for r in (0, 1):
        (tmp_path / f"p.prof.{r}.1{r}").write_text(prof_text(sites, rank=r))
    hdr = P.default_header(hostname="n1", depth=4, wall_ns=WALL)
    launcher = P.dumps(hdr, [("/usr/bin/orterun", "ef" * 20)], [seg_site(0x99, [(0, 300, 100)], 5)])
    (tmp_path / "p.prof.norank.9").write_text(launcher)
    out = tmp_path / "p.toml"
    files = sorted(str(f) for f in tmp_path.glob("p.prof.*"))
    proc = hetmem("advise", *files, "--fast-budget", "1000", "-o", str(out), "--no-symbols")
    assert proc.returncode == 0, proc.stderr
    assert "left out 1 profile(s) of no MPI rank" in proc.stdout + proc.stderr
    p = PL.load(out)
    assert p.meta["merged_profiles"] == 2 and p.meta["ranks_per_node"] == 2
    assert p.modules[p.binary].path == "/bin/app"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fast-budget", "lots"], "not a size"),
        ([], "--fast-budget"),
        (["--fast-budget", "1G", "--tiers", "/nonexistent.json"], "cannot read"),
    ],
)
def test_advise_cli_bad_input(tmp_path, hetmem, args, message):
    prof = tmp_path / "a.prof"
    prof.write_text(prof_text([seg_site(0x10, [(0, 5, 10)], 1)]))
    proc = hetmem("advise", str(prof), *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr


def test_advise_cli_bad_profile(tmp_path, hetmem):
    prof = tmp_path / "a.prof"
    prof.write_text(
        prof_text([seg_site(0x10, [(0, 5, 10)], 1)]).replace(
            '"schema_version": 1', '"schema_version": 0'
        )
    )
    proc = hetmem("advise", str(prof), "--fast-budget", "1G")
    assert proc.returncode == 2 and "schema_version 0" in proc.stderr


def test_tier_figures_from_probe_hmat_and_nominal():
    probed = PB._tier_from_inventory(
        {
            "name": "node0",
            "kind": "dram",
            "numa_node": 0,
            "capacity_bytes": 8 << 30,
            "measured": {"best": {"triad_gbs": 21.5, "threads": 2}, "latency_ns": 110.0},
        }
    )
    assert (probed.bandwidth_gbs, probed.latency_ns, probed.source) == (21.5, 110.0, "probe")
    storage = PB._tier_from_inventory(
        {
            "name": "storage:/var/tmp",
            "kind": "storage",
            "measured": {"seq_read_gbs": 2.5, "randread": [{"qd": 1, "lat_us_mean": 40.0}]},
        }
    )
    assert (storage.bandwidth_gbs, storage.latency_ns) == (2.5, 40_000.0)
    hmat = PB._tier_from_inventory(
        {
            "name": "node2",
            "kind": "cxl",
            "hmat": {"read_bandwidth_mibs": 30000, "read_latency_ns": 250},
        }
    )
    assert hmat.source == "hmat" and hmat.bandwidth_gbs == pytest.approx(31.45728)
    nominal = PB._tier_from_inventory({"name": "node3", "kind": "pmem"})
    assert nominal.source == "nominal" and nominal.bandwidth_gbs == PB.NOMINAL["pmem"][0]


def _storage_tiers():
    return [
        PB.Tier(name="dram", kind="dram", bandwidth_gbs=80.0, latency_ns=90.0,
                capacity_bytes=None),
        PB.Tier(name="storage:/x", kind="storage", bandwidth_gbs=2.0, latency_ns=1e5,
                capacity_bytes=None),
    ]  # fmt: skip


@pytest.mark.parametrize("ranks", [1, 2])
def test_rest_of_the_process_is_kept_out_of_tier_0_beside_the_pager(ranks):
    # per process: the pager's least cache and the memory the profile saw
    # outside the sites (the most of any rank) come off the budget first
    mib = 1 << 20
    sites = [seg_site(0x10 + i, [(0, 500, 4 * mib)], 100 * (i + 1)) for i in range(4)]
    rest = [3 * mib, 5 * mib]
    profs = [parse(prof_text(sites, rank=r, outside_peak_bytes=rest[r])) for r in range(ranks)]
    budget = ranks * (A.PAGER_FLOOR + 13 * mib)
    res = A.advise(P.merge(profs), _storage_tiers(), budget, split=False)
    outside = max(rest[:ranks]) * ranks
    assert res.placement.meta["outside_node_bytes"] == outside
    assert res.placement.meta["pager_reserve_node_bytes"] == A.PAGER_FLOOR * ranks
    room = (budget - A.PAGER_FLOOR * ranks - outside) // ranks
    assert res.placement.tiers[0].capacity_bytes == room
    # 13 MiB a process less the rest (3 or 5 MiB): two 4 MiB sites, not three
    assert sum(s.tier == 0 for s in res.placement.sites) == 2
    assert any("left to the rest of the process" in n for n in res.notes)
    # a profile of an older hetmem has no figure: nothing is kept
    old = [parse(prof_text(sites, rank=r)) for r in range(ranks)]
    res = A.advise(P.merge(old), _storage_tiers(), budget, split=False)
    assert res.placement.meta["outside_node_bytes"] == 0
    assert sum(s.tier == 0 for s in res.placement.sites) == 3


def test_a_bad_outside_figure_is_a_one_line_error(tmp_path, hetmem):
    prof = tmp_path / "a.prof"
    prof.write_text(prof_text([seg_site(0x10, [(0, 5, 10)], 1)], outside_peak_bytes=-5))
    proc = hetmem("advise", str(prof), "--fast-budget", "1G")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "'outside_peak_bytes' = -5 is out of range" in proc.stderr
