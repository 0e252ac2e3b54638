# SPDX-License-Identifier: BSD-3-Clause
"""`hetmem run` in dram, cache and swap modes, and the preload interposer.

The interposer's data checks run in tests/c/preload_target.c (built as
hm_preload_target in the C build tree); these tests run it under each mode
and check what passes through, what is cleaned up and what the stats say.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CBUILD, REPO, needs_pager, run_hetmem
from hetmem import _native
from hetmem.bench import kernels

TARGET = CBUILD / "hm_preload_target"
PRELOAD = _native.library_dir() / "libhetmem_preload.so"
IS_ROOT = os.geteuid() == 0


needs_root = pytest.mark.skipif(not IS_ROOT, reason="swap mode needs root")
needs_target = pytest.mark.skipif(not TARGET.exists(), reason=f"{TARGET} not built")

MODE_ARGS = {
    "dram": ["--mode", "dram"],
    "cache": ["--mode", "cache", "--fast-budget", "64M"],
    "swap": ["--mode", "swap", "--fast-budget", "64M", "--swap-size", "256M"],
}
MODE_MARKS = {"dram": [], "cache": [needs_pager], "swap": [needs_root]}
MODES = [pytest.param(m, marks=MODE_MARKS[m]) for m in MODE_ARGS]


def _our_swaps() -> list[str]:
    with open("/proc/swaps") as f:
        return [ln.split()[0] for ln in f.readlines()[1:] if ".hetmem-swap-" in ln]


def _cgroup_leftovers(pid: int) -> list[str]:
    found = []
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        for dirpath, dirnames, _ in os.walk(root):
            for d in dirnames:
                if d == f"hetmem-run-{pid}" or d.startswith(f"hetmem-run-{pid}-"):
                    found.append(os.path.join(dirpath, d))
            if dirpath.count("/") > 8:
                dirnames.clear()
    return found


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "tier"
    d.mkdir()
    yield d
    # a swap file left active would keep the tmp dir from being removed
    for name in _our_swaps():
        if name.startswith(str(d)):
            subprocess.run(["swapoff", name], capture_output=True)


# ---------------------------------------------------------------------------
# pass-through
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_exit_code_and_output_pass_through(mode: str, storage: Path) -> None:
    proc = run_hetmem(
        "run",
        *MODE_ARGS[mode],
        "--storage",
        str(storage),
        "--",
        "sh",
        "-c",
        "echo to-stdout; echo to-stderr >&2; exit 7",
    )
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "to-stdout\n"
    assert proc.stderr.splitlines()[-1] == "to-stderr"
    assert not [ln for ln in proc.stderr.splitlines() if "error" in ln]


@pytest.mark.parametrize("mode", MODES)
def test_killed_command_gives_128_plus_signal(mode: str, storage: Path) -> None:
    proc = run_hetmem(
        "run", *MODE_ARGS[mode], "--storage", str(storage), "--", "sh", "-c", "kill -KILL $$"
    )
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr


def test_stdin_passes_through(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("line one\nline two\n")
    with open(src) as stdin:
        proc = subprocess.run(
            [sys.executable, "-m", "hetmem", "run", "--mode", "dram", "--", "cat"],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0
    assert proc.stdout == "line one\nline two\n"


def test_dram_stats_file(tmp_path: Path) -> None:
    stats = tmp_path / "s.json"
    proc = run_hetmem("run", "--mode", "dram", "--stats", str(stats), "--", "sh", "-c", "exit 3")
    assert proc.returncode == 3
    data = json.loads(stats.read_text())
    assert data["schema_version"] == 1
    assert data["mode"] == "dram"
    assert data["exit_code"] == 3
    assert data["command"] == ["sh", "-c", "exit 3"]
    assert data["wall_s"] > 0


# ---------------------------------------------------------------------------
# bad input: one line, exit 2, nothing runs
# ---------------------------------------------------------------------------
def _bad(*args: str, marker: Path | None = None) -> str:
    proc = run_hetmem("run", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == ""
    if marker is not None:
        assert not marker.exists(), "the command ran despite bad input"
    return lines[0]


def test_bad_input_missing_command() -> None:
    assert "no command given: hetmem run [OPTIONS] --" in _bad("--mode", "dram")
    assert "no command" in _bad("--mode", "dram", "--")


def test_bad_input_unknown_command() -> None:
    # exit 127, as a shell gives (tests/integration/test_security_run_exec.py: 126 too)
    proc = run_hetmem("run", "--mode", "dram", "--", "no-such-command-hetmem")
    assert proc.returncode == 127 and "not found" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_input_unparsable_size(tmp_path: Path) -> None:
    m = tmp_path / "ran"
    msg = _bad("--mode", "cache", "--fast-budget", "12 parsecs", "--", "touch", str(m), marker=m)
    assert "--fast-budget" in msg


@pytest.mark.parametrize("mode", ["cache", "swap"])
def test_bad_input_missing_budget(mode: str, tmp_path: Path) -> None:
    m = tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if k != "HETMEM_FAST_BUDGET"}
    proc = subprocess.run(
        [sys.executable, "-m", "hetmem", "run", "--mode", mode, "--", "touch", str(m)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--fast-budget" in proc.stderr
    assert not m.exists()


@pytest.mark.parametrize("mode", ["cache", pytest.param("swap", marks=needs_root)])
def test_bad_input_storage_missing_or_not_a_dir(mode: str, tmp_path: Path) -> None:
    m = tmp_path / "ran"
    msg = _bad(
        "--mode",
        mode,
        "--fast-budget",
        "64M",
        "--storage",
        str(tmp_path / "nope"),
        "--",
        "touch",
        str(m),
        marker=m,
    )
    assert "does not exist" in msg
    f = tmp_path / "file"
    f.write_text("x")
    msg = _bad(
        "--mode", mode, "--fast-budget", "64M", "--storage", str(f), "--", "touch", str(m), marker=m
    )
    assert "not a directory" in msg


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A full tmpfs and a read-only one (root only)."""
    if not IS_ROOT:
        pytest.skip("mounting needs root")
    full = tmp_path / "full"
    ro = tmp_path / "ro"
    full.mkdir()
    ro.mkdir()
    mounted = []
    try:
        for d, opts in ((full, "size=256k"), (ro, "ro,size=256k")):
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", opts, "hetmem-test", str(d)], capture_output=True
            )
            if r.returncode != 0:
                pytest.skip("cannot mount tmpfs here")
            mounted.append(d)
        with open(full / "filler", "wb") as fh:
            try:
                fh.write(b"\0" * (1 << 20))
            except OSError:
                pass
        yield full, ro
    finally:
        for d in mounted:
            subprocess.run(["umount", str(d)], capture_output=True)


@pytest.mark.parametrize("mode", ["cache", "swap"])
def test_bad_input_full_or_read_only_storage(
    mode: str, small_tmpfs: tuple[Path, Path], tmp_path: Path
) -> None:
    full, ro = small_tmpfs
    m = tmp_path / "ran"

    def bad_storage(storage: Path) -> str:
        argv = ["--mode", mode, "--fast-budget", "64M", "--storage", str(storage)]
        return _bad(*argv, "--", "touch", str(m), marker=m)

    msg = bad_storage(full)
    assert "full" in msg or "No space" in msg
    msg = bad_storage(ro)
    assert "not writable" in msg and "Read-only" in msg


def test_bad_input_budget_below_fetch_unit(tmp_path: Path) -> None:
    m = tmp_path / "ran"
    msg = _bad(
        "--mode",
        "cache",
        "--fast-budget",
        "64K",
        "--storage",
        str(tmp_path),
        "--",
        "touch",
        str(m),
        marker=m,
    )
    assert "fetch unit" in msg


def test_swap_without_root_is_refused(tmp_path: Path) -> None:
    if IS_ROOT and not shutil.which("setpriv"):
        pytest.skip("needs setpriv to drop root")
    m = tmp_path / "ran"
    tmp_path.chmod(0o777)
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if IS_ROOT else []
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    proc = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "hetmem",
            "run",
            "--mode",
            "swap",
            "--fast-budget",
            "64M",
            "--storage",
            str(tmp_path),
            "--",
            "touch",
            str(m),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "root" in proc.stderr
    assert not m.exists()


# ---------------------------------------------------------------------------
# swap baseline
# ---------------------------------------------------------------------------
def _run_target_check(
    mode: str, budget: str, storage: Path, stats: Path, mib: int, *extra: str
) -> dict:
    """Runs the target's full check of MIB MiB under MODE; returns its stats."""
    proc = run_hetmem(
        "run", "--mode", mode, "--fast-budget", budget, *extra,
        "--storage", str(storage), "--stats", str(stats),
        "--", str(TARGET), "check", str(mib),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "failures=0" in proc.stdout
    data = json.loads(stats.read_text())
    assert data["mode"] == mode and data["exit_code"] == 0
    return data


@needs_root
@needs_target
def test_swap_mode_runs_beyond_budget_and_cleans_up(storage: Path, tmp_path: Path) -> None:
    stats = tmp_path / "swap.json"
    data = _run_target_check("swap", "48M", storage, stats, 160, "--swap-size", "512M")
    sw = data["swap"]
    assert sw["limit_bytes"] == 48 << 20
    assert sw["max_usage_bytes"] <= 48 << 20
    # the command touched ~200 MiB with 48 MiB of DRAM: it must have swapped
    assert sw["swap_peak_bytes"] > 32 << 20
    assert not [s for s in _our_swaps() if s.startswith(str(storage))]
    assert not list(storage.iterdir())
    assert not Path(data["cgroup"]).exists()


@needs_root
@needs_target
def test_swap_full_oom_is_named_and_passes_through(storage: Path, tmp_path: Path) -> None:
    # 160 MiB touched, 32 MiB of DRAM and 32 MiB of swap: the cgroup's OOM
    # killer ends it; the note says why, the exit status says SIGKILL
    stats = tmp_path / "swap.json"
    proc = run_hetmem(
        "run", "--mode", "swap", "--fast-budget", "32M", "--swap-size", "32M",
        "--storage", str(storage), "--stats", str(stats), "--", str(TARGET), "check", "160",
    )  # fmt: skip
    assert proc.returncode == 137, proc.stderr
    assert "OOM killer" in proc.stderr and "swap file was full" in proc.stderr, proc.stderr
    data = json.loads(stats.read_text())
    assert data["swap"]["oom_kill"] >= 1 and data["signal"] == 9
    assert not [s for s in _our_swaps() if s.startswith(str(storage))]
    assert not list(storage.iterdir())


@needs_root
def test_swap_mode_interrupted_cleans_up(storage: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetmem",
            "run",
            "--mode",
            "swap",
            "--fast-budget",
            "64M",
            "--swap-size",
            "128M",
            "--storage",
            str(storage),
            "--",
            "sleep",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            s.startswith(str(storage)) for s in _our_swaps()
        ):
            time.sleep(0.05)
        assert any(s.startswith(str(storage)) for s in _our_swaps()), "swap file never appeared"
        time.sleep(0.3)  # let it start the command
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not [s for s in _our_swaps() if s.startswith(str(storage))]
    assert not list(storage.iterdir())
    assert not _cgroup_leftovers(proc.pid)


# ---------------------------------------------------------------------------
# the interposer
# ---------------------------------------------------------------------------
def _hooks_in_header() -> list[str]:
    """HM_PL_HOOKS's entries, with those of the lists it includes."""
    text = (REPO / "src" / "preload" / "preload.h").read_text()

    def entries(macro: str) -> list[str]:
        block = text[text.index(f"#define {macro}(X)") :]
        block = block[: block.index("\n\n")]
        inner = re.findall(r"^\s*(HM_PL_\w+)\(X\)", block, re.M)
        return re.findall(r"X\([^,]+,\s*(\w+),", block) + [h for m in inner for h in entries(m)]

    return entries("HM_PL_HOOKS")


def test_preload_exports_exactly_the_hooks() -> None:
    if not PRELOAD.exists():
        pytest.skip(f"{PRELOAD} not built")
    hooks = _hooks_in_header()
    assert "malloc" in hooks and "mremap" in hooks and len(hooks) == len(set(hooks))
    mapfile = (REPO / "src" / "preload" / "preload.map").read_text()
    glob = mapfile[mapfile.index("global:") : mapfile.index("local:")]
    assert sorted(re.findall(r"(\w+);", glob)) == sorted(hooks)
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(PRELOAD)], capture_output=True, text=True, check=True
    ).stdout
    exported = sorted({ln.split()[-1].split("@")[0] for ln in out.splitlines() if ln.strip()})
    assert exported == sorted(hooks)
    needed = subprocess.run(["readelf", "-d", str(PRELOAD)], capture_output=True, text=True).stdout
    assert "libhetmem.so" not in needed


@needs_target
def test_preload_without_budget_fails_at_init_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETMEM_")}
    env["LD_PRELOAD"] = str(PRELOAD)
    proc = subprocess.run(
        [str(TARGET), "exit", "5"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # main never ran
    assert proc.stderr.startswith("hetmem: cannot start cache mode: ")
    assert len(proc.stderr.splitlines()) == 1


@needs_pager
@needs_target
def test_cache_mode_target_checks_every_byte(storage: Path, tmp_path: Path) -> None:
    stats = tmp_path / "cache.json"
    data = _run_target_check("cache", "16M", storage, stats, 64)
    procs = data["processes"]
    assert len(procs) >= 2  # the target and the child it fork+execs
    ip = data["interposer"]
    # large blocks of every kind went to the pager, none fell back to libc
    assert ip["large_allocations"] >= 40
    assert ip["mmap_allocations"] >= 2
    assert ip["fallbacks"] == 0
    assert ip["large_frees"] == ip["large_allocations"]
    assert ip["small_allocations"] > 80000
    assert data["pager"] is not None
    # 64 MiB and more through a 16 MiB cache: data went to the storage tier
    pager = data["pager"]
    counters = pager.get("counters", pager)
    assert counters["bytes_written"] > 0
    assert counters["evictions"] > 0
    assert not list(storage.iterdir())


@needs_pager
@needs_target
@pytest.mark.parametrize("whole", [True, False], ids=["process", "pager-only"])
def test_cache_budget_bounds_the_process(storage: Path, tmp_path: Path, whole: bool) -> None:
    # 24 MiB of 64 KiB blocks (below the threshold: plain memory) held while
    # 64 MiB pass through the pager at a 48 MiB budget: the cache must keep
    # out of their way, as a memory cgroup of 48 MiB would make swap do, and
    # say so; HETMEM_BUDGET_PROCESS=0 gives the cache the whole budget back
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "48M", "--storage", str(storage),
        "--stats", str(stats), "--", str(TARGET), "outside", "24", "64",
        env=None if whole else {"HETMEM_BUDGET_PROCESS": "0"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "outside ok\n"
    data = json.loads(stats.read_text())
    c = data["pager"]["counters"]
    mib = 1 << 20
    if whole:
        # other_peak leaves out the pager's own memory, some of it unreserved
        assert c["other_peak_bytes"] + c["own_bytes"] >= 24 * mib, c
        assert c["peak_resident_bytes"] <= 24 * mib, c
        assert data["pager_summary"]["outside_peak_bytes"] == c["other_peak_bytes"]
        assert "own memory outside the pager" in proc.stderr
        assert "--threshold 256K" in proc.stderr
    else:
        assert c["other_peak_bytes"] == 0
        assert c["peak_resident_bytes"] > 32 * mib, c
        assert "outside the pager" not in proc.stderr
    assert not list(storage.iterdir())


@needs_pager
@needs_target
def test_cache_mode_keeps_glibcs_placement_within_the_page(storage: Path) -> None:
    # glibc serves fresh large blocks with an mmap each, 16 bytes in; blocks
    # the pager serves start there too (a page-aligned start made FFTW plan
    # other codelets, 8-10% slower), and alignments asked for are kept
    bare = subprocess.run([str(TARGET), "layout"], capture_output=True, text=True, check=True)
    assert bare.stdout.startswith("malloc 16 calloc 16 realloc 16 ")
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "64M", "--storage", str(storage),
        "--", str(TARGET), "layout",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == bare.stdout


@needs_pager
@needs_target
def test_cache_mode_sigkill_leaves_no_backing_files(storage: Path, tmp_path: Path) -> None:
    # killed only once its 64 MiB (4x the budget) are written through the
    # pager, so the backing files exist at the moment of the kill on any machine
    marker = tmp_path / "filled"
    script = (
        f"{TARGET} hold 64 {marker} & pid=$!; "
        f"while [ ! -e {marker} ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done; "
        "kill -KILL $pid; wait $pid"
    )
    proc = run_hetmem(
        "run",
        "--mode",
        "cache",
        "--fast-budget",
        "16M",
        "--storage",
        str(storage),
        "--",
        "sh",
        "-c",
        script,
    )
    assert proc.returncode == 128 + signal.SIGKILL
    assert not list(storage.iterdir())


def test_sigterm_is_forwarded_to_the_command() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", "run", "--mode", "dram", "--", "sleep", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for the command to be running
            kids = subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
            if kids:
                break
            time.sleep(0.05)
        assert kids, "the command never started"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(int(kids[0]), 0)


# ---------------------------------------------------------------------------
# a statically linked command: LD_PRELOAD cannot reach it, and hetmem says so
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def static_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("static")
    src = d / "st.c"
    src.write_text(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "int main(void) { char *p = malloc(8 << 20); memset(p, 1, 8 << 20);\n"
        '  printf("static %d\\n", p[4096]); free(p); return 4; }\n'
    )
    exe = d / "st"
    proc = subprocess.run([cc, "-static", "-O1", str(src), "-o", str(exe)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("no static libc to link with")
    return exe


def test_static_elf_detection(static_program: Path) -> None:
    from hetmem.run.checks import is_static_elf

    assert is_static_elf(str(static_program))
    assert not is_static_elf(sys.executable)  # dynamically linked
    assert not is_static_elf(shutil.which("sh") or "/bin/sh")
    script = static_program.parent / "s.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    assert not is_static_elf(str(script))  # not ELF: no claim


@needs_pager
@pytest.mark.parametrize("verb", ["run", "profile"])
def test_static_command_is_warned_about_and_still_runs(
    static_program: Path, storage: Path, verb: str
) -> None:
    if verb == "run":
        args = ["run", "--mode", "cache", "--fast-budget", "4M", "--storage", str(storage)]
    else:
        args = ["profile", "-o", str(storage / "st.prof")]
    proc = run_hetmem(*args, "--", str(static_program))
    assert proc.returncode == 4, proc.stderr  # its exit status and output pass through
    assert proc.stdout == "static 1\n"
    warned = [ln for ln in proc.stderr.splitlines() if "statically linked" in ln]
    assert len(warned) == 1 and warned[0].startswith(f"hetmem {verb}: warning: ")
    plain = run_hetmem(*args, "--", "true")
    assert "statically linked" not in plain.stderr


# ---------------------------------------------------------------------------
# fork without exec: the child does not inherit the parent's pager blocks
# ---------------------------------------------------------------------------
FORK_MSG = "a forked child does not inherit them"


@needs_pager
@needs_target
@pytest.mark.parametrize("mode", ["cache", "flat"])
def test_forked_child_reads_a_copy_of_its_parents_pager_blocks(
    mode: str, storage: Path, tmp_path: Path
) -> None:
    # the child reads all 8 MiB of a block that a 4 MiB budget keeps mostly
    # on the storage tier: its copy, made at fork, is the parent's data;
    # with HETMEM_FORK_COPY=0 it has none, and a touch is explained
    args = ["run", "--mode", mode, "--fast-budget", "4M", "--storage", str(storage)]
    if mode == "flat":
        # the 8 MiB block's site does not fit a 4 MiB budget: the pager serves it
        run_hetmem("profile", "-o", str(tmp_path / "f.prof"), "--", str(TARGET), "forktouch",
                   "0", check=True)  # fmt: skip
        (prof,) = tmp_path.glob("f.prof.norank.*")
        placement = tmp_path / "p.toml"
        # whole: a split would give the block a 4 MiB head in DRAM, which a
        # forked child keeps (only the pager's tail is gone there)
        run_hetmem("advise", str(prof), "--fast-budget", "4M", "--no-split", "-o",
                   str(placement), check=True)  # fmt: skip
        args += ["--placement", str(placement)]
    copied = run_hetmem(*args, "--", str(TARGET), "forktouch", "1")
    assert copied.returncode == 0, copied.stderr  # the parent's data is intact too
    assert copied.stdout == "exit 0\n", copied.stderr  # 3: the child's copy differed
    assert "1 child(ren) forked without exec got a copy" in copied.stderr
    assert FORK_MSG not in copied.stderr
    off = {"HETMEM_FORK_COPY": "0"}
    touched = run_hetmem(*args, "--", str(TARGET), "forktouch", "1", env=off)
    assert touched.returncode == 0, touched.stderr
    assert touched.stdout == "signal 11\n"
    said = [ln for ln in touched.stderr.splitlines() if FORK_MSG in ln]
    assert len(said) == 1 and said[0].startswith("hetmem: this process was forked")
    assert "1 child(ren) forked without exec got no copy" in touched.stderr
    untouched = run_hetmem(*args, "--", str(TARGET), "forktouch", "0", env=off)
    assert untouched.returncode == 0 and untouched.stdout == "exit 0\n"
    assert FORK_MSG not in untouched.stderr


@needs_pager
def test_python_pool_with_fork_reads_the_parents_array(storage: Path, tmp_path: Path) -> None:
    # multiprocessing's fork start method: each worker reads a 64 MiB numpy
    # array its parent made, through a 16 MiB budget (before the copies,
    # the workers died at their first touch and Pool.map waited forever)
    script = tmp_path / "pool.py"
    script.write_text(
        "import multiprocessing as mp\n"
        "import numpy as np\n"
        "a = np.arange(8 << 20, dtype=np.float64)\n"
        "def part(i):\n"
        "    return float(a[i::4].sum())\n"
        "if __name__ == '__main__':\n"
        "    with mp.get_context('fork').Pool(2) as p:\n"
        "        print(sum(p.map(part, range(4))) == float(a.sum()))\n"
    )
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--storage", str(storage), "--",
        sys.executable, str(script), timeout=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True\n"
    assert "child(ren) forked without exec got a copy" in proc.stderr


@needs_pager
def test_cache_run_says_why_it_was_slow(tmp_path: Path) -> None:
    """A scan of 64 MiB, four times over, through a 16 MiB budget reads its
    data back about four times: the end of the run says so, with a budget
    that would hold it, and --stats carries the same figures."""
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "16M", "--storage", str(tmp_path),
        "--stats", str(stats), "--",
        str(kernels.kernel_path("scan")), "--bytes", "64M", "--reps", "4", "--threads", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(stats.read_text())["pager_summary"]
    assert summary["footprint_bytes"] >= 64 << 20
    assert summary["times_read_back"] >= 2.0
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("hetmem run: note: ")]
    assert any("per demand read" in ln for ln in notes), proc.stderr
    hint = [ln for ln in notes if "working set back" in ln]
    assert len(hint) == 1, proc.stderr
    m = re.search(r"a budget of (\d+)M would hold it", hint[0])
    assert m and 64 < int(m.group(1)) < 96, hint[0]


@needs_pager
def test_processes_that_outlive_the_command_are_waited_for(tmp_path: Path) -> None:
    """A process the command started that ends just after it (an Open MPI
    singleton's daemon) writes its statistics line into the run's folder:
    hetmem run waits for it, so the line is in --stats and no process
    warns that the folder is gone. One still running after the wait is
    named in a note, and the run does not wait for it to end."""
    stats = tmp_path / "s.json"
    late = "(sleep 0.5; exec /bin/true) & exit 7"
    proc = run_hetmem("run", "--mode", "cache", "--fast-budget", "16M", "--storage",
                      str(tmp_path), "--stats", str(stats), "--", "sh", "-c", late)  # fmt: skip
    assert proc.returncode == 7, proc.stderr  # the command's status, not the late one's
    assert "statistics not written" not in proc.stderr
    assert "still run" not in proc.stderr
    exes = [os.path.basename(str(q.get("exe"))) for q in json.loads(stats.read_text())["processes"]]
    assert "true" in exes, exes
    # the run ends while the process still sleeps (not a timing check: a
    # loaded machine once made a bound on the run's own time too tight)
    lingering = "(sleep 60 </dev/null >/dev/null 2>&1) & exit 0"
    proc = run_hetmem("run", "--mode", "cache", "--fast-budget", "16M", "--storage",
                      str(tmp_path), "--", "sh", "-c", lingering)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"note: 1 process\(es\) the command started still run 2 s after it ended "
                  r"\(pid (\d+)\)", proc.stderr)  # fmt: skip
    assert m, proc.stderr
    pid = int(m.group(1))
    alive = Path(f"/proc/{pid}").exists()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    assert alive, "hetmem run waited for the lingering process to end"


def test_stats_give_the_commands_peak_resident_memory(tmp_path):
    stats = tmp_path / "s.json"
    code = "b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096])"
    proc = run_hetmem("run", "--mode", "dram", "--stats", str(stats), "--",
                      sys.executable, "-c", code)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rss = json.loads(stats.read_text())["max_rss_bytes"]
    assert 96 << 20 <= rss < 1 << 30


def _scan_in_cache(tmp_path: Path, reps: int, env: dict[str, str]) -> dict[str, Any]:
    """A 2x scan (64 MiB at 32 MiB) in cache mode with env: every word
    read back; the pager's statistics."""
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "32M", "--stats", str(stats), "--",
        str(kernels.kernel_path("scan")), "--bytes", "64M", "--reps", str(reps), "--threads", "2",
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["verified"] is True
    return json.loads(stats.read_text())["pager"]


@needs_pager
@pytest.mark.parametrize("fill", ["anon", "memfd"])
def test_pager_fill_option_picks_the_fill_mode(tmp_path: Path, fill: str) -> None:
    """HETMEM_PAGER_FILL=memfd maps fills from a memfd (the stats say so,
    where the kernel has shmem minor faults), and a 2x scan in it reads
    back every word."""
    pager = _scan_in_cache(tmp_path, 2, {"HETMEM_PAGER_FILL": fill})
    memfd = pager["config"]["flags"] & 8 != 0  # HM_PAGER_MEMFD
    assert memfd is (fill == "memfd")
    if fill == "anon":
        assert pager["features"]["fill"] == "anon_copy"


@needs_pager
@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("HETMEM_PAGER_FILL", "zerocopy", "pager_fill must be anon or memfd, not 'zerocopy'"),
        # was taken as auto without a word
        ("HETMEM_PREFETCH", "of", "prefetch must be auto, off or sequential, not 'of'"),
        ("HETMEM_FORK_COPY", "lots", "HETMEM_FORK_COPY='lots' is not a valid size"),
        ("HETMEM_SMALL_BLOCKS", "maybe", "HETMEM_SMALL_BLOCKS='maybe' is not a valid bool"),
    ],
)
def test_bad_pager_word_is_one_line_and_exit_2(var: str, value: str, message: str) -> None:
    proc = run_hetmem(
        "run", "--mode", "cache", "--fast-budget", "32M", "--", "true", env={var: value},
    )  # fmt: skip
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "Traceback" not in proc.stderr


@needs_pager
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the copier needs 2 CPUs")
@pytest.mark.parametrize("copier", ["1", "0"])
def test_copier_installs_prefetch_fills_and_the_option_turns_it_off(
    tmp_path: Path, copier: str
) -> None:
    """A 2x scan in cache mode reads back every word with the copier thread
    installing its prefetch fills (the default on 2+ CPUs), and without it
    (HETMEM_COPIER=0); the stats say which ran."""
    pager = _scan_in_cache(tmp_path, 3, {"HETMEM_COPIER": copier})
    assert pager["features"]["copier"] is (copier == "1")
    assert pager["config"]["flags"] & 16 == (0 if copier == "1" else 16)  # HM_PAGER_NO_COPIER
    # the 2x scans were served by prefetch, which is what the copier installs
    assert pager["counters"]["prefetch_issued"] > 3 * (32 << 20) // pager["config"]["fetch_unit"]


@needs_pager
def test_gemm_hints_reach_the_pager(tmp_path: Path) -> None:
    """The tiled GEMM advises each finished C tile and row panel of A
    MADV_COLD and the next step's tiles MADV_WILLNEED; through the
    interposer, the pager evicts the first first, so B (which fits beside a
    row) stays and is read once, and reads the others before their faults.
    Read by the pager with the advice and without it (--no-hints), same
    data and budget, four rounds here: 148-169 MiB against 186-234 MiB in
    all, 19-23 MiB against 39-51 MiB of it read for a waiting fault (the
    matrix-vector checks give no hints). Every product verifies. The two
    are compared in up to three rounds, the first that holds counts: a
    prefetch that races the program's compute reads more on a loaded
    machine, and what is checked is the advice, not the scheduler."""
    rounds = []
    for _ in range(3):
        read, waited = _gemm_reads(tmp_path)
        rounds.append((read, waited))
        if read[False] < 0.92 * read[True] and waited[False] < 0.7 * waited[True]:
            break
    else:
        pytest.fail(f"hints did not cut what the pager read (bytes read, waited): {rounds}")


def _gemm_reads(tmp_path: Path) -> tuple[dict[bool, int], dict[bool, int]]:
    """Bytes the pager read, and read for a waiting fault, in the tiled
    GEMM with its advice (key False) and with --no-hints (True)."""
    read, waited = {}, {}
    for hints in ((), ("--no-hints",)):
        stats = tmp_path / f"gemm{len(hints)}.json"
        proc = run_hetmem(
            "run", "--mode", "cache", "--fast-budget", "96M", "--storage", str(tmp_path),
            "--stats", str(stats), "--", str(kernels.kernel_path("gemm")), "--variant", "tiled",
            "--bytes", "128M", "--tile-budget", "96M", "--reps", "1", *hints,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["verified"] is True
        counters = json.loads(stats.read_text())["pager"]["counters"]
        read[bool(hints)] = counters["bytes_read"]
        waited[bool(hints)] = counters["demand_bytes_read"]
    return read, waited
