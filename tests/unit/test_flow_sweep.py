# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem flow sweep`: what the reduced default and --full run, the check
of the advisor on constructed measurements, the exit status and the JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetmem import cli
from hetmem.errors import UsageError
from hetmem.flow import calibrate, model, runner, sweep
from hetmem.flow import spec as specmod

TINY = """
name = "tiny"
iterations = 3
[writer]
kernel = "none"
objects = 4
object_bytes = 4608
[reader]
kernel = "none"
"""


def test_reduced_default_is_four_shipped_specs_two_rounds_advised_once():
    p = sweep.plan([])
    assert p.kind == "reduced" and not p.readvise and p.repeat == 2
    assert p.specs == ("small-io", "writer-bound", "reader-bound", "gtc-small")
    assert set(p.specs) <= set(specmod.shipped_names())
    # each a different regime: no compute, writer-bound, reader-bound, MiB objects
    specs = {n: specmod.load(n) for n in p.specs}
    assert specs["small-io"].writer.kernel == specs["small-io"].reader.kernel == "none"
    assert specs["gtc-small"].writer.object_bytes >= 1 << 20


def test_full_is_every_shipped_spec_three_rounds_readvised():
    p = sweep.plan([], full=True)
    assert p.kind == "full" and p.readvise and p.repeat == 3
    assert list(p.specs) == specmod.shipped_names() and len(p.specs) == 12
    assert sweep.plan([], full=True, repeat=5).repeat == 5


def test_named_specs_run_as_the_reduced_sweep_does():
    p = sweep.plan(["large-io"], repeat=4)
    assert (p.kind, p.specs, p.repeat, p.readvise) == ("named", ("large-io",), 4, False)


@pytest.mark.parametrize(
    ("specs", "full", "repeat", "msg"),
    [
        (["small-io"], True, None, "--full"),
        ([], False, 1, "--repeat: at least 2"),
        ([], True, 0, "--repeat"),
        ([], False, -3, "--repeat"),
    ],
)
def test_plan_refuses_bad_input(specs, full, repeat, msg):
    with pytest.raises(UsageError, match=msg.replace("-", r"\-")):
        sweep.plan(specs, full, repeat)


def _rows(measured: dict[str, list[float]], predicted: dict[str, float]) -> list[dict[str, Any]]:
    rows = []
    for c, runs in measured.items():
        m = sorted(runs)[len(runs) // 2] if len(runs) % 2 else sum(runs) / len(runs)
        row = {
            "config": c,
            "measured_s": m,
            "measured_runs_s": runs,
            "spread": (max(runs) - min(runs)) / m,
        }
        rows.append(sweep.set_prediction(row, [predicted[c]]))
    return rows


def test_advisor_check_passes_within_5pct_of_the_measured_best():
    # advised (lowest prediction) parallel/dram/p1 measures 1.04 against the
    # best's 1.00: within 4%
    rows = _rows(
        {
            "serial/dram/p1": [1.5, 1.6],
            "parallel/dram/p1": [1.04, 1.04],
            "parallel/dram/p2": [1.0, 1.0],
        },
        {"serial/dram/p1": 1.4, "parallel/dram/p1": 0.9, "parallel/dram/p2": 0.95},
    )
    res = {"spec": "x", "repeat": 2, **sweep._ranked(rows)}
    assert res["best"] == "parallel/dram/p2" and res["advised"] == "parallel/dram/p1"
    assert res["advised_within_pct"] == pytest.approx(4.0)
    assert res["advised_within_5pct"] and not res["advised_tied_with_best"]
    assert res["best_spread"] == 0.0
    line = sweep.advisor_line(res)
    assert line.startswith(
        "x: advised parallel/dram/p1, measured best parallel/dram/p2, "
        "advised is within 4.0% of best -> PASS"
    )
    assert "(spread: advised 0% of 2 runs, best 0% of 2)" in line


def test_advisor_check_misses_beyond_5pct_and_says_when_runs_overlap():
    rows = _rows(
        {"serial/dram/p1": [1.0, 1.1], "parallel/dram/p1": [1.08, 1.2]},
        {"serial/dram/p1": 2.0, "parallel/dram/p1": 1.0},
    )
    res = {"spec": "y", "repeat": 2, **sweep._ranked(rows)}
    assert res["best"] == "serial/dram/p1" and res["advised"] == "parallel/dram/p1"
    assert res["advised_within_pct"] == pytest.approx((1.14 / 1.05 - 1) * 100)
    assert not res["advised_within_5pct"] and res["advised_tied_with_best"]
    line = sweep.advisor_line(res)
    assert "-> MISS" in line and "within the measurement spread" in line


def test_contenders_are_the_best_and_those_overlapping_its_runs():
    measured = {
        "a": [1.0, 1.1, 1.3],  # the best median
        "b": [1.25, 1.4, 1.5],  # overlaps a's 1.3
        "c": [1.31, 1.32, 1.33],  # does not
    }
    assert sweep._contenders(measured) == ["a", "b"]
    assert sweep._contenders({"a": [1.0, 1.1], "c": [1.2, 1.3]}) == []


def test_deciding_rounds_rerun_the_contenders_whatever_was_advised(monkeypatch):
    s = specmod.parse(TINY)
    cfgs = {"serial/dram/p1": [1.0, 1.2], "parallel/dram/p1": [1.1, 1.3]}
    cfgs["parallel/dram/p2"] = [2.0, 2.1]
    for advised in cfgs:  # the advice never changes who is re-measured
        rows = [
            {"config": c, "mode": c.split("/")[0], "tier": "dram", "ranks": int(c[-1])}
            | {"iteration_s": 0.5 if c == advised else 1.0, "reason": "r"}
            for c in cfgs
        ]
        rows.sort(key=lambda r: r["iteration_s"])  # advised first, as advise() returns
        monkeypatch.setattr(model, "advise", lambda *a, rows=rows, **k: [dict(r) for r in rows])
        ran: list[str] = []

        def fake_run(spec, ran=ran):
            c = f"{spec.mode}/{spec.tier}/p{spec.writer.ranks}"
            ran.append(c)
            k = sum(1 for x in ran if x == c) - 1
            return {"iteration_s": cfgs[c][k] if k < 2 else 1.15}

        monkeypatch.setattr(runner, "run", fake_run)
        res = sweep.sweep(s, {}, max_ranks=2, repeat=2, decide=3)
        assert res["decided"] == ["parallel/dram/p1", "serial/dram/p1"]
        assert res["decide"] == 3
        extra = ran[6:]
        assert sorted(extra) == sorted(res["decided"] * 3)
        by = {r["config"]: r for r in res["rows"]}
        assert len(by["serial/dram/p1"]["measured_runs_s"]) == 5
        assert len(by["parallel/dram/p2"]["measured_runs_s"]) == 2
        # medians over every run: serial 1.0, 1.2, 1.15 x3 -> 1.15
        assert by["serial/dram/p1"]["measured_s"] == pytest.approx(1.15)
        assert by["parallel/dram/p1"]["measured_s"] == pytest.approx(1.15)
        assert res["advised"] == advised
    none = sweep.sweep(s, {}, max_ranks=2, repeat=2, decide=0)
    assert none["decided"] == [] and none["decide"] == 0


def test_a_second_deciding_pass_takes_what_the_first_made_a_contender(monkeypatch):
    s = specmod.parse(TINY)
    # after the rounds a (0.98-1.02) overlaps b (1.01-1.04); c (from 1.045)
    # overlaps neither. a's deciding runs are slow (1.2): b becomes the best
    # (1.01-1.05), and now c overlaps b, so c gets a second pass
    first = {"serial/dram/p1": [0.98, 1.02], "parallel/dram/p1": [1.01, 1.04]}
    first["serial/dram/p2"] = [1.045, 1.09]
    later = {"serial/dram/p1": 1.2, "parallel/dram/p1": 1.05, "serial/dram/p2": 1.03}
    rows = [
        {"config": c, "mode": c.split("/")[0], "tier": "dram", "ranks": int(c[-1])}
        | {"iteration_s": 1.0, "reason": "r"}
        for c in first
    ]
    monkeypatch.setattr(model, "advise", lambda *a, **k: [dict(r) for r in rows])
    ran: list[str] = []

    def fake_run(spec):
        c = f"{spec.mode}/{spec.tier}/p{spec.writer.ranks}"
        ran.append(c)
        k = ran.count(c) - 1
        return {"iteration_s": first[c][k] if k < 2 else later[c]}

    monkeypatch.setattr(runner, "run", fake_run)
    res = sweep.sweep(s, {}, max_ranks=2, repeat=2, decide=2)
    assert res["decided"] == ["parallel/dram/p1", "serial/dram/p1", "serial/dram/p2"]
    assert ran[6:10].count("serial/dram/p2") == 0 and ran[10:] == ["serial/dram/p2"] * 2
    assert res["best"] == "serial/dram/p2"  # 1.03, 1.03, 1.045, 1.09: median 1.0375


def test_plan_refuses_negative_deciding_rounds(capsys):
    with pytest.raises(UsageError, match="--decide"):
        sweep.plan([], decide=-1)
    assert sweep.plan([]).decide == sweep.DECIDE and sweep.plan([], decide=0).decide == 0
    # on the command line: one line and exit 2, before any calibration or run
    assert cli.main(["flow", "sweep", "--decide", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hetmem flow: error: --decide: 0 (none) or more deciding rounds, got -1"]


def _res(name: str, slowdown: float) -> dict[str, Any]:
    return {
        "spec": name,
        "rows": [{"config": "serial/dram/p1", "error": 0.0, "spread": 0.05}],
        "advised_slowdown": slowdown,
        "advised_tied_with_best": False,
    }


def test_summary_target_needs_90pct_of_the_specs():
    four = [_res(f"s{i}", 1.0) for i in range(3)] + [_res("s3", 1.06)]
    s = sweep.summarize(four)
    assert (s["advised_within_5pct"], s["advised_needed"], s["advised_met"]) == (3, 4, False)
    assert s["target"]["pass"] is False
    assert sweep.target_line(s).splitlines() == [
        "advised within 5% of the measured best on 3 of 4 specs",
        "target advised within 5% of the measured best on >= 90% of specs: 3/4 (need 4) -> MISS",
    ]
    twelve = [_res(f"s{i}", 1.0) for i in range(11)] + [_res("s11", 1.5)]
    s = sweep.summarize(twelve)
    assert s["advised_needed"] == 11 and s["target"]["pass"] is True
    assert sweep.target_line(s).endswith("11/12 (need 11) -> PASS")
    assert sweep.summarize([])["target"]["pass"] is False  # nothing ran: no pass


def _fake_sweep(slowdowns: dict[str, float]) -> Any:
    def fake(spec, calib, max_ranks, prog, repeat, readvise, decide):
        best, adv = "serial/dram/p1", "parallel/dram/p1"
        sd = slowdowns[spec.name]
        rows = [
            {"config": best, "measured_s": 1.0, "measured_runs_s": [1.0] * repeat},
            {"config": adv, "measured_s": sd, "measured_runs_s": [sd] * repeat},
        ]
        rows = [
            dict(sweep.set_prediction(r, [p]), spread=0.0)
            for r, p in zip(rows, [2.0, 1.0], strict=True)
        ]
        return {"spec": spec.name, "repeat": repeat, "advise_s": 1.0, "runs_s": 2.0,
                **sweep._ranked(rows)}  # fmt: skip

    return fake


def test_cli_exit_status_follows_the_target(monkeypatch, capsys):
    monkeypatch.setattr(calibrate, "load", lambda: {"schema_version": 2, "tiers": {}})
    ok = dict.fromkeys(sweep.REDUCED_SPECS, 1.01)
    monkeypatch.setattr(sweep, "sweep", _fake_sweep(ok))
    assert cli.main(["flow", "sweep"]) == 0
    out = capsys.readouterr().out
    assert "small-io: advised parallel/dram/p1, measured best serial/dram/p1, advised is" in out
    assert "advised within 5% of the measured best on 4 of 4 specs" in out
    assert "(need 4) -> PASS" in out
    monkeypatch.setattr(sweep, "sweep", _fake_sweep(dict(ok, **{"gtc-small": 1.2})))
    assert cli.main(["flow", "sweep", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 3 and data["plan"]["kind"] == "reduced"
    assert data["plan"]["decide"] == sweep.DECIDE
    assert [r["spec"] for r in data["specs"]] == list(sweep.REDUCED_SPECS)
    gtc = data["specs"][-1]
    assert gtc["advised_within_pct"] == pytest.approx(20.0) and not gtc["advised_within_5pct"]
    assert data["summary"]["target"] == {
        "target": "advised within 5% of the measured best on >= 90% of specs",
        "pass": False,
    }
    for key in ("advise_s", "runs_s", "repeat", "advised_spread", "best_spread"):
        assert key in gtc


def test_reduced_sweep_advises_once_even_when_the_load_moves(monkeypatch):
    s = specmod.parse(TINY)
    calls = []

    def fake_advise(*a, **k):
        calls.append(1)
        return [
            {"config": c, "mode": c.split("/")[0], "tier": "dram", "ranks": 1, "reason": "r"}
            | {"iteration_s": t, "external_load": 0.0}
            for c, t in (("serial/dram/p1", 1.0), ("parallel/dram/p1", 0.6))
        ]

    monkeypatch.setattr(model, "advise", fake_advise)
    monkeypatch.setattr(runner, "run", lambda spec: {"iteration_s": 1.0})
    monkeypatch.setattr(sweep, "RELOAD", -1.0)  # any load counts as moved
    res = sweep.sweep(s, {}, max_ranks=1, repeat=2, readvise=False, decide=0)
    assert len(calls) == 1 and res["advised_rounds"] == 1 and res["round_inputs"] == [0, 0]
    assert res["repeat"] == 2 and res["advise_s"] >= 0 and res["runs_s"] >= 0
    assert all(len(r["measured_runs_s"]) == 2 for r in res["rows"])
    res = sweep.sweep(s, {}, max_ranks=1, repeat=2, readvise=True, decide=0)
    assert res["advised_rounds"] == 2  # --full's behaviour
