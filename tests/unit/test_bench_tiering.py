# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench tiering`'s bad input: one line, exit 2, nothing run and
root's tiering settings untouched. The bench itself runs in the
Optane-KMEM guest of tests/vm (it changes root's settings while it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_hetmem

DEMOTION = Path("/sys/kernel/mm/numa/demotion_enabled")
BALANCING = Path("/proc/sys/kernel/numa_balancing")


def _settings() -> tuple[str, str]:
    def read(p: Path) -> str:
        try:
            return p.read_text().strip()
        except OSError:
            return ""

    return read(DEMOTION), read(BALANCING)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--placement", "PLACEMENT", "--fast-budget", "1G", "--"], "name the command after --"),
        (["--placement", "nosuch.toml", "--fast-budget", "1G", "--", "true"], "no such file"),
        (["--placement", "PLACEMENT", "--fast-budget", "lots", "--", "true"], "--fast-budget"),
        (
            [
                "--placement",
                "PLACEMENT",
                "--fast-budget",
                "1G",
                "--configs",
                "kernel,numa",
                "--",
                "true",
            ],
            "--configs: unknown numa",
        ),
        (
            ["--placement", "PLACEMENT", "--fast-budget", "1G", "--repeat", "0", "--", "true"],
            "--repeat must be at least 1",
        ),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(args: list[str], says: str, tmp_path: Path):
    placement = tmp_path / "p.toml"
    placement.write_text("")
    args = [str(placement) if a == "PLACEMENT" else a for a in args]
    before = _settings()
    p = run_hetmem("bench", "tiering", *args)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert _settings() == before
