/* SPDX-License-Identifier: BSD-3-Clause */
/* Random access kernels.
 *   update:   HPCC RandomAccess (GUPS): table of 2^k words, T[i] = i, updates
 *             T[ran & mask] ^= ran along the HPCC LFSR stream (4 x table size
 *             per repetition by default, a fresh stretch of the stream each
 *             repetition). No races: the table is split in one range per
 *             thread and every thread walks the whole stream, applying the
 *             updates that fall in its range (what HPCC's 1% error rule
 *             tolerates is not needed). Checked the HPCC way: the updates are
 *             applied again and the table must be back at T[i] = i.
 *   read4k:   random 4 KiB blocks read and summed (IOPS-like). Words hold their
 *             index, so each block's sum has a closed form; the check walks
 *             the same random choices again without touching the table.
 *   update4k: random 4 KiB blocks, every word += 1; each thread owns a range
 *             of blocks. Checked word by word against the number of times its
 *             block was chosen, recounted from the random stream. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

#define POLY 0x0000000000000007ULL
#define PERIOD 1317624576693539401LL
#define BLOCK_WORDS 512 /* 4 KiB */

/* HPCC's HPCC_starts: the n-th value of the LFSR stream. */
static uint64_t hpcc_starts(int64_t n) {
  uint64_t m2[64], temp, ran;
  int i, j;
  while (n < 0) n += PERIOD;
  while (n > PERIOD) n -= PERIOD;
  if (n == 0) return 0x1;
  temp = 0x1;
  for (i = 0; i < 64; i++) {
    m2[i] = temp;
    temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
    temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
  }
  for (i = 62; i >= 0; i--)
    if ((n >> i) & 1) break;
  ran = 0x2;
  while (i > 0) {
    temp = 0;
    for (j = 0; j < 64; j++)
      if ((ran >> j) & 1) temp ^= m2[j];
    ran = temp;
    i -= 1;
    if ((n >> i) & 1) ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
  }
  return ran;
}

/* One stretch of the stream, applied by every thread to its own range. */
static void gups_pass(uint64_t *table, uint64_t mask, uint64_t first, uint64_t count) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    uint64_t size = mask + 1;
    uint64_t lo = size * (uint64_t)t / (uint64_t)T, hi = size * (uint64_t)(t + 1) / (uint64_t)T;
    uint64_t ran = hpcc_starts((int64_t)first);
    for (uint64_t k = 0; k < count; k++) {
      ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
      uint64_t idx = ran & mask;
      if (idx >= lo && idx < hi) table[idx] ^= ran;
    }
  }
}

/* k-th random block of thread t in repetition rep, within [lo, hi). */
static inline uint64_t pick(int rep, int t, uint64_t k, uint64_t lo, uint64_t hi) {
  uint64_t h = hmk_mix(((uint64_t)rep << 48) ^ ((uint64_t)t << 40) ^ k ^ 0x67757073ULL);
  return lo + h % (hi - lo);
}

static inline uint64_t block_sum(uint64_t b) {
  /* sum of words 512b .. 512b+511 holding their own index */
  return (uint64_t)BLOCK_WORDS * BLOCK_WORDS * b + (uint64_t)BLOCK_WORDS * (BLOCK_WORDS - 1) / 2;
}

static uint64_t read_pass(const uint64_t *table, uint64_t nblk, uint64_t per_thread, int rep, uint64_t *sums) {
  uint64_t all = 0;
#pragma omp parallel reduction(+ : all)
  {
    int t = omp_get_thread_num();
    uint64_t s = 0;
    for (uint64_t k = 0; k < per_thread; k++) {
      const uint64_t *blk = table + pick(rep, t, k, 0, nblk) * BLOCK_WORDS;
      for (int w = 0; w < BLOCK_WORDS; w++) s += blk[w];
    }
    sums[t] = s;
    all += s;
  }
  return all;
}

static void update4k_pass(uint64_t *table, uint64_t nblk, uint64_t per_thread, int rep) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    uint64_t lo = nblk * (uint64_t)t / (uint64_t)T, hi = nblk * (uint64_t)(t + 1) / (uint64_t)T;
    for (uint64_t k = 0; k < per_thread; k++) {
      uint64_t *blk = table + pick(rep, t, k, lo, hi) * BLOCK_WORDS;
      for (int w = 0; w < BLOCK_WORDS; w++) blk[w] += 1;
    }
  }
}

/* Best (shortest) repetition time. */
static double best_time(const hmk_result_t *r) {
  double best = r->times[0];
  for (int i = 1; i < r->n; i++) best = r->times[i] < best ? r->times[i] : best;
  return best;
}

/* HPCC GUPS: fill, time the passes, apply them again and check T[i] = i. */
static void run_update(hmk_args_t *a, hmk_result_t *r, uint64_t updates) {
  uint64_t size = 1;
  while (size * 2 <= a->bytes / 8) size *= 2;
  uint64_t mask = size - 1;
  if (!updates) updates = 4 * size;
  double t0 = hmk_now();
  uint64_t *table = hmk_alloc(size * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
  for (uint64_t i = 0; i < size; i++) table[i] = i;
  r->init_s = hmk_now() - t0;
  for (int rep = 0; hmk_more(a, r); rep++) {
    double s = hmk_now();
    gups_pass(table, mask, (uint64_t)rep * updates, updates);
    r->times[r->n++] = hmk_now() - s;
  }
  if (a->inject_error) table[size / 2] ^= 1;
  double v0 = hmk_now();
  for (int rep = 0; rep < a->reps; rep++) gups_pass(table, mask, (uint64_t)rep * updates, updates);
  uint64_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
  for (uint64_t i = 0; i < size; i++) wrong += table[i] != i;
  r->verify_s = hmk_now() - v0;
  if (wrong)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: %llu of %llu table words wrong after re-applying the updates",
             (unsigned long long)wrong, (unsigned long long)size);
  r->bytes_moved = 16.0 * (double)updates; /* read and write one word */
  hmk_extra_u64(r, "table_words", size);
  hmk_extra_u64(r, "updates", updates);
  hmk_extra_num(r, "gups", (double)updates / best_time(r) / 1e9);
  hmk_emit(a, r);
  free(table);
}

/* read4k's check: every repetition's per-thread sums against their closed
 * form, walking the same random choices without touching the table. */
static void verify_reads(const uint64_t *sums, int reps, int T, uint64_t per_thread, uint64_t nblk) {
  for (int rep = 0; rep < reps; rep++) {
    for (int t = 0; t < T; t++) {
      uint64_t expect = 0;
      for (uint64_t k = 0; k < per_thread; k++) expect += block_sum(pick(rep, t, k, 0, nblk));
      uint64_t got = sums[(size_t)rep * (size_t)T + (size_t)t];
      if (got != expect)
        hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetition %d thread %d read sum %llu, expected %llu", rep, t,
                 (unsigned long long)got, (unsigned long long)expect);
    }
  }
}

/* update4k's check: each word against its index plus the times its block
 * was chosen, recounted from the random stream. */
static void verify_updates(const uint64_t *table, int reps, int T, uint64_t per_thread, uint64_t nblk) {
  uint64_t nw = nblk * BLOCK_WORDS;
  uint32_t *cnt = hmk_alloc(sizeof(uint32_t) * nblk);
  memset(cnt, 0, sizeof(uint32_t) * nblk);
  for (int rep = 0; rep < reps; rep++)
    for (int t = 0; t < T; t++) {
      uint64_t lo = nblk * (uint64_t)t / (uint64_t)T, hi = nblk * (uint64_t)(t + 1) / (uint64_t)T;
      for (uint64_t k = 0; k < per_thread; k++) cnt[pick(rep, t, k, lo, hi)]++;
    }
  uint64_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
  for (uint64_t i = 0; i < nw; i++) wrong += table[i] != i + cnt[i / BLOCK_WORDS];
  free(cnt);
  if (wrong)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: %llu words wrong after the block updates", (unsigned long long)wrong);
}

/* The timed 4 KiB passes; read4k's sums kept per repetition and thread
 * (grown when --min-time runs past --reps). Returns the sums. */
static uint64_t *block_passes(hmk_args_t *a, hmk_result_t *r, uint64_t *table, uint64_t nblk, uint64_t per_thread,
                              int rd) {
  int T = a->threads;
  size_t sums_reps = (size_t)a->reps;
  uint64_t *sums = hmk_alloc(sizeof(uint64_t) * (size_t)T * sums_reps);
  for (int rep = 0; hmk_more(a, r); rep++) {
    if ((size_t)rep >= sums_reps) {
      sums_reps *= 2;
      sums = realloc(sums, sizeof(uint64_t) * (size_t)T * sums_reps);
      if (!sums) hmk_fail(HMK_EXIT_RESOURCE, "out of memory");
    }
    if (rd && a->inject_error && rep == a->reps - 1) table[pick(rep, 0, 0, 0, nblk) * BLOCK_WORDS] += 1;
    double s = hmk_now();
    if (rd)
      read_pass(table, nblk, per_thread, rep, sums + (size_t)rep * (size_t)T);
    else
      update4k_pass(table, nblk, per_thread, rep);
    r->times[r->n++] = hmk_now() - s;
  }
  return sums;
}

/* read4k and update4k: random 4 KiB blocks, one access per block by default. */
static void run_blocks(hmk_args_t *a, hmk_result_t *r, uint64_t updates) {
  int T = a->threads, rd = strcmp(a->variant, "read4k") == 0;
  uint64_t nblk = a->bytes / (BLOCK_WORDS * 8);
  if (nblk < (uint64_t)T)
    hmk_fail(HMK_EXIT_USAGE, "--bytes too small: %s needs at least one 4 KiB block per thread", a->variant);
  if (!updates) updates = nblk;
  uint64_t per_thread = (updates + (uint64_t)T - 1) / (uint64_t)T;
  updates = per_thread * (uint64_t)T;
  uint64_t nw = nblk * BLOCK_WORDS;
  double t0 = hmk_now();
  uint64_t *table = hmk_alloc(nw * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
  for (uint64_t i = 0; i < nw; i++) table[i] = i;
  r->init_s = hmk_now() - t0;
  uint64_t *sums = block_passes(a, r, table, nblk, per_thread, rd);
  if (!rd && a->inject_error) table[nw / 2] += 1;
  double v0 = hmk_now();
  if (rd)
    verify_reads(sums, a->reps, T, per_thread, nblk);
  else
    verify_updates(table, a->reps, T, per_thread, nblk);
  r->verify_s = hmk_now() - v0;
  r->bytes_moved = (rd ? 4096.0 : 8192.0) * (double)updates;
  hmk_extra_u64(r, "blocks", nblk);
  hmk_extra_u64(r, "block_bytes", BLOCK_WORDS * 8);
  hmk_extra_u64(r, "accesses", updates);
  hmk_extra_num(r, "iops", (double)updates / best_time(r));
  hmk_emit(a, r);
  free(sums);
  free(table);
}

int main(int argc, char **argv) {
  uint64_t updates = 0;
  hmk_args_t a = {.kernel = "gups",
                  .summary = "Random access: HPCC GUPS 8-byte xor updates, or random 4 KiB block reads/updates.",
                  .variants = "update|read4k|update4k",
                  .variant = "update",
                  .bytes = 64ull << 20,
                  .min_bytes = 64 * 1024,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--updates", HMK_OPT_COUNT, &updates, NULL, 1, UINT64_MAX,
       "updates (or 4 KiB accesses) per repetition, all threads together "
       "(default: 4 x table words for update, one per block for the 4 KiB variants)"},
  };
  hmk_parse(&a, argc, argv, opts, 1);
  hmk_result_t r;
  hmk_result_init(&r, &a);
  if (strcmp(a.variant, "update") == 0)
    run_update(&a, &r, updates);
  else
    run_blocks(&a, &r, updates);
  return 0;
}
