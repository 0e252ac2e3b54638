/* SPDX-License-Identifier: BSD-3-Clause */
/* Units a sequential stream has left behind go first (anonymous fill mode).
 * A program that reads a small array many times and then sweeps a large one
 * (the hot and cold arrays of a cache-mode placement run) must keep the small
 * one resident: its pages, once mapped, never fault again, so CLOCK alone
 * sees no use of them and took them as victims during every sweep, and each
 * round read them from disk again. With the sweep's passed units evicted
 * first, a round reads the sweep's bytes and next to nothing more. Every
 * word must read back. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define HOT_BYTES (8 * MiB)
#define COLD_BYTES (128 * MiB)
#define ROUNDS 4

static uint64_t read_all(const uint64_t *a, size_t n, size_t salt) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != hm_sdm_mix(i * 2 + salt);
  return bad;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, 32 * MiB, 0);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_behind");
  uint64_t *hot = NULL, *cold = NULL;
  CHECK_EQ_INT(hm_pager_map(p, HOT_BYTES, (void **)&hot), 0);
  CHECK_EQ_INT(hm_pager_map(p, COLD_BYTES, (void **)&cold), 0);
  if (!hot || !cold) return hm_test_done("test_sdm_behind");
  const size_t nh = HOT_BYTES / 8, nc = COLD_BYTES / 8;
  for (size_t i = 0; i < nc; i++) cold[i] = hm_sdm_mix(i * 2 + 1);
  for (size_t i = 0; i < nh; i++) hot[i] = hm_sdm_mix(i * 2);
  CHECK_EQ_INT(hm_pager_flush(p, NULL, 0), 0);
  uint64_t bad = 0, per_round[ROUNDS] = {0};
  for (int r = 0; r < ROUNDS; r++) {
    hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
    CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
    for (int k = 0; k < 4; k++) bad += read_all(hot, nh, 0);
    bad += read_all(cold, nc, 1);
    CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
    per_round[r] = s1.bytes_read - s0.bytes_read;
    /* the counters that tell a re-read hot array (fetches after the
     * sweep) from a sweep reading itself twice (resweep refills) */
    printf("round %d: %llu MiB read, %llu fetches, %llu prefetched, %llu resweep refills\n", r,
           (unsigned long long)(per_round[r] / MiB),
           (unsigned long long)(s1.fetches - s0.fetches),
           (unsigned long long)(s1.prefetch_issued - s0.prefetch_issued),
           (unsigned long long)(s1.resweep_refills - s0.resweep_refills));
  }
  CHECK_EQ_INT(bad, 0);
  /* The first round brings the hot array in; after it, a round reads the
   * sweep and less than a quarter of the hot array (a few of its units may
   * still go to CLOCK at the start of a sweep, before anything lies behind). */
  for (int r = 1; r < ROUNDS; r++) CHECK(per_round[r] < COLD_BYTES + HOT_BYTES / 4);
  CHECK_EQ_INT(hm_pager_unmap(p, hot, HOT_BYTES), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, cold, COLD_BYTES), 0);
  hm_sdm_close(p, dir);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_behind");
}
