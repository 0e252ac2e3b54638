# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem bench` suites and the programs they run.

Each suite is a module in this package with `name`, `help`, `description`,
`add_arguments(parser)` and `run(args) -> int`; SUITES lists them in the
order `hetmem bench --help` shows. Later suites (sdm, placement, kernels)
add a module and a line here.

Benchmark programs (hm-stream-ref, ...) are built from bench/ and installed
into the package's _bench folder beside _lib; bench_dir() finds them.

Every suite (and `hetmem demo`) ends with exit_status(): one exit-code rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hetmem._native import library_dir
from hetmem.errors import EnvironmentProblem

# Modules in this package, plus the kernel-matrix suites of hetmem.bench.matrix
# (imdt, poly, kernels) that share one implementation.
SUITES = (
    "sdm", "imdt", "imdt-scale", "poly", "kernels", "reference", "flow", "lattice", "placement",
    "budgets", "apps", "tiering", "umap", "seqread",
)  # fmt: skip

# The exit-code rule of every suite and of `hetmem demo` (also in `hetmem bench
# --help` and docs/guide.md). Bad input and runs that could not start raise
# HetmemError, which the CLI turns into EXIT_BAD_INPUT.
EXIT_MET = 0  # ran, and every target was met (or there were none)
EXIT_MISSED = 1  # ran, and at least one target was missed (a MISS line)
EXIT_BAD_INPUT = 2  # bad input, or it could not run

EXIT_RULE = (
    "Exit status: 0 ran and every target was met (or the suite has none);\n"
    "1 ran but a target was missed (a MISS line, or a run of hetmem failed);\n"
    "2 bad input, or it could not run."
)

Verdict = Mapping[str, Any] | bool | None


def missed(target: Verdict) -> bool:
    """True for a missed target: False, or a row whose "pass" is False.
    None (a target not measured, e.g. its baseline could not run) is no miss."""
    if isinstance(target, Mapping):
        target = target.get("pass")
    return target is not None and not target  # numpy's bool_ is not False


def exit_status(targets: Iterable[Verdict]) -> int:
    """EXIT_MISSED if any target was missed, else EXIT_MET. Targets are
    verdicts (True, False, None: not measured) or rows with a "pass" verdict."""
    return EXIT_MISSED if any(missed(t) for t in targets) else EXIT_MET


def bench_dir() -> Path:
    """Folder of the benchmark programs.

    $HETMEM_BENCHDIR if set; else <build>/bench when $HETMEM_LIBDIR points at
    a development build tree; else the installed package's _bench folder.
    """
    env = os.environ.get("HETMEM_BENCHDIR")
    if env:
        return Path(env)
    lib = library_dir()
    dev = lib / "bench"
    if dev.is_dir():
        return dev
    return lib.parent / "_bench"


def search_dirs() -> list[Path]:
    """Folders searched for benchmark programs, in order: $HETMEM_BENCHDIR (and
    its kernels/ subfolder), a development build tree's bench/ and bench/kernels/
    beside $HETMEM_LIBDIR, then the installed package's _bench folder."""
    dirs: list[Path] = []
    env = os.environ.get("HETMEM_BENCHDIR")
    if env:
        dirs += [Path(env), Path(env) / "kernels"]
    lib = library_dir()
    dirs += [lib / "bench", lib / "bench" / "kernels", lib.parent / "_bench"]
    return dirs


def find_program(name: str) -> Path:
    """Path of a benchmark program, or EnvironmentProblem naming where it looked."""
    dirs = search_dirs()
    for d in dirs:
        path = d / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise EnvironmentProblem(
        f"benchmark program {name} not found (looked in {', '.join(map(str, dirs))}); "
        "reinstall hetmem, or set HETMEM_BENCHDIR to a build tree's bench folder"
    )
