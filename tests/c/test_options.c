/* SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hetmem.h"
#include "testhelper.h"

static void test_sizes(void) {
  uint64_t v = 0;
  CHECK(hm_parse_size("4096", &v) == 0 && v == 4096);
  CHECK(hm_parse_size("64K", &v) == 0 && v == 65536);
  CHECK(hm_parse_size("512MiB", &v) == 0 && v == 512ull << 20);
  CHECK(hm_parse_size("4G", &v) == 0 && v == 4ull << 30);
  CHECK(hm_parse_size("1.5GB", &v) == 0 && v == 1500000000ull);
  CHECK(hm_parse_size(" 2 TiB", &v) == 0 && v == 2ull << 40);
  CHECK_EQ_INT(hm_parse_size("", &v), -EINVAL);
  CHECK_EQ_INT(hm_parse_size("-1G", &v), -EINVAL);
  CHECK_EQ_INT(hm_parse_size("4X", &v), -EINVAL);
  CHECK_EQ_INT(hm_parse_size("0.3", &v), -EINVAL);
  CHECK_EQ_INT(hm_parse_size("99999999999T", &v), -ERANGE);
  CHECK_EQ_INT(hm_parse_size(NULL, &v), -EINVAL);
}

static void test_options_env(void) {
  setenv("HETMEM_FAST_BUDGET", "2G", 1);
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, "/"), 0);
  uint64_t v = 0;
  CHECK(hm_option_get_u64(ctx, "fast_budget", &v) == 0 && v == 2ull << 30);
  CHECK(hm_option_get_u64(ctx, "HETMEM_FAST_BUDGET", &v) == 0 && v == 2ull << 30);
  CHECK_EQ_INT(hm_option_set(ctx, "fetch_unit", "banana"), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "fetch_unit") != NULL);
  CHECK_EQ_INT(hm_option_set(ctx, "no_such_option", "1"), -ENOENT);
  CHECK_EQ_INT(hm_option_set(ctx, "verbose", "on"), 0);
  CHECK(hm_option_get_u64(ctx, "verbose", &v) == 0 && v == 1);
  char buf[8];
  CHECK_EQ_INT(hm_option_get(ctx, "fsroot", buf, sizeof buf), 0);
  CHECK(strcmp(buf, "/") == 0);
  char *json = NULL;
  CHECK_EQ_INT(hm_options_json(ctx, &json), 0);
  CHECK(json && strstr(json, "\"env\":\"HETMEM_FAST_BUDGET\"") && strstr(json, "\"origin\":\"env\""));
  hm_free(json);
  hm_ctx_free(ctx);

  setenv("HETMEM_FAST_BUDGET", "lots", 1);
  ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, "/"), -EINVAL);
  CHECK(ctx && strstr(hm_ctx_last_error(ctx), "HETMEM_FAST_BUDGET='lots'") != NULL);
  hm_ctx_free(ctx);
  unsetenv("HETMEM_FAST_BUDGET");
}

static void test_bad_root(void) {
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, "/nonexistent/root"), -ENOENT);
  CHECK(ctx && strstr(hm_ctx_last_error(ctx), "/nonexistent/root") != NULL);
  hm_ctx_free(ctx);
  ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, "/etc/hostname"), -ENOTDIR);
  hm_ctx_free(ctx);
}

/* sample_period is a duration: units us, ms, s; a bare number is
 * microseconds (what HETMEM_SAMPLE_PERIOD always took). */
static void test_durations(void) {
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  uint64_t v = 0;
  CHECK(hm_option_get_u64(ctx, "sample_period", &v) == 0 && v == 10000); /* default 10ms */
  const char *good[][2] = {{"250", "250"}, {"250us", "250"}, {"2ms", "2000"},
                           {"1.5s", "1500000"}, {"0.5ms", "500"}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    CHECK_EQ_INT(hm_option_set(ctx, "sample_period", good[i][0]), 0);
    CHECK(hm_option_get_u64(ctx, "sample_period", &v) == 0 &&
          v == strtoull(good[i][1], NULL, 10));
  }
  const char *bad[] = {"", "-5", "+5", "5min", "ms", "nan", "inf", "1e400s", "5 ms"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_EQ_INT(hm_option_set(ctx, "sample_period", bad[i]), -EINVAL);
  hm_ctx_free(ctx);
}

int main(void) {
  test_sizes();
  test_durations();
  test_options_env();
  test_bad_root();
  return hm_test_done("test_options");
}
