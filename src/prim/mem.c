/* SPDX-License-Identifier: BSD-3-Clause */
/* Memory, CPU affinity and clock primitives for the measurement code. */
#include <errno.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_map_anon(size_t len, void **out) {
  return _hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                           0, out);
}

void *_hm_prim_map_raw(size_t len) {
  void *p = NULL;
  if (_hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, &p))
    return NULL;
  return p;
}

int _hm_prim_unmap(void *addr, size_t len) {
  if (!addr) return 0;
  return _hm_prim_sys_munmap(addr, len);
}

int _hm_prim_advise_hugepage(void *addr, size_t len) {
  /* Only a hint: a kernel without THP keeps small pages. */
  return _hm_prim_sys_madvise(addr, len, MADV_HUGEPAGE);
}

int _hm_prim_bind_node(void *addr, size_t len, int node) {
  if (node < 0 || node >= 1024) return -EINVAL;
  unsigned long mask[1024 / (8 * sizeof(unsigned long))];
  memset(mask, 0, sizeof mask);
  const unsigned bits = 8 * sizeof(unsigned long);
  mask[(unsigned)node / bits] |= 1UL << ((unsigned)node % bits);
  /* MPOL_MF_STRICT is pointless before first touch; the binding decides
   * where the first-touch faults allocate. */
  return _hm_prim_sys_mbind(addr, len, MPOL_BIND, mask, 1024, 0);
}

int _hm_prim_allowed_cpus(int *cpus, int max) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set)) return -errno;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; c++)
    if (CPU_ISSET(c, &set)) cpus[n++] = c;
  return n;
}

int _hm_prim_set_thread_cpus(const int *cpus, int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; i++) {
    if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) return -EINVAL;
    CPU_SET(cpus[i], &set);
  }
  /* pthread_setaffinity_np returns the error instead of setting errno. */
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  return rc ? -rc : 0;
}

uint64_t _hm_prim_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts)) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
