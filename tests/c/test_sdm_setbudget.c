/* SPDX-License-Identifier: BSD-3-Clause */
/* hm_pager_set_budget: hybrid placement gives the pager what the sites
 * pinned in DRAM leave free at each moment. A smaller budget must be met by
 * the pager on its own (no fault needed: the pinned memory arrives while
 * the program may not touch the pager at all), dirty data must survive the
 * eviction it forces, and a larger one must let the cache hold more again.
 * Then threads fault and write while another thread moves the budget up and
 * down (TSan), and every word must read back. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (64 * MiB)
#define SMALL (16 * MiB)
#define REGION (128 * MiB)
#define NT 3

/* Waits for the cache to be within budget b (own memory included); the
 * bytes resident over it at the end. Alone here it takes well under 2 s;
 * the limit is a hang guard (60 s), since writing back 48 MiB on a loaded
 * machine's disk has no speed to promise. */
static uint64_t over_after_wait(hm_pager_t *p, uint64_t b) {
  for (int i = 0; i < 6000; i++) {
    hm_pager_stats_t s = hm_sdm_stats(p);
    if (s.resident_bytes + s.own_bytes <= b) return 0;
    hm_sdm_sleep_ms(10);
  }
  hm_pager_stats_t s = hm_sdm_stats(p);
  return s.resident_bytes + s.own_bytes - b;
}

static uint64_t check_words(const uint64_t *a, size_t n, uint64_t salt) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != hm_sdm_mix(i ^ salt);
  return bad;
}

typedef struct {
  hm_sdm_worker_t w;
  _Atomic int *stop;
} worker_arg_t;

static void *worker(void *arg) {
  worker_arg_t *wa = arg;
  while (!atomic_load(wa->stop)) {
    for (int k = 0; k < 256; k++) hm_sdm_worker_op(&wa->w, hm_sdm_worker_rnd(&wa->w) % wa->w.n);
  }
  return NULL;
}

/* Threads write and read their words at random while the budget moves. */
static void moving_budget(hm_pager_t *p, uint64_t *a) {
  const size_t n = REGION / 8;
  uint64_t *shadow = calloc(n, sizeof *shadow);
  CHECK(shadow != NULL);
  if (!shadow) return;
  memset(a, 0, REGION);
  _Atomic int stop = 0;
  worker_arg_t wa[NT];
  pthread_t th[NT];
  for (unsigned t = 0; t < NT; t++) {
    wa[t] = (worker_arg_t){{a, shadow, n, t, NT, 0, 0, 0x1234u + t}, &stop};
    CHECK_EQ_INT(pthread_create(&th[t], NULL, worker, &wa[t]), 0);
  }
  for (int i = 0; i < 100; i++) {
    CHECK_EQ_INT(hm_pager_set_budget(p, i % 2 ? BUDGET : SMALL), 0);
    hm_sdm_sleep_ms(5);
  }
  atomic_store(&stop, 1);
  uint64_t ops = 0, bad = 0;
  for (unsigned t = 0; t < NT; t++) {
    pthread_join(th[t], NULL);
    ops += wa[t].w.ops;
    bad += wa[t].w.bad;
  }
  for (size_t i = 0; i < n; i++) bad += a[i] != shadow[i];
  printf("moving budget: %llu operations, %llu wrong\n", (unsigned long long)ops,
         (unsigned long long)bad);
  CHECK(ops > 0);
  CHECK_EQ_INT(bad, 0);
  free(shadow);
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, BUDGET, 256 * 1024);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_setbudget");
  CHECK_EQ_INT(hm_pager_set_budget(p, 0), -EINVAL);
  CHECK_EQ_INT(hm_pager_set_budget(NULL, SMALL), -EINVAL);
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, REGION, (void **)&a), 0);
  if (!a) return hm_test_done("test_sdm_setbudget");
  const size_t n = REGION / 8;
  for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i ^ 7); /* dirty, past the budget */
  hm_pager_stats_t s = hm_sdm_stats(p);
  CHECK(s.resident_bytes + s.own_bytes <= BUDGET);
  CHECK(s.resident_bytes > BUDGET / 2); /* the cache was used */

  /* Shrink: met without a fault, the dirty units written back. */
  CHECK_EQ_INT(hm_pager_set_budget(p, SMALL), 0);
  uint64_t over = over_after_wait(p, SMALL);
  printf("after shrinking to %llu MiB: %llu bytes over\n", (unsigned long long)(SMALL / MiB),
         (unsigned long long)over);
  CHECK_EQ_INT(over, 0);
  CHECK_EQ_INT(check_words(a, n, 7), 0);
  s = hm_sdm_stats(p);
  CHECK(s.resident_bytes + s.own_bytes <= SMALL);
  CHECK(s.budget_low_bytes <= SMALL && s.budget_low_bytes > SMALL / 2);

  /* Grow: a span of 48 MiB read twice is mostly held the second time (at
   * 16 MiB at least 32 MiB of it would be read again; the pager evicts some
   * of a sweep behind it in a region larger than its cache). */
  CHECK_EQ_INT(hm_pager_set_budget(p, 10 * BUDGET), 0); /* taken as the opened budget */
  hm_sdm_sleep_ms(20);
  const size_t span = 48 * MiB / 8;
  CHECK_EQ_INT(check_words(a, span, 7), 0);
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  CHECK_EQ_INT(check_words(a, span, 7), 0);
  hm_pager_stats_t s1 = hm_sdm_stats(p);
  printf("second read of 48 MiB at %llu MiB: %llu MiB read\n",
         (unsigned long long)(BUDGET / MiB),
         (unsigned long long)((s1.bytes_read - s0.bytes_read) / MiB));
  CHECK(s1.bytes_read - s0.bytes_read < 24 * MiB);
  CHECK(s1.resident_bytes + s1.own_bytes <= BUDGET);
  CHECK(s1.budget_mean_bytes < BUDGET && s1.budget_mean_bytes > SMALL / 2);

  moving_budget(p, a);
  CHECK_EQ_INT(hm_pager_unmap(p, a, REGION), 0);
  hm_sdm_close(p, dir);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_setbudget");
}
