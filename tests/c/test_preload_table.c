/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's lock-free block table (src/preload/table.c): exact and
 * containing lookups, the granule filter never missing a live block, slot
 * reuse through tombstones, a full table, and 4 threads inserting, finding
 * and removing at once (also run under ThreadSanitizer). Keys are plain
 * numbers: the table never touches the memory they name. */
#include <pthread.h>
#include <stdint.h>

#include "../../src/preload/table.c"
#include "testhelper.h"

#define MIB ((uintptr_t)1 << 20)
#define BASE ((uintptr_t)0x100000000000ull) /* 16 TiB: inside 47 bits */

static _hm_pl_table_t g_table;

static void single_thread(void) {
  _hm_pl_table_t *t = &g_table;
  static int local;
  CHECK(!_hm_pl_table_maybe(t, &local)); /* nothing inserted yet */
  uintptr_t key = BASE + 3 * MIB + 4096, start = BASE + 3 * MIB;
  _hm_pl_block_t *b = _hm_pl_table_insert(t, key, (uint32_t)(key - start), 5 * MIB, 4 * MIB, 1, 0);
  CHECK(b != NULL);
  if (!b) return;
  CHECK_EQ_INT(b->req, 4 * MIB);
  CHECK(_hm_pl_table_maybe(t, (void *)key));
  CHECK(_hm_pl_table_find(t, (void *)key) == b);
  CHECK(_hm_pl_table_find(t, (void *)(key + 8)) == NULL); /* exact only */
  CHECK(_hm_pl_table_find_containing(t, (void *)(key + 2 * MIB)) == b);
  CHECK(_hm_pl_table_find_containing(t, (void *)start) == b);
  CHECK(_hm_pl_table_find_containing(t, (void *)(start + 5 * MIB)) == NULL);
  CHECK(!_hm_pl_table_maybe(t, &local)); /* other granules stay empty */
  _hm_pl_table_remove(t, b);
  CHECK(_hm_pl_table_find(t, (void *)key) == NULL);
  CHECK(!_hm_pl_table_maybe(t, (void *)key)); /* granule counts back to 0 */
  CHECK(!_hm_pl_table_maybe(t, (void *)(start + 4 * MIB)));
  /* two blocks sharing a granule: freeing one keeps the other visible */
  _hm_pl_block_t *a1 = _hm_pl_table_insert(t, BASE + 64 * 4096, 0, 256 * 1024, 1, 1, 0);
  _hm_pl_block_t *a2 = _hm_pl_table_insert(t, BASE + 256 * 4096, 0, 256 * 1024, 1, 1, 0);
  CHECK(a1 && a2);
  if (a1 && a2) {
    _hm_pl_table_remove(t, a1);
    CHECK(_hm_pl_table_maybe(t, (void *)(BASE + 256 * 4096)));
    CHECK(_hm_pl_table_find(t, (void *)(BASE + 256 * 4096)) == a2);
    _hm_pl_table_remove(t, a2);
  }
}

#define THREADS 4
#define ITERS 20000
#define LIVE 64

static int g_errors[THREADS];

static void *worker(void *arg) {
  int id = (int)(uintptr_t)arg;
  _hm_pl_table_t *t = &g_table;
  /* Each thread owns its own slice of (fake) address space; blocks of one
   * thread share granules with each other, not with other threads'. */
  uintptr_t base = BASE + (uintptr_t)(id + 1) * 1024 * MIB;
  _hm_pl_block_t *live[LIVE] = {0};
  uintptr_t keys[LIVE] = {0};
  for (int i = 0; i < ITERS; i++) {
    int s = i % LIVE;
    if (live[s]) {
      if (_hm_pl_table_find(t, (void *)keys[s]) != live[s] || live[s]->req != (keys[s] ^ 0x5a5a))
        g_errors[id]++;
      _hm_pl_table_remove(t, live[s]);
      if (_hm_pl_table_find(t, (void *)keys[s]) != NULL) g_errors[id]++;
      live[s] = NULL;
    }
    uintptr_t key = base + (uintptr_t)((i * 7919) % 4096) * 64 * 1024;
    int dup = 0;
    for (int j = 0; j < LIVE; j++) dup |= live[j] && keys[j] == key;
    if (dup) continue;
    _hm_pl_block_t *b = _hm_pl_table_insert(t, key, 0, 64 * 1024, key ^ 0x5a5a, 1, 0);
    if (!b) {
      g_errors[id]++;
      continue;
    }
    live[s] = b;
    keys[s] = key;
    if (!_hm_pl_table_maybe(t, (void *)key)) g_errors[id]++; /* never a false negative */
    /* a linear scan of the table: only now and then */
    if (i % 256 == 0 && _hm_pl_table_find_containing(t, (void *)(key + 4096)) != b)
      g_errors[id]++;
  }
  for (int s = 0; s < LIVE; s++)
    if (live[s]) _hm_pl_table_remove(t, live[s]);
  return NULL;
}

static void threads(void) {
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < THREADS; i++) CHECK_EQ_INT(g_errors[i], 0);
}

static void full_table(void) {
  _hm_pl_table_t *t = &g_table;
  size_t cap = _hm_pl_table_capacity(), n = 0;
  for (size_t i = 0; i <= cap; i++) {
    uintptr_t key = BASE + (uintptr_t)i * 2 * MIB; /* one granule each */
    if (!_hm_pl_table_insert(t, key, 0, 4096, 4096, 1, 0)) break;
    n++;
  }
  CHECK_EQ_INT(n, cap); /* exactly full, then NULL rather than a hang */
  CHECK(_hm_pl_table_find(t, (void *)(BASE + 100 * 2 * MIB)) != NULL);
  _hm_pl_table_clear(t);
  CHECK(_hm_pl_table_find(t, (void *)(BASE + 100 * 2 * MIB)) == NULL);
  CHECK(!_hm_pl_table_maybe(t, (void *)(BASE + 100 * 2 * MIB)));
  /* tombstones are reusable */
  CHECK(_hm_pl_table_insert(t, BASE + 4096, 0, 4096, 4096, 1, 0) != NULL);
}

int main(void) {
  CHECK_EQ_INT(_hm_pl_table_init(&g_table), 0);
  single_thread();
  threads();
  full_table();
  return hm_test_done("test_preload_table");
}
