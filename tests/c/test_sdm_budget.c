/* SPDX-License-Identifier: BSD-3-Clause */
/* A budget typo must not take the node down (issue 19, finding 5).
 *
 * The slot table is sized for the budget (about 108 bytes per 8 KiB of it):
 * 1 TiB used to mean 13.6 GB initialised before the program ran. Now
 *  - a budget above the machine's memory is refused with a message that
 *    names the override (HETMEM_BUDGET_OVER_RAM), and
 *  - with the override, opening the pager touches none of the table: the
 *    process's resident memory grows by a few MiB at most (asserted on RSS,
 *    never on time), and a region mapped and written afterwards works. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)
#define TiB (1024ull * 1024ull * MiB)

static uint64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
  fclose(f);
  return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int open_budget(hm_ctx_t *ctx, const char *dir, uint64_t budget, hm_pager_t **out) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = budget;
  cfg.backing_dir = dir;
  cfg.fetch_unit = 256 * 1024;
  *out = NULL;
  int rc = hm_pager_open(ctx, &cfg, out);
  printf("open(budget=%llu) = %d: %s\n", (unsigned long long)budget, rc,
         rc ? hm_ctx_last_error(ctx) : "ok");
  return rc;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  /* 1 TiB, or twice the memory of a machine that has more */
  uint64_t big = ram >= TiB / 2 ? (ram * 2 + TiB - 1) / TiB * TiB : TiB;
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  CHECK_EQ_INT(hm_option_set(ctx, "budget_over_ram", "1"), 0);
  hm_pager_t *p = NULL;

  /* With the override: nothing of the table is touched at open. */
  uint64_t before = rss_bytes();
  CHECK_EQ_INT(open_budget(ctx, dir, big, &p), 0);
  uint64_t grew = rss_bytes() - before;
  printf("RSS grew by %llu KiB opening a pager with a %llu GiB budget\n",
         (unsigned long long)(grew >> 10), (unsigned long long)(big >> 30));
  CHECK(before > 0);
  CHECK(grew < 8 * MiB);
  if (p) {
    /* It works: 64 MiB written and read back, and RSS follows use (the
     * region's pages plus a slot per unit), not the budget: an eagerly
     * initialised table would be 13.6 GB here. The bound leaves room for
     * a sanitizer's shadow memory (TSan doubles the 64 MiB). */
    void *a = NULL;
    CHECK_EQ_INT(hm_pager_map(p, 64 * MiB, &a), 0);
    if (a) {
      unsigned char *b = a;
      for (uint64_t i = 0; i < 64 * MiB; i += 4096) b[i] = (unsigned char)(i >> 12);
      int bad = 0;
      for (uint64_t i = 0; i < 64 * MiB; i += 4096) bad += b[i] != (unsigned char)(i >> 12);
      CHECK_EQ_INT(bad, 0);
      uint64_t used = rss_bytes() - before;
      printf("RSS after writing 64 MiB: +%llu MiB\n", (unsigned long long)(used >> 20));
      CHECK(used < 512 * MiB);
      CHECK_EQ_INT(hm_pager_unmap(p, a, 64 * MiB), 0);
    }
    CHECK_EQ_INT(hm_pager_close(p), 0);
    p = NULL;
  }

  /* Without it: refused, in one line that names the override. */
  CHECK_EQ_INT(hm_option_set(ctx, "budget_over_ram", "0"), 0);
  before = rss_bytes();
  CHECK_EQ_INT(open_budget(ctx, dir, big, &p), -EINVAL);
  CHECK(p == NULL);
  const char *msg = hm_ctx_last_error(ctx);
  CHECK(strstr(msg, "HETMEM_BUDGET_OVER_RAM=1") != NULL);
  CHECK(strstr(msg, "memory") != NULL);
  CHECK(strchr(msg, '\n') == NULL);
  CHECK(rss_bytes() - before < 8 * MiB);
  if (p) hm_pager_close(p);
  /* A budget the machine has is not refused. */
  CHECK_EQ_INT(open_budget(ctx, dir, 64 * MiB, &p), 0);
  if (p) CHECK_EQ_INT(hm_pager_close(p), 0);

  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_budget");
}
