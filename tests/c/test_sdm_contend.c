/* SPDX-License-Identifier: BSD-3-Clause */
/* Many threads faulting the same units while eviction and write-back are
 * in flight (issue 21's correctness case): 12 threads (HETMEM_SDM_THREADS,
 * 8-16) run in lock-step rounds; in each round every thread touches the
 * same four units, picked from a region 32x the budget, writing and
 * reading its own interleaved words in them (so the expected value of
 * every word stays defined). Every round therefore has all threads fault
 * the same missing units at once, while the units of earlier rounds are
 * evicted dirty and written back. A shadow copy checks each read and, at
 * the end, every word, in every fill and dirty-tracking mode.
 * HETMEM_SDM_STRESS_OPS scales the rounds (sanitizer builds shrink it). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (64 * 1024ull)
#define UNITS_PER_ROUND 4
#define MAX_T 16

typedef struct {
  hm_sdm_worker_t w;
  pthread_barrier_t *bar;
  uint64_t rounds;
  uint64_t seed; /* the same in every thread: they pick the same units */
} contender_t;

/* Each of this round's units: the same for every thread (same seed). */
static size_t round_unit(uint64_t seed, uint64_t round, int k, size_t units) {
  return (size_t)(hm_sdm_mix(seed + round * UNITS_PER_ROUND + (uint64_t)k) % units);
}

static void *contend(void *arg) {
  contender_t *c = arg;
  size_t words_per_unit = UNIT / 8, units = c->w.n / words_per_unit;
  for (uint64_t r = 0; r < c->rounds; r++) {
    pthread_barrier_wait(c->bar); /* start the round's faults together */
    for (int k = 0; k < UNITS_PER_ROUND; k++) {
      size_t base = round_unit(c->seed, r, k, units) * words_per_unit;
      /* a few words spread over the unit's pages, this thread's own */
      for (size_t j = 0; j < 8; j++)
        hm_sdm_worker_op(&c->w, base + (size_t)(hm_sdm_worker_rnd(&c->w) % words_per_unit));
    }
  }
  return NULL;
}

static void run(hm_ctx_t *ctx, const char *dir, uint32_t flags, unsigned nt, uint64_t rounds) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 2 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = UNIT;
  cfg.flags = flags;
  cfg.handler_threads = 2;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  size_t len = 64 * MiB, n = len / 8;
  uint64_t *a = NULL, *shadow = calloc(n, 8);
  CHECK_EQ_INT(hm_pager_map(p, len, (void **)&a), 0);
  CHECK(shadow != NULL);
  if (!a || !shadow) {
    free(shadow);
    hm_pager_close(p);
    return;
  }
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, nt);
  contender_t c[MAX_T];
  pthread_t th[MAX_T];
  for (unsigned t = 0; t < nt; t++) {
    c[t] = (contender_t){.w = {.a = a, .shadow = shadow, .n = n, .t = t, .nt = nt,
                               .rng = 4242u + 31u * t + flags},
                         .bar = &bar, .rounds = rounds, .seed = 99u + flags};
    CHECK_EQ_INT(pthread_create(&th[t], NULL, contend, &c[t]), 0);
  }
  uint64_t ops = 0, bad = 0, final_bad = 0;
  for (unsigned t = 0; t < nt; t++) {
    pthread_join(th[t], NULL);
    ops += c[t].w.ops;
    bad += c[t].w.bad;
  }
  pthread_barrier_destroy(&bar);
  for (size_t i = 0; i < n; i++) final_bad += a[i] != shadow[i];
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  printf("flags=%u threads=%u rounds=%llu ops=%llu mismatches=%llu final=%llu faults=%llu "
         "evictions=%llu writebacks=%llu peak=%llu\n",
         flags, nt, (unsigned long long)rounds, (unsigned long long)ops,
         (unsigned long long)bad, (unsigned long long)final_bad, (unsigned long long)s.faults,
         (unsigned long long)s.evictions, (unsigned long long)s.writebacks,
         (unsigned long long)s.peak_resident_bytes);
  CHECK_EQ_INT(ops, (uint64_t)nt * rounds * UNITS_PER_ROUND * 8);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(final_bad, 0);
  CHECK(s.evictions > 0);
  /* dirty units were written back under pressure (every mode writes them) */
  CHECK(s.writebacks > 0);
  CHECK(s.peak_resident_bytes <= cfg.dram_budget);
  CHECK_EQ_INT(s.io_errors, 0);
  free(shadow);
  CHECK_EQ_INT(hm_pager_unmap(p, a, len), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  uint64_t nt = hm_sdm_env_u64("HETMEM_SDM_THREADS", 12);
  if (nt < 8) nt = 8;
  if (nt > MAX_T) nt = MAX_T;
  /* 10^6 stress ops -> 1000 rounds of 12 threads x 32 ops = 384k ops */
  uint64_t rounds = hm_sdm_env_u64("HETMEM_SDM_STRESS_OPS", 1000000) / 1000;
  if (rounds < 20) rounds = 20;
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  run(ctx, dir, 0, (unsigned)nt, rounds);
  run(ctx, dir, HM_PAGER_MEMFD, (unsigned)nt, rounds / 4);
  run(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP, (unsigned)nt, rounds / 4);
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_contend");
}
