/* SPDX-License-Identifier: BSD-3-Clause */
/* hbwmalloc.h (memkind's high-bandwidth API) served by hetmem's fastest
 * memory tier.
 *
 * At the first call the tier inventory is discovered once (no storage
 * tiers) and the fastest memory tier chosen. Two ways to serve it:
 *  - glibc: the fastest tier is the memory the program gets anyway (one
 *    node, or the local DRAM node is the fastest): hbw_* are malloc & co.;
 *  - bound: the fastest tier is another node (HBM, a GPU node): each block
 *    is its own anonymous mapping with a 64-byte header in front, bound with
 *    mbind according to the policy before first touch.
 * The choice is made once, so hbw_free always knows which one made a block.
 * Nothing here is on a hot path of the runtime; the only lock is the
 * pthread_once of the start-up. */
#include <errno.h>
#include <malloc.h>
#include <numaif.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "hbwmalloc.h"
#include "hetmem.h"
#include "prim/prim.h"

static struct {
  pthread_once_t once;
  int available;       /* 0 or ENODEV */
  int bound;           /* serve by mapping + mbind (else glibc) */
  int node;            /* the fastest tier's node */
  uint64_t node_bytes; /* its capacity (0: unknown) */
  unsigned long all[16];  /* BIND_ALL: every node of the fastest kind (KNL's SNC-4: four) */
  uint64_t all_bytes;  /* their capacity */
  int all_unknown;     /* one of them has no known capacity */
  size_t page;
  _Atomic int policy;  /* hbw_policy_t */
  _Atomic int policy_set;
  _Atomic int allocated;
} hm__hbw = {.once = PTHREAD_ONCE_INIT, .policy = HBW_POLICY_PREFERRED, .node = -1};

/* A node of the fastest tier's kind joins BIND_ALL's set (tiers come
 * fastest first, so the set is the run of that kind at the top). */
static void hm__hbw_add_all(const hm_tier_t *t, hm_tier_kind_t kind) {
  const int bits = 8 * (int)sizeof(unsigned long);
  if (t->kind != kind || t->numa_node >= 16 * bits) return;
  hm__hbw.all[t->numa_node / bits] |= 1ul << (t->numa_node % bits);
  hm__hbw.all_bytes += t->capacity_bytes;
  hm__hbw.all_unknown |= t->capacity_bytes == 0;
}

static void hm__hbw_init(void) {
  hm__hbw.page = _hm_prim_page_size();
  hm__hbw.available = ENODEV;
  hm_ctx_t *ctx = NULL;
  if (hm_ctx_new(&ctx, NULL) != 0) {
    hm_ctx_free(ctx);
    return;
  }
  static const char *const none[1] = {NULL};
  if (hm_tiers_discover(ctx, none, 0) == 0) {
    size_t n = hm_tier_count(ctx);
    int memory_tiers = 0;
    hm_tier_kind_t kind = HM_TIER_DRAM;
    for (size_t i = 0; i < n; i++) {
      hm_tier_t t;
      memset(&t, 0, sizeof t);
      t.size = sizeof t;
      if (hm_tier_get(ctx, i, &t) != 0 || t.kind == HM_TIER_STORAGE || t.numa_node < 0) continue;
      if (memory_tiers++ == 0) {
        hm__hbw.node = t.numa_node;
        hm__hbw.node_bytes = t.capacity_bytes;
        kind = t.kind;
      }
      hm__hbw_add_all(&t, kind);
    }
    if (hm__hbw.node >= 0) {
      hm__hbw.available = 0;
      /* Bound only when the fastest node is not where this thread's memory
       * comes from by default (one node: never). */
      int local = -1;
      if (_hm_prim_cpu() >= 0) {
        int node = _hm_prim_cpu_node();
        if (node >= 0) local = node;
      }
      hm__hbw.bound = memory_tiers > 1 && local != hm__hbw.node;
    }
  }
  hm_ctx_free(ctx);
}

static void hm__hbw_ready(void) { pthread_once(&hm__hbw.once, hm__hbw_init); }

int hbw_check_available(void) {
  hm__hbw_ready();
  return hm__hbw.available;
}

int hbw_set_policy(hbw_policy_t mode) {
  if (mode < HBW_POLICY_BIND || mode > HBW_POLICY_BIND_ALL) return EINVAL;
  if (atomic_load(&hm__hbw.allocated)) return EPERM;
  int z = 0;
  if (!atomic_compare_exchange_strong(&hm__hbw.policy_set, &z, 1)) return EPERM;
  atomic_store(&hm__hbw.policy, (int)mode);
  return 0;
}

hbw_policy_t hbw_get_policy(void) { return (hbw_policy_t)atomic_load(&hm__hbw.policy); }

/* The mbind mode and nodes of the policy: the fastest node, or (BIND_ALL,
 * INTERLEAVE: memkind) every node of its kind. */
static int hm__hbw_mode(unsigned long mask[_HM_BLK_MASK_LONGS]) {
  const int bits = 8 * (int)sizeof(unsigned long);
  memset(mask, 0, _HM_BLK_MASK_LONGS * sizeof mask[0]);
  mask[hm__hbw.node / bits] |= 1ul << (hm__hbw.node % bits);
  switch (hbw_get_policy()) {
  case HBW_POLICY_BIND_ALL: memcpy(mask, hm__hbw.all, sizeof hm__hbw.all); return MPOL_BIND;
  case HBW_POLICY_BIND: return MPOL_BIND;
  case HBW_POLICY_INTERLEAVE: memcpy(mask, hm__hbw.all, sizeof hm__hbw.all); return MPOL_INTERLEAVE;
  default: return MPOL_PREFERRED;
  }
}

/* memkind: under BIND and BIND_ALL a request the high-bandwidth memory
 * cannot hold gets NULL and ENOMEM, not an OOM kill at first touch. One
 * larger than the whole node never fits; smaller ones are left to the
 * kernel (free memory changes between the call and the touch). */
static int hm__hbw_never_fits(size_t size) {
  hbw_policy_t pol = hbw_get_policy();
  if (pol == HBW_POLICY_BIND) return hm__hbw.node_bytes && size > hm__hbw.node_bytes;
  if (pol == HBW_POLICY_BIND_ALL) return !hm__hbw.all_unknown && size > hm__hbw.all_bytes;
  return 0;
}

static void *hm__hbw_map(size_t alignment, size_t size) {
  unsigned long mask[_HM_BLK_MASK_LONGS];
  if (hm__hbw.node < 0 || hm__hbw.node >= 8 * (int)sizeof mask || hm__hbw_never_fits(size))
    return NULL;
  int mode = hm__hbw_mode(mask);
  return _hm_blk_map(mode, mask, alignment, size, 0);
}

static void *hm__hbw_alloc(size_t alignment, size_t size, int zero) {
  hm__hbw_ready();
  atomic_store(&hm__hbw.allocated, 1);
  if (hm__hbw.available) {
    errno = ENODEV;
    return NULL;
  }
  if (!hm__hbw.bound) {
    void *p = NULL;
    if (alignment) {
      if (posix_memalign(&p, alignment, size ? size : 1) != 0) p = NULL;
      if (p && zero) memset(p, 0, size);
    } else {
      p = zero ? calloc(1, size ? size : 1) : malloc(size ? size : 1);
    }
    return p;
  }
  void *p = hm__hbw_map(alignment, size ? size : 1); /* mappings read as zeros */
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

void hbw_free(void *ptr) {
  if (!ptr) return;
  hm__hbw_ready();
  if (!hm__hbw.bound) {
    free(ptr);
    return;
  }
  _hm_blk_free(ptr);
}

size_t hbw_malloc_usable_size(void *ptr) {
  if (!ptr) return 0;
  hm__hbw_ready();
  if (!hm__hbw.bound) return malloc_usable_size(ptr);
  return _hm_blk_usable(ptr);
}

void *hbw_realloc(void *ptr, size_t size) {
  if (!ptr) return hbw_malloc(size);
  if (size == 0) {
    hbw_free(ptr);
    return NULL;
  }
  hm__hbw_ready();
  if (!hm__hbw.bound) return realloc(ptr, size);
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  if (!h) {
    errno = EINVAL;
    return NULL;
  }
  if (size <= _hm_blk_usable(ptr)) {
    h->size = size;
    return ptr;
  }
  void *n = hm__hbw_alloc(0, size, 0);
  if (!n) return NULL;
  memcpy(n, ptr, h->size < size ? h->size : size);
  hbw_free(ptr);
  return n;
}

int hbw_posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (!memptr || alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void *))
    return EINVAL;
  int saved = errno;
  void *p = hm__hbw_alloc(alignment, size, 0);
  int rc = p ? 0 : (hm__hbw.available ? ENODEV : ENOMEM);
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
        (void *)((uintptr_t)*memptr & ~(uintptr_t)(hm__hbw.page - 1)), size);
  return rc;
}

int hbw_verify_memory_region(void *addr, size_t size, int flags) {
  if (!addr || size == 0) return EINVAL;
  hm__hbw_ready();
  if (hm__hbw.available) return -1;
  size_t pg = hm__hbw.page;
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
      if (status[i] != hm__hbw.node) return -1;
  }
  return 0;
}
