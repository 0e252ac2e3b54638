/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of the pager tests: a scratch backing directory on a real
 * disk (O_DIRECT), removed at exit even when checks fail. */
#ifndef HM_SDM_TESTUTIL_H
#define HM_SDM_TESTUTIL_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hetmem.h"
#include "testhelper.h"

static char hm_sdm_dir[256];

/* Opens a pager with cfg; NULL (and the context's message on stderr) when
 * that fails, which the caller counts as a failed check. */
static inline void hm_sdm_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline hm_pager_t *hm_sdm_open(hm_ctx_t *ctx, const hm_pager_config_t *cfg) {
  hm_pager_t *p = NULL;
  if (hm_pager_open(ctx, cfg, &p) != 0) {
    fprintf(stderr, "open: %s\n", hm_ctx_last_error(ctx));
    return NULL;
  }
  return p;
}

/* Waits until the pager's I/O counters stop moving (no read or write-back
 * in 3 polls 20 ms apart, at most 5 s): a measurement window that starts
 * after it does not count reads an earlier phase left in flight. The
 * caller touches nothing meanwhile, so only I/O already issued moves. */
static inline void hm_sdm_settle(hm_pager_t *p) {
  uint64_t last_r = UINT64_MAX, last_w = UINT64_MAX;
  for (int quiet = 0, polls = 0; quiet < 3 && polls < 250; polls++) {
    hm_pager_stats_t s = {.size = sizeof s};
    if (hm_pager_stats(p, &s) != 0) return;
    quiet = (s.bytes_read == last_r && s.bytes_written == last_w) ? quiet + 1 : 0;
    last_r = s.bytes_read;
    last_w = s.bytes_written;
    hm_sdm_sleep_ms(20);
  }
}

/* Whether the pager tracks dirty pages (wp_async or wp_sync), as its
 * stats say: "all" writes back every evicted unit (asked for with
 * HM_PAGER_NO_WP, or memfd mode on a kernel without WP_ASYNC). */
static inline int hm_sdm_tracks_dirt(hm_pager_t *p) {
  char *json = NULL;
  if (hm_pager_stats_json(p, &json) != 0 || !json) return 0;
  int all = strstr(json, "\"dirty_tracking\": \"all\"") != NULL;
  hm_free(json);
  return !all;
}

/* An anonymous-fill pager (the default mode) of budget bytes over dir,
 * fetch unit as given (0: the default); NULL as hm_sdm_open. */
static inline hm_pager_config_t hm_sdm_config(hm_ctx_t *ctx, const char *dir, uint64_t budget,
                                              uint64_t unit, uint32_t flags) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = budget;
  cfg.backing_dir = dir;
  if (unit) cfg.fetch_unit = unit;
  cfg.flags = flags;
  return cfg;
}

static inline hm_pager_t *hm_sdm_open_flags(hm_ctx_t *ctx, const char *dir, uint64_t budget,
                                            uint64_t unit, uint32_t flags) {
  hm_pager_config_t cfg = hm_sdm_config(ctx, dir, budget, unit, flags);
  return hm_sdm_open(ctx, &cfg);
}

static inline hm_pager_t *hm_sdm_open_anon(hm_ctx_t *ctx, const char *dir, uint64_t budget,
                                           uint64_t unit) {
  return hm_sdm_open_flags(ctx, dir, budget, unit, 0);
}

static inline void hm_sdm_rmdir(void) {
  if (!hm_sdm_dir[0]) return;
  DIR *d = opendir(hm_sdm_dir);
  if (d) {
    struct dirent *e;
    char path[600];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", hm_sdm_dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(hm_sdm_dir);
  hm_sdm_dir[0] = 0;
}

/* Creates the scratch directory under $HETMEM_TEST_STORAGE or /var/tmp,
 * removed at exit. A test that asks for another one (a second pager
 * configuration) gets the previous one removed first: only one name is
 * kept, and a second run of a test left its first directory behind. */
static inline const char *hm_sdm_scratch(void) {
  static int registered;
  hm_sdm_rmdir();
  const char *base = getenv("HETMEM_TEST_STORAGE");
  if (!base || !*base) base = "/var/tmp";
  snprintf(hm_sdm_dir, sizeof hm_sdm_dir, "%s/hetmem-sdm-test-XXXXXX", base);
  if (!mkdtemp(hm_sdm_dir)) {
    perror("mkdtemp");
    exit(2);
  }
  if (!registered++) atexit(hm_sdm_rmdir);
  return hm_sdm_dir;
}

/* Number of entries in a directory (other than . and ..). */
static inline int hm_sdm_count_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static inline uint64_t hm_sdm_env_u64(const char *name, uint64_t def) {
  const char *s = getenv(name);
  return s && *s ? strtoull(s, NULL, 0) : def;
}

static inline uint64_t hm_sdm_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* Word i of an array filled with a salt: hm_sdm_mix(i * 3 + salt). */
static inline void hm_sdm_fill_salted(uint64_t *a, size_t n, uint64_t salt) {
  for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i * 3 + salt);
}

/* How many words of a differ from hm_sdm_fill_salted's. */
static inline uint64_t hm_sdm_check_salted(const uint64_t *a, size_t n, uint64_t salt) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += a[i] != hm_sdm_mix(i * 3 + salt);
  return bad;
}
/* A worker of the shared-words stress tests: nt threads own interleaved
 * words of a (word i belongs to thread i % nt), so they share every page
 * and unit while the expected value of each word stays defined: writes go
 * to a and the shadow copy, reads are checked against it. */
typedef struct hm_sdm_worker_s {
  uint64_t *a, *shadow;
  size_t n;
  unsigned t, nt;
  uint64_t ops, bad, rng;
} hm_sdm_worker_t;

static inline uint64_t hm_sdm_worker_rnd(hm_sdm_worker_t *w) {
  w->rng += 0x9e3779b97f4a7c15ULL;
  return hm_sdm_mix(w->rng);
}

/* One read or write of this thread's word in the group of i. */
static inline void hm_sdm_worker_op(hm_sdm_worker_t *w, size_t i) {
  i = i - i % w->nt + w->t;
  if (i >= w->n) i -= w->nt;
  uint64_t r = hm_sdm_worker_rnd(w);
  if (r & 1) {
    w->a[i] = r ^ i;
    w->shadow[i] = r ^ i;
  } else {
    w->bad += w->a[i] != w->shadow[i];
  }
  w->ops++;
}

/* Pushes what the cache holds out: writes one word per page of big (a
 * mapped region larger than the cache) twice, its units of `unit` bytes in
 * a strided order. A sequential sweep would not do: the units it passes
 * are evicted first, and the rest of the cache kept (test_sdm_behind). */
static inline void hm_sdm_push_out(uint64_t *big, size_t bytes, size_t unit) {
  size_t units = bytes / unit;
  for (int pass = 0; pass < 2; pass++)
    for (size_t j = 0; j < units; j++) {
      uint64_t *u = big + (j * 7 % units) * (unit / 8);
      for (size_t i = 0; i < unit / 8; i += 4096 / 8) u[i] += 1;
    }
}

/* A region of abytes holding hm_sdm_mix(i) in word i, on disk, out of the
 * cache and advised random (each fault fills one page), and the bigger
 * region that pushed it out; 0, or -1 when something failed. */
static inline int hm_sdm_cold_random(hm_pager_t *p, size_t abytes, size_t bbytes, size_t unit,
                                     uint64_t **a, uint64_t **big) {
  *a = *big = NULL;
  if (hm_pager_map(p, abytes, (void **)a) || hm_pager_map(p, bbytes, (void **)big)) return -1;
  for (size_t i = 0; i < abytes / 8; i++) (*a)[i] = hm_sdm_mix(i);
  if (hm_pager_flush(p, *a, abytes) || hm_pager_advise(p, *a, abytes, HM_ADVICE_RANDOM)) return -1;
  hm_sdm_push_out(*big, bbytes, unit);
  return 0;
}

static inline hm_pager_stats_t hm_sdm_stats(hm_pager_t *p) {
  hm_pager_stats_t s = {.size = sizeof s};
  if (hm_pager_stats(p, &s) != 0) memset(&s, 0, sizeof s);
  return s;
}
/* A test's start: a context in *ctx and an anonymous-fill pager of budget
 * bytes over the scratch folder (hm_sdm_scratch); NULL, with a failed
 * check, when it cannot open (the test then ends with hm_test_done). */
static inline hm_pager_t *hm_sdm_begin(hm_ctx_t **ctx, uint64_t budget, uint64_t unit) {
  const char *dir = hm_sdm_scratch();
  *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(ctx, NULL), 0);
  hm_pager_t *p = *ctx ? hm_sdm_open_anon(*ctx, dir, budget, unit) : NULL;
  CHECK(p != NULL);
  return p;
}

/* Closes p and checks that no backing file is left in dir. */
static inline void hm_sdm_close(hm_pager_t *p, const char *dir) {
  CHECK_EQ_INT(hm_pager_close(p), 0);
  CHECK_EQ_INT(hm_sdm_count_files(dir), 0);
}

/* A test's end over two regions a and big of p: unmaps both, then
 * hm_sdm_close. */
static inline void hm_sdm_close_two(hm_pager_t *p, const char *dir, void *a, size_t abytes,
                                    void *big, size_t bbytes) {
  CHECK_EQ_INT(hm_pager_unmap(p, a, abytes), 0);
  CHECK_EQ_INT(hm_pager_unmap(p, big, bbytes), 0);
  hm_sdm_close(p, dir);
}

/* The main of a test run in both modes with synchronous write-protect:
 * anonymous fills (the default), and memfd fills as on kernels without
 * WP_ASYNC, which follow the same rules. */
static inline int hm_sdm_sync_wp_modes(const char *name,
                                       void (*one_mode)(hm_ctx_t *, const char *, uint32_t)) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  one_mode(ctx, dir, 0);
  one_mode(ctx, dir, HM_PAGER_MEMFD | HM_PAGER_NO_WP_ASYNC);
  hm_ctx_free(ctx);
  return hm_test_done(name);
}

/* hm_sdm_begin's end: closes p, checks that no backing file is left in
 * the scratch directory, frees ctx. */
static inline void hm_sdm_end(hm_ctx_t *ctx, hm_pager_t *p) {
  hm_sdm_close(p, hm_sdm_scratch());
  hm_ctx_free(ctx);
}
/* The pager's read_back entry for regions of len bytes (hm_pager_stats_json):
 * 1 and its blocks and bytes read, or 0 when it has none. */
static inline int hm_sdm_read_back(const char *json, uint64_t len, uint64_t *blocks,
                                   uint64_t *bytes) {
  char key[64];
  snprintf(key, sizeof key, "{\"block_bytes\": %llu, ", (unsigned long long)len);
  const char *e = strstr(json, key);
  unsigned long long b = 0, r = 0;
  if (!e || sscanf(e + strlen(key), "\"blocks\": %llu, \"bytes_read\": %llu", &b, &r) != 2)
    return 0;
  *blocks = b;
  *bytes = r;
  return 1;
}
#endif
