/* SPDX-License-Identifier: BSD-3-Clause */
/* hbwmalloc.h (memkind's high-bandwidth API) served by hetmem's fastest
 * memory tier.
 *
 * Each policy is one of memkind's high-bandwidth kinds (kinds.c, the table
 * memkind.h uses too): PREFERRED is HBW_PREFERRED (the fastest tier's
 * node, falling back), BIND is HBW (that node only), BIND_ALL is HBW_ALL
 * and INTERLEAVE HBW_INTERLEAVE (every node of the fastest kind). A kind
 * whose nodes are where the program's memory comes from anyway (one node,
 * or the local node is the fastest) is served from the heap, the others by
 * bound mappings; every block has a header (block.h), so hbw_free knows
 * which made it. Nothing here is on a hot path of the runtime; the only
 * lock is the pthread_once of the start-up. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "hbwmalloc.h"
#include "kinds.h"
#include "prim/prim.h"

static struct {
  _Atomic int policy; /* hbw_policy_t */
  _Atomic int policy_set;
  _Atomic int allocated;
} hm__hbw = {.policy = HBW_POLICY_PREFERRED};

/* The kind of the policy in force. */
static int hm__hbw_kind(void) {
  switch (hbw_get_policy()) {
  case HBW_POLICY_BIND: return _HM_KIND_HBW;
  case HBW_POLICY_BIND_ALL: return _HM_KIND_HBW_ALL;
  case HBW_POLICY_INTERLEAVE: return _HM_KIND_HBW_INTERLEAVE;
  default: return _HM_KIND_HBW_PREFERRED;
  }
}

static int hm__hbw_unavailable(void) { return _hm_kind(_HM_KIND_HBW)->available != 0; }

int hbw_check_available(void) { return hm__hbw_unavailable() ? ENODEV : 0; }

int hbw_set_policy(hbw_policy_t mode) {
  if (mode < HBW_POLICY_BIND || mode > HBW_POLICY_BIND_ALL) return EINVAL;
  if (atomic_load(&hm__hbw.allocated)) return EPERM;
  int z = 0;
  if (!atomic_compare_exchange_strong(&hm__hbw.policy_set, &z, 1)) return EPERM;
  atomic_store(&hm__hbw.policy, (int)mode);
  return 0;
}

hbw_policy_t hbw_get_policy(void) { return (hbw_policy_t)atomic_load(&hm__hbw.policy); }

/* memkind: under BIND and BIND_ALL a request the high-bandwidth memory
 * cannot hold gets NULL and ENOMEM (kinds.c), not an OOM kill at first
 * touch; ENODEV where there is no memory tier at all. */
static void *hm__hbw_alloc(size_t alignment, size_t size, int zero) {
  atomic_store(&hm__hbw.allocated, 1);
  if (hm__hbw_unavailable()) {
    errno = ENODEV;
    return NULL;
  }
  void *p = _hm_kind_alloc(hm__hbw_kind(), alignment, size, zero);
  if (!p) errno = ENOMEM;
  return p;
}

void *hbw_malloc(size_t size) { return hm__hbw_alloc(0, size, 0); }

void *hbw_calloc(size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return hm__hbw_alloc(0, total, 1);
}

void hbw_free(void *ptr) { _hm_blk_free(ptr); }

size_t hbw_malloc_usable_size(void *ptr) { return _hm_blk_usable(ptr); }

void *hbw_realloc(void *ptr, size_t size) {
  if (!ptr) return hbw_malloc(size);
  if (size == 0) {
    hbw_free(ptr);
    return NULL;
  }
  return _hm_kind_realloc(hm__hbw_kind(), ptr, size);
}

int hbw_posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (!memptr || alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void *))
    return EINVAL;
  int saved = errno;
  void *p = hm__hbw_alloc(alignment, size, 0);
  int rc = p ? 0 : (hm__hbw_unavailable() ? ENODEV : ENOMEM);
  errno = saved;
  if (p) *memptr = p;
  return rc;
}

int hbw_posix_memalign_psize(void **memptr, size_t alignment, size_t size,
                             hbw_pagesize_t pagesize) {
  if (pagesize < HBW_PAGESIZE_4KB || pagesize > HBW_PAGESIZE_1GB_STRICT) return EINVAL;
  int rc = hbw_posix_memalign(memptr, alignment, size);
  /* Huge pages are a hint: transparent huge pages where the kernel has them. */
  if (rc == 0 && pagesize != HBW_PAGESIZE_4KB && size >= (2u << 20))
    (void)_hm_prim_advise_hugepage(
        (void *)((uintptr_t)*memptr & ~(uintptr_t)(_hm_prim_page_size() - 1)), size);
  return rc;
}

int hbw_verify_memory_region(void *addr, size_t size, int flags) {
  if (!addr || size == 0) return EINVAL;
  if (hm__hbw_unavailable()) return -1;
  int node = _hm_kind_first_node(_hm_kind(_HM_KIND_HBW));
  size_t pg = _hm_prim_page_size();
  uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
  uintptr_t end = (uintptr_t)addr + size;
  enum { BATCH = 256 };
  void *pages[BATCH];
  int status[BATCH];
  while (a < end) {
    unsigned long n = 0;
    for (; n < BATCH && a < end; n++, a += pg) {
      if (flags & HBW_TOUCH_PAGES) {
        volatile char *c = (volatile char *)a;
        *c = *c;
      }
      pages[n] = (void *)a;
    }
    if (_hm_prim_page_nodes(pages, status, n) != 0) return -1;
    for (unsigned long i = 0; i < n; i++)
      if (status[i] != node) return -1;
  }
  return 0;
}
