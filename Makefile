# SPDX-License-Identifier: BSD-3-Clause
# hetmem: the two commands a user needs are `make demo` and `make test`.
# Each does all of its set-up on a fresh Debian machine: missing Debian
# packages (when root), the .venv, the build and the install.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
CBUILD := build/c
ASAN_BUILD := build/asan
TSAN_BUILD := build/tsan

# The guests of tests/vm (live NUMA tiers): QEMU, Debian's kernel, busybox,
# and ndctl/daxctl, which online the Optane-like guest's NVDIMM as memory.
VM_PACKAGES := qemu-system-x86 linux-image-amd64 busybox-static cpio ndctl daxctl
# Debian packages the build, the tests and the reference measurements need.
DEB_PACKAGES := build-essential cmake ninja-build pkg-config libhwloc-dev hwloc \
  libnuma-dev numactl liburing-dev fio libdw-dev libelf-dev libopenblas-dev \
  liblapacke-dev libfftw3-dev libopenmpi-dev openmpi-bin util-linux chromium \
  hpcc lammps lammps-examples bwa $(VM_PACKAGES)

.PHONY: all deps venv install cbuild test test-vm test-c test-sanitize fuzz demo lint clean hooks \
  hooks-if-unset metrics man

all: install

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages (run as root or install them):" $$missing >&2; exit 1; \
	  fi; \
	fi

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

# The venv is made once; its Python packages are brought up to date each run
# (pip does nothing when they already are).
venv: $(VPY) hooks-if-unset
	$(VPY) -m pip install -q "scikit-build-core>=0.10" "pytest>=7" "ruff>=0.4" \
	  "rich>=13" "numpy>=1.24" "matplotlib>=3.6" "scipy>=1.10"
	@# atheris (a manylinux wheel, e.g. cp311 x86_64; no compiler needed): the fuzz targets
	@# of tests/fuzz, run briefly by `make test` and for minutes by `make fuzz`.
	$(VPY) -m pip install -q "atheris>=2.3"
	@# ADIOS2 is only the baseline of `hetmem flow bench`: without it the bench
	@# says so and measures the channel alone, so a failed download is no error.
	$(VPY) -m pip install -q "adios2>=2.10" || \
	  echo "adios2 not installed: hetmem flow bench runs without its ADIOS2 baseline" >&2

install: deps venv
	$(VPY) -m pip install -q --no-build-isolation .

cbuild: deps
	cmake -S . -B $(CBUILD) -G Ninja -DHETMEM_BUILD_TESTS=ON >/dev/null
	cmake --build $(CBUILD)

test: install cbuild
	HETMEM_CBUILD=$(CBUILD) $(VPY) -m pytest -q $(PYTEST_ARGS)

# The live NUMA tiers alone (also part of `make test`): QEMU guests with
# CPU-less memory nodes and HMAT (tests/vm/guestvm.py's shapes).
# HETMEM_VM_KEEP=DIR keeps what each guest recorded (numa_maps, vmstat).
test-vm: install cbuild
	HETMEM_CBUILD=$(CBUILD) $(VPY) -m pytest -q -rs tests/vm $(PYTEST_ARGS)

test-c: cbuild
	ctest --test-dir $(CBUILD) --output-on-failure

# ASan+UBSan over every C test; TSan over the threaded ones (the pager).
test-sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DHETMEM_BUILD_TESTS=ON \
	  -DHETMEM_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(ASAN_BUILD) --output-on-failure -LE lattice
	@# Open MPI dlcloses its components at exit, so LeakSanitizer cannot see
	@# through their frames: the MPI programs run with ASan+UBSan, leaks unchecked.
	ASAN_OPTIONS=detect_leaks=0 ctest --test-dir $(ASAN_BUILD) --output-on-failure -L lattice
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DHETMEM_BUILD_TESTS=ON \
	  -DHETMEM_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(TSAN_BUILD)
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -L tsan

# Each atheris target of tests/fuzz for FUZZ_SECONDS, starting from its corpus;
# new interesting inputs go to build/fuzz/TARGET (tests/fuzz/README.md says
# how to merge them into the corpus), a crashing input to build/fuzz/TARGET-crash-*.
FUZZ_TARGETS := profile placement spec sizes
FUZZ_SECONDS ?= 60

fuzz: install
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/$$t && echo "fuzzing $$t for $(FUZZ_SECONDS) s" && \
	  $(VPY) tests/fuzz/fuzz_$$t.py build/fuzz/$$t tests/fuzz/corpus/$$t \
	    -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/$$t- 2>build/fuzz/$$t.log || \
	    { tail -40 build/fuzz/$$t.log; echo "fuzz_$$t: crash, see build/fuzz/$$t.log"; exit 1; }; \
	  grep -E '^Done|stat::number_of_executed_units' build/fuzz/$$t.log; \
	done

demo: install
	$(VENV)/bin/hetmem demo

# The man pages in man/man1 from the argparse definitions (python/hetmem/manpage.py);
# run after changing a verb's options or help: tests/unit/test_manpages.py fails until then.
man:
	PYTHONPATH=python $(if $(wildcard $(VPY)),$(VPY),$(PYTHON)) -m hetmem.manpage man/man1

lint: venv
	$(VENV)/bin/ruff check python tests .githooks/commit-msg .ci/check-commits .ci/house-metrics .ci/ab-bench
	$(VENV)/bin/ruff format --check python tests .githooks/commit-msg .ci/check-commits .ci/house-metrics .ci/ab-bench

# The commit-msg hook of .githooks/ (DEVELOPERS.md, Commits). `make hooks`
# points git at it; `make venv` (so install, test, demo) does the same
# silently, but only inside a git work tree and only when core.hooksPath is
# unset: hooks a developer chose are left alone.
hooks:
	@[ "$$(git rev-parse --is-inside-work-tree 2>/dev/null)" = true ] || \
	  { echo "make hooks: not a git work tree" >&2; exit 1; }
	@old=$$(git config --get core.hooksPath || true); \
	git config core.hooksPath .githooks && \
	if [ -n "$$old" ] && [ "$$old" != .githooks ]; then was=" (was $$old)"; fi; \
	echo "git config core.hooksPath .githooks$$was"

hooks-if-unset:
	@if [ "$$(git rev-parse --is-inside-work-tree 2>/dev/null)" = true ] && \
	  ! git config --get core.hooksPath >/dev/null; then \
	  git config core.hooksPath .githooks; fi

# Function sizes and complexity of the C and Python sources (needs the lizard
# command; without it, says so and does nothing).
metrics:
	@$(PYTHON) .ci/house-metrics

clean:
	rm -rf build $(VENV)
