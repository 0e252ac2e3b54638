/* SPDX-License-Identifier: BSD-3-Clause */
/* Fills into a unit that is dirty already, and fills for a write fault,
 * are installed without write-protection (sync WP: anonymous fills, and
 * memfd fills on kernels without WP_ASYNC), and what is written to them is
 * still written back.
 *
 * An array of 16 units of 256 KiB, on disk and out of the cache, advised
 * random so that every fault fills one page. Pass 1 reads then writes one
 * word of every page, units interleaved: before, every fill came in
 * protected and its write took a WP fault, 1024 in all; now only a unit's
 * first write does. Pass 2 writes first: its write faults fill unprotected,
 * no WP fault at all. After each pass the array is pushed out and every
 * word must read back as written. */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (256 * 1024ull)
#define UNITS 16u
#define PAGES (UNIT / 4096)
#define WPP (4096 / 8) /* words per page */

static uint64_t wp_faults(hm_pager_t *p) { return hm_sdm_stats(p).wp_faults; }

/* The word of page k of unit u that the passes touch. */
static size_t word(uint32_t u, uint32_t k) { return (size_t)u * (UNIT / 8) + (size_t)k * WPP + 5; }

static uint64_t expect(size_t i, int pass) {
  uint64_t v = hm_sdm_mix(i);
  if (i % WPP != 5) return v;
  if (pass >= 1) v ^= 0xA5A5;
  if (pass >= 2) v = hm_sdm_mix(i + 77);
  return v;
}

static uint64_t check_all(const uint64_t *a, size_t n, int pass) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != expect(i, pass);
  return bad;
}

/* One pager of the given flags through both passes. */
static void one_mode(hm_ctx_t *ctx, const char *dir, uint32_t flags) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 16 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = UNIT;
  cfg.flags = flags;
  printf("flags 0x%x:\n", (unsigned)flags);
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  if (!hm_sdm_tracks_dirt(p)) { /* memfd mode before Linux 6.7: no WP faults to count */
    printf("  writes back every unit here: nothing to count\n");
    hm_pager_close(p);
    return;
  }
  const size_t abytes = UNITS * UNIT, bbytes = 48 * MiB, n = abytes / 8;
  uint64_t *a, *big;
  CHECK_EQ_INT(hm_sdm_cold_random(p, abytes, bbytes, UNIT, &a, &big), 0);
  if (!a || !big) return;

  uint64_t w0 = wp_faults(p);
  for (uint32_t k = 0; k < PAGES; k++)
    for (uint32_t u = 0; u < UNITS; u++) {
      size_t i = word(u * 5 % UNITS, k);
      /* a load, then a store (a[i] ^= x would be one write fault) */
      uint64_t v = ((volatile uint64_t *)a)[i];
      __asm__ volatile("" ::: "memory");
      a[i] = v ^ 0xA5A5;
    }
  uint64_t rw = wp_faults(p) - w0;
  printf("read then write: %llu WP faults for %u pages\n", (unsigned long long)rw,
         UNITS * (unsigned)PAGES);
  CHECK(rw >= UNITS / 2); /* a unit's first write still faults */
  CHECK(rw <= 2 * UNITS);
  hm_sdm_push_out(big, bbytes, UNIT);
  CHECK_EQ_INT(check_all(a, n, 1), 0);

  hm_sdm_push_out(big, bbytes, UNIT);
  w0 = wp_faults(p);
  for (uint32_t k = 0; k < PAGES; k++)
    for (uint32_t u = 0; u < UNITS; u++) {
      size_t i = word(u * 5 % UNITS, k);
      a[i] = hm_sdm_mix(i + 77);
    }
  uint64_t wo = wp_faults(p) - w0;
  printf("write first: %llu WP faults for %u pages\n", (unsigned long long)wo,
         UNITS * (unsigned)PAGES);
  CHECK(wo <= UNITS / 4);
  hm_sdm_push_out(big, bbytes, UNIT);
  CHECK_EQ_INT(check_all(a, n, 2), 0);

  hm_sdm_close_two(p, dir, a, abytes, big, bbytes);
}

int main(void) { return hm_sdm_sync_wp_modes("test_sdm_dirtyfill", one_mode); }
