# SPDX-License-Identifier: BSD-3-Clause
"""The terminal summary of the kernel-matrix suites says what the report
says: the paired median with its interval (noise and wide marked), UNSURE
checks with why, failures in full, and which DRAM figure is which."""

from __future__ import annotations

import argparse
import io
import re
from typing import Any

import pytest
from rich.console import Console

from hetmem import output
from hetmem.bench import exit_status, matrix

LONG_FAILURE = (
    "hetmem run exited 137: the swap baseline was killed by the OOM killer under "
    "memory.max 134217728 [Errno 12] while writing /var/tmp/hetmem-swap/backing-file "
    "END-OF-FAILURE"
)


def _row(mode: str, median: float, best: float, **kw: Any) -> dict[str, Any]:
    return {
        "case": "scan-read",
        "multiple": 2.0,
        "size_bytes": 128 << 20,
        "mode": mode,
        "time_s_best": 0.5,
        "time_s_median": 0.6,
        "efficiency": best,
        "efficiency_median": median,
        "efficiency_ci_low": None,
        "efficiency_ci_high": None,
        "pairs": 3,
        "noise": False,
        "wide": False,
        "failures": [],
        **kw,
    }


def _check(ok: bool | None, why: str) -> dict[str, Any]:
    return {
        "check": "data fits: scan-read swap 0.5x",
        "ratio": 0.2,
        "ratio_ci": None,
        "pass": ok,
        "why": why,
        "rule": "t_mode/t_dram within 0.95-1.05, median of 1 paired repetitions",
    }


def _stream_check() -> dict[str, Any]:
    return {
        "check": "stream-triad cache efficiency at 4x vs storage/DRAM bound",
        "ratio": 1.1,
        "model": 0.0431,
        "pass": True,
        "rule": "within 2x of the bound",
        "detail": {
            "dram_gbs_kernel": 27.5,
            "dram_gbs_kernel_is": "stream-triad in this matrix's dram run at 4x (1024 MiB)",
            "dram_gbs_probe": 11.9,
            "dram_gbs_probe_is": "hetmem probe --quick triad on node0, 2 threads",
            "storage_read_gbs": 2.5,
            "storage_write_gbs": 2.0,
            "model_bytes_read": 4.0e9,
            "model_bytes_written": 1.0e9,
            "model_storage_s": 2.1,
        },
    }


def _report() -> dict[str, Any]:
    rows = [
        _row("dram", 1.0, 1.0),
        # best-of-N 0.0517 (one lucky dram process); the median 0.4123
        _row("cache", 0.4123, 0.0517, efficiency_ci_low=0.3811, efficiency_ci_high=0.4409),
        _row(
            "swap",
            1.234,
            2.71,
            efficiency_ci_low=0.2,
            efficiency_ci_high=17.11,
            noise=True,
            wide=True,
            failures=[LONG_FAILURE],
        ),
    ]
    checks = [_check(None, "5.00x faster than dram with one repetition: rerun"), _stream_check()]
    fits = {
        "target": "data that fits the budget: every mode within 5% of dram",
        "pass": None,
        "passed": 0,
        "unsure": 1,
        "checks": 1,
        "worst": checks[0]["check"],
        "worst_ratio": 0.2,
    }
    return {"efficiency": rows, "checks": checks, "fits_target": fits, "hard_failures": 0}


@pytest.fixture
def printed(monkeypatch):
    buf = io.StringIO()
    console = Console(file=buf, width=120, highlight=False)
    monkeypatch.setattr(output, "_console", console)
    return buf


def _table_line(text: str, mode: str) -> str:
    return next(ln for ln in text.splitlines() if re.search(rf"\b{mode}\b", ln))


def _column(text: str, index: int) -> str:
    """A column of the table's body (index as in a body line split at its
    borders), its lines joined, spaces folded."""
    cells = [ln.split("│")[index] for ln in text.splitlines() if ln.startswith("│")]
    return " ".join(" ".join(cells).split())


def test_the_median_and_its_interval_not_the_best_repetition(printed):
    matrix.print_summary(_report())
    text = printed.getvalue()
    assert "median" in text.split("┏")[0]  # the title names the statistic
    cache = _table_line(text, "cache")
    assert "41.2%" in cache and "38.1-44.1%" in cache
    assert "5.2%" not in text and "271" not in text  # best-of-N ratios not shown


def test_noise_and_wide_are_marked(printed):
    matrix.print_summary(_report())
    text = printed.getvalue()
    swap = _table_line(text, "swap")
    assert "123.4%" in swap and "noise" in swap
    assert _column(text, -3) == "above 100%: noise, wide interval"
    assert "noise" not in _table_line(text, "cache")


def test_a_long_failure_is_wrapped_not_cut(printed):
    matrix.print_summary(_report())
    text = printed.getvalue()
    assert len(LONG_FAILURE) > 120  # more than one line of the console
    assert _column(text, -2).replace(" ", "") == LONG_FAILURE.replace(" ", "")
    assert "…" not in text


def test_unsure_with_why_and_not_a_miss(printed):
    data = _report()
    matrix.print_summary(data)
    text = printed.getvalue()
    assert "MISS" not in text
    assert "UNSURE  data fits: scan-read swap 0.5x: ratio 0.20" in text
    assert "why: 5.00x faster than dram with one repetition" in text
    assert "UNSURE  target: data that fits" in text and "1 unsure" in text
    # and the exit rule agrees: nothing printed MISS, so exit 0
    assert exit_status(matrix.targets_of(data)) == 0


def test_a_miss_prints_miss_and_exits_1(printed, monkeypatch):
    data = _report()
    data["checks"][0] = _check(False, "5.00x faster than dram beyond the noise")
    data["checks"][0]["ratio_ci"] = [0.18, 0.22]
    data["fits_target"]["pass"] = False
    monkeypatch.setattr(matrix, "run_matrix", lambda *_a: data)
    rc = matrix.SUITES["kernels"].run(argparse.Namespace(json=False))
    text = printed.getvalue()
    assert "MISS  data fits: scan-read swap 0.5x: ratio 0.20 (95% CI 0.18-0.22)" in text
    assert "why: 5.00x faster than dram beyond the noise" in text
    assert "MISS  target: data that fits" in text
    assert rc == 1


def test_the_stream_bound_says_which_dram_figure_is_which(printed):
    matrix.print_summary(_report())
    text = printed.getvalue()
    assert "DRAM 27.5 GB/s: stream-triad in this matrix's dram run at 4x (1024 MiB)" in text
    assert "probe triad 11.9 GB/s: hetmem probe --quick triad on node0, 2 threads" in text
    assert "(probe triad" not in text
