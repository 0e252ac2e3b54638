/* SPDX-License-Identifier: BSD-3-Clause */
/* Synchronous write-protect: a unit written in each of its last two
 * residencies is filled unprotected and taken as dirty, so most of its
 * refills cost no WP fault; one that stops being written is written back
 * needlessly at most twice. Every word must read back as written.
 *
 * An array of 16 units of 256 KiB under a 16 MiB budget. Between passes a
 * read-only sweep of a larger, never-written region pushes the array out:
 * those units are clean, so every write-back counted is the array's. The
 * array is written first, then read and updated (a load, then a store, on
 * every page) in 7 passes, then only read in 4. Without the guess each
 * update pass costs a WP fault per unit, 112 in all; with it, one pass in
 * three does (the 1st, 4th and 7th). The last update was seen, so the
 * first two read-only passes are guessed dirty and written back; the
 * third is watched, and from then on nothing is written. Then the
 * region's score (score_phase). */
#include <stdint.h>
#include <string.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define UNIT (256 * 1024ull)
#define UNITS 16u
#define ABYTES (UNITS * UNIT)
#define BBYTES (48 * MiB)
#define WPP (4096 / 8) /* words per page */
#define UPDATES 7

/* Reads one word per page of big, twice, units in a strided order: a
 * sequential sweep's units would be evicted first (test_sdm_behind). */
static uint64_t push_out(hm_pager_t *p, const uint64_t *big, void *x, size_t xlen) {
  const size_t units = BBYTES / UNIT;
  uint64_t sum = 0;
  /* x, used again after each push, may be kept resident against a sweep
   * (evict.c, refill heat): advised cold, it goes first */
  CHECK_EQ_INT(hm_pager_advise(p, x, xlen, HM_ADVICE_COLD), 0);
  for (int pass = 0; pass < 2; pass++)
    for (size_t j = 0; j < units; j++) {
      const volatile uint64_t *u = big + (j * 7 % units) * (UNIT / 8);
      for (size_t i = 0; i < UNIT / 8; i += WPP) sum += u[i];
    }
  return sum;
}

/* Adds one to the first word of every page of a (bytes long): a load,
 * then a store (a[i]++ may compile to one read-modify-write, a write
 * fault). */
static void update(uint64_t *a, size_t bytes) {
  for (size_t i = 0; i < bytes / 8; i += WPP) {
    uint64_t v = ((volatile uint64_t *)a)[i];
    __asm__ volatile("" ::: "memory");
    a[i] = v + 1;
  }
}

/* Words of a (bytes long, word 0 at index first) that differ from
 * hm_sdm_mix with `updates` added to each page's first word. */
static uint64_t bad_words(const uint64_t *a, size_t bytes, size_t first, uint64_t updates) {
  uint64_t bad = 0;
  for (size_t i = 0; i < bytes / 8; i++)
    bad += a[i] != hm_sdm_mix(first + i) + (i % WPP == 0 ? updates : 0);
  return bad;
}

/* The score: a region of two parts, both written, then updated once (WP
 * faults after a written residency: the score rises, every unit's history
 * reaches 3). The second part (16 units) is then only read: two guessed
 * residencies, then a watched one that finds it clean, which sends the
 * score below 0. The first part's next update (32 units) is not guessed
 * although its own history says written twice in a row; its WP faults
 * raise the score again, and the update after that is guessed. The first
 * part is twice the second so that a few units left resident by a push-out
 * do not decide the score. */
static void score_phase(hm_pager_t *p, const uint64_t *big) {
  const size_t first = 2 * ABYTES, second = ABYTES, n = (first + second) / 8;
  uint64_t *c = NULL;
  CHECK_EQ_INT(hm_pager_map(p, first + second, (void **)&c), 0);
  if (!c) return;
  for (size_t i = 0; i < n; i++) c[i] = hm_sdm_mix(i);
  push_out(p, big, c, first + second);
  update(c, first + second);
  push_out(p, big, c, first + second);
  uint64_t *c2 = c + first / 8;
  for (int k = 0; k < 3; k++) {
    CHECK_EQ_INT(bad_words(c2, second, first / 8, 1), 0);
    push_out(p, big, c, first + second);
  }
  /* The update after the unguessed one is guessed; or, where eviction
   * order left too few of its units' WP faults counted to lift the score
   * (3 of 32 runs, as many before sparse.c as after), the next; once in an
   * ASan suite run (stop 75) neither the first nor the second was (31,
   * then 32, 7 faults), so a third is allowed: each unguessed update only
   * raises the score further. */
  uint64_t wp[4] = {0, 0, 0, 0};
  int k = 0;
  for (; k < 4; k++) {
    hm_pager_stats_t s0 = hm_sdm_stats(p);
    update(c, first);
    wp[k] = hm_sdm_stats(p).wp_faults - s0.wp_faults;
    push_out(p, big, c, first + second);
    if (k >= 1 && wp[k] <= UNITS / 4) break;
  }
  printf("  after guesses found wrong elsewhere in the region, WP faults: %llu, then %llu, "
         "%llu, %llu (%u units)\n",
         (unsigned long long)wp[0], (unsigned long long)wp[1], (unsigned long long)wp[2],
         (unsigned long long)wp[3], 2 * UNITS);
  CHECK(wp[0] >= UNITS);
  CHECK(k < 4);
  CHECK_EQ_INT(bad_words(c, first, 0, 1 + (uint64_t)(k < 4 ? k + 1 : 4)), 0);
  CHECK_EQ_INT(bad_words(c2, second, first / 8, 1), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, c, first + second), 0);
}

static void one_mode(hm_ctx_t *ctx, const char *dir, uint32_t flags) {
  printf("flags 0x%x:\n", (unsigned)flags);
  hm_pager_t *p = hm_sdm_open_flags(ctx, dir, 16 * MiB, UNIT, flags);
  CHECK(p != NULL);
  if (!p) return;
  if (!hm_sdm_tracks_dirt(p)) {
    printf("  writes back every unit here: nothing to guess\n");
    hm_pager_close(p);
    return;
  }
  uint64_t *a = NULL, *big = NULL;
  CHECK_EQ_INT(hm_pager_map(p, ABYTES, (void **)&a), 0);
  CHECK_EQ_INT(hm_pager_map(p, BBYTES, (void **)&big), 0);
  if (!a || !big) return;
  for (size_t i = 0; i < ABYTES / 8; i++) a[i] = hm_sdm_mix(i);
  CHECK_EQ_INT(push_out(p, big, a, ABYTES), 0);
  uint64_t wp_total = 0, wp_pass[UPDATES];
  for (int k = 0; k < UPDATES; k++) {
    hm_pager_stats_t s0 = hm_sdm_stats(p);
    update(a, ABYTES);
    hm_pager_stats_t s1 = hm_sdm_stats(p);
    wp_pass[k] = s1.wp_faults - s0.wp_faults;
    wp_total += wp_pass[k];
    /* the array was out: each pass read most of it back */
    CHECK(s1.bytes_read - s0.bytes_read >= ABYTES * 3 / 4);
    push_out(p, big, a, ABYTES);
  }
  printf("  update passes, WP faults:");
  for (int k = 0; k < UPDATES; k++) printf(" %llu", (unsigned long long)wp_pass[k]);
  printf(" (%u units)\n", UNITS);
  CHECK(wp_pass[0] >= UNITS / 2); /* written once before: watched */
  /* written twice in a row: guessed for two passes */
  CHECK(wp_pass[1] + wp_pass[2] + wp_pass[4] + wp_pass[5] <= UNITS / 2);
  /* the watched passes (0, 3, 6): one fault per unit is due. Pages a fill
   * installed protected just after the unit's first WP fault took another
   * (49, 47 and 19 for 16 units in a loaded fresh-clone CI run); they are
   * unprotected now (hm__unprotect_late in fault.c), and 16-24 a pass
   * remain under a parallel ctest and a CPU hog. At most two per unit. */
  CHECK(wp_total - wp_pass[1] - wp_pass[2] - wp_pass[4] - wp_pass[5] <= 3 * 2 * UNITS);
  uint64_t written[4];
  for (int k = 0; k < 4; k++) {
    hm_pager_stats_t s0 = hm_sdm_stats(p);
    CHECK_EQ_INT(bad_words(a, ABYTES, 0, UPDATES), 0);
    push_out(p, big, a, ABYTES);
    written[k] = hm_sdm_stats(p).bytes_written - s0.bytes_written;
  }
  printf("  read-only passes: written %llu %llu %llu %llu KiB\n",
         (unsigned long long)written[0] / 1024, (unsigned long long)written[1] / 1024,
         (unsigned long long)written[2] / 1024, (unsigned long long)written[3] / 1024);
  /* two needless write-backs at most, then none */
  CHECK(written[0] + written[1] + written[2] <= 2 * ABYTES);
  CHECK_EQ_INT(written[2] + written[3], 0);
  score_phase(p, big);
  hm_sdm_close_two(p, dir, a, ABYTES, big, BBYTES);
}

int main(void) { return hm_sdm_sync_wp_modes("test_sdm_dirtyguess", one_mode); }
