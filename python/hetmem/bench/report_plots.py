# SPDX-License-Identifier: BSD-3-Clause
"""The report's plots, as inline SVG that fits the page (max-width 100%).

Efficiency is the report's statistic (report_stats: median of the paired
ratios, 95% bootstrap interval as error bars). Lines are broken where a run
failed and at 1x, between data that fits the budget and data that does not:
the two sides are different regimes, not one curve. The y axis stops at
Y_CAP; a point above it (noise: with the same memory no mode is much faster
than dram) is drawn at the top edge with its value written beside it.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from typing import Any

MODE_COLORS = {
    "dram": "#222222",
    "cache": "#1f77b4",
    "swap": "#d62728",
    "flat": "#2ca02c",
    "hybrid": "#9467bd",
}
Y_CAP = 150.0  # percent of dram speed
MAX_WIDTH_IN = 12.0  # a figure wider than this is only scaled down on the page
# Fast budget as a fraction of the footprint <-> size multiple of the budget.
BAR_FRACTIONS = (0.25, 0.5, 0.75)


def pyplot() -> Any:
    # lazy: matplotlib takes long to import; only the report's plots need it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def svg_fit(fig: Any) -> str:
    """The figure as an <svg> element that scales down to the page width."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    pyplot().close(fig)
    text = buf.getvalue()
    text = text[text.find("<svg") :]
    return text.replace("<svg ", "<svg style='max-width:100%;height:auto' ", 1)


def size_axis(ax: Any, multiples: list[float]) -> None:
    """Log2 x axis of data size over budget, ticks at the sizes, read '0.5x'."""
    # lazy: matplotlib takes long to import; only the report's plots need it
    from matplotlib import ticker

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.FixedLocator(sorted(set(multiples))))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _pos: f"{x:g}x"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    lo, hi = min(multiples), max(multiples)
    ax.set_xlim(lo / 1.3, hi * 1.3)
    ax.set_xlabel("data size / fast budget")


def curve(
    multiples: list[float], values: dict[float, float | None]
) -> tuple[list[float], list[float]]:
    """x and y of one mode's line: NaN where a value is missing and one
    NaN point between sizes that fit the budget (<= 1x) and sizes that do
    not, so that
    matplotlib draws no segment across a failed run or the boundary."""
    xs: list[float] = []
    ys: list[float] = []
    prev = None
    for m in sorted(multiples):
        if prev is not None and (prev <= 1.0) != (m <= 1.0):
            xs.append(math.sqrt(prev * m))
            ys.append(math.nan)
        v = values.get(m)
        xs.append(m)
        ys.append(math.nan if v is None else v)
        prev = m
    return xs, ys


def plot_efficiency(rows: list[dict[str, Any]]) -> str | None:
    cases = sorted({r["case"] for r in rows if r["mode"] != "dram"})
    if not cases:
        return None
    plt = pyplot()
    ncol = min(3, len(cases))
    nrow = math.ceil(len(cases) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.0 * ncol, 3.0 * nrow), squeeze=False)
    for ax, case in zip(axes.flat, cases, strict=False):
        _efficiency_axis(ax, [r for r in rows if r["case"] == case], case)
    for ax in list(axes.flat)[len(cases) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return svg_fit(fig)


def _efficiency_axis(ax: Any, rows: list[dict[str, Any]], case: str) -> None:
    multiples = sorted({r["multiple"] for r in rows})
    by_mode: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r["mode"] != "dram":
            by_mode[r["mode"]][r["multiple"]] = r
    top = _y_top(rows)
    for mode, rs in sorted(by_mode.items()):
        _mode_curve(ax, mode, rs, multiples, top)
    ax.axhline(100, color=MODE_COLORS["dram"], lw=0.8, ls="--", label="dram")
    ax.axvline(1.0, color="#999999", lw=0.8, ls=":")
    size_axis(ax, multiples)
    ax.set_ylim(0, top)
    ax.set_title(case, fontsize=10)
    ax.set_ylabel("% of dram speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _y_top(rows: list[dict[str, Any]]) -> float:
    """Top of the y axis: room for every interval, at most Y_CAP."""
    highs = [
        100 * (r.get("efficiency_ci_high") or r.get("efficiency_median") or 0)
        for r in rows
        if r["mode"] != "dram"
    ]
    return min(Y_CAP, max(110.0, 1.08 * max(highs, default=0.0)))


def _mode_curve(
    ax: Any, mode: str, rs: dict[float, dict[str, Any]], multiples: list[float], top: float
) -> None:
    color = MODE_COLORS.get(mode)
    values = {m: 100 * r["efficiency_median"] for m, r in rs.items() if r.get("efficiency_median")}
    xs, ys = curve(multiples, values)
    shown = [min(y, top * 0.98) if not math.isnan(y) else y for y in ys]
    ax.plot(xs, shown, marker="o", ms=4, label=mode, color=color)
    for m, r in rs.items():
        lo, hi, y = r.get("efficiency_ci_low"), r.get("efficiency_ci_high"), values.get(m)
        if y is not None and lo is not None and hi is not None:
            ax.errorbar([m], [y], yerr=[[y - 100 * lo], [100 * hi - y]], color=color, capsize=3)
        if y is not None and y > top:
            ax.plot([m], [top * 0.98], marker="^", color=color, ms=7)
            ax.annotate(f"{y:.0f}%", (m, top * 0.98), fontsize=7, xytext=(4, -10),
                        textcoords="offset points")  # fmt: skip
        if y is None and r.get("failures"):
            ax.plot([m], [0], marker="x", ms=9, mew=2, color=color, clip_on=False)


def plot_poly(pts: list[dict[str, Any]], bws: dict[str, float], peak_gflops: float) -> str | None:
    if not pts:
        return None
    # lazy: matplotlib takes long to import; only the report's plots need it
    from matplotlib import ticker

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    largest = max(p["multiple"] for p in pts)
    for mode in sorted({p["mode"] for p in pts}):
        for variant, marker in (("ro", "o"), ("rw", "s")):
            _poly_curve(ax, pts, mode, variant, marker, largest)
    _poly_rooflines(ax, pts, bws, peak_gflops)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_xlabel("arithmetic intensity (FLOP per byte read: 2 x degree / 8)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_title("polynomial: bandwidth vs arithmetic intensity")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return svg_fit(fig)


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
            ax.plot(xs, [min(bw, peak_gflops / x) for x in xs], color="#888888", lw=0.8, ls=":")
            ax.annotate(f"model {name}", (xs[0], min(bw, peak_gflops / xs[0])), fontsize=7)


def plot_bars(rows: list[dict[str, Any]]) -> str | None:
    wanted = {round(1 / f, 3): f for f in BAR_FRACTIONS}
    sel = [
        r
        for r in rows
        if round(r["multiple"], 3) in wanted and r["mode"] != "dram" and r.get("efficiency_median")
    ]
    if not sel:
        return None
    plt = pyplot()
    cases = sorted({r["case"] for r in sel})
    modes = sorted({r["mode"] for r in sel}, key=lambda m: list(MODE_COLORS).index(m))
    fracs = sorted({wanted[round(r["multiple"], 3)] for r in sel})
    width_in = min(MAX_WIDTH_IN, max(4.5, 1.2 * len(cases)) * len(fracs))
    fig, axes = plt.subplots(1, len(fracs), figsize=(width_in, 3.4), squeeze=False)
    width = 0.8 / max(1, len(modes))
    for ax, frac in zip(axes[0], fracs, strict=False):
        at = {
            (r["case"], r["mode"]): 100 * r["efficiency_median"]
            for r in sel
            if wanted[round(r["multiple"], 3)] == frac
        }
        _bars(ax, at, cases, modes, width)
        ax.set_title(f"fast budget = {int(frac * 100)}% of footprint", fontsize=10)
    fig.tight_layout()
    return svg_fit(fig)


def _bars(
    ax: Any, at: dict[tuple[str, str], float], cases: list[str], modes: list[str], width: float
) -> None:
    top = min(Y_CAP, max(110.0, 1.08 * max(at.values(), default=0.0)))
    for j, mode in enumerate(modes):
        ys = [at.get((case, mode), 0.0) for case in cases]
        xs = [i + j * width for i in range(len(cases))]
        ax.bar(xs, [min(y, top) for y in ys], width, label=mode, color=MODE_COLORS.get(mode))
        for x, y in zip(xs, ys, strict=True):
            if y > top:
                ax.annotate(f"{y:.0f}%", (x, top), fontsize=7, ha="center", va="top")
    ax.set_ylim(0, top)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.axhline(100, color="#999999", lw=0.8)
    ax.set_ylabel("% of dram speed")
    ax.legend(fontsize=7)
