# SPDX-License-Identifier: BSD-3-Clause
"""The refs sampler's short windows tell a site gathered at random from
one swept: a real program, profiled with the refs sampler, then advised.

The program gathers at random from a 24 MiB array and sweeps a 48 MiB one
a cache line per gather. Every interval touches every page of both, and
the swept one has more pages, so interval samples alone rank it hotter;
but right after a clear the gathered array's pages are nearly all touched
again within the first short window, while the swept one's grow with the
window's length, a few at a time where the sweep is.
Under a pager with a small cache each gathered access is a fault served
from the device, so the gathered array is what the fast tier should hold
(LAMMPS's per-atom arrays against its neighbour list)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import c_program, placed_tiers, profile_and_show, run_hetmem, shown_site

MIB = 1 << 20

# It gathers for 1.5 s, not a number of times: the sampler needs at least
# MIN_REUSE_PAIRS pairs of short windows within the loop, and 80M gathers
# took 0.6 s on a faster machine, where half of its 4 pairs fell in the
# start-up.
GATHER_SRC = r"""#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) static double *gathered(size_t n) {
  double *p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = (double)(i % 7);
  return p;
}
__attribute__((noinline)) static double *swept(size_t n) {
  double *p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = 1.0;
  return p;
}
int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 1.5;
  size_t na = ((size_t)24 << 20) / 8, nb = ((size_t)48 << 20) / 8, j = 0;
  double *a = gathered(na), *b = swept(nb), s = 0;
  if (!a || !b) return 1;
  uint64_t x = 88172645463325252ull;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (long k = 0; k < 1000000; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s += a[x % na] + b[j];
      j = j + 8 < nb ? j + 8 : 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) < secs);
  printf("%.0f\n", s);
  free(a);
  free(b);
  return 0;
}
"""


def _told_apart(show: dict) -> str:
    """'' when the profile tells the gathered array from the swept one, or
    what it got wrong."""
    sampler = show["header"]["sampler"]
    if sampler["name"] != "refs" or sampler["short_windows"] < 3:
        return f"sampler {sampler}"
    g, w = shown_site(show, "gathered"), shown_site(show, "swept")
    # both are touched whole every interval: the larger swept one has more
    # samples; but only the gathered one is touched again and again within
    # a window
    ok = w["samples"]["loads"] > g["samples"]["loads"]
    ok = ok and g["reuse_pages"] > 10 * g["samples"]["loads"]
    ok = ok and w["reuse_pages"] < 0.1 * g["reuse_pages"]
    return "" if ok else f"gathered {g}, swept {w}, sampler {sampler}"


def test_short_windows_send_the_gathered_array_to_the_fast_tier(tmp_path: Path) -> None:
    """Up to three profiles, the first that tells the arrays apart counts:
    the short windows are wall-clock time, and on a busy machine the
    program can be off its CPU for a whole one (beside a busy loop 1 of 16
    profiles misjudged the swept array); a sampler that cannot tell them
    apart fails all three."""
    exe = c_program(tmp_path / "gather", GATHER_SRC)
    wrong = []
    for attempt in range(3):
        proc, path, show = profile_and_show(
            tmp_path, f"g{attempt}", str(exe), options=("--sampler", "refs")
        )
        assert proc.returncode == 0, proc.stderr
        why = _told_apart(show)
        if not why:
            break
        wrong.append(why)
    else:
        pytest.fail("; ".join(wrong))
    # the table shows the reused pages: a number for the gathered array only
    table = run_hetmem("profile", "show", str(path), env={"COLUMNS": "200"}, check=True).stdout
    assert "reused pages" in table, table
    rows = {ln.split("│")[2].strip().split(".")[0]: ln.split("│")[-2].strip()
            for ln in table.splitlines() if ln.startswith("│")}  # fmt: skip
    assert rows["swept"] == "-" and float(rows["gathered"].replace(",", "")) > 0, rows
    # 64M holds either array beside the pager's least cache, not both
    out = tmp_path / "g.toml"
    storage = tmp_path / "tier"
    storage.mkdir()
    adv = run_hetmem("advise", str(path), "--fast-budget", "64M", "--no-split", "--storage",
                     str(storage), "--json", "-o", str(out), check=True)  # fmt: skip
    assert json.loads(adv.stdout)["schema_version"] >= 1
    tiers = placed_tiers(out)
    assert tiers.get("gathered") == 0 and tiers.get("swept", 0) > 0, tiers


def test_a_bad_short_window_count_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A profile whose samples.short is not two counts: advise and profile
    show refuse it in one line with exit status 2, naming the field."""
    lines = [
        '{"magic": "hetmem-profile", "schema_version": 1, "type": "header", "binary": 0, '
        '"pid": 1, "hostname": "h", "start_unix": 1.0, "wall_ns": 1000, "depth": 1, '
        '"threshold": 4096, "bytes_per_access": 64, "sampler": {"name": "refs", '
        '"period": 64.0, "short_windows": 2, "short_window_us": [1.0, 3.0], '
        '"sampled_us": 100.0}}',
        '{"type": "module", "index": 0, "path": "/bin/true", "build_id": ""}',
        '{"type": "site", "frames": [[0, 16]], "allocs": 1, "bytes": 8192, '
        '"peak_live_bytes": 8192, "samples": {"loads": 4, "stores": 0, "short": [3]}}',
        '{"type": "end", "sites": 1, "modules": 1}',
    ]
    prof = tmp_path / "bad.prof"
    prof.write_text("\n".join(lines) + "\n")
    for cmd in (["advise", str(prof), "--fast-budget", "1M"], ["profile", "show", str(prof)]):
        proc = run_hetmem(*cmd)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert "samples.short" in err and len(err.splitlines()) == 1, err
    # the same profile with two counts is read
    prof.write_text(prof.read_text().replace('"short": [3]', '"short": [3, 5]'))
    proc = run_hetmem("profile", "show", "--json", str(prof))
    assert proc.returncode == 0, proc.stderr
    # and a per-pair count that claims more pairs with reuse than seen is not
    good = prof.read_text()
    prof.write_text(good.replace('"short": [3, 5]', '"short": [3, 5], "short_reuse": [2, 3, 9]'))
    for cmd in (["advise", str(prof), "--fast-budget", "1M"], ["profile", "show", str(prof)]):
        proc = run_hetmem(*cmd)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert "samples.short_reuse" in err and len(err.splitlines()) == 1, err
