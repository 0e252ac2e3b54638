/* SPDX-License-Identifier: BSD-3-Clause */
/* hm_pager_map_at: a pager region at an address the caller chose (the
 * interposer's static arrays, src/preload/statics.c). A range reserved
 * by the caller becomes a region there, larger than the budget; every word
 * reads back after eviction; misaligned requests are refused and leave the
 * caller's mapping alone; both fill modes. */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (256 * 1024)
#define LEN (24 * MiB)

static void run(uint32_t flags) {
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 8 * MiB;
  cfg.backing_dir = hm_sdm_scratch();
  cfg.fetch_unit = UNIT;
  cfg.flags = flags;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) {
    hm_ctx_free(ctx);
    return;
  }
  /* the caller's reservation, a page of it kept on each side */
  char *res = mmap(NULL, LEN + 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  CHECK(res != MAP_FAILED);
  char *at = res + 4096;
  res[0] = 'L', at[LEN] = 'R';
  CHECK_EQ_INT(hm_pager_map_at(p, at + 1, LEN), -EINVAL);  /* not page-aligned */
  CHECK_EQ_INT(hm_pager_map_at(p, at, LEN - 4096), -EINVAL); /* not whole units */
  at[0] = 'x';                                               /* still the caller's */
  CHECK_EQ_INT(hm_pager_map_at(p, at, LEN), 0);
  CHECK(at[0] == 0); /* the region starts as zeros */
  uint64_t *w = (uint64_t *)at;
  size_t n = LEN / 8;
  for (size_t i = 0; i < n; i++) w[i] = hm_sdm_mix(i);
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += w[i] != hm_sdm_mix(i);
  CHECK_EQ_INT(bad, 0);
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  CHECK(s.bytes_written > 0);            /* 24 MiB through an 8 MiB cache */
  CHECK(res[0] == 'L' && at[LEN] == 'R'); /* its neighbours untouched */
  CHECK_EQ_INT(hm_pager_unmap(p, at, LEN), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
  munmap(res, LEN + 2 * 4096);
  hm_ctx_free(ctx);
}

int main(void) {
  run(0);
  run(HM_PAGER_MEMFD);
  hm_sdm_rmdir();
  return hm_test_done("test_sdm_fixed");
}
