# SPDX-License-Identifier: BSD-3-Clause
"""Profile-guided placement of an MPI program, launched as users launch it:
`hetmem profile -- mpirun -np 2 app`, `hetmem advise app.prof.*`,
`hetmem run --mode hybrid ... -- mpirun -np 2 app`. The launcher is profiled
too (no sites) and is the command `hetmem run` sees; neither may spoil the
placement of the ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import needs_pager, run_hetmem

MPICC = shutil.which("mpicc")
MPIRUN = shutil.which("mpirun")

pytestmark = pytest.mark.skipif(not (MPICC and MPIRUN), reason="no MPI compiler or launcher")

# Hot passes: the default sampler here (refs) counts the pages a block
# referenced per interval, and its intervals stretch to 70-200 ms on this VM
# (longer under load): the hot phase must span several of them for the hot
# array to outrank the cold one per byte. With 40 passes (~60 ms) a loaded
# CI run ranked them equal and gave the fast tier to the cold array's head.
PASSES = 500

SRC = (
    f"#include <mpi.h>\n#define PASSES {PASSES}\n"
    + r"""#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static double *mk(size_t n, double v) {
  double *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = v;
  return p;
}
__attribute__((noinline)) static double *mk_hot(size_t n) { return mk(n, 1.0); }
__attribute__((noinline)) static double *mk_cold(size_t n) { return mk(n, 2.0); }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  size_t n = (size_t)2 << 20; /* 16 MiB hot, 64 MiB cold per rank */
  double *h = mk_hot(n), *c = mk_cold(4 * n), s = 0, t = 0;
  for (int k = 0; k < PASSES; k++)
    for (size_t i = 0; i < n; i += 8) s += h[i]++;
  for (size_t i = 0; i < 4 * n; i += 512) s += c[i];
  MPI_Reduce(&s, &t, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (!r) printf("%.0f\n", t);
  free(h);
  free(c);
  MPI_Finalize();
  return 0;
}
"""
)

# the expected sum over 2 ranks: hot lines read at 1..PASSES, cold pages at 2
WANT = 2 * (sum(1.0 + k for k in range(PASSES)) * ((2 << 20) // 8) + 2.0 * ((8 << 20) // 512))


@needs_pager
def test_mpi_program_is_profiled_advised_and_placed(tmp_path: Path) -> None:
    exe = tmp_path / "app"
    subprocess.run([MPICC, "-g", "-O2", "-x", "c", "-", "-o", str(exe)], input=SRC, text=True,
                   check=True)  # fmt: skip
    launch = [MPIRUN, "-np", "2", "--oversubscribe", str(exe)]
    if os.geteuid() == 0:
        launch.insert(1, "--allow-run-as-root")
    proc = run_hetmem("profile", "-o", str(tmp_path / "app.prof"), "--", *launch)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) == WANT
    files = sorted(str(f) for f in tmp_path.glob("app.prof.*"))
    assert len(files) == 3  # ranks 0 and 1, and the launcher
    placement = tmp_path / "p.toml"
    # 28 MiB per process: 8 for the pager's least cache, 20 for the sites
    proc = run_hetmem("advise", *files, "--fast-budget", "56MiB", "-o", str(placement))
    assert proc.returncode == 0, proc.stderr
    assert "left out 1 profile(s) of no MPI rank" in proc.stdout + proc.stderr
    stats = tmp_path / "s.json"
    proc = run_hetmem(
        "run", "--mode", "hybrid", "--placement", str(placement), "--fast-budget", "56MiB",
        "--storage", str(tmp_path), "--stats", str(stats), "--", *launch,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "build-id differs" not in proc.stderr
    assert float(proc.stdout) == WANT
    placed = json.loads(stats.read_text())["placement"]
    by_bytes = {s["bytes"][0] + s["bytes"][1]: s for s in placed["sites"]}
    # both ranks' hot arrays in DRAM, both cold ones on the storage tier but
    # for the head that the fast tier's room left takes (split placement:
    # 20 MiB per process for the sites, 16 of them hot)
    assert by_bytes[2 * (16 << 20)]["bytes"] == [2 * (16 << 20), 0]
    # (no head when the profile's samples gave the cold site no benefit; a
    # rank's head is shorter when the rest of the process, Open MPI's
    # shared memory and buffers, holds more than the profile saw: the run
    # keeps the pager's least cache beside it)
    cold = by_bytes[2 * (64 << 20)]
    head = cold["split_bytes"] - 16 if cold["split_bytes"] else 0
    assert head <= 4 << 20 and cold["bytes"][0] <= 2 * head, (cold, head)
    # every block of the ranks matched a site (the launcher's own, which
    # no rank's profile has, may not)
    ranks = [q for q in json.loads(stats.read_text())["processes"] if q["exe"] == str(exe)]
    assert len(ranks) == 2
    assert all(q["placement"]["unmatched"]["allocations"] == 0 for q in ranks)


# Ranks that send each other large malloc'd buffers: Open MPI's shared-memory
# transport copies them with process_vm_readv (CMA single copy) from the
# other rank's memory. The default sampler must not make those copies fail
# (the portable sampler's protected pages did: "Read -1, expected N, errno =
# 14" from every transfer) and each rank's profile must still see accesses.
XFER = r"""#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  size_t n = (size_t)1 << 21; /* 16 MiB each */
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), s = 0, t = 0;
  for (size_t i = 0; i < n; i++) a[i] = r + (double)(i % 1000);
  for (int it = 0; it < 20; it++) {
    if (r == 0) {
      MPI_Send(a, (int)n, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(b, (int)n, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(b, (int)n, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(a, (int)n, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
    }
    for (size_t i = 0; i < n; i += 16) s += b[i];
  }
  MPI_Reduce(&s, &t, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (!r) printf("%.1f\n", t);
  /* a and b stay live to the end: the refs sampler's last drain (at exit)
   * sees what the last interval touched; a block freed between drains
   * takes the touches of its last interval with it */
  MPI_Finalize();
  return 0;
}
"""


def test_mpi_single_copy_transfers_survive_profiling(tmp_path: Path) -> None:
    exe = tmp_path / "xfer"
    subprocess.run([MPICC, "-g", "-O2", "-x", "c", "-", "-o", str(exe)], input=XFER, text=True,
                   check=True)  # fmt: skip
    launch = [MPIRUN, "-np", "2", "--oversubscribe", "--mca", "btl", "self,vader",
              "--mca", "btl_vader_single_copy_mechanism", "cma", str(exe)]  # fmt: skip
    if os.geteuid() == 0:
        launch.insert(1, "--allow-run-as-root")
    plain = subprocess.run(launch, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    proc = run_hetmem("profile", "-o", str(tmp_path / "x.prof"), "--", *launch)
    assert proc.returncode == 0, proc.stderr
    assert "errno = 14" not in proc.stderr and "Read -1" not in proc.stderr, proc.stderr
    assert proc.stdout == plain.stdout  # the same sums as without hetmem
    for rank in (0, 1):
        (f,) = tmp_path.glob(f"x.prof.{rank}.*")
        lines = [json.loads(ln) for ln in f.read_text().splitlines()]
        assert lines[0]["sampler"]["name"] == "refs"
        sites = [ln for ln in lines if ln.get("type") == "site" and ln["bytes"] == 16 << 20]
        assert len(sites) == 2  # a and b
        for s in sites:
            # loads, or first touches where all of a block's use fell in the
            # interval that made it (the advisor ranks the site by those)
            assert s["samples"]["loads"] + s["samples"].get("first", 0) > 0, s
