# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench placement`: its targets' arithmetic (the sweep bound, the
statistics over rounds and slices), its per-round device probe and its rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetmem.bench.placement import _quick_read_gbs, huge_pages_ab, round_order
from hetmem.bench.placement_targets import (
    ab_ratio,
    alloc_ab_cost,
    alloc_cost,
    better_mode,
    cold_phase,
    evaluate,
    sweep_bound,
    sweep_rounds,
)

MiB = 1 << 20


def _res(dram: float, hot: float | None) -> dict:
    modes = {"dram": {"seconds": dram, **({"hot_seconds": hot} if hot is not None else {})}}
    return {"modes": modes, "cold_touched_per_iter": 400 * MiB, "hot_bytes": 100 * MiB}


def test_io_behind_hot_passes_is_limited_by_the_free_budget() -> None:
    # 4 iterations of 400 MiB at 1 GB/s: 1.678 s of I/O; hot passes 1 s;
    # 28 MiB free per iteration can hide 0.117 s of it
    bound, io = sweep_bound(_res(1.5, 1.0), 1.0, 4, 128 * MiB)
    assert io == pytest.approx(4 * 400 * MiB / 1e9)
    overlap = 4 * 28 * MiB / 1e9
    assert bound == pytest.approx(1.0 + io - overlap)
    assert bound > max(io, 1.5)


def test_compute_bound_sweep_is_the_dram_time() -> None:
    # fast storage: the I/O hides behind the sweep's own compute
    bound, io = sweep_bound(_res(3.0, 1.0), 100.0, 4, 128 * MiB)
    assert io < 0.1
    assert bound == pytest.approx(3.0)


def test_without_the_hot_split_the_bound_is_the_old_one() -> None:
    bound, io = sweep_bound(_res(1.5, None), 1.0, 4, 128 * MiB)
    assert bound == pytest.approx(max(io, 1.5))
    assert sweep_bound(_res(1.5, 1.0), None, 4, 128 * MiB) == (None, None)


def test_sweep_target_is_judged_against_the_io_bound() -> None:

    res = _res(0.5, 0.3)
    res["modes"]["flat"] = {"seconds": 2.5}
    res["modes"]["hybrid"] = {"seconds": 2.2}
    targets = evaluate({"sweep": res}, {"seq_read_gbs": 1.0}, 4, 128 * MiB)
    (t,) = [x for x in targets if "bound" in x["target"]]
    # 1.678 s of cold I/O: 2.2 s is 1.31x of it, a miss, although it is
    # within 1.25x of the overlap-aware bound (1.86 s), which is only shown
    io = res["cold_touched_per_iter"] * 4 / 1e9
    overlap, _ = sweep_bound(res, 1.0, 4, 128 * MiB)
    assert 2.2 / overlap <= 1.25
    assert t["measured"] == pytest.approx(2.2 / io)
    assert t["pass"] is False


def test_sweep_target_takes_each_rounds_own_bound() -> None:

    # the bench opened with a probe of 1.0 GB/s; around its rounds' flat and
    # hybrid runs the device read 2.0, 1.0 and 1.5 GB/s. 1.6 GiB moved.
    moved = 400 * MiB * 4
    res = _rounds(
        dram=[0.5, 0.5, 0.5],
        flat=[1.2, 2.3, 1.5],
        hybrid=[1.0, 2.0, 1.3],
        cache=[1.1, 2.1, 1.4],
    )
    res["cold_touched_per_iter"], res["hot_bytes"] = 400 * MiB, 100 * MiB
    res["round_device_gbs"] = [2.0, 1.0, 1.5]
    m, mode, gbs = sweep_rounds(res, moved)
    assert mode == "hybrid" and gbs == [2.0, 1.0, 1.5]
    ratios = [1.0 / (moved / 2e9), 2.0 / (moved / 1e9), 1.3 / (moved / 1.5e9)]
    assert m == pytest.approx(sorted(ratios)[1])
    (t,) = [x for x in evaluate({"sweep": res}, {"seq_read_gbs": 1.0}, 4, 128 * MiB)
            if "bound" in x["target"]]  # fmt: skip
    assert t["measured"] == pytest.approx(m)
    assert t["pass"] is (m <= 1.25)
    # the opening probe alone would have judged the best time, 1.0 s,
    # against 1.68 s of I/O: 0.6, where the rounds say 1.19
    assert "against the bench's opening probe alone, best times: 0.596" in t["detail"]
    # a round whose probes both failed is left out; none at all: the opening probe
    res["round_device_gbs"] = [None, 1.0, None]
    assert sweep_rounds(res, moved) == (pytest.approx(2.0 / (moved / 1e9)), "hybrid", [1.0])
    del res["round_device_gbs"]
    assert sweep_rounds(res, moved) is None


def test_round_probe_reads_the_storage_tier(tmp_path: Path) -> None:

    # a real O_DIRECT read of a 256 MiB probe file
    gbs = _quick_read_gbs(str(tmp_path))
    assert gbs is not None and gbs > 0.01
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    assert _quick_read_gbs(str(tmp_path / "missing")) is None


def test_sweep_detail_gives_the_cold_phase_rate() -> None:

    res = _res(0.5, 0.3)
    res["modes"]["flat"] = {"seconds": 2.5, "hot_seconds": 0.4}
    res["modes"]["hybrid"] = {"seconds": 2.2, "hot_seconds": 0.5}
    moved = res["cold_touched_per_iter"] * 4
    mode, secs, gbs = cold_phase(res, moved)
    assert (mode, secs) == ("hybrid", pytest.approx(1.7))
    assert gbs == pytest.approx(moved / 1.7 / 1e9)
    (t,) = [x for x in evaluate({"sweep": res}, {"seq_read_gbs": 1.0}, 4, 128 * MiB)
            if "bound" in x["target"]]  # fmt: skip
    want = f"hybrid outside its hot passes: 1.7 s, the cold bytes at {round(gbs, 2)} GB/s"
    assert want in t["detail"]
    del res["modes"]["hybrid"]["hot_seconds"], res["modes"]["flat"]["hot_seconds"]
    assert cold_phase(res, moved) is None


def test_alloc_cost_is_the_median_of_the_paired_ratios() -> None:

    # a fast outlier among the no-preload runs: best against best says 23%,
    # the pairs (each run beside its partner) say 2%
    al = {
        "pairs": 10**7,
        "all_none": [0.77, 1.00, 1.10, 1.20, 1.05],
        "all_flat": [0.95, 1.02, 1.12, 1.22, 1.03],
    }
    al["none_seconds"], al["flat_seconds"] = min(al["all_none"]), min(al["all_flat"])
    assert alloc_cost(al) == pytest.approx(1.12 / 1.10 - 1)
    (t,) = [x for x in evaluate({"alloc": al}, {}, 4) if x["target"].startswith("alloc")]
    assert t["pass"] is True
    al["all_flat"] = [x * 1.05 for x in al["all_none"]]
    assert alloc_cost(al) == pytest.approx(0.05)
    (t,) = [x for x in evaluate({"alloc": al}, {}, 4) if x["target"].startswith("alloc")]
    assert t["pass"] is False


def _abba(a: list[float], b: list[float]) -> list[float]:
    """Slice times in the workload's order: slice s is the program's malloc
    (from a) when (s ^ s >> 1) & 1 == 0, glibc's own (from b) otherwise."""
    ia, ib = iter(a), iter(b)
    return [next(ib) if (s ^ (s >> 1)) & 1 else next(ia) for s in range(len(a) + len(b))]


def test_ab_ratio_pairs_neighbouring_slices() -> None:

    # the machine slows down by 40% halfway, and two slices of the
    # program's malloc are hit by a neighbour's burst: the pairs still say 2%
    b = [0.030] * 10 + [0.042] * 10
    a = [x * 1.02 for x in b]
    a[3] *= 3
    a[15] *= 2
    assert ab_ratio(_abba(a, b)) == pytest.approx(1.02)
    # sums would have been thrown off by the bursts
    assert sum(a) / sum(b) > 1.05
    # the order matters: the same slices read as glibc-first say 1/1.02
    assert ab_ratio(_abba(b, a)) == pytest.approx(1 / 1.02)


def _ab_runs(kind: str, ratios: list[float]) -> list[dict]:
    """One --ab run per ratio: 8 slices whose pairs all have that ratio."""
    b = [0.015] * 4
    return [{"kind": kind, "slice_seconds": _abba([x * r for x in b], b)} for r in ratios]


def test_alloc_target_is_judged_side_by_side_in_slices() -> None:

    # whole runs say 8% (the machine's noise); the slices, 1.5% over a
    # control that reads 1.005
    al = {
        "pairs": 10**7,
        "all_none": [1.0, 1.0, 1.0],
        "all_flat": [1.08, 1.08, 1.08],
        "none_seconds": 1.0,
        "flat_seconds": 1.08,
        "ab": {"slices": 8, "pairs_per_slice": 250000},
    }
    al["ab"]["runs"] = _ab_runs("control", [1.005, 1.004, 1.009]) + _ab_runs(
        "flat", [1.02, 1.0201, 1.03]
    )
    assert alloc_ab_cost(al) == pytest.approx(1.0201 / 1.005 - 1)
    (t,) = [x for x in evaluate({"alloc": al}, {}, 4) if x["target"].startswith("alloc")]
    assert t["pass"] is True
    assert "slices" in t["target"]
    assert "whole runs" in t["detail"] and "0.0800" in t["detail"]
    assert "flat runs' malloc / glibc 1.0200, 1.0201, 1.0300" in t["detail"]
    # the cost is of all slice pairs pooled, not of the runs' medians: one
    # flat run at 1.02 and two at 1.05 read 1.05
    al["ab"]["runs"] = _ab_runs("control", [1.0, 1.0]) + _ab_runs("flat", [1.02, 1.05, 1.05])
    assert alloc_ab_cost(al) == pytest.approx(0.05)
    (t,) = [x for x in evaluate({"alloc": al}, {}, 4) if x["target"].startswith("alloc")]
    assert t["pass"] is False
    # a results file from before the slices: judged on the whole runs
    del al["ab"]
    assert alloc_ab_cost(al) is None
    (t,) = [x for x in evaluate({"alloc": al}, {}, 4) if x["target"].startswith("alloc")]
    assert t["measured"] == pytest.approx(0.08)
    assert t["pass"] is False


def test_near_equal_targets_are_judged_per_round() -> None:

    # dram had one lucky run: best against best says flat is 0.83 of dram;
    # round by round (each run beside its partner) it is 0.97
    res = {
        "modes": {
            "dram": {"seconds": 0.25},
            "profile": {"seconds": 0.31},
            "flat": {"seconds": 0.30},
            "hybrid": {"seconds": 0.31},
            "cache": {"seconds": 0.40},
        },
        "rounds": [
            {"dram": 0.25, "profile": 0.27, "flat": 0.30, "hybrid": 0.31, "cache": 0.40},
            {"dram": 0.30, "profile": 0.33, "flat": 0.31, "hybrid": 0.33, "cache": 0.41},
            {"dram": 0.31, "profile": 0.31, "flat": 0.32, "hybrid": 0.32, "cache": 0.42},
        ],
    }
    got = {t["target"]: t for t in evaluate({"sparse": res}, {}, 4, 128 * MiB)}
    speed = got["sparse: speed of best(flat, hybrid) / dram"]
    assert speed["measured"] == pytest.approx(0.30 / 0.31) and speed["pass"] is True
    assert "median of 3 rounds" in speed["detail"]
    hyb = got["sparse: hybrid / best(flat, cache)"]
    assert hyb["measured"] == pytest.approx(0.31 / 0.30)  # rounds: 1.033, 1.065, 1.0
    prof = got["sparse: profiling overhead (profile / dram - 1)"]
    assert prof["measured"] == pytest.approx(0.08) and prof["pass"] is True
    # the same results without rounds (an older file): best against best
    del res["rounds"]
    got = {t["target"]: t for t in evaluate({"sparse": res}, {}, 4, 128 * MiB)}
    assert got["sparse: speed of best(flat, hybrid) / dram"]["pass"] is False
    assert got["sparse: profiling overhead (profile / dram - 1)"]["measured"] == pytest.approx(0.24)


def _rounds(**modes: list[float]) -> dict:
    n = len(next(iter(modes.values())))
    rounds = [{m: ts[i] for m, ts in modes.items()} for i in range(n)]
    return {"modes": {m: {"seconds": min(ts)} for m, ts in modes.items()}, "rounds": rounds}


def test_the_better_mode_is_chosen_by_its_median_not_per_round() -> None:

    # a sweep run of this machine (device-bound, 5 rounds): cache is the
    # better of flat and cache (median 2.38 s against 2.59 s); hybrid against
    # cache round by round is 1.03, but against each round's faster of the
    # two it is 1.077, a minimum of two noisy times being below both
    res = _rounds(
        dram=[0.67, 0.62, 0.72, 0.72, 0.78],
        cache=[2.016, 2.385, 2.384, 2.404, 2.258],
        flat=[2.709, 2.666, 2.585, 2.164, 2.492],
        hybrid=[2.511, 1.913, 2.581, 2.331, 2.326],
    )
    assert better_mode(res, "flat", "cache") == "cache"
    (t,) = [x for x in evaluate({"sweep": res}, {}, 4) if "hybrid /" in x["target"]]
    assert t["measured"] == pytest.approx(2.326 / 2.258)
    assert t["pass"] is True
    assert "against cache" in t["detail"] and "faster of the two: 1.077" in t["detail"]
    # the same rule where it is stricter: flat and hybrid take turns being
    # lucky; each round's faster reads 0.948 of dram, the better mode 0.893
    res = _rounds(
        dram=[1.0, 1.0, 1.0, 1.0],
        flat=[1.05, 1.20, 1.05, 1.20],
        hybrid=[1.21, 1.06, 1.21, 1.06],
        cache=[2.0, 2.0, 2.0, 2.0],
    )
    (t,) = [x for x in evaluate({"sparse": res}, {}, 4) if "speed of" in x["target"]]
    assert "against flat" in t["detail"]
    assert t["measured"] == pytest.approx((1 / 1.05 + 1 / 1.20) / 2)
    assert t["pass"] is False


def test_bench_runs_every_configuration_in_each_round(hetmem) -> None:
    import json

    # with --huge-pages-ab flat and hybrid also run with HETMEM_HUGE_PAGES=0
    proc = hetmem(
        "bench", "placement", "--footprint", "64MiB", "--iters", "1", "--repeat", "2",
        "--variants", "sparse", "--modes", "dram,flat,hybrid", "--no-device-probe",
        "--huge-pages-ab", "--json",
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # 1: a target missed (tiny, noisy sizes)
    sp = json.loads(proc.stdout)["results"]["sparse"]
    every = ["dram", "flat", "flat-nothp", "hybrid", "hybrid-nothp", "profile"]
    assert [sorted(r) for r in sp["rounds"]] == [every] * 2
    for mode, m in sp["modes"].items():
        assert m["seconds"] == min(r[mode] for r in sp["rounds"])
    assert proc.stderr.index("dram (run 2)") > proc.stderr.index("hybrid (run 1)")
    # huge pages on the fast tier's blocks by default (6.4 MiB hot arrays:
    # each holds an aligned huge page), none in the twins. Flat: hybrid's
    # placement at this size is priced within 1.11x of cache mode and
    # leaves every site to the pager (hybrid_as_cache), with no such block.
    assert sp["modes"]["flat-nothp"]["huge_page_bytes"] == 0
    assert sp["modes"]["hybrid-nothp"]["huge_page_bytes"] == 0
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[madvise]" in thp.read_text():
        assert sp["modes"]["flat"]["huge_page_bytes"] > 0
    ab = sp["huge_pages_ab"]
    assert set(ab) == {"flat", "hybrid"} and ab["hybrid"]["rounds"] == 2
    assert ab["hybrid"]["seconds"] > 0 and ab["hybrid"]["hot_seconds"] > 0


def test_huge_pages_ab_is_the_median_of_the_rounds_ratios() -> None:

    def runs(*pairs: tuple[float, float]) -> list[dict]:
        return [{"seconds": t, "hot_seconds": h} for t, h in pairs]

    got = huge_pages_ab(
        {
            "hybrid": runs((2.2, 0.4), (2.2, 0.45), (1.8, 0.6)),
            "hybrid-nothp": runs((2.0, 0.5), (2.2, 0.5), (2.0, 0.6)),
            "flat": runs((3.0, 0.5)),
        }
    )
    assert set(got) == {"hybrid"}  # flat ran without its twin
    assert got["hybrid"]["rounds"] == 3
    assert got["hybrid"]["seconds"] == pytest.approx(1.0)  # of 1.1, 1.0, 0.9
    assert got["hybrid"]["hot_seconds"] == pytest.approx(0.9)  # of 0.8, 0.9, 1.0
    assert huge_pages_ab({"flat": runs((1.0, 0.1))}) == {}


def test_rounds_rotate_with_flat_and_hybrid_together() -> None:

    modes = ["dram", "cache", "swap", "flat", "hybrid"]
    first = round_order(modes, 0)
    # round 0 profiles before the placed modes, which need its placement
    assert first == ["dram", "profile", "cache", "swap", "flat", "hybrid"]
    orders = [round_order(modes, r) for r in range(5)]
    for r, o in enumerate(orders):
        assert sorted(o) == sorted(first)
        # the device probes enclose just these two; neither always runs
        # just after the other
        i = o.index("flat" if r % 2 == 0 else "hybrid")
        assert o[i + 1] == ("hybrid" if r % 2 == 0 else "flat")
    # over 5 rounds each of the 5 units leads once
    assert sorted(o[0] for o in orders) == ["cache", "dram", "flat", "profile", "swap"]
    assert orders[1] == ["profile", "cache", "swap", "hybrid", "flat", "dram"]
    assert round_order(modes, 5) == ["dram", "profile", "cache", "swap", "hybrid", "flat"]
    assert round_order(modes, 10) == first
    assert round_order(["dram", "cache"], 1) == ["profile", "cache", "dram"]
    # --huge-pages-ab: the twins are a unit of their own, alternating too,
    # so the device probes still enclose just flat and hybrid
    twins = [*modes, "flat-nothp", "hybrid-nothp"]
    assert round_order(twins, 0)[-4:] == ["flat-nothp", "hybrid-nothp", "flat", "hybrid"]
    for r in range(6):
        o = round_order(twins, r)
        i = o.index("flat-nothp" if r % 2 == 0 else "hybrid-nothp")
        assert o[i + 1] == ("hybrid-nothp" if r % 2 == 0 else "flat-nothp")
        assert abs(o.index("flat") - o.index("hybrid")) == 1
