"""`hetmem flow sweep`: runs every configuration of a spec and puts the
model's prediction beside the measurement (the seed's Figure 1: each
configuration's slowdown against the best)."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from hetmem.flow import model, runner
from hetmem.flow.spec import Spec


def sweep(
    spec: Spec,
    calib: dict[str, Any],
    max_ranks: int = 2,
    prog: Any = None,
    repeat: int = 3,
) -> dict[str, Any]:
    """Runs every configuration `repeat` times, the configurations
    interleaved (a burst of other load on a shared machine then hits one
    run of several, not every run of one configuration), and takes each
    one's median."""
    predicted = [
        p
        for p in model.advise(spec, calib, max_ranks=max_ranks)
        if spec.writer.objects % p["ranks"] == 0
    ]
    runs = max(1, repeat)
    task = prog.add_task(spec.name, total=len(predicted) * runs) if prog is not None else None
    measured: dict[str, list[float]] = {p["config"]: [] for p in predicted}
    loads: list[float] = []
    for _ in range(runs):
        for p in predicted:
            s = spec.with_config(mode=p["mode"], tier=p["tier"], ranks=p["ranks"])
            b0, c0, t0 = _busy(), _children(), time.monotonic()
            measured[p["config"]].append(runner.run(s)["iteration_s"])
            b1, c1, t1 = _busy(), _children(), time.monotonic()
            if b0 is not None and b1 is not None:
                loads.append(max(0.0, (b1 - b0) - (c1 - c0)) / (t1 - t0))
            if prog is not None:
                prog.advance(task)
    rows = []
    for p in predicted:
        m = statistics.median(measured[p["config"]])
        rows.append(
            {
                "config": p["config"],
                "mode": p["mode"],
                "tier": p["tier"],
                "ranks": p["ranks"],
                "predicted_s": p["iteration_s"],
                "measured_s": m,
                "measured_runs_s": measured[p["config"]],
                "error": p["iteration_s"] / m - 1.0,
                "reason": p["reason"],
            }
        )
    best = min(rows, key=lambda r: r["measured_s"])
    for r in rows:
        r["slowdown"] = r["measured_s"] / best["measured_s"]
    rows.sort(key=lambda r: r["measured_s"])
    advised = min(rows, key=lambda r: r["predicted_s"])
    return {
        "spec": spec.name,
        "external_load_predicted": predicted[0].get("external_load", 0.0),
        "external_load_runs": statistics.median(loads) if loads else None,
        "rows": rows,
        "best": best["config"],
        "advised": advised["config"],
        "advised_slowdown": advised["slowdown"],
        "worst_slowdown": max(r["slowdown"] for r in rows),
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [abs(r["error"]) for res in results for r in res["rows"]]
    return {
        "specs": len(results),
        "advised_within_5pct": sum(1 for r in results if r["advised_slowdown"] <= 1.05),
        "configs": len(errs),
        "predictions_within_20pct": sum(1 for e in errs if e <= 0.20),
        "median_abs_error": statistics.median(errs) if errs else 0.0,
    }


def _busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (/proc/stat)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:3]) + sum(v[5:8])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None


def _children() -> float:
    t = os.times()
    return t.children_user + t.children_system
