/* SPDX-License-Identifier: BSD-3-Clause */
/* Choosing the access sampler at run time, and the profiler thread that
 * drains a precise one (PMU or DAMON) into the site counters. The portable
 * sampler is sampler_portable.c. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"
#include "sampler.h"

static const char *const hm__names[] = {"none", "pebs", "ibs", "spe", "damon", "portable", "refs"};

const char *_hm_smp_kind_name(_hm_smp_kind_t k) {
  return (unsigned)k < sizeof hm__names / sizeof hm__names[0] ? hm__names[k] : "?";
}

_hm_smp_kind_t _hm_smp_kind_parse(const char *name) {
  for (size_t i = 1; i < sizeof hm__names / sizeof hm__names[0]; i++)
    if (name && strcmp(name, hm__names[i]) == 0) return (_hm_smp_kind_t)i;
  return HM_SMP_NONE;
}

/* ------------------------------------------------------------------------
 * Live blocks by address
 * ------------------------------------------------------------------------ */
static int hm__span_cmp(const void *a, const void *b) {
  const _hm_smp_span_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void _hm_smp_spans_sort(_hm_smp_spans_t *s) {
  if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, hm__span_cmp);
}

int _hm_smp_spans_snapshot(_hm_smp_spans_t *s, _hm_pl_table_t *t) {
  size_t cap = _hm_pl_table_capacity();
  if (!s->v) {
    /* mapped, not malloc'd: the profiler must not profile itself; room
     * for the freed blocks a drain adds (hm__grave) */
    void *p = NULL;
    int rc = _hm_prim_map_anon((cap + HM_SMP_GRAVE) * sizeof *s->v, &p);
    if (rc) return rc;
    s->v = p;
    s->cap = cap + HM_SMP_GRAVE;
  }
  s->n = 0;
  for (size_t i = 0; i < cap && s->n < cap; i++) {
    _hm_pl_block_t *b = _hm_pl_table_slot(t, i);
    if (!b) break;
    uintptr_t key = atomic_load_explicit(&b->key, memory_order_acquire);
    if (key <= HM_PL_KEY_BUSY || !b->site) continue;
    size_t req = atomic_load_explicit(&b->req, memory_order_relaxed);
    s->v[s->n++] = (_hm_smp_span_t){key, key + req, b->site, 0};
  }
  _hm_smp_spans_sort(s);
  return 0;
}

const _hm_smp_span_t *_hm_smp_spans_find(const _hm_smp_spans_t *s, uintptr_t addr) {
  size_t a = 0, b = s->n;
  while (a < b) { /* first span with lo > addr */
    size_t m = (a + b) / 2;
    if (s->v[m].lo <= addr) a = m + 1;
    else b = m;
  }
  if (a == 0) return NULL;
  const _hm_smp_span_t *sp = &s->v[a - 1];
  return addr < sp->hi ? sp : NULL;
}

void _hm_smp_spans_free(_hm_smp_spans_t *s) {
  if (s->v) _hm_prim_unmap(s->v, s->cap * sizeof *s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

/* ------------------------------------------------------------------------
 * Selection
 * ------------------------------------------------------------------------ */
/* Precise before coarse; refs before portable: it never protects a page,
 * so the kernel's copies into and out of the program's memory (Open MPI's
 * single-copy transfers, read(2) into a buffer) keep working. */
static const _hm_smp_kind_t hm__order[] = {HM_SMP_PEBS, HM_SMP_IBS, HM_SMP_SPE, HM_SMP_DAMON,
                                           HM_SMP_REFS};
#define HM__NORDER (sizeof hm__order / sizeof hm__order[0])

/* Probes t when run (one[] gets what it found, reason why it failed),
 * else describes it untouched (a DAMON probe writes to sysfs); 1 when t
 * was probed and works. */
static int hm__probe_one(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t t, int run, char *one,
                         size_t olen, char *reason, size_t rlen) {
  if (!run) {
    snprintf(one, olen, "{\"probed\":false}");
    return 0;
  }
  int rc = t == HM_SMP_DAMON  ? _hm_smp_damon_probe(cfg, one, olen, reason, rlen)
           : t == HM_SMP_REFS ? _hm_smp_refs_probe(cfg, one, olen, reason, rlen)
                              : _hm_smp_perf_probe(cfg, t, one, olen, reason, rlen);
  return rc == 0;
}

static int hm__is_auto(const char *want) { return !want || !*want || strcmp(want, "auto") == 0; }

static int hm__unknown(const char *want, char *why, size_t wlen) {
  snprintf(why, wlen, "unknown sampler '%s' (choose auto, pebs, ibs, spe, damon, refs, "
           "portable or none)", want);
  return -EINVAL;
}

/* A named precise sampler whose probe failed: why says what it found. */
static int hm__unavailable(const char *want, _hm_smp_kind_t named, char reason[][256],
                           char *why, size_t wlen) {
  for (size_t i = 0; i < HM__NORDER; i++)
    if (hm__order[i] == named)
      snprintf(why, wlen, "sampler '%s' is not available here: %s", want, reason[i]);
  return -ENOTSUP;
}

int _hm_smp_select(const _hm_smp_cfg_t *cfg, const char *want, _hm_smp_kind_t *kind,
                   char *probed, size_t plen, char *why, size_t wlen) {
  int is_auto = hm__is_auto(want);
  _hm_smp_kind_t named = is_auto ? HM_SMP_NONE : _hm_smp_kind_parse(want);
  if (!is_auto && named == HM_SMP_NONE) return hm__unknown(want, why, wlen);
  size_t k = 0;
  int chosen = 0;
  char one[1024], reason[HM__NORDER][256];
  k += (size_t)snprintf(probed + k, plen - k, "{");
  for (size_t i = 0; i < HM__NORDER; i++) {
    _hm_smp_kind_t t = hm__order[i];
    reason[i][0] = 0;
    /* probe what auto would try, the named one, and describe the rest */
    int run = !chosen && (is_auto || named == t);
    if (hm__probe_one(cfg, t, run, one, sizeof one, reason[i], sizeof reason[i])) {
      chosen = 1;
      *kind = t;
    }
    if (k < plen)
      k += (size_t)snprintf(probed + k, plen - k, "%s\"%s\":%s", i ? "," : "",
                            _hm_smp_kind_name(t), one);
  }
  if (k < plen) snprintf(probed + k, plen - k, "}");
  if (chosen) return 0;
  if (is_auto || named == HM_SMP_PORTABLE) {
    *kind = HM_SMP_PORTABLE;
    return 0;
  }
  return hm__unavailable(want, named, reason, why, wlen);
}

/* ------------------------------------------------------------------------
 * The profiler thread of a precise sampler
 * ------------------------------------------------------------------------ */
static struct {
  _hm_smp_kind_t kind;
  _hm_smp_perf_t *perf;
  _hm_smp_damon_t *damon;
  _hm_smp_refs_t *refs;
  _hm_pl_table_t *table;
  _hm_smp_sink_t sink;
  void (*tick)(void);
  uint64_t period_us;
  _hm_smp_spans_t spans;
  pthread_t thread;
  int owner;  /* the process that started the thread */
  int forked; /* halted in a forked child: nothing of it is ours */
  _Atomic int stop, running;
  uint64_t credited, drains;
  _Atomic uint64_t cpu_ns;
  double period;
} hm__run;

/* ------------------------------------------------------------------------
 * Freed blocks the refs sampler has not seen yet
 * ------------------------------------------------------------------------ */
/* A block used and freed between two drains (a time step's temporary) left
 * no trace with the refs sampler: its mapping was gone when smaps was
 * read, so a site whose blocks all live shorter than an interval ranked
 * cold however hot it was. Its own mapping (profile mode gives each large
 * block one while this sampler runs) now waits here until the next drain
 * has read its referenced pages, and is unmapped then. Cost on a large
 * free in profile mode: a getpid and a spin lock held for a few stores;
 * the mappings' memory stays until the drain, at most HM_SMP_GRAVE_BYTES
 * (beyond it a block is unmapped at once, as before, and counted). */
typedef struct hm__dead_s {
  void *base;
  size_t len;
  uint64_t born, died; /* _hm_prim_now_ns */
  _hm_smp_span_t span;
} hm__dead_t;

static struct {
  atomic_flag lock;
  size_t n, bytes;
  size_t taken; /* bytes the drain took and has not unmapped yet */
  uint64_t buried, overflow;
  hm__dead_t v[HM_SMP_GRAVE];
} hm__grave = {.lock = ATOMIC_FLAG_INIT};

static hm__dead_t hm__taken[HM_SMP_GRAVE]; /* the drain's, sampler thread only */

static void hm__grave_lock(void) {
  while (atomic_flag_test_and_set_explicit(&hm__grave.lock, memory_order_acquire))
    _hm_prim_yield();
}

int _hm_smp_bury(void *base, size_t len, uintptr_t lo, uintptr_t hi, uint32_t site,
                 uint64_t born_ns) {
  if (!atomic_load(&hm__run.running) || !hm__run.refs || !site) return 0;
  if (_hm_prim_pid() != hm__run.owner) return 0; /* a forked child: no drain */
  int taken = 0;
  hm__grave_lock();
  if (hm__grave.n < HM_SMP_GRAVE && hm__grave.bytes + len <= HM_SMP_GRAVE_BYTES) {
    hm__grave.v[hm__grave.n++] = (hm__dead_t){base, len, born_ns, _hm_prim_now_ns(), {lo, hi, site, 0}};
    hm__grave.bytes += len;
    hm__grave.buried++;
    taken = 1;
  } else {
    hm__grave.overflow++;
  }
  atomic_flag_clear_explicit(&hm__grave.lock, memory_order_release);
  return taken;
}

size_t _hm_smp_grave_bytes(void) {
  hm__grave_lock();
  size_t b = hm__grave.bytes + hm__grave.taken;
  atomic_flag_clear_explicit(&hm__grave.lock, memory_order_release);
  return b;
}

/* The part of the interval since `since` (its last clear) until now that
 * a block lived, x 2^-16; 0 for all of it. */
static uint32_t hm__lived(const hm__dead_t *d, uint64_t since, uint64_t now) {
  uint64_t from = d->born > since ? d->born : since;
  if (now <= since || d->died <= from) return 1; /* freed before the interval: barely */
  uint64_t part = (d->died - from) * 65536u / (now - since);
  return part >= 65536u ? 0 : part ? (uint32_t)part : 1;
}

/* Moves the waiting blocks into hm__taken and their spans into s (sorted
 * again); how many. */
static size_t hm__grave_take(_hm_smp_spans_t *s) {
  hm__grave_lock();
  size_t n = hm__grave.n;
  memcpy(hm__taken, hm__grave.v, n * sizeof *hm__taken);
  hm__grave.n = 0;
  hm__grave.taken = hm__grave.bytes;
  hm__grave.bytes = 0;
  atomic_flag_clear_explicit(&hm__grave.lock, memory_order_release);
  uint64_t since = _hm_smp_refs_since(hm__run.refs), now = _hm_prim_now_ns();
  for (size_t i = 0; i < n && s->n < s->cap; i++) {
    s->v[s->n] = hm__taken[i].span;
    s->v[s->n++].lived = hm__lived(&hm__taken[i], since, now);
  }
  if (n) _hm_smp_spans_sort(s);
  return n;
}

/* The blocks a short window credits (sampler_refs.c): those live now and
 * those freed since the drain began, whose mappings wait in the grave,
 * each whole. A temporary made and freed within the window touched its
 * pages in it; the spans taken at the drain's start had neither. */
static void hm__respan(_hm_smp_spans_t *s) {
  if (_hm_smp_spans_snapshot(s, hm__run.table)) return;
  hm__grave_lock();
  for (size_t i = 0; i < hm__grave.n && s->n < s->cap; i++) s->v[s->n++] = hm__grave.v[i].span;
  atomic_flag_clear_explicit(&hm__grave.lock, memory_order_release);
  _hm_smp_spans_sort(s);
}

static void hm__drain(void) {
  if (_hm_smp_spans_snapshot(&hm__run.spans, hm__run.table)) return;
  size_t dead = hm__run.refs ? hm__grave_take(&hm__run.spans) : 0;
  hm__run.drains++;
  if (hm__run.perf)
    hm__run.credited += _hm_smp_perf_drain(hm__run.perf, &hm__run.spans, &hm__run.sink);
  else if (hm__run.damon)
    hm__run.credited +=
        _hm_smp_damon_drain(hm__run.damon, &hm__run.spans, &hm__run.sink);
  else if (hm__run.refs)
    hm__run.credited += _hm_smp_refs_drain(hm__run.refs, &hm__run.spans, &hm__run.sink,
                                           hm__respan);
  for (size_t i = 0; i < dead; i++) (void)_hm_prim_unmap(hm__taken[i].base, hm__taken[i].len);
  if (dead) {
    hm__grave_lock();
    hm__grave.taken = 0;
    atomic_flag_clear_explicit(&hm__grave.lock, memory_order_release);
  }
}

static void *hm__loop(void *unused) {
  (void)unused;
  while (!atomic_load(&hm__run.stop)) {
    uint64_t ns = hm__run.refs ? _hm_smp_refs_interval_ns(hm__run.refs)
                               : hm__run.period_us * 1000ull;
    _hm_prim_sleep_ns(ns);
    if (atomic_load(&hm__run.stop)) break;
    hm__drain();
    if (hm__run.tick) hm__run.tick();
    atomic_store(&hm__run.cpu_ns, _hm_prim_thread_cpu_ns());
  }
  return NULL;
}

int _hm_smp_run(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t kind, _hm_pl_table_t *table,
                const _hm_smp_sink_t *sink, char *why, size_t wlen) {
  int rc;
  memset(&hm__run, 0, sizeof hm__run);
  hm__run.kind = kind;
  hm__run.table = table;
  hm__run.sink = *sink;
  hm__run.period_us = cfg->period_us ? cfg->period_us : 10000;
  hm__run.tick = cfg->tick;
  if (kind == HM_SMP_DAMON || kind == HM_SMP_REFS) {
    rc = kind == HM_SMP_DAMON ? _hm_smp_damon_start(cfg, &hm__run.damon, why, wlen)
                              : _hm_smp_refs_start(cfg, &hm__run.refs, why, wlen);
    hm__run.period = (double)_hm_prim_page_size() / 64.0;
  } else {
    rc = _hm_smp_perf_start(cfg, kind, &hm__run.perf, why, wlen);
    if (!rc) hm__run.period = _hm_smp_perf_period(hm__run.perf);
  }
  if (rc) return rc;
  rc = pthread_create(&hm__run.thread, NULL, hm__loop, NULL);
  if (rc) {
    snprintf(why, wlen, "cannot start the sampler thread: %s", strerror(rc));
    _hm_smp_perf_stop(hm__run.perf);
    _hm_smp_damon_stop(hm__run.damon);
    _hm_smp_refs_stop(hm__run.refs);
    free(hm__run.damon);
    hm__run.perf = NULL;
    hm__run.damon = NULL;
    hm__run.refs = NULL;
    return -rc;
  }
  hm__run.owner = _hm_prim_pid();
  atomic_store(&hm__run.running, 1);
  return 0;
}

void _hm_smp_halt(void) {
  if (!atomic_exchange(&hm__run.running, 0)) return;
  if (_hm_prim_pid() != hm__run.owner) {
    /* a forked child: the thread did not come along, and the buffers and
     * the kdamond are the parent's (draining them would steal its
     * samples); the child's own accesses went to the parent as foreign */
    hm__run.forked = 1;
    hm__run.perf = NULL;
    hm__run.damon = NULL;
    hm__run.refs = NULL;
    return;
  }
  atomic_store(&hm__run.stop, 1);
  pthread_join(hm__run.thread, NULL);
  hm__drain(); /* what arrived since the last period */
  if (hm__run.damon) _hm_smp_damon_stop(hm__run.damon);
  if (hm__run.refs) _hm_smp_refs_stop(hm__run.refs);
}

void _hm_smp_track_writes(void *base, size_t len) {
  if (!atomic_load(&hm__run.running) || !hm__run.refs) return;
  if (_hm_prim_pid() != hm__run.owner) return; /* a forked child: no drain */
  _hm_smp_refs_track(hm__run.refs, base, len);
}

uint64_t _hm_smp_cpu_ns(void) { return atomic_load(&hm__run.cpu_ns); }

uint64_t _hm_smp_program_cost_ns(void) { return _hm_smp_refs_touch_cost_ns(hm__run.refs); }

double _hm_smp_period(void) { return hm__run.period > 0 ? hm__run.period : 1.0; }

void _hm_smp_describe(char *out, size_t len) {
  int k = snprintf(out, len,
                   ",\"drains\":%llu,\"credited_samples\":%llu,\"freed_blocks_kept\":%llu,"
                   "\"freed_blocks_unmapped\":%llu%s",
                   (unsigned long long)hm__run.drains, (unsigned long long)(hm__run.credited),
                   (unsigned long long)hm__grave.buried, (unsigned long long)hm__grave.overflow,
                   hm__run.forked ? ",\"forked_child\":true" : "");
  if (k < 0 || (size_t)k >= len) return;
  if (hm__run.perf) _hm_smp_perf_describe(hm__run.perf, out + k, len - (size_t)k);
  else if (hm__run.damon) _hm_smp_damon_describe(hm__run.damon, out + k, len - (size_t)k);
  else if (hm__run.refs) _hm_smp_refs_describe(hm__run.refs, out + k, len - (size_t)k);
}
