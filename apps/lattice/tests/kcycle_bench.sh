#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Two-level vs three-level (K-cycle) time to solution on 16^4, 2 ranks,
# alternating, ROUNDS rounds, same fine-level settings (issue 25: 20 test
# vectors, 3 bootstrap cycles, 4^4 aggregates, FGMRES(25), 1e-10); prints
# each run, the medians and the per-round ratio. Wrap it in
# `flock /tmp/hetmem-timing.lock` on a shared machine.
# Usage: kcycle_bench.sh GAUGEFILE M0 ROUNDS OUTDIR  (HM_LATTICE: the binary;
# default the one `make` builds, build/c/bench/hm-lattice; HM_COARSE_SETUP:
# `coarse setup`, which only three levels use, default 0: lighter masses
# need 1)
if [ $# -ne 4 ]; then
  echo "usage: kcycle_bench.sh GAUGEFILE M0 ROUNDS OUTDIR" >&2
  exit 2
fi
G=$1; M0=$2; R=$3; OUT=$4
B=${HM_LATTICE:-build/c/bench/hm-lattice}
[ -x "$B" ] || { echo "kcycle_bench.sh: no hm-lattice at $B (set HM_LATTICE)" >&2; exit 2; }
[ -r "$G" ] || { echo "kcycle_bench.sh: cannot read the gauge file $G" >&2; exit 2; }
case $R in ''|*[!0-9]*|0) echo "kcycle_bench.sh: ROUNDS must be a positive integer, not '$R'" >&2; exit 2 ;; esac
CS=${HM_COARSE_SETUP:-0}
case $CS in ''|*[!0-9]*) echo "kcycle_bench.sh: HM_COARSE_SETUP must be a non-negative integer, not '$CS'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for r in $(seq 1 "$R"); do
  for lv in 2 3; do
    mpirun -n 2 "$B" --set 'lattice=16 16 16 16' --set gauge=file --set "gauge file=$G" --set "m0=$M0" \
      --set csw=1.0 --set 'block=4 4 4 4' --set 'test vectors=20' --set 'setup iter=3' --set 'restart=25' \
      --set 'tolerance=1e-10' --set 'dirac reps=1' --set "levels=$lv" --set 'level 3 test vectors=16' \
      --set "coarse setup=$CS" \
      --json "$OUT/r$r-l$lv.json" >/dev/null 2>"$OUT/r$r-l$lv.err" || echo "run $r levels $lv failed"
  done
done
python3 - "$OUT" "$R" <<'PY'
import json, statistics, sys
out, R = sys.argv[1], int(sys.argv[2])
rows = {2: [], 3: []}
for r in range(1, R + 1):
    for lv in (2, 3):
        d = json.load(open(f"{out}/r{r}-l{lv}.json"))
        s = d["solves"][0]
        tts = d["phases"]["setup_s"] + s["time_s"]
        rows[lv].append((tts, d["phases"]["setup_s"], s["time_s"], s["iterations"], d["phases"]["coarse_iterations"], s["true_relres"]))
        print(f"round {r} levels {lv}: setup {d['phases']['setup_s']:.2f} s, solve {s['time_s']:.2f} s, "
              f"total {tts:.2f} s, outer {s['iterations']}, level-2 iterations {d['phases']['coarse_iterations']}, "
              f"true relres {s['true_relres']:.2e}")
med = {}
for lv in (2, 3):
    t = [x[0] for x in rows[lv]]
    med[lv] = statistics.median(t)
    print(f"levels {lv}: total median {med[lv]:.2f} s (min {min(t):.2f}, max {max(t):.2f}), "
          f"setup median {statistics.median(x[1] for x in rows[lv]):.2f} s, "
          f"solve median {statistics.median(x[2] for x in rows[lv]):.2f} s, outer {[x[3] for x in rows[lv]]}")
ratios = [a[0] / b[0] for a, b in zip(rows[3], rows[2])]
print(f"three/two time to solution: median {med[3] / med[2]:.3f}, per round {[round(x, 3) for x in ratios]}")
PY
