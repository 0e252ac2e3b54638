/* SPDX-License-Identifier: BSD-3-Clause */
/* Sixteen threads on the same two fetch units: the pager's faults of one
 * unit from many threads at once, its fills racing with writers, and the
 * unit evicted and read back while they wait (most of each thread's
 * accesses hit the hot pair; the rest walk a region 32x the cache, so
 * the hot units are evicted and refetched under the threads' feet). Threads
 * own interleaved words (word i belongs to thread i % 16), so every page of
 * the hot units is shared and the expected value of each word stays defined
 * (a shadow copy). Both handler threads; every fill mode. Every read and,
 * at the end, every word must match. HETMEM_SDM_STRESS_OPS scales it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define NT 16
#define UNIT (64 * 1024)
#define HOT_WORDS (2 * UNIT / 8)

typedef hm_sdm_worker_t worker_t;

static uint64_t rnd(worker_t *w) { return hm_sdm_worker_rnd(w); }
static void op(worker_t *w, size_t i) { hm_sdm_worker_op(w, i); }

/* Set once the watcher has found the hot pair out of memory: workers go
 * on past their ops until then (30 s at most), so that a machine too busy
 * to let the watcher look while the pair was out does not fail the check
 * on it. */
static _Atomic int hm__seen_out;

static uint64_t hm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int more(worker_t *w, uint64_t target, uint64_t deadline) {
  if (w->ops < target) return 1;
  return !atomic_load(&hm__seen_out) && hm__now_ns() < deadline;
}

static void *work(void *arg) {
  worker_t *w = arg;
  uint64_t target = w->ops, deadline = hm__now_ns() + 30000000000ull;
  w->ops = 0;
  while (more(w, target, deadline)) {
    uint64_t r = rnd(w);
    if (r % 10 != 0) { /* the hot pair */
      for (int k = 0; k < 64; k++) op(w, (size_t)(rnd(w) % HOT_WORDS));
    } else { /* a walk elsewhere: pushes the hot units out now and then */
      size_t base = HOT_WORDS + (size_t)(r % (w->n - HOT_WORDS - UNIT / 8));
      for (size_t k = 0; k < UNIT / 8; k += 64) op(w, base + k);
    }
  }
  return NULL;
}

/* Watches the hot pair while the workers run: how often a look found part
 * of it out of memory (evicted under the threads). */
typedef struct {
  void *hot;
  _Atomic int stop;
  uint64_t looks, out;
} watch_t;

static void *watch(void *arg) {
  watch_t *wt = arg;
  unsigned char vec[2 * UNIT / 4096];
  while (!atomic_load(&wt->stop)) {
    if (mincore(wt->hot, 2 * UNIT, vec) == 0) {
      size_t in = 0;
      for (size_t i = 0; i < sizeof vec; i++) in += vec[i] & 1;
      wt->out += in < sizeof vec;
      if (wt->out) atomic_store(&hm__seen_out, 1);
      wt->looks++;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void run(hm_ctx_t *ctx, const char *dir, uint32_t flags, uint64_t ops) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 1 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = UNIT;
  cfg.flags = flags;
  cfg.handler_threads = 2;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  size_t len = 32 * MiB, n = len / 8;
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, len, (void **)&a), 0);
  uint64_t *shadow = calloc(n, 8);
  CHECK(a != NULL && shadow != NULL);
  if (!a || !shadow) {
    free(shadow);
    hm_pager_close(p);
    return;
  }
  worker_t w[NT];
  pthread_t th[NT], wth;
  watch_t wt = {.hot = a, .stop = 0, .looks = 0, .out = 0};
  atomic_store(&hm__seen_out, 0);
  CHECK_EQ_INT(pthread_create(&wth, NULL, watch, &wt), 0);
  for (unsigned t = 0; t < NT; t++) {
    w[t] = (worker_t){.a = a, .shadow = shadow, .n = n, .t = t, .nt = NT, .ops = ops / NT,
                      .rng = 777u + t * 31u + flags};
    CHECK_EQ_INT(pthread_create(&th[t], NULL, work, &w[t]), 0);
  }
  uint64_t total = 0, bad = 0, final_bad = 0;
  for (unsigned t = 0; t < NT; t++) {
    pthread_join(th[t], NULL);
    total += w[t].ops;
    bad += w[t].bad;
  }
  atomic_store(&wt.stop, 1);
  pthread_join(wth, NULL);
  for (size_t i = 0; i < n; i++) final_bad += a[i] != shadow[i];
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  printf("flags=%u ops=%llu mismatches=%llu final=%llu faults=%llu fetches=%llu "
         "evictions=%llu writebacks=%llu peak=%llu hot out %llu of %llu looks\n",
         flags, (unsigned long long)total, (unsigned long long)bad,
         (unsigned long long)final_bad, (unsigned long long)s.faults,
         (unsigned long long)s.fetches, (unsigned long long)s.evictions,
         (unsigned long long)s.writebacks, (unsigned long long)s.peak_resident_bytes,
         (unsigned long long)wt.out, (unsigned long long)wt.looks);
  CHECK(total >= ops - NT);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(final_bad, 0);
  /* the hot pair was out of memory at times while the threads worked on
   * it (evicted under them), and the walks' units went too */
  CHECK(wt.out > 0);
  CHECK(s.evictions > 32 && s.writebacks > 0 && s.fetches > 0);
  CHECK(s.peak_resident_bytes <= cfg.dram_budget);
  CHECK_EQ_INT(s.io_errors, 0);
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
  run(ctx, dir, HM_PAGER_MEMFD, ops / 2);
  run(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP_ASYNC, ops / 4);
  run(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP, ops / 4);
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_hotspot");
}
