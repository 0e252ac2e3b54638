/* SPDX-License-Identifier: BSD-3-Clause */
/* The kinds' nodes on hetmem's tiers (kinds.h).
 *
 * At the first call the tiers are discovered once (no storage) and each
 * kind gets its nodes: HBW the fastest tier's node (ALL and INTERLEAVE:
 * every node of its kind), DAX_KMEM the fastest node of kind pmem or cxl
 * (ALL: all of them), REGULAR the nodes with CPUs. A kind whose nodes are
 * where a thread's memory comes from anyway (one node) is served from the
 * heap; the others by bound mappings (block.c). Not a hot path: the only
 * lock is the pthread_once of the start-up. */
#include "kinds.h"

#include <errno.h>
#include <numaif.h>
#include <pthread.h>
#include <string.h>

#include "hetmem.h"
#include "prim/prim.h"

static struct {
  pthread_once_t once;
  _hm_kind_t k[_HM_KIND_N];
} hm__kinds = {.once = PTHREAD_ONCE_INIT};

enum { HM__BITS = 8 * (int)sizeof(unsigned long) };

static void hm__kind_add(_hm_kind_t *k, const hm_tier_t *t) {
  if (t->numa_node < 0 || t->numa_node >= _HM_BLK_MASK_LONGS * HM__BITS) return;
  k->mask[t->numa_node / HM__BITS] |= 1ul << (t->numa_node % HM__BITS);
  k->bytes += t->capacity_bytes;
  k->unknown |= t->capacity_bytes == 0;
  k->available = 0;
}

static void hm__kind_set(int code, int mode) {
  hm__kinds.k[code].mode = mode;
  hm__kinds.k[code].available = -1;
}

/* Each memory tier joins the kinds it serves (tiers come fastest first). */
static void hm__kind_tier(const hm_tier_t *t, size_t index, hm_tier_kind_t fastest,
                          int *dax_first) {
  _hm_kind_t *k = hm__kinds.k;
  if (index == 0) {
    hm__kind_add(&k[_HM_KIND_HBW], t);
    hm__kind_add(&k[_HM_KIND_HBW_PREFERRED], t);
    hm__kind_add(&k[_HM_KIND_HBW_INTERLEAVE], t);
  }
  if (t->kind == fastest) {
    hm__kind_add(&k[_HM_KIND_HBW_ALL], t);
    if (index > 0) hm__kind_add(&k[_HM_KIND_HBW_INTERLEAVE], t); /* spans the kind */
  }
  if (t->kind == HM_TIER_PMEM || t->kind == HM_TIER_CXL) {
    if (*dax_first) {
      hm__kind_add(&k[_HM_KIND_DAX_KMEM], t);
      hm__kind_add(&k[_HM_KIND_DAX_KMEM_PREFERRED], t);
      *dax_first = 0;
    }
    hm__kind_add(&k[_HM_KIND_DAX_KMEM_ALL], t);
  }
  if (t->ncpus > 0) hm__kind_add(&k[_HM_KIND_REGULAR], t);
}

/* A kind whose only node is this thread's own is the heap's memory. */
static void hm__kind_heapify(int local, size_t memory_tiers) {
  for (int c = _HM_KIND_REGULAR; c < _HM_KIND_N; c++) {
    _hm_kind_t *k = &hm__kinds.k[c];
    int only_local = 1;
    for (int i = 0; i < _HM_BLK_MASK_LONGS * HM__BITS; i++)
      if ((k->mask[i / HM__BITS] >> (i % HM__BITS)) & 1ul) only_local &= i == local;
    if (k->available == 0 && (memory_tiers == 1 || (only_local && local >= 0))) k->heap = 1;
  }
}

static void hm__kinds_init(void) {
  hm__kinds.k[_HM_KIND_DEFAULT] = (_hm_kind_t){.available = 0, .heap = 1};
  static const int modes[_HM_KIND_N] = {
      [_HM_KIND_REGULAR] = MPOL_BIND,          [_HM_KIND_HBW] = MPOL_BIND,
      [_HM_KIND_HBW_PREFERRED] = MPOL_PREFERRED, [_HM_KIND_HBW_INTERLEAVE] = MPOL_INTERLEAVE,
      [_HM_KIND_HBW_ALL] = MPOL_BIND,          [_HM_KIND_DAX_KMEM] = MPOL_BIND,
      [_HM_KIND_DAX_KMEM_PREFERRED] = MPOL_PREFERRED, [_HM_KIND_DAX_KMEM_ALL] = MPOL_BIND};
  for (int c = _HM_KIND_REGULAR; c < _HM_KIND_N; c++) hm__kind_set(c, modes[c]);
  hm_ctx_t *ctx = NULL;
  static const char *const none[1] = {NULL};
  if (hm_ctx_new(&ctx, NULL) == 0 && hm_tiers_discover(ctx, none, 0) == 0) {
    size_t n = hm_tier_count(ctx), memory = 0;
    int dax_first = 1;
    hm_tier_kind_t fastest = HM_TIER_UNKNOWN;
    for (size_t i = 0; i < n; i++) {
      hm_tier_t t = {.size = sizeof t};
      if (hm_tier_get(ctx, i, &t) != 0 || t.kind == HM_TIER_STORAGE || t.numa_node < 0) continue;
      if (memory == 0) fastest = t.kind;
      hm__kind_tier(&t, memory++, fastest, &dax_first);
    }
    int local = _hm_prim_cpu() >= 0 ? _hm_prim_cpu_node() : -1;
    hm__kind_heapify(local, memory);
  }
  hm_ctx_free(ctx);
}

const _hm_kind_t *_hm_kind(int code) {
  if (code < 1 || code >= _HM_KIND_N) return NULL;
  pthread_once(&hm__kinds.once, hm__kinds_init);
  return &hm__kinds.k[code];
}

void *_hm_kind_alloc(int code, size_t alignment, size_t size, int zero) {
  const _hm_kind_t *k = _hm_kind(code);
  if (!k || k->available != 0) return NULL;
  size_t n = size ? size : 1;
  if (k->heap) {
    void *p = _hm_blk_heap(alignment, n, (uint32_t)code);
    if (p && zero) memset(p, 0, n);
    return p;
  }
  if (k->mode == MPOL_BIND && !k->unknown && n > k->bytes) return NULL; /* never fits */
  return _hm_blk_map(k->mode, k->mask, alignment, n, (uint32_t)code); /* reads as zeros */
}

void *_hm_kind_realloc(int code, void *ptr, size_t size) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  if (!h) {
    errno = EINVAL;
    return NULL;
  }
  if (size <= _hm_blk_usable(ptr) && h->kind == (uint32_t)code) {
    h->size = size;
    return ptr;
  }
  void *n = _hm_kind_alloc(code, 0, size, 0);
  if (!n) {
    errno = ENOMEM;
    return NULL;
  }
  memcpy(n, ptr, h->size < size ? h->size : size);
  _hm_blk_free(ptr);
  return n;
}

int _hm_kind_first_node(const _hm_kind_t *k) {
  for (int i = 0; k && i < _HM_BLK_MASK_LONGS * HM__BITS; i++)
    if ((k->mask[i / HM__BITS] >> (i % HM__BITS)) & 1ul) return i;
  return -1;
}
