# SPDX-License-Identifier: BSD-3-Clause
"""Static arrays in cache mode (src/preload/statics.c): STREAM with its three
arrays in .bss (hm-stream-static, 3 x 160 MB), run at a budget far below
them. The untouched .bss goes behind the pager before main, the program's
results stay valid, and the pager's resident memory stays within the
budget; with HETMEM_STATICS=0 the run says the data is not managed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CBUILD, needs_pager, run_hetmem

STREAM = CBUILD / "bench" / "hm-stream-static"
ELEMENTS = 4_000_000  # 32 MB per array used: 96 MB against a 24 MiB budget
BUDGET = 24 << 20

pytestmark = pytest.mark.skipif(not STREAM.exists(), reason=f"{STREAM} not built")


def _run(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[dict, dict, str]:
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", str(BUDGET), "--storage", str(tmp_path),
        "--stats", str(stats), "--", str(STREAM), "--elements", str(ELEMENTS), "--ntimes", "2",
        env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] is True  # STREAM's own check of every element
    return out, json.loads(stats.read_text()), proc.stderr


@needs_pager
def test_static_arrays_go_behind_the_pager(tmp_path: Path) -> None:
    _, stats, err = _run(tmp_path)
    (st,) = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert st["module"].endswith("hm-stream-static")
    assert st["bytes"] >= 3 * 160_000_000 - 2 * 4096  # whole pages of it
    # all of it but what the loader and libc wrote before main (if anything)
    assert st["managed_bytes"] >= st["bytes"] - (1 << 20), st
    counters = stats["pager"]["counters"]
    assert counters["footprint_bytes"] >= 3 * ELEMENTS * 8  # the arrays were paged
    assert counters["peak_resident_bytes"] <= BUDGET
    assert "is not managed" not in err


@needs_pager
def test_unmanaged_static_data_is_said_once(tmp_path: Path) -> None:
    _, stats, err = _run(tmp_path, env={"HETMEM_STATICS": "0"})
    (st,) = [s for s in stats["processes"][0]["statics"] if s["segment"] == "bss"]
    assert st["managed_bytes"] == 0 and st["why"] == "HETMEM_STATICS=0"
    lines = [ln for ln in err.splitlines() if "static data of hm-stream-static" in ln]
    assert lines == ["hetmem run: note: static data of hm-stream-static (.bss, 458 MiB) is not "
                     "managed: HETMEM_STATICS=0"]  # fmt: skip
