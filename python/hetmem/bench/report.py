# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem report`: one self-contained HTML page (inline SVG plots, no network)
plus the same numbers as JSON, from one or more benchmark result folders.

Plots follow the seed studies: efficiency t_dram/t_mode against data size per
kernel (IMDT Figures 2, 3, 5), bandwidth against arithmetic intensity with a
roofline per tier drawn from the probe (IMDT Figure 7), and ecoHMEM-style bars
per fast-tier budget. The report also checks that the curves follow the
physics: STREAM efficiency beyond DRAM near storage/DRAM bandwidth, and the
polynomial's crossover near peak flops / storage bandwidth.
"""

from __future__ import annotations

import html
import io
import json
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetmem import __version__, output
from hetmem.bench.harness import (
    SCHEMA_VERSION,
    efficiency_table,
    hard_failures,
    latest_runs,
    load_runs,
    run_best_time,
)
from hetmem.errors import SchemaError, UsageError

REPORT_SCHEMA_VERSION = 1
MODE_COLORS = {
    "dram": "#222222",
    "cache": "#1f77b4",
    "swap": "#d62728",
    "flat": "#2ca02c",
    "hybrid": "#9467bd",
}


def load_results(dirs: Sequence[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Manifests and run records of every folder; SchemaError if one is not a result folder."""
    manifests, runs = [], []
    for d in dirs:
        mpath = d / "manifest.json"
        if not mpath.exists():
            raise SchemaError(f"{d}: not a benchmark result folder (no manifest.json)")
        try:
            manifest = json.loads(mpath.read_text())
        except ValueError as exc:
            raise SchemaError(f"{mpath}: malformed JSON ({exc})") from None
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise SchemaError(
                f"{mpath}: schema_version {manifest.get('schema_version')!r}, "
                f"this hetmem reads {SCHEMA_VERSION}"
            )
        manifest["_dir"] = str(d)
        manifests.append(manifest)
        runs += load_runs(d)
    return manifests, runs


def _probe_bandwidths(manifests: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Tier name -> best bandwidth in GB/s from the probe stored with the results."""
    out: dict[str, float] = {}
    for m in manifests:
        probe = m.get("probe") or {}
        for t in probe.get("tiers", []):
            name = t.get("name", "?")
            if t.get("kind") == "storage":
                bw = t.get("seq_read_gbs")
            else:
                bw = (t.get("best") or {}).get("triad_gbs")
            if isinstance(bw, int | float) and bw > 0:
                out[name] = max(out.get(name, 0.0), float(bw))
    return out


def _probe_storage(manifests: Sequence[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Storage tier -> (sequential read, sequential write) GB/s from the probe."""
    out: dict[str, tuple[float, float]] = {}
    for m in manifests:
        for t in (m.get("probe") or {}).get("tiers", []):
            rd, wr = t.get("seq_read_gbs"), t.get("seq_write_gbs")
            if t.get("kind") == "storage" and isinstance(rd, int | float) and rd > 0:
                if isinstance(wr, int | float) and wr > 0:
                    out[t.get("name", "storage")] = (float(rd), float(wr))
    return out


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    # lazy: matplotlib takes long to import; only the report's plots need it
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.find("<svg") :]


def _plot_efficiency(rows: list[dict[str, Any]]) -> str | None:
    # lazy: matplotlib takes long to import; only the report's plots need it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in rows if r["mode"] != "dram"})
    if not cases:
        return None
    ncol = min(3, len(cases))
    nrow = math.ceil(len(cases) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.0 * nrow), squeeze=False)
    for ax, case in zip(axes.flat, cases, strict=False):
        _efficiency_axis(ax, rows, case)
    for ax in list(axes.flat)[len(cases) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return _svg(fig)


def _efficiency_axis(ax: Any, rows: list[dict[str, Any]], case: str) -> None:
    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["case"] == case and r["efficiency"] is not None:
            by_mode[r["mode"]].append(r)
    for mode, rs in sorted(by_mode.items()):
        rs.sort(key=lambda r: r["multiple"])
        x = [r["multiple"] for r in rs]
        y = [100 * r["efficiency"] for r in rs]
        # Bars: the spread of the paired per-repetition ratios, which
        # need not contain the efficiency of the best times.
        lo = [
            100 * max(0.0, r["efficiency"] - (r["efficiency_min"] or r["efficiency"])) for r in rs
        ]
        hi = [
            100 * max(0.0, (r["efficiency_max"] or r["efficiency"]) - r["efficiency"]) for r in rs
        ]
        ax.errorbar(
            x,
            y,
            yerr=[lo, hi],
            marker="o",
            ms=4,
            capsize=3,
            label=mode,
            color=MODE_COLORS.get(mode),
        )
    ax.axvline(1.0, color="#999999", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_title(case, fontsize=10)
    ax.set_xlabel("data size / fast budget")
    ax.set_ylabel("efficiency t_dram/t_mode (%)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _poly_points(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pts = []
    for r in latest_runs(runs):
        res = r.get("result") or {}
        if r.get("kernel") != "poly" or r.get("error") or not res:
            continue
        degree = res.get("degree")
        gflops = res.get("gflops")
        if degree is None or gflops is None:
            continue
        ai = 2.0 * float(degree) / 8.0  # IMDT eq. (1)
        pts.append(
            {
                "case": r["case"],
                "variant": res.get("variant", ""),
                "mode": r["mode"],
                "multiple": r["multiple"],
                "ai": ai,
                "gflops": float(gflops),
                "gbs": float(res.get("gbs") or (gflops / ai if ai else 0.0)),
            }
        )
    return pts


def _plot_poly(pts: list[dict[str, Any]], bws: dict[str, float], peak_gflops: float) -> str | None:
    # lazy: matplotlib takes long to import; only the report's plots need it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    largest = max(p["multiple"] for p in pts)
    for mode in sorted({p["mode"] for p in pts}):
        for variant, marker in (("ro", "o"), ("rw", "s")):
            _poly_curve(ax, pts, mode, variant, marker, largest)
    _poly_rooflines(ax, pts, bws, peak_gflops)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte, IMDT eq. 1)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_title("polynomial: bandwidth vs arithmetic intensity")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _svg(fig)


def _poly_curve(
    ax: Any, pts: list[dict[str, Any]], mode: str, variant: str, marker: str, largest: float
) -> None:
    ps = sorted(
        (
            p
            for p in pts
            if p["mode"] == mode and p["variant"] == variant and p["multiple"] == largest
        ),
        key=lambda p: p["ai"],
    )
    if ps:
        ax.plot(
            [p["ai"] for p in ps],
            [p["gbs"] for p in ps],
            marker=marker,
            label=f"{mode} ({variant}, {largest:g}x budget)",
            color=MODE_COLORS.get(mode),
            ls="-" if variant == "ro" else "--",
        )


def _poly_rooflines(
    ax: Any, pts: list[dict[str, Any]], bws: dict[str, float], peak_gflops: float
) -> None:
    ais = [p["ai"] for p in pts]
    xs = [min(ais) / 2 * (2 ** (i / 8)) for i in range(0, 8 * 14)]
    xs = [x for x in xs if x <= max(ais) * 2]
    for name, bw in sorted(bws.items()):
        if peak_gflops > 0:
            ax.plot(
                xs,
                [min(bw, peak_gflops / x) for x in xs],
                color="#888888",
                lw=0.8,
                ls=":",
            )
            ax.annotate(f"model {name}", (xs[0], min(bw, peak_gflops / xs[0])), fontsize=7)


# Fast budget as a fraction of the footprint <-> size multiple of the budget.
BAR_FRACTIONS = (0.25, 0.5, 0.75)


def _plot_bars(rows: list[dict[str, Any]]) -> str | None:
    # lazy: matplotlib takes long to import; only the report's plots need it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wanted = {round(1 / f, 3): f for f in BAR_FRACTIONS}
    sel = [
        r
        for r in rows
        if round(r["multiple"], 3) in wanted and r["mode"] != "dram" and r["efficiency"]
    ]
    if not sel:
        return None
    cases = sorted({r["case"] for r in sel})
    modes = sorted({r["mode"] for r in sel}, key=lambda m: list(MODE_COLORS).index(m))
    fracs = sorted({wanted[round(r["multiple"], 3)] for r in sel})
    fig, axes = plt.subplots(
        1, len(fracs), figsize=(max(4.5, 1.2 * len(cases)) * len(fracs), 3.4), squeeze=False
    )
    width = 0.8 / max(1, len(modes))
    for ax, frac in zip(axes[0], fracs, strict=False):
        for j, mode in enumerate(modes):
            ys = [_bar_height(sel, wanted, case, mode, frac) for case in cases]
            ax.bar(
                [i + j * width for i in range(len(cases))],
                ys,
                width,
                label=mode,
                color=MODE_COLORS.get(mode),
            )
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
        ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
        ax.axhline(100, color="#999999", lw=0.8)
        ax.set_title(f"fast budget = {int(frac * 100)}% of footprint", fontsize=10)
        ax.set_ylabel("% of all-DRAM speed")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _svg(fig)


def _bar_height(
    sel: list[dict[str, Any]], wanted: dict[float, float], case: str, mode: str, frac: float
) -> float:
    r = next(
        (
            r
            for r in sel
            if r["case"] == case and r["mode"] == mode and wanted[round(r["multiple"], 3)] == frac
        ),
        None,
    )
    return 100 * r["efficiency"] if r else 0.0


# Issue 5's target for data that fits the fast budget: every mode within 5%
# of dram, i.e. t_mode / t_dram <= 1.05 (a mode faster than dram passes).
FITS_TOLERANCE = 0.05


def fits_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One check per case, mode and size below the budget: t_mode / t_dram.

    Judged on the median over the repetitions of t_mode / t_dram, each
    repetition's modes run back to back (efficiency_median), when there are
    at least 3 such pairs; else on the best times. With data that fits, the
    runs of one mode differ from process to process by more than the 5%
    sought, in both directions (a 0.6 ms scan: dram's best processes 0.564
    and 0.615-0.636 ms, cache's 0.599-0.629): a best-of-N over processes is
    then the luckiest process of each mode, not how the modes compare. The
    best-times ratio is kept beside it."""
    checks = []
    for r in rows:
        if r["mode"] == "dram" or r["multiple"] >= 1.0:
            continue
        eff = r["efficiency"]
        best = 1.0 / eff if eff else None
        med = r.get("efficiency_median")
        paired = (r.get("pairs") or 0) >= 3 and bool(med)
        ratio = 1.0 / med if paired else best
        how = "best times"
        if paired:
            how = f"median of {r['pairs']} paired repetitions"
            if best is not None:
                how += f" (best times: {best:.2f})"
        checks.append(
            {
                "check": f"data fits: {r['case']} {r['mode']} {r['multiple']:g}x",
                "measured": ratio,
                "model": 1.0,
                "ratio": ratio,
                "pass": ratio is not None and ratio <= 1.0 + FITS_TOLERANCE,
                "rule": f"t_mode/t_dram <= {1 + FITS_TOLERANCE:g}, {how}",
                "detail": {"best_times_ratio": best},
            }
        )
    return checks


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
    """The target over every 'data fits' check: all of them pass."""
    fits = [c for c in checks if c["check"].startswith("data fits")]
    if not fits:
        return None
    worst = max(fits, key=lambda c: math.inf if c["ratio"] is None else c["ratio"])
    return {
        "target": "data that fits the budget: every mode within 5% of dram",
        "pass": all(c["pass"] for c in fits),
        "passed": sum(1 for c in fits if c["pass"]),
        "checks": len(fits),
        "worst": worst["check"],
        "worst_ratio": worst["ratio"],
    }


def physics_checks(
    rows: list[dict[str, Any]],
    pts: list[dict[str, Any]],
    bws: dict[str, float],
    peak: float,
    runs: Sequence[dict[str, Any]] = (),
    storage_rw: dict[str, tuple[float, float]] | None = None,
) -> list[dict[str, Any]]:
    """The report's automatic checks that the curves follow the physics."""
    checks: list[dict[str, Any]] = []
    storage = max((v for k, v in bws.items() if k.startswith("storage")), default=None)
    rw = max((storage_rw or {}).values(), default=None)
    best_dram = _best_dram_runs(runs)
    for r in rows:
        if not (
            r["case"].startswith("stream")
            and r["mode"] == "cache"
            and abs(r["multiple"] - 4) < 1e-9
            and r["efficiency"]
        ):
            continue
        ref = best_dram.get((r["case"], r["multiple"]))
        model = stream_storage_model(ref["result"], *rw) if ref and rw else None
        if not model or not ref:
            continue
        checks.append(_storage_check(r, ref, model, bws, rw))  # type: ignore[arg-type]
    crossover = _crossover_check(pts, storage, peak)
    if crossover:
        checks.append(crossover)
    return checks


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
    ratio = r["efficiency"] / bound
    return {
        "check": f"{r['case']} cache efficiency at 4x vs storage/DRAM bound",
        "measured": r["efficiency"],
        "model": bound,
        "ratio": ratio,
        "pass": 0.5 <= ratio <= 2.0,
        "rule": "within 2x of the bound",
        "detail": {
            "dram_gbs_kernel": ref["result"]["bytes_moved"] / t_dram / 1e9,
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
    if not (storage and peak > 0) or len(ps) < 2:
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


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return html.escape(str(v))


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best non-dram mode per case and its efficiency at 2x (nearest size above 1x)."""
    out = []
    for case in sorted({r["case"] for r in rows}):
        rs = [r for r in rows if r["case"] == case and r["mode"] != "dram" and r["efficiency"]]
        if not rs:
            continue
        over = [r for r in rs if r["multiple"] > 1] or rs
        target = min(over, key=lambda r: abs(math.log2(r["multiple"] / 2)))["multiple"]
        at = [r for r in rs if r["multiple"] == target]
        best = max(at, key=lambda r: r["efficiency"])
        out.append(
            {
                "case": case,
                "multiple": target,
                "best_mode": best["mode"],
                "efficiency": best["efficiency"],
                "by_mode": {r["mode"]: r["efficiency"] for r in at},
            }
        )
    return out


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
.pass{color:#1a7f37;font-weight:bold} .fail{color:#cf222e;font-weight:bold}
figure{margin:1em 0} figcaption{font-size:0.85em;color:#555}
code{background:#f4f4f4;padding:1px 4px}
"""


def build(dirs: Sequence[Path]) -> tuple[str, dict[str, Any]]:
    """The HTML page and the JSON data of a report over result folders."""
    manifests, runs = load_results(dirs)
    rows = efficiency_table(runs)
    bws = _probe_bandwidths(manifests)
    pts = _poly_points(runs)
    peak = max((p["gflops"] for p in pts if p["mode"] == "dram"), default=0.0)
    checks = fits_checks(rows) + physics_checks(
        rows, pts, bws, peak, runs, _probe_storage(manifests)
    )
    summ = summary(rows)
    failures = [r for r in latest_runs(runs) if r.get("error")]
    data = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "hetmem_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sources": [m["_dir"] for m in manifests],
        "commands": [m.get("command") for m in manifests],
        "probe_bandwidth_gbs": bws,
        "peak_gflops_measured": peak or None,
        "efficiency": rows,
        "summary": summ,
        "checks": checks,
        "fits_target": fits_target(checks),
        "failed_runs": [
            {k: r.get(k) for k in ("case", "multiple", "mode", "rep", "error", "error_kind")}
            for r in failures
        ],
        "hard_failures": len(hard_failures(runs)),
    }
    figs = _figures(rows, pts, bws, peak)
    parts = _html_head(data, summ)
    parts += _checks_html(checks)
    parts += _figures_html(figs)
    parts += _efficiency_html(rows)
    parts += _failures_html(failures)
    parts += _machine_html(bws, manifests)
    return "".join(parts), data


def _figures(
    rows: list[dict[str, Any]], pts: list[dict[str, Any]], bws: dict[str, float], peak: float
) -> list[tuple[str, str | None, str]]:
    """(title, SVG or None, caption) of each plot."""
    return [
        (
            "Efficiency against data size",
            _plot_efficiency(rows),
            "t_dram / t_mode per kernel from the best repetition of each mode (every kernel "
            "run repeats for a minimum time); bars: min-max of the ratios paired by repetition; "
            "the dotted line marks data = fast budget (IMDT Figures 2, 3, 5).",
        ),
        (
            "Bandwidth against arithmetic intensity",
            _plot_poly(pts, bws, peak),
            "Polynomial kernel; dotted lines: min(peak flops, intensity x tier bandwidth) "
            "for each probed tier, peak flops as measured in dram mode (IMDT Figure 7).",
        ),
        (
            "Modes at fixed fast budgets",
            _plot_bars(rows),
            "Percent of all-DRAM speed with the fast budget at 25/50/75% of the footprint "
            "(ecoHMEM-style).",
        ),
    ]


def _html_head(data: dict[str, Any], summ: list[dict[str, Any]]) -> list[str]:
    return [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<title>hetmem benchmark report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>hetmem benchmark report</h1>",
        f"<p>hetmem {html.escape(__version__)}, created {html.escape(data['created'])}. "
        f"Sources: {html.escape(', '.join(data['sources']))}.</p>",
        "<h2>Summary</h2>",
        _table(
            ["case", "size (x budget)", "best mode", "efficiency"],
            [
                [s["case"], s["multiple"], s["best_mode"], f"{100 * s['efficiency']:.1f}%"]
                for s in summ
            ],
        ),
    ]


def _checks_html(checks: list[dict[str, Any]]) -> list[str]:
    if not checks:
        return []
    table = _table(
        ["check", "measured", "model", "ratio", "rule", "result"],
        [
            [
                c["check"],
                c["measured"],
                c["model"],
                c["ratio"],
                c["rule"],
                "PASS" if c["pass"] else "MISS",
            ]
            for c in checks
        ],
    )
    return [
        "<h2>Targets and physics checks</h2>",
        table.replace("<td>PASS</td>", "<td class='pass'>PASS</td>").replace(
            "<td>MISS</td>", "<td class='fail'>MISS</td>"
        ),
    ]


def _figures_html(figs: list[tuple[str, str | None, str]]) -> list[str]:
    parts = []
    for title, svg, caption in figs:
        if svg:
            parts.append(f"<h2>{html.escape(title)}</h2>")
            parts.append(
                f"<figure class='plot'>{svg}"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    return parts


def _efficiency_html(rows: list[dict[str, Any]]) -> list[str]:
    columns = [
        "case",
        "size",
        "x budget",
        "mode",
        "best time (s)",
        "median time (s)",
        "efficiency",
        "min",
        "max",
    ]
    cells = [
        [
            r["case"],
            f"{r['size_bytes'] / 2**20:.0f} MiB",
            r["multiple"],
            r["mode"],
            r.get("time_s_best"),
            r["time_s_median"],
            r["efficiency"],
            r["efficiency_min"],
            r["efficiency_max"],
        ]
        for r in rows
    ]
    return ["<h2>Efficiency table</h2>", _table(columns, cells)]


def _failures_html(failures: list[dict[str, Any]]) -> list[str]:
    if not failures:
        return []
    return [
        "<h2>Failed runs</h2>",
        _table(
            ["case", "x budget", "mode", "rep", "kind", "error"],
            [
                [f["case"], f["multiple"], f["mode"], f["rep"], f.get("error_kind"), f["error"]]
                for f in failures
            ],
        ),
    ]


def _machine_html(bws: dict[str, float], manifests: list[dict[str, Any]]) -> list[str]:
    parts = ["<h2>Machine and probe</h2>"]
    parts.append(
        _table(["tier", "bandwidth (GB/s)"], [[k, v] for k, v in sorted(bws.items())])
        if bws
        else "<p>No probe result was stored with these results (run <code>hetmem probe</code>).</p>"
    )
    parts.append("<h2>Reproduce</h2><ul>")
    for m in manifests:
        cmd = " ".join(m.get("command") or [])
        parts.append(
            f"<li><code>{html.escape(cmd)}</code> (machine {html.escape(m.get('machine', '?'))}, "
            f"budget {m.get('budget_bytes', 0) / 2**20:.0f} MiB, {m.get('threads')} threads)</li>"
        )
    parts.append("</ul></body></html>")
    return parts


def write(dirs: Sequence[Path], out: Path | None, force: bool) -> tuple[Path, dict[str, Any]]:
    """`hetmem report`: the page of result folders written to `out` (default
    DIR/report.html) with its data as JSON beside it; the path and the data."""
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"{d}: no such result folder")
    path = out or (dirs[0] / "report.html")
    if path.exists() and not force and out is not None:
        raise UsageError(f"{path} exists; use -f to overwrite it")
    page, data = build(dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    output.write_atomic(path, page)
    output.write_atomic(path.with_suffix(".json"), json.dumps(data, indent=2))
    return path, data
