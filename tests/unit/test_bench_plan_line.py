# SPDX-License-Identifier: BSD-3-Clause
"""The run count a kernel-matrix suite announces adds up: sizes below 1x get
--fits-repeat repetitions, the others --repeat."""

from __future__ import annotations

import re

import pytest

from conftest import _plan
from hetmem.bench import harness
from hetmem.bench.matrix import plan_line


def _evaluate(line: str) -> int:
    """The arithmetic of a plan line ('2 case(s) x 3 mode(s) x (...)') done
    by Python, with the size lists in brackets and the words dropped."""
    expr = line.split(" = ")[0]
    expr = re.sub(r"\[[^]]*\]", "", expr)
    expr = re.sub(r"[a-z()]+\(s\)", "", expr).replace("x", "*")
    return int(eval(expr, {"__builtins__": {}}))  # digits, *, +, () only


def test_the_demo_line_adds_up(tmp_path):
    # 8 cases x 3 sizes x 3 modes, 0.5x five times: was '... x 1 rep(s) (5 below 1x) = 168'
    cases = harness.resolve_cases(["stream-triad", "poly-ro-d16"]) * 4
    plan = _plan(tmp_path, cases=cases, multiples=[0.5, 1.0, 2.0], repeat=1, fits_repeat=5)
    line = plan_line(plan)
    assert line == (
        "8 case(s) x 3 mode(s) x (5 rep(s) x 1 size(s) [0.5x] + 1 rep(s) x 2 size(s) [1x, 2x])"
        " = 168 runs"
    )
    assert _evaluate(line) == len(plan.runs()) == 168


@pytest.mark.parametrize(
    ("multiples", "repeat", "fits_repeat"),
    [
        ([0.5, 2.0], 2, 0),  # fits_repeat below repeat: one term
        ([2.0, 4.0], 1, 5),  # nothing below 1x: --fits-repeat unused
        ([0.25, 0.5, 4.0], 2, 3),
        ([0.5], 1, 4),
    ],
)
def test_every_plan_line_adds_up(tmp_path, multiples, repeat, fits_repeat):
    plan = _plan(tmp_path, multiples=multiples, repeat=repeat, fits_repeat=fits_repeat)
    line = plan_line(plan)
    assert line.endswith(f" = {len(plan.runs())} runs")
    assert _evaluate(line) == len(plan.runs())


def test_one_repetition_count_reads_as_a_plain_product(tmp_path):
    plan = _plan(tmp_path, multiples=[2.0, 4.0], repeat=1, fits_repeat=5)
    assert plan_line(plan) == "2 case(s) x 3 mode(s) x 2 size(s) x 1 rep(s) = 12 runs"
