# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run --auto-fast MIN[:MAX]` on this one-node machine: it runs the
command unchanged and says it changes nothing here; bad ranges are
one-line errors. Where the fast tier is another node (the KNL-like guest
of tests/vm) the sizes in range land there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem
from hetmem import _native

WORKLOAD = CBUILD / "bench" / "hm-placement"


@needs_pager
@pytest.mark.skipif(not WORKLOAD.exists(), reason="hm-placement not built")
def test_auto_fast_runs_the_command_and_says_what_it_did(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    p = run_hetmem("run", "--auto-fast", "4M:16M", "--fast-budget", "64M", "--stats", str(stats),
                   "--", str(WORKLOAD), "--footprint", str(32 << 20), "--iters", "1", "--exit3",
                   "--numa-policies")  # fmt: skip
    assert p.returncode == 3, p.stderr  # the command's status, unchanged
    plain = run_hetmem("run", "--mode", "dram", "--", str(WORKLOAD), "--footprint",
                       str(32 << 20), "--iters", "1")  # fmt: skip
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["checksum"] == json.loads(plain.stdout.strip().splitlines()[-1])["checksum"]
    assert "--auto-fast changes nothing here" in p.stderr
    got = json.loads(stats.read_text())
    assert got["mode"] == "flat" and got["placement_file"] is None
    assert got["auto_fast"] == {"min": 4 << 20, "max": 16 << 20}
    assert got["placement"]["auto_fast"] == {"min": 4 << 20, "max": 16 << 20}
    assert got["threshold"] == 4 << 20


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--auto-fast", "0"], "needs 0 < MIN <= MAX"),
        (["--auto-fast", "16M:4M"], "needs 0 < MIN <= MAX"),
        (["--auto-fast", "big"], "expected MIN or MIN:MAX"),
        (["--auto-fast", "1M", "--mode", "cache"], "--auto-fast is for --mode flat or hybrid"),
        (["--auto-fast", "1M", "--mode", "dram"], "--auto-fast is for --mode flat or hybrid"),
    ],
)
def test_bad_auto_fast_is_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    p = run_hetmem("run", *args, "--fast-budget", "64M", "--", "touch", str(marker))
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not marker.exists()


@needs_pager
@pytest.mark.parametrize("value", ["16M:4M", "0", "big", "4M:lots"])
def test_bad_auto_fast_set_by_hand_refuses_the_mode(value: str, tmp_path: Path) -> None:
    """HETMEM_AUTO_FAST set by hand, not by `hetmem run` (which checks it
    first): the interposer refuses the mode with one line and exit 2 before
    the command runs, as for any other bad option."""
    table = tmp_path / "t.compact"
    table.write_text("hetmem-placement-compact 1\ntiers 1\ntier 0 dram 0 0 node0\n"
                     "modules 0\nsites 0\nend\n")  # fmt: skip
    marker = tmp_path / "ran"
    env = {
        **os.environ,
        "LD_PRELOAD": str(_native.library_dir() / "libhetmem_preload.so"),
        "HETMEM_PLACEMENT": str(table),
        "HETMEM_FAST_BUDGET": "64M",
        "HETMEM_AUTO_FAST": value,
    }
    p = subprocess.run(["touch", str(marker)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "auto_fast must be MIN or MIN:MAX" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not marker.exists()
    # the same table with a good range: the command runs
    env["HETMEM_AUTO_FAST"] = "4M:16M"
    ok = subprocess.run(["touch", str(marker)], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and marker.exists(), ok.stderr
