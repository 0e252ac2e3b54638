"""Shared fixtures. Tests run against the installed package (make test installs
it into .venv); C tests come from the CMake build tree in $HETMEM_CBUILD."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CBUILD = Path(os.environ.get("HETMEM_CBUILD", REPO / "build" / "c"))


def _has_pager() -> bool:
    from hetmem import _native

    try:
        return _native.has_pager()
    except Exception:
        return False


# tests of cache, flat and hybrid modes: the pager is part of this build
needs_pager = pytest.mark.skipif(not _has_pager(), reason="this build has no pager (src/sdm)")


def run_hetmem(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Runs the hetmem CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "hetmem", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hetmem {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def hetmem():
    return run_hetmem
