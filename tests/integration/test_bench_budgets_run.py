# SPDX-License-Identifier: BSD-3-Clause
"""hetmem bench budgets end to end, small: every mode at two budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import needs_pager, run_hetmem
from hetmem.bench import exit_status

pytestmark = needs_pager


def test_two_budgets_of_one_workload(tmp_path: Path) -> None:
    out = tmp_path / "b"
    proc = run_hetmem("bench", "budgets", "--footprint", "64MiB", "--budgets", "25%,50%",
                      "--variants", "sparse", "--rounds", "1", "--modes", "dram,cache,flat",
                      "--storage", str(tmp_path), "-o", str(out), "--json")  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    d = json.loads(proc.stdout)
    assert d["kind"] == "bench-budgets" and d["footprint"] == 64 << 20
    (w,) = d["workloads"]
    assert [p["budget"] for p in w["budgets"]] == [16 << 20, 32 << 20]
    for p in w["budgets"]:
        assert set(p["modes"]) == {"dram", "cache", "flat"}, p
        assert p["modes"]["cache"]["vs_dram"]["value"] > 0
    assert proc.returncode == exit_status(d["targets"])
    assert (out / "bars.svg").read_text().lstrip().startswith("<svg")
    assert json.loads((out / "budgets.json").read_text())["targets"] == d["targets"]


def test_threshold_reaches_the_profile_and_the_runs(tmp_path: Path) -> None:
    # sparse's arrays are whole MiBs; a 512 KiB threshold is asked for and
    # must be what the profile and every tiered run used
    out = tmp_path / "b"
    proc = run_hetmem("bench", "budgets", "--footprint", "64MiB", "--budgets", "25%",
                      "--variants", "sparse", "--rounds", "1", "--modes", "dram,cache,flat",
                      "--threshold", "512K", "--storage", str(tmp_path), "-o", str(out),
                      "--json")  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["threshold"] == 512 << 10
    (session,) = [p for p in out.iterdir() if p.is_dir()]
    prof = sorted((session / "profile").glob("run.prof.*"))
    assert prof and json.loads(prof[0].read_text().splitlines()[0])["threshold"] == 512 << 10
    for mode in ("cache", "flat"):
        stats = [json.loads(x) for x in (session / "logs").glob(f"{mode}*.stats.json")
                 for x in [x.read_text()]]  # fmt: skip
        assert stats and all(s["threshold"] == 512 << 10 for s in stats), mode


def test_bad_budget_is_one_line(tmp_path: Path) -> None:
    proc = run_hetmem("bench", "budgets", "--budgets", "150%", "-o", str(tmp_path / "b"))
    assert proc.returncode == 2 and "--budgets" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "b").exists()


@pytest.mark.parametrize("value", ["lots", "0", "100"])
def test_bad_threshold_is_one_line(tmp_path: Path, value: str) -> None:
    # refused before any run: a bad size, or less than a page
    proc = run_hetmem("bench", "budgets", "--threshold", value, "-o", str(tmp_path / "b"))
    assert proc.returncode == 2 and "--threshold" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "b").exists()
