# SPDX-License-Identifier: BSD-3-Clause
"""The hm-kernel-* benchmark programs: results, verification, bad arguments.

Binaries come from $HETMEM_BENCHDIR, else the build tree in $HETMEM_CBUILD
(bench/kernels), else the installed package (hetmem.bench.kernels.kernel_path).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CBUILD
from hetmem.bench import kernels
from hetmem.errors import EnvironmentProblem, SchemaError, UsageError

SMALL = "2MiB"

# (kernel, extra args): every variant at a small size.
CASES = [
    ("stream", ["--op", "all"]),
    ("stream", ["--op", "copy"]),
    ("stream", ["--op", "scale"]),
    ("stream", ["--op", "add"]),
    ("stream", ["--op", "triad"]),
    ("poly", ["--variant", "ro", "--degree", "0"]),
    ("poly", ["--variant", "ro", "--degree", "64"]),
    ("poly", ["--variant", "rw", "--degree", "16"]),
    ("poly", ["--variant", "rw", "--degree", "8192", "--bytes", "64K", "--reps", "1"]),
    ("scan", ["--variant", "read"]),
    ("scan", ["--variant", "rmw"]),
    ("scan", ["--variant", "strips"]),
    ("scan", ["--variant", "strips", "--bytes", "100000", "--strip-rows", "7"]),
    ("scan", ["--variant", "cols"]),
    ("scan", ["--variant", "cols", "--bytes", "100000"]),
    ("gemm", ["--variant", "blas"]),
    ("gemm", ["--variant", "naive", "--bytes", "512K"]),
    ("gemm", ["--variant", "tiled"]),
    ("gemm", ["--variant", "tiled", "--tile-budget", "2M", "--bytes", "3M"]),
    ("lu", ["--variant", "lapack"]),
    ("lu", ["--variant", "tiled"]),
    ("lu", ["--variant", "tiled", "--tile", "32", "--bytes", "1M"]),
    ("lu", ["--variant", "tiled", "--tile-budget", "1M", "--bytes", "4M"]),
    ("lu", ["--variant", "tiled", "--order", "left", "--tile", "32", "--bytes", "1M"]),
    ("fft", []),
    ("chase", []),
    ("chase", ["--loads", "1000"]),
    ("gups", ["--variant", "update"]),
    ("gups", ["--variant", "read4k"]),
    ("gups", ["--variant", "update4k"]),
]


@pytest.fixture(autouse=True, scope="module")
def _bench_dir():
    """Points the resolver at this build tree's kernels unless told otherwise."""
    old = os.environ.get("HETMEM_BENCHDIR")
    build = CBUILD / "bench" / "kernels"
    if not old and build.is_dir():
        os.environ["HETMEM_BENCHDIR"] = str(build)
    yield
    if old is None:
        os.environ.pop("HETMEM_BENCHDIR", None)
    else:
        os.environ["HETMEM_BENCHDIR"] = old


def run_raw(name: str, *args: str, threads: int = 2) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kernels.kernel_path(name)), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
    )


def with_defaults(args: list[str]) -> list[str]:
    out = list(args)
    if "--bytes" not in out:
        out += ["--bytes", SMALL]
    if "--reps" not in out:
        out += ["--reps", "2"]
    return out


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{k}-{'-'.join(a)}" for k, a in CASES])
def test_kernel_result(name: str, args: list[str]) -> None:
    res = kernels.run_kernel(name, [*with_defaults(args), "--threads", "2"])
    assert res["kernel"] == name
    assert res["verified"] is True
    assert res["threads"] == 2
    assert res["reps"] == len(res["times_s"])
    assert all(t > 0 for t in res["times_s"])
    assert res["time_stat"] == "best"
    assert res["time_s"] == min(res["times_s"])
    assert res["bytes_moved"] > 0
    assert res["flops"] >= 0
    assert res["gbs"] == pytest.approx(res["bytes_moved"] / res["time_s"] / 1e9, rel=1e-6)
    assert res["gflops"] == pytest.approx(res["flops"] / res["time_s"] / 1e9, rel=1e-6, abs=1e-12)
    if "--variant" in args:
        assert res["variant"] == args[args.index("--variant") + 1]


@pytest.mark.parametrize(("nbytes", "rows"), [(100000, 111), (2 << 20, 512), (4096, 22)])
def test_strips_walk_a_square_matrix(nbytes: int, rows: int) -> None:
    """strips: an isqrt(n)-row matrix of n // rows whole columns, each word
    updated once per repetition (16 bytes moved), whatever the strip height."""
    for strip in ("1", "7", "512", "100000"):
        args = ["--variant", "strips", "--bytes", str(nbytes), "--strip-rows", strip, "--reps", "2"]
        res = kernels.run_kernel("scan", args)
        n = nbytes // 8
        assert (res["rows"], res["columns"]) == (rows, n // rows)
        assert res["rows"] ** 2 <= n < (res["rows"] + 1) ** 2
        assert res["strip_rows"] == int(strip)
        assert res["bytes_moved"] == 16 * rows * (n // rows)
        assert res["verified"] is True


@pytest.mark.parametrize(("nbytes", "rows"), [(100000, 111), (2 << 20, 512)])
def test_cols_sum_down_the_columns(nbytes: int, rows: int) -> None:
    """cols: the same isqrt(n)-row matrix, row-major, each word read once
    per repetition (8 bytes moved); no strip height."""
    res = kernels.run_kernel("scan", ["--variant", "cols", "--bytes", str(nbytes), "--reps", "2"])
    n = nbytes // 8
    assert (res["rows"], res["columns"]) == (rows, n // rows)
    assert "strip_rows" not in res
    assert res["bytes_moved"] == 8 * rows * (n // rows)
    assert res["verified"] is True


def test_stream_counts_bytes_like_mccalpin() -> None:
    res = kernels.run_kernel("stream", ["--bytes", "3MiB", "--reps", "3"])
    n = res["elements"]
    assert n == 3 * 2**20 // 24
    assert res["bytes_moved"] == 10 * 8 * n  # copy 2 + scale 2 + add 3 + triad 3 words
    assert set(res["ops"]) == {"copy", "scale", "add", "triad"}
    triad = kernels.run_kernel("stream", ["--bytes", "3MiB", "--op", "triad"])
    assert triad["variant"] == "triad"
    assert triad["bytes_moved"] == 24 * n
    assert triad["flops"] == 2 * n


@pytest.mark.parametrize("variant", ["ro", "rw"])
def test_poly_intensity_is_eq1(variant: str) -> None:
    res = kernels.run_kernel(
        "poly", ["--bytes", "1MiB", "--degree", "100", "--variant", variant, "--reps", "1"]
    )
    n = res["elements"]
    assert res["degree"] == 100
    assert res["ai_eq1"] == pytest.approx(2 * 100 / 8)
    assert res["flops"] == 2 * 100 * n
    assert res["bytes_moved"] == (8 if variant == "ro" else 16) * n
    assert n * (8 if variant == "ro" else 16) <= 2**20


def test_sizes_accept_suffixes_and_equals_form() -> None:
    assert kernels.run_kernel("scan", ["--bytes", "1MiB", "--reps", "1"])["bytes"] == 2**20
    assert kernels.run_kernel("scan", ["--bytes=2M", "--reps=1"])["bytes"] == 2 * 2**20
    assert kernels.run_kernel("scan", ["--bytes", "1.5MB", "--reps", "1"])["bytes"] == 1_500_000


def test_median_stat() -> None:
    res = kernels.run_kernel("scan", ["--bytes", "1M", "--reps", "3", "--stat", "median"])
    assert res["time_stat"] == "median"
    assert res["time_s"] == sorted(res["times_s"])[1]


def test_gemm_size_follows_bytes() -> None:
    res = kernels.run_kernel("gemm", ["--bytes", "3M", "--reps", "1"])
    n = res["n"]
    assert 24 * n * n <= 3 * 2**20 < 24 * (n + 1) ** 2
    assert res["flops"] == 2 * n**3


@pytest.mark.parametrize(("name", "per_matrix"), [("gemm", 24), ("lu", 8)])
def test_tiles_follow_the_budget(name: str, per_matrix: int) -> None:
    """--tile-budget: three tiles take at most 1/8 of the budget, the matrix
    is split into equal tiles, and it stays within 16 x tiles of the asked size."""
    budget = 4 << 20
    res = kernels.run_kernel(
        name, ["--variant", "tiled", "--bytes", "12M", "--reps", "1", "--tile-budget", "4M"]
    )
    nb, n = res["tile"], res["n"]
    assert 3 * nb * nb * 8 <= budget / 8
    assert nb % 16 == 0 and n % nb == 0 and n // nb >= 2
    asked = int((12 * 2**20 / per_matrix) ** 0.5)
    assert asked - 16 * (n // nb) <= n <= asked
    # a bigger budget gives bigger (fewer) tiles
    big = kernels.run_kernel(
        name, ["--variant", "tiled", "--bytes", "12M", "--reps", "1", "--tile-budget", "64M"]
    )
    assert big["tile"] > nb


@pytest.mark.parametrize("tile", ["16", "48"])
def test_lu_orders_compute_the_same_factors(tile: str) -> None:
    """Left- and right-looking tile LU apply each tile's updates in the same
    order (k ascending), so their factors agree to the bit: the same
    residual, and a wrong update order or a missed tile would change it."""
    args = ["--variant", "tiled", "--bytes", "2M", "--reps", "1", "--tile", tile]
    right = kernels.run_kernel("lu", [*args, "--order", "right"])
    left = kernels.run_kernel("lu", [*args, "--order", "left"])
    assert right["order"] == "right" and left["order"] == "left"
    assert left["n"] == right["n"] and left["n"] // int(tile) >= 8
    assert left["residual_inf"] == right["residual_inf"] > 0


BAD_ARGS = [
    ("stream", ["--frobnicate"]),
    ("stream", ["--bytes", "12XB"]),
    ("stream", ["--bytes", "-5"]),
    ("stream", ["--bytes", "100"]),  # too small
    ("stream", ["--op", "sum"]),
    ("poly", ["--degree", "8193"]),
    ("poly", ["--variant", "inplace"]),
    ("scan", ["--threads", "0"]),
    ("scan", ["--reps", "many"]),
    ("scan", ["--min-time", "-1"]),
    ("scan", ["--min-time", "soon"]),
    ("stream", ["--op", "all", "--reps", "201"]),
    ("scan", ["--bytes"]),
    ("gemm", ["--variant", "strassen"]),
    ("gemm", ["--variant", "tiled", "--tile", "8"]),
    ("gemm", ["--variant", "tiled", "--tile-budget", "lots"]),
    ("gemm", ["--variant", "tiled", "--tile", "4096", "--bytes", "1M"]),
    ("lu", ["--tile", "4"]),
    ("lu", ["--tile", "64"]),
    ("lu", ["--variant", "lapack", "--tile-budget", "1M"]),
    ("lu", ["--variant", "lapack", "--order", "left"]),
    ("lu", ["--variant", "tiled", "--order", "up"]),
    ("gemm", ["--tile", "64"]),
    ("gemm", ["--variant", "naive", "--no-hints"]),
    ("fft", ["stray"]),
    ("chase", ["--loads", "0"]),
    ("gups", ["--variant", "update4k", "--bytes", "64K", "--threads", "32"]),
    ("scan", ["--variant", "strips", "--strip-rows", "0"]),
    ("scan", ["--variant", "strips", "--strip-rows", "many"]),
    ("scan", ["--variant", "rmw", "--strip-rows", "64"]),
    ("scan", ["--variant", "cols", "--strip-rows", "64"]),
    ("scan", ["--strip-rows", "64"]),
]


@pytest.mark.parametrize(
    ("name", "args"), BAD_ARGS, ids=[f"{k}-{'-'.join(a)}" for k, a in BAD_ARGS]
)
def test_bad_arguments_fail_with_one_line(name: str, args: list[str]) -> None:
    proc = run_raw(name, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hm-kernel-{name}: ")
    with pytest.raises(UsageError):
        kernels.run_kernel(name, args)


INJECT = [
    ("stream", ["--op", "all"]),
    ("stream", ["--op", "scale"]),
    ("poly", ["--variant", "ro", "--degree", "32"]),
    ("poly", ["--variant", "rw", "--degree", "32"]),
    ("scan", ["--variant", "read"]),
    ("scan", ["--variant", "rmw"]),
    ("scan", ["--variant", "strips", "--strip-rows", "100"]),
    ("scan", ["--variant", "cols", "--bytes", "100000"]),
    ("gemm", ["--variant", "blas"]),
    ("gemm", ["--variant", "naive", "--bytes", "256K"]),
    ("gemm", ["--variant", "tiled", "--tile", "64", "--bytes", "1M"]),
    ("lu", ["--variant", "lapack"]),
    ("lu", ["--variant", "tiled"]),
    ("lu", ["--variant", "tiled", "--order", "left"]),
    ("fft", []),
    ("chase", []),
    ("chase", ["--loads", "77"]),
    ("gups", ["--variant", "update"]),
    ("gups", ["--variant", "read4k"]),
    ("gups", ["--variant", "update4k"]),
]


@pytest.mark.parametrize(("name", "args"), INJECT, ids=[f"{k}-{'-'.join(a)}" for k, a in INJECT])
def test_wrong_result_fails_the_run(name: str, args: list[str]) -> None:
    """--inject-error corrupts one result (or data) element before the check."""
    full = [*with_defaults(args), "--inject-error"]
    proc = run_raw(name, *full)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "verification failed" in lines[0], proc.stderr
    with pytest.raises(kernels.KernelVerificationError):
        kernels.run_kernel(name, full)
    # the same run without the injected error passes
    assert kernels.run_kernel(name, with_defaults(args))["verified"] is True


# Every kernel repeats past --reps under --min-time (the runs are tiny, so a
# few milliseconds of minimum time always takes more than one repetition).
MIN_TIME = [
    ("stream", ["--op", "triad", "--bytes", "96K"]),
    ("poly", ["--variant", "ro", "--degree", "4", "--bytes", "64K"]),
    ("scan", ["--variant", "rmw", "--bytes", "64K"]),
    ("gemm", ["--variant", "blas", "--bytes", "96K"]),
    ("lu", ["--variant", "tiled", "--bytes", "256K"]),
    ("fft", ["--bytes", "64K"]),
    ("chase", ["--loads", "1000", "--bytes", "64K"]),
    ("gups", ["--variant", "update", "--bytes", "64K", "--updates", "1000"]),
    ("gups", ["--variant", "read4k", "--bytes", "256K", "--updates", "8"]),
]


@pytest.mark.parametrize(
    ("name", "args"), MIN_TIME, ids=[f"{k}-{'-'.join(a)}" for k, a in MIN_TIME]
)
def test_min_time_repeats_until_reached_and_stays_verified(name: str, args: list[str]) -> None:
    res = kernels.run_kernel(name, [*args, "--reps", "1", "--min-time", "0.02", "--threads", "2"])
    assert res["verified"] is True
    assert res["min_time_s"] == 0.02
    assert res["reps"] == len(res["times_s"])
    # it repeats until the timed repetitions reach the minimum, and stops at
    # the first one that does (a loaded machine may get there in one)
    assert sum(res["times_s"][:-1]) < 0.02 <= sum(res["times_s"])
    assert res["time_best_s"] == min(res["times_s"])
    # a wrong result still fails however many repetitions ran
    proc = run_raw(name, *args, "--reps", "1", "--min-time", "0.02", "--inject-error")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)


def test_min_time_repeats_past_reps() -> None:
    # a 16 MiB scan takes about a millisecond (and at most 100000 run): two
    # repetitions reach 0.5 s only if the machine stops the kernel for most
    # of it
    res = kernels.run_kernel("scan", ["--bytes", "16M", "--reps", "2", "--min-time", "0.5"])
    assert len(res["times_s"]) > 2
    assert res["reps"] == len(res["times_s"])
    assert sum(res["times_s"][:-1]) < 0.5 <= sum(res["times_s"])


def test_min_time_stops_at_the_kernels_cap() -> None:
    # STREAM --op all grows its values 15x per repetition: 200 at most
    res = kernels.run_kernel("stream", ["--bytes", "24K", "--reps", "1", "--min-time", "3600"])
    assert res["reps"] == len(res["times_s"]) == 200
    assert res["verified"] is True


def test_help_lists_flags() -> None:
    proc = run_raw("poly", "--help")
    assert proc.returncode == 0
    assert "--degree" in proc.stdout and "--bytes" in proc.stdout
    assert "--inject-error" not in proc.stdout


def test_threads_default_from_environment() -> None:
    proc = run_raw("scan", "--bytes", "1M", "--reps", "1", threads=1)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == 1


def test_kernel_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = kernels.kernel_path("stream").resolve()
    assert real.name == "hm-kernel-stream"
    with pytest.raises(UsageError):
        kernels.kernel_path("nosuchkernel")
    # an empty HETMEM_BENCHDIR and an empty library dir: nothing to find
    monkeypatch.setenv("HETMEM_BENCHDIR", str(tmp_path / "bench"))
    monkeypatch.setenv("HETMEM_LIBDIR", str(tmp_path / "_lib"))
    with pytest.raises(EnvironmentProblem):
        kernels.kernel_path("stream")
    # the installed layout: _bench beside _lib
    inst = tmp_path / "_bench"
    inst.mkdir()
    (inst / "hm-kernel-stream").symlink_to(real)
    assert kernels.kernel_path("stream") == inst / "hm-kernel-stream"
    # $HETMEM_BENCHDIR, as a bench folder holding kernels/, comes first
    own = tmp_path / "bench" / "kernels"
    own.mkdir(parents=True)
    (own / "hm-kernel-stream").symlink_to(real)
    assert kernels.kernel_path("stream") == own / "hm-kernel-stream"


def test_parse_result_rejects_bad_output() -> None:
    good = kernels.run_kernel("scan", ["--bytes", "1M", "--reps", "1"])
    line = json.dumps(good)
    assert kernels.parse_result(line + "\n") == good
    with pytest.raises(SchemaError):
        kernels.parse_result("")
    with pytest.raises(SchemaError):
        kernels.parse_result(line + "\n" + line)
    with pytest.raises(SchemaError):
        kernels.parse_result(json.dumps({**good, "schema_version": 2}))
    with pytest.raises(SchemaError):
        kernels.parse_result(json.dumps({**good, "verified": False}))
    bad = dict(good)
    del bad["times_s"]
    with pytest.raises(SchemaError):
        kernels.parse_result(json.dumps(bad))
