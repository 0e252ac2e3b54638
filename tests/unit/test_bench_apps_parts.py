# SPDX-License-Identifier: BSD-3-Clause
"""hetmem bench apps: sizing, input files, option parsing, targets."""

from __future__ import annotations

import math

import pytest

from hetmem.bench import apps
from hetmem.bench import apps_programs as progs
from hetmem.errors import EnvironmentProblem, UsageError

MIB = 1 << 20


@pytest.mark.parametrize("footprint", [16 * MIB, 32 * MIB, 256 * MIB, 1536 * MIB, 3 << 30])
def test_hpcc_n_is_the_largest_block_multiple_within_the_footprint(footprint: int) -> None:
    p = progs.hpcc_size(footprint)
    n = p["N"]
    assert n % progs.HPCC_NB == 0
    assert p["footprint"] == n * n * 8 <= footprint
    assert (n + progs.HPCC_NB) ** 2 * 8 > footprint
    # within one block row and column of the request
    assert p["footprint"] > footprint * (1 - 2 * progs.HPCC_NB / n)
    table = p["ra_table_bytes"]  # RandomAccess's: a power of two, 50-100% of the matrix
    assert table & (table - 1) == 0 and p["footprint"] / 2 < table <= p["footprint"]


def test_hpcc_input_file_has_the_problem_size_on_line_6() -> None:
    lines = progs.hpcc_input(5760).splitlines()
    assert len(lines) == 36
    assert lines[5].split()[0] == "5760"
    assert lines[7].split()[0] == str(progs.HPCC_NB)
    assert [lines[10].split()[0], lines[11].split()[0]] == ["1", "1"]  # P x Q = 1 x 1
    assert lines[31].startswith("#####")  # line 32: hpcc's separator


@pytest.mark.parametrize("footprint", [32 * MIB, 256 * MIB, 1536 * MIB])
def test_lammps_box_holds_the_footprint_in_atoms(footprint: int) -> None:
    p = progs.lammps_size(footprint)
    nx = p["nx"]
    assert p["atoms"] == 4 * nx**3
    want = footprint / progs.LAMMPS_BYTES_PER_ATOM / 4
    assert abs(nx - want ** (1 / 3)) <= 0.5
    assert math.isclose(p["footprint"], footprint, rel_tol=3.5 / nx)


def test_lammps_input_makes_box_and_run_length_variables() -> None:
    example = "lattice fcc 0.8442\nregion\t\tbox block 0 10 0 10 0 10\nthermo 50\nrun\t\t250\n"
    text = progs.lammps_input(example)
    assert "region\t\tbox block 0 ${nx} 0 ${nx} 0 ${nx}" in text
    assert "run\t\t${steps}" in text and "250" not in text
    assert "lattice fcc 0.8442" in text
    with pytest.raises(EnvironmentProblem):
        progs.lammps_input("units lj\nrun 10\n")


def test_budgets_parse_as_percentages() -> None:
    assert apps.parse_budgets("50%,25%, 25%") == [25.0, 50.0]
    assert apps.parse_budgets("12.5%") == [12.5]
    for bad in ("25", "0%", "100%", "150%", "x%", ",", "-5%"):
        with pytest.raises(UsageError, match="--budgets"):
            apps.parse_budgets(bad)


def test_rounds_rotate_the_modes() -> None:
    modes = ["cache", "swap", "flat", "hybrid"]
    assert apps.rotate(modes, 0) == modes
    assert apps.rotate(modes, 1) == ["swap", "flat", "hybrid", "cache"]
    assert apps.rotate(modes, 4) == modes
    assert apps.rotate([], 3) == []


def _rec(mode: str, t: float, error: str = "") -> dict[str, object]:
    return {"mode": mode, "wall_s": t, "error": error, "error_kind": "output" if error else ""}


def test_summary_gives_efficiency_and_ratio_to_swap() -> None:
    recs = [_rec("dram", 10.0), _rec("cache", 20.0), _rec("cache", 30.0), _rec("swap", 50.0)]
    s = apps.summarize(recs, ["dram", "cache", "swap", "flat"])
    assert s["cache"]["time_s"] == 25.0
    assert s["cache"]["efficiency"] == pytest.approx(0.4)
    assert s["cache"]["vs_swap"] == pytest.approx(2.0)
    assert s["flat"]["ok"] is False and s["flat"]["runs"] == 0
    bad = apps.summarize([_rec("dram", 10.0), _rec("cache", 5.0, "output differs")], ["cache"])
    assert bad["cache"]["ok"] is False and bad["cache"]["time_s"] is None


def test_targets_judge_cache_against_swap_and_placement_against_cache() -> None:
    modes = ["dram", "cache", "swap", "flat", "hybrid"]
    recs = [_rec("dram", 10.0), _rec("cache", 20.0), _rec("swap", 40.0), _rec("flat", 25.0),
            _rec("hybrid", 18.0)]  # fmt: skip
    res = {"dram_rss_bytes": 1, "budgets": {"25": {"modes": apps.summarize(recs, modes)}}}
    t = {x["target"].split(":")[0]: x for x in apps.evaluate({"hpcc": res}, modes)}
    assert t["1. hpcc"]["pass"] is True
    assert t["2. hpcc at 25%"]["measured"] == pytest.approx(2.0)
    assert t["2. hpcc at 25%"]["pass"] is True
    assert t["3. hpcc at 25%"]["measured"] == pytest.approx(20 / 18)
    recs[-1] = _rec("hybrid", 18.0, "output differs from dram: TotEng")
    res = {"dram_rss_bytes": 1, "budgets": {"25": {"modes": apps.summarize(recs, modes)}}}
    t = {x["target"].split(":")[0]: x for x in apps.evaluate({"hpcc": res}, modes)}
    assert t["1. hpcc"]["pass"] is False and "hybrid at 25%" in t["1. hpcc"]["detail"]
    assert t["3. hpcc at 25%"]["pass"] is False  # flat alone: 25 s > cache's 20 s


def test_placed_against_cache_is_judged_with_the_spread() -> None:
    modes = ["dram", "cache", "hybrid"]

    def target3(cache: list[float], hybrid: list[float]) -> dict[str, object]:
        recs = [_rec("dram", 10.0)] + [_rec("cache", x) for x in cache]
        recs += [_rec("hybrid", x) for x in hybrid]
        res = {"dram_rss_bytes": 1, "budgets": {"50": {"modes": apps.summarize(recs, modes)}}}
        t = {x["target"].split(":")[0]: x for x in apps.evaluate({"hpcc": res}, modes)}
        return t["3. hpcc at 50%"]

    # hpcc4: hybrid run as cache mode, 0.999 by medians, a tie in the noise
    tie = target3([126.1, 125.1, 150.3], [126.3, 125.4, 135.9])
    assert tie["measured"] == pytest.approx(126.1 / 126.3)
    assert tie["pass"] is True and "within the noise" in str(tie["detail"])
    lo, hi = tie["interval"]  # type: ignore[misc]
    assert lo < 1.0 < hi
    # cache faster in every run, beyond the noise: missed
    slow = target3([100.0, 101.0, 102.0], [120.0, 121.0, 122.0])
    assert slow["pass"] is False and slow["interval"][1] < 1.0  # type: ignore[index]
    # faster placed mode: met, no noise note
    fast = target3([120.0, 121.0, 122.0], [100.0, 101.0, 102.0])
    assert fast["pass"] is True and "within the noise" not in str(fast["detail"])


def test_swap_oom_is_the_baselines_result_not_a_failure() -> None:
    modes = ["dram", "cache", "swap"]
    oom = {"mode": "swap", "wall_s": 9.0, "error": "exit code 137: OOM-killed",
           "error_kind": "baseline-oom"}  # fmt: skip
    recs = [_rec("dram", 10.0), _rec("cache", 20.0), oom]
    rows = apps.summarize(recs, modes)
    assert rows["swap"]["baseline_oom"] is True and rows["swap"]["ok"] is False
    res = {"dram_rss_bytes": 1, "budgets": {"50": {"modes": rows}}}
    t = {x["target"].split(":")[0]: x for x in apps.evaluate({"lammps": res}, modes)}
    assert t["1. lammps"]["pass"] is True and "swap at 50% OOM-killed" in t["1. lammps"]["detail"]
    assert t["2. lammps at 50%"]["pass"] is True and t["2. lammps at 50%"]["measured"] is None
    recs[1] = _rec("cache", 20.0, "output differs from dram")  # cache failing too: no pass
    res["budgets"]["50"]["modes"] = apps.summarize(recs, modes)
    t = {x["target"].split(":")[0]: x for x in apps.evaluate({"lammps": res}, modes)}
    assert t["1. lammps"]["pass"] is False and t["2. lammps at 50%"]["pass"] is None
