#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Gauge file written by 2 ranks reads back on 1 and 4 ranks with the same
# plaquette (the reader checks it against the header, and a site or link
# permutation would change it). Usage: gauge_io.sh MPIEXEC HM_LATTICE TMPDIR
MPIEXEC=$1; LAT=$2; T=$3
rm -rf "$T"; mkdir -p "$T"; trap 'rm -rf "$T"' EXIT
run() { n=$1; shift; timeout 120 "$MPIEXEC" --oversubscribe -n "$n" "$LAT" --set "lattice=4 4 4 8" \
    --set "block=2 2 2 2" --set solver=cgnr --set "max iterations=1" --set "dirac reps=1" "$@"; }
run 2 --set gauge=heatbath --set sweeps=2 --set "process grid=1 1 1 2" --set "gauge write=$T/g.cfg" \
    --json "$T/w.json" || exit 1
size=$(stat -c %s "$T/g.cfg")
[ "$size" -eq $((24 + 576 * 512)) ] || { echo "FAIL size $size"; exit 1; }
run 1 --set gauge=file --set "gauge file=$T/g.cfg" --json "$T/r1.json" || exit 1
run 4 --set gauge=file --set "gauge file=$T/g.cfg" --set "process grid=1 2 1 2" --json "$T/r4.json" || exit 1
p0=$(grep '"plaquette"' "$T/w.json"); p1=$(grep '"plaquette"' "$T/r1.json"); p4=$(grep '"plaquette"' "$T/r4.json")
echo "written $p0 / read 1 rank $p1 / read 4 ranks $p4"
case "$p0" in *"3.000000000000000"*) echo "FAIL: heatbath left unit links"; exit 1;; esac
v() { echo "$1" | tr -dc '0-9.'; }
awk -v a="$(v "$p0")" -v b="$(v "$p1")" -v c="$(v "$p4")" 'BEGIN {
    d1 = a - b; d2 = a - c; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2
    exit !(d1 < 1e-12 && d2 < 1e-12) }' || { echo FAIL; exit 1; }
echo ok
