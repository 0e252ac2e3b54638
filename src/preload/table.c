/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's block table: which large blocks exist, lock-free.
 *
 * Blocks are at least alloc_threshold bytes, so there are few of them (a
 * fixed table of HM__SLOTS slots holds every live one a real application
 * makes; when it is full the interposer serves from glibc and counts it).
 * Keys are claimed with CAS and deleted with a tombstone; a lookup never
 * waits. In front of the table sits a count of blocks per 2 MiB granule of
 * the address space (preload.h, _hm_pl_table_maybe).
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
#include "prim/prim.h"

#define HM__SLOTS ((size_t)1 << 16) /* 2 MiB of table */

int _hm_pl_table_init(_hm_pl_table_t *t) {
  if (atomic_load(&t->slots)) return 0;
  void *s = _hm_prim_map_raw(HM__SLOTS * sizeof(_hm_pl_block_t));
  void *g = _hm_prim_map_raw(HM_PL_GRANULES);
  if (!s || !g) return -ENOMEM;
  atomic_store(&t->slots, (_hm_pl_block_t *)s);
  atomic_store(&t->granules, (_Atomic uint8_t *)g);
  return 0;
}

size_t _hm_pl_table_capacity(void) { return HM__SLOTS; }

static inline size_t hm__hash(uintptr_t key) {
  /* Keys are page-aligned or close: drop the low bits, then Fibonacci. */
  return (size_t)(((uint64_t)(key >> 12) * 0x9E3779B97F4A7C15ull) >> (64 - 16));
}

static void hm__granules_add(_hm_pl_table_t *t, uintptr_t start, size_t len, int delta) {
  _Atomic uint8_t *gr = atomic_load(&t->granules);
  uintptr_t first = start >> HM_PL_GRANULE_SHIFT;
  uintptr_t last = (start + len - 1) >> HM_PL_GRANULE_SHIFT;
  for (uintptr_t g = first; g <= last && g < HM_PL_GRANULES; g++) {
    uint8_t cur = atomic_load_explicit(&gr[g], memory_order_relaxed);
    for (;;) {
      if (cur == 255) break; /* saturated: stays a "maybe" for good */
      uint8_t next = (uint8_t)(cur + delta);
      if (atomic_compare_exchange_weak_explicit(&gr[g], &cur, next, memory_order_release,
                                                memory_order_relaxed))
        break;
    }
  }
}

_hm_pl_block_t *_hm_pl_table_insert(_hm_pl_table_t *t, uintptr_t key, uint32_t off,
                                    size_t maplen, size_t req, uint16_t backend, uint16_t flags) {
  return _hm_pl_table_insert_ex(t, key, off, maplen, req, backend, flags, 0, 0, 0);
}

_hm_pl_block_t *_hm_pl_table_insert_ex(_hm_pl_table_t *t, uintptr_t key, uint32_t off,
                                       size_t maplen, size_t req, uint16_t backend,
                                       uint16_t flags, uint32_t site, uint16_t tier,
                                       uint64_t t_alloc) {
  _hm_pl_block_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
  if (!slots || key <= HM_PL_KEY_BUSY) return NULL;
  size_t h = hm__hash(key);
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[(h + i) & (HM__SLOTS - 1)];
    uintptr_t cur = atomic_load_explicit(&b->key, memory_order_relaxed);
    while (cur == HM_PL_KEY_EMPTY || cur == HM_PL_KEY_DELETED) {
      if (atomic_compare_exchange_weak_explicit(&b->key, &cur, HM_PL_KEY_BUSY,
                                                memory_order_acquire, memory_order_relaxed)) {
        atomic_store_explicit(&b->off, off, memory_order_relaxed);
        atomic_store_explicit(&b->maplen, maplen, memory_order_relaxed);
        atomic_store_explicit(&b->req, req, memory_order_relaxed);
        b->backend = backend;
        b->flags = flags;
        b->site = site;
        b->tier = tier;
        b->sampled = 0;
        b->split_pages = 0; /* route.c sets it before the block is handed out */
        b->t_alloc = t_alloc;
        /* Granules are counted before key is published, so a free() of key
         * can never miss its block. */
        hm__granules_add(t, key - off, maplen, +1);
        atomic_store_explicit(&b->key, key, memory_order_release);
        return b;
      }
    }
  }
  return NULL;
}

_hm_pl_block_t *_hm_pl_table_find(_hm_pl_table_t *t, const void *p) {
  uintptr_t key = (uintptr_t)p;
  _hm_pl_block_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
  if (!slots || key <= HM_PL_KEY_BUSY) return NULL;
  size_t h = hm__hash(key);
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[(h + i) & (HM__SLOTS - 1)];
    uintptr_t cur = atomic_load_explicit(&b->key, memory_order_acquire);
    if (cur == key) return b;
    if (cur == HM_PL_KEY_EMPTY) return NULL;
  }
  return NULL;
}

_hm_pl_block_t *_hm_pl_table_find_containing(_hm_pl_table_t *t, const void *p) {
  if (!_hm_pl_table_maybe(t, p)) return NULL;
  _hm_pl_block_t *exact = _hm_pl_table_find(t, p);
  if (exact) return exact;
  _hm_pl_block_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < HM__SLOTS; i++) {
    _hm_pl_block_t *b = &slots[i];
    uintptr_t key = atomic_load_explicit(&b->key, memory_order_acquire);
    if (key <= HM_PL_KEY_BUSY) continue;
    uintptr_t start = key - atomic_load_explicit(&b->off, memory_order_relaxed);
    size_t len = atomic_load_explicit(&b->maplen, memory_order_relaxed);
    /* the slot may have been freed and reused meanwhile: fields and key must agree */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&b->key, memory_order_relaxed) != key) continue;
    if (a >= start && a < start + len) return b;
  }
  return NULL;
}

void _hm_pl_table_remove(_hm_pl_table_t *t, _hm_pl_block_t *b) {
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  uintptr_t start = key - atomic_load_explicit(&b->off, memory_order_relaxed);
  size_t len = atomic_load_explicit(&b->maplen, memory_order_relaxed);
  atomic_store_explicit(&b->key, HM_PL_KEY_DELETED, memory_order_release);
  hm__granules_add(t, start, len, -1);
}

void _hm_pl_table_mark(_hm_pl_table_t *t, uintptr_t start, size_t len) {
  hm__granules_add(t, start, len, +1);
}

void _hm_pl_table_clear(_hm_pl_table_t *t) {
  _hm_pl_block_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
  if (!slots) return;
  for (size_t i = 0; i < HM__SLOTS; i++)
    if (atomic_load_explicit(&slots[i].key, memory_order_relaxed) > HM_PL_KEY_BUSY)
      _hm_pl_table_remove(t, &slots[i]);
}

_hm_pl_block_t *_hm_pl_table_slot(_hm_pl_table_t *t, size_t i) {
  _hm_pl_block_t *slots = atomic_load_explicit(&t->slots, memory_order_acquire);
  return slots && i < HM__SLOTS ? &slots[i] : NULL;
}
