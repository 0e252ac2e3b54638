# SPDX-License-Identifier: BSD-3-Clause
"""hm-kernel-umapcmp and `hetmem bench umap` (the LLNL UMap comparison).

UMap is never built here: the tests that need it run only where
HETMEM_UMAP_LIB names a built libumap.so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_pager
from hetmem.bench import find_program
from hetmem.bench import umap as umap_suite

PATTERNS = ("read", "rmw", "triad", "read4k")
UMAP_LIB = os.environ.get("HETMEM_UMAP_LIB", "")
needs_umap = pytest.mark.skipif(
    not UMAP_LIB or not Path(UMAP_LIB).is_file(),
    reason="set HETMEM_UMAP_LIB to a built LLNL UMap libumap.so to run the UMap side",
)


def kernel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = find_program("hm-kernel-umapcmp")
    return subprocess.run(
        [str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "2", **(env or {})},
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    data: dict[str, Any] = json.loads(lines[0])
    return data


@pytest.mark.parametrize("pattern", PATTERNS)
def test_malloc_backend_runs_and_verifies(pattern: str) -> None:
    data = result(kernel("--variant", pattern, "--bytes", "4M", "--reps", "2"))
    assert data["verified"] is True
    assert data["kernel"] == "umapcmp" and data["variant"] == pattern
    assert data["backend"] == "malloc"
    assert len(data["times_s"]) == 2 and data["time_s"] > 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_wrong_data_fails_verification(pattern: str) -> None:
    proc = kernel("--variant", pattern, "--bytes", "1M", "--inject-error")
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert "verification failed" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--backend", "umap", "--umap-lib", "/nonexistent/libumap.so"),
        ("--backend", "umap", "--umap-lib", "/bin/sh"),
        ("--backend", "umap"),
        ("--umap-lib", "/nonexistent/libumap.so"),
        ("--variant", "write"),
    ],
)
def test_kernel_bad_input_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    proc = kernel(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("hm-kernel-umapcmp: ")


def test_suite_refuses_missing_lib(hetmem: Any) -> None:
    proc = hetmem("bench", "umap", "--umap-lib", "/nonexistent/libumap.so", timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("--umap-lib /nonexistent/libumap.so: no such file")


def test_suite_refuses_a_file_that_is_not_libumap(hetmem: Any, tmp_path: Path) -> None:
    fake = tmp_path / "libumap.so"
    fake.write_text("not a library\n")
    proc = hetmem("bench", "umap", "--umap-lib", str(fake), "-o", str(tmp_path / "o"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load" in lines[0]
    assert not (tmp_path / "o").exists()  # refused before anything ran


@pytest.mark.parametrize(
    "args",
    [
        ("--umap-pagesizes", "3K"),
        ("--umap-pagesizes", "1G"),
        ("--sizes", "twice"),
        ("--fast-budget", "lots"),
        ("--patterns", "read,write"),
        ("--repeat", "0"),
    ],
)
def test_suite_bad_sizes_are_one_line_exit_2(
    hetmem: Any, tmp_path: Path, args: tuple[str, ...]
) -> None:
    proc = hetmem("bench", "umap", "--umap-lib", "/bin/sh", *args, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _run(rep: int, who: str, t: float | None, error: str = "") -> dict[str, Any]:
    return {
        "rep": rep,
        "pattern": "read",
        "multiple": 2.0,
        "contender": who,
        "time_s": t,
        "error": error,
    }


def test_summary_takes_umaps_best_page_size_and_pairs_ratios() -> None:
    p = {"patterns": ["read"], "multiples": [2.0], "pagesizes": [4096, 65536]}
    runs = [
        *[_run(r, "hetmem", 1.0 + 0.1 * r) for r in range(3)],
        *[_run(r, "umap-4 KiB", 5.0) for r in range(3)],
        *[_run(r, "umap-64 KiB", 2.0) for r in range(3)],
    ]
    (row,) = umap_suite.summarize(p, runs)
    assert row["umap_best"] == "umap-64 KiB"
    assert row["times"]["hetmem"]["median"] == pytest.approx(1.1)
    assert row["ratio"]["of_medians"] == pytest.approx(2.0 / 1.1)
    assert row["ratio"]["min"] == pytest.approx(2.0 / 1.2)
    assert row["ratio"]["max"] == pytest.approx(2.0)
    assert row["target"]["pass"] is True
    slow = [{**r, "time_s": r["time_s"] * 2} if r["contender"] == "hetmem" else r for r in runs]
    (row,) = umap_suite.summarize(p, slow)
    assert row["target"]["pass"] is False


def test_summary_counts_a_failed_hetmem_run_as_a_miss() -> None:
    p = {"patterns": ["read"], "multiples": [2.0], "pagesizes": [4096]}
    runs = [_run(0, "hetmem", 1.0), _run(1, "hetmem", None, "exit code 1")]
    runs += [_run(r, "umap-4 KiB", 9.0) for r in range(2)]
    (row,) = umap_suite.summarize(p, runs)
    assert row["target"]["pass"] is False
    assert row["errors"] == ["hetmem rep 1: exit code 1"]


def test_schedule_rotates_the_contenders() -> None:
    p = {"patterns": ["read"], "multiples": [2.0], "pagesizes": [4096, 65536], "repeat": 3}
    firsts = [c for rep, _, _, c in umap_suite.schedule(p)][::3]
    assert firsts == ["hetmem", "umap-4 KiB", "umap-64 KiB"]


@needs_umap
@pytest.mark.parametrize("pattern", PATTERNS)
def test_umap_backend_runs_and_verifies(pattern: str, tmp_path: Path) -> None:
    env = {"UMAP_PAGESIZE": "65536", "UMAP_BUFSIZE": "64"}
    args = ("--backend", "umap", "--umap-lib", UMAP_LIB, "--storage", str(tmp_path))
    data = result(kernel("--variant", pattern, "--bytes", "8M", "--reps", "2", *args, env=env))
    assert data["backend"] == "umap" and data["umap_pagesize"] == 65536
    assert list(tmp_path.iterdir()) == []  # its files were unlinked at once
    bad = kernel("--variant", pattern, "--bytes", "8M", "--inject-error", *args, env=env)
    assert bad.returncode == 3


@needs_umap
@needs_pager
def test_suite_runs_both_sides(hetmem: Any, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = hetmem(
        "bench", "umap", "--umap-lib", UMAP_LIB, "--fast-budget", "16M",
        "--umap-pagesizes", "4K,64K", "--repeat", "1", "--kernel-reps", "1",
        "--reads", "512", "--storage", str(tmp_path), "-o", str(out), "--json",
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1 and data["kind"] == "bench-umap"
    assert [r["pattern"] for r in data["rows"]] == list(PATTERNS)
    for row in data["rows"]:
        assert row["errors"] == []
        assert row["umap_best"] in ("umap-4 KiB", "umap-64 KiB")
        assert row["target"]["pass"] in (True, False)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 4 * 3
    for r in runs:  # hetmem's pager figures come from --stats; UMap has none
        assert (r["pager"] is not None) == (r["contender"] == "hetmem")
    assert all(r["pager"]["counters"]["bytes_read"] > 0 for r in runs if r["pager"])
