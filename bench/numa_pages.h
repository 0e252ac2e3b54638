/* SPDX-License-Identifier: BSD-3-Clause */
/* Where the kernel put a range's pages: move_pages(2) with no target nodes
 * only queries. The kernel's view, not hetmem's counters: what placement
 * tests believe. Shared by hm-placement (--numa-policies) and the guests'
 * hbw_malloc check (tests/vm/hbw_nodes.c). Header-only: each is one
 * program's single translation unit. */
#ifndef HM_BENCH_NUMA_PAGES_H
#define HM_BENCH_NUMA_PAGES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Pages per node 0-7 of the whole pages inside [p, p + bytes) into cnt: a
 * partial page at either end may hold another block's data (an allocator's
 * header, a neighbour) and say nothing about this one. Pages on other
 * nodes or never touched (negative status) are left out. */
static inline void hm_bench_node_pages(const void *p, size_t bytes, unsigned long cnt[8]) {
  enum { BATCH = 512, PAGE = 4096 };
  void *pages[BATCH];
  int status[BATCH];
  uintptr_t a = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1), e = (uintptr_t)p + bytes;
  memset(cnt, 0, 8 * sizeof cnt[0]);
  while (a + PAGE <= e) {
    unsigned long n = 0;
    for (; n < BATCH && a + PAGE <= e; n++, a += PAGE) pages[n] = (void *)a;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0) return;
    for (unsigned long i = 0; i < n; i++)
      if (status[i] >= 0 && status[i] < 8) cnt[status[i]]++;
  }
}

/* "name":{"N":pages,...} on stdout, nodes without pages left out. */
static inline void hm_bench_print_node_pages(const char *name, const void *p, size_t bytes) {
  unsigned long cnt[8];
  hm_bench_node_pages(p, bytes, cnt);
  printf("\"%s\":{", name);
  for (int k = 0, first = 1; k < 8; k++) {
    if (!cnt[k]) continue;
    printf("%s\"%d\":%lu", first ? "" : ",", k, cnt[k]);
    first = 0;
  }
  printf("}");
}

#endif
