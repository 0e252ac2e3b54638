# SPDX-License-Identifier: BSD-3-Clause
"""The report's statistics, checks, plots and machine details."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

from conftest import _record
from hetmem import cli
from hetmem.bench import harness, machine, report_checks, report_plots, report_stats
from hetmem.bench.report_checks import fits_checks, fits_target, fits_verdict


def _rows(runs):
    return report_stats.annotate(harness.efficiency_table(runs))


def test_interval_needs_two_repetitions_and_holds_the_median():
    assert report_stats.median_ci([0.5]) == (None, None)
    values = [0.50, 0.55, 0.61, 0.58, 0.90]
    lo, hi = report_stats.median_ci(values)
    assert lo <= statistics.median(values) <= hi
    assert lo >= min(values) and hi <= max(values) and hi > lo
    assert report_stats.median_ci(values) == (lo, hi)  # fixed seed: same report


def test_above_one_is_noise_unless_the_interval_is_above_one():
    runs = []
    for rep, (d, fast, noisy) in enumerate([(1.0, 0.5, 0.4), (1.0, 0.52, 1.5), (1.0, 0.51, 0.9)]):
        runs.append(_record("scan-read", 2.0, "dram", rep, d))
        runs.append(_record("scan-read", 2.0, "cache", rep, fast))
        runs.append(_record("scan-read", 2.0, "swap", rep, noisy))
    rows = {r["mode"]: r for r in _rows(runs)}
    assert rows["cache"]["efficiency_median"] > 1 and rows["cache"]["efficiency_ci_low"] > 1
    assert not rows["cache"]["noise"]
    assert rows["swap"]["efficiency_median"] > 1 and rows["swap"]["noise"]
    assert rows["swap"]["wide"]


@pytest.mark.parametrize(
    "ratio, band, verdict",
    [
        (1.02, None, True),
        (1.20, (1.1, 1.3), False),  # slower beyond the noise: a miss
        (1.20, None, False),  # one repetition, slower: a miss, as before
        (1.17, (0.98, 1.22), None),  # slower, but the interval reaches the band
        (0.20, (0.18, 0.22), None),  # 5x faster with data in DRAM: runs not alike, no pass
        (0.20, None, None),  # one repetition: cannot tell
        (0.90, (0.80, 1.00), True),  # faster only within the noise
        (None, None, False),
    ],
)
def test_data_fits_verdict_matches_the_number(ratio, band, verdict):
    assert fits_verdict(ratio, band)[0] is verdict


def test_data_fits_check_uses_the_tables_statistic():
    # best times say 35% (one lucky dram process); the paired median says 1.02
    dram = [0.35, 1.0, 1.0]
    cache = [1.0, 1.02, 1.02]
    runs = [_record("fft3d", 0.5, "dram", i, t) for i, t in enumerate(dram)]
    runs += [_record("fft3d", 0.5, "cache", i, t) for i, t in enumerate(cache)]
    rows = _rows(runs)
    (check,) = fits_checks(rows)
    cache_row = next(r for r in rows if r["mode"] == "cache")
    assert cache_row["efficiency"] == pytest.approx(0.35)
    assert check["efficiency"] == cache_row["efficiency_median"]
    assert check["ratio"] == pytest.approx(1 / cache_row["efficiency_median"])
    assert check["pass"] is True


def test_lines_break_at_a_failed_run_and_at_the_budget():
    xs, ys = report_plots.curve([0.5, 0.75, 2.0, 4.0, 8.0], {0.5: 90, 0.75: 95, 2.0: 40, 8.0: 10})
    assert xs[:2] == [0.5, 0.75] and ys[:2] == [90, 95]
    assert 0.75 < xs[2] < 2.0 and math.isnan(ys[2])  # the fits / does-not-fit boundary
    assert xs[3:] == [2.0, 4.0, 8.0] and ys[3] == 40 and math.isnan(ys[4]) and ys[5] == 10


def test_plot_fits_the_page_and_reads_sizes_as_multiples():
    runs = []
    for rep in range(2):
        for mult in (0.5, 1.0, 2.0, 4.0):
            runs.append(_record("stream-triad", mult, "dram", rep, 1.0))
            runs.append(_record("stream-triad", mult, "cache", rep, 1.0 + mult + 0.1 * rep))
            runs.append(_record("stream-triad", mult, "swap", rep, 0.1 if mult < 1 else 9.0))
    svg = report_plots.plot_efficiency(_rows(runs))
    assert svg.startswith("<svg style='max-width:100%;height:auto' ")
    for label in ("0.5x", "1x", "2x", "4x"):
        assert f"<!-- {label} -->" in svg
    assert "2^{" not in svg and "<!-- $\\mathdefault{2^" not in svg
    assert "<!-- 1000% -->" in svg  # swap's 10x at 0.5x: drawn at the top, labelled


def test_headline_speaks_of_swap_and_its_oom():
    runs = []
    for rep in range(3):
        runs.append(_record("lu-tiled", 2.0, "dram", rep, 1.0))
        runs.append(_record("lu-tiled", 2.0, "cache", rep, 2.0 + 0.01 * rep))
        runs.append(_record("lu-tiled", 2.0, "swap", rep, 6.0 + 0.01 * rep))
        oom = _record("lu-tiled", 4.0, "swap", rep, None, error="killed")
        runs += [_record("lu-tiled", 4.0, "dram", rep, 1.0), {**oom, "error_kind": "baseline-oom"}]
    (h,) = report_stats.headlines(_rows(runs), runs)
    assert (h["best_mode"], h["multiple"]) == ("cache", 2.0)
    assert h["vs_swap"]["value"] == pytest.approx(3.0, rel=0.01)
    assert "cache is best: 50% of dram speed (95% CI" in h["text"]
    assert "3x faster than swap (95% CI" in h["text"] and h["text"].endswith(")."), h["text"]
    one = [r for r in runs if r["rep"] == 0 and r["multiple"] == 2.0]
    (h1,) = report_stats.headlines(_rows(one), one)
    assert "one repetition: no CI" in h1["text"]
    # swap killed in 2 of its 3 runs: the one ratio left says so
    part = [r for r in runs if r["multiple"] == 2.0 and not (r["mode"] == "swap" and r["rep"])]
    part += [{**oom, "multiple": 2.0, "rep": rep, "error_kind": "baseline-oom"} for rep in (1, 2)]
    (h2,) = report_stats.headlines(_rows(part), part)
    assert h2["vs_swap"]["pairs"] == 1
    assert h2["text"].endswith(
        "3x faster than swap in the run it survived (one repetition: no CI); "
        "Linux swap was killed by the OOM killer in 2 of 3 runs."
    ), h2["text"]
    assert "cache is best: " in h2["text"]
    # swap's one run beat cache's run beside it, not cache's median: cache
    # is best only of the modes that always completed, and the sentence
    # says so (make demo's gups-read4k read "cache is best ... 1.1x slower
    # than swap")
    times = {("cache", 0): 2.5, ("swap", 0): 2.2}
    fast = [{**r, "time_s": times.get((r["mode"], r["rep"]), r["time_s"])} for r in part]
    (h3,) = report_stats.headlines(_rows(fast), fast)
    assert h3["best_mode"] == "cache", h3
    assert "cache is best of the modes that completed every run: " in h3["text"], h3["text"]
    assert "slower than swap in the run it survived (one repetition: no CI); " in h3["text"]
    # swap's one run beat cache's median too: still not "swap is best" beside
    # "killed in 2 of 3 runs" (make demo's gups-read4k read that)
    times = {("swap", 0): 1.9}
    faster = [{**r, "time_s": times.get((r["mode"], r["rep"]), r["time_s"])} for r in part]
    (h4,) = report_stats.headlines(_rows(faster), faster)
    assert h4["best_mode"] == "cache", h4
    assert h4["text"].startswith("At 2x the budget, cache is best of the modes that completed"), h4
    assert "1.1x slower than swap in the run it survived" in h4["text"], h4["text"]
    # small fractions keep two digits (0.6%, not 1% with a CI of 0%-1%)
    assert [report_stats._pct(x) for x in (0.0061, 0.0405, 0.094, 0.41, 1.0)] == [
        "0.61%",
        "4.0%",
        "9.4%",
        "41%",
        "100%",
    ]
    # with every run complete, the fastest median is best, whatever failed elsewhere
    (h5,) = report_stats.headlines(_rows(faster[:3]), faster[:3])
    assert h5["best_mode"] == "swap" and "completed every run" not in h5["text"], h5


def test_headline_says_as_fast_as_swap_when_the_interval_holds_one():
    """cache best by its median efficiency, but its paired ratio to swap
    straddles 1: the sentence says so, not "1x slower than swap"."""
    runs = []
    swap = (2.0, 1.9, 2.2, 2.05, 1.95)
    cache = (2.1, 1.85, 2.0, 2.1, 2.0)
    for rep in range(5):
        runs.append(_record("gups-read4k", 2.0, "dram", rep, 0.02))
        runs.append(_record("gups-read4k", 2.0, "cache", rep, cache[rep]))
        runs.append(_record("gups-read4k", 2.0, "swap", rep, swap[rep]))
    (h,) = report_stats.headlines(_rows(runs), runs)
    s = h["vs_swap"]
    assert s["ci_low"] <= 1.0 <= s["ci_high"], s
    assert "as fast as swap within the noise (" in h["text"], h["text"]
    assert "slower than swap" not in h["text"] and "faster than swap" not in h["text"]
    # outside the noise, a ratio near 1 keeps two digits
    assert (
        report_stats._swap_text({"value": 1.04, "ci_low": 1.01, "ci_high": 1.07, "pairs": 5})
        == "1.04x faster than swap (95% CI 1.01-1.1)"
    )
    assert (
        report_stats._swap_text({"value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "pairs": 5})
        == "2x slower than swap (95% CI 1.7-2.5)"
    )


def test_storage_device_and_commit(tmp_path):
    assert machine.storage_device("/proc")["name"] == "none"
    assert machine.git_commit(tmp_path) == "unknown"
    # an installed package names the commit its build recorded
    (tmp_path / "build_info.json").write_text('{"schema_version": 1, "git_commit": "abc123"}')
    assert machine.git_commit(tmp_path) == "abc123"
    (tmp_path / "build_info.json").write_text("[1, 2]")
    assert machine.git_commit(tmp_path) == "unknown"
    info = machine.describe(str(tmp_path))
    assert info["storage_device"]["path"] == str(tmp_path)
    assert info["kernel"] and info["ram_bytes"] > 0 and info["cpus_online"] >= 1


def test_manifest_records_the_bench_command_when_run_from_another_verb(tmp_path, monkeypatch):
    def fake_one(plan, case, mult, mode, rep):
        return _record(case.name, mult, mode, rep, 1.0)

    monkeypatch.setattr(harness, "execute_one", fake_one)
    monkeypatch.setattr(sys, "argv", ["hetmem", "demo"])  # as under `hetmem demo`
    argv = ["bench", "kernels", "stream-triad", "--modes", "dram", "--sizes", "0.5x",
            "--repeat", "1", "--fast-budget", "16MiB", "-o", str(tmp_path / "r")]  # fmt: skip
    assert cli.main(argv) in (0, 1)
    manifest = json.loads(Path(tmp_path / "r" / "manifest.json").read_text())
    assert manifest["command"] == ["hetmem", *argv]
    assert sys.argv == ["hetmem", "demo"]


def test_fits_target_is_not_missed_by_checks_it_cannot_judge():
    def check(verdict):
        return {"check": "data fits: x", "pass": verdict, "ratio": 0.5}

    assert fits_target([check(True), check(None)])["pass"] is None
    assert fits_target([check(True), check(None), check(False)])["pass"] is False
    assert fits_target([check(True)])["pass"] is True


def _scale_row(case: str, mult: float, eff: float, ci: tuple[float, float] | None, budget: int):
    return {
        "case": case,
        "mode": "cache",
        "multiple": mult,
        "size_bytes": int(budget * mult),
        "efficiency_median": eff,
        "efficiency_ci_low": ci[0] if ci else None,
        "efficiency_ci_high": ci[1] if ci else None,
    }


def test_scale_checks_judge_the_imdt_targets() -> None:
    g = 1 << 30
    rows = [
        _scale_row("gemm-tiled", 2, 0.90, (0.86, 0.93), g),  # pass
        _scale_row("gemm-tiled", 4, 0.83, (0.80, 0.87), g),  # below, interval reaches: unsure
        _scale_row("lu-tiled", 2, 0.70, (0.65, 0.75), g),  # miss
        _scale_row("lu-lapack", 2, 0.40, (0.35, 0.45), g),  # below tiled: pass
        _scale_row("lu-tiled", 4, 0.81, None, g),  # one repetition, above: pass
        _scale_row("lu-lapack", 4, 0.90, None, g),  # above tiled: miss
        _scale_row("gemm-tiled", 2, 0.10, (0.1, 0.1), 256 << 20),  # below the scale: no check
        {**_scale_row("gemm-tiled", 2, 0.10, None, g), "mode": "swap"},  # not cache
    ]
    got = {c["check"]: c["pass"] for c in report_checks.scale_checks(rows)}
    assert got == {
        "imdt at scale: gemm-tiled at 2x": True,
        "imdt at scale: gemm-tiled at 4x": None,
        "imdt at scale: lu-tiled at 2x": False,
        "imdt at scale: lu-tiled at 4x": True,
        "imdt at scale: lu-lapack below lu-tiled at 2x": True,
        "imdt at scale: lu-lapack below lu-tiled at 4x": False,
    }
    why = {c["check"]: c.get("why", "") for c in report_checks.scale_checks(rows)}
    assert "interval reaches" in why["imdt at scale: gemm-tiled at 4x"]
    assert "whole interval below" in why["imdt at scale: lu-tiled at 2x"]
    kinds = {report_checks.check_kind(c) for c in report_checks.scale_checks(rows)}
    assert kinds == {"imdt at scale"}
