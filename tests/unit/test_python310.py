# SPDX-License-Identifier: BSD-3-Clause
"""pyproject.toml says requires-python >= 3.10: every module must parse as
3.10 and use nothing of the standard library that came later (tomllib
crashed `hetmem --help` on 3.10 once). Checked statically on every machine,
and by running the CLI under a Python 3.10 where one is installed."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SOURCES = sorted((REPO / "python" / "hetmem").rglob("*.py"))
# names the standard library gained after 3.10: module -> names
LATER = {
    "typing": {"Self", "Never", "LiteralString", "assert_never", "assert_type",
               "reveal_type", "Required", "NotRequired", "TypeVarTuple", "Unpack",
               "dataclass_transform", "override", "TypeAliasType", "get_overloads"},
    "enum": {"StrEnum", "ReprEnum", "verify", "EnumCheck", "global_enum"},
    "datetime": {"UTC"},
    "asyncio": {"TaskGroup", "timeout", "Runner"},
    "contextlib": {"chdir"},
    "itertools": {"batched"},
}  # fmt: skip
LATER_MODULES = {"tomllib", "wsgiref.types"}
# the one guarded use: hetmem/_toml.py takes tomli on 3.10
GUARDED = {REPO / "python" / "hetmem" / "_toml.py"}


def _later_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path), feature_version=(3, 10))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in LATER_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in LATER_MODULES:
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name in LATER.get(node.module, set())]  # fmt: skip
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in LATER.get(node.value.id, set()):
                found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_parses_as_python_310_and_uses_nothing_later(path: Path) -> None:
    uses = _later_uses(path)
    if path in GUARDED:
        return
    assert not uses, f"{path.relative_to(REPO)}: not in Python 3.10: {uses}"


def test_the_checker_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import tomllib\nfrom typing import Self\nimport datetime\nx = datetime.UTC\n")
    assert _later_uses(bad) == ["tomllib", "typing.Self", "datetime.UTC"]
    newer = tmp_path / "newer.py"
    newer.write_text("try:\n    pass\nexcept* ValueError:\n    pass\n")
    with pytest.raises(SyntaxError):
        _later_uses(newer)


def _python310() -> str | None:
    """A working Python 3.10 (a pyenv shim on PATH may point nowhere)."""
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for py in [*pyenv, shutil.which("python3.10")]:
        if py and subprocess.run([py, "-c", "import sys; assert sys.version_info[:2] == (3, 10)"],
                                 capture_output=True, timeout=60).returncode == 0:  # fmt: skip
            return py
    return None


def test_cli_starts_under_python_310() -> None:
    py = _python310()
    if py is None:
        pytest.skip("no Python 3.10 here; the static checks above still ran")
    code = "import sys; sys.argv = ['hetmem', '--help']; from hetmem.cli import main; main()"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    proc = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if "No module named" in proc.stderr and "hetmem" not in proc.stderr.split("No module")[-1]:
        pytest.skip(f"Python 3.10 here lacks a dependency: {proc.stderr.strip()[-120:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recommend" in proc.stdout
