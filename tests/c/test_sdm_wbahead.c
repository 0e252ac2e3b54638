/* SPDX-License-Identifier: BSD-3-Clause */
/* Write-back runs off the fault path (issue 21): the handler starts an
 * eviction batch when less than a batch of the budget is free and serves
 * faults while its writes run, so a fault waits for a write-back only when
 * the budget is spent before they end.
 *
 * A region 4x the budget is written whole (every unit dirty), then pages
 * of it are written at random, one thread, each a miss that reads a page
 * and dirties it: the cache holds dirty units only, and every eviction
 * writes. A random miss fills about 8 KiB, and a batch's writes take
 * about a millisecond, so the budget should almost never run out while a
 * batch is in flight: at most a quarter of the batches may have stalled a
 * fault. With eviction on the fault path, every batch stalled one. Then
 * every word must read back as last written. Both fill modes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (64 * 1024ull)
#define WPP (4096 / 8) /* words per page */

/* Word i's value: the page's written word its last random value, the rest
 * the sweep's. */
static uint64_t expect(size_t i, const uint64_t *shadow) {
  size_t pg = i / WPP;
  if (i % WPP == 7 && shadow[pg]) return shadow[pg];
  return hm_sdm_mix(i);
}

static void one_mode(hm_ctx_t *ctx, const char *dir, uint32_t flags) {
  const uint64_t budget = 16 * MiB, bytes = 4 * budget;
  const size_t n = bytes / 8, pages = bytes / 4096;
  const uint64_t ops = 8000;
  printf("flags 0x%x:\n", (unsigned)flags);
  hm_pager_t *p = hm_sdm_open_flags(ctx, dir, budget, UNIT, flags);
  CHECK(p != NULL);
  if (!p) return;
  uint64_t *a = NULL, *shadow = calloc(pages, sizeof *shadow);
  CHECK(shadow != NULL);
  CHECK_EQ_INT(hm_pager_map(p, bytes, (void **)&a), 0);
  if (a && shadow) {
    for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i);
    hm_pager_stats_t s0 = hm_sdm_stats(p);
    uint64_t rng = 12345;
    for (uint64_t k = 0; k < ops; k++) {
      rng += 0x9e3779b97f4a7c15ULL;
      uint64_t r = hm_sdm_mix(rng) | 1; /* never 0: 0 marks an untouched page */
      size_t pg = (size_t)(r >> 16) % pages;
      a[pg * WPP + 7] = r;
      shadow[pg] = r;
    }
    hm_pager_stats_t s1 = hm_sdm_stats(p);
    uint64_t ahead = s1.evict_ahead - s0.evict_ahead;
    uint64_t stalls = s1.writeback_stalls - s0.writeback_stalls;
    uint64_t wb = s1.writebacks - s0.writebacks;
    printf("  %llu random writes: %llu batches ahead of need, %llu stalled a fault; "
           "%llu units written back\n",
           (unsigned long long)ops, (unsigned long long)ahead, (unsigned long long)stalls,
           (unsigned long long)wb);
    CHECK(wb > 0);
    CHECK(ahead >= 8);
    CHECK(stalls * 4 <= ahead);
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != expect(i, shadow);
    printf("  %llu words wrong of %zu\n", (unsigned long long)bad, n);
    CHECK(bad == 0);
    CHECK_EQ_INT(hm_pager_unmap(p, a, bytes), 0);
  }
  free(shadow);
  hm_sdm_close(p, dir);
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  if (ctx) {
    one_mode(ctx, dir, 0);
    one_mode(ctx, dir, HM_PAGER_MEMFD);
    hm_ctx_free(ctx);
  }
  return hm_test_done("test_sdm_wbahead");
}
