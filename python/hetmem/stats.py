# SPDX-License-Identifier: BSD-3-Clause
"""Uncertainty of timings from repeated runs: the one bootstrap of hetmem.

A speed-up measured on a shared, noisy machine is only worth stating with
its spread. `median_ci` gives the interval of one set's median (the
report's paired ratios); `ratio` gives the ratio of two sets of run times (slow over
fast: how many times faster the second is) as the ratio of their medians,
with a percentile bootstrap confidence interval (scipy.stats.bootstrap,
resampling each set independently). The medians keep one disturbed run from
moving the answer; the bootstrap needs no assumption about the run times'
distribution. With fewer than two runs on a side there is no interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetmem._numpy import np

CONFIDENCE = 0.95
# Enough resamples for a stable 95% interval of a median; a fixed seed, so
# that one set of runs always gives the same interval (and the same report).
RESAMPLES = 2000
SEED = 24


def _bootstrap(samples: tuple[Sequence[float], ...], statistic: Any) -> tuple[float, float]:
    """The percentile bootstrap interval of statistic over samples, each
    resampled on its own."""
    # lazy: scipy loads numpy, which CLI start-up must not (see hetmem._numpy)
    from scipy import stats as sps

    res = sps.bootstrap(
        tuple(np.asarray(s, dtype=float) for s in samples),
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        random_state=np.random.default_rng(SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def median_ci(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The 95% bootstrap interval of the median of values, holding the
    median itself; (None, None) with fewer than two values."""
    if len(values) < 2:
        return None, None
    if min(values) == max(values):
        return float(values[0]), float(values[0])
    med = statistics.median(values)
    lo, hi = _bootstrap((values,), np.median)
    return min(lo, med), max(hi, med)


@dataclass(frozen=True)
class Ratio:
    """`value` (median over median) and its interval; lo/hi are None when
    a side has fewer than two runs."""

    value: float
    lo: float | None
    hi: float | None
    n_num: int
    n_den: int

    @property
    def significant_above_one(self) -> bool:
        """Above 1 beyond the noise: the whole interval is."""
        return self.lo is not None and self.lo > 1.0

    @property
    def significant_below_one(self) -> bool:
        return self.hi is not None and self.hi < 1.0

    def text(self, unit: str = "x") -> str:
        """'2.31x (95% CI 2.10-2.52, 3+3 runs)' or '2.31x (1+3 runs, no CI)'."""
        runs = f"{self.n_num}+{self.n_den} runs"
        if self.lo is None or self.hi is None:
            return f"{self.value:.2f}{unit} ({runs}, no CI)"
        return f"{self.value:.2f}{unit} ({CONFIDENCE:.0%} CI {self.lo:.2f}-{self.hi:.2f}, {runs})"

    def as_dict(self) -> dict[str, float | int | None]:
        return {"value": self.value, "ci_low": self.lo, "ci_high": self.hi,
                "confidence": CONFIDENCE, "n_num": self.n_num, "n_den": self.n_den}  # fmt: skip


def _median_ratio(num: Any, den: Any, axis: int = -1) -> Any:
    return np.median(num, axis=axis) / np.median(den, axis=axis)


def ratio(num: Sequence[float], den: Sequence[float]) -> Ratio:
    """median(num) / median(den) with its bootstrap interval; ValueError
    when a side is empty or a time is not positive."""
    if not num or not den or min(num) <= 0 or min(den) <= 0:
        raise ValueError("ratio needs positive times on both sides")
    value = statistics.median(num) / statistics.median(den)
    if len(num) < 2 or len(den) < 2:
        return Ratio(value, None, None, len(num), len(den))
    lo, hi = _bootstrap((num, den), _median_ratio)
    return Ratio(value, min(lo, value), max(hi, value), len(num), len(den))
