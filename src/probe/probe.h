/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the tier measurements in src/probe/. */
#ifndef HM_PROBE_H
#define HM_PROBE_H

#include <stdint.h>

#include "internal.h"

#define HM_PROBE_MAX_CPUS 4096

/* Largest data or unified cache of CPU 0 (the last-level cache), from the
 * live sysfs; 0 when it cannot be read. */
uint64_t _hm_probe_llc_bytes(void);

/* CPUs to pin measurement threads to, best first: the CPUs of the node (or
 * of the nearest node with CPUs) that this thread may use, then the rest of
 * those it may use (node < 0: all of them). Returns the count or a negative errno. */
int _hm_probe_cpus_for_node(int node, int *cpus, int max);

/* node if it has CPUs, else the node with CPUs nearest to it by the SLIT
 * distance row (how an application would reach a CPU-less CXL, PMem or HBM
 * node), else node. Reads sysfs under root (tests pass recorded trees). */
int _hm_probe_nearest_cpu_node(const char *root, int node);

/* 0 if node is a NUMA node with memory on the live machine, else -EINVAL
 * with a message on ctx. */
int _hm_probe_check_node(hm_ctx_t *ctx, int node);

/* Parses a Linux cpulist ("0-3,8,10-11") into cpus; returns the count. */
int _hm_probe_parse_cpulist(const char *text, int *cpus, int max);

#endif
