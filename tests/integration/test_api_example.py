# SPDX-License-Identifier: BSD-3-Clause
"""docs/api.md's example runs as written (a cache-mode run through the
public API), and the examples in hetmem.api's docstrings hold."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import hetmem
from hetmem import api

REPO = Path(__file__).resolve().parents[2]


def _example() -> str:
    text = (REPO / "docs" / "api.md").read_text()
    m = re.search(r"^## Example$.*?^```python\n(.*?)^```$", text, re.S | re.M)
    assert m, "docs/api.md has no ```python block under ## Example"
    return m.group(1)


def test_the_documented_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_example())
    package = str(Path(hetmem.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=env)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "exit status: 0" in out and "tier 0: " in out, out
    assert "refused: size: '4 parsecs' is not a size" in out, out


def test_the_docstring_examples_hold() -> None:
    failed, tried = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert tried >= 6 and failed == 0
