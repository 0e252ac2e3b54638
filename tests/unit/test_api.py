# SPDX-License-Identifier: BSD-3-Clause
"""The public Python API: every name in hetmem.__all__ exists and is
documented, and `import hetmem` loads none of the heavy modules."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import hetmem

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "scipy", "matplotlib", "hetmem._native", "hetmem.api")


def test_all_is_the_lazy_table() -> None:
    assert set(hetmem.__all__) == {"__version__", *hetmem._PUBLIC}
    assert len(hetmem.__all__) == len(set(hetmem.__all__))


@pytest.mark.parametrize("name", [n for n in hetmem.__all__ if n != "__version__"])
def test_every_public_name_exists_and_is_documented(name: str) -> None:
    value = getattr(hetmem, name)
    doc = inspect.getdoc(value) or ""
    assert len(doc) > 20, f"hetmem.{name} has no docstring"
    if inspect.isfunction(value):
        assert "Returns:" in doc, f"hetmem.{name}: say what it returns"
        assert value.__module__ == hetmem._PUBLIC[name]
    assert name in (REPO / "docs" / "api.md").read_text(), f"docs/api.md lacks {name}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        hetmem.no_such_thing  # noqa: B018
    assert "parse_size" in dir(hetmem)


def test_import_is_light() -> None:
    code = (
        "import sys, hetmem\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
        "hetmem.parse_size('4G'); hetmem.UsageError\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy[:3])))\n"
        "print('preload' in open('/proc/self/maps').read())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, cwd=REPO)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[]", "[]", "False"]


def test_sizes_go_through_the_api() -> None:
    assert hetmem.parse_size("512MiB") == 512 << 20
    assert hetmem.format_size(1536) == "1.5 KiB"
    with pytest.raises(hetmem.UsageError, match="not a size"):
        hetmem.parse_size("4 parsecs")
    with pytest.raises(hetmem.UsageError, match="more than 0"):
        hetmem.parse_budget("0")


def test_run_command_refuses_a_bad_mode_before_running() -> None:
    with pytest.raises(hetmem.UsageError, match="unknown mode 'fast'"):
        hetmem.run_command(["true"], "fast")
    with pytest.raises(hetmem.UsageError, match="needs --fast-budget"):
        hetmem.run_command(["true"], "cache")


def test_advise_refuses_no_profiles() -> None:
    with pytest.raises(hetmem.UsageError, match="at least one profile"):
        hetmem.advise([], "1G")


def test_advise_refuses_a_mode_it_cannot_advise_for() -> None:
    with pytest.raises(hetmem.UsageError, match="for_mode must be 'flat' or 'hybrid', not 'cache'"):
        hetmem.advise(["a.prof"], "1G", for_mode="cache")
