# SPDX-License-Identifier: BSD-3-Clause
"""Shared fixtures. Tests run against the installed package (make test installs
it into .venv); C tests come from the CMake build tree in $HETMEM_CBUILD."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hetmem.bench import harness
from hetmem.placement import fileformat as placement_file

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
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    check: bool = False,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs the hetmem CLI in a subprocess, as a user would (in cwd if given)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "hetmem", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hetmem {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def hetmem():
    return run_hetmem


def as_from_a_terminal() -> None:
    """A child's preexec_fn: SIGHUP and SIGINT at their defaults, as for a
    command typed at a terminal. A test run under nohup, or as a background
    job, passes them on ignored, and hetmem keeps an ignored signal ignored
    (hetmem.child.stop_on_signals), so a test that sends one must undo it."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fortran_program(tmp_path: Path, name: str, source: str) -> Path:
    """Builds source as tmp_path/name with gfortran -g -O2 (the test is
    skipped where there is no gfortran)."""
    fc = shutil.which("gfortran")
    if not fc:
        pytest.skip("no gfortran")
    src = tmp_path / f"{name}.f90"
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run([fc, "-g", "-O2", str(src), "-o", str(exe)], check=True, cwd=tmp_path)
    return exe


def c_program(exe: Path, source: str, *flags: str) -> Path:
    """Builds C source at exe with cc -g and flags (-O2 unless given); the
    test is skipped where there is no C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    subprocess.run([cc, "-g", *(flags or ("-O2",)), "-x", "c", "-", "-o", str(exe)],
                   input=source, text=True, check=True)  # fmt: skip
    return exe


def profile_and_show(
    tmp_path: Path, name: str, *cmd: str, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[str], Path, dict]:
    """`hetmem profile -o tmp_path/name.prof [options] -- cmd`, then
    `profile show --json` of the one file it wrote: (the profile run, the
    file, the show)."""
    proc = run_hetmem("profile", "-o", str(tmp_path / f"{name}.prof"), *options, "--", *cmd)
    written = sorted(tmp_path.glob(f"{name}.prof.norank.*"))
    assert len(written) == 1, proc.stderr
    show = json.loads(run_hetmem("profile", "show", "--json", str(written[0]), check=True).stdout)
    return proc, written[0], show


def shown_site(show: dict, function: str) -> dict:
    """The one site of a `profile show --json` whose function is function
    (a compiler's .constprop/.isra suffix left out)."""
    rows = [r for r in show["sites"] if r["function"].split(".")[0] == function]
    assert len(rows) == 1, [r["function"] for r in show["sites"]]
    return rows[0]


def placed_tiers(placement: Path) -> dict[str, int]:
    """Each site's tier in a placement file, by its innermost function."""
    sites = placement_file.load(placement).sites
    return {s.symbols[0].split(" ")[0].split(".")[0]: s.tier for s in sites}


# Benchmark-harness plans and run records, shared by the harness's unit tests
# and the report's browser test.
def _plan(tmp_path: Path, **kw) -> harness.Plan:
    base = dict(
        cases=harness.resolve_cases(["stream-triad", "poly-ro-d16"]),
        multiples=[0.5, 2.0],
        modes=["dram", "cache", "swap"],
        repeat=2,
        budget=64 << 20,
        threads=2,
        storage=None,
        outdir=tmp_path,
    )
    base.update(kw)
    return harness.Plan(**base)


def _record(case, mult, mode, rep, t, error="", result=None):
    return {
        "schema_version": 1,
        "case": case,
        "kernel": case.split("-")[0],
        "group": case,
        "multiple": mult,
        "size_bytes": int(mult * (64 << 20)),
        "mode": mode,
        "rep": rep,
        "time_s": t,
        "error": error,
        "result": result,
    }


def pytest_collection_finish(session: pytest.Session) -> None:
    """The QEMU guests of tests/vm start as soon as the tests are known, so
    that their minutes under TCG run beside the other tests, not after them
    (tests/vm/test_vm.py: start_guests_early)."""
    for item in session.items:
        start = getattr(getattr(item, "module", None), "start_guests_early", None)
        if start is not None:
            start(session)
            return
