/* SPDX-License-Identifier: BSD-3-Clause */
/* Short spans swept again, inside a region larger than the cache: what a
 * tiled kernel does (a BLAS call packs its tile in several passes; a panel
 * is reused for every tile of a row). The region is 4x the budget, read
 * tile by tile, each 2 MiB tile (1/16 of the cache) four times over before
 * the next, and the whole walk twice. Evicting first what a stream has left
 * behind (which keeps part of a sweep larger than the cache resident, see
 * test_sdm_loop) evicted each tile's start before its next pass came back
 * to it: every pass read the tile again, 4x the region per walk. Units read
 * again so soon after such an eviction are no longer left behind, and a
 * walk reads little more than the region once. Every word must read back. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (32 * MiB)
#define UNIT (64 * 1024)
#define REGION (4 * BUDGET)
#define TILE (2 * MiB)
#define PASSES 4
#define WALKS 2

static uint64_t walk(const uint64_t *a) {
  uint64_t bad = 0;
  size_t per = TILE / 8;
  for (size_t t = 0; t < REGION / TILE; t++)
    for (int q = 0; q < PASSES; q++)
      for (size_t i = t * per; i < (t + 1) * per; i++) bad += a[i] != hm_sdm_mix(i);
  return bad;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, BUDGET, UNIT);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_resweep");
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, REGION, (void **)&a), 0);
  if (a) {
    for (size_t i = 0; i < REGION / 8; i++) a[i] = hm_sdm_mix(i);
    hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
    uint64_t bad = 0;
    for (int w = 0; w < WALKS; w++) {
      CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
      bad += walk(a);
      CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
      double per = (double)(s1.bytes_read - s0.bytes_read) / (double)REGION;
      printf("walk %d: read %.2f x the region (%d passes over each tile), %llu units read again soon\n", w + 1,
             per, PASSES, (unsigned long long)s1.resweep_refills);
      /* 1.0 would be each tile read once; leaving every pass behind read
       * 3.3-4.0 here */
      CHECK(per <= 1.6);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(s1.resweep_refills > 0);
    CHECK(s1.peak_resident_bytes + s1.own_bytes <= BUDGET);
    CHECK_EQ_INT(hm_pager_unmap(p, a, REGION), 0);
  }
  CHECK_EQ_INT(hm_pager_close(p), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_resweep");
}
