# SPDX-License-Identifier: BSD-3-Clause
"""hetmem.run.diagnose: the end-of-run figures and the budget hint."""

from __future__ import annotations

from typing import Any

from hetmem.run import diagnose, report

GiB = 1 << 30
MiB = 1 << 20


def _pager(**counters: int) -> dict[str, Any]:
    base = {
        "faults": 0,
        "fetches": 0,
        "bytes_read": 0,
        "demand_bytes_read": 0,
        "footprint_bytes": 0,
        "own_bytes": 12 * MiB,
        "prefetch_used": 0,
        "prefetch_wasted": 0,
    }
    base.update(counters)
    return {"config": {"dram_budget": 512 * MiB}, "counters": base}


def test_loop_larger_than_the_cache_gets_a_hint() -> None:
    s = diagnose.summarize(
        _pager(
            faults=1000,
            fetches=900,
            bytes_read=12 * 1600 * MiB,
            demand_bytes_read=900 * 8192,
            footprint_bytes=1600 * MiB,
        )
    )
    assert s is not None
    assert s["times_read_back"] == 12.0
    assert s["bytes_per_demand_fetch"] == 8192.0
    assert s["faults_without_read"] == 0.1
    tip = diagnose.hint(s, 12 * MiB)
    assert tip is not None
    assert "1.56 GiB working set back 12.0 times" in tip
    assert "budget of 1.7G" in tip
    line = diagnose.line(s)
    assert line is not None and "8 KiB per demand read" in line


def test_line_says_what_was_written_back_and_what_waited() -> None:
    kw: dict[str, int] = {
        "faults": 100,
        "fetches": 100,
        "bytes_read": 3 * 100 * MiB,
        "footprint_bytes": 100 * MiB,
    }
    clean = diagnose.line(diagnose.summarize(_pager(**kw)))
    assert clean is not None and "wrote back" not in clean
    s = diagnose.summarize(_pager(bytes_written=200 * MiB, writeback_stalls=7, **kw))
    assert s is not None and s["writeback_stalls"] == 7
    line = diagnose.line(s)
    assert line is not None
    assert "wrote back 200 MiB (a fault or a prefetch waited for 7 eviction batches" in line
    one_stall = _pager(bytes_written=200 * MiB, writeback_stalls=1, **kw)
    one = diagnose.line(diagnose.summarize(one_stall))
    assert one is not None and "waited for 1 eviction batch to write it)" in one
    old = diagnose.summarize(_pager(bytes_written=200 * MiB, **kw))  # stats before version 6
    assert old is not None and old["writeback_stalls"] is None
    assert "wrote back 200 MiB" in (diagnose.line(old) or "")
    assert "eviction batches" not in (diagnose.line(old) or "")


def test_no_hint_when_the_data_fits_or_is_read_once() -> None:
    fits = diagnose.summarize(
        _pager(faults=10, fetches=10, bytes_read=3 * 100 * MiB, footprint_bytes=100 * MiB)
    )
    assert diagnose.hint(fits, 0) is None  # 100 MiB fits a 500 MiB cache
    once = diagnose.summarize(_pager(faults=10, fetches=10, bytes_read=GiB, footprint_bytes=GiB))
    assert diagnose.hint(once, 0) is None


def test_nothing_read_says_nothing() -> None:
    s = diagnose.summarize(_pager(faults=5))
    assert s is not None and diagnose.line(s) is None and diagnose.hint(s, 0) is None
    assert diagnose.summarize(None) is None
    assert diagnose.summarize({"counters": None}) is None


def test_suggested_budget_rounds_up() -> None:
    assert diagnose.suggested_budget(GiB, 0) == int(11 * (GiB / 10))  # 1.05 GiB -> 1.1G
    assert diagnose.suggested_budget(100 * MiB, 0) == 105 * MiB


def test_hybrid_hint_names_the_placement_not_a_larger_budget() -> None:
    # LAMMPS at 50% in hybrid mode: the placed sites held all but 5.7 MiB of
    # a 734 MiB budget, and the pager read its 390 MiB back 65 times.
    pager = _pager(
        faults=10_000,
        fetches=9_000,
        bytes_read=65 * 390 * MiB,
        footprint_bytes=390 * MiB,
        own_bytes=2 * MiB,
    )
    pager["config"]["dram_budget"] = 8 * MiB - 256 * 1024
    s = diagnose.summarize(pager)
    tip = diagnose.hint(s, 2 * MiB, placed_budget=734 * MiB)
    assert tip is not None
    assert "--fast-budget" in tip and "budget of" not in tip.split(";")[1]
    assert "left the pager 5.75 MiB of the 734 MiB budget" in tip
    assert "advised for --fast-budget 322M would leave it 412M" in tip
    assert "--mode cache" in tip
    # A working set larger than the whole budget: only cache mode is named.
    big = diagnose.hint(s | {"footprint_bytes": GiB}, 2 * MiB, placed_budget=734 * MiB)
    assert big is not None and "--mode cache gives it the whole budget" in big
    # not a verdict: hybrid behind a small cache can still beat cache mode
    assert big.endswith("`hetmem recommend` runs both") and tip.endswith("runs both")
    assert "advised for" not in big
    # Cache mode keeps its hint.
    plain = diagnose.hint(s, 2 * MiB)
    assert plain is not None and "a budget of 412M would hold it (--fast-budget)" in plain


def test_an_idle_helpers_pager_does_not_count_as_cache() -> None:
    # LAMMPS under hybrid at 25%: lmp's pager had 10 MiB on average, Open
    # MPI's orted opened one with the whole budget for one 544 KiB block;
    # summed, the hint said the sites left the pager 362 of 367 MiB
    lmp = _pager(footprint_bytes=460 * MiB, budget_mean_bytes=10 * MiB, own_bytes=8 * MiB)
    orted = _pager(footprint_bytes=576 << 10, budget_mean_bytes=367 * MiB, own_bytes=7 * MiB)
    merged = report._merge_pagers([lmp, orted])
    assert merged["counters"]["budget_mean_bytes"] == 10 * MiB
    assert merged["counters"]["own_bytes"] == 8 * MiB
    assert merged["counters"]["footprint_bytes"] == 460 * MiB + (576 << 10)  # others summed
    # two ranks of similar size: both count
    two = report._merge_pagers([lmp, dict(lmp)])
    assert two["counters"]["budget_mean_bytes"] == 20 * MiB


def test_outside_memory_note() -> None:
    s = diagnose.summarize(_pager(other_peak_bytes=24 * MiB))
    assert s is not None and s["outside_peak_bytes"] == 24 * MiB
    text = diagnose.outside(s, 48 * MiB, 256 << 10)
    assert text is not None and "reached 24 MiB of the 48 MiB budget" in text
    assert "--small-blocks pages the blocks below the threshold too (up to 1 MiB)" in text
    assert "--threshold 64K only those of 64 KiB and up" in text
    assert text.endswith("swap mode any page (`hetmem recommend` compares)")
    assert diagnose.outside(s, 128 * MiB, 256 << 10) is None  # under a quarter
    on = diagnose.outside(s, 48 * MiB, 256 << 10, small_blocks=True)
    assert on is not None and "--small-blocks pages" not in on
    assert "with --small-blocks that is the C library's own blocks" in on
    old = diagnose.summarize(_pager())  # a pager that did not measure
    assert old is not None and old["outside_peak_bytes"] is None
    assert diagnose.outside(old, 48 * MiB, 1 << 20) is None


def test_flat_mode_says_when_its_small_cache_re_read_the_storage_sites() -> None:
    # Quantum ESPRESSO at 160 MiB in flat mode: 112 MiB read back 1015 times
    pager = _pager(faults=10_000, fetches=9_000, bytes_read=1015 * 112 * MiB,
                   footprint_bytes=112 * MiB, own_bytes=1 * MiB)  # fmt: skip
    pager["config"]["dram_budget"] = 8 * MiB
    tip = diagnose.flat_hint(diagnose.summarize(pager))
    assert tip is not None and "112 MiB were read back 1015.0 times" in tip
    assert "flat mode's 7 MiB pager cache" in tip and "--mode hybrid" in tip
    # read once, or all of it held: nothing to say
    once = _pager(faults=10, fetches=10, bytes_read=112 * MiB, footprint_bytes=112 * MiB)
    assert diagnose.flat_hint(diagnose.summarize(once)) is None
    held = _pager(faults=10, fetches=10, bytes_read=9 * MiB, footprint_bytes=3 * MiB)
    assert diagnose.flat_hint(diagnose.summarize(held)) is None


def test_the_suggested_budget_is_per_process_and_counts_the_rest() -> None:
    # GROMACS at 16 MiB: 13.8 MiB of pager data, 18.2 MiB of the process
    # outside the pager; the hint had suggested the 16 MiB it ran with
    pager = _pager(faults=1000, fetches=900, bytes_read=550 * 14 * MiB,
                   footprint_bytes=14 * MiB, own_bytes=1 * MiB)  # fmt: skip
    pager["config"]["dram_budget"] = 16 * MiB
    pager["counters"]["other_peak_bytes"] = 18 * MiB
    pager["counters"]["budget_mean_bytes"] = 2 * MiB  # what the rest left the cache
    s = diagnose.summarize(pager)
    assert s is not None and s["processes"] == 1
    tip = diagnose.hint(s, 1 * MiB)
    assert tip is not None and "a budget of 35M would hold it (--fast-budget)" in tip
    # two ranks: the figures are their sums, the budget is each one's
    pager["data_processes"] = 2
    pager["counters"]["footprint_bytes"] = 222 * MiB
    pager["counters"]["own_bytes"] = 2 * MiB
    pager["counters"]["other_peak_bytes"] = 30 * MiB
    two = diagnose.hint(diagnose.summarize(pager), 2 * MiB)
    assert two is not None and "222 MiB working set" in two
    # (111 + 1 + 30 MiB) x 1.05, rounded up to a MiB
    assert "a budget of 150M would hold it (--fast-budget, per process)" in two


def test_blocks_read_back_most_are_named_and_merged_over_processes() -> None:
    # LAMMPS at 25% (17.7 GB read): 3 atom arrays read ~200 times each, its
    # neighbour list 55 times, a long tail of small ones
    atoms = {"block_bytes": 12 * MiB, "blocks": 3, "bytes_read": 3 * 200 * 12 * MiB}
    neigh = {"block_bytes": 512 << 10, "blocks": 155, "bytes_read": 155 * 55 * (512 << 10)}
    tail = {"block_bytes": 2 * MiB, "blocks": 1, "bytes_read": 40 * MiB}
    total = sum(int(e["bytes_read"]) for e in (atoms, neigh, tail))
    rank0 = {**_pager(bytes_read=total, footprint_bytes=150 * MiB), "read_back": [atoms, tail]}
    rank1 = {**_pager(bytes_read=0, footprint_bytes=150 * MiB), "read_back": [neigh]}
    merged = report._merge_pagers([rank0, rank1])
    assert [e["block_bytes"] for e in merged["read_back"]] == [12 * MiB, 512 << 10, 2 * MiB]
    s = diagnose.summarize(merged)
    assert s is not None
    assert s["read_back"][0]["times_read"] == 200.0
    text = diagnose.blocks_line(s)
    assert text is not None
    assert text.startswith("read back most: 3 blocks of 12 MiB, 200 times each")
    assert "155 blocks of 512 KiB, 55 times each" in text
    # under 5% of what was read: not named
    assert "of 2 MiB" not in text and "a block" not in text
    # the same length in two processes adds up
    twice = report._merge_pagers([rank0, {**rank1, "read_back": [atoms]}])
    assert twice["read_back"][0] == {**atoms, "blocks": 6, "bytes_read": 2 * atoms["bytes_read"]}
    # a pager before read_back, or one that read nothing: no line
    old = diagnose.summarize(_pager(bytes_read=total, footprint_bytes=150 * MiB))
    assert old is not None and old["read_back"] == [] and diagnose.blocks_line(old) is None
    assert diagnose.blocks_line(diagnose.summarize(_pager())) is None
    one = {"block_bytes": 64 * MiB, "blocks": 1, "bytes_read": 30 * 64 * MiB}
    s1 = diagnose.summarize({**_pager(bytes_read=30 * 64 * MiB), "read_back": [one]})
    assert diagnose.blocks_line(s1) == "read back most: a block of 64 MiB, 30 times (1.88 GiB)"
