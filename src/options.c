/* SPDX-License-Identifier: BSD-3-Clause */
/* The option table: defaults, HETMEM_* environment variables, parsing. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "prim/prim.h"

typedef struct hm__opt_desc_s {
  const char *name;
  const char *env;
  _hm_opt_kind_t kind;
  const char *def;
  const char *help;
} hm__opt_desc_t;

static const hm__opt_desc_t hm__opts[HM_OPT__COUNT] = {
#define HM__OPT_DESC(id, name, kind, def, help) {#name, "HETMEM_" #id, HM_OPTK_##kind, def, help},
    HM_OPTION_TABLE(HM__OPT_DESC)
#undef HM__OPT_DESC
};

static const char *const hm__kind_names[] = {"string", "size", "count", "bool", "duration"};

int hm_parse_size(const char *text, uint64_t *out) {
  if (!out) return -EINVAL;
  return _hm_parse_size(text, out);
}

static int hm__parse_bool(const char *t, uint64_t *out) {
  static const char *const yes[] = {"1", "true", "on", "yes"};
  static const char *const no[] = {"0", "false", "off", "no", ""};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (strcasecmp(t, yes[i]) == 0) return (*out = 1), 0;
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (strcasecmp(t, no[i]) == 0) return (*out = 0), 0;
  return -EINVAL;
}

/* A duration in microseconds: a number (decimals allowed) and a unit, us,
 * ms or s; no unit is microseconds (what the variable always took). */
static int hm__parse_duration(const char *text, uint64_t *us) {
  char *end = NULL;
  if (!*text || *text == '-' || *text == '+') return -EINVAL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || !(v >= 0) || v > 1e12) return -EINVAL; /* also nan */
  double mul = !*end || !strcmp(end, "us") ? 1.0 : !strcmp(end, "ms") ? 1e3
               : !strcmp(end, "s")          ? 1e6 : -1.0;
  if (mul < 0 || v * mul > 1e15) return -EINVAL;
  *us = (uint64_t)(v * mul + 0.5);
  return 0;
}

static int hm__parse_value(_hm_opt_kind_t kind, const char *text, uint64_t *num) {
  switch (kind) {
  case HM_OPTK_STR: *num = 0; return 0;
  case HM_OPTK_SIZE: return _hm_parse_size(text, num);
  case HM_OPTK_BOOL: return hm__parse_bool(text, num);
  case HM_OPTK_DURATION: return hm__parse_duration(text, num);
  case HM_OPTK_COUNT: {
    char *end = NULL;
    if (!*text || *text == '-') return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end) return -EINVAL;
    *num = v;
    return 0;
  }
  }
  return -EINVAL;
}

static int hm__find(const char *name) {
  if (!name) return -1;
  if (strncmp(name, "HETMEM_", 7) == 0) {
    for (int i = 0; i < HM_OPT__COUNT; i++)
      if (strcmp(hm__opts[i].env, name) == 0) return i;
    return -1;
  }
  for (int i = 0; i < HM_OPT__COUNT; i++)
    if (strcmp(hm__opts[i].name, name) == 0) return i;
  return -1;
}

static int hm__store(hm_ctx_t *ctx, _hm_options_t *o, int i, const char *value,
                     _hm_opt_origin_t origin) {
  uint64_t num = 0;
  if (strlen(value) >= HM_OPT_VALUE_MAX)
    return _hm_error(ctx, -ENAMETOOLONG, "option %s: value longer than %d bytes",
                     hm__opts[i].name, HM_OPT_VALUE_MAX - 1);
  if (hm__parse_value(hm__opts[i].kind, value, &num))
    return _hm_error(ctx, -EINVAL, "option %s: '%s' is not a valid %s", hm__opts[i].name, value,
                     hm__kind_names[hm__opts[i].kind]);
  snprintf(o->text[i], HM_OPT_VALUE_MAX, "%s", value);
  o->num[i] = num;
  o->origin[i] = origin;
  return 0;
}

int _hm_options_init(hm_ctx_t *ctx, _hm_options_t *o) {
  int first_err = 0;
  for (int i = 0; i < HM_OPT__COUNT; i++) {
    int rc = hm__store(ctx, o, i, hm__opts[i].def, HM_ORIGIN_DEFAULT);
    if (rc) return rc; /* a bad default is a bug in the table */
    const char *env = _hm_prim_getenv(hm__opts[i].env);
    if (env && hm__store(ctx, o, i, env, HM_ORIGIN_ENV)) {
      _hm_error(ctx, -EINVAL, "%s='%s' is not a valid %s", hm__opts[i].env, env,
                hm__kind_names[hm__opts[i].kind]);
      if (!first_err) first_err = -EINVAL;
    }
  }
  return first_err;
}

const char *_hm_opt_str(const hm_ctx_t *ctx, _hm_opt_id_t id) { return ctx->opts.text[id]; }
uint64_t _hm_opt_u64(const hm_ctx_t *ctx, _hm_opt_id_t id) { return ctx->opts.num[id]; }

int hm_option_get(const hm_ctx_t *ctx, const char *name, char *buf, size_t len) {
  int i = hm__find(name);
  if (!ctx || i < 0) return -ENOENT;
  size_t n = strlen(ctx->opts.text[i]);
  if (!buf || n + 1 > len) return -ENOSPC;
  memcpy(buf, ctx->opts.text[i], n + 1);
  return 0;
}

int hm_option_get_u64(const hm_ctx_t *ctx, const char *name, uint64_t *out) {
  int i = hm__find(name);
  if (!ctx || i < 0 || !out) return -ENOENT;
  if (hm__opts[i].kind == HM_OPTK_STR) return -EINVAL;
  *out = ctx->opts.num[i];
  return 0;
}

int hm_option_set(hm_ctx_t *ctx, const char *name, const char *value) {
  int i = hm__find(name);
  if (!ctx) return -EINVAL;
  if (i < 0) return _hm_error(ctx, -ENOENT, "unknown option '%s'", name ? name : "(null)");
  if (!value) return _hm_error(ctx, -EINVAL, "option %s: no value", hm__opts[i].name);
  return hm__store(ctx, &ctx->opts, i, value, HM_ORIGIN_SET);
}

int hm_options_json(const hm_ctx_t *ctx, char **out) {
  static const char *const origins[] = {"default", "env", "set"};
  if (!ctx || !out) return -EINVAL;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_puts(&sb, "[");
  for (int i = 0; i < HM_OPT__COUNT; i++) {
    _hm_sb_puts(&sb, i ? ",{\"name\":" : "{\"name\":");
    _hm_sb_json_str(&sb, hm__opts[i].name);
    _hm_sb_puts(&sb, ",\"env\":");
    _hm_sb_json_str(&sb, hm__opts[i].env);
    _hm_sb_puts(&sb, ",\"kind\":");
    _hm_sb_json_str(&sb, hm__kind_names[hm__opts[i].kind]);
    _hm_sb_puts(&sb, ",\"value\":");
    _hm_sb_json_str(&sb, ctx->opts.text[i]);
    _hm_sb_puts(&sb, ",\"default\":");
    _hm_sb_json_str(&sb, hm__opts[i].def);
    _hm_sb_puts(&sb, ",\"origin\":");
    _hm_sb_json_str(&sb, origins[ctx->opts.origin[i]]);
    _hm_sb_puts(&sb, ",\"help\":");
    _hm_sb_json_str(&sb, hm__opts[i].help);
    _hm_sb_puts(&sb, "}");
  }
  _hm_sb_puts(&sb, "]");
  return _hm_sb_take(&sb, out);
}
