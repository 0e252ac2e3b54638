# SPDX-License-Identifier: BSD-3-Clause
"""`pip install .` puts the man pages in the environment's share/man, where
`man` finds them through MANPATH and `hetmem-config --mandir` points."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetmem import libconfig

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(sys.executable).with_name("hetmem-config")
pytestmark = pytest.mark.skipif(
    not CONFIG.exists() or not (libconfig.PREFIX / "_lib").is_dir(),
    reason="hetmem is not pip-installed in this Python (make install)",
)


def _mandir() -> Path:
    p = subprocess.run([str(CONFIG), "--mandir"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return Path(p.stdout.strip())


def test_every_page_is_installed_as_committed() -> None:
    mandir = _mandir()
    assert mandir == Path(sys.prefix) / "share" / "man"
    committed = sorted(p.name for p in (REPO / "man" / "man1").glob("*.1"))
    assert committed, "no committed pages"
    for name in committed:
        installed = mandir / "man1" / name
        assert installed.read_text() == (REPO / "man" / "man1" / name).read_text(), name


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_finds_the_pages_through_manpath() -> None:
    env = {**os.environ, "MANPATH": str(_mandir()), "MANWIDTH": "80"}
    where = subprocess.run(["man", "-w", "hetmem-run"], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert where.stdout.strip() == str(_mandir() / "man1" / "hetmem-run.1"), where.stderr
    page = subprocess.run(["man", "-P", "cat", "hetmem"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert page.returncode == 0 and "hetmem-run(1)" in page.stdout.replace("\u2010", "-")
