/* SPDX-License-Identifier: BSD-3-Clause */
/* The DAMON sampler: the kernel's data access monitor, driven through its
 * sysfs admin interface (Documentation/admin-guide/mm/damon/usage.rst):
 *
 *   kdamonds/nr_kdamonds = 1                   (only when it was 0: DAMON
 *   kdamonds/0/contexts/nr_contexts = 1         is nobody else's)
 *   contexts/0/operations = vaddr              (avail_operations lists it)
 *   contexts/0/monitoring_attrs/intervals/{sample_us,aggr_us}
 *   contexts/0/monitoring_attrs/nr_regions/{min,max}
 *   contexts/0/targets/nr_targets = 1, targets/0/pid_target = our pid
 *   contexts/0/schemes/nr_schemes = 1, schemes/0/action = stat
 *   kdamonds/0/state = on
 * then every period: state = update_schemes_tried_regions, and each
 * schemes/0/tried_regions/N/{start,end,nr_accesses} is a region of our
 * address space with the number of sampling intervals (of the last
 * aggregation) in which DAMON saw it accessed. Each region is credited to
 * the live blocks it overlaps: nr_accesses x overlapping pages samples, so
 * one sample is "one page seen accessed in one sampling interval", the
 * portable sampler's unit. DAMON cannot tell loads from stores: all are
 * counted as loads. At the end: state = off, nr_kdamonds = 0.
 * Every access goes through the OS layer under the settable root, so a
 * test can play the kernel on a recorded tree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prim/prim.h"
#include "sampler.h"

#define HM__KD "/sys/kernel/mm/damon/admin/kdamonds"
#define HM__K0 HM__KD "/0"
#define HM__C0 HM__K0 "/contexts/0"
#define HM__S0 HM__C0 "/schemes/0"

struct _hm_smp_damon_s {
  const char *root;
  char rootbuf[4096];
  uint64_t sample_us, aggr_us;
  size_t page;
  uint64_t drains, regions, credited_regions, errors;
  int on;
};

static int hm__w(const char *root, const char *path, const char *text, const char *what,
                 char *why, size_t wlen) {
  int rc = _hm_prim_write_text(root, path, text);
  if (rc && why)
    snprintf(why, wlen, "DAMON: cannot write '%s' to %s: %s%s", text, what, strerror(-rc),
             rc == -EACCES || rc == -EPERM ? " (needs root)" : "");
  return rc;
}

static int hm__wu(const char *root, const char *path, uint64_t v, const char *what, char *why,
                  size_t wlen) {
  char t[32];
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  return hm__w(root, path, t, what, why, wlen);
}

static int hm__has_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = text; (p = strstr(p, word)) != NULL; p += n) {
    int left = p == text || p[-1] == '\n' || p[-1] == ' ';
    int right = p[n] == 0 || p[n] == '\n' || p[n] == ' ';
    if (left && right) return 1;
  }
  return 0;
}

/* Creates kdamond 0 with one context using vaddr operations. */
static int hm__setup(const char *root, char *why, size_t wlen) {
  uint64_t nk;
  int rc = _hm_prim_read_u64(root, HM__KD "/nr_kdamonds", &nk);
  if (rc) {
    snprintf(why, wlen, "no DAMON sysfs admin interface (%s)", HM__KD);
    return rc;
  }
  if (nk != 0) {
    snprintf(why, wlen, "DAMON is in use (nr_kdamonds is %llu)", (unsigned long long)nk);
    return -EBUSY;
  }
  if ((rc = hm__w(root, HM__KD "/nr_kdamonds", "1", "nr_kdamonds", why, wlen))) return rc;
  if (!_hm_prim_is_dir(root, HM__K0)) {
    snprintf(why, wlen, "DAMON made no kdamond directory");
    return -ENOENT;
  }
  if ((rc = hm__w(root, HM__K0 "/contexts/nr_contexts", "1", "nr_contexts", why, wlen)))
    return rc;
  char ops[256];
  ssize_t n = _hm_prim_read_text(root, HM__C0 "/avail_operations", ops, sizeof ops);
  if (n >= 0 && !hm__has_word(ops, "vaddr")) {
    snprintf(why, wlen, "DAMON lacks virtual-address monitoring (avail_operations: %s)", ops);
    for (char *p = why; *p; p++)
      if (*p == '\n') *p = ' ';
    return -ENOTSUP;
  }
  rc = hm__w(root, HM__C0 "/operations", "vaddr", "operations", why, wlen);
  if (rc == -EINVAL)
    snprintf(why, wlen, "DAMON lacks virtual-address monitoring (operations refuses vaddr)");
  return rc;
}

static void hm__teardown(const char *root) {
  _hm_prim_write_text(root, HM__KD "/nr_kdamonds", "0");
}

int _hm_smp_damon_probe(const _hm_smp_cfg_t *cfg, char *probed, size_t plen, char *why,
                        size_t wlen) {
  int present = _hm_prim_is_dir(cfg->root, HM__KD);
  int rc = hm__setup(cfg->root, why, wlen);
  if (present && rc != -EBUSY) hm__teardown(cfg->root);
  char e[200] = "";
  size_t k = 0;
  for (const char *s = why; rc && *s && k + 2 < sizeof e; s++) {
    if (*s == '"' || *s == '\\') e[k++] = '\\';
    e[k++] = (*s >= 0x20 && *s < 0x7f) ? *s : ' ';
  }
  e[k] = 0;
  snprintf(probed, plen, "{\"present\":%s,\"vaddr\":%s%s%s%s}", present ? "true" : "false",
           rc ? "false" : "true", rc ? ",\"why\":\"" : "", e, rc ? "\"" : "");
  return rc;
}

int _hm_smp_damon_start(const _hm_smp_cfg_t *cfg, _hm_smp_damon_t **out, char *why,
                        size_t wlen) {
  _hm_smp_damon_t *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  snprintf(d->rootbuf, sizeof d->rootbuf, "%s", cfg->root ? cfg->root : "/");
  d->root = d->rootbuf;
  d->page = _hm_prim_page_size();
  d->sample_us = cfg->period_us ? cfg->period_us : 5000;
  d->aggr_us = 20 * d->sample_us;
  const char *r = d->root;
  int rc = hm__setup(r, why, wlen);
  if (!rc) rc = hm__wu(r, HM__C0 "/monitoring_attrs/intervals/sample_us", d->sample_us,
                       "sample_us", why, wlen);
  if (!rc) rc = hm__wu(r, HM__C0 "/monitoring_attrs/intervals/aggr_us", d->aggr_us, "aggr_us",
                       why, wlen);
  if (!rc) rc = hm__w(r, HM__C0 "/monitoring_attrs/nr_regions/min", "10", "nr_regions/min",
                      why, wlen);
  if (!rc) rc = hm__w(r, HM__C0 "/monitoring_attrs/nr_regions/max", "1000", "nr_regions/max",
                      why, wlen);
  if (!rc) rc = hm__w(r, HM__C0 "/targets/nr_targets", "1", "nr_targets", why, wlen);
  if (!rc) rc = hm__wu(r, HM__C0 "/targets/0/pid_target", (uint64_t)cfg->pid, "pid_target",
                       why, wlen);
  if (!rc) rc = hm__w(r, HM__C0 "/schemes/nr_schemes", "1", "nr_schemes", why, wlen);
  if (!rc) rc = hm__w(r, HM__S0 "/action", "stat", "schemes/0/action", why, wlen);
  if (!rc) rc = hm__w(r, HM__K0 "/state", "on", "state", why, wlen);
  if (rc) {
    if (rc != -EBUSY) hm__teardown(r);
    free(d);
    return rc;
  }
  d->on = 1;
  *out = d;
  return 0;
}

typedef struct hm__walk_s {
  _hm_smp_damon_t *d;
  const _hm_smp_spans_t *spans;
  const _hm_smp_sink_t *sink;
  uint64_t credited;
} hm__walk_t;

static void hm__credit(hm__walk_t *w, uint64_t lo, uint64_t hi, uint64_t nr) {
  const _hm_smp_spans_t *s = w->spans;
  /* first span ending above lo */
  size_t a = 0, b = s->n;
  while (a < b) {
    size_t m = (a + b) / 2;
    if (s->v[m].hi <= lo) a = m + 1;
    else b = m;
  }
  int any = 0;
  for (size_t i = a; i < s->n && s->v[i].lo < hi; i++) {
    uint64_t l = s->v[i].lo > lo ? s->v[i].lo : lo;
    uint64_t h = s->v[i].hi < hi ? s->v[i].hi : hi;
    if (h <= l || !nr) continue;
    /* nr_accesses x pages of the overlap, in HM_SMP_FIX units */
    uint64_t wfix = (nr * (h - l) * HM_SMP_FIX + w->d->page / 2) / w->d->page;
    w->sink->credit(w->sink->arg, s->v[i].site, wfix, 0);
    w->credited += wfix;
    any = 1;
  }
  w->d->credited_regions += (uint64_t)any;
}

static int hm__region(const char *name, void *argp) {
  hm__walk_t *w = argp;
  char *end;
  strtoul(name, &end, 10);
  if (end == name || *end) return 0; /* total_bytes and the like */
  char path[256];
  uint64_t lo, hi, nr;
  snprintf(path, sizeof path, HM__S0 "/tried_regions/%s/start", name);
  if (_hm_prim_read_u64(w->d->root, path, &lo)) goto bad;
  snprintf(path, sizeof path, HM__S0 "/tried_regions/%s/end", name);
  if (_hm_prim_read_u64(w->d->root, path, &hi)) goto bad;
  snprintf(path, sizeof path, HM__S0 "/tried_regions/%s/nr_accesses", name);
  if (_hm_prim_read_u64(w->d->root, path, &nr)) goto bad;
  w->d->regions++;
  if (hi > lo) hm__credit(w, lo, hi, nr);
  return 0;
bad:
  w->d->errors++;
  return 0;
}

uint64_t _hm_smp_damon_drain(_hm_smp_damon_t *d, const _hm_smp_spans_t *spans,
                             const _hm_smp_sink_t *sink) {
  if (!d || !d->on) return 0;
  /* the kernel fills tried_regions at its next aggregation, then returns */
  if (_hm_prim_write_text(d->root, HM__K0 "/state", "update_schemes_tried_regions")) {
    d->errors++;
    return 0;
  }
  d->drains++;
  hm__walk_t w = {d, spans, sink, 0};
  if (_hm_prim_list_dir(d->root, HM__S0 "/tried_regions", hm__region, &w)) d->errors++;
  return w.credited / HM_SMP_FIX;
}

void _hm_smp_damon_describe(const _hm_smp_damon_t *d, char *out, size_t len) {
  snprintf(out, len,
           ",\"sample_us\":%llu,\"aggr_us\":%llu,\"updates\":%llu,\"regions_read\":%llu,"
           "\"regions_attributed\":%llu,\"errors\":%llu",
           (unsigned long long)d->sample_us, (unsigned long long)d->aggr_us,
           (unsigned long long)d->drains, (unsigned long long)d->regions,
           (unsigned long long)d->credited_regions, (unsigned long long)d->errors);
}

void _hm_smp_damon_stop(_hm_smp_damon_t *d) {
  if (!d) return;
  if (d->on) {
    _hm_prim_write_text(d->root, HM__K0 "/state", "off");
    hm__teardown(d->root);
    d->on = 0;
  }
}
