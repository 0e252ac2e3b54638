/* SPDX-License-Identifier: BSD-3-Clause */
/* Random 4 KiB block reads through a cache 8x smaller than the data, by two
 * threads, at three block alignments (page-aligned, 16 bytes into a page as
 * malloc's blocks are, and mid-page). A random miss must read what the
 * reader touches, not its unit's whole missing run: on average at most
 * 8 KiB per demand fetch, whatever the alignment (the pager read 56-67 KiB
 * per fetch before: a second fault on the unit of the last one, the second
 * page of an unaligned block, filled the rest of the unit). Every block
 * must read back exactly. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define BUDGET (16 * MiB)
#define DATA (128 * MiB)
#define BLOCK 4096u
#define READS 6000u /* per thread and alignment */

typedef struct {
  const unsigned char *base;
  size_t shift, nblk;
  unsigned seed;
  uint64_t bad;
} reader_t;

static void *reader(void *arg) {
  reader_t *r = arg;
  uint64_t x = r->seed;
  for (unsigned k = 0; k < READS; k++) {
    x = hm_sdm_mix(x + k);
    size_t b = (size_t)(x % (r->nblk - 1));
    const uint64_t *w = (const uint64_t *)(const void *)(r->base + b * BLOCK + r->shift);
    for (size_t i = 0; i < BLOCK / 8; i++) {
      size_t word = (b * BLOCK + r->shift) / 8 + i;
      r->bad += w[i] != hm_sdm_mix(word);
    }
  }
  return NULL;
}

/* Two threads of random block reads at one alignment; bytes per fetch. */
static double run_alignment(hm_pager_t *p, const unsigned char *base, size_t shift) {
  hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
  CHECK_EQ_INT(hm_pager_stats(p, &s0), 0);
  reader_t r[2];
  pthread_t th[2];
  for (int t = 0; t < 2; t++) {
    r[t] = (reader_t){.base = base, .shift = shift, .nblk = DATA / BLOCK,
                      .seed = (unsigned)(7 * t + shift + 1), .bad = 0};
    CHECK_EQ_INT(pthread_create(&th[t], NULL, reader, &r[t]), 0);
  }
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  CHECK_EQ_INT(r[0].bad + r[1].bad, 0);
  CHECK_EQ_INT(hm_pager_stats(p, &s1), 0);
  uint64_t fetches = s1.fetches - s0.fetches, bytes = s1.demand_bytes_read - s0.demand_bytes_read;
  double per = fetches ? (double)bytes / (double)fetches : 0;
  printf("shift %zu: fetches=%llu demand bytes=%llu per fetch=%.0f\n", shift,
         (unsigned long long)fetches, (unsigned long long)bytes, per);
  /* most reads miss: a cache of 1/8 of the data */
  CHECK(fetches > READS);
  return per;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, BUDGET, 0);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_random");
  uint64_t *data = NULL;
  CHECK_EQ_INT(hm_pager_map(p, DATA, (void **)&data), 0);
  if (!data) return hm_test_done("test_sdm_random");
  for (size_t i = 0; i < DATA / 8; i++) data[i] = hm_sdm_mix(i);
  CHECK_EQ_INT(hm_pager_flush(p, NULL, 0), 0);
  const size_t shifts[] = {0, 16, 2048};
  for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
    double per = run_alignment(p, (const unsigned char *)data, shifts[k]);
    CHECK(per <= 8192.0);
  }
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  CHECK(s.footprint_bytes == DATA);
  CHECK(s.peak_resident_bytes + s.own_bytes <= BUDGET);
  CHECK_EQ_INT(hm_pager_unmap(p, data, DATA), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_random");
}
