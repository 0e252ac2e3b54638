# SPDX-License-Identifier: BSD-3-Clause
"""A full storage tier (issue 19, finding 7).

A 200 MiB program on a 64 MiB `--storage` used to get a warning and DRAM
beyond the budget, with nothing counted. The policy is now chosen by
HETMEM_STORAGE_FULL: `error` (the default) fails the allocation at map time
with one line that says which directory is full and how to choose the other
policy; `fallback` serves it from DRAM and counts it in the statistics line
("storage_full": fallbacks, fallback_bytes).

Both run for real: a 64 MiB ext4 image loop-mounted in a private mount
namespace of the program (`unshare -m`), so the mount and its loop device
go away with the program whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager
from hetmem import _native
from hetmem.sizes import format_size

TARGET = CBUILD / "hm_full_target"
PRELOAD = _native.library_dir() / "libhetmem_preload.so"
MiB = 1 << 20

pytestmark = [
    needs_pager,
    pytest.mark.skipif(not TARGET.exists() or not PRELOAD.exists(), reason="not built"),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("unshare"),
        reason="needs root, mkfs.ext4 and unshare (a loop-mounted filesystem)",
    ),
]


def _run_on_small_tier(
    tmp_path: Path, policy: str | None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    img, mnt, stats = tmp_path / "tier.img", tmp_path / "tier", tmp_path / "stats.json"
    subprocess.run(["truncate", "-s", "64M", str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    env.update(
        HETMEM_FAST_BUDGET="16M",
        HETMEM_STORAGE=str(mnt),
        HETMEM_STATS=str(stats),
        FULL_IMG=str(img),
        FULL_MNT=str(mnt),
        FULL_PRELOAD=str(PRELOAD),
    )
    if policy:
        env["HETMEM_STORAGE_FULL"] = policy
    script = 'mount -o loop "$FULL_IMG" "$FULL_MNT" && LD_PRELOAD="$FULL_PRELOAD" exec "$@"'
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
         str(TARGET), "200", "8"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    img.unlink()
    if "mount" in proc.stderr and not stats.exists():
        pytest.skip(f"cannot loop-mount here: {proc.stderr.strip()}")
    lines = stats.read_text().splitlines() if stats.exists() else []
    assert len(lines) == 1, proc.stderr
    return proc, json.loads(lines[0])


def _counts(stdout: str) -> dict[str, int]:
    return {k: int(v) for k, v in (w.split("=") for w in stdout.split())}


@pytest.mark.parametrize("policy", [None, "error"])
def test_full_tier_fails_the_allocation_with_one_line(tmp_path: Path, policy: str | None) -> None:
    proc, st = _run_on_small_tier(tmp_path, policy)
    assert proc.returncode == 0, proc.stderr  # every byte it was given read back
    c = _counts(proc.stdout)
    assert c["served"] >= 1 and c["refused"] >= 10, c  # ~50 MiB fit; 200 MiB asked
    assert c["enomem"] == c["refused"]
    assert c["served"] + c["refused"] == 25
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hetmem:")]
    assert len(lines) == 1, proc.stderr  # said once, not per allocation
    line = lines[0]
    assert line.startswith(f"hetmem: storage tier {tmp_path / 'tier'} is full: cannot back ")
    assert "MiB free); free space or set HETMEM_STORAGE_FULL=fallback" in line
    full = st["storage_full"]
    assert full["policy"] == "error"
    assert full["refusals"] == c["refused"] and full["fallbacks"] == 0
    assert full["refused_bytes"] >= c["refused"] * 8 * MiB
    # nothing was served beyond the budget from DRAM
    assert st["interposer"]["fallbacks"] == 0


def test_full_tier_fallback_is_counted(tmp_path: Path) -> None:
    proc, st = _run_on_small_tier(tmp_path, "fallback")
    assert proc.returncode == 0, proc.stderr
    c = _counts(proc.stdout)
    assert c == {"served": 25, "refused": 0, "enomem": 0, "bad": 0}
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hetmem:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hetmem: warning: storage tier {tmp_path / 'tier'} is full")
    assert "HETMEM_STORAGE_FULL=fallback" in lines[0]
    full = st["storage_full"]
    assert full["policy"] == "fallback" and full["refusals"] == 0
    assert full["fallbacks"] >= 10
    assert full["fallback_bytes"] >= full["fallbacks"] * 8 * MiB
    # the pager held what the tier could back; the rest is the excess over the budget
    assert st["interposer"]["fallbacks"] == full["fallbacks"]


def test_unknown_policy_is_refused_at_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    env.update(LD_PRELOAD=str(PRELOAD), HETMEM_FAST_BUDGET="16M", HETMEM_STORAGE_FULL="ignore")
    proc = subprocess.run(
        [str(TARGET), "1", "1"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "hetmem: cannot start cache mode: HETMEM_STORAGE_FULL must be error or fallback, "
        "not 'ignore'\n"
    )


@pytest.mark.parametrize("policy", ["error", "fallback"])
def test_hetmem_run_reports_a_full_tier_at_the_end(tmp_path: Path, policy: str) -> None:
    """`hetmem run --storage-full POLICY` hands the policy to the interposer
    and its end-of-run summary says what the full tier cost: the allocations
    that failed, or how far DRAM went beyond the budget."""
    img, mnt, stats = tmp_path / "tier.img", tmp_path / "tier", tmp_path / "run.json"
    subprocess.run(["truncate", "-s", "64M", str(img)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    env.update(FULL_IMG=str(img), FULL_MNT=str(mnt))
    if "HETMEM_LIBDIR" in os.environ:  # a developer's build tree
        env["HETMEM_LIBDIR"] = os.environ["HETMEM_LIBDIR"]
    script = 'mount -o loop "$FULL_IMG" "$FULL_MNT" && exec "$@"'
    run = [sys.executable, "-m", "hetmem", "run", "--mode", "cache", "--fast-budget", "16M",
           "--storage", str(mnt), "--storage-full", policy, "--stats", str(stats),
           "--", str(TARGET), "200", "8"]  # fmt: skip
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *run],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    img.unlink()
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("hetmem run: note:")]
    assert len(notes) == 1, proc.stderr
    full = json.loads(stats.read_text())["storage_full"]
    assert full["policy"] == policy
    if policy == "error":
        assert full["refusals"] >= 10 and full["fallbacks"] == 0
        assert f"large allocation(s) ({format_size(full['refused_bytes'])}) failed" in notes[0]
        assert "--storage-full fallback" in notes[0]
    else:
        assert full["fallbacks"] >= 10 and full["refusals"] == 0
        assert f"up to {format_size(full['fallback_bytes'])} beyond the fast budget" in notes[0]
