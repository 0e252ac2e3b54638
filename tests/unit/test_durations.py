# SPDX-License-Identifier: BSD-3-Clause
"""`--period` and HETMEM_SAMPLE_PERIOD take the same units (us, ms, s); a
bare number keeps its old meaning in each (ms on the command line,
microseconds in the variable)."""

from __future__ import annotations

import ctypes

import pytest

from hetmem._native import Context
from hetmem.errors import UsageError
from hetmem.sizes import parse_duration_ms, parse_seconds


@pytest.mark.parametrize(
    ("text", "ms"),
    [("10", 10.0), ("10ms", 10.0), ("500us", 0.5), ("1.5s", 1500.0), ("2MS", 2.0), (".5", 0.5)],
)
def test_durations_parse(text: str, ms: float) -> None:
    assert parse_duration_ms(text, "--period") == pytest.approx(ms)


@pytest.mark.parametrize("text", ["", "soon", "5min", "-1", "nan", "inf", "1e999", "ms"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="--period"):
        parse_duration_ms(text, "--period")


@pytest.mark.parametrize(("text", "us"), [("10ms", 10000), ("250", 250), ("0.5s", 500000)])
def test_the_variable_takes_the_same_units(text: str, us: int) -> None:
    with Context() as ctx:
        ctx.set_option("sample_period", text)
        assert ctx.option("sample_period") == text
        out = ctypes.c_uint64()  # what the sampler gets: the C parser's microseconds
        assert ctx.call("hm_option_get_u64", b"sample_period", ctypes.byref(out)) == 0
        assert out.value == us


@pytest.mark.parametrize(
    ("text", "s"), [("90", 90.0), ("90s", 90.0), ("5min", 300.0), ("1.5h", 5400.0)]
)
def test_wall_clock_limits_parse(text: str, s: float) -> None:
    assert parse_seconds(text, "--time") == pytest.approx(s)


@pytest.mark.parametrize("text", ["", "0", "5m", "10ms", "soon", "1e999"])
def test_bad_wall_clock_limits_name_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="--time"):
        parse_seconds(text, "--time")
