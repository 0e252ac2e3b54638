# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem profile` names exactly the profiles its own processes wrote
(issue 19, finding 11): the interposer writes them behind a per-run
hidden prefix, and the run renames them to their names. A file of an
earlier run, whatever its time stamps say, is never taken for this run's
(the suite's flaky `test_a_run_lists_only_its_own_profiles` found them by
modification time)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from conftest import run_hetmem
from hetmem.placement import profile as prof


def _stale(path: Path, when: float) -> str:
    """A valid profile of another process whose clocks say it ran at `when`."""
    text = prof.dumps(
        prof.default_header(pid=4242, start_unix=when, wall_ns=1_000_000),
        [("/bin/true", "")],
        [],
    )
    path.write_text(text)
    os.utime(path, (when, when))
    return text


def test_a_run_names_only_its_own_profiles_not_a_newer_stale_one(tmp_path: Path) -> None:
    out = tmp_path / "t.prof"
    future = time.time() + 3600  # a clock ahead, or a run just after this one
    stale = tmp_path / "t.prof.norank.4242"
    text = _stale(stale, future)
    proc = run_hetmem("profile", "-o", str(out), "--", "/bin/true")
    assert proc.returncode == 0, proc.stderr
    wrote = re.findall(r"wrote (\S+)", proc.stderr)
    assert len(wrote) == 1 and wrote[0] != str(stale), proc.stderr
    assert re.fullmatch(re.escape(str(out)) + r"\.norank\.\d+", wrote[0])
    assert prof.load(wrote[0]).header["pid"] != 4242
    assert stale.read_text() == text  # untouched
    # nothing of the run's own naming is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([stale.name, Path(wrote[0]).name])


def test_two_runs_in_a_row_each_name_their_own(tmp_path: Path) -> None:
    out = str(tmp_path / "t.prof")
    first = run_hetmem("profile", "-o", out, "--", "/bin/true")
    second = run_hetmem("profile", "-o", out, "--", "/bin/true")
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    (a,) = re.findall(r"wrote (\S+)", first.stderr)
    (b,) = re.findall(r"wrote (\S+)", second.stderr)
    assert a != b and Path(a).exists() and Path(b).exists()
