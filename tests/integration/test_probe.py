# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem probe` and `hetmem bench reference` end to end, at small sizes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import run_hetmem

SMALL = ["--array-size", "8MiB", "--storage-size", "16MiB", "--threads", "1"]


def _scratch_base() -> str:
    return os.environ.get("TMPDIR") or "/var/tmp"


@pytest.fixture
def scratch():
    """A fresh directory on the default storage tier, removed afterwards."""
    d = tempfile.mkdtemp(prefix="hm-test-probe-", dir=_scratch_base())
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def env(tmp_path):
    return {"HETMEM_CACHE_DIR": str(tmp_path / "cache")}


def _fs_is_memory(path: str) -> bool:
    return os.statvfs(path).f_bsize > 0 and subprocess.run(
        ["stat", "-f", "-c", "%T", path], capture_output=True, text=True
    ).stdout.strip() in ("tmpfs", "ramfs")


def test_probe_json_schema_and_cache(scratch, env):
    if _fs_is_memory(str(scratch)):
        pytest.skip("scratch directory is on tmpfs")
    proc = run_hetmem("probe", "--quick", "--json", "--storage", str(scratch), *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1
    assert data["quick"] is True
    assert data["machine"]
    names = [t["name"] for t in data["tiers"]]
    assert f"storage:{scratch}" in names
    mem = [t for t in data["tiers"] if t["kind"] == "memory"]
    assert mem, "no memory tier measured"
    for t in mem:
        assert t["name"] == f"node{t['numa_node']}"
        assert [s["threads"] for s in t["stream"]] == [1]
        s = t["stream"][0]
        for k in ("copy_gbs", "scale_gbs", "add_gbs", "triad_gbs"):
            assert s[k] > 0
        assert t["best"]["triad_gbs"] == s["triad_gbs"]
        assert t["latency_ns"] > 0
        assert t["array_bytes"] == 8 << 20
    (st,) = [t for t in data["tiers"] if t["kind"] == "storage"]
    assert st["path"] == str(scratch)
    assert st["seq_read_gbs"] > 0 and st["seq_write_gbs"] > 0
    assert st["file_bytes"] == 16 << 20
    assert [p["qd"] for p in st["randread"]] == [1, 2, 4, 8, 16, 32]
    for p in st["randread"]:
        assert p["iops"] > 0 and 0 < p["lat_us_p50"] <= p["lat_us_p99"]
    # Nothing left behind; the result is the cached one.
    assert list(scratch.iterdir()) == []
    cached = list(Path(env["HETMEM_CACHE_DIR"]).glob("probe-*.json"))
    assert len(cached) == 1
    assert json.loads(cached[0].read_text()) == data


def test_probe_table(scratch, env):
    if _fs_is_memory(str(scratch)):
        pytest.skip("scratch directory is on tmpfs")
    proc = run_hetmem("probe", "--quick", "--storage", str(scratch), *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "triad" in proc.stdout and "qd32" in proc.stdout
    assert "result cached in" in proc.stdout


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_missing_dir(scratch, env):
    proc = run_hetmem("probe", "--quick", "--storage", str(scratch / "nope"), *SMALL, env=env)
    _assert_one_line_error(proc, "does not exist", str(scratch / "nope"))


def test_not_a_dir(scratch, env):
    f = scratch / "file"
    f.write_text("x")
    proc = run_hetmem("probe", "--quick", "--storage", str(f), *SMALL, env=env)
    _assert_one_line_error(proc, "not a directory")


def test_too_full(scratch, env):
    proc = run_hetmem(
        "probe", "--quick", "--storage", str(scratch), *SMALL, "--storage-size", "1000T", env=env
    )
    _assert_one_line_error(proc, "free", "probe file needs")
    assert list(scratch.iterdir()) == []


def test_too_full_real_filesystem(scratch, env):
    """A real 24 MiB ext4 filesystem cannot hold the quick probe's 256 MiB file."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4")
    image, mnt = scratch / "fs.img", scratch / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(24 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)]).returncode != 0:
        pytest.skip("cannot loop-mount here")
    try:
        proc = run_hetmem("probe", "--quick", "--no-memory", "--storage", str(mnt), env=env)
        left = [n for n in os.listdir(mnt) if n != "lost+found"]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    _assert_one_line_error(proc, "free", str(mnt))
    assert left == []


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_tmpfs_refused(env):
    if not _fs_is_memory("/dev/shm"):
        pytest.skip("/dev/shm is not tmpfs here")
    proc = run_hetmem("probe", "--quick", "--storage", "/dev/shm", *SMALL, env=env)
    _assert_one_line_error(proc, "does not support O_DIRECT")
    # Others (MPI, pagers) use /dev/shm too: look for our own names only.
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(".hetmem-probe")]


def test_read_only_dir(scratch, env):
    target = scratch / "ro"
    target.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "hm-test-ro", str(target)],
            capture_output=True,
        )
        if mounted.returncode != 0:
            pytest.skip("cannot mount a read-only filesystem here")
        try:
            proc = run_hetmem("probe", "--quick", "--storage", str(target), *SMALL, env=env)
        finally:
            subprocess.run(["umount", str(target)], check=False)
        _assert_one_line_error(proc, "read-only")
    else:
        target.chmod(0o555)
        try:
            proc = run_hetmem("probe", "--quick", "--storage", str(target), *SMALL, env=env)
        finally:
            target.chmod(0o755)
        _assert_one_line_error(proc, "not writable")
    assert list(target.iterdir()) == []


def test_bad_threads_and_nodes(env):
    _assert_one_line_error(run_hetmem("probe", "--threads", "0", env=env), "--threads 0")
    _assert_one_line_error(run_hetmem("probe", "--nodes", "999", env=env), "node 999")
    _assert_one_line_error(run_hetmem("probe", "--storage-size", "lots", env=env), "not a size")


def test_cached_schema_checked(tmp_path, monkeypatch):
    from hetmem import probe
    from hetmem.errors import SchemaError
    from hetmem.run import cache

    monkeypatch.setenv("HETMEM_CACHE_DIR", str(tmp_path))
    assert probe.load_cached() is None
    cache.save("probe", {"schema_version": 99, "tiers": []})
    with pytest.raises(SchemaError):
        probe.load_cached()
    cache.save("probe", {"schema_version": 1, "tiers": []})
    assert probe.load_cached() == {"schema_version": 1, "tiers": []}


def test_parse_cpulist():
    from hetmem.probe import parse_cpulist

    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    with pytest.raises(ValueError):
        parse_cpulist("3-1")


def test_bench_dir_resolution(tmp_path, monkeypatch):
    from hetmem import bench
    from hetmem.errors import EnvironmentProblem

    # No build tree or installed package behind it: only HETMEM_BENCHDIR.
    monkeypatch.setenv("HETMEM_LIBDIR", str(tmp_path / "nolib" / "_lib"))
    monkeypatch.setenv("HETMEM_BENCHDIR", str(tmp_path))
    assert bench.bench_dir() == tmp_path
    with pytest.raises(EnvironmentProblem):
        bench.find_program("hm-stream-ref")
    prog = tmp_path / "hm-stream-ref"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    assert bench.find_program("hm-stream-ref") == prog
    monkeypatch.delenv("HETMEM_BENCHDIR")
    monkeypatch.setenv("HETMEM_LIBDIR", str(tmp_path / "lib"))
    assert bench.bench_dir() == tmp_path / "_bench"
    (tmp_path / "lib" / "bench").mkdir(parents=True)
    assert bench.bench_dir() == tmp_path / "lib" / "bench"


def test_stream_ref_program_checks_itself():
    """The reference STREAM validates its arrays and reports what it ran."""
    from hetmem.bench import bench_dir

    prog = bench_dir() / "hm-stream-ref"
    if not prog.exists():
        pytest.skip(f"{prog} not built")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [str(prog), "--elements", "100000", "--ntimes", "3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["valid"] is True and data["threads"] == 1 and data["elements"] == 100000
    assert data["triad_gbs"] > 0
    bad = subprocess.run([str(prog), "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2


def test_bench_reference_small(scratch, env):
    if _fs_is_memory(str(scratch)) or not shutil.which("fio"):
        pytest.skip("needs fio and a disk-backed scratch directory")
    proc = run_hetmem(
        "bench",
        "reference",
        "--json",
        "--rounds",
        "1",
        "--threads",
        "1",
        "--array-size",
        "8MiB",
        "--storage-size",
        "16MiB",
        "--storage",
        str(scratch),
        env=env,
    )
    # Exit 1 only means a target was missed on this noisy machine.
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    (s,) = data["stream"]
    assert s["threads"] == 1 and s["probe_triad_gbs"] > 0 and s["reference_triad_gbs"] > 0
    assert s["ratio"] == pytest.approx(s["probe_triad_gbs"] / s["reference_triad_gbs"])
    assert s["median_ratio"] == pytest.approx(s["ratio"])  # one round: median is the best
    st = data["storage"]
    assert st["probe_seq_read_gbs"] > 0 and st["fio_seq_read_gbs"] > 0
    assert data["pass"] == (s["pass"] and st["pass"])
    assert (proc.returncode == 0) == data["pass"]
    assert list(scratch.iterdir()) == []


def test_bench_needs_suite(env):
    _assert_one_line_error(run_hetmem("bench", env=env), "name a suite")
