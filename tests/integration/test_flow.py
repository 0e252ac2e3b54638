# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem flow`: spec parsing, runs in both modes (processes and mpirun),
the model's ranking, and the CLI's errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from hetmem.flow import locality, model, runner
from hetmem.flow import spec as specmod

TINY = """
name = "tiny"
iterations = 3
[writer]
ranks = 1
kernel = "stencil"
size = 64
repeat = 2
objects = 40
object_bytes = 4608
[reader]
ranks = 1
kernel = "poly"
size = 1000
repeat = 3
[channel]
tier = "dram"
"""


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (TINY.replace("objects = 40", "objects = 0"), "writer.objects"),
        (TINY.replace("object_bytes = 4608", 'object_bytes = "4Q"'), "writer.object_bytes"),
        (TINY.replace('kernel = "poly"', 'kernel = "fft"'), "reader.kernel"),
        (TINY.replace('tier = "dram"', 'tier = "tape"'), "channel.tier"),
        (TINY.replace("iterations = 3", "iterations = 'x'"), "workflow.iterations"),
        (TINY.replace('ranks = 1\nkernel = "poly"', "ranks = 1\ncolour = 1"), "reader.colour"),
        # what the user wrote is quoted with its escapes: a value or key
        # holding a newline (a TOML escape) keeps the error on one line
        (TINY.replace('kernel = "poly"', 'kernel = "po\\nly"'), "reader.kernel: 'po\\nly'"),
        (TINY.replace('tier = "dram"', 'tier = "dr\\nam"'), "channel.tier: 'dr\\nam'"),
        ('launcher = "mp\\nirun"\n' + TINY, "launcher: 'mp\\nirun'"),
        (
            TINY.replace('ranks = 1\nkernel = "poly"', 'ranks = 1\n"co\\nlour" = 1'),
            "reader.co\\nlour: unknown key",
        ),
        (
            TINY.replace('ranks = 1\nkernel = "stencil"', 'ranks = 3\nkernel = "stencil"'),
            "writer.objects",
        ),
        (TINY + "\n[extra]\n", "extra"),
        ("name = [", "not valid TOML"),
    ],
)
def test_spec_errors_name_the_field(text, field):
    with pytest.raises(specmod.SpecError) as exc:
        specmod.parse(text, "t.toml")
    assert str(exc.value).startswith(field) or field in str(exc.value)
    assert "\n" not in str(exc.value)


def test_shipped_specs_parse():
    names = specmod.shipped_names()
    assert {"gtc-io", "gtc-compute", "miniamr-io", "miniamr-compute"} <= set(names)
    for n in names:
        s = specmod.load(n)
        assert s.iterations >= 1 and s.writer.objects >= 1


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_run_streams_every_object(mode):
    s = specmod.parse(TINY)
    res = runner.run(s, mode=mode)
    assert res["mode"] == mode
    assert res["objects_read"] == 40 * 3
    assert res["stamp_errors"] == 0
    assert res["makespan_s"] > 0
    assert res["writer"]["compute"] > 0 and res["reader"]["io"] > 0
    # CPU seconds of the rank itself: some, and never more than the clock's
    for role in ("writer", "reader"):
        for ph in ("compute", "io"):
            assert 0 < res[role][f"{ph}_cpu"] <= res[role][ph] * 1.05 + 1e-3


def test_run_two_ranks_each_on_a_file_tier(tmp_path):
    s = specmod.parse(TINY).with_config(ranks=2, tier=f"file:{tmp_path}")
    res = runner.run(s, mode="parallel")
    assert res["ranks"] == {"writer": 2, "reader": 2}
    assert res["objects_read"] == 40 * 3
    assert not list(tmp_path.iterdir())  # the channel file is gone


def test_run_on_a_node_tier_reports_where_the_channel_lies():
    # each side reads its numa_maps: the kernel's account of the pages of
    # the channel it mapped (40 x 4608 B a step: at least 45 pages), every
    # one on the node asked for; and the CPUs each side ran on
    s = specmod.parse(TINY).with_config(tier="node:0")
    s.reader.cpus = [0]
    res = runner.run(s, mode="parallel")
    assert res["tier"] == "node:0" and "nodes" not in res
    for role in ("writer", "reader"):
        assert set(res["channel_pages"][role]) == {"0"}, res
        assert res["channel_pages"][role]["0"] >= 45, res
    assert res["cpus"]["reader"] == [0]
    assert res["cpus"]["writer"] == sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(locality.available(), reason="this machine has two sockets")
def test_locality_tiers_need_two_sockets(hetmem, tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    for tier in locality.TIERS:
        proc = hetmem("flow", "run", str(spec), "--channel", tier)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "two sockets" in proc.stderr
    proc = hetmem("flow", "bench", "--tier", "local:writer")
    assert proc.returncode == 2 and "give node:N" in proc.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
def test_run_under_mpirun():
    s = specmod.parse(TINY).with_config(ranks=2)
    res = runner.run(s, mode="serial", launcher="mpirun", timeout=180)
    assert res["launcher"] == "mpirun" and res["objects_read"] == 40 * 3


def _calib(kappa: float = 0.5) -> dict:
    tier = {
        "put_object_s": 2e-6,
        "get_object_s": 3e-6,
        "put_byte_s": 1 / 5e9,
        "get_byte_s": 1 / 5e9,
        "streams": {"1": {"put_gbs": 5.0, "get_gbs": 5.0}, "2": {"put_gbs": 6.0, "get_gbs": 6.0}},
        "kappa": kappa,
    }
    # far slower than any live profile of dram (the CLI test mixes the two)
    slow = dict(tier, put_byte_s=1 / 1e8, get_byte_s=1 / 1e8, put_object_s=3e-5, get_object_s=3e-5)
    return {"schema_version": 2, "cores": 2, "tiers": {"dram": tier, "file:/x": slow}}


def test_model_prefers_parallel_when_analytics_can_hide():
    s = specmod.parse(TINY)
    kt = {"writer": {1: 0.5, 2: 0.25}, "reader": {1: 0.4, 2: 0.2}}
    cal = _calib()
    ser = model.predict(s, cal, kt, model.Config("serial", "dram", 1))
    par = model.predict(s, cal, kt, model.Config("parallel", "dram", 1))
    assert par["iteration_s"] < ser["iteration_s"]
    slow = model.predict(s, cal, kt, model.Config("serial", "file:/x", 1))
    assert slow["iteration_s"] > ser["iteration_s"]
    # four busy ranks on two cores: parallel can no longer hide anything
    par2 = model.predict(s, cal, kt, model.Config("parallel", "dram", 2))
    ser2 = model.predict(s, cal, kt, model.Config("serial", "dram", 2))
    assert par2["iteration_s"] == pytest.approx(ser2["iteration_s"], rel=0.35)


def test_model_composes_phases_like_the_runner():
    s = specmod.parse(TINY)  # 3 iterations, 40 objects of 4608 B
    cal = _calib()
    tc = cal["tiers"]["dram"]
    put = 40 * tc["put_object_s"] + 40 * 4608 * tc["put_byte_s"]
    get = 40 * tc["get_object_s"] + 40 * 4608 * tc["get_byte_s"]
    # no contention at all: two busy ranks on two cores run at full speed
    cal["contention"] = {k: {"1": 1.0, "2": 1.0} for k in ("stencil", "poly", "io:dram")}
    for cw, a in ((0.5, 0.1), (0.1, 0.5)):
        kt = {"writer": {1: cw}, "reader": {1: a}}
        ser = model.predict(s, cal, kt, model.Config("serial", "dram", 1))
        assert ser["iteration_s"] == pytest.approx(cw + put + get + a)
        par = model.predict(s, cal, kt, model.Config("parallel", "dram", 1))
        w, r = cw + put, get + a  # a two-stage pipeline: fill, 3 periods, drain
        want = 3 * w + r if w >= r else w + 3 * r
        assert par["iteration_s"] == pytest.approx(want / 3)
    # the same two ranks beside another core's worth of load: serial runs one
    # rank at a time at full speed; parallel gets 2/3 of a core per rank, so
    # at best 4/3 of serial's CPU
    kt = {"writer": {1: 0.3}, "reader": {1: 0.3}}
    ser = model.predict(s, cal, kt, model.Config("serial", "dram", 1), load=1.0)
    par = model.predict(s, cal, kt, model.Config("parallel", "dram", 1), load=1.0)
    assert ser["iteration_s"] == pytest.approx(0.6 + put + get)
    assert 0.75 * ser["iteration_s"] < par["iteration_s"] < ser["iteration_s"]
    # on one core parallel gains nothing at all
    one = dict(cal, cores=1)
    par1 = model.predict(s, one, kt, model.Config("parallel", "dram", 1))
    assert par1["iteration_s"] == pytest.approx(ser["iteration_s"], rel=1e-6)
    # a slot's first use costs the writer its page faults, once per slot
    cal["tiers"]["dram"]["first_touch_byte_s"] = 1e-6
    ser_t = model.predict(s, cal, kt, model.Config("serial", "dram", 1), load=1.0)
    assert ser_t["iteration_s"] == pytest.approx(ser["iteration_s"] + 40 * 4608 * 1e-6 / 3)


def test_cli_advise_and_errors(hetmem, tmp_path):
    from hetmem.run import cache

    env = {"HETMEM_CACHE_DIR": str(tmp_path)}
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    import os

    os.environ["HETMEM_CACHE_DIR"] = str(tmp_path)
    try:
        cache.save("flow-calibration", _calib())
    finally:
        del os.environ["HETMEM_CACHE_DIR"]
    proc = hetmem("flow", "advise", str(spec), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = data["ranking"]
    assert len(rows) == 8
    assert rows[0]["iteration_s"] <= rows[-1]["iteration_s"]
    assert rows[0]["tier"] == "dram"  # the faster tier of the two
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("objects = 40", "objects = -1"))
    proc = hetmem("flow", "run", str(bad), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "writer.objects" in proc.stderr
    bad.write_text(TINY.replace('kernel = "poly"', 'kernel = "po\\nly"'))
    proc = hetmem("flow", "run", str(bad), env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "reader.kernel: 'po\\nly'" in proc.stderr
    proc = hetmem("flow", "run", "no-such-spec", env=env)
    assert proc.returncode == 2 and "no such spec" in proc.stderr
    proc = hetmem("flow", "run", str(spec), "--channel", "tape", env=env)
    assert proc.returncode == 2


def test_bench_without_adios2_measures_the_channel(hetmem, tmp_path):
    # an interpreter without adios2 (the venv's own, which lacks it here, or
    # a fake one that cannot import it): the bench says so and still runs
    from hetmem.flow import bench

    fake = tmp_path / "py"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {"HETMEM_ADIOS_PYTHON": str(fake), "HETMEM_CACHE_DIR": str(tmp_path)}
    have = bench.adios_python() is not None
    args = ["flow", "bench", "--small-objects", "300", "--large-bytes", "1MiB", "--steps", "2"]
    proc = hetmem(*args, env=env)
    out = " ".join(proc.stdout.split())
    assert "Python batch path" in out and "C path" in out
    assert out.count("-> PASS") + out.count("-> MISS") == 3
    # the exit-code rule of every bench (hetmem.bench.exit_status): 1 on a MISS
    assert proc.returncode == (1 if "-> MISS" in out else 0), proc.stderr
    if not have:
        assert "ADIOS2: NOT INSTALLED" in out
    proc = hetmem(*args, "--json", env=env)
    data = json.loads(proc.stdout)
    met = [data["targets"][k] for k in ("sw_cost_met", "py_sw_cost_met", "large_met")]
    assert proc.returncode == (0 if all(met) else 1), proc.stderr
    py = data["channel_python"]["small"]
    assert all(py[k] > 0 for k in ("put_s", "get_view_s", "get_copy_s", "memcpy_s"))
    t = data["targets"]
    assert t["py_sw_cost_us_per_small_object"] == pytest.approx(
        (py["put_s"] + py["get_view_s"] - py["memcpy_s"]) * 1e6
    )
    assert t["py_sw_cost_met"] == (t["py_sw_cost_us_per_small_object"] <= 1.0)


def test_sweep_interleaves_shuffled_and_reports_spread(monkeypatch):
    from hetmem.flow import sweep

    s = specmod.parse(TINY)
    cfgs = ["serial/dram/p1", "parallel/dram/p1", "serial/dram/p2", "parallel/dram/p2"]
    pred = {"serial/dram/p1": 1.0, "parallel/dram/p1": 0.5, "serial/dram/p2": 0.9}
    pred["parallel/dram/p2"] = 0.7
    rows = []
    for c in cfgs:
        m, t, p = c.split("/")
        rows.append({"config": c, "mode": m, "tier": t, "ranks": int(p[1:])})
        rows[-1].update(iteration_s=pred[c], reason="r")
    rows.sort(key=lambda r: r["iteration_s"])  # as advise() returns them: advised first
    monkeypatch.setattr(model, "advise", lambda *a, **k: [dict(r) for r in rows])
    # measured: parallel/dram/p2 is the best; parallel/dram/p1 (advised) is
    # 4% slower on the median, with one disturbed run
    base = {
        "serial/dram/p1": [1.0, 1.0, 1.0],
        "parallel/dram/p1": [0.52, 0.6, 0.52],
        "serial/dram/p2": [0.9, 0.95, 0.9],
        "parallel/dram/p2": [0.5, 0.5, 0.55],
    }
    order: list[str] = []
    calls = {c: 0 for c in cfgs}

    def fake_run(spec):
        c = f"{spec.mode}/{spec.tier}/p{spec.writer.ranks}"
        order.append(c)
        calls[c] += 1
        return {"iteration_s": base[c][calls[c] - 1]}

    monkeypatch.setattr(runner, "run", fake_run)
    res = sweep.sweep(s, {}, max_ranks=2, repeat=3, decide=0)
    # every round runs every configuration once; rounds in different orders
    rounds = [order[i : i + 4] for i in range(0, 12, 4)]
    assert all(sorted(r) == sorted(cfgs) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1
    by = {r["config"]: r for r in res["rows"]}
    assert by["parallel/dram/p1"]["measured_s"] == pytest.approx(0.52)  # the median
    assert by["parallel/dram/p1"]["spread"] == pytest.approx(0.08 / 0.52)
    assert res["best"] == "parallel/dram/p2" and res["advised"] == "parallel/dram/p1"
    assert res["advised_slowdown"] == pytest.approx(1.04)
    assert res["advised_within_5pct"] and res["advised_tied_with_best"]
    assert by["serial/dram/p1"]["within_20pct"] and not by["parallel/dram/p2"]["within_20pct"]
    summ = sweep.summarize([res, dict(res, advised_slowdown=1.2)])
    assert summ["advised_within_5pct"] == 1 and summ["advised_needed"] == 2
    assert not summ["advised_met"] and summ["advised_tied"] == 1
    assert summ["configs"] == 8 and not summ["predictions_met"]  # parallel/dram/p2 is +40%
    assert summ["predictions_within_20pct"] == 6


def test_sweep_readvises_when_the_load_moves(monkeypatch):
    from hetmem.flow import sweep

    s = specmod.parse(TINY)
    calls = []

    def fake_advise(*a, **k):
        calls.append(1)
        f = len(calls)  # each prediction round sees a slower machine
        return [
            {"config": c, "mode": c.split("/")[0], "tier": "dram", "ranks": 1, "reason": "r"}
            | {"iteration_s": f * t, "external_load": 0.0}
            for c, t in (("parallel/dram/p1", 0.6), ("serial/dram/p1", 1.0))
        ]

    monkeypatch.setattr(model, "advise", fake_advise)
    monkeypatch.setattr(runner, "run", lambda spec: {"iteration_s": 1.0})
    monkeypatch.setattr(sweep, "RELOAD", -1.0)  # any load counts as moved
    res = sweep.sweep(s, {}, max_ranks=1, repeat=3, decide=0)
    assert len(calls) == 3 and res["advised_rounds"] == 3
    assert res["round_inputs"] == [0, 1, 2] and len(res["advisor_inputs"]) == 3
    by = {r["config"]: r for r in res["rows"]}
    assert by["serial/dram/p1"]["predicted_runs_s"] == [1.0, 2.0, 3.0]
    assert by["serial/dram/p1"]["predicted_s"] == 2.0  # the median
    assert by["parallel/dram/p1"]["error"] == pytest.approx(1.2 - 1.0)
    assert res["advised"] == "parallel/dram/p1"
    monkeypatch.setattr(sweep, "RELOAD", 1e9)  # never moved: one prediction
    calls.clear()
    once = sweep.sweep(s, {}, max_ranks=1, repeat=3, decide=0)
    assert once["advised_rounds"] == 1 and once["round_inputs"] == [0, 0, 0]
    assert len(calls) == 1


def _tiny_figures(touch: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """In-process kernel and I/O figures of TINY at 1 and 2 ranks."""
    kt = {"writer": {1: 0.10, 2: 0.05}, "reader": {1: 0.20, 2: 0.12}}
    io = {
        f"dram/p{p}": {"put": 0.01 / p, "get": 0.02 / p, "put_touch": touch, "get_touch": touch}
        for p in (1, 2)
    }
    return kt, io


def test_run_profile_sets_the_level_from_a_serial_run(monkeypatch):
    s = specmod.parse(TINY)
    kt, io = _tiny_figures(touch=0.5)
    seen = []

    def fake_run(spec):
        seen.append((spec.mode, spec.tier, spec.writer.ranks))
        w = {"compute": 0.15, "io": 0.03, "wait": 0.0}
        r = {"compute": 0.30, "io": 0.04, "wait": 0.0}
        it = 0.15 + 0.03 + 0.04 + 0.30 + 0.01
        return {"iteration_s": it, "makespan_s": it * 3 * span, "writer": w, "reader": r}

    span = 1.0  # a run of 1.59 s: one is enough

    monkeypatch.setattr(runner, "run", fake_run)
    out = model.run_profile(s, ["dram", "file:/nowhere"], kt, io)
    # only profiled tiers run: one rank, then two ranks of their own
    assert seen == [("serial", "dram", 1), ("serial", "dram", 2)]
    span = 0.1  # short runs: PROFILE_RUNS of them, medians (the same figures here)
    seen.clear()
    kt2 = {"writer": {1: 0.10}, "reader": {1: 0.20}}
    io2 = {"dram/p1": {"put": 0.01, "get": 0.02, "put_touch": 0.0, "get_touch": 0.0}}
    got = model.run_profile(s, ["dram"], kt2, io2)["dram"]["runs"]
    assert got == model.PROFILE_RUNS and len(seen) == model.PROFILE_RUNS
    assert out["dram"]["put"] == pytest.approx(3.0) and out["dram"]["get"] == pytest.approx(2.0)
    # p2 from its own serial run (the fake gives the same phases at 2 ranks)
    assert io["dram/p2"]["put"] == pytest.approx(0.03) and io["dram/p2"]["put_touch"] == 0.0
    assert io["dram/p1"]["sync"] == pytest.approx(0.01)
    assert io["dram/p2"]["sync"] == pytest.approx(0.01)
    assert kt["writer"] == pytest.approx({1: 0.15, 2: 0.15})
    assert kt["reader"] == pytest.approx({1: 0.30, 2: 0.30})
    # the profiled serial one-rank configuration comes out as the run itself
    cal = _calib()
    cal["concurrency_now"] = {
        k: {"1": 1.0, "2": 1.0} for k in ("stencil", "poly", "io:dram", "sync")
    }
    p = model.predict(s, cal, kt, model.Config("serial", "dram", 1), io, load=0.0)
    assert p["iteration_s"] == pytest.approx(0.53)


def test_run_profile_brings_p_rank_runs_back_to_one_rank_busy(monkeypatch):
    # the simulation applies the slowdown of p ranks busy at once, so the
    # p-rank run's phases are divided by it (else counted twice)
    s = specmod.parse(TINY)
    kt, io = _tiny_figures(touch=0.0)

    def fake_run(spec):
        p = spec.writer.ranks
        w = {"compute": 0.10 / p * 1.5 ** (p - 1), "io": 0.02 / p * 2 ** (p - 1), "wait": 0.0}
        r = {"compute": 0.20 / p, "io": 0.02 / p, "wait": 0.0}
        it = sum(w[k] + r[k] for k in ("compute", "io")) + 0.005 * p
        return {"iteration_s": it, "makespan_s": 10.0, "writer": w, "reader": r}

    monkeypatch.setattr(runner, "run", fake_run)
    cal = {"concurrency_now": {"stencil": {"2": 1.5}, "poly": {"2": 1.0}, "io:dram": {"2": 2.0}}}
    model.run_profile(s, ["dram"], kt, io, cal)
    assert io["dram/p2"]["put"] == pytest.approx(0.01)  # 0.02 measured / 2.0
    assert io["dram/p2"]["get"] == pytest.approx(0.005)
    assert io["dram/p2"]["sync"] == pytest.approx(0.01)
    assert (s.writer.kernel, s.reader.kernel) == ("stencil", "poly")
    assert kt["writer"][2] == pytest.approx(0.05)  # 0.075 measured / 1.5
    assert kt["reader"][2] == pytest.approx(0.10)


def test_mixed_slowdown_reads_the_mix_at_hand():
    mix = {"w": {"1,0": 1.0, "1,1": 1.1, "2,2": 2.4}, "r": {"0,1": 1.0, "1,1": 1.3}}
    assert model.mixed_slowdown(mix, "w", ["w"]) == 1.0
    assert model.mixed_slowdown(mix, "w", ["w", "r"]) == pytest.approx(1.1)
    assert model.mixed_slowdown(mix, "r", ["w", "r"]) == pytest.approx(1.3)
    # a rank in I/O counts as one of the other side
    assert model.mixed_slowdown(mix, "w", ["w", ""]) == pytest.approx(1.1)
    assert model.mixed_slowdown(mix, "w", ["w", "w", "r", ""]) == pytest.approx(2.4)
    # ... or of this side where the other side is full (no "1,3" measured)
    assert model.mixed_slowdown(mix, "w", ["w", "r", "r", ""]) == pytest.approx(2.4)
    # mixes not measured, roles without a table, no table: None (fall back)
    assert model.mixed_slowdown(mix, "r", ["r", "r"]) is None
    assert model.mixed_slowdown({"w": {}}, "r", ["r"]) is None
    assert model.mixed_slowdown(None, "w", ["w"]) is None
    assert model.mixed_slowdown({"w": {"1,1": 0.7}}, "w", ["w", "r"]) == 1.0  # never faster


def test_model_takes_compute_slowdowns_from_the_mixed_probe():
    # k processes of one kind (concurrency_now) say two busy ranks slow
    # each other 1.5x; the spec's own writer and reader kernels, measured
    # together, do not slow each other at all: parallel mode follows the mix
    s = specmod.parse(TINY)
    cal = _calib()
    cal["concurrency_now"] = {
        k: {"1": 1.0, "2": 1.5, "3": 2.0, "4": 2.5} for k in ("stencil", "poly", "io:dram")
    }
    kt = {"writer": {1: 0.5}, "reader": {1: 0.4}}
    cfg = model.Config("parallel", "dram", 1)
    io = {"dram/p1": {"put": 0.0, "get": 0.0, "put_touch": 0.0, "get_touch": 0.0}}
    same = model.predict(s, cal, kt, cfg, io)["iteration_s"]
    cal["mix_now"] = {"1": {"w": {"1,0": 1.0, "1,1": 1.0}, "r": {"0,1": 1.0, "1,1": 1.0}}}
    mixed = model.predict(s, cal, kt, cfg, io)["iteration_s"]
    # no I/O, no contention: a two-stage pipeline, fill + 3 periods of 0.5
    assert mixed == pytest.approx((0.5 * 3 + 0.4) / 3)
    assert same > mixed * 1.2
    # the table of another rank count is not used for p = 1
    cal["mix_now"] = {"2": cal["mix_now"]["1"]}
    assert model.predict(s, cal, kt, cfg, io)["iteration_s"] == pytest.approx(same)


def test_mix_now_measures_every_mix_of_the_spec_kernels():
    from hetmem.flow import calibrate

    got = calibrate.mix_now(("stencil", 64, 2), ("poly", 2000, 4), 2, seconds=0.02)
    keys = {f"{a},{b}" for a in range(3) for b in range(3)} - {"0,0"}
    assert set(got["w"]) == {k for k in keys if not k.startswith("0,")}
    assert set(got["r"]) == {k for k in keys if not k.endswith(",0")}
    assert got["w"]["1,0"] == 1.0 and got["r"]["0,1"] == 1.0
    assert all(v > 0 for t in got.values() for v in t.values())
    # a component without a kernel has no table and no mixes with it
    only = calibrate.mix_now(("none", 0, 0), ("poly", 2000, 4), 1, seconds=0.02)
    assert set(only) == {"r"} and set(only["r"]) == {"0,1"}


def test_replay_makes_the_advisors_predictions_again():
    # what advise() records is enough to make every prediction again
    s = specmod.parse(TINY)
    cal = _calib()
    inputs = {
        "load": 0.5,
        "ktimes": {"writer": {"1": 0.3, "2": 0.2}, "reader": {"1": 0.2, "2": 0.1}},
        "io": {
            f"dram/p{p}": {"put": 0.01, "get": 0.02, "put_touch": 0.0, "get_touch": 0.0}
            for p in (1, 2)
        },
        "concurrency_now": {
            k: {"1": 1.0, "2": 1.1, "3": 1.6, "4": 2.2} for k in ("stencil", "poly", "io:dram")
        },
        "mix_now": {"1": {"w": {"1,0": 1.0, "1,1": 1.3}, "r": {"0,1": 1.0, "1,1": 1.2}}},
    }
    labels = ["serial/dram/p1", "parallel/dram/p1", "parallel/dram/p2", "serial/file:/x/p1"]
    got = model.replay(s, cal, inputs, labels)
    direct = dict(cal, concurrency_now=inputs["concurrency_now"], mix_now=inputs["mix_now"])
    kt = {"writer": {1: 0.3, 2: 0.2}, "reader": {1: 0.2, 2: 0.1}}
    cfgs = [("serial", "dram", 1), ("parallel", "dram", 1), ("parallel", "dram", 2)]
    cfgs.append(("serial", "file:/x", 1))
    for label, (m, t, p) in zip(labels, cfgs, strict=True):
        want = model.predict(s, direct, kt, model.Config(m, t, p), inputs["io"], 0.5)
        assert got[label] == pytest.approx(want["iteration_s"])
    # the mixed table is part of what is replayed: without it, parallel p1 changes
    bare = model.replay(s, cal, dict(inputs, mix_now=None), labels)
    assert bare["parallel/dram/p1"] != pytest.approx(got["parallel/dram/p1"])
    assert bare["serial/dram/p1"] == pytest.approx(got["serial/dram/p1"])


def test_io_overlap_slows_only_io_that_meets_the_other_sides_io():
    s = specmod.parse(TINY)
    cal = _calib()
    cal["concurrency_now"] = {k: {"1": 1.0, "2": 1.0} for k in ("stencil", "poly", "io:dram")}
    kt = {"writer": {1: 0.01}, "reader": {1: 0.01}}  # I/O-bound: the two I/Os overlap
    io = {"dram/p1": {"put": 0.1, "get": 0.1, "put_touch": 0.0, "get_touch": 0.0}}
    par, ser = model.Config("parallel", "dram", 1), model.Config("serial", "dram", 1)
    base_p = model.predict(s, cal, kt, par, io)["iteration_s"]
    base_s = model.predict(s, cal, kt, ser, io)["iteration_s"]
    io["dram/p1"]["overlap"] = {"wi": 1.5, "ri": 1.0}
    slow_p = model.predict(s, cal, kt, par, io)["iteration_s"]
    # the put costs 1.5x only while the read runs beside it
    assert base_p * 1.1 < slow_p < base_p * 1.5
    assert model.predict(s, cal, kt, ser, io)["iteration_s"] == pytest.approx(base_s)
    # compute-bound: the puts meet the reader's kernel, not its read
    kt2 = {"writer": {1: 1.0}, "reader": {1: 1.0}}
    io2 = {"dram/p1": {"put": 0.01, "get": 0.01, "put_touch": 0.0, "get_touch": 0.0}}
    a = model.predict(s, cal, kt2, par, io2)["iteration_s"]
    io2["dram/p1"]["overlap"] = {"wi": 1.5, "ri": 1.5}
    assert model.predict(s, cal, kt2, par, io2)["iteration_s"] < a * 1.01


def test_io_overlap_profile_compares_cpu_seconds_of_the_bare_io(monkeypatch):
    s = specmod.parse(TINY)
    seen = []

    def fake_run(spec):
        seen.append((spec.mode, spec.tier, spec.writer.ranks, spec.writer.kernel))
        assert spec.reader.kernel == "none" and spec.iterations == 3
        par = spec.mode == "parallel"
        w = {"io": 9.0, "io_cpu": 0.012 if par else 0.010}
        r = {"io": 9.0, "io_cpu": 0.004 if par else 0.005}  # never below 1
        return {"writer": w, "reader": r}

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(model, "_OVERLAP", {})
    io = {"dram/p1": {"put": 1.0}, "dram/p2": {"put": 1.0}}
    out = model.io_overlap_profile(s, io)
    assert sorted(seen) == sorted(
        (m, "dram", p, "none") for m in ("serial", "parallel") for p in (1, 2)
    )
    assert out["dram/p1"] == pytest.approx({"wi": 1.2, "ri": 1.0})
    assert io["dram/p2"]["overlap"] == pytest.approx({"wi": 1.2, "ri": 1.0})
    assert io["dram/p1"]["put"] == 1.0
    # CPU seconds do not move with other load: asked again, no new runs
    seen.clear()
    model.io_overlap_profile(s, {"dram/p1": {}})
    assert seen == []


def test_replay_module_scores_a_saved_sweep_again(tmp_path, capsys):
    from hetmem.flow import replay

    cal = _calib()
    io = {"put": 0.02, "get": 0.02, "put_touch": 0.0, "get_touch": 0.0}
    inputs = {
        "load": 0.0,
        "ktimes": {"writer": {"1": 0.001}, "reader": {"1": 0.001}},
        "io": {"dram/p1": dict(io, overlap={"wi": 2.0, "ri": 2.0}, cpu={"wi": 0.5, "ri": 0.5})},
        "concurrency_now": {"io:dram": {"1": 1.0, "2": 1.0}},
    }
    rows = [
        {
            "config": "serial/dram/p1",
            "measured_s": 0.05,
            "slowdown": 1.0,
            "spread": 0.1,
            "measured_runs_s": [0.05] * 3,
        },
        {
            "config": "parallel/dram/p1",
            "measured_s": 0.06,
            "slowdown": 1.2,
            "spread": 0.1,
            "measured_runs_s": [0.06] * 3,
        },
    ]
    res = {"spec": "writer-bound", "rows": rows, "tied_with_best": []}
    data = {"specs": [dict(res, advisor_inputs=[inputs], round_inputs=[0, 0, 0])]}
    results, summ = replay.evaluate(data, cal)
    by = {r["config"]: r for r in results[0]["rows"]}
    spec = specmod.load("writer-bound")
    want = model.replay(spec, cal, inputs, ["serial/dram/p1", "parallel/dram/p1"])
    assert by["parallel/dram/p1"]["predicted_s"] == pytest.approx(want["parallel/dram/p1"])
    assert by["serial/dram/p1"]["error"] == pytest.approx(want["serial/dram/p1"] / 0.05 - 1)
    assert summ["specs"] == 1 and summ["configs"] == 2
    # without the overlap factor parallel mode looks cheaper; serial is unchanged
    bare, _ = replay.evaluate(data, cal, ("overlap",))
    bb = {r["config"]: r for r in bare[0]["rows"]}
    assert bb["parallel/dram/p1"]["predicted_s"] < by["parallel/dram/p1"]["predicted_s"]
    assert bb["serial/dram/p1"]["predicted_s"] == pytest.approx(by["serial/dram/p1"]["predicted_s"])
    # without the CPU share parallel mode pays its I/O in full
    full, _ = replay.evaluate(data, cal, ("cpu",))
    fb = {r["config"]: r for r in full[0]["rows"]}
    assert fb["parallel/dram/p1"]["predicted_s"] > by["parallel/dram/p1"]["predicted_s"]
    assert fb["serial/dram/p1"]["predicted_s"] == pytest.approx(by["serial/dram/p1"]["predicted_s"])
    assert "cpu" in inputs["io"]["dram/p1"]  # the saved inputs are left alone
    # the advised configuration is the one predicted fastest; its slowdown is measured
    adv = min(results[0]["rows"], key=lambda r: r["predicted_s"])
    assert results[0]["advised"] == adv["config"]
    assert results[0]["advised_slowdown"] == adv["slowdown"]
    # the command line, on the same data
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps(data))
    c = tmp_path / "cal.json"
    c.write_text(json.dumps(cal))
    assert replay.main([str(f), "--calibration", str(c)]) == 0
    assert "advised within 5% of the best:" in capsys.readouterr().out
    with pytest.raises(ValueError):
        replay.evaluate({"specs": [res]}, cal)  # a sweep without advisor inputs


def test_parallel_predictions_take_the_work_at_its_cpu_share(monkeypatch):
    # the serial profile run's writer kernel took 0.10 s on the clock but
    # 0.08 s on a CPU (it waited after each hand-off); parallel mode has no
    # hand-offs, so its prediction takes the 0.08; serial keeps the run's 0.10
    s = specmod.parse(TINY)
    kt = {"writer": {1: 0.05}, "reader": {1: 0.02}}
    io = {"dram/p1": {"put": 0.01, "get": 0.01, "put_touch": 0.0, "get_touch": 0.0}}

    def fake_run(spec):
        w = {"compute": 0.10, "io": 0.01, "wait": 0.0, "compute_cpu": 0.08, "io_cpu": 0.01}
        r = {"compute": 0.02, "io": 0.01, "wait": 0.0, "compute_cpu": 0.02, "io_cpu": 0.004}
        return {"iteration_s": 0.14, "makespan_s": 10.0, "writer": w, "reader": r}

    monkeypatch.setattr(runner, "run", fake_run)
    model.run_profile(s, ["dram"], kt, io)
    assert io["dram/p1"]["cpu"] == pytest.approx({"w": 0.8, "wi": 1.0, "ri": 0.5, "r": 1.0})
    cal = _calib()
    cal["concurrency_now"] = {k: {"1": 1.0, "2": 1.0} for k in ("stencil", "poly", "io:dram")}
    ser = model.predict(s, cal, kt, model.Config("serial", "dram", 1), io)
    assert ser["iteration_s"] == pytest.approx(0.14)
    par = model.predict(s, cal, kt, model.Config("parallel", "dram", 1), io)
    # pipeline of 3 steps: writer 0.08 + 0.01 binds, reader 0.005 + 0.02
    assert par["iteration_s"] == pytest.approx((3 * 0.09 + 0.025) / 3)
    assert par["writer_compute_s"] == pytest.approx(0.08)
    # every rank count of a tier takes the one-rank run's share
    io2 = {
        f"dram/p{p}": {"put": 0.01, "get": 0.01, "put_touch": 0.0, "get_touch": 0.0} for p in (1, 2)
    }
    model.run_profile(s, ["dram"], {"writer": {1: 0.05, 2: 0.03}, "reader": {1: 0.02}}, io2)
    assert io2["dram/p2"]["cpu"] == io2["dram/p1"]["cpu"] == io["dram/p1"]["cpu"]
    ph = {"io": 0.01, "io_cpu": 0.01, "compute": 0.02, "compute_cpu": 0.02}
    runs = [{"writer": dict(ph, compute=0.15, compute_cpu=0.10), "reader": dict(ph)}]
    assert model._cpu_share(runs)["w"] == pytest.approx(0.10 / 0.15)
    # never below half (a run that was mostly descheduled says little)
    runs[0]["writer"]["compute_cpu"] = 0.01
    assert model._cpu_share(runs)["w"] == 0.5


def test_replay_decides_near_ties_with_the_recorded_runoff(monkeypatch):
    from hetmem.flow import replay

    near = {"serial/dram/p1": 0.050, "parallel/dram/p1": 0.051}  # within 5%
    monkeypatch.setattr(model, "replay", lambda *a, **k: dict(near))
    rows = [
        {"config": c, "measured_s": m, "slowdown": m / 0.05, "spread": 0.0,
         "measured_runs_s": [m] * 3}
        for c, m in (("serial/dram/p1", 0.06), ("parallel/dram/p1", 0.05))
    ]  # fmt: skip
    ran = {"load": 0.0, "runoff": {"serial/dram/p1": [0.07] * 3, "parallel/dram/p1": [0.05] * 3}}
    res = {"spec": "writer-bound", "rows": rows, "tied_with_best": []}
    data = {"specs": [dict(res, advisor_inputs=[ran], round_inputs=[0, 0])]}
    decided, summ = replay.evaluate(data, _calib())
    assert decided[0]["advised"] == "parallel/dram/p1" and summ["advised_within_5pct"] == 1
    plain, summ = replay.evaluate(data, _calib(), ("runoff",))
    assert plain[0]["advised"] == "serial/dram/p1" and summ["advised_within_5pct"] == 0
    assert ran["runoff"]  # the saved inputs are left alone


def test_cli_sweep_writes_the_json_it_prints(monkeypatch, tmp_path, capsys):
    from hetmem import cli
    from hetmem.flow import calibrate, sweep

    got = {
        "spec": "small-io",
        "rows": [{"config": "serial/dram/p1", "error": 0.1, "spread": 0.0}],
        "advised_slowdown": 1.0,
        "advised_tied_with_best": True,
        "advisor_inputs": [{"load": 0.0}],
    }
    monkeypatch.setattr(calibrate, "load", lambda: _calib())
    monkeypatch.setattr(sweep, "sweep", lambda *a, **k: dict(got))
    out = tmp_path / "s.json"
    argv = ["flow", "sweep", "small-io", "--repeat", "2", "--decide", "3", "--json", "-o", str(out)]
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    assert printed["specs"][0]["advisor_inputs"] == [{"load": 0.0}]
    assert printed["summary"]["specs"] == 1
    assert printed["schema_version"] == 3
    assert printed["plan"] == {
        "kind": "named",
        "specs": ["small-io"],
        "repeat": 2,
        "readvise": False,
        "decide": 3,
        "max_ranks": 2,
    }
    assert printed["summary"]["target"]["pass"] is True
    assert printed["summary"]["wall_s"] >= printed["summary"]["calibration_s"] >= 0


def test_parallel_reference_sets_parallel_modes_level(monkeypatch):
    # short parallel runs of the spec on its own tier, one per rank count;
    # their measured / modelled ratio scales every parallel configuration of
    # that rank count, on every tier, and nothing else
    s = specmod.parse(TINY)
    kt, io = _tiny_figures(touch=0.0)
    io["file:/x/p1"] = dict(io["dram/p1"])
    cal = _calib()
    seen = []
    measured = {1: 0.5, 2: 100.0}  # p2: far off the model, kept within the range

    def fake_run(spec):
        seen.append((spec.mode, spec.tier, spec.writer.ranks))
        it = measured[spec.writer.ranks]
        w = {"compute": 0.1, "io": 0.01, "wait": 0.0}
        return {"iteration_s": it, "makespan_s": 2.0, "writer": w, "reader": w}

    monkeypatch.setattr(runner, "run", fake_run)
    ref = model.parallel_reference(s, ["dram", "file:/x"], kt, io, cal, 0.0)
    # PARALLEL_REF_RUNS runs per rank count, though one run passes PROFILE_S
    n = model.PARALLEL_REF_RUNS
    assert seen == [("parallel", "dram", 1)] * n + [("parallel", "dram", 2)] * n
    assert ref["ranks"]["1"]["tier"] == ref["ranks"]["2"]["tier"] == "dram"
    plain = {
        (m, t, p): model.predict(s, cal, kt, model.Config(m, t, p), io)["iteration_s"]
        for m in ("serial", "parallel")
        for t in ("dram", "file:/x")
        for p in (1, 2)
        if f"{t}/p{p}" in io
    }
    r1 = ref["ranks"]["1"]
    assert r1["measured_s"] == 0.5
    assert r1["predicted_s"] == pytest.approx(plain[("parallel", "dram", 1)])
    assert r1["factor"] == pytest.approx(0.5 / plain[("parallel", "dram", 1)])
    assert ref["ranks"]["2"]["factor"] == model.PARALLEL_REF_RANGE[1]
    scaled = dict(cal, parallel_ref=ref)
    for (m, t, p), base in plain.items():
        got = model.predict(s, scaled, kt, model.Config(m, t, p), io)
        f = ref["ranks"][str(p)]["factor"] if m == "parallel" else 1.0
        assert got["iteration_s"] == pytest.approx(base * f), (m, t, p)
        assert got["parallel_ref_factor"] == (f if m == "parallel" else None)
    # replay makes the same predictions from the saved inputs
    inputs = {
        "load": 0.0,
        "ktimes": {r: {str(p): v for p, v in x.items()} for r, x in kt.items()},
        "io": io,
        "concurrency_now": None,
        "mix_now": None,
        "parallel_ref": ref,
    }
    again = model.replay(s, cal, inputs, ["parallel/file:/x/p1", "serial/dram/p2"])
    assert again["parallel/file:/x/p1"] == pytest.approx(
        r1["factor"] * plain[("parallel", "file:/x", 1)]
    )
    assert again["serial/dram/p2"] == pytest.approx(plain[("serial", "dram", 2)])
    # a spec whose own tier was not profiled takes the first profiled one
    seen.clear()
    model.parallel_reference(
        s.with_config(tier="file:/x"), ["file:/x", "dram"], kt, {"dram/p1": io["dram/p1"]}, cal, 0.0
    )
    assert seen == [("parallel", "dram", 1)] * n
    # the run checks the configuration the model ranks first: here the
    # other tier's, whose profiled I/O is cheaper
    seen.clear()
    io2 = {"dram/p1": dict(io["dram/p1"]), "file:/x/p1": dict(io["dram/p1"], put=1e-4, get=1e-4)}
    ref = model.parallel_reference(s, ["dram", "file:/x"], kt, io2, cal, 0.0)
    assert seen == [("parallel", "file:/x", 1)] * n and ref["ranks"]["1"]["tier"] == "file:/x"


def test_parallel_reference_stands_against_one_slow_run(monkeypatch):
    # ranks sharing two cores run bimodally: a run of 0.6 s would end the
    # reference after two (PROFILE_S), whose median is their mean; the
    # third run leaves the slow one out
    s = specmod.parse(TINY)
    kt, io = _tiny_figures(touch=0.0)
    del io["dram/p2"]
    times = iter([0.9, 0.6, 0.6, 0.6, 0.6])

    def fake_run(spec):
        it = next(times)
        w = {"compute": 0.1, "io": 0.01, "wait": 0.0}
        return {"iteration_s": it, "makespan_s": 0.6, "writer": w, "reader": w}

    monkeypatch.setattr(runner, "run", fake_run)
    ref = model.parallel_reference(s, ["dram"], kt, io, _calib(), 0.0)
    assert ref["ranks"]["1"]["measured_s"] == 0.6
    assert next(times) == 0.6 and next(times) == 0.6  # three runs, no more


def test_adios_comparison_leaves_nothing_in_tmp():
    # ADIOS2's BP5 reader writes /tmp/NAME_PID_profiling.json whatever the
    # folder of its stream: 96 of them had piled up in this machine's /tmp
    from hetmem.flow import bench

    py = bench.adios_python()
    if py is None:
        pytest.skip("no interpreter with adios2")
    before = set(Path("/tmp").glob("*_profiling.json"))
    res = bench.run_adios(py, "BP5", 2, 1 << 16, 2)
    assert "error" not in res and res["get_s"] > 0, res
    assert set(Path("/tmp").glob("*_profiling.json")) <= before
