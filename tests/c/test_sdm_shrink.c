/* SPDX-License-Identifier: BSD-3-Clause */
/* Prefetch windows follow the cache when the budget moves. A hybrid run's
 * pager opens with the whole fast budget and is then left what the DRAM
 * sites do not take (hm_pager_set_budget); its prefetch windows, sized for
 * the budget it opened with, stayed that large in a cache a tenth of it,
 * and a loop over several arrays evicted what it had read ahead before it
 * came there (LAMMPS at a 50% budget: 31 GB read for a 69 MB footprint,
 * 12 GB with prefetch off). Here one thread sweeps six arrays in step, as
 * a loop over a structure of arrays does, twice, in a pager opened at 64
 * MiB and shrunk to 6 MiB, and in one opened at 6 MiB (the control): the
 * shrunk one must read about what the control reads. Every word reads
 * back. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BIG (64 * MiB)
#define SMALL (6 * MiB)
#define NA 6
#define ARRAY (8 * MiB)

/* Bytes read by two in-step sweeps of NA arrays of p, written first; the
 * wrong words in *bad. */
static uint64_t sweeps(hm_pager_t *p, uint64_t *bad) {
  uint64_t *a[NA];
  const size_t n = ARRAY / 8;
  for (int k = 0; k < NA; k++) {
    a[k] = NULL;
    CHECK_EQ_INT(hm_pager_map(p, ARRAY, (void **)&a[k]), 0);
    if (!a[k]) return 0;
    for (size_t i = 0; i < n; i++) a[k][i] = hm_sdm_mix(i ^ (uint64_t)k);
  }
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < n; i++)
      for (int k = 0; k < NA; k++) *bad += a[k][i] != hm_sdm_mix(i ^ (uint64_t)k);
  hm_pager_stats_t s1 = hm_sdm_stats(p);
  for (int k = 0; k < NA; k++) CHECK_EQ_INT(hm_pager_unmap(p, a[k], ARRAY), 0);
  return s1.bytes_read - s0.bytes_read;
}

static uint64_t run(hm_ctx_t *ctx, const char *dir, uint64_t open_at, uint64_t *bad) {
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, open_at, 64 * 1024);
  CHECK(p != NULL);
  if (!p) return 0;
  if (open_at != SMALL) {
    CHECK_EQ_INT(hm_pager_set_budget(p, SMALL), 0);
    hm_sdm_sleep_ms(20); /* a handler applies it */
  }
  uint64_t read = sweeps(p, bad);
  hm_pager_stats_t s = hm_sdm_stats(p);
  CHECK(s.budget_low_bytes <= SMALL);
  hm_sdm_close(p, dir);
  return read;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  uint64_t bad = 0;
  uint64_t control = run(ctx, dir, SMALL, &bad);
  uint64_t shrunk = run(ctx, dir, BIG, &bad);
  printf("two in-step sweeps of %d x %llu MiB at %llu MiB: %llu MiB read opened there, "
         "%llu MiB opened at %llu MiB and shrunk\n",
         NA, (unsigned long long)(ARRAY / MiB), (unsigned long long)(SMALL / MiB),
         (unsigned long long)(control / MiB), (unsigned long long)(shrunk / MiB),
         (unsigned long long)(BIG / MiB));
  CHECK_EQ_INT(bad, 0);
  CHECK(control >= 2 * NA * ARRAY * 9 / 10); /* nothing of it fits: read twice */
  CHECK(shrunk <= control + control / 4);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_shrink");
}
