# SPDX-License-Identifier: BSD-3-Clause
"""The advisor's runoff: when the model cannot tell the top configurations
apart, a few short runs decide.

The model's median error is 2-3%, but its predictions of the top two or
three configurations of a spec often lie within 1-5% of each other while
their measured times differ by 5-10% (twelve-spec sweeps: miniamr-compute
predicted 0.0787 against 0.0791 s for two configurations that measured
0.0808 and 0.0755; gtc-io 0.0478 against 0.0495, measured 0.0484 and
0.0446). Which one the advice names is then chance. So `flow advise`
runs the configurations predicted within RUNOFF_WITHIN of the best
(at most RUNOFF_MAX of them) RUNOFF_RUNS times each, interleaved, and
advises the one with the lowest median: about 9 short runs, a few
seconds beside the profile's 20-25. The predictions stay as they were
(the model's error is still reported against them); only the choice
among near-ties is measured. pick() makes the same choice again from
saved predictions and runs (replays of a saved sweep).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from hetmem.errors import HetmemError
from hetmem.flow import runner
from hetmem.flow.spec import Spec

RUNOFF_WITHIN = 0.05  # predicted within 5% of the best prediction
RUNOFF_MAX = 3  # configurations in a runoff at most
RUNOFF_RUNS = 3  # runs of each, interleaved


def contenders(preds: Mapping[str, float]) -> list[str]:
    """The configurations a runoff decides between, lowest prediction
    first; [] when only one is within reach."""
    if not preds:
        return []
    order = sorted(preds, key=lambda c: (preds[c], c))
    lo = preds[order[0]]
    near = [c for c in order if preds[c] <= lo * (1.0 + RUNOFF_WITHIN)][:RUNOFF_MAX]
    return near if len(near) > 1 else []


def pick(preds: Mapping[str, float], runs: Mapping[str, Sequence[float]] | None) -> str:
    """The advised configuration: of the contenders that have runoff runs
    (at least two of them), the lowest median; else the lowest prediction."""
    measured = [c for c in contenders(preds) if runs and runs.get(c)]
    if len(measured) >= 2 and runs is not None:
        return min(measured, key=lambda c: (statistics.median(runs[c]), preds[c]))
    return min(preds, key=lambda c: (preds[c], c))


def run(spec: Spec, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Runs the contenders among rows (advise's predictions) RUNOFF_RUNS
    times each, interleaved; {config: iteration seconds of each run}. A
    configuration that fails to run takes no part."""
    by = {r["config"]: r for r in rows}
    names = contenders({c: r["iteration_s"] for c, r in by.items()})
    got: dict[str, list[float]] = {c: [] for c in names}
    for _ in range(RUNOFF_RUNS if names else 0):
        for c in names:
            r = by[c]
            try:
                s = spec.with_config(mode=r["mode"], tier=r["tier"], ranks=r["ranks"])
                got[c].append(float(runner.run(s)["iteration_s"]))
            except HetmemError:
                continue
    return {c: v for c, v in got.items() if v}
