# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench seqread`: the pager's device read rate on a sequential scan
against fio at the same read size and depth (issue 21, target 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_pager
from hetmem.bench import seqread


def test_pager_rate_is_bytes_per_scan_over_the_median_scan() -> None:
    result = {"times_s": [0.9, 0.5, 0.4, 0.6, 0.5]}
    pager = {"counters": {"bytes_read": 5 * 10**9}}
    r = seqread.pager_rate(result, pager)
    # 1 GB per scan over a median scan of 0.5 s; the slow first scan is out
    assert r["gbs"] == pytest.approx(2.0)
    assert r["scans"] == 5 and r["median_scan_s"] == 0.5


@pytest.mark.parametrize(
    "result, pager",
    [({"times_s": []}, {"counters": {"bytes_read": 1}}), ({"times_s": [1.0]}, {"counters": {}})],
)
def test_pager_rate_refuses_a_run_without_times_or_reads(
    result: dict[str, Any], pager: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        seqread.pager_rate(result, pager)


def test_io_shape_prefers_the_pagers_own_figures() -> None:
    cfg = {"fetch_unit": 262144, "io_depth": 32, "read_max_bytes": 1 << 20,
           "reads_in_flight_max": 16}  # fmt: skip
    assert seqread.pager_io_shape({"config": cfg}) == (1 << 20, 16)
    old = {"fetch_unit": 262144, "io_depth": 32}  # stats of a library before them
    assert seqread.pager_io_shape({"config": old}) == (262144, 32)
    with pytest.raises(ValueError):
        seqread.pager_io_shape({"config": {}})


def _runs(pairs: list[tuple[float | None, float | None]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, (pg, fo) in enumerate(pairs):
        for side, v in (("pager", pg), ("fio", fo)):
            out.append({"round": k, "side": side, **({"gbs": v} if v else {"error": "failed"})})
    return out


def test_summary_pairs_rounds_and_takes_the_median() -> None:
    s = seqread.summarize(_runs([(1.8, 2.0), (2.0, 2.0), (1.0, 2.0)]))
    assert s["ratios"] == pytest.approx([0.9, 1.0, 0.5])
    assert s["target"]["measured"] == pytest.approx(0.9)
    assert s["target"]["pass"] is True
    low = seqread.summarize(_runs([(1.0, 2.0), (1.7, 2.0), (1.6, 2.0)]))
    assert low["target"]["pass"] is False  # median 0.8 < 0.9


def test_summary_counts_a_failed_pager_run_as_a_miss() -> None:
    s = seqread.summarize(_runs([(2.0, 2.0), (None, 2.0)]))
    assert s["ratios"] == pytest.approx([1.0])
    assert s["target"]["pass"] is False


@pytest.mark.parametrize(
    "args, words",
    [
        (("--size", "2x,4x"), "one multiple"),
        (("--reps", "2"), "--reps 2"),
        (("--rounds", "0"), "--rounds 0"),
        (("--fast-budget", "banana"), "banana"),
        (("--size", "0x"), "--size: '0x'"),
        (("--settle", "-1"), "--settle -1"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    hetmem: Any, tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    proc = hetmem("bench", "seqread", *args, "-o", str(tmp_path / "o"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert words in proc.stderr
    assert not (tmp_path / "o").exists()


@needs_pager
@pytest.mark.skipif(not shutil.which("fio"), reason="needs fio")
def test_small_run_measures_both_sides_and_leaves_no_files(hetmem: Any, tmp_path: Path) -> None:
    out = tmp_path / "o"
    scratch_storage = tmp_path / "tier"
    scratch_storage.mkdir()
    before = set(scratch_storage.iterdir())
    proc = hetmem(
        "bench", "seqread", "--fast-budget", "32MiB", "--rounds", "2", "--reps", "3",
        "--settle", "0", "--storage", str(scratch_storage), "-o", str(out), "--json", timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((out / "seqread.json").read_text())
    assert data == json.loads(proc.stdout)
    assert data["schema_version"] == 1 and data["size_bytes"] == 64 << 20
    sides = [(r["round"], r["side"]) for r in data["runs"]]
    # the scan leads in even rounds, fio in odd ones, each once per round
    assert sides == [(0, "pager"), (0, "fio"), (1, "fio"), (1, "pager")]
    for r in data["runs"]:
        assert "error" not in r, r
        assert r["gbs"] > 0
    pager = [r for r in data["runs"] if r["side"] == "pager"]
    fio = [r for r in data["runs"] if r["side"] == "fio"]
    # fio read with the pager's own read size and depth
    assert {(r["block_bytes"], r["depth"]) for r in fio} == {
        (r["block_bytes"], r["depth"]) for r in pager
    }
    # the pager read back at least part of the 2x data in each scan
    assert all(r["bytes_read"] >= r["scans"] * (16 << 20) for r in pager)
    assert len(data["ratios"]) == 2
    assert set(scratch_storage.iterdir()) == before
