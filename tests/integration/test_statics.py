# SPDX-License-Identifier: BSD-3-Clause
"""Static arrays (src/preload/statics*.c): STREAM with its three arrays in
.bss (hm-stream-static, 3 x 160 MB), run at a budget far below them.

Cache mode: each array's untouched pages go behind the pager before main,
the program's results stay valid, and the pager's resident memory stays
within the budget; with HETMEM_STATICS=0 the run says, per array, that it
is not managed; a stripped binary's .bss is one entry. Profile, advise and
flat: each array is a site named by its symbol, the advisor places it (a
split head in DRAM, the rest on storage), and the flat run applies it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem

STREAM = CBUILD / "bench" / "hm-stream-static"
ELEMENTS = 4_000_000  # 32 MB per array used: 96 MB against a 24 MiB budget
BUDGET = 24 << 20

pytestmark = pytest.mark.skipif(not STREAM.exists(), reason=f"{STREAM} not built")


def _run(
    tmp_path: Path, env: dict[str, str] | None = None, binary: Path = STREAM, *opts: str
) -> tuple[dict, dict, str]:
    stats = tmp_path / "s.json"
    mode = opts or ("--mode", "cache")
    proc = run_hetmem(
        "run", *mode, "--fast-budget", str(BUDGET), "--storage", str(tmp_path),
        "--stats", str(stats), "--", str(binary), "--elements", str(ELEMENTS), "--ntimes", "2",
        env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] is True  # STREAM's own check of every element
    return out, json.loads(stats.read_text()), proc.stderr


@needs_pager
def test_static_arrays_go_behind_the_pager(tmp_path: Path) -> None:
    _, stats, err = _run(tmp_path)
    arrays = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert sorted(st["symbol"] for st in arrays) == ["sa", "sb", "sc"]  # one entry each
    for st in arrays:
        assert st["module"].endswith("hm-stream-static")
        assert st["bytes"] >= 160_000_000 - 2 * 4096  # its whole pages
        # all of it but what the loader and libc wrote before main (if anything)
        assert st["managed_bytes"] >= st["bytes"] - (1 << 20), st
    counters = stats["pager"]["counters"]
    assert counters["footprint_bytes"] >= 3 * ELEMENTS * 8  # the arrays were paged
    assert counters["peak_resident_bytes"] <= BUDGET
    assert "is not managed" not in err


@needs_pager
def test_unmanaged_static_data_is_said_once(tmp_path: Path) -> None:
    _, stats, err = _run(tmp_path, env={"HETMEM_STATICS": "0"})
    arrays = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert len(arrays) == 3
    assert all(st["managed_bytes"] == 0 and st["why"] == "HETMEM_STATICS=0" for st in arrays)
    lines = [ln for ln in err.splitlines() if "of hm-stream-static" in ln]
    # one line for the one reason, each array once
    assert len(lines) == 1, err
    head = "hetmem run: note: 3 static data areas are not managed (HETMEM_STATICS=0): "
    assert lines[0].startswith(head)
    assert sorted(lines[0][len(head) :].split("; ")) == [
        f"static array {a} of hm-stream-static (153 MiB)" for a in ("sa", "sb", "sc")
    ]


@needs_pager
@pytest.mark.skipif(not shutil.which("strip"), reason="no strip (binutils)")
def test_a_stripped_binarys_bss_is_one_entry(tmp_path: Path) -> None:
    """Without a symbol table the arrays cannot be told apart: the segment's
    whole pages are one entry, and still go behind the pager."""
    stripped = tmp_path / "stream-stripped"
    subprocess.run(["strip", "-o", str(stripped), str(STREAM)], check=True)
    _, stats, _ = _run(tmp_path, None, stripped)
    (st,) = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert st["symbol"] is None and st["bytes"] >= 3 * 160_000_000 - 2 * 4096
    assert st["managed_bytes"] >= st["bytes"] - (1 << 20), st
    assert stats["pager"]["counters"]["peak_resident_bytes"] <= BUDGET


def _profile_and_advise(tmp_path: Path) -> tuple[dict, Path]:
    prof = tmp_path / "s.prof"
    # 40 passes at a 2 ms period: about 75 periods. 4 passes (40 ms) at the
    # default 10 ms gave the sampler 3 or 4 periods, and none at all when
    # the machine was busy (1 run in 8 beside the placement tests)
    proc = run_hetmem(
        "profile", "-o", str(prof), "--sampler", "portable", "--period", "2ms", "--",
        str(STREAM), "--elements", str(ELEMENTS), "--ntimes", "40", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not profiled" not in proc.stderr  # the arrays are sites, no note
    (prof,) = tmp_path.glob("s.prof*")
    show = run_hetmem("profile", "show", str(prof), "--json", timeout=120)
    assert show.returncode == 0, show.stderr
    place = tmp_path / "p.toml"
    adv = run_hetmem(
        "advise", str(prof), "--fast-budget", str(BUDGET), "--storage", str(tmp_path),
        "-o", str(place), timeout=300,
    )  # fmt: skip
    assert adv.returncode == 0, adv.stderr
    return json.loads(show.stdout), place


@needs_pager
def test_static_arrays_are_sites_placed_by_flat_mode(tmp_path: Path) -> None:
    shown, place = _profile_and_advise(tmp_path)
    sites = {s["label"]: s for s in shown["sites"]}
    assert sorted(sites) == [f"static {a} (hm-stream-static .bss)" for a in ("sa", "sb", "sc")]
    for s in sites.values():
        assert s["static"] is True and s["allocs"] == 1 and s["never_freed"] == 1
        assert s["peak_live_bytes"] >= 160_000_000 - 2 * 4096
    assert sum(s["samples"]["loads"] + s["samples"]["stores"] for s in sites.values()) > 0
    _, stats, err = _run(tmp_path, None, STREAM, "--mode", "flat", "--placement", str(place))
    arrays = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert len(arrays) == 3 and all(st["why"] is None for st in arrays), arrays
    # the budget's DRAM holds what the advisor gave it (a split head), the
    # rest of every array is the storage tier's, behind the pager
    fast = sum(st["fast_bytes"] for st in arrays)
    assert 0 < fast <= BUDGET
    assert all(st["tier"] == 1 for st in arrays)
    slow = sum(st["managed_bytes"] for st in arrays)
    assert slow >= 3 * (160_000_000 - (1 << 20)) - fast
    placed = stats["placement"]["sites"]
    assert sum(s["bytes"][0] for s in placed) == fast
    assert stats["pager"]["counters"]["footprint_bytes"] >= 3 * ELEMENTS * 8 - fast
    assert "is not managed" not in err


STATICS_TARGET = CBUILD / "hm_statics_target"


@pytest.mark.skipif(not STATICS_TARGET.exists(), reason=f"{STATICS_TARGET} not built")
def test_refs_sampler_tells_static_arrays_apart(tmp_path: Path) -> None:
    """Three 8 MiB arrays of one .bss, touching one another: the refs
    sampler counts per mapping, and each array now has one of its own, so
    the two swept ones read hot and the one left alone cold. When they
    shared the .bss's mapping all three came out alike (23528 samples each
    on the build before this test)."""
    prof = tmp_path / "t.prof"
    proc = run_hetmem(
        "profile", "-o", str(prof), "--sampler", "refs", "--", str(STATICS_TARGET), "3",
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["cold"] == 2  # data intact
    (prof,) = tmp_path.glob("t.prof*")
    show = run_hetmem("profile", "show", str(prof), "--json", timeout=120)
    assert show.returncode == 0, show.stderr
    loads = {
        s["label"].split()[1]: s["samples"]["loads"] + s["samples"]["stores"]
        for s in json.loads(show.stdout)["sites"]
    }
    assert sorted(loads) == ["cold_b", "hot_a", "hot_c"], loads
    # cold_b is touched in one interval: its 2048 pages once
    assert loads["cold_b"] <= 3 * 2048, loads
    assert min(loads["hot_a"], loads["hot_c"]) >= 4 * loads["cold_b"], loads
