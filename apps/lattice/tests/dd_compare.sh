#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# hm-lattice beside DD-alphaAMG (issue 25) on one 16^4 configuration in the
# DD-alphaAMG format, 2 ranks, one thread each, 2 and 3 levels, the order
# of the two programs alternating from round to round. Same parameters on
# both sides: csw 1.0, 4^4 aggregates = SAP blocks, SAP 2 sweeps x 4 MR
# steps, 20 test vectors on every level, 3 bootstrap cycles, FGMRES(25) to
# 1e-10, coarsest GMRES to 5e-2 (60 iterations); level 3 from 2^4
# aggregates. Prints every run's setup and solve times and outer
# iterations, the medians and setup(hm) / setup(DD).
#
# DD-alphaAMG is not part of hetmem: build it yourself, for example
#   git clone https://github.com/DDalphaAMG/DDalphaAMG && cd DDalphaAMG &&
#   make CC="mpicc -std=gnu99 -fcommon" dd_alpha_amg
# and name it with DD_ALPHA_AMG (the binary; it runs in its own folder).
# Wrap this in `flock /tmp/hetmem-timing.lock` on a shared machine.
# Usage: dd_compare.sh GAUGEFILE M0 ROUNDS OUTDIR  (HM_LATTICE: hm-lattice,
# default build/c/bench/hm-lattice; HM_COARSE_SETUP: its `coarse setup`,
# default 0, which only levels >= 3 use: lighter masses need 1)
if [ $# -ne 4 ]; then
  echo "usage: dd_compare.sh GAUGEFILE M0 ROUNDS OUTDIR" >&2
  exit 2
fi
G=$1; M0=$2; R=$3; OUT=$4
B=${HM_LATTICE:-build/c/bench/hm-lattice}
DD=${DD_ALPHA_AMG:-}
[ -x "$B" ] || { echo "dd_compare.sh: no hm-lattice at $B (set HM_LATTICE)" >&2; exit 2; }
[ -n "$DD" ] && [ -x "$DD" ] || { echo "dd_compare.sh: set DD_ALPHA_AMG to a built dd_alpha_amg" >&2; exit 2; }
[ -r "$G" ] || { echo "dd_compare.sh: cannot read the gauge file $G" >&2; exit 2; }
case $R in ''|*[!0-9]*|0) echo "dd_compare.sh: ROUNDS must be a positive integer, not '$R'" >&2; exit 2 ;; esac
CS=${HM_COARSE_SETUP:-0}
case $CS in ''|*[!0-9]*) echo "dd_compare.sh: HM_COARSE_SETUP must be a non-negative integer, not '$CS'" >&2; exit 2 ;; esac
G=$(cd "$(dirname "$G")" && pwd)/$(basename "$G")
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

dd_ini() {  # levels: DD-alphaAMG's input (its ordering is T Z Y X; T split over the ranks)
  cat <<INI
configuration: $G
format: 0
right hand side: 2
antiperiodic boundary conditions: 1
number of levels: $1
number of openmp threads: 1
d0 global lattice: 16 16 16 16
d0 local lattice: 8 16 16 16
d0 block lattice: 4 4 4 4
d0 preconditioner cycles: 1
d0 post smooth iter: 2
d0 block iter: 4
d0 test vectors: 20
d0 setup iter: 3
d1 global lattice: 4 4 4 4
d1 local lattice: 2 4 4 4
d1 block lattice: 2 2 2 2
d1 preconditioner cycles: 1
d1 post smooth iter: 4
d1 block iter: 4
d1 test vectors: 20
d1 setup iter: 2
d2 global lattice: 2 2 2 2
d2 local lattice: 1 2 2 2
d2 block lattice: 1 1 1 1
d2 preconditioner cycles: 1
d2 post smooth iter: 0
d2 block iter: 0
d2 test vectors: 0
d2 setup iter: 0
m0: $M0
csw: 1.0
tolerance for relative residual: 1E-10
iterations between restarts: 25
maximum of restarts: 200
coarse grid tolerance: 5E-2
coarse grid iterations: 60
coarse grid restarts: 1
print mode: 1
method: 2
mixed precision: 1
randomize test vectors: 0
INI
}

run_hm() {  # levels name
  mpirun -n 2 "$B" --set 'lattice=16 16 16 16' --set gauge=file --set "gauge file=$G" --set "m0=$M0" \
    --set csw=1.0 --set 'block=4 4 4 4' --set 'test vectors=20' --set 'setup iter=3' --set 'restart=25' \
    --set 'tolerance=1e-10' --set 'dirac reps=1' --set "levels=$1" --set 'level 3 test vectors=20' \
    --set "coarse setup=$CS" --json "$OUT/$2.json" >/dev/null 2>"$OUT/$2.err" || echo "hm-lattice $2 failed (see $OUT/$2.err)"
}

run_dd() {  # levels name
  dd_ini "$1" > "$OUT/$2.ini"
  (cd "$(dirname "$DD")" && mpirun -n 2 "$DD" "$OUT/$2.ini" > "$OUT/$2.out" 2>&1) ||
    echo "DD-alphaAMG $2 failed (see $OUT/$2.out)"
}

for r in $(seq 1 "$R"); do
  for lv in 2 3; do
    if [ $((r % 2)) = 1 ]; then
      run_hm $lv hm-r$r-l$lv; run_dd $lv dd-r$r-l$lv
    else
      run_dd $lv dd-r$r-l$lv; run_hm $lv hm-r$r-l$lv
    fi
  done
done

python3 - "$OUT" "$R" <<'PY'
import json, re, statistics as st, sys
out, R = sys.argv[1], int(sys.argv[2])
res = {}
for r in range(1, R + 1):
    for lv in (2, 3):
        try:
            d = json.load(open(f"{out}/hm-r{r}-l{lv}.json"))
            s = d["solves"][0]
            res.setdefault(("hm-lattice", lv), []).append((d["phases"]["setup_s"], s["time_s"], s["iterations"]))
        except (OSError, ValueError, KeyError, IndexError) as e:
            print(f"hm-lattice round {r} levels {lv}: no result ({e})")
        try:
            t = open(f"{out}/dd-r{r}-l{lv}.out").read()
            head, tail = t.split("FGMRES iterations", 1)
            setup = sum(float(x) for x in re.findall(r"elapsed time: (\S+) seconds", head))
            solve = float(re.search(r"elapsed wall clock time: (\S+)", tail).group(1))
            its = int(re.search(r"^:? *(\d+)", tail).group(1))
            res.setdefault(("DD-alphaAMG", lv), []).append((setup, solve, its))
        except (OSError, ValueError, AttributeError) as e:
            print(f"DD-alphaAMG round {r} levels {lv}: no result ({e})")
for (who, lv), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{who} levels {lv}: setup {[round(x[0], 2) for x in v]} s (median {st.median(x[0] for x in v):.2f}), "
          f"solve {[round(x[1], 2) for x in v]} s (median {st.median(x[1] for x in v):.2f}), "
          f"outer iterations {[x[2] for x in v]}")
for lv in (2, 3):
    a, b = res.get(("hm-lattice", lv)), res.get(("DD-alphaAMG", lv))
    if a and b:
        per = [round(x[0] / y[0], 2) for x, y in zip(a, b)]
        print(f"levels {lv}: setup hm-lattice / DD-alphaAMG, median {st.median(x[0] for x in a) / st.median(x[0] for x in b):.2f}, per round {per}")
for who in ("hm-lattice", "DD-alphaAMG"):
    two, three = res.get((who, 2)), res.get((who, 3))
    if two and three:
        t2 = st.median(x[0] + x[1] for x in two)
        t3 = st.median(x[0] + x[1] for x in three)
        print(f"{who}: time to solution three / two levels {t3 / t2:.2f} ({t3:.2f} s / {t2:.2f} s)")
PY
