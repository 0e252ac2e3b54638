# SPDX-License-Identifier: BSD-3-Clause
"""A C program finds the installed hetmem as a user's build would: through
hetmem-config, pkg-config and CMake's find_package, with no hand-written
paths. The program is memkind-style (hbwmalloc.h only, unchanged), and it
runs with no LD_LIBRARY_PATH (the flags carry an rpath)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hetmem
from conftest import REPO
from hetmem import libconfig
from hetmem.bench import machine

CONFIG = Path(sys.executable).with_name("hetmem-config")
pytestmark = pytest.mark.skipif(
    not CONFIG.exists() or not (libconfig.PREFIX / "_lib" / "pkgconfig").is_dir(),
    reason="hetmem is not pip-installed in this Python (make install)",
)

# what memkind's hello_hbw example does, in its own words
HELLO = r"""
#include <hbwmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  const size_t size = 512;
  char *default_str = malloc(size);
  char *hbw_str = NULL;
  if (hbw_check_available() == 0) {
    hbw_str = hbw_malloc(size);
  } else {
    printf("no high-bandwidth memory: hbw_malloc falls back\n");
    hbw_str = hbw_malloc(size);
  }
  if (!default_str || !hbw_str) return 1;
  snprintf(default_str, size, "Hello world from standard memory\n");
  snprintf(hbw_str, size, "Hello world from high bandwidth memory\n");
  fprintf(stdout, "%s", default_str);
  fprintf(stdout, "%s", hbw_str);
  hbw_free(hbw_str);
  free(default_str);
  return 0;
}
"""


# memkind's kind API, as its examples use it
MEMKIND = r"""
#include <memkind.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  char *a = memkind_malloc(MEMKIND_DEFAULT, 512);
  char *b = memkind_malloc(MEMKIND_HBW_PREFERRED, 512);
  char *c = NULL;
  if (!a || !b || memkind_posix_memalign(MEMKIND_REGULAR, (void **)&c, 64, 512)) return 1;
  snprintf(b, 512, "Hello world from high bandwidth memory\n");
  b = memkind_realloc(MEMKIND_HBW_PREFERRED, b, 4096);
  if (!b) return 1;
  printf("%s", b);
  if (memkind_check_available(MEMKIND_DAX_KMEM) != 0) {
    char msg[MEMKIND_ERROR_MESSAGE_SIZE];
    memkind_error_message(MEMKIND_ERROR_UNAVAILABLE, msg, sizeof msg);
    printf("DAX_KMEM: %s\n", msg);
  }
  memkind_free(NULL, a);
  memkind_free(MEMKIND_HBW_PREFERRED, b);
  memkind_free(MEMKIND_REGULAR, c);
  return 0;
}
"""


def _config(*args: str) -> str:
    p = subprocess.run([str(CONFIG), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "HETMEM_LIBDIR")}
    return env


def _run_hello(exe: Path) -> None:
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=_clean_env())
    assert p.returncode == 0, p.stderr
    assert "Hello world from high bandwidth memory" in p.stdout


@pytest.mark.skipif(not shutil.which("pkg-config"), reason="pkg-config not installed")
def test_pkg_config_builds_a_memkind_program(tmp_path: Path) -> None:
    src = tmp_path / "hello_hbw.c"
    src.write_text(HELLO)
    env = {**_clean_env(), "PKG_CONFIG_PATH": _config("--pkgconfigdir")}
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "hetmem"], env=env,
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert pc.returncode == 0, pc.stderr
    exe = tmp_path / "hello"
    subprocess.run(["cc", str(src), *pc.stdout.split(), "-o", str(exe)], check=True, timeout=120)
    _run_hello(exe)
    ver = subprocess.run(["pkg-config", "--modversion", "hetmem"], env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ver.stdout.strip() == _config("--version")


def test_hetmem_config_flags_build_it_alone(tmp_path: Path) -> None:
    src = tmp_path / "hello_hbw.c"
    src.write_text(HELLO)
    exe = tmp_path / "hello"
    flags = _config("--cflags", "--libs").split()
    subprocess.run(["cc", str(src), *flags, "-o", str(exe)], check=True, timeout=120)
    _run_hello(exe)


@pytest.mark.skipif(not shutil.which("cmake"), reason="cmake not installed")
def test_cmake_find_package_links_it(tmp_path: Path) -> None:
    (tmp_path / "hello_hbw.c").write_text(HELLO)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(hello C)\n"
        "find_package(hetmem 0.1 REQUIRED)\n"
        "add_executable(hello hello_hbw.c)\n"
        "target_link_libraries(hello PRIVATE hetmem::hetmem)\n"
    )
    build = tmp_path / "build"
    cfg = subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(build),
                          f"-Dhetmem_DIR={_config('--cmakedir')}"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, timeout=300)
    _run_hello(build / "hello")


def test_bad_use_is_one_line() -> None:
    p = subprocess.run([str(CONFIG), "--nonsense"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unrecognized arguments" in p.stderr
    p = subprocess.run([str(CONFIG)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--pkgconfigdir" in p.stderr


def test_a_memkind_program_builds_and_runs(tmp_path: Path) -> None:
    src = tmp_path / "memkind_hello.c"
    src.write_text(MEMKIND)
    exe = tmp_path / "memkind_hello"
    subprocess.run(["cc", str(src), *_config("--cflags", "--libs").split(), "-o", str(exe)],
                   check=True, timeout=120)  # fmt: skip
    _run_hello(exe)


def test_the_installed_package_names_the_commit_it_was_built_from() -> None:
    """Reports made by an installed hetmem name its commit (build_info.json,
    written by the build), not "unknown"."""
    pkg = Path(hetmem.__file__).resolve().parent
    top = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False).stdout.strip()  # fmt: skip
    if not top:
        pytest.skip("the source is not a git checkout")
    commit = machine.built_commit(pkg)
    assert commit != "unknown" and top.startswith(commit.removesuffix("-dirty")), commit
