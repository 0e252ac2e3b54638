/* SPDX-License-Identifier: BSD-3-Clause */
/* memkind.h served by hetmem's tiers (see the header for the kinds).
 *
 * At the first call the tiers are discovered once (no storage) and each
 * kind gets its nodes: HBW the fastest tier's node (ALL and INTERLEAVE:
 * every node of its kind), DAX_KMEM the fastest node of kind pmem or cxl
 * (ALL: all of them), REGULAR the nodes with CPUs. A kind whose nodes are
 * where a thread's memory comes from anyway (one node) is served from the
 * heap; the others by bound mappings (block.c). Nothing here is on a hot
 * path; the only lock is the pthread_once of the start-up. */
#include <errno.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "block.h"
#include "hetmem.h"
#include "memkind.h"
#include "prim/prim.h"

enum { HM__K_N = 10 };

typedef struct hm__mk_kind_s {
  int available;  /* 0 or MEMKIND_ERROR_UNAVAILABLE */
  int heap;       /* served by malloc */
  int mode;       /* MPOL_* of the bound ones */
  uint64_t bytes; /* capacity of the nodes; BIND kinds refuse more */
  int unknown;    /* a node's capacity is unknown: refuse nothing */
  unsigned long mask[_HM_BLK_MASK_LONGS];
} hm__mk_kind_t;

static struct {
  pthread_once_t once;
  hm__mk_kind_t k[HM__K_N];
} hm__mk = {.once = PTHREAD_ONCE_INIT};

static int hm__mk_code(memkind_t kind) {
  uintptr_t c = (uintptr_t)kind;
  return c >= 1 && c < HM__K_N ? (int)c : 0;
}

static void hm__mk_add(hm__mk_kind_t *k, const hm_tier_t *t) {
  const int bits = 8 * (int)sizeof(unsigned long);
  if (t->numa_node < 0 || t->numa_node >= _HM_BLK_MASK_LONGS * bits) return;
  k->mask[t->numa_node / bits] |= 1ul << (t->numa_node % bits);
  k->bytes += t->capacity_bytes;
  k->unknown |= t->capacity_bytes == 0;
  k->available = 0;
}

static void hm__mk_set(int code, int mode) {
  hm__mk.k[code].mode = mode;
  hm__mk.k[code].available = MEMKIND_ERROR_UNAVAILABLE;
}

/* Each memory tier joins the kinds it serves (tiers come fastest first). */
static void hm__mk_tier(const hm_tier_t *t, size_t index, hm_tier_kind_t fastest,
                        int *dax_first) {
  hm__mk_kind_t *k = hm__mk.k;
  if (index == 0) {
    for (int c = 3; c <= 5; c++) hm__mk_add(&k[c], t); /* HBW, _PREFERRED, _INTERLEAVE */
  }
  if (t->kind == fastest) {
    hm__mk_add(&k[6], t); /* HBW_ALL */
    if (index > 0) hm__mk_add(&k[5], t); /* INTERLEAVE spans the kind */
  }
  if (t->kind == HM_TIER_PMEM || t->kind == HM_TIER_CXL) {
    if (*dax_first) {
      hm__mk_add(&k[7], t);
      hm__mk_add(&k[8], t);
      *dax_first = 0;
    }
    hm__mk_add(&k[9], t);
  }
  if (t->ncpus > 0) hm__mk_add(&k[2], t); /* REGULAR */
}

/* A kind whose only node is this thread's own is the heap's memory. */
static void hm__mk_heapify(int local, size_t memory_tiers) {
  const int bits = 8 * (int)sizeof(unsigned long);
  for (int c = 2; c < HM__K_N; c++) {
    hm__mk_kind_t *k = &hm__mk.k[c];
    int only_local = 1;
    for (int i = 0; i < _HM_BLK_MASK_LONGS * bits; i++)
      if ((k->mask[i / bits] >> (i % bits)) & 1ul) only_local &= i == local;
    if (k->available == 0 && (memory_tiers == 1 || (only_local && local >= 0))) k->heap = 1;
  }
}

static void hm__mk_init(void) {
  hm__mk.k[1] = (hm__mk_kind_t){.available = 0, .heap = 1};
  hm__mk_set(2, MPOL_BIND);
  hm__mk_set(3, MPOL_BIND);
  hm__mk_set(4, MPOL_PREFERRED);
  hm__mk_set(5, MPOL_INTERLEAVE);
  hm__mk_set(6, MPOL_BIND);
  hm__mk_set(7, MPOL_BIND);
  hm__mk_set(8, MPOL_PREFERRED);
  hm__mk_set(9, MPOL_BIND);
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
      hm__mk_tier(&t, memory++, fastest, &dax_first);
    }
    int local = _hm_prim_cpu() >= 0 ? _hm_prim_cpu_node() : -1;
    hm__mk_heapify(local, memory);
  }
  hm_ctx_free(ctx);
}

static hm__mk_kind_t *hm__mk_kind(memkind_t kind) {
  int c = hm__mk_code(kind);
  if (!c) return NULL;
  pthread_once(&hm__mk.once, hm__mk_init);
  return &hm__mk.k[c];
}

static void *hm__mk_alloc(memkind_t kind, size_t alignment, size_t size) {
  hm__mk_kind_t *k = hm__mk_kind(kind);
  void *p = NULL;
  if (k && k->available == 0) {
    uint32_t code = (uint32_t)hm__mk_code(kind);
    if (k->heap) p = _hm_blk_heap(alignment, size ? size : 1, code);
    else if (!(k->mode == MPOL_BIND && !k->unknown && size > k->bytes))
      p = _hm_blk_map(k->mode, k->mask, alignment, size ? size : 1, code);
  }
  if (!p) errno = ENOMEM;
  return p;
}

void *memkind_malloc(memkind_t kind, size_t size) { return hm__mk_alloc(kind, 0, size); }

void *memkind_calloc(memkind_t kind, size_t num, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(num, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = hm__mk_alloc(kind, 0, total);
  _hm_blk_hdr_t *h = _hm_blk_hdr(p);
  if (h && h->heap) memset(p, 0, total); /* mappings read as zeros already */
  return p;
}

void memkind_free(memkind_t kind, void *ptr) {
  (void)kind; /* the block knows its own */
  _hm_blk_free(ptr);
}

void *memkind_realloc(memkind_t kind, void *ptr, size_t size) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  if (!kind) kind = h ? (memkind_t)(uintptr_t)h->kind : MEMKIND_DEFAULT;
  if (!ptr) return memkind_malloc(kind, size);
  if (size == 0) {
    memkind_free(kind, ptr);
    return NULL;
  }
  if (!h) {
    errno = EINVAL;
    return NULL;
  }
  if (size <= _hm_blk_usable(ptr) && h->kind == (uint32_t)hm__mk_code(kind)) {
    h->size = size;
    return ptr;
  }
  void *n = memkind_malloc(kind, size);
  if (!n) return NULL;
  memcpy(n, ptr, h->size < size ? h->size : size);
  memkind_free(kind, ptr);
  return n;
}

int memkind_posix_memalign(memkind_t kind, void **memptr, size_t alignment, size_t size) {
  if (!memptr || alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void *))
    return EINVAL;
  int saved = errno;
  void *p = hm__mk_alloc(kind, alignment, size);
  errno = saved;
  if (!p) return ENOMEM;
  *memptr = p;
  return 0;
}

size_t memkind_malloc_usable_size(memkind_t kind, void *ptr) {
  (void)kind;
  return _hm_blk_usable(ptr);
}

memkind_t memkind_detect_kind(void *ptr) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  return h ? (memkind_t)(uintptr_t)h->kind : NULL;
}

int memkind_check_available(memkind_t kind) {
  hm__mk_kind_t *k = hm__mk_kind(kind);
  return k ? k->available : MEMKIND_ERROR_INVALID;
}

void memkind_error_message(int err, char *msg, size_t size) {
  const char *text = err == MEMKIND_SUCCESS             ? "success"
                     : err == MEMKIND_ERROR_UNAVAILABLE ? "the kind's memory is not on this machine"
                     : err == MEMKIND_ERROR_MALLOC      ? "out of memory"
                     : err == MEMKIND_ERROR_INVALID     ? "not a kind"
                                                        : "unknown error";
  if (msg && size) snprintf(msg, size, "<memkind> %s", text);
}
