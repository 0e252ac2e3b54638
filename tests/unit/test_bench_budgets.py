# SPDX-License-Identifier: BSD-3-Clause
"""hetmem bench budgets: its budgets and its target's verdict."""

from __future__ import annotations

import pytest

from hetmem.bench.budgets import parse_budgets, placed_vs_cache
from hetmem.errors import UsageError
from hetmem.recommend.runs import Run

FOOT = 512 << 20


def test_budgets_are_percentages_of_the_footprint_or_sizes() -> None:
    assert parse_budgets("25%,50%,75%", FOOT) == [128 << 20, 256 << 20, 384 << 20]
    assert parse_budgets("100M, 37.5%", FOOT) == [100 << 20, 192 << 20]


@pytest.mark.parametrize("text", ["", "0%", "100%", "150%", "x%", "1M", "25%,1M"])
def test_bad_budgets_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--budgets"):
        parse_budgets(text, FOOT)


def _runs(times: dict[str, list[float]]) -> list[Run]:
    return [Run(m, i, 0, t) for m, ts in times.items() for i, t in enumerate(ts)]


def test_placed_faster_passes_and_names_the_better_mode() -> None:
    t = placed_vs_cache(_runs({"cache": [4.0, 4.2], "flat": [2.0, 2.1], "hybrid": [1.5, 1.6]}),
                        "sparse", 0.25)  # fmt: skip
    assert t["pass"] is True and t["mode"] == "hybrid"
    assert t["ratio"]["value"] == pytest.approx(4.1 / 1.55)


def test_cache_faster_beyond_the_noise_misses_and_within_it_passes() -> None:
    miss = placed_vs_cache(_runs({"cache": [1.0, 1.05, 1.02], "flat": [2.0, 2.1, 2.2]}), "w", 0.5)
    assert miss["pass"] is False and "beyond the noise" in miss["why"]
    tie = placed_vs_cache(_runs({"cache": [1.0, 1.3, 1.1], "flat": [1.2, 0.9, 1.15]}), "w", 0.5)
    assert tie["pass"] is True


def test_no_placed_run_is_not_measured() -> None:
    assert placed_vs_cache(_runs({"cache": [1.0]}), "w", 0.5)["pass"] is None
