# SPDX-License-Identifier: BSD-3-Clause
"""Split placement (hetmem.placement.split, route.c's HM_PL_SPLIT): three
equally hot arrays that each need more than the fast budget. Whole-site
placement leaves the fast tier empty; split placement gives its room to the
first part of one array, the interposer serves that head from DRAM and the
rest from the storage tier at the following addresses, and the program
computes what it computes under dram."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem
from hetmem.placement import fileformat as plc
from hetmem.placement.advise import PAGER_FLOOR, stream_floor
from hetmem.sizes import format_size

WORKLOAD = CBUILD / "bench" / "hm-placement"
ARRAY = 16 << 20
ARGS = ["--variant", "even", "--footprint", str(3 * ARRAY), "--iters", "2", "--hot-passes", "2"]
SITES = 12 << 20  # the fast tier's room for the sites
BUDGET = SITES + PAGER_FLOOR  # and the pager's least cache, which comes out of the budget

pytestmark = pytest.mark.skipif(not WORKLOAD.exists(), reason=f"{WORKLOAD} not built")


def _checksum(stdout: str) -> float:
    return float(json.loads(stdout)["checksum"])


@needs_pager
def test_split_placement_fills_the_fast_tier(tmp_path: Path) -> None:
    dram = run_hetmem("run", "--mode", "dram", "--", str(WORKLOAD), *ARGS, check=True)
    run_hetmem("profile", "-o", str(tmp_path / "p.prof"), "--", str(WORKLOAD), *ARGS,
               check=True)  # fmt: skip
    placement = tmp_path / "split.toml"
    out = run_hetmem("advise", str(tmp_path / "p.prof"), "--fast-budget", str(BUDGET), "-o",
                     str(placement), "--explain", "3", check=True)  # fmt: skip
    p = plc.load(placement)
    split = [s for s in p.sites if s.split_bytes]
    assert len(split) == 1, out.stdout  # one array's head fills the 12 MiB
    (s,) = split
    # the room less what the profile saw outside the sites (~250 KiB)
    rest = p.meta["outside_node_bytes"]
    assert 0 < rest < 1 << 20
    assert s.tier == len(p.tiers) - 1 and SITES - rest - 4096 < s.split_bytes <= SITES - rest
    head = format_size(s.split_bytes)
    assert f"split: the first {head} of each allocation" in out.stdout
    assert f"node0 {head}, then storage" in out.stdout  # the table says it
    # whole sites only: every array on the storage tier
    whole = tmp_path / "whole.toml"
    run_hetmem("advise", str(tmp_path / "p.prof"), "--fast-budget", str(BUDGET), "--no-split",
               "-o", str(whole), check=True)  # fmt: skip
    assert not any(x.split_bytes for x in plc.load(whole).sites)
    # a budget the pager's least cache takes whole: said so, and tier 0 is
    # shown with nothing left, not as unlimited
    none = run_hetmem("advise", str(tmp_path / "p.prof"), "--fast-budget", str(PAGER_FLOOR),
                      "-o", str(whole), check=True)  # fmt: skip
    assert "leaves no room for allocation sites" in none.stderr
    assert all(x.tier > 0 and not x.split_bytes for x in plc.load(whole).sites)
    assert any(line.split("│")[5].strip() == "0 B" for line in none.stdout.splitlines()
               if line.startswith("│ node0"))  # fmt: skip
    stats = tmp_path / "s.json"
    run = run_hetmem("run", "--mode", "flat", "--placement", str(placement), "--fast-budget",
                     str(BUDGET), "--storage", str(tmp_path), "--stats", str(stats), "--",
                     str(WORKLOAD), *ARGS, check=True)  # fmt: skip
    assert _checksum(run.stdout) == _checksum(dram.stdout)
    sites = {x["id"]: x for x in json.loads(stats.read_text())["placement"]["sites"]}
    fast, slow = sites[s.id]["bytes"]
    # the head, from the block's start: 16 bytes in for malloc's and
    # calloc's blocks, none for posix_memalign's (alloc_cold_z, split when
    # its short windows priced it highest); shorter, by whole pages, when
    # the run held more outside its blocks than the profile saw (the
    # interposer cuts a head to tier 0's room left: route.c)
    short = s.split_bytes - fast
    assert 0 <= short <= (1 << 20) + 16 and short % 4096 in (0, 16), (s.split_bytes, fast)
    assert fast + slow == ARRAY
    others = [x for i, x in sites.items() if i != s.id]
    assert all(x["bytes"] == [0, ARRAY] for x in others)


@needs_pager
def test_split_leaves_the_pager_a_streaming_cache(tmp_path: Path) -> None:
    # 3 x 48 MiB at a 40 MiB budget: no array fits whole; the head gets
    # the room less the pager's larger cache (a quarter of the budget)
    array, budget = 48 << 20, 40 << 20
    args = ["--variant", "mixed", "--footprint", str(3 * array), "--iters", "1",
            "--hot-passes", "1"]  # fmt: skip
    floor = stream_floor(budget)
    assert floor > PAGER_FLOOR  # the case this test is for
    run_hetmem("profile", "-o", str(tmp_path / "p.prof"), "--", str(WORKLOAD), *args,
               check=True)  # fmt: skip
    placement = tmp_path / "split.toml"
    out = run_hetmem("advise", str(tmp_path / "p.prof"), "--fast-budget", str(budget), "-o",
                     str(placement), check=True)  # fmt: skip
    p = plc.load(placement)
    (s,) = [x for x in p.sites if x.split_bytes]
    rest = p.meta["outside_node_bytes"]
    assert budget - floor - rest - 4096 < s.split_bytes <= budget - floor - rest, out.stdout
    assert p.meta["pager_reserve_node_bytes"] == floor
    assert "more of it is left to the pager's cache" in out.stderr
    stats = tmp_path / "s.json"
    dram = run_hetmem("run", "--mode", "dram", "--", str(WORKLOAD), *args, check=True)
    run = run_hetmem("run", "--mode", "flat", "--placement", str(placement), "--fast-budget",
                     str(budget), "--storage", str(tmp_path), "--stats", str(stats), "--",
                     str(WORKLOAD), *args, check=True)  # fmt: skip
    assert _checksum(run.stdout) == _checksum(dram.stdout)
    st = json.loads(stats.read_text())
    assert st["processes"][0]["placement"]["pager_budget"] == floor
    assert st["placement"]["tiers"][0]["peak_bytes"] <= budget - floor


def test_compact_table_carries_splits() -> None:
    p = plc.Placement(
        meta={},
        tiers=[plc.PTier("node0", "dram", 0, 1 << 30, 0.0, 0.0),
               plc.PTier("storage:/x", "storage", -1, 0, 0.0, 0.0, path="/x")],
        modules=[plc.PModule("/bin/app", "ab")],
        sites=[plc.PSite(id=3, tier=1, frames=[(0, 0x10)], split_bytes=5 << 20),
               plc.PSite(id=7, tier=0, frames=[(0, 0x20)])],
    )  # fmt: skip
    text = plc.compact(p)
    assert "split 3 5242880\nend\n" in text
    back = plc.parse_compact(text)
    assert [(x.id, x.split_bytes) for x in back.sites] == [(3, 5 << 20), (7, 0)]
