/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager copes with transparent huge pages on its regions: a program
 * that madvises MADV_HUGEPAGE on a pager region (numpy does so on every
 * large array) and touches more than the budget gets its data back, in
 * every fill and dirty-tracking mode, and the budget still holds. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_sdm_thp: timed out (the pager livelocked on huge pages)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(3);
}

static void run_mode(hm_ctx_t *ctx, const char *dir, uint32_t flags, size_t unit, int part) {
  printf("mode flags=%u unit=%zu part=%d\n", flags, unit, part);
  fflush(stdout);
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = unit > MiB ? 16 * MiB : 8 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = unit;
  cfg.flags = flags;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  size_t len = 5 * cfg.dram_budget; /* 5x the budget */
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, len, (void **)&a), 0);
  if (!a) {
    hm_pager_close(p);
    return;
  }
  /* The application's hint, straight to the kernel (no interposer): on
   * the whole region, or (as numpy does for an array that starts after a
   * header) on part of it, which splits the kernel's mapping. */
  if (part) CHECK_EQ_INT(madvise((char *)a + 4096, len - 3 * 4096, MADV_HUGEPAGE), 0);
  else CHECK_EQ_INT(madvise(a, len, MADV_HUGEPAGE), 0);
  size_t n = len / 8;
  uint64_t nz = 0;
  for (size_t i = 0; i < n; i += 61) nz += a[i] != 0;
  CHECK_EQ_INT(nz, 0);
  for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i) ^ flags;
  /* Again after the writes (a hint may come at any time). */
  CHECK_EQ_INT(madvise(a, len, MADV_HUGEPAGE), 0);
  uint64_t bad = 0;
  for (int pass = 0; pass < 2; pass++) {
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += a[i] != (hm_sdm_mix(i) ^ flags);
    CHECK_EQ_INT(bad, 0);
  }
  /* Scattered single words (fills of single pages), then a forced
   * collapse into huge pages where the kernel has MADV_COLLAPSE (refused on
   * pager regions or not: the data must survive either way). */
  uint64_t x = 12345;
  for (int k = 0; k < (unit > MiB ? 1000 : 5000); k++) {
    x = hm_sdm_mix(x + (uint64_t)k);
    size_t i = (size_t)(x % n);
    bad += a[i] != (hm_sdm_mix(i) ^ flags);
  }
  CHECK_EQ_INT(bad, 0);
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
  int crc = madvise(a, len, MADV_COLLAPSE);
  printf("MADV_COLLAPSE: %d (errno %d)\n", crc, crc ? errno : 0);
  /* Backwards too, and writes in a second round. */
  for (size_t i = n; i-- > 0;) a[i] += 1;
  bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != (hm_sdm_mix(i) ^ flags) + 1;
  CHECK_EQ_INT(bad, 0);
  hm_pager_stats_t s = {.size = sizeof s};
  CHECK_EQ_INT(hm_pager_stats(p, &s), 0);
  CHECK(s.evictions > 0);
  CHECK(s.peak_resident_bytes + s.own_bytes <= cfg.dram_budget);
  CHECK_EQ_INT(hm_pager_unmap(p, a, len), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(120);
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  if (hm_ctx_new(&ctx, NULL)) return 2;
  uint32_t modes[] = {0, HM_PAGER_MEMFD, HM_PAGER_MEMFD | HM_PAGER_NO_WP_ASYNC,
                      HM_PAGER_MEMFD | HM_PAGER_NO_WP, HM_PAGER_NO_MINOR};
  for (unsigned m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    run_mode(ctx, dir, modes[m], 256 * 1024, 1);
    run_mode(ctx, dir, modes[m], 256 * 1024, 0);
    run_mode(ctx, dir, modes[m], 2 * MiB, 1);
  }
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_thp");
}
