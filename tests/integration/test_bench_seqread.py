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
from hetmem.bench import machine, seqread
from hetmem.errors import EnvironmentProblem


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


def test_summary_judges_against_huge_page_fio_where_it_ran() -> None:
    runs = _runs([(1.8, 1.5), (1.9, 2.0)])
    runs += [
        {"round": 0, "side": "fio-huge", "gbs": 3.0},
        {"round": 1, "side": "fio-huge", "gbs": 3.8},
    ]
    s = seqread.summarize(runs)
    assert [t["target"].endswith("/ fio") for t in s["targets"]] == [True, False]
    assert s["ratios_huge"] == pytest.approx([0.6, 0.5])
    assert s["targets"][0]["pass"] is True  # 1.2 and 0.95 against default buffers
    assert s["targets"][1]["pass"] is False and s["targets"][1]["measured"] == pytest.approx(0.55)
    assert len(seqread.summarize(_runs([(1.0, 1.0)]))["targets"]) == 1  # not run: no row


def test_device_reads_are_the_stat_counters_difference(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("  100  10  51200  200  7 0 56 3 0 150 203 0 0 0 0 0 0\n")
    before = machine.read_counters(stat)
    assert before == (100, 10, 51200, 200)
    stat.write_text("  300  50  153600  700  9 0 72 4 0 400 704 0 0 0 0 0 0\n")
    shape = machine.read_shape(before, machine.read_counters(stat), 2e9)
    # 200 requests of 256 KiB that took 2.5 ms each; at 2 GB/s that is
    # 2e9 / 262144 x 0.0025 = 19.1 in flight
    assert shape == {"requests": 200, "merged": 40, "mean_bytes": 262144,
                     "mean_latency_ms": 2.5, "in_flight": 19.1}  # fmt: skip
    # no reads, or an unreadable file: nothing to say
    assert machine.read_shape(before, before, 2e9) is None
    stat.write_text("garbage\n")
    assert machine.read_counters(stat) is None
    assert machine.read_counters(None) is None


def test_device_lines_take_each_sides_medians() -> None:
    def dev(kib: int, ms: float, fl: float) -> dict[str, Any]:
        return {"requests": 1, "merged": 0, "mean_bytes": kib * 1024, "mean_latency_ms": ms,
                "in_flight": fl}  # fmt: skip

    runs = [
        {"side": "pager", "round": 0, "device": dev(400, 1.8, 10.0)},
        {"side": "pager", "round": 1, "device": dev(420, 2.0, 12.0)},
        {"side": "pager", "round": 2, "device": dev(500, 9.0, 30.0)},
        {"side": "fio", "round": 0, "device": dev(256, 1.2, 15.8)},
        {"side": "fio", "round": 1, "error": "failed"},
    ]
    assert seqread.device_lines(runs) == [
        "device reads, pager: 420 KiB a request, 2.00 ms each, 12.0 in flight (medians of 3 runs)",
        "device reads, fio: 256 KiB a request, 1.20 ms each, 15.8 in flight (one run)",
    ]


def test_hugetlb_pages_are_read_from_meminfo(tmp_path: Path) -> None:
    mi = tmp_path / "meminfo"
    mi.write_text("MemTotal: 100 kB\nHugePages_Total: 16\nHugePages_Free: 12\n"
                  "Hugepagesize:    2048 kB\n")  # fmt: skip
    assert machine.hugetlb_free(str(mi)) == (12, 2 << 20)
    assert machine.hugetlb_free(str(tmp_path / "none")) == (0, 0)
    # 32 reads of 256 KiB: 8 MiB, four 2 MiB pages and one for alignment
    assert machine.huge_pages_needed(256 << 10, 32, 2 << 20) == 5
    assert machine.huge_pages_needed(3 << 20, 1, 2 << 20) == 3


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
        (("--fio-huge", "sometimes"), "--fio-huge"),
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


@pytest.mark.skipif(not shutil.which("fio"), reason="needs fio")
@pytest.mark.skipif(machine.hugetlb_free()[0] > 0, reason="hugetlb pages are free here")
def test_fio_huge_on_without_pages_is_one_line(hetmem: Any, tmp_path: Path) -> None:
    proc = hetmem("bench", "seqread", "--fio-huge", "on", "-o", str(tmp_path / "o"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "nr_hugepages" in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(machine.hugetlb_free()[0] > 0, reason="hugetlb pages are free here")
def test_fio_huge_on_with_too_few_pages_says_how_many() -> None:
    # the shape known after the pager's run: 256 KiB reads, 32 in flight
    assert not seqread.fio_huge_ok({"fio_huge": "auto"}, 256 << 10, 32)
    assert not seqread.fio_huge_ok({"fio_huge": "off"}, 256 << 10, 32)
    with pytest.raises(EnvironmentProblem, match=r"fio needs \d+ free hugetlb pages, 0 are free"):
        seqread.fio_huge_ok({"fio_huge": "on"}, 256 << 10, 32)


@needs_pager
@pytest.mark.skipif(not shutil.which("fio"), reason="needs fio")
def test_small_run_measures_both_sides_and_leaves_no_files(hetmem: Any, tmp_path: Path) -> None:
    out = tmp_path / "o"
    scratch_storage = tmp_path / "tier"
    scratch_storage.mkdir()
    before = set(scratch_storage.iterdir())
    proc = hetmem(
        "bench", "seqread", "--fast-budget", "32MiB", "--rounds", "2", "--reps", "3",
        "--settle", "0", "--storage", str(scratch_storage), "-o", str(out), "--json",
        "--fio-huge", "off", timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((out / "seqread.json").read_text())
    assert data == json.loads(proc.stdout)
    assert data["schema_version"] == 3 and data["size_bytes"] == 64 << 20
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
    if machine.block_stat_file(str(scratch_storage)) is not None:
        # each side's reads as the device counted them: O_DIRECT reads of
        # whole pages at least, some of them in flight
        for r in data["runs"]:
            dev = r["device"]
            assert dev["requests"] > 0 and dev["mean_bytes"] >= 4096, r
            assert dev["mean_latency_ms"] >= 0 and dev["in_flight"] >= 0, r
        assert any(line.startswith("device reads, pager: ") for line in
                   seqread.device_lines(data["runs"]))  # fmt: skip
