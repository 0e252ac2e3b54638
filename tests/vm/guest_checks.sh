#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Runs inside a guest (tests/vm/guestvm.py): exercises hetmem against the
# guest's kernel and leaves what the kernel reported under $HM_VM_OUT for
# tests/vm/test_vm.py to judge. Each step writes its own files and its exit
# status (NAME.rc); one step failing does not stop the others.
#   HM_VM_PY       the Python that runs hetmem (the host's .venv)
#   HM_VM_CBUILD   the CMake build tree (bench programs)
#   HM_VM_REPO     this checkout
#   HM_VM_CHECKS   which steps: kmem cxl3 numa memkind tiers advise placement numactl channel
#                  tiering hbw autofast pager probe flow
#   HM_VM_WL       the placement workload's command line
#   HM_VM_PROF     its profile, made on the host (where the sites are is
#                  the binary's, not the kernel's; under TCG the guest took
#                  15 s to profile what the host does in 0.4 s)
O=$HM_VM_OUT
PY=$HM_VM_PY
W="$HM_VM_CBUILD/bench/hm-placement"
HOT=$((32 * 1048576 / 8 / 10 * 8))
# bytecode is written into the overlay (the guest's memory): a source tree
# without it (PYTHONPATH=python) was compiled afresh by every call, 5-8 s
# each under TCG
unset PYTHONDONTWRITEBYTECODE
export HOME=/root/hm-vm XDG_CACHE_HOME=/root/hm-vm/cache TMPDIR=/tmp
mkdir -p "$HOME" "$XDG_CACHE_HOME"

step() { # NAME CMD...: runs CMD, its stdout to NAME.out, stderr to NAME.err
  name=$1; shift
  t0=$(date +%s.%N)
  "$@" >"$O/$name.out" 2>"$O/$name.err"
  echo $? >"$O/$name.rc"
  echo "$name $t0 $(date +%s.%N)" >>"$O/steps.txt" # where a guest's time goes
}

hm() { "$PY" -m hetmem "$@"; }

WL=$HM_VM_WL

for c in $HM_VM_CHECKS; do
  case $c in
  kmem) # the NVDIMM as system RAM through dax kmem: a CPU-less node, lower tier
    for m in nfit libnvdimm nd_pmem dax_pmem device_dax kmem; do modprobe $m; done
    step ndctl ndctl create-namespace -f -e namespace0.0 -m devdax
    step daxctl_ram daxctl reconfigure-device --mode=system-ram --no-online dax0.0
    step daxctl_online daxctl online-memory dax0.0
    ;;
  cxl3) # the CXL type-3 device as system RAM: region, devdax, kmem. Only
    # discovered, never touched: QEMU 7.2 emulates its memory as MMIO, and
    # a process bound there (numactl --membind, 1 MiB) hung the whole guest
    for m in cxl_acpi cxl_pci cxl_port cxl_mem cxl_pmem libnvdimm nd_pmem dax_pmem \
      device_dax kmem; do modprobe $m; done
    step cxl_region cxl create-region -m -d decoder0.0 -w 1 mem0
    step cxl_ndctl ndctl create-namespace -f -m devdax
    step cxl_daxctl daxctl reconfigure-device --mode=system-ram all
    readlink -f /sys/bus/dax/devices/dax0.0 >"$O/cxl_dax_link.txt"
    ;;
  tiers)
    step numactl numactl -H
    uname -r >"$O/uname.txt"
    ls /sys/devices/virtual/memory_tiering/ >"$O/memory_tiering.txt" 2>&1
    grep . /sys/devices/virtual/memory_tiering/memory_tier*/nodelist \
      >>"$O/memory_tiering.txt" 2>/dev/null
    step tiers hm tiers --json --no-storage
    ;;
  advise | placement) # advise from the guest's tiers; placement also runs the modes
    step advise hm advise "$HM_VM_PROF" --no-storage --no-split \
      --fast-budget $((3 * HOT)) -o "$O/w.toml"
    [ "$c" = advise ] && continue
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
  tiering) # the kernel's tiering beside flat, on a footprint larger than
    # node 0's free memory (demotion needs pressure). Not hybrid: with no
    # storage tier in the placement it is flat, and its pinned capacity is
    # what the small profiled run held, too little for these arrays.
    big="$W --variant sweep --footprint $((800 * 1048576)) --iters 1 --hot-passes 4"
    big="$big --numa-policies"
    step tiering hm bench tiering --json --repeat 1 --configs kernel,flat \
      --placement "$O/w.toml" --fast-budget $((256 * 1048576)) -- $big
    cat /sys/kernel/mm/numa/demotion_enabled /proc/sys/kernel/numa_balancing \
      >"$O/tiering_after.txt"
    # SIGTERM while the kernel's tiering is on: root's settings come back
    "$PY" -m hetmem bench tiering --configs kernel --placement "$O/w.toml" --fast-budget 1G \
      -- sleep 600 >"$O/tiering_term.out" 2>"$O/tiering_term.err" &
    pid=$!
    # up to 300 s for Python to start and switch tiering on: under TCG beside
    # other work a start took 15 s and more (a hang guard, not a speed check)
    for i in $(seq 3000); do
      [ "$(cat /proc/sys/kernel/numa_balancing)" = 2 ] && break
      kill -0 $pid 2>/dev/null || break # it ended (an error): judged by its rc
      sleep 0.1
    done
    cat /sys/kernel/mm/numa/demotion_enabled /proc/sys/kernel/numa_balancing \
      >"$O/tiering_during.txt"
    kill -TERM $pid
    wait $pid
    echo $? >"$O/tiering_term.rc"
    cat /sys/kernel/mm/numa/demotion_enabled /proc/sys/kernel/numa_balancing \
      >"$O/tiering_term_after.txt"
    ;;
  channel) # the workflow channel bound to the CPU-less node
    step chan "$PY" "$HM_VM_REPO/tests/vm/chan_node.py" node:1
    ;;
  pager) # the pager on an older kernel (6.1: no wp_async, no PAGEMAP_SCAN),
    # its storage tier an ext4 on the guest's virtio disk (O_DIRECT)
    modprobe virtio_blk && modprobe ext4
    mkfs.ext4 -q -F /dev/vda && mkdir -p /hm-disk && mount /dev/vda /hm-disk
    export HETMEM_TEST_STORAGE=/hm-disk
    step sdm_basic "$HM_VM_CBUILD/tests/c/test_sdm_basic"
    # a tenth of its ops (the host runs them all): under TCG, 250000 took
    # 120 s over its four fill modes; this still evicts and writes back
    # thousands of units in each, racing on every path
    HETMEM_SDM_STRESS_OPS=100000 step sdm_stress "$HM_VM_CBUILD/tests/c/test_sdm_stress"
    step sdm_dirtyfill "$HM_VM_CBUILD/tests/c/test_sdm_dirtyfill"
    mid="$W --variant sweep --footprint $((64 * 1048576)) --iters 2 --hot-passes 4"
    step cache hm run --mode cache --fast-budget 16M --storage /hm-disk \
      --stats "$O/cache.stats.json" -- $mid
    step cache_dram $mid
    ;;
  flow) # the seed's LocW and LocR: writer and reader on the two nodes, the
    # channel on the writer's (parallel) and on the reader's (serial)
    spec="$HM_VM_REPO/tests/vm/flow_local.toml"
    step flow_locw hm flow run "$spec" --channel local:writer --mode parallel --json
    step flow_locr hm flow run "$spec" --channel local:reader --mode serial --json
    ;;
  probe) # each node measured (both are host DRAM here: figures, not ranks)
    step probe hm probe --quick --no-storage --threads 1 --array-size 16MiB --json
    ;;
  autofast) # memkind's autohbw: 4M..16M blocks to the fastest tier
    small="$W --variant sweep --footprint $((32 * 1048576)) --iters 1 --numa-policies"
    step autofast hm run --auto-fast 4M:16M --fast-budget 64M \
      --stats "$O/autofast.stats.json" -- $small
    ;;
  numa) # the kernel's view of the shape alone (no hetmem tiers call)
    step numactl numactl -H
    uname -r >"$O/uname.txt"
    ;;
  memkind) # memkind.h's kinds (also part of hbw below)
    for k in hbw hbw_all regular dax_kmem; do step "mk_$k" "$O/hbw_nodes" "mk:$k" 32; done
    ;;
  hbw) # $O/hbw_nodes: built by the host (tests/vm/test_vm.py)
    for k in hbw hbw_all regular dax_kmem; do step "mk_$k" "$O/hbw_nodes" "mk:$k" 32; done
    for pol in none bind preferred interleave bind_all; do
      step "hbw_$pol" "$O/hbw_nodes" $pol 32
    done
    # more than a high-bandwidth node holds: BIND refuses (memkind: NULL
    # and ENOMEM), PREFERRED spills to other memory, BIND_ALL takes all
    if [ -n "$HM_VM_HBW_BIG_MIB" ]; then
      for pol in bind preferred bind_all; do
        step "hbw_${pol}_big" "$O/hbw_nodes" $pol "$HM_VM_HBW_BIG_MIB"
      done
    fi
    # the firmware overruled: the other node counts as high-bandwidth
    HETMEM_HBW_NODES=$HM_VM_HBW_OTHER step hbw_override "$O/hbw_nodes" bind 32
    MEMKIND_HBW_NODES=$HM_VM_HBW_OTHER step hbw_memkind "$O/hbw_nodes" bind 32
    ;;
  esac
done
