# SPDX-License-Identifier: BSD-3-Clause
"""hbwmalloc.h: a program written for memkind builds unchanged against
libhetmem and gets memory from the fastest tier."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from hetmem import _native

CC = shutil.which("cc") or shutil.which("gcc")


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_memkind_style_program_builds_and_runs(tmp_path: Path) -> None:
    libdir = _native.library_dir()
    exe = tmp_path / "hbw_app"
    build = subprocess.run(
        [
            str(CC),
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{REPO / 'include'}",
            str(REPO / "tests" / "c" / "hbw_app.c"),
            f"-L{libdir}",
            "-lhetmem",
            f"-Wl,-rpath,{libdir}",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hbw: ok"


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_header_is_cplusplus_clean(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "t.cpp"
    src.write_text(
        "#include <hbwmalloc.h>\nint main() { void *p = hbw_malloc(16); hbw_free(p); "
        "return hbw_get_policy() == HBW_POLICY_PREFERRED ? 0 : 1; }\n"
    )
    proc = subprocess.run(
        [
            cxx,
            "-Wall",
            "-Werror",
            f"-I{REPO / 'include'}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "t.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
