/* SPDX-License-Identifier: BSD-3-Clause */
/* The allocation-site profiler of the interposer (`hetmem profile`).
 *
 * What it records, and how without a lock on any hook:
 *  - sites: a global open-addressing table keyed by the hash of the raw
 *    return-address chain, slots claimed with CAS, counters updated with
 *    relaxed atomics (only allocations at or above the threshold get here);
 *  - live bytes over time: every large allocation and release appends an
 *    event (time, site, +/-bytes) to a buffer of the calling thread; at exit
 *    the events are sorted per site and replayed into a step function whose
 *    points are bucket maxima (at most HM_PF_POINTS buckets over the run);
 *  - small allocations: counted per caller return address in a table of the
 *    calling thread (no atomics read-modify-write: one writer), attributed at
 *    exit to the site whose innermost frame is that return address;
 *  - accesses: a sampler of sampler.h (a precise one, or the portable one
 *    of sampler_portable.c: page protection), crediting sites.
 * The profile is written at exit by prof_write.c. --sampler none disables
 * the access sampler. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "preload.h"
#include "prim/prim.h"
#include "prof.h"
#include "sampler.h"

_hm_pf_state_t _hm_pf;



static __thread _hm_pf_tbuf_t *hm__tb __attribute__((tls_model("initial-exec")));

static uint64_t hm__mono(void) { return _hm_prim_now_ns(); }

uint64_t _hm_pl_prof_now(void) { return hm__mono() - _hm_pf.t0; }

static _hm_pf_tbuf_t *hm__tbuf(void) {
  _hm_pf_tbuf_t *tb = hm__tb;
  if (__builtin_expect(tb != NULL, 1)) return tb;
  tb = _hm_prim_map_raw(sizeof *tb);
  if (!tb) return NULL;
  _hm_pf_tbuf_t *head = atomic_load(&_hm_pf.threads);
  do tb->next = head;
  while (!atomic_compare_exchange_weak(&_hm_pf.threads, &head, tb));
  hm__tb = tb;
  return tb;
}

static void hm__event(uint32_t site, int64_t delta) {
  _hm_pl_rest_live(delta);
  _hm_pf_tbuf_t *tb = hm__tbuf();
  if (!tb) return;
  _hm_pf_chunk_t *c = tb->cur;
  if (!c || atomic_load_explicit(&c->n, memory_order_relaxed) == HM_PF_CHUNK) {
    _hm_pf_chunk_t *nc = _hm_prim_map_raw(sizeof *nc);
    if (!nc) return;
    if (c) atomic_store_explicit(&c->next, nc, memory_order_release);
    else atomic_store_explicit(&tb->head, nc, memory_order_release);
    tb->cur = c = nc;
  }
  size_t i = atomic_load_explicit(&c->n, memory_order_relaxed);
  c->ev[i] = (_hm_pf_ev_t){_hm_pl_prof_now(), site, 0, delta};
  atomic_store_explicit(&c->n, i + 1, memory_order_release);
}

static void hm__min(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v < cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

uint32_t _hm_pl_prof_site(const _hm_pl_stack_t *st) {
  if (!_hm_pf.sites || st->n == 0) return 0;
  uint32_t h = (uint32_t)(st->hash ^ (st->hash >> 32));
  for (uint32_t i = 0; i < HM_PF_SITES; i++) {
    uint32_t slot = (h + i) & (HM_PF_SITES - 1);
    if (slot == 0) continue;
    _hm_pf_site_t *s = &_hm_pf.sites[slot];
    uint64_t cur = atomic_load_explicit(&s->hash, memory_order_acquire);
    if (cur == 0) {
      if (atomic_compare_exchange_strong(&s->hash, &cur, 1)) {
        s->n = st->n;
        memcpy(s->a, st->a, (size_t)st->n * sizeof(uintptr_t));
        for (int f = 0; f < st->n; f++) { /* once per site: may rescan the modules */
          uint64_t off;
          s->mod[f] = (int16_t)_hm_pl_frame(st->a[f], &off);
        }
        atomic_store(&s->lt_min, UINT64_MAX);
        atomic_store_explicit(&s->hash, st->hash, memory_order_release);
        atomic_fetch_add(&_hm_pf.nsites_used, 1);
        return slot;
      }
    }
    while (cur == 1) cur = atomic_load_explicit(&s->hash, memory_order_acquire); /* being filled */
    if (cur == st->hash && s->n == st->n &&
        memcmp(s->a, st->a, (size_t)st->n * sizeof(uintptr_t)) == 0)
      return slot;
  }
  return 0;
}

void _hm_pl_prof_alloc(uint32_t site, size_t size) {
  if (!site) {
    atomic_fetch_add_explicit(&_hm_pf.unsited_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&_hm_pf.unsited_bytes, size, memory_order_relaxed);
    return;
  }
  _hm_pf_site_t *s = &_hm_pf.sites[site];
  atomic_fetch_add_explicit(&s->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->bytes, size, memory_order_relaxed);
  _hm_pl_atomic_max(&s->max_bytes, size);
  hm__event(site, (int64_t)size);
}

int _hm_pl_prof_bury(void *base, size_t maplen, uintptr_t key, size_t req, uint32_t site,
                     uint64_t t_alloc) {
  size_t pg = _hm_pl_ctx.page; /* the mapping with its guard pages (route.c's own blocks) */
  return _hm_smp_bury((char *)base - pg, maplen + 2 * pg, key, key + req, site,
                      _hm_pf.t0 + t_alloc);
}

void _hm_pl_prof_own_mapped(void *base, size_t len) { _hm_smp_track_writes(base, len); }

void _hm_pl_prof_mark_static(uint32_t site) {
  if (site && _hm_pf.sites) _hm_pf.sites[site].is_static = 1;
}

void _hm_pl_prof_live(uint32_t site, int64_t delta) {
  if (site && _hm_pf.sites) hm__event(site, delta);
}

void _hm_pl_prof_release(_hm_pl_block_t *b, uint32_t site, uint64_t t, uintptr_t key,
                         size_t req, int event) {
  /* The caller has taken b out of the table: once no sampler pins it, no
   * page of it can be armed again. */
  while (atomic_load(&b->pin)) _hm_prim_yield();
  _hm_smp_portable_disarm(key, key + req); /* nothing unless it samples */
  if (!site || !_hm_pf.sites) return;
  _hm_pf_site_t *s = &_hm_pf.sites[site];
  uint64_t now = _hm_pl_prof_now();
  uint64_t lt = now > t ? now - t : 0;
  atomic_fetch_add_explicit(&s->frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->lt_sum, lt, memory_order_relaxed);
  hm__min(&s->lt_min, lt);
  _hm_pl_atomic_max(&s->lt_max, lt);
  if (event) hm__event(site, -(int64_t)req);
}

void _hm_pl_prof_small(uintptr_t ra, size_t size) {
  _hm_pf_tbuf_t *tb = hm__tbuf();
  if (!tb) return;
  if (size >= _hm_pf.cfg.threshold / 4) {
    atomic_store_explicit(&tb->near_count,
                          atomic_load_explicit(&tb->near_count, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&tb->near_bytes,
                          atomic_load_explicit(&tb->near_bytes, memory_order_relaxed) + size,
                          memory_order_relaxed);
  }
  size_t h = (size_t)((ra * 0x9E3779B97F4A7C15ull) >> 52) & (HM_PF_SMALL - 1);
  for (unsigned i = 0; i < 8; i++) {
    _hm_pf_small_t *e = &tb->small[(h + i) & (HM_PF_SMALL - 1)];
    uintptr_t cur = atomic_load_explicit(&e->ra, memory_order_relaxed);
    if (cur == 0) {
      atomic_store_explicit(&e->ra, ra, memory_order_relaxed);
      cur = ra;
    }
    if (cur == ra) {
      /* one writer: a load and a store, no locked instruction */
      atomic_store_explicit(&e->count, atomic_load_explicit(&e->count, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      atomic_store_explicit(&e->bytes,
                            atomic_load_explicit(&e->bytes, memory_order_relaxed) + size,
                            memory_order_relaxed);
      return;
    }
  }
  atomic_store_explicit(&tb->other_count,
                        atomic_load_explicit(&tb->other_count, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  atomic_store_explicit(&tb->other_bytes,
                        atomic_load_explicit(&tb->other_bytes, memory_order_relaxed) + size,
                        memory_order_relaxed);
}

void _hm_pl_prof_thread(int delta) {
  int now = atomic_fetch_add(&_hm_pf.live_threads, delta) + delta;
  int cur = atomic_load(&_hm_pf.max_threads);
  while (now > cur && !atomic_compare_exchange_weak(&_hm_pf.max_threads, &cur, now)) {
  }
}

/* A window's pages are reuse only beyond this multiple of what its growth
 * to the second window explains: the windows' lengths are each mapping's
 * own to within about half (a sweep's reuse read -0.45..+0.3 of its first
 * window's pages in repeated runs, a random gather's 0.91-0.93). */
#define HM__PAIR_SLACK 1.5
/* and a pair shows reuse when it is over this part of the first window's */
#define HM__PAIR_SHARE 0.25

/* A pair of short windows ended (the sink's pair, sampler thread): each site's
 * pages in each window since the last pair; the first window's pages
 * beyond what the growth explains are reused ones. Kept per pair, so that
 * the profile can tell reuse in most of the pairs a site was touched in
 * (a gather all run long) from reuse in a few: a sweep that stopped
 * within a pair (its pass ended) reads as reuse in that pair alone, and
 * summed over the run it was as large as a gather's. Cost: a look at every
 * site slot, once a pair (16k slots: ~50 us). */
static void hm__pair(void *arg, double ratio) {
  (void)arg;
  for (uint32_t i = 1; i < HM_PF_SITES; i++) {
    _hm_pf_site_t *s = &_hm_pf.sites[i];
    if (atomic_load_explicit(&s->hash, memory_order_acquire) < 2) continue;
    uint64_t u1 = atomic_load_explicit(&s->shorts, memory_order_relaxed);
    uint64_t u2 = atomic_load_explicit(&s->shorts2, memory_order_relaxed);
    double d1 = (double)(u1 - s->at1), d2 = (double)(u2 - s->at2);
    s->at1 = u1, s->at2 = u2;
    if (d1 <= 0.0) continue;
    s->pairs_seen++;
    double x = d1 - HM__PAIR_SLACK * (d2 > d1 ? d2 - d1 : 0.0) * ratio;
    if (x <= 0.0) continue;
    s->reuse_fix += (uint64_t)x;
    if (x > HM__PAIR_SHARE * d1) s->pairs_reused++;
  }
}

/* Credits from a precise sampler (sampler.c's thread). */
static void hm__credit(void *arg, uint32_t site, uint64_t wfix, int what) {
  (void)arg;
  if (!site || site >= HM_PF_SITES) return;
  _hm_pf_site_t *s = &_hm_pf.sites[site];
  _Atomic uint64_t *to = what == HM_SMP_STORE   ? &s->stores
                         : what == HM_SMP_SHORT ? &s->shorts
                         : what == HM_SMP_SHORT2 ? &s->shorts2
                         : what == HM_SMP_FIRST  ? &s->firsts
                                                : &s->loads;
  atomic_fetch_add_explicit(to, wfix, memory_order_relaxed);
}

static const _hm_smp_sink_t hm__sink = {hm__credit, hm__pair, NULL};

/* The profile is written at exit: a directory it cannot go into is
 * refused now, not found after the whole run (a directory part with %
 * expansions is only known then), and so is one where another user could
 * swap the file (checked again at exit). */
static int hm__check_dest(char *why, size_t len) {
  const char *slash = strrchr(_hm_pf.path_template, '/');
  if (slash) {
    char dir[sizeof _hm_pf.path_template];
    size_t dl = slash == _hm_pf.path_template ? 1 : (size_t)(slash - _hm_pf.path_template);
    memcpy(dir, _hm_pf.path_template, dl);
    dir[dl] = 0;
    int drc = strchr(dir, '%') ? 0 : _hm_prim_check_writable_dir(dir);
    if (drc) {
      snprintf(why, len, "cannot write the profile into '%s': %s", dir, strerror(-drc));
      return drc;
    }
  }
  if (!strchr(_hm_pf.path_template, '%')) {
    char dwhy[HM_PATH_MAX + 256];
    int drc = _hm_pl_out_dir_check(_hm_pf.path_template, dwhy, sizeof dwhy);
    if (drc) {
      snprintf(why, len, "cannot write the profile: %s", dwhy);
      return drc;
    }
  }
  return 0;
}

/* The access sampler s (auto, none or a name): a precise one of sampler.c
 * when one is asked for or found, else the portable one. */
static int hm__start_sampler(const char *s, char *why, size_t len) {
  if (strcmp(s, "none") == 0) {
    snprintf(_hm_pf.sampler_name, sizeof _hm_pf.sampler_name, "none");
    return 0;
  }
  _hm_smp_cfg_t sc = {_hm_pf.fsroot, _hm_pf.cfg.period_us, 0, _hm_prim_pid(), NULL,
                      _hm_pl_rest_tick};
  _hm_smp_kind_t kind = HM_SMP_PORTABLE;
  int src = _hm_smp_select(&sc, s, &kind, _hm_pf.probed, sizeof _hm_pf.probed, why, len);
  if (src) return src;
  if (kind != HM_SMP_PORTABLE) {
    if ((src = _hm_smp_run(&sc, kind, _hm_pf.cfg.table, &hm__sink, why, len))) return src;
    snprintf(_hm_pf.sampler_name, sizeof _hm_pf.sampler_name, "%s", _hm_smp_kind_name(kind));
    _hm_pf.precise = 1;
    return 0;
  }
  snprintf(_hm_pf.sampler_name, sizeof _hm_pf.sampler_name, "portable");
  if (_hm_pf.cfg.period_us < 100) _hm_pf.cfg.period_us = 100;
  sc.period_us = _hm_pf.cfg.period_us;
  if ((src = _hm_smp_portable_start(&sc, _hm_pf.cfg.table, &hm__sink, why, len)))
    return src;
  _hm_pf.portable = 1;
  return 0;
}

int _hm_pl_prof_start(const _hm_pl_prof_cfg_t *cfg, char *why, size_t len) {
  int rc;
  _hm_pf.cfg = *cfg;
  snprintf(_hm_pf.path_template, sizeof _hm_pf.path_template, "%s", cfg->path_template);
  _hm_pf.cfg.path_template = _hm_pf.path_template;
  _hm_pf.t0 = hm__mono();
  uint64_t rt = _hm_prim_realtime_ns();
  _hm_pf.start_unix = (double)(rt / 1000000000u) + (double)(rt % 1000000000u) / 1e9;
  _hm_pf.page = _hm_prim_page_size();
  if (_hm_pf.cfg.depth < 1 || _hm_pf.cfg.depth > HM_PL_MAX_DEPTH) {
    snprintf(why, len, "profile depth must be 1..%d", HM_PL_MAX_DEPTH);
    return -EINVAL;
  }
  if ((rc = hm__check_dest(why, len))) return rc;
  _hm_pf.sites = _hm_prim_map_raw(HM_PF_SITES * sizeof(_hm_pf_site_t));
  if (!_hm_pf.sites) {
    snprintf(why, len, "cannot reserve the site table");
    return -ENOMEM;
  }
  snprintf(_hm_pf.probed, sizeof _hm_pf.probed, "{}");
  snprintf(_hm_pf.fsroot, sizeof _hm_pf.fsroot, "%s", cfg->fsroot ? cfg->fsroot : "/");
  return hm__start_sampler(cfg->sampler && *cfg->sampler ? cfg->sampler : "auto", why, len);
}

int _hm_pl_prof_per_mapping(void) { return strcmp(_hm_pf.sampler_name, "refs") == 0; }

int _hm_pl_prof_segv_action(const struct sigaction *act, struct sigaction *old) {
  return _hm_smp_portable_segv_action(act, old);
}

/* Called once per process (stats.c's _hm_pl_outputs runs the writers once). */
void _hm_pl_prof_finish(void) {
  if (!_hm_pf.sites) return;
  if (_hm_pf.precise) _hm_smp_halt();
  if (_hm_pf.portable) _hm_smp_portable_stop();
  _hm_pf_write();
}
