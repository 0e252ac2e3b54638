# SPDX-License-Identifier: BSD-3-Clause
"""Output files that hetmem writes where the user says (--stats, reports,
sweep results, placements) are never written through a symbolic link
(issue 19): each goes to a temporary file created exclusively in the
target's directory and is renamed into place, so a link planted at the
temporary name or at the target itself is replaced, never followed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hetmem.output import write_atomic

VICTIM_TEXT = "precious\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    return victim


def test_stats_of_a_run_are_never_written_through_a_planted_link(tmp_path: Path) -> None:
    """The old --stats writer opened `.NAME.tmp<hetmem's pid>` without
    O_EXCL|O_NOFOLLOW: a link planted there while the command runs (the
    command's parent is hetmem, so its pid is known) received the stats."""
    out_dir, victim = tmp_path / "out", _victim(tmp_path)
    out_dir.mkdir()
    stats, ready = out_dir / "s.json", tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", "run", "--mode", "dram", "--stats", str(stats), "--",
         "sh", "-c", f'echo $PPID > {ready}.tmp && mv {ready}.tmp {ready} && sleep 1'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        hetmem_pid = int(ready.read_text())
        (out_dir / f".s.json.tmp{hetmem_pid}").symlink_to(victim)
        stats.symlink_to(victim)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert victim.read_text() == VICTIM_TEXT
    assert not stats.is_symlink() and '"kind": "hetmem-run"' in stats.read_text()


def test_write_atomic_replaces_a_link_at_the_target(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    target = tmp_path / "report.json"
    target.symlink_to(victim)
    write_atomic(target, "{}\n")
    assert victim.read_text() == VICTIM_TEXT
    assert not target.is_symlink() and target.read_text() == "{}\n"
    # the mode a plain open() would have given, not mkstemp's 0600
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
