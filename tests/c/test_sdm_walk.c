/* SPDX-License-Identifier: BSD-3-Clause */
/* Units walked page after page, interleaved in random order (FFT's strided
 * pass: each plane one row further per step), are read ahead within the
 * unit; truly random pages (GUPS) still cost one page each.
 *
 * An array of 16 units of 256 KiB is written, flushed, pushed out of the
 * cache by a larger one, and advised random (what the stream detector
 * concludes of FFT's jumps between planes), so each fault fills one page.
 * Then, 64 times, one word of page k of every unit is read, the units in a
 * new order each time and never two neighbours in a row. Before the walk
 * read-ahead this took one read per page, 1024; now a unit's reads grow to
 * 16 pages, about 8 reads per unit. Then, pushed out again, 248 distinct
 * random pages (after 8 to settle) may read at most a quarter more pages
 * than that. Every word must read back. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (256 * 1024ull)
#define UNITS 16u
#define PAGES (UNIT / 4096)
#define WORDS_PER_PAGE (4096 / 8)

static uint64_t next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* The units in a random order in which no two faults in a row are in the
 * same or neighbouring units (as FFT's planes, 2-3 units apart): what the
 * stream detector calls random. */
static void shuffle_apart(uint32_t *order, uint64_t *x, uint32_t *last) {
  for (;;) {
    for (uint32_t u = 0; u < UNITS; u++) order[u] = u;
    for (uint32_t u = UNITS - 1; u > 0; u--) {
      uint32_t j = (uint32_t)(next(x) % (u + 1)), t = order[u];
      order[u] = order[j];
      order[j] = t;
    }
    uint32_t prev = *last;
    int ok = 1;
    for (uint32_t i = 0; i < UNITS && ok; i++) {
      ok = prev == UINT32_MAX || (order[i] > prev + 1 || order[i] + 1 < prev);
      prev = order[i];
    }
    if (ok) {
      *last = prev;
      return;
    }
  }
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = hm_sdm_open_anon(ctx, dir, 16 * MiB, UNIT);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_walk");
  const size_t abytes = UNITS * UNIT, bbytes = 48 * MiB;
  /* Advised random: what the detector concluded of FFT's jumps between
   * planes, here said outright, as a program may (madvise MADV_RANDOM). */
  uint64_t *a, *big;
  CHECK_EQ_INT(hm_sdm_cold_random(p, abytes, bbytes, UNIT, &a, &big), 0);
  if (!a || !big) return hm_test_done("test_sdm_walk");
  const size_t na = abytes / 8;

  uint64_t bad = 0, x = 0x9E3779B97F4A7C15ull;
  uint32_t last = UINT32_MAX;
  hm_pager_stats_t s0 = hm_sdm_stats(p);
  for (uint32_t k = 0; k < PAGES; k++) {
    uint32_t order[UNITS];
    shuffle_apart(order, &x, &last);
    for (uint32_t i = 0; i < UNITS; i++) {
      size_t w = (size_t)order[i] * (UNIT / 8) + (size_t)k * WORDS_PER_PAGE + (k % 7);
      bad += a[w] != hm_sdm_mix(w);
    }
  }
  uint64_t walk = hm_sdm_stats(p).fetches - s0.fetches;
  printf("walk: %llu reads for %u pages\n", (unsigned long long)walk, UNITS * (unsigned)PAGES);
  CHECK(walk >= UNITS);
  CHECK(walk <= UNITS * PAGES / 4);
  for (size_t i = 0; i < na; i++) bad += a[i] != hm_sdm_mix(i);

  /* Random distinct pages, also never in neighbouring units in a row: no
   * read-ahead to speak of, once the detector has seen a few jumps. */
  hm_sdm_push_out(big, bbytes, UNIT);
  static uint8_t seen[UNITS * PAGES];
  memset(seen, 0, sizeof seen);
  unsigned touched = 0;
  uint64_t read0 = 0;
  uint32_t prev = UINT32_MAX;
  while (touched < 8 + 248) {
    uint32_t pg = (uint32_t)(next(&x) % (UNITS * PAGES)), u = pg / (uint32_t)PAGES;
    if (seen[pg] || (prev != UINT32_MAX && u <= prev + 1 && u + 1 >= prev)) continue;
    seen[pg] = 1;
    prev = u;
    if (touched++ == 8) read0 = hm_sdm_stats(p).bytes_read;
    size_t w = (size_t)pg * WORDS_PER_PAGE + 3;
    bad += a[w] != hm_sdm_mix(w);
  }
  uint64_t pages_read = (hm_sdm_stats(p).bytes_read - read0) / 4096;
  printf("random: %llu pages read for the last 248 touched\n", (unsigned long long)pages_read);
  CHECK(pages_read <= 248 + 248 / 4);
  CHECK_EQ_INT(bad, 0);

  CHECK_EQ_INT(hm_pager_unmap(p, a, abytes), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, big, bbytes), 0);
  hm_sdm_close(p, dir);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_walk");
}
