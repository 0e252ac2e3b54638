/* SPDX-License-Identifier: BSD-3-Clause */
/* HM_ADVICE_COLD (madvise's MADV_COLD and MADV_PAGEOUT through the
 * interposer): the units a program says it is done with are evicted first.
 * A kept array read again and again (resident, so it never faults: CLOCK
 * alone sees no use of it) and a finished array the program advises cold
 * share a cache; new data then needs room. The finished array must go and
 * the kept one stay: reading the kept array again reads next to nothing
 * from the storage tier. The finished array's words were written: they
 * must come back from the write-back exactly. Advice on a partial unit at
 * either edge leaves it alone, and the advice is refused outside a
 * region. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (48 * MiB)
#define KEEP (12 * MiB)
#define DONE (12 * MiB)
#define NEW (32 * MiB) /* mapped; what is written depends on the cache */

int main(void) {
  hm_ctx_t *ctx = NULL;
  hm_pager_t *p = hm_sdm_begin(&ctx, BUDGET, 0);
  if (!p) return hm_test_done("test_sdm_cold");
  uint64_t *keep = NULL, *done = NULL, *fresh = NULL;
  CHECK_EQ_INT(hm_pager_map(p, KEEP, (void **)&keep), 0);
  CHECK_EQ_INT(hm_pager_map(p, DONE, (void **)&done), 0);
  CHECK_EQ_INT(hm_pager_map(p, NEW, (void **)&fresh), 0);
  if (!keep || !done || !fresh) return hm_test_done("test_sdm_cold");
  /* new data: 5 MiB more than the cache holds beside the two arrays (the
   * pager's own memory is part of the budget): about 5 MiB must go */
  uint64_t cache = BUDGET - hm_sdm_stats(p).own_bytes;
  CHECK(cache > KEEP + DONE && cache - KEEP - DONE + 5 * MiB <= NEW);
  const size_t nk = KEEP / 8, nd = DONE / 8, nn = (cache - KEEP - DONE + 5 * MiB) / 8;
  hm_sdm_fill_salted(keep, nk, 1);
  hm_sdm_fill_salted(done, nd, 2);
  CHECK_EQ_INT(hm_sdm_check_salted(keep, nk, 1), 0);
  /* whole units only: from one page into the first unit to one page short
   * of the end, every unit but the two at the edges */
  CHECK_EQ_INT(hm_pager_advise(p, (char *)done + 4096, DONE - 8192, HM_ADVICE_COLD), 0);
  CHECK_EQ_INT(hm_pager_advise(p, done, DONE, HM_ADVICE_COLD), 0); /* again: a no-op for queued ones */
  CHECK(hm_pager_advise(p, (char *)done + DONE - 4096, 8192, HM_ADVICE_COLD) == -EINVAL);
  hm_sdm_fill_salted(fresh, nn, 3);
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  uint64_t bad = hm_sdm_check_salted(keep, nk, 1);
  hm_pager_stats_t s1 = hm_sdm_stats(p);
  uint64_t read_keep = s1.bytes_read - s0.bytes_read;
  printf("kept array read again: %llu KiB from the storage tier; evictions %llu, own %llu KiB, "
         "peak resident %llu KiB\n",
         (unsigned long long)(read_keep / 1024), (unsigned long long)s1.evictions,
         (unsigned long long)(s1.own_bytes / 1024), (unsigned long long)(s1.peak_resident_bytes / 1024));
  CHECK(s1.evictions > 0);
  /* Without the advice CLOCK took the kept array's units as readily as the
   * finished one's (all 12 MiB read back again in a run without the advice;
   * with it, none of them). */
  CHECK(read_keep < KEEP / 16);
  bad += hm_sdm_check_salted(done, nd, 2) + hm_sdm_check_salted(fresh, nn, 3);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(hm_pager_unmap(p, keep, KEEP), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, done, DONE), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, fresh, NEW), 0);
  hm_sdm_end(ctx, p);
  return hm_test_done("test_sdm_cold");
}
