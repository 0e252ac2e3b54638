# SPDX-License-Identifier: BSD-3-Clause
"""The report's checks, shown in its appendix for developers: does each
mode keep up with dram when the data fits, and do the curves follow what the
hardware allows (storage bandwidth, peak flops)? Each check says what it
measures in CHECK_EXPLANATIONS, in plain words, for the page."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hetmem.bench.harness import latest_runs, run_best_time

# What each kind of check measures, one sentence each, as the page shows it.
CHECK_EXPLANATIONS = {
    "data fits": (
        "When the data fits the fast budget, every mode keeps it in DRAM, so it should "
        "run as fast as dram: this compares t_mode / t_dram (the same median of paired "
        "repetitions as the efficiency table) with a 5% tolerance either way; a mode much "
        "faster than dram means the runs did not do the same work or the dram run was "
        "disturbed, and is not a pass. A slower mode misses only beyond the noise: its "
        "interval above the band and above the spread of dram's own repetitions."
    ),
    "storage bound": (
        "Beyond the budget in cache mode, STREAM has to move its arrays through the "
        "storage tier on every repetition: this compares its measured efficiency with the "
        "best the storage tier allows (t_dram over the time to read every array and write "
        "back the written one at the probe's sequential bandwidths); within 2x either way "
        "passes."
    ),
    "crossover": (
        "The polynomial does more arithmetic per byte as its degree grows, so past some "
        "arithmetic intensity the storage tier keeps up and cache mode reaches dram speed: "
        "this compares the measured crossover intensity with peak flops over storage "
        "bandwidth; within 2x either way passes."
    ),
    "imdt at scale": (
        "The IMDT study ran compute-bound kernels written for tiered memory (segmented "
        "GEMM, tiled LU) at 90-125% of DRAM speed with a large DRAM cache: at a fast "
        "budget of 1 GiB or more and data at least twice the budget, this compares the "
        "cache-mode efficiency of gemm-tiled with 85% and of lu-tiled with 80% (a miss "
        "only when the whole interval is below; unsure when it reaches the line), and "
        "checks that LAPACK's LU falls below the tiled LU, as the study found."
    ),
}


def check_kind(check: dict[str, Any]) -> str:
    """The CHECK_EXPLANATIONS key of a check."""
    name = check["check"]
    if name.startswith("data fits"):
        return "data fits"
    if name.startswith("imdt at scale"):
        return "imdt at scale"
    return "crossover" if "crossover" in name else "storage bound"


# The target for data that fits the fast budget: every mode within 5% of
# dram, t_mode / t_dram in [0.95, 1.05]. Faster than that band is no pass:
# with the data in DRAM no mode can beat dram by much, so a mode that does
# (a swap run at t_mode / t_dram 0.20) shows runs that are not comparable.
# It passes only while its interval still reaches the band (noise); see
# fits_verdict for when it misses.
FITS_TOLERANCE = 0.05
FITS_BAND = f"{1 - FITS_TOLERANCE:g}-{1 + FITS_TOLERANCE:g}"


def fits_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One check per case, mode and size below the budget: t_mode / t_dram.

    Judged on the report's statistic, the one the efficiency table shows:
    the median over the repetitions of the paired t_dram / t_mode (each
    repetition's modes run back to back), inverted; rows annotated by
    report_stats.annotate carry its interval. With data that fits, one
    mode's processes differ by more than 5% in both directions (a 0.6 ms
    scan: dram's best processes 0.564 and 0.615-0.636 ms, cache's
    0.599-0.629), so a best-of-N over processes is each mode's luckiest
    process, not how the modes compare; the best-times ratio is kept in
    `detail`. `pass` is None where one repetition cannot tell noise from a
    fault (a mode more than 5% faster than dram, no interval)."""
    checks = []
    for r in rows:
        if r["mode"] == "dram" or r["multiple"] >= 1.0:
            continue
        eff = r.get("efficiency_median")
        ratio = 1.0 / eff if eff else None
        lo, hi = r.get("efficiency_ci_low"), r.get("efficiency_ci_high")
        band = (1.0 / hi, 1.0 / lo) if lo and hi else None
        verdict, why = fits_verdict(ratio, band, r.get("dram_spread"))
        best = 1.0 / r["efficiency"] if r.get("efficiency") else None
        how = f"median of {r.get('pairs') or 0} paired repetitions"
        if best is not None:
            how += f" (best times: {best:.2f})"
        checks.append(
            {
                "check": f"data fits: {r['case']} {r['mode']} {r['multiple']:g}x",
                "measured": ratio,
                "model": 1.0,
                "ratio": ratio,
                "ratio_ci": list(band) if band else None,
                "efficiency": eff,
                "pass": verdict,
                "why": why,
                "rule": f"t_mode/t_dram within {FITS_BAND}, {how}",
                "detail": {"best_times_ratio": best},
            }
        )
    return checks


def fits_verdict(
    ratio: float | None, band: tuple[float, float] | None, noise: float | None = None
) -> tuple[bool | None, str]:
    """(pass, why) of one t_mode / t_dram against the 5% band; band is its
    interval (low, high) or None with one repetition; noise is how far
    dram's own repetitions of the case spread (slowest / fastest), if known.

    A miss must be beyond the noise, as an efficiency above 1 must be to
    count: slower than the band with the whole interval above it, and above
    dram's own spread. Slower with an interval that still reaches the band,
    or that dram alone moves as much, is UNSURE (None, no miss: more
    repetitions or a quieter machine would tell), and so is faster than the
    band beyond the noise: with the data in DRAM that says the runs were not
    alike, not that the mode lost time. Seen here with 3 repetitions: cache
    1.06-1.17x with intervals down to 0.95-0.98 (demo, 2026-11-27); and with
    the modes equal, dram's own times 0.38-0.49 ms apart (x1.29) and paired
    ratios 0.65-1.23: all three pairs of some check out of a demo's 12 land
    above 1.05 often enough that the first demo of two sessions in a row
    missed on one (swap's scan-read 1.09, then gups 1.15)."""
    lo_ok, hi_ok = 1.0 - FITS_TOLERANCE, 1.0 + FITS_TOLERANCE
    if ratio is None:
        return False, "no time: the run failed"
    if lo_ok <= ratio <= hi_ok:
        return True, "within 5% of dram"
    if ratio > hi_ok:
        return _slower_verdict(ratio, band, hi_ok, noise)
    if band is None:
        return None, (
            f"{1 / ratio:.2f}x faster than dram with one repetition: cannot tell a lucky "
            "run from a fault; rerun with --repeat 2 or more"
        )
    if band[1] >= lo_ok:
        return True, "faster than dram only within the noise (the interval reaches the 5% band)"
    return None, (
        f"{1 / ratio:.2f}x faster than dram beyond the noise: with the data in DRAM the "
        "runs did not compare like with like (a disturbed dram run, or less work done)"
    )


def _slower_verdict(
    ratio: float, band: tuple[float, float] | None, hi_ok: float, noise: float | None
) -> tuple[bool | None, str]:
    if band is not None and band[0] > hi_ok and noise is not None and band[0] <= noise:
        return None, (
            f"{ratio:.2f}x the time of dram (interval {band[0]:.2f}-{band[1]:.2f}), but dram's "
            f"own repetitions differ by {noise:.2f}x: within the machine's noise; rerun on a "
            "quieter machine or with more repetitions"
        )
    if band is None or band[0] > hi_ok:
        return False, f"{ratio:.2f}x the time of dram: slower than the target allows"
    return None, (
        f"{ratio:.2f}x the time of dram, but its interval ({band[0]:.2f}-{band[1]:.2f}) "
        "reaches the 5% band: noise cannot be ruled out; rerun with more repetitions"
    )


# STREAM beyond the budget, through the pager (cache mode). Per repetition
# the pager must read every array an operation touches, the written one too
# (a page is fetched before it is overwritten: the pager cannot know that a
# write fault starts a whole overwrite), and write the written array back
# (dirty). In McCalpin's counting (bytes_moved: one transfer per array per
# operation) that is bytes_read = bytes_moved and bytes_written = one array
# per operation. Reads and write-backs share one device, so the model time is
# bytes_read / R + bytes_written / W with R, W the probe's sequential O_DIRECT
# bandwidths. The bound on efficiency is t_dram / t_model, with t_dram the
# dram-mode run of the same case and size in the same matrix: the DRAM
# bandwidth the kernel achieves at its thread count, measured side by side
# (a cached probe's triad, taken at another time and load, was 25.7 GB/s
# against 13.8 in the dram run of the same matrix on this machine).
STREAM_OPS_WRITTEN = {"copy": 1, "scale": 1, "add": 1, "triad": 1, "all": 4}


def stream_storage_model(
    result: dict[str, Any], read_gbs: float, write_gbs: float
) -> dict[str, float] | None:
    """Storage traffic and time one STREAM repetition needs beyond the budget."""
    ops = STREAM_OPS_WRITTEN.get(str(result.get("variant")))
    moved, elements = result.get("bytes_moved"), result.get("elements")
    if not ops or not isinstance(moved, int | float) or not isinstance(elements, int | float):
        return None
    rd = float(moved)
    wr = 8.0 * float(elements) * ops
    return {
        "bytes_read": rd,
        "bytes_written": wr,
        "time_s": rd / read_gbs / 1e9 + wr / write_gbs / 1e9,
    }


def fits_target(checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The target over every 'data fits' check: all of them pass (null when
    none fails but some could not be judged); `unsure` counts those."""
    fits = [c for c in checks if c["check"].startswith("data fits")]
    if not fits:
        return None
    worst = max(fits, key=lambda c: math.inf if c["ratio"] is None else abs(math.log(c["ratio"])))
    return {
        "target": "data that fits the budget: every mode within 5% of dram",
        # null (no miss, not met either) when the only doubts are checks one
        # repetition could not judge, as the bench's exit-code rule reads it
        "pass": _all_pass([c["pass"] for c in fits]),
        "passed": sum(1 for c in fits if c["pass"] is True),
        "unsure": sum(1 for c in fits if c["pass"] is None),
        "checks": len(fits),
        "worst": worst["check"],
        "worst_ratio": worst["ratio"],
    }


def _all_pass(verdicts: list[bool | None]) -> bool | None:
    if any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


def physics_checks(
    rows: list[dict[str, Any]],
    pts: list[dict[str, Any]],
    bws: dict[str, float],
    peak: float,
    runs: Sequence[dict[str, Any]] = (),
    storage_rw: dict[str, tuple[float, float]] | None = None,
    probe_note: str = "",
) -> list[dict[str, Any]]:
    """The report's automatic checks that the curves follow the physics;
    probe_note says how the probe's DRAM figure was measured."""
    checks: list[dict[str, Any]] = []
    storage = max((v for k, v in bws.items() if k.startswith("storage")), default=None)
    rw = max((storage_rw or {}).values(), default=None)
    best_dram = _best_dram_runs(runs)
    for r in rows:
        if not (
            r["case"].startswith("stream")
            and r["mode"] == "cache"
            and abs(r["multiple"] - 4) < 1e-9
            and _eff(r)
        ):
            continue
        ref = best_dram.get((r["case"], r["multiple"]))
        model = stream_storage_model(ref["result"], *rw) if ref and rw else None
        if not model or not ref:
            continue
        check = _storage_check(r, ref, model, bws, rw)  # type: ignore[arg-type]
        check["detail"]["dram_gbs_probe_is"] = probe_note or "no probe stored with the results"
        checks.append(check)
    crossover = _crossover_check(pts, storage, peak)
    if crossover:
        checks.append(crossover)
    return checks


# The IMDT-at-scale targets (issue 25): cache-mode efficiency at data >= 2x a
# budget of >= 1 GiB.
SCALE_TARGETS = {"gemm-tiled": 0.85, "lu-tiled": 0.80}
SCALE_MIN_BUDGET = 1 << 30


def _at_scale(r: dict[str, Any]) -> bool:
    budget = r["size_bytes"] / r["multiple"] if r.get("multiple") else 0
    return r["mode"] == "cache" and r["multiple"] >= 2 and budget >= SCALE_MIN_BUDGET * 0.999


def scale_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The IMDT-at-scale targets: tiled GEMM and LU near dram, LAPACK's LU
    below the tiled LU; nothing for runs below the scale."""
    rows = [r for r in rows if _at_scale(r) and r.get("efficiency_median") is not None]
    checks = []
    for r in rows:
        line = SCALE_TARGETS.get(r["case"])
        if line is None:
            continue
        eff = float(r["efficiency_median"])
        high = r.get("efficiency_ci_high")
        ok, why = _scale_verdict(eff, high, line)
        ci = (r["efficiency_ci_low"], high) if high is not None else None
        checks.append(
            {
                "check": f"imdt at scale: {r['case']} at {r['multiple']:g}x",
                "measured": eff,
                "model": line,
                "ratio": eff / line,
                "ratio_ci": [ci[0] / line, ci[1] / line] if ci and ci[0] is not None else None,
                "pass": ok,
                "why": why,
                "rule": f"efficiency >= {line:.0%} of dram",
            }
        )
    by = {(r["case"], r["multiple"]): float(r["efficiency_median"]) for r in rows}
    for (case, mult), eff in sorted(by.items()):
        tiled = by.get(("lu-tiled", mult))
        if case != "lu-lapack" or tiled is None:
            continue
        checks.append(
            {
                "check": f"imdt at scale: lu-lapack below lu-tiled at {mult:g}x",
                "measured": eff,
                "model": tiled,
                "ratio": eff / tiled if tiled else None,
                "pass": eff < tiled,
                "rule": "LAPACK LU efficiency below the tiled LU's",
            }
        )
    return checks


def _scale_verdict(eff: float, high: float | None, line: float) -> tuple[bool | None, str]:
    """(pass, why) of an efficiency against its target line: a miss only
    beyond the noise (the whole interval below), as _slower_verdict rules."""
    if eff >= line:
        return True, f"{eff:.0%} of dram"
    if high is None:
        return False, f"{eff:.0%} of dram with one repetition; rerun with --repeat 2 or more"
    if high < line:
        return False, f"{eff:.0%} of dram, the whole interval below {line:.0%}"
    return None, f"{eff:.0%} of dram, but the interval reaches {line:.0%}: it may be noise"


def _eff(r: dict[str, Any]) -> float:
    """The report's efficiency of a row (see report_stats), else the best-times one."""
    return float(r.get("efficiency_median") or r.get("efficiency") or 0.0)


def _best_dram_runs(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, float], dict[str, Any]]:
    """The fastest successful dram run of each (case, multiple)."""
    best_dram: dict[tuple[str, float], dict[str, Any]] = {}
    for r in latest_runs(list(runs)):
        t = run_best_time(r)
        if r.get("mode") != "dram" or r.get("error") or t is None or not r.get("result"):
            continue
        k = (r["case"], float(r["multiple"]))
        if k not in best_dram or t < run_best_time(best_dram[k]):  # type: ignore[operator]
            best_dram[k] = r
    return best_dram


def _storage_check(
    r: dict[str, Any],
    ref: dict[str, Any],
    model: dict[str, Any],
    bws: dict[str, float],
    rw: tuple[float, float],
) -> dict[str, Any]:
    t_dram = run_best_time(ref) or 0.0
    bound = t_dram / model["time_s"]
    ratio = _eff(r) / bound
    return {
        "check": f"{r['case']} cache efficiency at 4x vs storage/DRAM bound",
        "measured": _eff(r),
        "model": bound,
        "ratio": ratio,
        "pass": 0.5 <= ratio <= 2.0,
        "rule": "within 2x of the bound",
        "detail": {
            "dram_gbs_kernel": ref["result"]["bytes_moved"] / t_dram / 1e9,
            # like with like: the bound takes the DRAM speed of this kernel,
            # size and thread count from this matrix, not the probe's triad
            "dram_gbs_kernel_is": (
                f"{r['case']} in this matrix's dram run at 4x "
                f"({ref.get('size_bytes', 0) / 2**20:.0f} MiB, {ref.get('threads', '?')} threads),"
                " its best repetition; used by the bound"
            ),
            "dram_gbs_probe": max(
                (v for k, v in bws.items() if not k.startswith("storage")), default=None
            ),
            "storage_read_gbs": rw[0],
            "storage_write_gbs": rw[1],
            "model_bytes_read": model["bytes_read"],
            "model_bytes_written": model["bytes_written"],
            "model_storage_s": model["time_s"],
        },
    }


def _crossover_check(
    pts: list[dict[str, Any]], storage: float | None, peak: float
) -> dict[str, Any] | None:
    ps = _largest_tiered(pts)
    # a crossover lies between two intensities: the repetitions of one
    # polynomial degree alone are no measurement of it
    if not (storage and peak > 0) or len({p["ai"] for p in ps}) < 2:
        return None
    bw_low = ps[0]["gbs"]
    flops_high = max(p["gflops"] for p in ps)
    measured = flops_high / bw_low if bw_low > 0 else None
    predicted = peak / storage
    ok = measured is not None and 0.5 <= measured / predicted <= 2.0
    return {
        "check": "polynomial crossover intensity (cache, read-only)",
        "measured": measured,
        "model": predicted,
        "ratio": (measured / predicted) if measured else None,
        "pass": ok,
        "rule": "within 2x of peak flops / storage bandwidth",
    }


def _largest_tiered(pts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The read-only cache-mode points at the largest multiple, by intensity;
    none when every run fits the budget."""
    tiered = [p for p in pts if p["mode"] == "cache" and p["variant"] == "ro"]
    # the crossover is a property of data beyond the budget, where the
    # storage tier feeds the kernel: no check on runs that all fit
    if not tiered or max(p["multiple"] for p in tiered) <= 1.0:
        return []
    largest = max(p["multiple"] for p in tiered)
    return sorted((p for p in tiered if p["multiple"] == largest), key=lambda p: p["ai"])
