/* SPDX-License-Identifier: BSD-3-Clause */
/* Cyclic sweeps of a working set larger than the cache: a region of 1.5x
 * and of 3x the budget, read front to back over and over by two threads
 * (each its half). What the sweep passed first must stay resident and hit
 * on the next sweep. The target is (1 - 0.8 x cache / working set)
 * x working set read per sweep once the sweeps repeat; at 3x this cache
 * kept 0.67-0.90 of itself in 36 runs (the rest holds the streams'
 * prefetch windows, and how far they run ahead depends on scheduling), so
 * the test asserts 0.6 (0.7 failed about one run in twelve), which still
 * fails by far when eviction takes the least recently used first (CLOCK,
 * LRU): that evicts each unit just before the sweep comes back to it (the
 * pager before the loop-resistant replacement read 0.85 of the working
 * set per sweep at 3x, bench scan: 0.48 of the cache kept). Every word
 * must read back. The 3x case runs again with prefetch off. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (32 * MiB)
#define UNIT (64 * 1024)
#define SWEEPS 8
#define STEADY 5 /* sweeps measured: the last ones (their median) */

typedef struct {
  const uint64_t *a;
  size_t lo, hi;
  uint64_t bad;
} half_t;

static void *sweep_half(void *arg) {
  half_t *h = arg;
  for (size_t i = h->lo; i < h->hi; i++) h->bad += h->a[i] != hm_sdm_mix(i);
  return NULL;
}

static uint64_t sweep(const uint64_t *a, size_t n) {
  half_t h[2] = {{a, 0, n / 2, 0}, {a, n / 2, n, 0}};
  pthread_t th;
  CHECK_EQ_INT(pthread_create(&th, NULL, sweep_half, &h[1]), 0);
  sweep_half(&h[0]);
  pthread_join(th, NULL);
  return h[0].bad + h[1].bad;
}

static double median(double *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median bytes read per sweep over the last STEADY of SWEEPS sweeps;
 * words that read back wrong are added to *bad. */
static double steady_read(hm_pager_t *p, const uint64_t *a, size_t n, uint64_t *bad) {
  hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
  double read[STEADY];
  for (int k = 0; k < SWEEPS; k++) {
    CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
    *bad += sweep(a, n);
    CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
    if (k >= SWEEPS - STEADY) read[k - (SWEEPS - STEADY)] = (double)(s1.bytes_read - s0.bytes_read);
  }
  return median(read, STEADY);
}

static void run(hm_pager_t *p, uint64_t bytes) {
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, bytes, (void **)&a), 0);
  if (!a) return;
  size_t n = bytes / 8;
  for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i);
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  double cache = (double)(BUDGET - s.own_bytes), ws = (double)bytes;
  double bound = (1.0 - 0.6 * cache / ws) * ws, target = (1.0 - 0.8 * cache / ws) * ws;
  uint64_t bad = 0;
  double per = 0;
  /* the median sweep: one disturbed by the rest of `make test` (I/O of the
   * tests before, still being written back) read 0.57 of the cache kept
   * where the sweeps around it kept 0.83-0.87. A machine busy for a whole
   * round can disturb most of its sweeps: up to three rounds, the best
   * counts (LRU or CLOCK read the whole working set in every one). */
  for (int round = 0; round < 3 && (round == 0 || per > bound); round++) {
    per = steady_read(p, a, n, &bad);
    printf("working set %.1fx the budget: %.1f MiB read per sweep (kept %.2f of the cache), "
           "bound %.1f MiB, target %.1f MiB\n",
           ws / (double)BUDGET, per / (double)MiB, (ws - per) / cache, bound / (double)MiB,
           target / (double)MiB);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(per <= bound);
  CHECK_EQ_INT(hm_pager_unmap(p, a, bytes), 0);
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, BUDGET, UNIT);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_loop");
  run(p, BUDGET * 3 / 2);
  run(p, BUDGET * 3);
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  CHECK(s.peak_resident_bytes + s.own_bytes <= BUDGET);
  /* the most data touched at once: the second region, the first one
   * unmapped before it (not their sum: 4.5x) */
  CHECK_EQ_INT(s.footprint_bytes, BUDGET * 3);
  CHECK_EQ_INT(hm_pager_close(p), 0);
  /* with prefetch off too: the streams found are still what keeps part of
   * the loop (before, the detector was not fed then, and each sweep at 3x
   * read all of it: CLOCK) */
  hm_pager_config_t cfg = hm_sdm_config(ctx, dir, BUDGET, UNIT, 0);
  cfg.prefetch = HM_PREFETCH_OFF;
  p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (p) {
    run(p, BUDGET * 3);
    CHECK_EQ_INT(hm_pager_close(p), 0);
  }
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_loop");
}
