/* SPDX-License-Identifier: BSD-3-Clause */
/* HM_ADVICE_WILLNEED on resident data (madvise's MADV_WILLNEED through the
 * interposer) marks it used: a resident unit never faults, so CLOCK alone
 * sees no use of it. A kept array and an idle one share a cache with data
 * streamed past in chunks, as a tiled LU's panel shares it with the tiles
 * it updates; before each chunk the program asks for the kept array again.
 * The kept array must stay: neither the advice (a prefetch of what was
 * evicted) nor reading it at the end reads much from the storage tier.
 * The same run without the advice is the control: there CLOCK takes the
 * kept array as readily as the idle one, so the test fails if the advice
 * stops reaching CLOCK. Every word is checked. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (48 * MiB)
#define KEEP (12 * MiB)
#define IDLE (12 * MiB)
#define NEW (40 * MiB)
#define CHUNK (4 * MiB)

/* Fills chunk c of a as hm_sdm_fill_salted(a, NEW / 8, 3) would, page by
 * page in a scattered order (a step prime to the chunk's page count), as a
 * BLAS call touches a tile at a stride: no sequential stream whose
 * left-behind units eviction would take first, so what goes is CLOCK's
 * choice. */
static void fill_chunk_scattered(uint64_t *a, size_t c) {
  const size_t per = 4096 / 8, pages = CHUNK / 4096, first = c * (CHUNK / 8);
  for (size_t k = 0; k < pages; k++) {
    size_t w = first + k * 389 % pages * per;
    for (size_t i = w; i < w + per; i++) a[i] = hm_sdm_mix(i * 3 + 3);
  }
}

/* Bytes read back for the kept array; UINT64_MAX on failure. */
static uint64_t run(int advise) {
  hm_ctx_t *ctx = NULL;
  hm_pager_t *p = hm_sdm_begin(&ctx, BUDGET, 0);
  if (!p) return UINT64_MAX;
  uint64_t *keep = NULL, *idle = NULL, *fresh = NULL;
  CHECK_EQ_INT(hm_pager_map(p, KEEP, (void **)&keep), 0);
  CHECK_EQ_INT(hm_pager_map(p, IDLE, (void **)&idle), 0);
  CHECK_EQ_INT(hm_pager_map(p, NEW, (void **)&fresh), 0);
  if (!keep || !idle || !fresh) return UINT64_MAX;
  hm_sdm_fill_salted(keep, KEEP / 8, 1);
  hm_sdm_fill_salted(idle, IDLE / 8, 2);
  /* 64 MiB where the cache holds less than the 48 MiB budget: about 20 MiB
   * must go. Only the kept array is ever read back: the rest is written,
   * never read again before the checks, so the reads from here on are the
   * kept array's (read again at the end, or prefetched again by the
   * advice). */
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  for (size_t c = 0; c < NEW / CHUNK; c++) {
    if (advise) CHECK_EQ_INT(hm_pager_advise(p, keep, KEEP, HM_ADVICE_WILLNEED), 0);
    fill_chunk_scattered(fresh, c);
  }
  uint64_t bad = hm_sdm_check_salted(keep, KEEP / 8, 1);
  hm_pager_stats_t s1 = hm_sdm_stats(p);
  uint64_t read_keep = s1.bytes_read - s0.bytes_read;
  printf("%s: kept array read again: %llu KiB; evictions %llu\n",
         advise ? "asked for before each chunk" : "control, no advice",
         (unsigned long long)(read_keep / 1024), (unsigned long long)s1.evictions);
  CHECK(s1.evictions > 0);
  bad += hm_sdm_check_salted(idle, IDLE / 8, 2);
  bad += hm_sdm_check_salted(fresh, NEW / 8, 3);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(hm_pager_unmap(p, keep, KEEP), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, idle, IDLE), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, fresh, NEW), 0);
  hm_sdm_end(ctx, p);
  return read_keep;
}

int main(void) {
  uint64_t control = run(0);
  uint64_t asked = run(1);
  if (control == UINT64_MAX || asked == UINT64_MAX) return hm_test_done("test_sdm_willneed");
  /* the control shows the test can fail: CLOCK took much of the kept array */
  CHECK(control >= KEEP / 4);
  /* with the mark, 2-4 MiB of it here (what CLOCK's first turn takes,
   * before the next advice marks the rest again); without, the advice
   * prefetched back the whole 12 MiB that CLOCK had taken */
  CHECK(asked <= KEEP / 2);
  return hm_test_done("test_sdm_willneed");
}
