# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem report`: one self-contained HTML page (inline SVG plots, no network)
plus the same numbers as JSON, from one or more benchmark result folders.

The page answers first: one headline per kernel (the best mode when the data
does not fit the fast budget, its fraction of dram speed and how many times
faster than Linux swap, each with a 95% confidence interval), then the
plots, the tables, the machine and the command that reproduces the runs. The
developers' checks (does each mode keep up with dram when the data fits, do
the curves follow the storage bandwidth and peak flops) come last, in an
appendix, each with a sentence saying what it measures. One statistic
throughout: report_stats's median of paired repetitions.
"""

from __future__ import annotations

import html
import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetmem import __version__, output
from hetmem.bench import report_plots, report_stats
from hetmem.bench.harness import (
    SCHEMA_VERSION,
    efficiency_table,
    hard_failures,
    latest_runs,
    load_runs,
)
from hetmem.bench.report_checks import (
    CHECK_EXPLANATIONS,
    check_kind,
    fits_checks,
    fits_target,
    physics_checks,
    scale_checks,
)
from hetmem.bench.report_stats import pct_cell
from hetmem.errors import SchemaError, UsageError
from hetmem.sizes import format_num

__all__ = ["build", "fits_checks", "fits_target", "load_results", "physics_checks", "write"]

# 2: efficiency figures are the median of paired repetitions with bootstrap
# intervals (summary, checks); summary rows are headlines; machine details.
REPORT_SCHEMA_VERSION = 2


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


def _probe_tiers(manifests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for m in manifests for t in (m.get("probe") or {}).get("tiers", [])]


def _probe_bandwidths(manifests: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Tier name -> best bandwidth in GB/s from the probe stored with the results."""
    out: dict[str, float] = {}
    for t in _probe_tiers(manifests):
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
    for t in _probe_tiers(manifests):
        rd, wr = t.get("seq_read_gbs"), t.get("seq_write_gbs")
        if t.get("kind") == "storage" and isinstance(rd, int | float) and rd > 0:
            if isinstance(wr, int | float) and wr > 0:
                out[t.get("name", "storage")] = (float(rd), float(wr))
    return out


def probe_note(manifests: Sequence[dict[str, Any]]) -> str:
    """How the stored probe measured DRAM: 'hetmem probe --quick triad, 2
    threads, 1200 MiB arrays, 2026-11-27T03:19'; "" without a probe."""
    for m in manifests:
        probe = m.get("probe") or {}
        for t in probe.get("tiers", []):
            best = t.get("best") or {}
            if t.get("kind") != "storage" and best.get("triad_gbs"):
                quick = " --quick" if probe.get("quick") else ""
                size = (t.get("array_bytes") or 0) / 2**20
                return (
                    f"hetmem probe{quick} triad on {t.get('name')}, {best.get('threads', '?')} "
                    f"threads, {size:.0f} MiB arrays, {str(probe.get('created', '?'))[:16]}: "
                    "another time, size and load than the benchmark runs"
                )
    return ""


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
        # one multiply and one add per degree for each 8-byte element read
        ai = 2.0 * float(degree) / 8.0
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


def analyse(manifests: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every number of the report, as report.json holds them."""
    rows = report_stats.annotate(efficiency_table(runs))
    bws = _probe_bandwidths(manifests)
    pts = _poly_points(runs)
    peak = max((p["gflops"] for p in pts if p["mode"] == "dram"), default=0.0)
    checks = (
        fits_checks(rows)
        + physics_checks(
            rows, pts, bws, peak, runs, _probe_storage(manifests), probe_note(manifests)
        )
        + scale_checks(rows)
    )
    failures = [r for r in latest_runs(runs) if r.get("error")]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "hetmem_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sources": [m["_dir"] for m in manifests],
        "commands": [m.get("command") for m in manifests],
        "machines": [m.get("machine_info") for m in manifests],
        "efficiency_stat": report_stats.STAT,
        "confidence": report_stats.CONFIDENCE,
        "probe_bandwidth_gbs": bws,
        "probe_dram_is": probe_note(manifests) or None,
        "peak_gflops_measured": peak or None,
        "efficiency": rows,
        "summary": report_stats.headlines(rows, runs),
        "checks": checks,
        "fits_target": fits_target(checks),
        "failed_runs": [
            {k: r.get(k) for k in ("case", "multiple", "mode", "rep", "error", "error_kind")}
            for r in failures
        ],
        "hard_failures": len(hard_failures(runs)),
        "_pts": pts,
    }


def build(dirs: Sequence[Path]) -> tuple[str, dict[str, Any]]:
    """The HTML page and the JSON data of a report over result folders."""
    manifests, runs = load_results(dirs)
    data = analyse(manifests, runs)
    pts = data.pop("_pts")
    rows = data["efficiency"]
    figs = _figures(rows, pts, data["probe_bandwidth_gbs"], data["peak_gflops_measured"] or 0.0)
    parts = _html_head(data, manifests)
    parts += _headlines_html(data["summary"], rows)
    parts += _figures_html(figs)
    parts += _efficiency_html(rows)
    parts += _failures_html(data["failed_runs"])
    parts += _machine_html(data, manifests)
    parts += _reproduce_html(manifests)
    parts += _appendix_html(data["checks"], data["fits_target"])
    parts.append("</body></html>")
    return "".join(parts), data


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{format_num(v)}"
    return html.escape(str(v))


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], wrap: Sequence[int] = ()) -> str:
    """A table; the cells of the columns in `wrap` are text, left-aligned,
    wrapped at spaces and inside a long word (an error, a path) only where
    it does not fit: never cut."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='wrap'>{_fmt(v)}</td>" if i in wrap else f"<td>{_fmt(v)}</td>"
            for i, v in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return (
        f"<div class='tbl'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;padding:0 1em;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.tbl{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
td.wrap{text-align:left;overflow-wrap:anywhere;max-width:40em}
.pass{color:#1a7f37;font-weight:bold} .fail{color:#cf222e;font-weight:bold}
.unsure{color:#9a6700;font-weight:bold} .note{color:#9a6700}
figure{margin:1em 0;max-width:100%} figcaption{font-size:0.85em;color:#555}
svg{max-width:100%;height:auto}
code{background:#f4f4f4;padding:1px 4px;overflow-wrap:anywhere}
li{margin:0.3em 0}
"""


def _machine_line(manifests: list[dict[str, Any]]) -> str:
    info = next((m.get("machine_info") for m in manifests if m.get("machine_info")), None)
    if not info:
        return "Machine: not recorded in these results (older than the machine details)."
    dev = info.get("storage_device") or {}
    ram = (info.get("ram_bytes") or 0) / 2**30
    return (
        f"Machine: {info.get('cpu_model')}, {info.get('cpus_allowed')} of "
        f"{info.get('cpus_online')} CPUs, {ram:.0f} GiB RAM, Linux {info.get('kernel')}, "
        f"storage {dev.get('name', '?')} ({dev.get('model', '?')}); hetmem "
        f"{info.get('hetmem_version')}, commit {info.get('git_commit')}."
    )


def _html_head(data: dict[str, Any], manifests: list[dict[str, Any]]) -> list[str]:
    return [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>hetmem benchmark report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>hetmem benchmark report</h1>",
        f"<p>{html.escape(_machine_line(manifests))} Report created "
        f"{html.escape(data['created'])} by hetmem {html.escape(__version__)} from "
        f"{html.escape(', '.join(data['sources']))}.</p>",
    ]


def _headlines_html(summ: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    parts = [
        "<h2>Which mode, and how much faster</h2>",
        "<p>Per kernel, at the data size nearest twice the fast budget: the fastest mode "
        "other than dram, its speed as a fraction of all-DRAM speed, and against Linux "
        f"swap under the same budget. Figures are medians over repetitions, each "
        f"repetition's modes run back to back; intervals are {report_stats.CONFIDENCE:.0%} "
        "bootstrap confidence intervals.</p><ul>",
    ]
    for h in summ:
        parts.append(f"<li><b>{html.escape(h['case'])}</b>: {html.escape(h['text'])}</li>")
    parts.append("</ul>")
    caveats = _caveats(rows)
    if caveats:
        parts.append("<p class='note'>Read with care:</p><ul class='note'>")
        parts += [f"<li>{html.escape(c)}</li>" for c in caveats]
        parts.append("</ul>")
    return parts


def _caveats(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    if any(r.get("pairs", 0) == 1 for r in rows if r["mode"] != "dram"):
        out.append(
            "Some sizes ran once per mode: they have no confidence interval, so noise "
            "cannot be told apart from a real difference (run with --repeat 2 or more)."
        )
    noisy = [r for r in rows if r.get("noise")]
    if noisy:
        names = ", ".join(f"{r['case']} {r['mode']} {r['multiple']:g}x" for r in noisy[:6])
        out.append(
            f"{len(noisy)} efficiencies above 100% are noise, not speed-ups (their interval "
            f"reaches 100% or there is none): {names}."
        )
    wide = [r for r in rows if r.get("wide")]
    if wide:
        out.append(
            f"{len(wide)} intervals span more than a factor of {report_stats.WIDE_FACTOR:g}: "
            "the repetitions disagree; the machine was busy or the runs are too short."
        )
    return out


def _figures(
    rows: list[dict[str, Any]], pts: list[dict[str, Any]], bws: dict[str, float], peak: float
) -> list[tuple[str, str | None, str]]:
    """(title, SVG or None, caption) of each plot."""
    return [
        (
            "Speed against data size",
            report_plots.plot_efficiency(rows),
            "Percent of all-DRAM speed (t_dram / t_mode, median of paired repetitions; bars: "
            "95% bootstrap interval, none with one repetition) against data size over the fast "
            "budget. The dotted line is data = budget; lines are not drawn across it nor across "
            "a failed run (x at the bottom). The axis stops at "
            f"{report_plots.Y_CAP:.0f}%: a point above is drawn at the top with its value "
            "(noise: with the data in the same memory no mode is much faster than dram).",
        ),
        (
            "Bandwidth against arithmetic intensity",
            report_plots.plot_poly(pts, bws, peak),
            "Polynomial kernel at the largest size; dotted lines: the most a tier allows, "
            "min(peak flops, intensity x tier bandwidth), for each probed tier, with peak "
            "flops as measured in dram mode.",
        ),
        (
            "Modes at fixed fast budgets",
            report_plots.plot_bars(rows),
            "Percent of all-DRAM speed with the fast budget at 25/50/75% of the data size "
            "(sizes 4x, 2x, 1.33x the budget).",
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
    columns = ["case", "size", "x budget", "mode", "% of dram", "95% CI", "reps",
               "best-of-N ratio", "best time (s)", "note"]  # fmt: skip
    cells = [
        [
            r["case"],
            f"{r['size_bytes'] / 2**20:.0f} MiB",
            f"{r['multiple']:g}x",
            r["mode"],
            pct_cell(r.get("efficiency_median")),
            "-"
            if r.get("efficiency_ci_low") is None or r["mode"] == "dram"
            else f"{pct_cell(r['efficiency_ci_low'])}-{pct_cell(r['efficiency_ci_high'])}",
            r.get("pairs"),
            pct_cell(r.get("efficiency")),
            r.get("time_s_best"),
            report_stats.row_notes(r),
        ]
        for r in rows
    ]
    return [
        "<h2>Efficiency table</h2>",
        "<p>% of dram = t_dram / t_mode, the median over repetitions of the ratio of runs "
        "made back to back (the statistic of the headlines, the plots and the checks). "
        "Best-of-N ratio: the best time of dram over the best time of the mode, for "
        "comparison.</p>",
        _table(columns, cells, wrap=(9,)),
    ]


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
            wrap=(5,),
        ),
    ]


def _machine_html(data: dict[str, Any], manifests: list[dict[str, Any]]) -> list[str]:
    parts = ["<h2>Machine</h2>"]
    for m in manifests:
        info = m.get("machine_info")
        if info:
            parts.append(_table(["", m["_dir"]], _machine_rows(info), wrap=(1,)))
    bws = data["probe_bandwidth_gbs"]
    if not bws:
        parts.append("<p>No probe result was stored with these results (run "
                     "<code>hetmem probe</code> before the bench).</p>")  # fmt: skip
        return parts
    parts.append(_table(["probed tier", "bandwidth (GB/s)"], sorted(bws.items())))
    parts.append(
        "<p>Memory tiers: the probe's STREAM triad; storage: sequential O_DIRECT reads. "
        f"{html.escape(data.get('probe_dram_is') or '')}. The checks compare a kernel "
        "with the DRAM speed it reached in the dram runs of the same matrix instead.</p>"
    )
    return parts


def _machine_rows(info: dict[str, Any]) -> list[list[Any]]:
    dev = info.get("storage_device") or {}
    size = dev.get("size_bytes")
    disk = f"{dev.get('name', '?')}: {dev.get('model', '?')}"
    if size:
        disk += f", {size / 2**30:.0f} GiB"
    if dev.get("rotational") is not None:
        disk += ", rotational" if dev["rotational"] else ", not rotational"
    return [
        ["CPU", info.get("cpu_model")],
        ["CPUs", f"{info.get('cpus_allowed')} allowed of {info.get('cpus_online')} online"],
        ["kernel", f"Linux {info.get('kernel')} ({info.get('arch')})"],
        ["RAM", f"{(info.get('ram_bytes') or 0) / 2**30:.1f} GiB"],
        ["storage", f"{dev.get('path', '?')} on {disk}"],
        ["hetmem", f"{info.get('hetmem_version')}, commit {info.get('git_commit')}"],
    ]


def _reproduce_html(manifests: list[dict[str, Any]]) -> list[str]:
    parts = ["<h2>Reproduce</h2><ul>"]
    for m in manifests:
        cmd = shlex.join(m.get("command") or ["hetmem", "bench"])
        parts.append(
            f"<li><code>{html.escape(cmd)}</code> (budget "
            f"{m.get('budget_bytes', 0) / 2**20:.0f} MiB, {m.get('threads')} threads, "
            f"machine {html.escape(str(m.get('machine', '?')))})</li>"
        )
    parts.append("</ul>")
    return parts


def _verdict(c: dict[str, Any]) -> str:
    return {True: "PASS", False: "MISS", None: "UNSURE"}[c["pass"]]


def _appendix_html(checks: list[dict[str, Any]], target: dict[str, Any] | None) -> list[str]:
    if not checks:
        return []
    parts = ["<h2>Appendix: checks for developers</h2>"]
    for kind, text in CHECK_EXPLANATIONS.items():
        mine = [c for c in checks if check_kind(c) == kind]
        if not mine:
            continue
        parts.append(f"<h3>{html.escape(kind)}</h3><p>{html.escape(text)}</p>")
        parts.append(_checks_table(mine))
    if target:
        parts.append(
            f"<p>Target, {html.escape(target['target'])}: {target['passed']} of "
            f"{target['checks']} checks pass, {target.get('unsure', 0)} cannot be judged "
            f"from one repetition.</p>"
        )
    return parts


def _checks_table(checks: list[dict[str, Any]]) -> str:
    rows = [
        [
            c["check"],
            pct_cell(c["efficiency"]) if "efficiency" in c else "-",
            c["measured"],
            c["model"],
            c["ratio"],
            c["rule"],
            c.get("why") or _detail_text(c),
            _verdict(c),
        ]
        for c in checks
    ]
    table = _table(
        ["check", "% of dram", "measured", "model", "ratio", "rule", "why", "result"],
        rows,
        wrap=(0, 5, 6),
    )
    for word, cls in (("PASS", "pass"), ("MISS", "fail"), ("UNSURE", "unsure")):
        table = table.replace(f"<td>{word}</td>", f"<td class='{cls}'>{word}</td>")
    return table


def _detail_text(c: dict[str, Any]) -> str:
    d = c.get("detail") or {}
    if "model_storage_s" not in d:
        return ""
    probe = d.get("dram_gbs_probe")
    return (
        f"DRAM {d['dram_gbs_kernel']:.1f} GB/s = {d.get('dram_gbs_kernel_is', '')}. "
        f"Probe triad {'-' if probe is None else f'{probe:.1f}'} GB/s = "
        f"{d.get('dram_gbs_probe_is', '')}. Storage: {d['model_bytes_read'] / 1e6:.0f} MB "
        f"read at {d['storage_read_gbs']:.2f} + {d['model_bytes_written'] / 1e6:.0f} MB "
        f"written at {d['storage_write_gbs']:.2f} GB/s = {d['model_storage_s']:.3f} s."
    )


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
