/* SPDX-License-Identifier: BSD-3-Clause */
/* A small hot table beside a large cold one, as in a cross-section lookup
 * code (XSBench: per-nuclide grids read by every lookup, an index grid
 * read once per lookup at a random row). Each lookup reads one random word
 * of a cold region 8x the cache and 8 random words of a hot region of 1/4
 * of the cache. Once the hot region is filled it never faults again, so
 * without heat CLOCK is FIFO for it and evicts it as often as the cold
 * rows: the hot pages are read back again and again. With heat
 * (hm__judge_refill, evict.c) the units that come back soon after eviction
 * get extra turns and stay. Asserted: in the measured half, reads per
 * lookup at most 1.15 (a cold row misses about 0.9 of the time; the hot
 * region at FIFO's rate added about 1 more: see the printed figures, and
 * the commit that added heat), and every word reads back. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (32 * MiB)
#define UNIT (64 * 1024)
#define HOT (BUDGET / 4)
#define COLD (8 * BUDGET)
#define LOOKUPS 60000

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* n lookups; the words read that were wrong */
static uint64_t lookups(const uint64_t *hot, const uint64_t *cold, int n, uint64_t *s) {
  uint64_t bad = 0;
  for (int k = 0; k < n; k++) {
    size_t c = rnd(s) % (COLD / 8);
    bad += cold[c] != hm_sdm_mix(c + HOT / 8);
    for (int j = 0; j < 8; j++) {
      size_t h = rnd(s) % (HOT / 8);
      bad += hot[h] != hm_sdm_mix(h);
    }
  }
  return bad;
}

int main(void) {
  hm_ctx_t *ctx;
  hm_pager_t *p = hm_sdm_begin(&ctx, BUDGET, UNIT);
  if (!p) return hm_test_done("test_sdm_heat");
  uint64_t *hot = NULL, *cold = NULL;
  CHECK_EQ_INT(hm_pager_map(p, HOT, (void **)&hot), 0);
  CHECK_EQ_INT(hm_pager_map(p, COLD, (void **)&cold), 0);
  if (!hot || !cold) return hm_test_done("test_sdm_heat");
  for (size_t i = 0; i < HOT / 8; i++) hot[i] = hm_sdm_mix(i);
  for (size_t i = 0; i < COLD / 8; i++) cold[i] = hm_sdm_mix(i + HOT / 8);
  uint64_t s = 88172645463325252ull, bad = lookups(hot, cold, LOOKUPS, &s);
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  bad += lookups(hot, cold, LOOKUPS, &s);
  hm_pager_stats_t s1 = hm_sdm_stats(p);
  CHECK_EQ_INT(bad, 0);
  double per = (double)(s1.fetches - s0.fetches) / LOOKUPS;
  printf("reads per lookup %.3f (a cold row alone misses %.2f of the time)\n", per,
         1.0 - (double)(BUDGET - HOT) / (double)COLD);
  CHECK(per <= 1.15);
  CHECK(s1.peak_resident_bytes + s1.own_bytes <= BUDGET);
  CHECK_EQ_INT(hm_pager_unmap(p, hot, HOT), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, cold, COLD), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_heat");
}
