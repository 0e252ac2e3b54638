# SPDX-License-Identifier: BSD-3-Clause
"""Run-time choice of the access sampler and the DAMON sysfs protocol, on
recorded sysfs trees (tests/golden/samplers) replayed under HETMEM_FSROOT.

The DAMON test plays the kernel: the tree already holds the kdamond /
context / target / scheme directories, and the test writes the scheme's
tried regions over the target's two blocks; the profile must credit each
site with exactly nr_accesses x overlapping pages per drain."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CBUILD, REPO, c_program, run_hetmem
from hetmem.placement import profile as P

TREES = REPO / "tests" / "golden" / "samplers"
TARGET = CBUILD / "hm_sampler_target"
KD = "sys/kernel/mm/damon/admin/kdamonds"
C0 = KD + "/0/contexts/0"

needs_target = pytest.mark.skipif(not TARGET.exists(), reason=f"{TARGET} not built")


def tree(tmp_path: Path, name: str) -> Path:
    root = tmp_path / ("root-" + name)
    shutil.copytree(TREES / name, root)
    return root


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text().strip()


def header(path: Path) -> dict:
    with open(path) as f:
        return json.loads(f.readline())


def profile_files(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.glob("p.prof*") if ".tmp" not in p.name)


@pytest.mark.parametrize("sampler", ["pebs", "ibs", "spe", "damon", "refs"])
def test_named_sampler_missing_is_one_line_exit_2(tmp_path: Path, sampler: str) -> None:
    # the tree of a machine like this one: no PMU sampling, DAMON paddr only
    root = tree(tmp_path, "damon-paddr")
    marker = tmp_path / "ran"
    proc = run_hetmem(
        "profile",
        "--sampler",
        sampler,
        "-o",
        str(tmp_path / "p.prof"),
        "--",
        "touch",
        str(marker),
        env={"HETMEM_FSROOT": str(root)},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"--sampler {sampler} is not available here" in lines[0]
    assert not marker.exists()  # the command never ran
    assert not profile_files(tmp_path)
    # the probe left DAMON as it found it
    assert read(root, KD + "/nr_kdamonds") == "0"
    if sampler == "damon":
        assert "virtual-address" in lines[0]
    if sampler == "refs":  # the recorded tree has no /proc
        assert "/proc/self/smaps" in lines[0]


@pytest.mark.parametrize(
    "name,kind,config",
    [("intel", "pebs", "0x1cd"), ("intel-spr", "pebs", "0x1cd"), ("amd", "ibs", "0x80000")],
)
def test_auto_on_recorded_pmu_trees(tmp_path: Path, name: str, kind: str, config: str) -> None:
    """The tree describes a PMU; whether this kernel opens that event decides
    between it and the fallback (portable here: the tree's DAMON, if any,
    has no vaddr)."""
    root = tree(tmp_path, name)
    proc = run_hetmem(
        "profile",
        "-o",
        str(tmp_path / "p.prof"),
        "--",
        "true",
        env={"HETMEM_FSROOT": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    (f,) = profile_files(tmp_path)
    s = header(f)["sampler"]
    probed = s["probed"][kind]
    assert probed["present"] is True
    ev = probed["loads" if kind == "pebs" else "ops"]
    assert ev["config"] == config
    assert ev["type"] == (4 if kind == "pebs" else 11)
    if kind == "pebs":
        assert ev["config1"] == "0x3"  # ldlat=3
        assert probed["stores"]["config"] == "0x82d0"
    if probed["opens"]:
        assert s["name"] == kind
        assert s["period"] == ev["sample_period"]
    else:
        assert s["name"] == "portable"
        assert "perf_event_open" in probed["why"]
        # what auto tried after it
        assert s["probed"]["damon"]["vaddr"] is False
    P.load(str(f))  # the profile reader accepts the header


def test_auto_on_damon_tree_runs_damon(tmp_path: Path) -> None:
    root = tree(tmp_path, "damon")
    proc = run_hetmem(
        "profile",
        "--period",
        "7",
        "-o",
        str(tmp_path / "p.prof"),
        "--",
        "true",
        env={"HETMEM_FSROOT": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    (f,) = profile_files(tmp_path)
    h = header(f)
    s = h["sampler"]
    assert s["name"] == "damon"
    assert s["period"] == os.sysconf("SC_PAGE_SIZE") / 64
    assert s["probed"]["damon"] == {"present": True, "vaddr": True}
    assert s["probed"]["pebs"]["present"] is False
    assert s["sample_us"] == 7000 and s["aggr_us"] == 140000
    # the protocol as the kernel saw it
    assert read(root, C0 + "/operations") == "vaddr"
    assert read(root, C0 + "/targets/nr_targets") == "1"
    assert read(root, C0 + "/targets/0/pid_target") == str(h["pid"])
    assert read(root, C0 + "/schemes/nr_schemes") == "1"
    assert read(root, C0 + "/schemes/0/action") == "stat"
    assert read(root, C0 + "/monitoring_attrs/intervals/sample_us") == "7000"
    assert read(root, C0 + "/monitoring_attrs/intervals/aggr_us") == "140000"
    assert read(root, KD + "/0/state") == "off"
    assert read(root, KD + "/nr_kdamonds") == "0"


def test_damon_busy_falls_back(tmp_path: Path) -> None:
    root = tree(tmp_path, "damon")
    (root / KD / "nr_kdamonds").write_text("1\n")  # someone else's kdamond
    proc = run_hetmem(
        "profile", "-o", str(tmp_path / "p.prof"), "--", "true", env={"HETMEM_FSROOT": str(root)}
    )
    assert proc.returncode == 0, proc.stderr
    (f,) = profile_files(tmp_path)
    s = header(f)["sampler"]
    assert s["name"] == "portable"
    assert "in use" in s["probed"]["damon"]["why"]
    assert read(root, KD + "/nr_kdamonds") == "1"  # left alone
    assert read(root, C0 + "/operations") == "paddr"


def write_regions(root: Path, regions: list[tuple[int, int, int]]) -> None:
    """The kernel's part: schemes/0/tried_regions/N/{start,end,nr_accesses,age}
    appear all at once."""
    tried = root / C0 / "schemes/0/tried_regions"
    new = tried.with_name("tried_regions.new")
    new.mkdir()
    for i, (lo, hi, nr) in enumerate(regions):
        d = new / str(i)
        d.mkdir()
        (d / "start").write_text(f"{lo}\n")
        (d / "end").write_text(f"{hi}\n")
        (d / "nr_accesses").write_text(f"{nr}\n")
        (d / "age").write_text("3\n")
        (d / "sz_filter_passed").write_text(f"{hi - lo}\n")
    (new / "total_bytes").write_text(f"{sum(hi - lo for lo, hi, _ in regions)}\n")
    shutil.rmtree(tried)
    os.rename(new, tried)


@needs_target
def test_damon_regions_attributed_to_sites(tmp_path: Path) -> None:
    root = tree(tmp_path, "damon")
    ready, done = tmp_path / "ready", tmp_path / "done"
    env = dict(os.environ, HETMEM_FSROOT=str(root))
    args = ["profile", "--sampler", "damon", "--period", "5", "-o", str(tmp_path / "p.prof")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetmem", *args, "--", str(TARGET), str(ready), str(done)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # "a=0x... b=0x..."
        assert line.startswith("a="), line + proc.stderr.read()
        a, b = (int(w.split("=")[1], 16) for w in line.split())
        pid = int(read(root, C0 + "/targets/0/pid_target"))
        assert Path(f"/proc/{pid}").exists()
        mib = 1 << 20
        write_regions(
            root,
            [
                (a, a + 4 * mib, 10),  # first half of A
                (a + 4 * mib, a + 8 * mib, 30),  # second half of A
                (b, b + 24 * mib, 2),  # all of B
                (0x10000, 0x100000, 50),  # no block of ours
            ],
        )
        done.touch()
        _out, err = proc.communicate(timeout=60)
    finally:
        done.touch()  # the target ends even when the test failed
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    (f,) = profile_files(tmp_path)
    p = P.load(str(f))
    s = p.header["sampler"]
    assert s["name"] == "damon"
    by_size = {site.max_bytes: site for site in p.sites}
    sa, sb = by_size[8 * mib], by_size[24 * mib]
    page = os.sysconf("SC_PAGE_SIZE")
    per_a = (10 * 4 * mib + 30 * 4 * mib) // page  # nr_accesses x pages, per drain
    per_b = 2 * 24 * mib // page
    assert sa.loads > 0 and sa.loads % per_a == 0, (sa.loads, per_a)
    drains = sa.loads // per_a
    assert sb.loads == drains * per_b
    assert sa.stores == 0 and sb.stores == 0
    assert s["regions_read"] == 4 * drains
    assert s["regions_attributed"] == 3 * drains
    assert s["updates"] >= drains
    # estimates: samples x period
    assert sa.est_accesses == pytest.approx(sa.loads * page / 64)
    assert read(root, KD + "/0/state") == "off"
    assert read(root, KD + "/nr_kdamonds") == "0"


def test_forked_child_leaves_the_parents_sampler_alone(tmp_path: Path) -> None:
    """A child forked without exec exits normally: it must not wait for the
    parent's sampler thread (it did not come along) nor stop its kdamond."""
    root = tree(tmp_path, "damon")
    script = (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "state = open(sys.argv[1]).read().strip()\n"
        "sys.exit(0 if os.WEXITSTATUS(st) == 0 and state != 'off' else 5)\n"
    )
    proc = run_hetmem(
        "profile",
        "--sampler",
        "damon",
        "-o",
        str(tmp_path / "p.prof"),
        "--",
        sys.executable,
        "-c",
        script,
        str(root / KD / "0/state"),
        env={"HETMEM_FSROOT": str(root)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    headers = [header(f) for f in profile_files(tmp_path)]
    assert len(headers) == 2
    child = [h for h in headers if h["sampler"].get("forked_child")]
    parent = [h for h in headers if not h["sampler"].get("forked_child")]
    assert len(child) == 1 and len(parent) == 1
    assert parent[0]["sampler"]["name"] == "damon"
    assert read(root, KD + "/0/state") == "off"
    assert read(root, KD + "/nr_kdamonds") == "0"


# --------------------------------------------------------------------------
# The portable sampler beside a program's own SIGSEGV handler (gfortran's
# runtime installs one for its backtraces; so do many HPC codes)

SEGV_TARGET = CBUILD / "hm_segv_target"


@pytest.mark.skipif(not SEGV_TARGET.exists(), reason=f"{SEGV_TARGET} not built")
@pytest.mark.parametrize("how", ["sigaction", "signal"])
def test_portable_sampler_keeps_the_programs_segv_handler(tmp_path: Path, how: str) -> None:
    proc = run_hetmem(
        "profile", "--sampler", "portable", "-o", str(tmp_path / "p.prof"), "--",
        str(SEGV_TARGET), how, "400",
    )  # fmt: skip
    # the sampler's faults never reached the program's handler, sigaction
    # read back the program's own, and its own fault went to it
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "handler calls 0, own handler read back 1, caught 1\n"
    (path,) = profile_files(tmp_path)
    samp = header(path)["sampler"]
    assert samp["name"] == "portable" and samp["handler_lost"] is False
    assert samp["faults"] > 0
    (site,) = P.load(path).sites
    assert site.loads + site.stores > 0  # the block's accesses were sampled


# --------------------------------------------------------------------------
# The portable sampler's estimates: it arms a run of consecutive pages per
# block and round (one protection change, one TLB shootdown), from a random
# start that wraps to the block's start; per byte, the estimates must still
# follow the share of pages a program touches, whatever the block's size.

FRACTION_TARGET = CBUILD / "hm_fraction_target"


def fraction_per_byte(path: Path) -> dict[str, float]:
    """hm_fraction_target's sites (all, quarter, idle: named in its source
    lines) and their estimated accesses per byte."""
    source = (REPO / "tests" / "c" / "fraction_target.c").read_text().splitlines()
    show = run_hetmem("profile", "show", "--json", str(path), check=True)
    per_byte = {}
    for s in json.loads(show.stdout)["sites"]:
        line = source[s["line"] - 1]
        per_byte[line.split("site: ")[1].split()[0]] = s["accesses_per_byte"]
    return per_byte


@pytest.mark.skipif(not FRACTION_TARGET.exists(), reason=f"{FRACTION_TARGET} not built")
def test_portable_estimates_follow_the_pages_touched(tmp_path: Path) -> None:
    proc = run_hetmem(
        "profile", "--sampler", "portable", "--period", "2", "-o", str(tmp_path / "p.prof"),
        "--", str(FRACTION_TARGET), "1000",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (path,) = profile_files(tmp_path)
    per_byte = fraction_per_byte(path)
    assert sorted(per_byte) == ["all", "idle", "quarter", "temp"]
    # every page of `all` against a quarter of those of `quarter` (twice the
    # size): 4:1 (runs here: 3.3-5.2 over 25, one second at 2 ms rounds)
    assert 2.5 < per_byte["all"] / per_byte["quarter"] < 6.5, per_byte
    # `idle` is touched once, by its fill
    assert per_byte["idle"] < per_byte["all"] / 50, per_byte
    samp = header(path)["sampler"]
    assert samp["armed_pages"] > 0 and samp["faults"] > 0


# --------------------------------------------------------------------------
# The refs sampler (the default where no PMU or vaddr DAMON is): the
# kernel's referenced bits per mapping, nothing protected. Per byte its
# samples must follow the share of pages touched, like the portable one's.


@pytest.mark.skipif(not FRACTION_TARGET.exists(), reason=f"{FRACTION_TARGET} not built")
def test_refs_estimates_follow_the_pages_touched(tmp_path: Path) -> None:
    proc = run_hetmem(
        "profile", "-o", str(tmp_path / "p.prof"), "--", str(FRACTION_TARGET), "1000",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (path,) = profile_files(tmp_path)
    samp = header(path)["sampler"]
    assert samp["name"] == "refs", samp  # auto, on a machine without PMU sampling
    assert samp["errors"] == 0 and samp["drains"] >= 3
    assert samp["touch_ns_per_page"] >= 0 and samp["referenced_pages"] > 0
    assert "clear_refs" in samp["method"]
    per_byte = fraction_per_byte(path)
    # every page of `all` against a quarter of those of `quarter`: 4:1
    # (3.95-4.10 on a quiet machine; every touched page counts once per
    # interval). Under CPU contention an interval can end while the loop is
    # off the CPU between the two passes, and `quarter` misses that one:
    # with two busy loops on this 2-core machine, 4.0-5.42 with the
    # interposer of faf4009 and 4.0-6.68 with readable guards (4804a61),
    # and 5.06 once in a full CI run.
    # Counting whole mappings instead of touched pages would read 1:1.
    assert 3.0 < per_byte["all"] / per_byte["quarter"] < 8.0, per_byte
    assert per_byte["idle"] < per_byte["all"] / 50, per_byte
    # `temp`, made, written whole and freed in every pass, never outlives an
    # interval: its mappings wait for the next drain, each weighted by the
    # part of the interval it lived, so it ranks as hot as `all` (1.06-1.36
    # here; 0.39-0.49 when freed blocks were unmapped at once, seen only by
    # drains that found one alive; 100x when counted unweighted)
    assert 0.75 < per_byte["temp"] / per_byte["all"] < 2.5, per_byte
    assert samp["freed_blocks_kept"] > 0, samp


@pytest.mark.skipif(not FRACTION_TARGET.exists(), reason=f"{FRACTION_TARGET} not built")
def test_a_profile_without_access_samples_is_pointed_out(tmp_path: Path) -> None:
    proc = run_hetmem(
        "profile", "--sampler", "none", "-o", str(tmp_path / "p.prof"), "--",
        str(FRACTION_TARGET), "10",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (path,) = profile_files(tmp_path)
    got = run_hetmem("advise", str(path), "--fast-budget", "8MiB")
    assert got.returncode == 0, got.stderr
    assert "warning: the profiles have no access samples" in got.stderr


def test_few_portable_periods_are_pointed_out(tmp_path: Path) -> None:
    """A run of about 0.4 s is a few periods of 100 ms: the note says so and
    suggests a period; at 1 ms it has hundreds and says nothing. The run is
    mostly a sleep, so that a loaded machine stretches it little (the
    sampler's periods are wall-clock time)."""
    code = (
        "import time; b = bytearray(32 << 20); b[::4096] = b'x' * len(b[::4096]); "
        "time.sleep(0.3); b[::4096] = b'y' * len(b[::4096])"
    )
    work = [sys.executable, "-c", code]
    notes = {}
    for period in ("100ms", "1ms"):
        out = tmp_path / period
        out.mkdir()
        proc = run_hetmem(
            "profile", "--sampler", "portable", "--period", period, "-o", str(out / "p.prof"),
            "--", *work,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (path,) = profile_files(out)
        periods = header(path)["sampler"]["periods"]
        notes[period] = (periods, [ln for ln in proc.stderr.splitlines() if "period(s) of" in ln])
    few, noted = notes["100ms"]
    assert 1 <= few < 8 and len(noted) == 1, notes
    assert f"saw {few} period(s) of 100 ms" in noted[0] and "--period " in noted[0], noted
    many, quiet = notes["1ms"]
    assert many >= 8 and not quiet, notes


NEAR_SRC = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
  char *p[64];
  long s = 0;
  for (int i = 0; i < 64; i++) {
    p[i] = malloc(700 << 10); /* 64 arrays just under the 1 MiB threshold */
    memset(p[i], i, 700 << 10);
  }
  for (int i = 0; i < 64; i++) s += p[i][i];
  printf("%ld\n", s);
  return 0;
}
"""


def test_arrays_just_under_the_threshold_get_a_hint(tmp_path: Path) -> None:
    exe = c_program(tmp_path / "near", NEAR_SRC, "-O1")
    proc = run_hetmem(
        "profile", "--threshold", "1MiB", "-o", str(tmp_path / "p.prof"), "--", str(exe)
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{sum(range(64))}\n"
    (path,) = profile_files(tmp_path)
    near = header(path)["small"]["near_threshold"]
    assert near == {"from": 256 << 10, "count": 64, "bytes": 64 * (700 << 10)}
    assert "64 allocation(s) of 256 KiB to 1 MiB (43.8 MiB in all)" in proc.stderr
    assert "--threshold 256KiB profiles them" in proc.stderr
    # and with the threshold the hint names, they are sites
    proc = run_hetmem("profile", "--threshold", "256KiB", "-o", str(tmp_path / "q.prof"), "--",
                      str(exe))  # fmt: skip
    assert proc.returncode == 0 and "below the threshold" not in proc.stderr, proc.stderr


# A vectorized kernel reads a little past an array's end (OpenBLAS's zgemv_n
# read 1.3 KiB past a 1.2 MiB block in Quantum ESPRESSO): under glibc that
# lands in whatever follows the block's mapping. The refs sampler's blocks
# sit between guard pages; a read of the page after the block's last one
# must find the guard readable (zeros), not a SIGSEGV.
OVERREAD_SRC = r"""#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  size_t n = (5u << 18) - 16; /* 16 bytes short of 5 MiB: its mapping ends there */
  volatile unsigned char *a = malloc(n);
  if (!a) return 2;
  for (size_t i = 0; i < n; i += 4096) a[i] = 1;
  uintptr_t next = ((uintptr_t)(a + n) + 4095) & ~(uintptr_t)4095;
  unsigned sum = 0;
  for (size_t i = 0; i < 2048; i++) sum += ((volatile unsigned char *)next)[i];
  printf("past %u\n", sum);
  free((void *)a);
  return 0;
}
"""


def test_refs_guards_let_a_kernel_read_past_a_block(tmp_path: Path) -> None:
    exe = c_program(tmp_path / "overread", OVERREAD_SRC, "-O1")
    proc = run_hetmem(
        "profile", "--sampler", "refs", "-o", str(tmp_path / "p.prof"), "--", str(exe)
    )  # fmt: skip
    # the guard page reads as zeros where the block is the interposer's own
    assert proc.returncode == 0 and "past 0" in proc.stdout, proc.stderr
    (path,) = profile_files(tmp_path)
    assert header(path)["sampler"]["name"] == "refs"
