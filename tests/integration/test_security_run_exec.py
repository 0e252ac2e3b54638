# SPDX-License-Identifier: BSD-3-Clause
"""A command that cannot be run gets the exit status a shell gives (issue
19, finding 8): 127 when it is not there (a missing file, a name not on
PATH, a script whose interpreter is missing), 126 when it is there but
cannot be executed (no execute permission, a directory); one line on
stderr, and nothing runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_hetmem


@pytest.fixture
def progs(tmp_path: Path) -> dict[str, str]:
    bad_interp = tmp_path / "badinterp"
    bad_interp.write_text("#!/nonexistent-hetmem/interp\necho ran\n")
    bad_interp.chmod(0o755)
    noexec = tmp_path / "noexec"
    noexec.write_text("echo ran\n")
    noexec.chmod(0o644)
    return {
        "missing-name": "no-such-command-hetmem",
        "missing-path": str(tmp_path / "missing"),
        "bad-interpreter": str(bad_interp),
        "not-executable": str(noexec),
        "directory": str(tmp_path),
        "not-executable-on-path": "noexec",
    }


CASES = [
    ("missing-name", 127, "not found"),
    ("missing-path", 127, "no such file"),
    ("bad-interpreter", 127, "No such file"),
    ("not-executable", 126, "permission denied"),
    ("directory", 126, "is a directory"),
    # bash's answer (dash says 127 for this one)
    ("not-executable-on-path", 126, "permission denied"),
]
VERBS = {
    "run-dram": ["run", "--mode", "dram", "--"],
    "profile": ["profile", "-o", "{tmp}/p.prof", "--"],
}


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize(("case", "code", "words"), CASES)
def test_exit_status_as_a_shell_gives(
    progs: dict[str, str], tmp_path: Path, verb: str, case: str, code: int, words: str
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in VERBS[verb]]
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = run_hetmem(*argv, progs[case], env=env, timeout=120)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words.lower() in lines[0].lower(), proc.stderr
    assert "Traceback" not in proc.stderr and "ran" not in proc.stdout
