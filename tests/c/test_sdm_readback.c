/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's `read_back` statistics: the block lengths it read back most,
 * summed over the regions of each length, live and unmapped. First the
 * table alone (space-saving: a length of many small blocks keeps its entry
 * among lengths that each read more once), then a pager that reads one
 * live region back in several sweeps and a dozen others once each. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sdm/pager_int.h"
#include "sdm_testutil.h"
#include "testhelper.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static void table_alone(void) {
  _hm_sdm_rsize_t t[4];
  memset(t, 0, sizeof t);
  /* four lengths fill it; a fifth that read more than the least takes
   * the least's entry and inherits its bytes as `over` */
  for (uint64_t k = 1; k <= 4; k++) _hm_sdm_rsize_add(t, 4, k * MiB, 1, 10 * k * MiB);
  _hm_sdm_rsize_add(t, 4, 64 * KiB, 1, 1 * MiB);
  int at = -1;
  for (int i = 0; i < 4; i++)
    if (t[i].len == 64 * KiB) at = i;
  CHECK(at >= 0);
  if (at < 0) return;
  CHECK_EQ_INT(t[at].over, 10 * MiB);
  CHECK_EQ_INT(t[at].bytes - t[at].over, 1 * MiB);
  /* the same length again adds to its entry: 30 more blocks of it */
  for (int n = 0; n < 30; n++) _hm_sdm_rsize_add(t, 4, 64 * KiB, 1, 1 * MiB);
  CHECK_EQ_INT(t[at].blocks, 31);
  CHECK_EQ_INT(t[at].bytes - t[at].over, 31 * MiB);
  /* nothing read adds nothing */
  _hm_sdm_rsize_add(t, 4, 5 * MiB, 1, 0);
  for (int i = 0; i < 4; i++) CHECK(t[i].len != 5 * MiB);
}

/* Writes every page of [a, a + len). */
static void fill(char *a, size_t len, char v) {
  for (size_t i = 0; i < len; i += 4096) a[i] = v;
}

/* Sums a byte of every page of [a, a + len). */
static uint64_t sum(const char *a, size_t len) {
  uint64_t s = 0;
  for (size_t i = 0; i < len; i += 4096) s += (unsigned char)a[i];
  return s;
}

static void pager_figures(hm_ctx_t *ctx, const char *dir) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 2 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = 64 * KiB;
  hm_pager_t *p = hm_sdm_open(ctx, &cfg);
  CHECK(p != NULL);
  if (!p) return;
  /* Regions twice the budget: whatever the policy keeps, half of each is
   * written back before its end is written and read back after. */
  size_t big = 6 * MiB, small = 4 * MiB;
  char *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, big, (void **)&a), 0);
  if (!a) {
    hm_pager_close(p);
    return;
  }
  fill(a, big, 1);
  uint64_t bad = 0;
  for (int n = 0; n < 4; n++) bad += sum(a, big) != big / 4096;
  /* 12 regions of another length, each written, read back, unmapped */
  for (int n = 0; n < 12; n++) {
    char *b = NULL;
    CHECK_EQ_INT(hm_pager_map(p, small, (void **)&b), 0);
    if (!b) break;
    fill(b, small, 3);
    bad += sum(b, small) != 3 * (small / 4096);
    CHECK_EQ_INT(hm_pager_unmap(p, b, small), 0);
  }
  CHECK_EQ_INT(bad, 0);
  char *json = NULL;
  CHECK_EQ_INT(hm_pager_stats_json(p, &json), 0);
  if (!json) {
    hm_pager_close(p);
    return;
  }
  printf("%s\n", strstr(json, "\"read_back\"") ? strstr(json, "\"read_back\"") : json);
  uint64_t nb = 0, rb = 0, ns = 0, rs = 0;
  /* the big region, live: 4 sweeps read back at least 2/3 of it each */
  CHECK(hm_sdm_read_back(json, big, &nb, &rb));
  CHECK_EQ_INT(nb, 1);
  CHECK(rb >= 4 * (big - cfg.dram_budget));
  /* the others, unmapped: every one counted, each read back half at least */
  CHECK(hm_sdm_read_back(json, small, &ns, &rs));
  CHECK_EQ_INT(ns, 12);
  CHECK(rs >= 12 * (small - cfg.dram_budget));
  /* most read first: the dozen read at least 24 MiB, the big one at most
   * its 4 sweeps' 24 MiB less what the last write left resident */
  CHECK(strstr(json, "\"read_back\": [{\"block_bytes\": 4194304,") != NULL);
  /* and nothing else: the pager read no other region */
  hm_pager_stats_t st = {.size = sizeof st};
  CHECK_EQ_INT(hm_pager_stats(p, &st), 0);
  CHECK_EQ_INT(st.bytes_read, rb + rs);
  hm_free(json);
  CHECK_EQ_INT(hm_pager_unmap(p, a, big), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);
}

int main(void) {
  table_alone();
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  pager_figures(ctx, dir);
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_readback");
}
