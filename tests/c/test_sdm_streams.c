/* SPDX-License-Identifier: BSD-3-Clause */
/* Many sequential streams at once (anonymous fill mode): 48 regions read in
 * turn, a unit at a time, so that each stream's readahead trigger page is
 * held back while the reader is away on the others. More streams than the
 * held-page pool has pages: the pager must stop holding pages when the pool
 * is full (it once took a 33rd page from past the pool's mapping, over the
 * start of its slot table: wild pointers and crashes in hm-kernel-fft and
 * hm-kernel-gemm at 4x). Every byte must read back, and the pager must have
 * held more trigger pages over the run than the pool has. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define NREG 48
#define REG_BYTES (4 * MiB)
#define UNIT (64 * 1024)
#define BUDGET (32 * MiB)

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  /* anonymous fill, the mode with held trigger pages, whose pool needs a
   * budget of at least 32 x 32 pages */
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, BUDGET, UNIT);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_streams");
  uint64_t *reg[NREG] = {0};
  const size_t n = REG_BYTES / 8;
  /* All regions first: a region's unit table is charged to the budget when
   * it is mapped, and one mapped while the cache is full overshoots the
   * budget by its table until the next eviction (see hm_pager_map). */
  for (int k = 0; k < NREG; k++) {
    CHECK_EQ_INT(hm_pager_map(p, REG_BYTES, (void **)&reg[k]), 0);
    if (!reg[k]) return hm_test_done("test_sdm_streams");
  }
  for (int k = 0; k < NREG; k++)
    for (size_t i = 0; i < n; i++) reg[k][i] = hm_sdm_mix(i * NREG + (size_t)k);
  /* 192 MiB written through a 32 MiB budget: most of it is on disk now */
  CHECK_EQ_INT(hm_pager_flush(p, NULL, 0), 0);
  hm_pager_stats_t s0 = {.size = sizeof s0};
  CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
  uint64_t bad = 0;
  const size_t per_unit = UNIT / 8;
  for (size_t u = 0; u < n / per_unit; u++)
    for (int k = 0; k < NREG; k++)
      for (size_t i = u * per_unit; i < (u + 1) * per_unit; i++)
        bad += reg[k][i] != hm_sdm_mix(i * NREG + (size_t)k);
  CHECK_EQ_INT(bad, 0);
  hm_pager_stats_t s1 = {.size = sizeof s1};
  CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
  printf("readahead_triggers=%llu bytes_read=%llu faults=%llu\n",
         (unsigned long long)(s1.readahead_triggers - s0.readahead_triggers),
         (unsigned long long)(s1.bytes_read - s0.bytes_read),
         (unsigned long long)(s1.faults - s0.faults));
  CHECK(s1.readahead_triggers - s0.readahead_triggers > 2 * NREG);
  CHECK(s1.peak_resident_bytes + s1.own_bytes <= BUDGET);
  for (int k = 0; k < NREG; k++) CHECK_EQ_INT(hm_pager_unmap(p, reg[k], REG_BYTES), 0);
  hm_sdm_close(p, dir);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_streams");
}
