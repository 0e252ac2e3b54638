/* SPDX-License-Identifier: BSD-3-Clause */
/* Region successors: a program that sweeps three arrays, each larger than
 * the cache, in the same order every iteration, with a pause between
 * sweeps (its compute on data in DRAM). Once a transition has been seen
 * (x->y and y->z while the arrays are written, z->x when the first pass
 * begins), the next array's head must be read before the program reaches
 * it: no demand fetch in an array's first units in the later passes.
 * Without successors every head of every pass is a demand fetch. When the
 * order changes, the new one is learned. Both fill modes; every byte must
 * read back. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define NREG 3
#define REG_BYTES (16 * MiB)
#define UNIT (64 * 1024)
#define BUDGET (8 * MiB)
#define PASSES 4
#define HEAD_UNITS 4

/* The program's compute between sweeps: 40 ms, then until the pager's
 * I/O is quiet (hm_sdm_settle, at most 5 s), so that a successor's read
 * issued at the last sweep's end has landed on a loaded machine too: what
 * is checked is the prediction, not how fast its read is. */
static void compute_pause(hm_pager_t *p) {
  struct timespec ts = {0, 40 * 1000000L};
  nanosleep(&ts, NULL);
  hm_sdm_settle(p);
}

static void run(uint32_t flags, const char *mode) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_flags(ctx, dir, BUDGET, UNIT, flags);
  CHECK(p != NULL);
  if (!p) {
    hm_ctx_free(ctx);
    return;
  }
  uint64_t *reg[NREG] = {0};
  const size_t n = REG_BYTES / 8, head = HEAD_UNITS * UNIT / 8;
  for (int k = 0; k < NREG; k++) {
    CHECK_EQ_INT(hm_pager_map(p, REG_BYTES, (void **)&reg[k]), 0);
    if (!reg[k]) return;
  }
  for (int k = 0; k < NREG; k++)
    for (size_t i = 0; i < n; i++) reg[k][i] = hm_sdm_mix(i * NREG + (size_t)k);
  CHECK_EQ_INT(hm_pager_flush(p, NULL, 0), 0);
  uint64_t head_fetches[PASSES] = {0}, bad = 0;
  hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
  CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
  uint64_t succ0 = s0.successor_prefetches;
  for (int pass = 0; pass < PASSES; pass++)
    for (int k = 0; k < NREG; k++) {
      compute_pause(p);
      CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
      for (size_t i = 0; i < head; i++) bad += reg[k][i] != hm_sdm_mix(i * NREG + (size_t)k);
      CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
      head_fetches[pass] += s1.fetches - s0.fetches;
      for (size_t i = head; i < n; i++) bad += reg[k][i] != hm_sdm_mix(i * NREG + (size_t)k);
    }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
  printf("%s: demand fetches in the arrays' heads per pass: %llu %llu %llu %llu; "
         "successor prefetches %llu\n",
         mode, (unsigned long long)head_fetches[0], (unsigned long long)head_fetches[1],
         (unsigned long long)head_fetches[2], (unsigned long long)head_fetches[3],
         (unsigned long long)(s1.successor_prefetches - succ0));
  /* First pass: what follows z is not known yet when x begins, but x's
   * head may still be resident: eviction keeps what a sweep passed first
   * (x's head was written first), so no check here; the new order below
   * is the control (its first pass must miss). */
  /* Every transition has been seen (pass 1 is left a margin). Stray misses
   * happen (timing: the reader got to a head before the successor's read
   * landed): alone, sums of 0-2 over passes 2 and 3; 2 in one pass beside
   * the rest of `make test`. Without successors these passes miss 6: at
   * most half of that is allowed. */
  CHECK(head_fetches[2] + head_fetches[3] <= 3);
  /* x->y and y->z in every pass, z->x in passes 0-2 at least. */
  CHECK(s1.successor_prefetches - succ0 >= PASSES * (NREG - 1) + PASSES - 1);
  /* The program changes its order (x, z, y): the wrong guesses cost one
   * pass, then what follows each array is learned again. */
  static const int order[NREG] = {0, 2, 1};
  uint64_t again[4] = {0};
  for (int pass = 0; pass < 4; pass++)
    for (int j = 0; j < NREG; j++) {
      int k = order[j];
      compute_pause(p);
      CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
      for (size_t i = 0; i < head; i++) bad += reg[k][i] != hm_sdm_mix(i * NREG + (size_t)k);
      CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
      again[pass] += s1.fetches - s0.fetches;
      for (size_t i = head; i < n; i++) bad += reg[k][i] != hm_sdm_mix(i * NREG + (size_t)k);
    }
  printf("%s: in the new order: %llu %llu %llu %llu\n", mode, (unsigned long long)again[0],
         (unsigned long long)again[1], (unsigned long long)again[2],
         (unsigned long long)again[3]);
  CHECK_EQ_INT(bad, 0);
  /* The control: the changed order must miss, in its first pass or, where
   * the head it missed there was still resident (x's sweep evicts its own
   * passed units first, so z's head can outlive it), in the next, which
   * the uncorrected guess x->y makes miss again. Requiring the miss in the
   * first pass failed about one run in twenty (new order read 0 1 1 2). */
  CHECK(again[0] + again[1] >= 1);
  /* A wrong guess is corrected by the miss it causes, unless the head it
   * missed was still resident from another guess; a predictor that kept
   * its old guesses would miss every head of every pass (3 per pass, 9 in
   * all). Typically 2 (16 runs here: 1-4, and 5 once beside another
   * test); under ASan 6 in 1 run of 40 (a head's unit missed once in
   * each of the three passes): three stray misses are allowed. */
  CHECK(again[1] + again[2] + again[3] <= NREG + 3);
  CHECK(s1.peak_resident_bytes + s1.own_bytes <= BUDGET);
  for (int k = 0; k < NREG; k++) CHECK_EQ_INT(hm_pager_unmap(p, reg[k], REG_BYTES), 0);
  hm_sdm_close(p, dir);
  hm_ctx_free(ctx);
}

int main(void) {
  run(0, "anonymous");
  run(HM_PAGER_MEMFD, "memfd");
  return hm_test_done("test_sdm_successor");
}
