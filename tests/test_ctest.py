"""Runs every C test program registered with ctest, one pytest test each."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import CBUILD


def _ctest_names() -> list[str]:
    if not (CBUILD / "CTestTestfile.cmake").exists():
        return []
    out = subprocess.run(
        ["ctest", "--test-dir", str(CBUILD), "-N"], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"Test\s+#\d+: (\S+)", out)


_NAMES = _ctest_names()


def test_c_build_exists():
    assert _NAMES, f"no C tests found in {CBUILD}: run `make cbuild` (make test does)"


@pytest.mark.parametrize("name", _NAMES)
def test_c(name: str):
    proc = subprocess.run(
        ["ctest", "--test-dir", str(CBUILD), "-R", f"^{re.escape(name)}$", "--output-on-failure"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
