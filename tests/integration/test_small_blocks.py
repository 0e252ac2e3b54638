# SPDX-License-Identifier: BSD-3-Clause
"""Cache mode's small-block heap (`hetmem run --small-blocks`).

tests/c/small_target.c (hm_small_target in the C build tree) allocates
small blocks from several threads through every hooked entry point, frees
some in another thread, resizes them, and checks every byte, alignment and
usable size; these tests run it under the heap and check that the blocks
were paged (the process stays near the budget) and what a forked child
meets.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import CBUILD, needs_pager, run_hetmem

TARGET = CBUILD / "hm_small_target"
MIB = 1 << 20

needs_target = pytest.mark.skipif(not TARGET.exists(), reason=f"{TARGET} not built")
pytestmark = [needs_pager, needs_target]


def _mix(tmp_path: Path, *flags: str) -> dict[str, Any]:
    stats = tmp_path / f"mix{len(flags)}.json"
    storage = tmp_path / "tier"
    storage.mkdir(exist_ok=True)
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--storage", str(storage),
        *flags, "--stats", str(stats), "--", str(TARGET), "mix", "48", "2", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "mix ok\n"
    assert not list(storage.iterdir())  # the heap's backing files are gone
    return json.loads(stats.read_text())


def test_target_checks_its_blocks_without_hetmem() -> None:
    # the checks themselves: a broken target would pass anything
    proc = subprocess.run([str(TARGET), "mix", "8", "2", "2"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "mix ok\n", proc.stderr


def test_small_blocks_are_paged_and_read_back_exactly(tmp_path: Path) -> None:
    # 48 MiB of small blocks alive at once, through a 16 MiB budget: every
    # byte checked by the target, the heap's data written to the storage
    # tier and read back, the process's memory near the budget
    on = _mix(tmp_path, "--small-blocks")
    off = _mix(tmp_path)
    (proc,) = on["processes"]
    heap = proc["small_heap"]
    assert heap["max_block"] == 1 << 20
    assert heap["span_bytes"] >= 32 * MIB
    assert heap["mapped_bytes"] >= heap["span_bytes"]
    c = on["pager"]["counters"]
    assert c["bytes_written"] > 16 * MIB and c["evictions"] > 0
    assert c["peak_resident_bytes"] <= 16 * MIB
    # left outside: stacks, the target's tables, glibc's own blocks
    assert c["other_peak_bytes"] < 16 * MIB, c
    assert off["processes"][0]["small_heap"] is None
    # without the heap all 48 MiB stay in DRAM
    assert off["max_rss_bytes"] > 48 * MIB
    assert on["max_rss_bytes"] < 0.7 * off["max_rss_bytes"], (on["max_rss_bytes"], off)


def test_freed_blocks_are_not_written_to_the_tier(tmp_path: Path) -> None:
    # 24 MiB of 896 KiB blocks written and freed, then a 16 MiB array
    # written under a 32 MiB budget: the freed blocks' units are dropped
    # from the pager at free, so making room for the array writes none of
    # them back (27 MiB were written and read back before), and the blocks
    # taken again still hold what is written to them
    stats = tmp_path / "freed.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "32M", "--storage", str(tmp_path),
        "--small-blocks", "--stats", str(stats), "--", str(TARGET), "freed", "24", "16",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "freed ok\n"
    c = json.loads(stats.read_text())["pager"]["counters"]
    assert c["bytes_written"] < 4 * MIB, c
    assert c["bytes_read"] < 4 * MIB, c


def test_forked_child_reads_its_parents_small_blocks(tmp_path: Path) -> None:
    # the child reads a block of its parent's heap and allocates and frees
    # in the heap itself (a shell's subshell does both); HETMEM_FORK_COPY=0:
    # no copy, and a touch is explained
    args = ["run", "--mode", "cache", "--fast-budget", "16M", "--small-blocks",
            "--storage", str(tmp_path)]  # fmt: skip
    copied = run_hetmem(*args, "--", str(TARGET), "fork", "1")
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout == "exit 0\n", copied.stderr  # 3: the child's copy differed
    off = {"HETMEM_FORK_COPY": "0"}
    touched = run_hetmem(*args, "--", str(TARGET), "fork", "1", env=off)
    assert touched.returncode == 0, touched.stderr  # the parent's block is intact
    assert touched.stdout == "signal 11\n"
    said = [ln for ln in touched.stderr.splitlines() if "does not inherit them" in ln]
    assert len(said) == 1 and said[0].startswith("hetmem: this process was forked")
    untouched = run_hetmem(*args, "--", str(TARGET), "fork", "0", env=off)
    assert untouched.returncode == 0 and untouched.stdout == "exit 0\n", untouched.stderr


def test_shell_script_with_subshells_runs_with_the_heap(tmp_path: Path) -> None:
    # a shell forks without exec for $(...) and pipelines, and the child
    # reads the shell's own variables, which the heap holds
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--small-blocks",
        "--storage", str(tmp_path), "--", "bash", "-c",
        'x=$(seq 1 200 | tr "\\n" " "); y=$(for i in $x; do echo $((i*2)); done | tail -1); '
        'f() { echo "$x" | wc -w; }; echo "$y $(f)"',
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "400 200\n"


@pytest.mark.parametrize("mode", ["swap", "dram", "flat"])
def test_small_blocks_outside_cache_mode_is_one_line(mode: str) -> None:
    proc = run_hetmem("run", "--mode", mode, "--fast-budget", "16M", "--small-blocks", "--",
                      "true")  # fmt: skip
    assert proc.returncode == 2
    want = f"hetmem run: error: --small-blocks is for cache mode, not --mode {mode}\n"
    assert proc.stderr == want


def test_interposer_target_passes_with_the_heap(tmp_path: Path) -> None:
    # tests/c/preload_target.c under the heap: every hooked entry point,
    # reallocs across the threshold both ways, threads, and a forked child
    # that allocates and frees on its own (glibc's blocks must not be taken
    # for the parent's heap blocks there) before fork+exec
    storage = tmp_path / "tier"
    storage.mkdir()
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--small-blocks",
        "--storage", str(storage), "--stats", str(stats), "--",
        str(CBUILD / "hm_preload_target"), "check", "64",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "failures=0" in proc.stdout
    procs = json.loads(stats.read_text())["processes"]
    assert len(procs) >= 2 and all(p["small_heap"]["span_bytes"] > 0 for p in procs)
    assert not list(storage.iterdir())


def test_the_loaders_own_blocks_stay_out_of_the_heap(tmp_path: Path) -> None:
    # a link map of a library loaded after start-up, which the loader reads
    # holding its lock: in pager memory, a thread faulting on it while the
    # pager's handler waited for that lock hung LAMMPS under Open MPI
    # (without the exclusion this printed "link map beside ...")
    args = ["run", "--mode", "cache", "--fast-budget", "16M", "--storage", str(tmp_path)]
    proc = run_hetmem(*args, "--small-blocks", "--", str(TARGET), "dlopen")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "link map apart\n"
