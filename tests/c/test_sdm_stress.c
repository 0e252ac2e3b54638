/* SPDX-License-Identifier: BSD-3-Clause */
/* Randomized stress test of the pager: 4 threads, >= 10^6 reads and writes
 * over a region 24x the budget, checked against a shadow copy. Threads own
 * interleaved words (word i belongs to thread i % 4), so they share every
 * page and unit and race on faults, fills, evictions and write-backs while
 * the expected value of every word stays well defined.
 * HETMEM_SDM_STRESS_OPS overrides the op count (sanitizer builds shrink it). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define NT 4

typedef hm_sdm_worker_t worker_t;

static uint64_t rnd(worker_t *w) { return hm_sdm_worker_rnd(w); }
static void op(worker_t *w, size_t i) { hm_sdm_worker_op(w, i); }

static void *work(void *arg) {
  worker_t *w = arg;
  uint64_t target = w->ops;
  w->ops = 0;
  while (w->ops < target) {
    uint64_t r = rnd(w);
    size_t base = (size_t)(r % w->n);
    switch ((r >> 40) % 3) {
    case 0: /* a forward sweep */
      for (size_t k = 0; k < 512 * NT && w->ops < target; k += NT) op(w, (base + k) % w->n);
      break;
    case 1: /* random within a 256 KiB neighbourhood */
      for (int k = 0; k < 256 && w->ops < target; k++)
        op(w, (base + (size_t)(rnd(w) % (32 * 1024))) % w->n);
      break;
    default: /* anywhere */
      for (int k = 0; k < 16 && w->ops < target; k++) op(w, (size_t)(rnd(w) % w->n));
    }
  }
  return NULL;
}

static void run(hm_ctx_t *ctx, const char *dir, uint32_t flags, uint64_t ops) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 4 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = 64 * 1024;
  cfg.flags = flags;
  cfg.handler_threads = 2;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  size_t len = 96 * MiB;
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, len, (void **)&a), 0);
  size_t n = len / 8;
  uint64_t *shadow = calloc(n, 8);
  CHECK(shadow != NULL);
  if (!a || !shadow) {
    free(shadow);
    hm_pager_close(p);
    return;
  }
  worker_t w[NT];
  pthread_t th[NT];
  for (unsigned t = 0; t < NT; t++) {
    w[t] = (worker_t){.a = a, .shadow = shadow, .n = n, .t = t, .nt = NT, .ops = ops / NT,
                      .rng = 12345u + t * 777u + flags};
    CHECK_EQ_INT(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  uint64_t total = 0, bad = 0;
  for (unsigned t = 0; t < NT; t++) {
    pthread_join(th[t], NULL);
    total += w[t].ops;
    bad += w[t].bad;
  }
  uint64_t final_bad = 0;
  for (size_t i = 0; i < n; i++) final_bad += a[i] != shadow[i];
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  printf("flags=%u ops=%llu mismatches=%llu final_mismatches=%llu faults=%llu fetches=%llu "
         "evictions=%llu writebacks=%llu pf_issued=%llu pf_used=%llu peak=%llu\n",
         flags, (unsigned long long)total, (unsigned long long)bad,
         (unsigned long long)final_bad, (unsigned long long)s.faults,
         (unsigned long long)s.fetches, (unsigned long long)s.evictions,
         (unsigned long long)s.writebacks, (unsigned long long)s.prefetch_issued,
         (unsigned long long)s.prefetch_used, (unsigned long long)s.peak_resident_bytes);
  CHECK(total >= ops - NT);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(final_bad, 0);
  CHECK(s.evictions > 0);
  CHECK(s.peak_resident_bytes <= cfg.dram_budget);
  CHECK_EQ_INT(s.io_errors, 0);
  CHECK(len >= 20 * cfg.dram_budget);
  free(shadow);
  CHECK_EQ_INT(hm_pager_unmap(p, a, len), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  uint64_t ops = hm_sdm_env_u64("HETMEM_SDM_STRESS_OPS", 1000000);
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  run(ctx, dir, 0, ops);
  /* The fallbacks, with fewer ops each. */
  run(ctx, dir, HM_PAGER_MEMFD, ops / 4);
  run(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP_ASYNC, ops / 4);
  run(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP, ops / 4);
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_stress");
}
