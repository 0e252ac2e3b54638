/* The interposer's block table: which large blocks exist, lock-free.
 *
 * Blocks are at least alloc_threshold bytes, so there are few of them (a
 * fixed table of HM__SLOTS slots holds every live one a real application
 * makes; when it is full the interposer serves from glibc and counts it).
 * Keys are claimed with CAS and deleted with a tombstone; a lookup never
 * waits. In front of the table sits a count of blocks per 2 MiB granule of
 * the address space: free() of a small pointer reads one byte there, finds
 * 0 and goes to glibc without hashing anything.
 *
 * Memory comes from raw mmap syscalls (this file runs inside malloc, before
 * and during libc's own start-up). */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

#define HM__SLOTS ((size_t)1 << 16) /* 2 MiB of table */
#define HM__GRANULE_SHIFT 21        /* 2 MiB */
#define HM__VA_BITS 47              /* user space on x86-64/arm64 with 4-level tables */
#define HM__GRANULES ((size_t)1 << (HM__VA_BITS - HM__GRANULE_SHIFT))

static _hm_pl_block_t *hm__slots;
/* Per granule: blocks overlapping it (saturates at 255, then stays). A
 * 64 MiB reservation of which only the pages covering used address ranges
 * are ever touched. Addresses above 2^47 (5-level tables with a high hint)
 * skip the filter and always probe the table. */
static _Atomic uint8_t *hm__granules;

static void *hm__raw_map(size_t len) {
  long r = syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r < 0 && r > -4096) return NULL;
  return (void *)r;
}

int _hm_pl_table_init(void) {
  if (hm__slots) return 0;
  void *s = hm__raw_map(HM__SLOTS * sizeof(_hm_pl_block_t));
  void *g = hm__raw_map(HM__GRANULES);
  if (!s || !g) return -ENOMEM;
  hm__granules = g;
  /* Published last: _hm_pl_table_find tests hm__granules first. */
  __atomic_store_n(&hm__slots, (_hm_pl_block_t *)s, __ATOMIC_RELEASE);
  return 0;
}

size_t _hm_pl_table_capacity(void) { return HM__SLOTS; }

static inline size_t hm__hash(uintptr_t key) {
  /* Keys are page-aligned or close: drop the low bits, then Fibonacci. */
  return (size_t)(((uint64_t)(key >> 12) * 0x9E3779B97F4A7C15ull) >> (64 - 16));
}

static void hm__granules_add(uintptr_t start, size_t len, int delta) {
  uintptr_t first = start >> HM__GRANULE_SHIFT;
  uintptr_t last = (start + len - 1) >> HM__GRANULE_SHIFT;
  for (uintptr_t g = first; g <= last && g < HM__GRANULES; g++) {
    uint8_t cur = atomic_load_explicit(&hm__granules[g], memory_order_relaxed);
    for (;;) {
      if (cur == 255) break; /* saturated: stays a "maybe" for good */
      uint8_t next = (uint8_t)(cur + delta);
      if (atomic_compare_exchange_weak_explicit(&hm__granules[g], &cur, next,
                                                memory_order_release, memory_order_relaxed))
        break;
    }
  }
}

_hm_pl_block_t *_hm_pl_table_insert(uintptr_t key, uintptr_t map_start, size_t maplen) {
  _hm_pl_block_t *slots = __atomic_load_n(&hm__slots, __ATOMIC_ACQUIRE);
  if (!slots) return NULL;
  size_t h = hm__hash(key);
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[(h + i) & (HM__SLOTS - 1)];
    uintptr_t cur = atomic_load_explicit(&b->key, memory_order_relaxed);
    while (cur == HM_PL_KEY_EMPTY || cur == HM_PL_KEY_DELETED) {
      if (atomic_compare_exchange_weak_explicit(&b->key, &cur, key, memory_order_acq_rel,
                                                memory_order_relaxed)) {
        /* Granules are counted before the caller hands key out, so a free()
         * of key can never miss its block. */
        hm__granules_add(map_start, maplen, +1);
        return b;
      }
    }
  }
  return NULL;
}

_hm_pl_block_t *_hm_pl_table_find(const void *p) {
  uintptr_t key = (uintptr_t)p;
  /* Fast rejection. Before init both pointers are NULL: nothing is ours. */
  _Atomic uint8_t *gr = hm__granules;
  if (!gr) return NULL;
  uintptr_t g = key >> HM__GRANULE_SHIFT;
  if (g < HM__GRANULES && atomic_load_explicit(&gr[g], memory_order_acquire) == 0) return NULL;
  _hm_pl_block_t *slots = __atomic_load_n(&hm__slots, __ATOMIC_ACQUIRE);
  if (!slots || key <= HM_PL_KEY_DELETED) return NULL;
  size_t h = hm__hash(key);
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[(h + i) & (HM__SLOTS - 1)];
    uintptr_t cur = atomic_load_explicit(&b->key, memory_order_acquire);
    if (cur == key) return b;
    if (cur == HM_PL_KEY_EMPTY) return NULL;
  }
  return NULL;
}

_hm_pl_block_t *_hm_pl_table_find_containing(const void *p) {
  uintptr_t a = (uintptr_t)p;
  _hm_pl_block_t *exact = _hm_pl_table_find(p);
  if (exact) return exact;
  _hm_pl_block_t *slots = __atomic_load_n(&hm__slots, __ATOMIC_ACQUIRE);
  if (!slots) return NULL;
  uintptr_t g = a >> HM__GRANULE_SHIFT;
  if (g < HM__GRANULES && atomic_load_explicit(&hm__granules[g], memory_order_acquire) == 0)
    return NULL;
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[i];
    uintptr_t key = atomic_load_explicit(&b->key, memory_order_acquire);
    if (key <= HM_PL_KEY_DELETED) continue;
    uintptr_t start = key - b->off;
    if (a >= start && a < start + b->maplen) return b;
  }
  return NULL;
}

void _hm_pl_table_remove(_hm_pl_block_t *b) {
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  uintptr_t start = key - b->off;
  size_t len = b->maplen;
  atomic_store_explicit(&b->key, HM_PL_KEY_DELETED, memory_order_release);
  hm__granules_add(start, len, -1);
}
