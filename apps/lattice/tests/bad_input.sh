#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Bad input must end every rank with exit code 2 and one error line naming the
# problem, without hanging. Usage: bad_input.sh MPIEXEC HM_LATTICE TMPDIR
MPIEXEC=$1; LAT=$2; T=$3
rm -rf "$T"; mkdir -p "$T"; trap 'rm -rf "$T"' EXIT
fail=0
TAB=$(printf '\t')
: >"$T/list"
njobs=0
# Each case runs in the background (mpirun spends about 2 s idle after a
# rank exits nonzero, so the cases overlap well even on 2 CPUs), six at a
# time; the verdicts are read once all have ended. Each mpirun gets a
# session directory of its own: under the shared /tmp/ompi.HOST.UID, one
# job ending removed that directory while another was making its pid.N
# below it, and that job failed in orte_init (1 CI run in about 20). A
# short path: the directory holds PMIx's socket (108 bytes at most).
expect() { # name, pattern, args...
    name=$1; pat=$2; shift 2
    ( s=$(mktemp -d /tmp/hmlat.XXXXXX)
      OMPI_MCA_orte_tmpdir_base=$s PRTE_MCA_prte_tmpdir_base=$s \
          timeout 120 "$MPIEXEC" --oversubscribe -n 2 "$LAT" "$@" >"$T/$name.out" 2>"$T/$name.err"
      echo $? >"$T/$name.rc"
      rm -rf "$s" ) &
    printf '%s\t%s\n' "$name" "$pat" >>"$T/list"
    njobs=$((njobs + 1))
    if [ $njobs -ge 6 ]; then wait; njobs=0; fi
}
verdicts() {
    wait
    while IFS="$TAB" read -r name pat; do
        rc=$(cat "$T/$name.rc" 2>/dev/null || echo none)
        n=$(grep -c "hm-lattice: error:" "$T/$name.err")
        if [ "$rc" != 2 ] || [ "$n" -ne 1 ] || ! grep -q "$pat" "$T/$name.err"; then
            echo "FAIL $name: rc=$rc error-lines=$n"; cat "$T/$name.err"; fail=1
        else
            echo "ok   $name: $(grep 'hm-lattice: error:' "$T/$name.err")"
        fi
    done <"$T/list"
}
printf 'lattice: 8 8 8 8\nfrobnicate: 3\n' >"$T/in1"
expect unknown-key "unknown parameter 'frobnicate'" "$T/in1"
printf 'lattice: 8 8 8 7\nprocess grid: 1 1 1 2\n' >"$T/in2"
expect grid-indivisible "dimension t=7 not divisible by process grid 2" "$T/in2"
expect local-odd "local lattice dimension t=3 must be even" --set "lattice=8 8 8 6" --set "process grid=1 1 1 2"
printf 'lattice: 8 8 8 8\nprocess grid: 1 1 1 2\nblock: 4 4 3 4\n' >"$T/in3"
expect block-indivisible "z=8 not divisible by block size 3" "$T/in3"
head -c 1000 /dev/zero >"$T/short.cfg"
expect gauge-size "has 1000 bytes, expected" --set "lattice=4 4 4 4" --set "block=2 2 2 2" \
    --set gauge=file --set "gauge file=$T/short.cfg"
# a valid file, then one link byte changed: plaquette no longer matches the header
timeout 120 "$MPIEXEC" --oversubscribe -n 2 "$LAT" --set "lattice=4 4 4 4" --set "block=2 2 2 2" \
    --set gauge=random --set "gauge write=$T/g.cfg" --set solver=cgnr --set "max iterations=1" \
    --set "dirac reps=1" >/dev/null 2>"$T/err" || { echo "FAIL writing gauge file"; cat "$T/err"; fail=1; }
printf '\077\077\077\077' | dd of="$T/g.cfg" bs=1 seek=1000 conv=notrunc 2>/dev/null
expect gauge-plaquette "does not match header" --set "lattice=4 4 4 4" --set "block=2 2 2 2" \
    --set gauge=file --set "gauge file=$T/g.cfg"
expect bad-value "bad value 'abc' for parameter 'm0'" --set "m0=abc"
# the keys added with half storage and the odd-even block and coarse solves
expect storage-word "bad value 'double' for parameter 'storage'" --set "storage=double"
expect block-oddeven-range "bad value '2' for parameter 'block oddeven'" --set "block oddeven=2"
expect coarse-oddeven-word "bad value 'yes' for parameter 'coarse oddeven'" --set "coarse oddeven=yes"
expect coarse-setup-iterations-zero "bad value '0' for parameter 'coarse setup iterations'" --set "coarse setup iterations=0"
expect coarse-direct-range "bad value '8193' for parameter 'coarse direct' (0..8192 dof)" --set "coarse direct=8193"
expect coarse-direct-negative "bad value '-1' for parameter 'coarse direct' (0..8192 dof)" --set "coarse direct=-1"
expect setup-sap-zero "bad value '0' for parameter 'setup sap'" --set "setup sap=0"
expect setup-sap-word "bad value 'three' for parameter 'setup sap'" --set "setup sap=three"
expect test-vectors-range "bad value '129' for parameter 'test vectors' (1..128)" --set "test vectors=129"
expect tolerance-nan "bad value 'nan' for parameter 'tolerance'" --set "tolerance=nan"
expect coarse-tolerance-range "bad value '0' for parameter 'coarse tolerance'" --set "coarse tolerance=0"
expect csw-inf "bad value 'inf' for parameter 'csw'" --set "csw=inf"
printf 'lattice: 8 8 8 8\nblock oddeven: 1 1\n' >"$T/in4"
expect file-block-oddeven "in4:2: bad value '1 1' for parameter 'block oddeven'" "$T/in4"
expect missing-file "cannot open input file '$T/nonesuch.in'" "$T/nonesuch.in"
# output files are checked before any work (they are written at the end)
expect json-unwritable "cannot write the --json file '$T/no/r.json'" --json "$T/no/r.json"
expect gauge-write-unwritable "cannot write the 'gauge write' file '$T/no/g.cfg'" --set "gauge write=$T/no/g.cfg"
# rank mappings: a file naming two ranks at one grid position, one naming
# too few, a missing one, and node blocks that do not divide the ranks
printf '0 0 0 0 0\n1 0 0 0 0\n' >"$T/map-twice"
expect map-twice "mapping puts two ranks on grid position 0 0 0 0" --set "lattice=4 4 4 8" \
    --set "block=2 2 2 2" --set "process grid=1 1 1 2" --set mapping=file --set "mapping file=$T/map-twice"
printf '0 0 0 0 0\n' >"$T/map-short"
expect map-short "names 1 of 2 ranks" --set "lattice=4 4 4 8" --set "block=2 2 2 2" \
    --set "process grid=1 1 1 2" --set mapping=file --set "mapping file=$T/map-short"
expect map-missing "cannot open mapping file '$T/nonesuch.map'" --set "lattice=4 4 4 8" \
    --set "block=2 2 2 2" --set mapping=file --set "mapping file=$T/nonesuch.map"
expect map-node-blocks "ranks per node 3 does not divide 2 ranks" --set "lattice=4 4 4 8" \
    --set "block=2 2 2 2" --set mapping=node-blocked --set "ranks per node=3"
expect selftest-unknown "unknown self-test 'nope'" --set "lattice=4 4 4 8" --set "block=2 2 2 2" --selftest nope
# an option without its value, last on the line
expect set-no-value "option --set needs a value" --set
expect json-no-value "option --json needs a value" --json
verdicts
exit $fail
