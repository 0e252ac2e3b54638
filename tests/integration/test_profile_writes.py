# SPDX-License-Identifier: BSD-3-Clause
"""The refs sampler tells stores from loads: a real program, profiled with
the refs sampler, whose two arrays are both swept every pass, one written
and one only read. Referenced bits see them alike; the pages written are
counted through a userfaultfd in WP_ASYNC mode and PAGEMAP_SCAN
(src/preload/sampler_writes.c). On the storage tier a written page costs
its write-back too, so the written array is what the fast tier should
hold, although the read-only one is larger and has more samples."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import c_program, placed_tiers, profile_and_show, run_hetmem, shown_site

MIB = 1 << 20

WRITES_SRC = r"""#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static double *written(size_t n) {
  double *p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = 1.0;
  return p;
}
__attribute__((noinline)) static double *readonly(size_t n) {
  double *p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = (double)(i % 5);
  return p;
}
static double work(double x) { /* passes of 40-60 ms: few end inside a window pair */
  for (int k = 0; k < 48; k++) x = x * 0.999999 + 1e-7;
  return x;
}
int main(int argc, char **argv) {
  int passes = argc > 1 ? atoi(argv[1]) : 24;
  size_t na = ((size_t)16 << 20) / 8, nb = ((size_t)24 << 20) / 8;
  double *a = written(na), *b = readonly(nb), s = 0;
  if (!a || !b) return 1;
  for (int it = 0; it < passes; it++) {
    for (size_t i = 0; i < na; i++) a[i] = work(a[i]);
    for (size_t i = 0; i < nb; i++) s += work(b[i]);
  }
  printf("%.3f %.6f\n", s, a[na / 2]);
  free(a);
  free(b);
  return 0;
}
"""


def test_refs_counts_the_pages_written_as_stores(tmp_path: Path) -> None:
    exe = c_program(tmp_path / "writes", WRITES_SRC)
    proc, path, show = profile_and_show(tmp_path, "w", str(exe), options=("--sampler", "refs"))
    assert proc.returncode == 0, proc.stderr
    sampler = show["header"]["sampler"]
    told = sampler["loads_and_stores"]
    if told.startswith("not told apart"):
        pytest.skip(f"this kernel cannot count written pages: {told}")
    assert sampler["drains"] >= 4 and sampler["write_errors"] == 0, sampler
    assert sampler["write_blocks"] >= 2 and sampler["write_fault_ns"] > 0, sampler
    w, r = shown_site(show, "written"), shown_site(show, "readonly")
    pages_r = 24 * MIB // os.sysconf("SC_PAGE_SIZE")
    # both are swept whole every interval: the larger one has more samples
    assert r["samples"]["loads"] > w["samples"]["loads"], (w, r)
    # the written one is written in every interval it is read in
    assert w["samples"]["stores"] >= 0.9 * w["samples"]["loads"], w
    # the read-only one was written once, when it was filled
    assert r["samples"]["stores"] <= 1.05 * pages_r, r
    assert r["samples"]["loads"] >= 3 * r["samples"]["stores"], r
    # the header counts every page written; the sites' stores leave out a
    # live block's first touches (samples.first, once a page) and count a
    # freed block's for the part of the interval it lived (the last one)
    stores = w["samples"]["stores"] + r["samples"]["stores"]
    pages_w = 16 * MIB // os.sysconf("SC_PAGE_SIZE")
    slack = 2 * (pages_w + pages_r)
    assert stores - 2 <= sampler["written_pages"] <= stores + slack, sampler
    # 40M holds either array beside the pager's least cache, not both: the
    # written one, which the storage tier would also have to write back
    out, storage = tmp_path / "w.toml", tmp_path / "tier"
    storage.mkdir()
    run_hetmem("advise", str(path), "--fast-budget", "40M", "--no-split", "--storage",
               str(storage), "-o", str(out), check=True)  # fmt: skip
    tiers = placed_tiers(out)
    assert tiers.get("written") == 0 and tiers.get("readonly", 0) > 0, tiers
