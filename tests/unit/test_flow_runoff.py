# SPDX-License-Identifier: BSD-3-Clause
"""The advisor's runoff (hetmem.flow.runoff): which configurations it runs,
how it decides, and how advise() and the sweep's replay use its runs."""

from __future__ import annotations

import pytest
from test_flow_sweep import TINY  # a spec of 4 objects, no kernels

from hetmem.errors import HetmemError
from hetmem.flow import model, runner, runoff
from hetmem.flow import spec as specmod


def test_contenders_are_the_predictions_within_5pct_at_most_three():
    preds = {"a": 1.0, "b": 1.04, "c": 1.05, "d": 1.049, "e": 1.2}
    assert runoff.contenders(preds) == ["a", "b", "d"]  # c is 1.05: in, but fourth
    assert runoff.contenders({"a": 1.0, "b": 1.06}) == []  # nothing to decide
    assert runoff.contenders({}) == []


def test_pick_takes_the_lowest_median_of_the_contenders_run():
    preds = {"a": 1.0, "b": 1.02, "c": 1.3}
    assert runoff.pick(preds, {"a": [1.2, 1.1, 1.3], "b": [1.0, 1.4, 1.05]}) == "b"
    assert runoff.pick(preds, None) == "a"  # no runs: the lowest prediction
    assert runoff.pick(preds, {"b": [0.5]}) == "a"  # one contender run decides nothing
    # a non-contender's runs never count, however fast
    assert runoff.pick(preds, {"a": [1.1], "b": [1.2], "c": [0.1]}) == "a"


def _rows(preds: dict[str, float]) -> list[dict]:
    rows = []
    for c, t in sorted(preds.items(), key=lambda x: x[1]):
        m, tier, p = c.split("/")
        rows.append({"config": c, "mode": m, "tier": tier, "ranks": int(p[1:])})
        rows[-1].update(iteration_s=t, reason="r")
    return rows


def test_run_interleaves_the_contenders_and_skips_failures(monkeypatch):
    s = specmod.parse(TINY)
    rows = _rows({"serial/dram/p1": 1.0, "parallel/dram/p1": 1.03, "parallel/dram/p2": 2.0})
    ran: list[str] = []

    def fake(spec):
        c = f"{spec.mode}/{spec.tier}/p{spec.writer.ranks}"
        ran.append(c)
        if c == "parallel/dram/p1":
            raise HetmemError("failed")
        return {"iteration_s": 0.9}

    monkeypatch.setattr(runner, "run", fake)
    got = runoff.run(s, rows)
    # parallel/dram/p2 is beyond 5%
    assert ran == ["serial/dram/p1", "parallel/dram/p1"] * runoff.RUNOFF_RUNS
    assert got == {"serial/dram/p1": [0.9] * runoff.RUNOFF_RUNS}


def test_only_rank_counts_that_split_the_objects_are_advised():
    s = specmod.parse(TINY)  # 4 objects
    assert model.rank_counts(s, 4) == [1, 2, 4]
    assert [c.label for c in model.configurations(["dram"], [1, 2])] == [
        "serial/dram/p1", "serial/dram/p2", "parallel/dram/p1", "parallel/dram/p2"
    ]  # fmt: skip


def test_advise_puts_the_runoff_winner_first_and_keeps_the_predictions(monkeypatch):
    rows = _rows({"serial/dram/p1": 1.0, "parallel/dram/p1": 1.02, "parallel/dram/p2": 1.5})
    runs = {"serial/dram/p1": [1.2, 1.3, 1.25], "parallel/dram/p1": [1.0, 1.1, 1.05]}
    out = model._ranking([dict(r) for r in rows], runs)
    assert [r["config"] for r in out] == ["parallel/dram/p1", "serial/dram/p1", "parallel/dram/p2"]
    assert out[0]["iteration_s"] == 1.02 and out[0]["predicted_slowdown"] == pytest.approx(1.02)
    assert out[0]["runoff_s"] == 1.05 and out[2]["runoff_s"] is None
    assert out[0]["reason"].startswith("measured fastest of the 2 configurations")
    same = model._ranking([dict(r) for r in rows], {})
    assert [r["config"] for r in same] == [r["config"] for r in rows]
    assert same[0]["reason"] == "r"
