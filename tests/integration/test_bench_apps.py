# SPDX-License-Identifier: BSD-3-Clause
"""hetmem bench apps end to end: options, real hpcc and LAMMPS runs read
back, and a tiny run of the suite in dram and cache modes."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from conftest import needs_pager, run_hetmem
from hetmem.bench import apps_programs as progs

needs_hpcc = pytest.mark.skipif(
    shutil.which("hpcc") is None, reason="Debian package hpcc not installed (make deps)"
)
needs_lammps = pytest.mark.skipif(
    shutil.which("lmp") is None or not progs.MELT_INPUT.is_file(),
    reason="Debian packages lammps and lammps-examples not installed (make deps)",
)


@pytest.mark.parametrize(
    "opts",
    [
        ["--budgets", "25"],
        ["--budgets", "25%,150%"],
        ["--budgets", "half"],
        ["--apps", "hpcc,nwchem"],
        ["--modes", "cache,turbo"],
        ["--footprint", "1MiB"],
        ["--footprint", "lots"],
        ["--repeat", "0"],
        ["--timeout", "0"],
    ],
)
def test_bad_options_are_one_line_errors(opts: list[str], tmp_path: Path) -> None:
    proc = run_hetmem("bench", "apps", *opts, "-o", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and opts[0] in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


def _run_in(tmp_path: Path, app: progs.App, params: dict[str, int]) -> dict:
    argv = app.prepare(tmp_path, params)
    proc = run_hetmem("run", "--mode", "dram", "--", *argv, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return app.read(tmp_path)


@needs_hpcc
def test_hpcc_output_is_read_and_compared(tmp_path: Path) -> None:
    app = progs.APPS["hpcc"]
    params = progs.hpcc_size(1 << 20)  # N = 320
    out = _run_in(tmp_path, app, params)
    s = out["summary"]
    assert out["failures"] == [], out["failures"]
    assert s["HPL_N"] == 320 and s["Success"] == 1
    assert s["RandomAccess_N"] * 8 == params["ra_table_bytes"]
    assert out["checks"]["ra_passed"] == 6 and out["checks"]["stream_validates"] == 2
    assert out["checks"]["residual_passed"] >= 2 and out["fft_max_err"] < 1e-12
    assert app.compare(out, copy.deepcopy(out)) == []
    other = copy.deepcopy(out)
    other["summary"]["HPL_Xnorm1"] *= 1.001
    other["checks"]["stream_validates"] = 1
    diff = app.compare(out, other)
    assert any("HPL_Xnorm1" in d for d in diff) and any("stream_validates" in d for d in diff)
    text = (tmp_path / "hpccoutf.txt").read_text().replace("(passed)", "(failed)", 1)
    failed = progs.parse_hpcc(text)
    assert failed["failures"] == ["ra_failed 1"]
    assert app.compare(out, failed) == ["ra_failed 1"]


@needs_lammps
def test_lammps_output_is_read_and_compared(tmp_path: Path) -> None:
    app = progs.APPS["lammps"]
    params = {"nx": 6, "atoms": 864, "steps": 20, "footprint": 0}
    out = _run_in(tmp_path, app, params)
    assert out["failures"] == [] and out["atoms"] == 864 and out["steps"] == 20
    assert set(out["thermo"]) >= {"Step", "Temp", "E_pair", "TotEng", "Press"}
    assert out["thermo"]["Step"] == 20
    assert app.compare(out, copy.deepcopy(out)) == []
    other = copy.deepcopy(out)
    other["thermo"]["TotEng"] += 1e-3
    assert [d.split()[0] for d in app.compare(out, other)] == ["TotEng"]
    assert progs.parse_lammps("LAMMPS (7 Jan 2022)\nERROR: Unknown command\n")["failures"]


@needs_pager
@needs_hpcc
@needs_lammps
def test_suite_runs_dram_and_cache_with_the_same_output(tmp_path: Path) -> None:
    out = tmp_path / "res"
    proc = run_hetmem(
        "bench", "apps", "--footprint", "20MiB", "--modes", "cache", "--budgets", "50%",
        "--storage", str(tmp_path), "--timeout", "120", "-o", str(out), "--json", timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1 and data["kind"] == "bench-apps"
    assert data == json.loads((out / "apps.json").read_text())
    for name in ("hpcc", "lammps"):
        modes = data["apps"][name]["budgets"]["50"]["modes"]
        assert modes["dram"]["ok"] and modes["cache"]["ok"], modes
        assert modes["cache"]["efficiency"] > 0
        assert data["apps"][name]["budgets"]["50"]["budget_bytes"] == pytest.approx(
            data["apps"][name]["dram_rss_bytes"] / 2, abs=4096
        )
    assert [t["pass"] for t in data["targets"]] == [True, True]
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert sorted((r["case"], r["mode"]) for r in runs) == [
        ("hpcc", "cache"), ("hpcc", "dram"), ("lammps", "cache"), ("lammps", "dram"),
    ]  # fmt: skip
    assert all(r["error"] == "" and r["multiple"] == 2.0 for r in runs)
    rep = run_hetmem("report", str(out), "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    cases = {(r["case"], r["mode"]) for r in json.loads(rep.stdout)["efficiency"]}
    assert ("hpcc", "cache") in cases and ("lammps", "cache") in cases
    assert not list(tmp_path.glob("hetmem-*"))  # no backing file left behind


@pytest.mark.skipif(shutil.which("bwa") is None, reason="Debian package bwa not installed")
def test_bwa_output_is_read_and_compared(tmp_path: Path) -> None:
    app = progs.APPS["bwa"]
    params = progs.bwa_size(4 << 20)  # 1 Mbp, 3333 reads
    work = tmp_path / "runs" / "bwa" / "dram-0"
    work.mkdir(parents=True)
    out = _run_in(work, app, params)
    assert out["failures"] == [] and out["records"] == params["reads"]
    assert out["mapped"] >= 0.99 * params["reads"]  # reads of its own reference
    assert app.compare(out, copy.deepcopy(out)) == []
    # the input is made once per size and shared: a second run reuses it
    (inputs,) = (tmp_path / "runs" / "bwa").glob("input-*")
    stamp = (inputs / "ref.fa.bwt").stat().st_mtime_ns
    again = tmp_path / "runs" / "bwa" / "cache-50-0"
    again.mkdir()
    assert _run_in(again, app, params)["sam_sha256"] == out["sam_sha256"]
    assert (inputs / "ref.fa.bwt").stat().st_mtime_ns == stamp
    # a changed alignment is a difference
    sam = (work / "out.sam").read_bytes().replace(b"\t0\tchr1\t", b"\t0\tchr1\t1", 1)
    assert app.compare(out, progs.parse_sam(sam)) == [
        "the alignments differ from dram's (SAM digest)"
    ]
    assert progs.parse_sam(b"@HD\tVN:1.6\n")["failures"] == ["bwa wrote no alignment"]
