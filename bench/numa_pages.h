/* SPDX-License-Identifier: BSD-3-Clause */
/* Where the kernel put a range's pages: move_pages(2) with no target nodes
 * only queries. The kernel's view, not hetmem's counters: what placement
 * tests believe. Shared by hm-placement (--numa-policies) and the guests'
 * hbw_malloc check (tests/vm/hbw_nodes.c). Header-only: each is one
 * program's single translation unit. */
#ifndef HM_BENCH_NUMA_PAGES_H
#define HM_BENCH_NUMA_PAGES_H

#include <errno.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The node of one present page from get_mempolicy(MPOL_F_NODE |
 * MPOL_F_ADDR), which asks the page itself; -1 when it cannot say. */
static inline int hm_bench_page_node(void *page) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, NULL, 0ul, page,
              (unsigned long)(MPOL_F_NODE | MPOL_F_ADDR)) != 0)
    return -1;
  return node;
}

/* Whether the page is present (/proc/self/pagemap bit 63): asking
 * get_mempolicy about an absent page would fault it in. */
static inline int hm_bench_page_present(int pagemap, const void *page) {
  uint64_t entry = 0;
  off_t off = (off_t)((uintptr_t)page / 4096u * sizeof entry);
  return pagemap >= 0 && pread(pagemap, &entry, sizeof entry, off) == (ssize_t)sizeof entry &&
         (entry >> 63) != 0;
}

/* Pages per node 0-7 of the whole pages inside [p, p + bytes) into cnt: a
 * partial page at either end may hold another block's data (an allocator's
 * header, a neighbour) and say nothing about this one. Pages never touched
 * or on other nodes are left out. A page move_pages gives no node for,
 * though present, is asked with get_mempolicy: in the 6.1 guests of
 * tests/vm move_pages once reported nothing for the pages of two glibc
 * blocks that numa_maps counted on node 0 (N0=1640). */
static inline void hm_bench_node_pages(const void *p, size_t bytes, unsigned long cnt[8]) {
  enum { BATCH = 512, PAGE = 4096 };
  void *pages[BATCH];
  int status[BATCH];
  uintptr_t a = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1), e = (uintptr_t)p + bytes;
  memset(cnt, 0, 8 * sizeof cnt[0]);
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  while (a + PAGE <= e) {
    unsigned long n = 0;
    for (; n < BATCH && a + PAGE <= e; n++, a += PAGE) pages[n] = (void *)a;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0)
      for (unsigned long i = 0; i < n; i++) status[i] = -EFAULT;
    for (unsigned long i = 0; i < n; i++) {
      int node = status[i];
      if (node < 0 && hm_bench_page_present(pagemap, pages[i])) node = hm_bench_page_node(pages[i]);
      if (node >= 0 && node < 8) cnt[node]++;
    }
  }
  if (pagemap >= 0) close(pagemap);
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
