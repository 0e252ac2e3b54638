#!/bin/sh
# Runs inside a guest (tests/vm/guestvm.py): exercises hetmem against the
# guest's kernel and leaves what the kernel reported under $HM_VM_OUT for
# tests/vm/test_vm.py to judge. Each step writes its own files and its exit
# status (NAME.rc); one step failing does not stop the others.
#   HM_VM_PY       the Python that runs hetmem (the host's .venv)
#   HM_VM_CBUILD   the CMake build tree (bench programs)
#   HM_VM_CHECKS   which steps: tiers placement numactl hbw
O=$HM_VM_OUT
PY=$HM_VM_PY
W="$HM_VM_CBUILD/bench/hm-placement"
HOT=$((32 * 1048576 / 8 / 10 * 8))
export HOME=/tmp/home XDG_CACHE_HOME=/tmp/cache PYTHONDONTWRITEBYTECODE=1 TMPDIR=/tmp
mkdir -p "$HOME" "$XDG_CACHE_HOME"

step() { # NAME CMD...: runs CMD, its stdout to NAME.out, stderr to NAME.err
  name=$1; shift
  "$@" >"$O/$name.out" 2>"$O/$name.err"
  echo $? >"$O/$name.rc"
}

hm() { "$PY" -m hetmem "$@"; }

# the placement workload (tests/integration/test_placement_run.py)
WL="$W --variant sweep --footprint $((32 * 1048576)) --iters 3 --hot-passes 48"

for c in $HM_VM_CHECKS; do
  case $c in
  tiers)
    step numactl numactl -H
    ls /sys/devices/virtual/memory_tiering/ >"$O/memory_tiering.txt" 2>&1
    grep . /sys/devices/virtual/memory_tiering/memory_tier*/nodelist \
      >>"$O/memory_tiering.txt" 2>/dev/null
    step tiers hm tiers --json --no-storage
    ;;
  placement)
    step profile hm profile -o /tmp/w.prof --sampler portable -- $WL
    cp /tmp/w.prof.norank.* "$O/w.prof" 2>/dev/null
    step advise hm advise /tmp/w.prof.norank.* --no-storage --no-split \
      --fast-budget $((3 * HOT)) -o "$O/w.toml"
    for mode in flat hybrid; do
      step "$mode" hm run --mode $mode --placement "$O/w.toml" --fast-budget $((3 * HOT)) \
        --stats "$O/$mode.stats.json" -- $WL --numa-policies --numa-maps "$O/$mode.numa_maps"
    done
    step dram $WL
    ;;
  numactl) # hetmem run's numactl surface on the command as a whole
    small="$W --variant sweep --footprint $((16 * 1048576)) --iters 1 --numa-policies"
    step pol_membind hm run --membind 1 -- $small
    step pol_interleave hm run --interleave all -- $small
    step pol_preferred hm run --preferred 1 -- $small
    step pol_preferred_many hm run --preferred-many '!0' -- $small
    step pol_weighted hm run --weighted-interleave all -- $small
    ;;
  hbw) # $O/hbw_nodes: built by the host (tests/vm/test_vm.py)
    for pol in none bind preferred interleave; do
      step "hbw_$pol" "$O/hbw_nodes" $pol 32
    done
    ;;
  esac
done
