# SPDX-License-Identifier: BSD-3-Clause
"""The report's statistics: one efficiency per case, size and mode, with its
confidence interval, and the headline per case.

The statistic everywhere in the report (table, plots, headlines and the
"data fits" checks) is the median over harness repetitions of the paired
ratio t_dram / t_mode, where the two runs of a pair ran back to back in one
repetition (modes interleaved, order rotating). Pairing cancels the slow
drifts of a shared machine; the median keeps one disturbed repetition from
moving the answer. Its 95% confidence interval is a percentile bootstrap of
that median over the pairs (scipy.stats.bootstrap); with one repetition
there is no interval, and the report says so. The best-times ratio (the
harness's `efficiency`, best of every mode) is kept beside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from hetmem.bench.harness import latest_runs, run_best_time
from hetmem.stats import CONFIDENCE, median_ci

STAT = "paired-median"
# An interval wider than this factor (hi / lo) gets a caveat: the runs
# disagree too much for the figure to mean much.
WIDE_FACTOR = 2.0


def annotate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The harness's efficiency rows with the report's interval and flags:
    `efficiency_ci_low/high` (null with fewer than 2 pairs), `noise` (above
    1, i.e. faster than dram, without the interval's low end above 1) and
    `wide` (the interval spans more than WIDE_FACTOR)."""
    out = []
    for r in rows:
        ratios = r.get("ratios") or []
        lo, hi = median_ci(ratios)
        eff = r.get("efficiency_median")
        out.append(
            {
                **r,
                "report_stat": STAT,
                "efficiency_ci_low": lo,
                "efficiency_ci_high": hi,
                "noise": eff is not None and eff > 1.0 and not (lo is not None and lo > 1.0),
                "wide": lo is not None and hi is not None and lo > 0 and hi / lo > WIDE_FACTOR,
            }
        )
    return out


def rep_times(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, float, str], dict[int, float]]:
    """(case, multiple, mode) -> {repetition: best time} of the successful runs."""
    out: dict[tuple[str, float, str], dict[int, float]] = {}
    for r in latest_runs(list(runs)):
        t = run_best_time(r)
        if not r.get("error") and t is not None:
            out.setdefault((r["case"], float(r["multiple"]), r["mode"]), {})[int(r["rep"])] = t
    return out


def paired_ratio(num: dict[int, float], den: dict[int, float]) -> dict[str, Any] | None:
    """Median over the shared repetitions of num / den, with its interval."""
    ratios = [num[k] / den[k] for k in sorted(num) if k in den and den[k] > 0]
    if not ratios:
        return None
    lo, hi = median_ci(ratios)
    return {"value": statistics.median(ratios), "ci_low": lo, "ci_high": hi, "pairs": len(ratios)}


def headline_size(rows: list[dict[str, Any]]) -> float:
    """The size a case's headline speaks of: the one nearest 2x among those
    that do not fit the budget, else the nearest 2x."""
    mults = {r["multiple"] for r in rows}
    over = [m for m in mults if m > 1] or list(mults)
    return min(over, key=lambda m: abs(math.log2(m / 2)))


def headlines(rows: list[dict[str, Any]], runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case: the best non-dram mode at the headline size, its fraction of
    dram speed, how many times faster than swap, and one sentence saying so.
    A mode that failed in some of its runs is best only where every mode
    did: swap killed in 2 of 3 runs of make demo's gups-read4k, as fast as
    cache in the one it survived, read "swap is best" beside "killed by the
    OOM killer in 2 of 3 runs", advice no user could take."""
    times = rep_times(runs)
    swap_fail = _swap_failures(runs)
    failed = _failed_modes(runs)
    out = []
    for case in sorted({r["case"] for r in rows}):
        rs = [r for r in rows if r["case"] == case and r["mode"] != "dram"]
        timed = [r for r in rs if r.get("efficiency_median") is not None]
        if not timed:
            continue
        mult = headline_size(timed)
        at = [r for r in timed if r["multiple"] == mult]
        whole = [r for r in at if r["mode"] not in failed.get((case, mult), ())]
        best = max(whole or at, key=lambda r: r["efficiency_median"])
        h = _headline(case, mult, best, at, times, swap_fail.get((case, mult)))
        # a mode left out for its failures had the better median
        h["only_complete"] = any(
            r["efficiency_median"] > best["efficiency_median"] for r in at if r not in whole
        )
        h["text"] = headline_text(h)
        out.append(h)
    return out


def _headline(
    case: str,
    mult: float,
    best: dict[str, Any],
    at: list[dict[str, Any]],
    times: dict[tuple[str, float, str], dict[int, float]],
    swap_error: str | None,
) -> dict[str, Any]:
    vs_swap = None
    if best["mode"] != "swap" and (case, mult, "swap") in times:
        vs_swap = paired_ratio(
            times[(case, mult, "swap")], times.get((case, mult, best["mode"]), {})
        )
    return {
        "case": case,
        "multiple": mult,
        "size_bytes": best["size_bytes"],
        "best_mode": best["mode"],
        "efficiency": best["efficiency_median"],
        "efficiency_stat": STAT,
        "efficiency_ci_low": best["efficiency_ci_low"],
        "efficiency_ci_high": best["efficiency_ci_high"],
        "noise": best["noise"],
        "pairs": best.get("pairs", 0),
        "vs_swap": vs_swap,
        "swap_error": swap_error,
        "by_mode": {r["mode"]: r["efficiency_median"] for r in at},
    }


def _failed_modes(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, float], set[str]]:
    """(case, multiple) -> the modes with a failed run there (the latest
    record of each repetition, as the table counts them)."""
    out: dict[tuple[str, float], set[str]] = {}
    for r in latest_runs(list(runs)):
        if r.get("error"):
            out.setdefault((r["case"], float(r["multiple"])), set()).add(r["mode"])
    return out


def _swap_failures(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, float], str]:
    """(case, multiple) -> why swap failed, where any swap run of it did:
    with how many of its runs, where others succeeded (a ratio to swap from
    the survivors alone would not say that swap itself fell over)."""
    ok: dict[tuple[str, float], int] = {}
    failed: dict[tuple[str, float], list[str]] = {}
    for r in latest_runs(list(runs)):
        if r.get("mode") != "swap":
            continue
        k = (r["case"], float(r["multiple"]))
        if not r.get("error"):
            ok[k] = ok.get(k, 0) + 1
        elif r.get("error_kind") == "baseline-oom":
            failed.setdefault(k, []).append("Linux swap was killed by the OOM killer")
        else:
            failed.setdefault(k, []).append(f"swap failed ({r.get('error')})")
    out = {}
    for k, why in failed.items():
        out[k] = why[0] if k not in ok else f"{why[0]} in {len(why)} of {len(why) + ok[k]} runs"
    return out


def ci_text(
    lo: float | None, hi: float | None, fmt: str | Callable[[float], str], pairs: int
) -> str:
    """'95% CI 38-44%' or 'one repetition: no CI'; fmt: a format string or
    a function that formats one bound."""
    if lo is None or hi is None:
        return "one repetition: no CI" if pairs <= 1 else "no CI"
    show = fmt.format if isinstance(fmt, str) else fmt
    return f"{CONFIDENCE:.0%} CI {show(lo)}-{show(hi)}"


def headline_text(h: dict[str, Any]) -> str:
    """'At 2x the budget, cache is best: 41% of dram speed (95% CI 38-44%),
    3.1x faster than swap (95% CI 2.8-3.4).'"""
    eff = (
        f"{_pct(h['efficiency'])} of dram speed "
        f"({ci_text(h['efficiency_ci_low'], h['efficiency_ci_high'], _pct, h['pairs'])})"
    )
    if h["noise"]:
        eff += ", faster than dram only within the noise"
    s = h["vs_swap"]
    # Swap fell over in some runs and was faster in those it survived: the
    # best mode is best among the modes that always completed, which "is
    # best" beside "slower than swap" did not say (make demo's gups-read4k).
    qual = ""
    if h.get("only_complete") or (h["swap_error"] and s and s["value"] < 1):
        qual = " of the modes that completed every run"
    text = f"At {h['multiple']:g}x the budget, {h['best_mode']} is best{qual}: {eff}"
    if s:
        text += ", " + _swap_text(s, survived=bool(h["swap_error"]))
    if h["swap_error"]:
        text += f"; {h['swap_error']}"
    elif not s and h["best_mode"] != "swap":
        text += "; swap did not run"
    return text + "."


def _swap_text(s: dict[str, Any], survived: bool = False) -> str:
    """'3.1x faster than swap (95% CI 2.8-3.4)', or slower, inverted; 'as
    fast as swap within the noise' when the interval holds 1 (a ratio of
    0.96 once read "1x slower than swap" beside "cache is best"). survived:
    swap failed in other runs, and the ratio is of the ones it survived."""
    value, lo, hi, word = s["value"], s["ci_low"], s["ci_high"], "faster"
    than = "than swap"
    if survived:
        n = s["pairs"]
        than += " in the run it survived" if n == 1 else f" in the {n} runs it survived"
    if lo is not None and hi is not None and lo <= 1.0 <= hi:
        ci = ci_text(lo, hi, _times, s["pairs"])
        return f"as fast as swap within the noise ({_times(value)}x its speed, {ci})"
    if value < 1:
        value, word = 1 / value, "slower"
        lo, hi = (1 / hi if hi else None), (1 / lo if lo else None)
    return f"{_times(value)}x {word} {than} ({ci_text(lo, hi, _times, s['pairs'])})"


def pct_cell(v: float | None) -> str:
    """A table cell's percentage: one decimal, '-' for none."""
    return "-" if v is None else f"{100 * v:.1f}%"


def _pct(x: float) -> str:
    """A fraction as a percentage: whole percents from 10% up, two
    significant digits below (a random-access run at 0.6% of dram speed,
    95% CI 0.4-0.7%, read "1% of dram speed (95% CI 0%-1%)")."""
    return f"{x:.0%}" if x >= 0.095 else f"{100 * x:#.2g}%"


def _times(x: float) -> str:
    """A ratio in two significant digits, never a bare 1 for 1.04."""
    text = f"{x:.2g}"
    return f"{x:.2f}" if text == "1" else text


def row_notes(r: dict[str, Any]) -> str:
    """The caveats on one efficiency row, as the report and the terminal
    summary both show them: noise, wide interval, one repetition."""
    notes = []
    if r.get("noise"):
        notes.append("above 100%: noise")
    if r.get("wide"):
        notes.append("wide interval")
    if r["mode"] != "dram" and r.get("pairs", 0) == 1:
        notes.append("one repetition")
    return ", ".join(notes)
