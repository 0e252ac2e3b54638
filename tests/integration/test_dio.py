# SPDX-License-Identifier: BSD-3-Clause
"""Direct (O_DIRECT) reads into the pager's memory (src/preload/dio.c).

The device writes an O_DIRECT read's pages while the call sleeps; a page
the pager evicts meanwhile loses what the device writes there. The
interposer reads such requests through a bounce buffer of plain memory.
tests/c/dio_target.c (hm_dio_target) writes a file of a known pattern, reads
it back with one call of the read family into a 64 MiB buffer, and checks
every byte: under a 16 MiB budget the pager must evict parts of the buffer
during the read. Without the bounce buffer every one of these calls read
stale bytes (checked when dio.c was written: the first wrong byte 7-13 MiB
in).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import CBUILD, needs_pager, run_hetmem

TARGET = CBUILD / "hm_dio_target"
CALLS = ["read", "pread", "readv", "preadv", "preadv2", "preadv2cur", "read_chk", "short", "chunks"]
VECTORS = {"readv", "preadv", "preadv2", "preadv2cur"}  # two buffers each

needs_target = pytest.mark.skipif(not TARGET.exists(), reason=f"{TARGET} not built")
pytestmark = [needs_pager, needs_target]


def _direct_dir(tmp_path: Path) -> Path:
    """A folder on a filesystem that does O_DIRECT (tmpfs would only pretend)."""
    d = tmp_path / "data"
    d.mkdir()
    probe = d / "probe"
    probe.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        pytest.skip(f"{d}: no O_DIRECT")
    return d


def _run(tmp_path: Path, call: str, mib: int = 64) -> tuple[subprocess.CompletedProcess[str], Any]:
    tmp_path = tmp_path / call
    tmp_path.mkdir()
    data = _direct_dir(tmp_path)
    storage = tmp_path / "tier"
    storage.mkdir()
    stats = tmp_path / "stats.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--storage", str(storage),
        "--stats", str(stats), "--", str(TARGET), str(data / "f"), str(mib), call,
    )  # fmt: skip
    return proc, json.loads(stats.read_text())["interposer"] if stats.exists() else None


def test_target_checks_what_it_read_without_hetmem(tmp_path: Path) -> None:
    data = _direct_dir(tmp_path)
    for call in [*CALLS, "buffered"]:
        proc = subprocess.run(
            [str(TARGET), str(data / "f"), "4", call], capture_output=True, text=True
        )
        assert proc.returncode == 0, (call, proc.stdout, proc.stderr)
        assert proc.stdout == f"{call} ok {4 << 20}\n"


@pytest.mark.parametrize("call", CALLS)
def test_direct_read_into_the_pager_reads_back_exactly(tmp_path: Path, call: str) -> None:
    proc, ip = _run(tmp_path, call)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout == f"{call} ok {64 << 20}\n"
    # every buffer the call read into went through the bounce buffer
    # (chunks: 64 KiB reads from two threads, each through the bounce buffer
    # its thread keeps, so the buffer's earlier contents must never leak)
    bounced = {"chunks": (64 << 20) // 65536}.get(call, 2 if call in VECTORS else 1)
    assert ip["direct_reads_bounced"] == bounced
    assert (
        f"hetmem run: note: {bounced} direct (O_DIRECT) read(s) into the pager's memory went "
        "through a bounce buffer, 64 MiB copied in" in proc.stderr
    )
    assert ip["direct_bytes_bounced"] == 64 << 20


def test_buffered_reads_and_refused_lengths_pass_through(tmp_path: Path) -> None:
    proc, ip = _run(tmp_path, "buffered")
    assert proc.returncode == 0 and proc.stdout == f"buffered ok {64 << 20}\n", proc.stderr
    assert ip["direct_reads_bounced"] == 0
    assert "bounce buffer" not in proc.stderr
    # a length O_DIRECT refuses: refused as without hetmem, nothing read
    proc, ip = _run(tmp_path, "odd")
    assert proc.returncode == 0 and proc.stdout == "odd EINVAL\n", proc.stderr
    assert ip["direct_reads_bounced"] == 0
