# SPDX-License-Identifier: BSD-3-Clause
"""Libraries loaded before the interposer, and libraries dlopen'ed later.

Before: a library's constructor can run before libhetmem_preload.so's (the program's
dependencies are initialized before LD_PRELOAD objects that do not depend on
them): OpenBLAS allocates its buffers there. Such a request must be served
in the mode the user asked for. hm_early_target's library (tests/c/early_lib.c)
mallocs and mmaps 4 MiB each in its constructor; the program checks both
blocks' data, that the mmap'd one is page-aligned and that munmap accepts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem

TARGET = CBUILD / "hm_early_target"
DLOPEN = CBUILD / "hm_dlopen_target"
PLUGIN = CBUILD / "libhm_plugin.so"

pytestmark = pytest.mark.skipif(
    not TARGET.exists() or not DLOPEN.exists(), reason="the C test programs are not built"
)


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "early blocks: ok (0)" in proc.stdout
    assert "cannot start" not in proc.stderr


def _profile(tmp_path: Path) -> Path:
    proc = run_hetmem("profile", "-o", str(tmp_path / "e.prof"), "--", str(TARGET))
    _ok(proc)
    written = sorted(tmp_path.glob("e.prof.norank.*"))
    assert len(written) == 1, proc.stderr
    return written[0]


def test_profile_records_a_site_allocated_in_a_constructor(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    show = run_hetmem("profile", "show", "--json", str(path), check=True)
    sites = json.loads(show.stdout)["sites"]
    # the malloc is a site; the mmap is left to the kernel when profiling
    assert [s["function"] for s in sites] == ["early_ctor_alloc"]
    assert sites[0]["bytes"] == 4 << 20


@needs_pager
def test_cache_mode_serves_constructor_allocations(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16MiB", "--storage", str(tmp_path),
        "--stats", str(stats), "--", str(TARGET),
    )  # fmt: skip
    _ok(proc)
    inter = json.loads(stats.read_text())["interposer"]
    assert inter["large_allocations"] == 2 and inter["mmap_allocations"] == 1


@needs_pager
@pytest.mark.parametrize("mode", ["flat", "hybrid"])
def test_placement_matches_constructor_allocations(tmp_path: Path, mode: str) -> None:
    path = _profile(tmp_path)
    placement = tmp_path / "e.toml"
    run_hetmem("advise", str(path), "--fast-budget", "16MiB", "-o", str(placement), check=True)
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", mode, "--placement", str(placement), "--fast-budget", "16MiB",
        "--storage", str(tmp_path), "--stats", str(stats), "--", str(TARGET),
    )  # fmt: skip
    _ok(proc)
    data = json.loads(stats.read_text())
    placed = data["placement"]
    # served through its site, not as an unplaced (cache-mode) block
    assert [s["allocations"] for s in placed["sites"]] == [1]
    # the constructor's mmap has no site: hybrid's pager serves it, as cache
    # mode's does (its bytes read back: "early blocks: ok"), flat leaves it
    # to the kernel; neither is a placement that missed a site
    mmaps = data["interposer"]["mmap_allocations"]
    assert mmaps == (1 if mode == "hybrid" else 0)
    assert placed["unmatched"]["allocations"] == mmaps
    assert placed["unmatched"]["bytes"][-1] == (4 << 20) * mmaps
    assert "matched no site" not in proc.stderr


def _profile_plugin(tmp_path: Path) -> Path:
    proc = run_hetmem(
        "profile", "-o", str(tmp_path / "d.prof"), "--", str(DLOPEN), str(PLUGIN), "4"
    )
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("d.prof.norank.*")
    return path


def test_profile_keeps_the_sites_of_a_dlclosed_plugin(tmp_path: Path) -> None:
    path = _profile_plugin(tmp_path)
    show = json.loads(run_hetmem("profile", "show", "--json", str(path), check=True).stdout)
    # (the compiler may clone them: plugin_hot.constprop.0)
    by = {s["function"].split(".")[0]: s for s in show["sites"]}
    assert set(by) == {"plugin_hot", "plugin_cold"}
    assert by["plugin_hot"]["bytes"] == 16 << 20 and by["plugin_cold"]["bytes"] == 64 << 20
    assert by["plugin_hot"]["file"].endswith("plugin_lib.c")
    # named by its absolute path, also when dlopen was given a relative one
    assert by["plugin_hot"]["frames"][0]["module"] == str(PLUGIN.resolve())


@needs_pager
def test_placement_matches_a_plugin_loaded_elsewhere(tmp_path: Path) -> None:
    path = _profile_plugin(tmp_path)
    placement = tmp_path / "d.toml"
    # 20 MiB for the sites, 8 for the pager's least cache (PAGER_FLOOR)
    run_hetmem("advise", str(path), "--fast-budget", "28MiB", "-o", str(placement), check=True)
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "flat", "--placement", str(placement), "--fast-budget", "28MiB",
        "--storage", str(tmp_path), "--stats", str(stats), "--", str(DLOPEN), str(PLUGIN), "300",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    placed = json.loads(stats.read_text())["placement"]
    # the hot site in DRAM, the cold one on the storage tier but for the
    # head the 4 MiB left of the budget takes (split placement), nothing
    # unmatched
    hot, cold = sorted(placed["sites"], key=lambda s: s["tier"])
    assert (hot["tier"], hot["bytes"]) == (0, [16 << 20, 0])
    assert cold["tier"] == 1 and sum(cold["bytes"]) == 64 << 20
    # (no head when the profile's samples gave the cold site no benefit; a
    # shorter one when the run's other memory took more of the room than
    # the profile's did, by the ~0.5 MiB of the pager's threads and tables)
    head = cold["split_bytes"] - 16 if cold["split_bytes"] else 0
    assert head <= 4 << 20 and head - (1 << 20) <= cold["bytes"][0] <= head, (cold, head)
    assert placed["unmatched"]["allocations"] == 0
