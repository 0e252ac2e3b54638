# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem-config`: where pip put hetmem's C library and headers, for
compilers and build systems (as numpy-config does for numpy's).

  cc app.c $(hetmem-config --cflags --libs)
  PKG_CONFIG_PATH=$(hetmem-config --pkgconfigdir) pkg-config --cflags --libs hetmem
  cmake -Dhetmem_DIR=$(hetmem-config --cmakedir) ...   # find_package(hetmem)
  MANPATH=$(hetmem-config --mandir): man hetmem          # the man pages

The paths are those of this installation (site-packages/hetmem), not of a
build tree."""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

from hetmem import __version__

PREFIX = Path(__file__).resolve().parent
# in the wheel's data folder, which pip puts under the environment's prefix
MAN = Path("share", "man")


def mandir() -> Path:
    """share/man of the install scheme whose site-packages holds this package
    (a venv, the system, or --user); the current scheme's when none does."""
    schemes = (sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user"))
    for scheme in schemes:
        if Path(sysconfig.get_path("platlib", scheme)).resolve() == PREFIX.parent:
            return Path(sysconfig.get_path("data", scheme)) / MAN
    return Path(sysconfig.get_path("data")) / MAN


def paths() -> dict[str, Path]:
    lib = PREFIX / "_lib"
    return {
        "prefix": PREFIX,
        "includedir": PREFIX / "_include",
        "libdir": lib,
        "pkgconfigdir": lib / "pkgconfig",
        "cmakedir": lib / "cmake" / "hetmem",
        "mandir": mandir(),
    }


def flags() -> dict[str, str]:
    p = paths()
    return {
        "cflags": f"-I{p['includedir']}",
        "libs": f"-L{p['libdir']} -Wl,-rpath,{p['libdir']} -lhetmem",
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hetmem-config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name in paths():
        parser.add_argument(f"--{name}", action="store_true", help=f"print the {name}")
    parser.add_argument("--cflags", action="store_true", help="print the compiler flags")
    parser.add_argument("--libs", action="store_true", help="print the linker flags (with rpath)")
    parser.add_argument("--version", action="store_true", help="print hetmem's version")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out: list[str] = []
    for name, path in paths().items():
        if getattr(args, name):
            out.append(str(path))
    for name, text in flags().items():
        if getattr(args, name):
            out.append(text)
    if args.version:
        out.append(__version__)
    if not out:
        parser.print_help(sys.stderr)
        return 2
    need = {n: p for n, p in paths().items() if n != "mandir"}
    if args.mandir:  # only then: the C library is of use without the pages
        need["mandir"] = paths()["mandir"] / "man1" / "hetmem.1"
    missing = [p for p in need.values() if not p.exists()]
    if missing:
        what = "man pages are" if missing[0].name == "hetmem.1" else "C library is"
        print(f"hetmem-config: {missing[0]} is missing: hetmem's {what} not installed "
              "here (pip install .)", file=sys.stderr)  # fmt: skip
        return 2
    print(" ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
