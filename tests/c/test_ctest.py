# SPDX-License-Identifier: BSD-3-Clause
"""Runs every C test program registered with ctest, one pytest test each."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

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
    # The pager tests make their scratch directories (backing files) under
    # HETMEM_TEST_STORAGE: a directory of this test's own, which must be
    # empty afterwards (a test that ran two pager configurations left its
    # first directory in /var/tmp on every run). Beside /var/tmp, since the
    # pager refuses tmpfs and /tmp may be one.
    storage = tempfile.mkdtemp(prefix="hetmem-ctest-", dir="/var/tmp")
    os.chmod(storage, 0o711)  # test_sdm_errors opens a pager as nobody below it
    try:
        proc = subprocess.run(
            ["ctest", "--test-dir", str(CBUILD), "-R", f"^{re.escape(name)}$",
             "--output-on-failure"],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "HETMEM_TEST_STORAGE": storage},
        )  # fmt: skip
        left = sorted(os.listdir(storage))
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not left, f"{name} left {left} in its storage directory"
