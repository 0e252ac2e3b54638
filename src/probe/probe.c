/* SPDX-License-Identifier: BSD-3-Clause */
/* hm_probe_json: one measurement described by a flat JSON object, its result
 * as JSON. The Python orchestration drives the probe through this, one step
 * at a time, so it can show progress between steps. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe.h"

#define HM__MAX_ARRAY 64

typedef enum { HM__J_NUM, HM__J_STR, HM__J_BOOL, HM__J_ARR, HM__J_NULL } hm__jkind_t;

typedef struct hm__jval_s {
  char key[64];
  hm__jkind_t kind;
  double num;
  bool b;
  char *str;
  size_t n;
  double arr[HM__MAX_ARRAY];
  bool used;
} hm__jval_t;

typedef struct hm__jobj_s {
  hm__jval_t v[32];
  size_t n;
} hm__jobj_t;

static void hm__ws(const char **p) {
  while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++;
}

static void hm__utf8(_hm_sb_t *sb, unsigned cp) {
  char c[5] = {0};
  if (cp < 0x80) {
    c[0] = (char)cp;
  } else if (cp < 0x800) {
    c[0] = (char)(0xC0 | (cp >> 6));
    c[1] = (char)(0x80 | (cp & 0x3F));
  } else {
    c[0] = (char)(0xE0 | (cp >> 12));
    c[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    c[2] = (char)(0x80 | (cp & 0x3F));
  }
  _hm_sb_puts(sb, c);
}

/* The \u escape at *p (after the u): four hex digits, no surrogate, no NUL. */
static int hm__jhex(const char **p, _hm_sb_t *sb) {
  char hex[5] = {0};
  for (int i = 0; i < 4; i++) {
    if (!(*p)[i]) return -EINVAL;
    hex[i] = (*p)[i];
  }
  char *end;
  unsigned long cp = strtoul(hex, &end, 16);
  if (*end || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0) return -EINVAL;
  hm__utf8(sb, (unsigned)cp);
  *p += 4;
  return 0;
}

/* The escape at *p (after the backslash) appended to sb. */
static int hm__jescape(const char **p, _hm_sb_t *sb) {
  char c = *(*p)++;
  switch (c) {
  case '"': _hm_sb_puts(sb, "\""); return 0;
  case '\\': _hm_sb_puts(sb, "\\"); return 0;
  case '/': _hm_sb_puts(sb, "/"); return 0;
  case 'n': _hm_sb_puts(sb, "\n"); return 0;
  case 't': _hm_sb_puts(sb, "\t"); return 0;
  case 'r': _hm_sb_puts(sb, "\r"); return 0;
  case 'b': _hm_sb_puts(sb, "\b"); return 0;
  case 'f': _hm_sb_puts(sb, "\f"); return 0;
  case 'u': return hm__jhex(p, sb);
  default: return -EINVAL;
  }
}

/* A JSON string at *p (opening quote included) into a malloc'd C string. */
static int hm__jstr(const char **p, char **out) {
  if (**p != '"') return -EINVAL;
  (*p)++;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_puts(&sb, "");
  while (**p && **p != '"') {
    char c = *(*p)++;
    if (c != '\\') {
      char s[2] = {c, 0};
      _hm_sb_puts(&sb, s);
      continue;
    }
    if (hm__jescape(p, &sb)) {
      _hm_sb_free(&sb);
      return -EINVAL;
    }
  }
  if (**p != '"') {
    _hm_sb_free(&sb);
    return -EINVAL;
  }
  (*p)++;
  return _hm_sb_take(&sb, out);
}

static int hm__jnum(const char **p, double *out) {
  char *end;
  *out = strtod(*p, &end);
  if (end == *p) return -EINVAL;
  *p = end;
  return 0;
}

static void hm__jfree(hm__jobj_t *o) {
  for (size_t i = 0; i < o->n; i++) free(o->v[i].str);
}

/* An array of numbers at *p (after the '['). */
static int hm__jarray(const char **p, hm__jval_t *v) {
  hm__ws(p);
  if (**p == ']') {
    (*p)++;
    return 0;
  }
  for (;;) {
    if (v->n == HM__MAX_ARRAY) return -E2BIG;
    hm__ws(p);
    if (hm__jnum(p, &v->arr[v->n++])) return -EINVAL;
    hm__ws(p);
    if (**p == ',') {
      (*p)++;
      continue;
    }
    if (*(*p)++ != ']') return -EINVAL;
    return 0;
  }
}

/* One value at *p into v. */
static int hm__jvalue(const char **p, hm__jval_t *v) {
  if (**p == '"') {
    v->kind = HM__J_STR;
    return hm__jstr(p, &v->str) ? -EINVAL : 0;
  }
  if (!strncmp(*p, "true", 4) || !strncmp(*p, "false", 5)) {
    v->kind = HM__J_BOOL;
    v->b = **p == 't';
    *p += v->b ? 4 : 5;
    return 0;
  }
  if (!strncmp(*p, "null", 4)) {
    v->kind = HM__J_NULL;
    *p += 4;
    return 0;
  }
  if (**p == '[') {
    v->kind = HM__J_ARR;
    (*p)++;
    return hm__jarray(p, v);
  }
  v->kind = HM__J_NUM;
  return hm__jnum(p, &v->num) ? -EINVAL : 0;
}

/* Parses a flat object: values are numbers, strings, booleans, null or
 * arrays of numbers; that is all a measurement request needs. */
static int hm__jparse(const char *text, hm__jobj_t *o) {
  memset(o, 0, sizeof *o);
  const char *p = text;
  hm__ws(&p);
  if (*p++ != '{') return -EINVAL;
  hm__ws(&p);
  if (*p == '}') {
    p++;
    goto end;
  }
  for (;;) {
    if (o->n == sizeof o->v / sizeof o->v[0]) return -E2BIG;
    hm__jval_t *v = &o->v[o->n];
    char *key = NULL;
    hm__ws(&p);
    if (hm__jstr(&p, &key)) return -EINVAL;
    snprintf(v->key, sizeof v->key, "%s", key);
    free(key);
    o->n++;
    hm__ws(&p);
    if (*p++ != ':') return -EINVAL;
    hm__ws(&p);
    int rc = hm__jvalue(&p, v);
    if (rc) return rc;
    hm__ws(&p);
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != '}') return -EINVAL;
    break;
  }
end:
  hm__ws(&p);
  return *p ? -EINVAL : 0;
}

static hm__jval_t *hm__jget(hm__jobj_t *o, const char *key) {
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->v[i].key, key)) {
      o->v[i].used = true;
      return &o->v[i];
    }
  return NULL;
}

/* Reads an integer field into *out if present; -EINVAL if not a whole number
 * within [lo, hi]. */
static int hm__jint(hm_ctx_t *ctx, hm__jobj_t *o, const char *key, double lo, double hi,
                    int64_t *out) {
  hm__jval_t *v = hm__jget(o, key);
  if (!v || v->kind == HM__J_NULL) return 0;
  if (v->kind != HM__J_NUM || !(v->num >= lo && v->num <= hi) ||
      v->num != (double)(int64_t)v->num)
    return _hm_error(ctx, -EINVAL, "probe request: '%s' must be a whole number in %.0f..%.0f",
                     key, lo, hi);
  *out = (int64_t)v->num;
  return 0;
}

static int hm__jbool(hm_ctx_t *ctx, hm__jobj_t *o, const char *key, bool *out) {
  hm__jval_t *v = hm__jget(o, key);
  if (!v || v->kind == HM__J_NULL) return 0;
  if (v->kind != HM__J_BOOL)
    return _hm_error(ctx, -EINVAL, "probe request: '%s' must be true or false", key);
  *out = v->b;
  return 0;
}

static int hm__junused(hm_ctx_t *ctx, hm__jobj_t *o) {
  for (size_t i = 0; i < o->n; i++)
    if (!o->v[i].used)
      return _hm_error(ctx, -EINVAL, "probe request: unknown key '%s'", o->v[i].key);
  return 0;
}

#define HM__BIG 1e18

static int hm__stream_json(hm_ctx_t *ctx, hm__jobj_t *o, _hm_sb_t *sb) {
  hm_stream_config_t cfg;
  hm_stream_config_default(&cfg);
  int64_t node = -1, threads = 0, bytes = 0, reps = 0;
  int32_t cpus[HM__MAX_ARRAY];
  int rc;
  if ((rc = hm__jint(ctx, o, "numa_node", -1, 1023, &node)) ||
      (rc = hm__jint(ctx, o, "threads", 0, HM_PROBE_MAX_CPUS, &threads)) ||
      (rc = hm__jint(ctx, o, "array_bytes", 0, HM__BIG, &bytes)) ||
      (rc = hm__jint(ctx, o, "repetitions", 0, 100000, &reps)))
    return rc;
  hm__jval_t *c = hm__jget(o, "cpus");
  if (c && c->kind != HM__J_NULL) {
    if (c->kind != HM__J_ARR)
      return _hm_error(ctx, -EINVAL, "probe request: 'cpus' must be a list of CPU numbers");
    for (size_t i = 0; i < c->n; i++) {
      if (c->arr[i] < 0 || c->arr[i] >= HM_PROBE_MAX_CPUS)
        return _hm_error(ctx, -EINVAL, "probe request: bad CPU number %g", c->arr[i]);
      cpus[i] = (int32_t)c->arr[i];
    }
    cfg.ncpus = (uint32_t)c->n;
    cfg.cpus = cpus;
  }
  if ((rc = hm__junused(ctx, o))) return rc;
  cfg.numa_node = (int32_t)node;
  cfg.threads = (uint32_t)threads;
  cfg.array_bytes = (uint64_t)bytes;
  cfg.repetitions = (uint32_t)reps;
  hm_stream_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  if ((rc = hm_probe_stream(ctx, &cfg, &r))) return rc;
  _hm_sb_printf(sb,
                "{\"test\": \"stream\", \"numa_node\": %d, \"threads\": %u, \"array_bytes\": "
                "%llu, \"repetitions\": %u, \"copy_gbs\": %.4f, \"scale_gbs\": %.4f, "
                "\"add_gbs\": %.4f, \"triad_gbs\": %.4f}",
                cfg.numa_node, r.threads, (unsigned long long)r.array_bytes, r.repetitions,
                r.copy_gbs, r.scale_gbs, r.add_gbs, r.triad_gbs);
  return 0;
}

static int hm__latency_json(hm_ctx_t *ctx, hm__jobj_t *o, _hm_sb_t *sb) {
  hm_latency_config_t cfg;
  hm_latency_config_default(&cfg);
  int64_t node = -1, cpu = -1, bytes = 0, loads = 0, reps = 0, nload = 0;
  bool small = false;
  int rc;
  if ((rc = hm__jint(ctx, o, "numa_node", -1, 1023, &node)) ||
      (rc = hm__jint(ctx, o, "cpu", -1, HM_PROBE_MAX_CPUS - 1, &cpu)) ||
      (rc = hm__jint(ctx, o, "buffer_bytes", 0, HM__BIG, &bytes)) ||
      (rc = hm__jint(ctx, o, "loads", 0, HM__BIG, &loads)) ||
      (rc = hm__jint(ctx, o, "repetitions", 0, 100000, &reps)) ||
      (rc = hm__jint(ctx, o, "load_threads", 0, HM_PROBE_MAX_CPUS, &nload)) ||
      (rc = hm__jbool(ctx, o, "small_pages", &small)) || (rc = hm__junused(ctx, o)))
    return rc;
  cfg.numa_node = (int32_t)node;
  cfg.cpu = (int32_t)cpu;
  cfg.buffer_bytes = (uint64_t)bytes;
  cfg.loads = (uint64_t)loads;
  cfg.repetitions = (uint32_t)reps;
  cfg.small_pages = small;
  cfg.load_threads = (uint32_t)nload;
  hm_latency_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  if ((rc = hm_probe_latency(ctx, &cfg, &r))) return rc;
  _hm_sb_printf(sb,
                "{\"test\": \"latency\", \"numa_node\": %d, \"buffer_bytes\": %llu, \"loads\": "
                "%llu, \"small_pages\": %s, \"ns_per_load\": %.3f, \"load_threads\": %u, "
                "\"load_gbs\": %.4f}",
                cfg.numa_node, (unsigned long long)r.buffer_bytes, (unsigned long long)r.loads,
                small ? "true" : "false", r.ns_per_load, r.load_threads, r.load_gbs);
  return 0;
}

/* The optional "qds" list into cfg. */
static int hm__storage_qds(hm_ctx_t *ctx, hm__jobj_t *o, hm_storage_config_t *cfg) {
  hm__jval_t *q = hm__jget(o, "qds");
  if (!q || q->kind == HM__J_NULL) return 0;
  if (q->kind != HM__J_ARR || q->n > HM_STORAGE_MAX_QD)
    return _hm_error(ctx, -EINVAL, "probe request: 'qds' must be a list of at most %d depths",
                     HM_STORAGE_MAX_QD);
  for (size_t i = 0; i < q->n; i++) {
    if (q->arr[i] < 1 || q->arr[i] > 64 || q->arr[i] != (double)(int)q->arr[i])
      return _hm_error(ctx, -EINVAL, "probe request: queue depth %g is not in 1..64",
                       q->arr[i]);
    cfg->qds[i] = (uint32_t)q->arr[i];
  }
  cfg->nqd = (uint32_t)q->n;
  return 0;
}

/* The storage request's integer and flag fields, checked in this order so
 * the first bad one is the one an error names. */
static int hm__storage_fields(hm_ctx_t *ctx, hm__jobj_t *o, int64_t num[4], bool *flag[3]) {
  static const struct {
    const char *key;
    double hi;
  } ints[4] = {{"file_bytes", HM__BIG},
               {"block_bytes", 1 << 30},
               {"seq_depth", 256},
               {"seq_passes", 1000}};
  static const char *const bools[3] = {"random", "write", "check_only"};
  int rc = 0;
  for (size_t i = 0; !rc && i < 4; i++) rc = hm__jint(ctx, o, ints[i].key, 0, ints[i].hi, &num[i]);
  for (size_t i = 0; !rc && i < 3; i++) rc = hm__jbool(ctx, o, bools[i], flag[i]);
  return rc;
}

/* The optional "rand_seconds" into *secs (left 0 when absent). */
static int hm__storage_secs(hm_ctx_t *ctx, hm__jobj_t *o, double *secs) {
  hm__jval_t *s = hm__jget(o, "rand_seconds");
  if (!s || s->kind == HM__J_NULL) return 0;
  if (s->kind != HM__J_NUM || !(s->num > 0 && s->num < 3600))
    return _hm_error(ctx, -EINVAL, "probe request: 'rand_seconds' must be in (0, 3600)");
  *secs = s->num;
  return 0;
}

/* The storage request into cfg; *write and *check are its two flags that
 * shape the answer. */
static int hm__storage_request(hm_ctx_t *ctx, hm__jobj_t *o, hm_storage_config_t *cfg,
                               bool *write, bool *check) {
  int64_t num[4] = {0, 0, 0, 0}; /* file_bytes, block_bytes, seq_depth, seq_passes */
  bool random = true;
  bool *flag[3] = {&random, write, check};
  double secs = 0;
  int rc;
  hm__jval_t *d = hm__jget(o, "dir");
  if (!d || d->kind != HM__J_STR)
    return _hm_error(ctx, -EINVAL, "probe request: 'dir' (a string) is required");
  if ((rc = hm__storage_fields(ctx, o, num, flag))) return rc;
  if ((rc = hm__storage_qds(ctx, o, cfg))) return rc;
  if ((rc = hm__storage_secs(ctx, o, &secs))) return rc;
  if ((rc = hm__junused(ctx, o))) return rc;
  cfg->dir = d->str;
  cfg->file_bytes = (uint64_t)num[0];
  cfg->block_bytes = (uint32_t)num[1];
  cfg->seq_depth = (uint32_t)num[2];
  cfg->seq_passes = (uint32_t)num[3];
  cfg->rand_seconds = secs;
  cfg->flags = (random ? 0 : HM_STORAGE_NO_RANDOM) | (*write ? 0 : HM_STORAGE_NO_WRITE) |
               (*check ? HM_STORAGE_CHECK_ONLY : 0);
  return 0;
}

static void hm__storage_answer(_hm_sb_t *sb, const hm_storage_config_t *cfg,
                               const hm_storage_result_t *r, bool write, bool check) {
  _hm_sb_puts(sb, "{\"test\": \"storage\", \"dir\": ");
  _hm_sb_json_str(sb, cfg->dir);
  _hm_sb_printf(sb,
                ", \"file_bytes\": %llu, \"block_bytes\": %u, \"seq_depth\": %u, "
                "\"seq_read_gbs\": %.4f, \"seq_write_gbs\": ",
                (unsigned long long)r->file_bytes, r->block_bytes, r->seq_depth,
                r->seq_read_gbs);
  if (check) {
    _hm_sb_puts(sb, "null, \"check_only\": true}");
    return;
  }
  if (write)
    _hm_sb_printf(sb, "%.4f", r->seq_write_gbs);
  else
    _hm_sb_puts(sb, "null");
  _hm_sb_puts(sb, ", \"randread\": [");
  for (uint32_t i = 0; i < r->nqd; i++) {
    const hm_randread_point_t *p = &r->randread[i];
    _hm_sb_printf(sb,
                  "%s{\"qd\": %u, \"ios\": %llu, \"iops\": %.1f, \"lat_us_mean\": %.3f, "
                  "\"lat_us_p50\": %.3f, \"lat_us_p99\": %.3f}",
                  i ? ", " : "", p->qd, (unsigned long long)p->ios, p->iops, p->lat_us_mean,
                  p->lat_us_p50, p->lat_us_p99);
  }
  _hm_sb_puts(sb, "]}");
}

static int hm__storage_json(hm_ctx_t *ctx, hm__jobj_t *o, _hm_sb_t *sb) {
  hm_storage_config_t cfg;
  hm_storage_config_default(&cfg);
  bool write = true, check = false;
  int rc = hm__storage_request(ctx, o, &cfg, &write, &check);
  if (rc) return rc;
  hm_storage_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  if ((rc = hm_probe_storage(ctx, &cfg, &r))) return rc;
  hm__storage_answer(sb, &cfg, &r, write, check);
  return 0;
}

int hm_probe_json(hm_ctx_t *ctx, const char *request, char **out) {
  if (!out) return _hm_error(ctx, -EINVAL, "probe: no output pointer");
  *out = NULL;
  hm__jobj_t *o = malloc(sizeof *o);
  if (!o) return _hm_error(ctx, -ENOMEM, "probe: out of memory");
  int rc = hm__jparse(request ? request : "", o);
  if (rc) {
    hm__jfree(o);
    free(o);
    return _hm_error(ctx, rc, "probe request is not a flat JSON object: %.80s",
                     request ? request : "(null)");
  }
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  hm__jval_t *t = hm__jget(o, "test");
  if (!t || t->kind != HM__J_STR) {
    rc = _hm_error(ctx, -EINVAL, "probe request: 'test' must be stream, latency, storage or llc");
  } else if (!strcmp(t->str, "stream")) {
    rc = hm__stream_json(ctx, o, &sb);
  } else if (!strcmp(t->str, "latency")) {
    rc = hm__latency_json(ctx, o, &sb);
  } else if (!strcmp(t->str, "storage")) {
    rc = hm__storage_json(ctx, o, &sb);
  } else if (!strcmp(t->str, "llc")) {
    if (!(rc = hm__junused(ctx, o)))
      _hm_sb_printf(&sb, "{\"test\": \"llc\", \"llc_bytes\": %llu}",
                    (unsigned long long)_hm_probe_llc_bytes());
  } else {
    rc = _hm_error(ctx, -EINVAL, "probe request: unknown test '%s'", t->str);
  }
  hm__jfree(o);
  free(o);
  if (rc) {
    _hm_sb_free(&sb);
    return rc;
  }
  rc = _hm_sb_take(&sb, out);
  return rc ? _hm_error(ctx, rc, "probe: out of memory") : 0;
}
