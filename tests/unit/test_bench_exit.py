# SPDX-License-Identifier: BSD-3-Clause
"""The one exit-code rule of `hetmem bench` and `hetmem demo`: 0 every target
met (or none), 1 a target missed, 2 bad input (HetmemError, the CLI's)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

from hetmem.bench import EXIT_MET, EXIT_MISSED, exit_status, flow, matrix, missed


def test_exit_status_is_1_for_any_missed_target_row():
    rows = [
        {"target": "scan", "pass": True},
        {"target": "swap", "pass": None},  # not measured: no miss
        {"target": "fits", "pass": False},
    ]
    assert exit_status(rows) == EXIT_MISSED == 1
    assert exit_status(rows[:2]) == EXIT_MET == 0


def test_exit_status_takes_bare_verdicts_and_no_targets():
    assert exit_status([]) == 0
    assert exit_status([True, None]) == 0
    assert exit_status([True, False]) == 1
    assert exit_status(iter([False])) == 1  # any iterable, read once


def test_numpy_verdicts_count_as_misses():
    # 0.5 <= ratio <= 2.0 with a numpy ratio gives numpy.bool_, never `is False`
    assert missed(np.float64(3.0) <= 2.0)
    assert exit_status([{"pass": np.bool_(False)}]) == 1
    assert exit_status([{"pass": np.bool_(True)}]) == 0


def _report(checks: list[bool], fits: bool | None, hard: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "checks": [
            {"check": f"c{i}", "pass": ok, "ratio": 1.0, "rule": "r"} for i, ok in enumerate(checks)
        ],
        "hard_failures": hard,
    }
    if fits is not None:
        data["fits_target"] = {"pass": fits}
    return data


@pytest.mark.parametrize(
    ("checks", "fits", "hard", "rc"),
    [
        ([True, True], True, 0, 0),
        ([], None, 0, 0),  # no targets at all
        ([True, False], True, 0, 1),  # a MISS line among the checks
        ([True], False, 0, 1),  # the data-fits target missed
        ([True], True, 2, 1),  # a run of hetmem failed
    ],
)
def test_matrix_suite_exits_1_on_a_miss(monkeypatch, checks, fits, hard, rc):
    # the suite end to end past the runs: it printed MISS lines and exited 0
    data = _report(checks, fits, hard)
    monkeypatch.setattr(matrix, "run_matrix", lambda *_a: data)
    suite = matrix.SUITES["kernels"]
    args = argparse.Namespace(json=True)
    assert suite.run(args) == rc
    assert exit_status(matrix.targets_of(data)) == rc


def test_flow_verdicts_are_the_three_printed_targets():
    res = {"targets": {"sw_cost_met": True, "py_sw_cost_met": True, "large_met": True}}
    assert exit_status(flow.verdicts(res)) == 0
    for key in res["targets"]:
        one = {"targets": {**res["targets"], key: False}}
        assert exit_status(flow.verdicts(one)) == 1, key
