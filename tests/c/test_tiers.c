/* SPDX-License-Identifier: BSD-3-Clause */
/* Tier discovery on the recorded/constructed sysfs trees in tests/golden. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hetmem.h"
#include "testhelper.h"
#include "tiers.h"

static const char *const NO_STORAGE[1] = {NULL};

static hm_ctx_t *open_golden(const char *machine) {
  char root[4096];
  snprintf(root, sizeof root, "%s/tests/golden/%s", HM_SOURCE_DIR, machine);
  hm_ctx_t *ctx = NULL;
  int rc = hm_ctx_new(&ctx, root);
  CHECK_EQ_INT(rc, 0);
  rc = hm_tiers_discover(ctx, NO_STORAGE, 0);
  if (rc) fprintf(stderr, "%s: %s\n", machine, hm_ctx_last_error(ctx));
  CHECK_EQ_INT(rc, 0);
  return ctx;
}

static hm_tier_t tier(const hm_ctx_t *ctx, size_t i) {
  hm_tier_t t;
  memset(&t, 0, sizeof t);
  t.size = sizeof t;
  CHECK_EQ_INT(hm_tier_get(ctx, i, &t), 0);
  return t;
}

static void test_parse_cpulist(void) {
  int *v;
  size_t n;
  CHECK_EQ_INT(_hm_parse_cpulist("0-2,5,7-8", &v, &n), 0);
  CHECK_EQ_INT(n, 6);
  CHECK(v && v[0] == 0 && v[2] == 2 && v[3] == 5 && v[5] == 8);
  free(v);
  CHECK_EQ_INT(_hm_parse_cpulist("", &v, &n), 0);
  CHECK_EQ_INT(n, 0);
  free(v);
  const char *bad[] = {"4-x", "3-1", "1,", "a", "-1", "0-99999999", "1 2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_EQ_INT(_hm_parse_cpulist(bad[i], &v, &n), -EINVAL);
    CHECK(v == NULL);
  }
}

static void test_xeon_max(void) {
  hm_ctx_t *ctx = open_golden("xeon-max-flat-snc4");
  CHECK_EQ_INT(hm_tier_count(ctx), 16);
  /* HBM quadrants first although their SLIT distance (13) exceeds DDR's. */
  for (size_t i = 0; i < 16; i++) {
    hm_tier_t t = tier(ctx, i);
    CHECK_EQ_INT(t.rank, i);
    if (i < 8) {
      CHECK_EQ_INT(t.kind, HM_TIER_HBM);
      CHECK_EQ_INT(t.numa_node, 8 + (int)i);
      CHECK_EQ_INT(t.ncpus, 0);
      CHECK_EQ_INT(t.read_bandwidth_mibs, 204800);
    } else {
      CHECK_EQ_INT(t.kind, HM_TIER_DRAM);
      CHECK_EQ_INT(t.numa_node, (int)i - 8);
      CHECK_EQ_INT(t.ncpus, 28);
    }
    CHECK(t.sources & HM_TIER_SRC_HMAT);
    CHECK_EQ_INT(t.memory_tier, 4);
  }
  int cpus[64];
  CHECK_EQ_INT(hm_tier_cpus(ctx, 8, cpus, 64), 28); /* node0 */
  CHECK_EQ_INT(cpus[0], 0);
  CHECK_EQ_INT(cpus[14], 112);
  CHECK_EQ_INT(hm_tier_cpus(ctx, 99, cpus, 64), -ERANGE);
  hm_ctx_free(ctx);
}

static void test_optane(void) {
  hm_ctx_t *ctx = open_golden("optane-kmem");
  CHECK_EQ_INT(hm_tier_count(ctx), 4);
  hm_tier_kind_t want[] = {HM_TIER_DRAM, HM_TIER_DRAM, HM_TIER_PMEM, HM_TIER_PMEM};
  for (size_t i = 0; i < 4; i++) {
    hm_tier_t t = tier(ctx, i);
    CHECK_EQ_INT(t.kind, want[i]);
    CHECK_EQ_INT(t.numa_node, (int)i);
    CHECK_EQ_INT(t.memory_tier, i < 2 ? 4 : 22);
    CHECK(!(t.sources & HM_TIER_SRC_HMAT));
    if (i >= 2) CHECK(t.sources & HM_TIER_SRC_DAX);
  }
  CHECK_EQ_INT(tier(ctx, 2).capacity_bytes, 759169024ull * 1024);
  hm_ctx_free(ctx);
}

static void test_cxl_and_gpu(void) {
  hm_ctx_t *ctx = open_golden("cxl-expander");
  CHECK_EQ_INT(hm_tier_count(ctx), 3);
  hm_tier_t t = tier(ctx, 2);
  CHECK_EQ_INT(t.kind, HM_TIER_CXL);
  CHECK_EQ_INT(t.numa_node, 2);
  CHECK_EQ_INT(t.memory_tier, 22);
  CHECK_EQ_INT(t.read_bandwidth_mibs, 0);
  hm_ctx_free(ctx);

  ctx = open_golden("grace-hopper");
  CHECK_EQ_INT(hm_tier_count(ctx), 2); /* nodes 2-8 are possible, not online */
  CHECK_EQ_INT(tier(ctx, 0).kind, HM_TIER_DRAM);
  CHECK_EQ_INT(tier(ctx, 0).ncpus, 72);
  t = tier(ctx, 1);
  CHECK_EQ_INT(t.kind, HM_TIER_GPU);
  CHECK_EQ_INT(t.numa_node, 1);
  CHECK(t.sources & HM_TIER_SRC_NVIDIA);
  hm_ctx_free(ctx);
}

static void test_malformed(void) {
  hm_ctx_t *ctx = open_golden("malformed");
  CHECK_EQ_INT(hm_tier_count(ctx), 3);
  hm_tier_t t = tier(ctx, 0);
  CHECK_EQ_INT(t.numa_node, 0);
  CHECK_EQ_INT(t.kind, HM_TIER_DRAM); /* its cpulist is fine */
  CHECK_EQ_INT(t.capacity_bytes, 0);  /* meminfo is garbage */
  t = tier(ctx, 1);
  CHECK_EQ_INT(t.kind, HM_TIER_UNKNOWN);
  CHECK_EQ_INT(t.read_bandwidth_mibs, 0);
  CHECK_EQ_INT(t.memory_tier, -1); /* "1-" is no nodelist */
  CHECK(!(t.sources & HM_TIER_SRC_DAX)); /* dangling dax link */
  t = tier(ctx, 2);
  CHECK_EQ_INT(t.kind, HM_TIER_UNKNOWN);
  CHECK_EQ_INT(t.ncpus, 0);
  char *json = NULL;
  CHECK_EQ_INT(hm_tiers_json(ctx, (const char **)NO_STORAGE, 0, &json), 0);
  CHECK(json && strstr(json, "\"capacity_bytes\": null"));
  CHECK(json && strstr(json, "node2/cpulist: unreadable or malformed"));
  hm_free(json);
  hm_ctx_free(ctx);
}

static void test_errors_and_storage(void) {
  char dir[] = "/tmp/hm-tiers-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, dir), 0);
  /* An empty root is no sysfs tree: a clear error, not an empty list. */
  CHECK_EQ_INT(hm_tiers_discover(ctx, NO_STORAGE, 0), -ENOENT);
  CHECK(strstr(hm_ctx_last_error(ctx), "/sys/devices/system/node") != NULL);
  CHECK_EQ_INT(hm_tier_count(ctx), 0);
  hm_ctx_free(ctx);

  /* A kernel without CONFIG_NUMA: one node from /proc/meminfo. */
  char path[256];
  snprintf(path, sizeof path, "%s/proc", dir);
  CHECK_EQ_INT(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/proc/meminfo", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("MemTotal:        1024 kB\nMemFree:          512 kB\n", f);
    fclose(f);
  }
  CHECK_EQ_INT(hm_ctx_new(&ctx, dir), 0);
  CHECK_EQ_INT(hm_tiers_discover(ctx, NO_STORAGE, 0), 0);
  CHECK_EQ_INT(hm_tier_count(ctx), 1);
  CHECK_EQ_INT(tier(ctx, 0).capacity_bytes, 1024 * 1024);

  /* Storage: the temp dir itself works and leaves nothing behind; a file
   * or a missing path is refused with a message naming it. */
  const char *ok[] = {dir};
  CHECK_EQ_INT(hm_tiers_discover(ctx, ok, 1), 0);
  CHECK_EQ_INT(hm_tier_count(ctx), 2);
  hm_tier_t s = tier(ctx, 1);
  CHECK_EQ_INT(s.kind, HM_TIER_STORAGE);
  CHECK_EQ_INT(s.numa_node, -1);
  CHECK(s.o_direct == 0 || s.o_direct == 1);
  CHECK(s.path && strcmp(s.path, dir) == 0);
  CHECK(s.fs_type && *s.fs_type);
  CHECK(s.capacity_bytes > 0);
  const char *missing[] = {"/nonexistent/hetmem-dir"};
  CHECK_EQ_INT(hm_tiers_discover(ctx, missing, 1), -ENOENT);
  CHECK(strstr(hm_ctx_last_error(ctx), "/nonexistent/hetmem-dir") != NULL);
  CHECK_EQ_INT(hm_tier_count(ctx), 2); /* the earlier result stays */
  const char *notdir[] = {path};
  CHECK_EQ_INT(hm_tiers_discover(ctx, notdir, 1), -ENOTDIR);
  hm_tier_t small;
  small.size = 4;
  CHECK_EQ_INT(hm_tier_get(ctx, 0, &small), -EINVAL);
  hm_tier_t t;
  t.size = sizeof t;
  CHECK_EQ_INT(hm_tier_get(ctx, 5, &t), -ERANGE);
  hm_ctx_free(ctx);

  unlink(path);
  snprintf(path, sizeof path, "%s/proc", dir);
  rmdir(path);
  CHECK_EQ_INT(rmdir(dir), 0); /* empty: the O_DIRECT check left no file */
}

/* The live machine, with hwloc's cross-check and the default storage dir. */
static void test_live(void) {
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, "/"), 0);
  int rc = hm_tiers_discover(ctx, NULL, 0);
  if (rc) fprintf(stderr, "live: %s\n", hm_ctx_last_error(ctx));
  CHECK_EQ_INT(rc, 0);
  size_t n = hm_tier_count(ctx);
  CHECK(n >= 2);
  hm_tier_t t = tier(ctx, 0);
  CHECK(t.kind == HM_TIER_DRAM || t.kind == HM_TIER_HBM);
  CHECK(t.capacity_bytes > 0);
  CHECK(t.sources & HM_TIER_SRC_HWLOC);
  CHECK_EQ_INT(tier(ctx, n - 1).kind, HM_TIER_STORAGE);
  char *json = NULL;
  CHECK_EQ_INT(hm_tiers_json(ctx, NULL, 0, &json), 0);
  CHECK(json && strstr(json, "\"hwloc\": {"));
  hm_free(json);
  hm_ctx_free(ctx);
}

int main(void) {
  test_parse_cpulist();
  test_xeon_max();
  test_optane();
  test_cxl_and_gpu();
  test_malformed();
  test_errors_and_storage();
  test_live();
  return hm_test_done("test_tiers");
}
