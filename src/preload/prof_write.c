/* SPDX-License-Identifier: BSD-3-Clause */
/* Writing the allocation-site profile at exit (docs/formats.md, "Profile"):
 * one function per step. Collect the sites in use and remap their frames'
 * modules to the profile's numbering (the main program first); attribute
 * the small allocations to the site whose innermost frame made them; sort
 * the live-bytes events per site and time; then print the header, the
 * modules, one line per site (its live series replayed from the events)
 * and the end line, and replace the file with it. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "preload.h"
#include "prim/prim.h"
#include "prof.h"
#include "sampler.h"

static int hm__ev_cmp(const void *a, const void *b) {
  const _hm_pf_ev_t *x = a, *y = b;
  if (x->site != y->site) return x->site < y->site ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return 0;
}

static const char *hm__rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = _hm_prim_getenv(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (!*end && r >= 0) return v;
    }
  }
  return NULL;
}

static void hm__expand(const char *tpl, char *out, size_t len, const char *host,
                       const char *rank) {
  size_t k = 0;
  for (const char *p = tpl; *p && k + 1 < len; p++) {
    char buf[64];
    const char *ins = NULL;
    if (*p == '%' && p[1]) {
      p++;
      if (*p == 'h') ins = host;
      else if (*p == 'r') ins = rank ? rank : "norank";
      else if (*p == 'p') {
        snprintf(buf, sizeof buf, "%ld", (long)_hm_prim_pid());
        ins = buf;
      } else if (*p == '%') ins = "%";
      else {
        buf[0] = '%';
        buf[1] = *p;
        buf[2] = 0;
        ins = buf;
      }
      size_t n = strlen(ins);
      if (k + n >= len) break;
      memcpy(out + k, ins, n);
      k += n;
    } else {
      out[k++] = *p;
    }
  }
  out[k] = 0;
}

typedef struct hm__wsite_s {
  uint32_t slot;
  int nfr;
  int32_t mod[HM_PL_MAX_DEPTH];
  uint64_t off[HM_PL_MAX_DEPTH];
  uint64_t small_count, small_bytes;
} hm__wsite_t;

/* What the writer gathers before it prints. */
typedef struct hm__w_s {
  uint64_t wall;            /* ns of the run */
  hm__wsite_t *ws;          /* sites in use */
  size_t nused;
  int32_t *remap;           /* loaded module -> file index + 1 */
  int32_t *order;           /* file index -> loaded module */
  int nmods;
  uint64_t other_count, other_bytes; /* small allocations of no site */
  uint64_t near_count, near_bytes;   /* small ones of >= threshold / 4 */
  _hm_pf_ev_t *ev;          /* events up to wall, sorted per site then time */
  size_t nev;
} hm__w_t;

/* One site's frames as (file module, offset), modules numbered as first
 * seen; 0 frames when its innermost frame is in no module. */
static void hm__site_frames(hm__w_t *w, const _hm_pf_site_t *s, hm__wsite_t *o) {
  for (int f = 0; f < s->n; f++) {
    int lm = s->mod[f];
    if (lm < 0) break; /* a frame no module holds ends the stack */
    uint64_t off = s->a[f] - _hm_pl_module((size_t)lm)->bias;
    if (!w->remap[lm]) {
      w->order[w->nmods] = lm;
      w->remap[lm] = ++w->nmods;
    }
    o->mod[o->nfr] = w->remap[lm] - 1;
    o->off[o->nfr] = off;
    o->nfr++;
  }
}

/* Sites in use, their frames as (loaded module, offset) remapped to the
 * profile's module numbers (the main program first); 0 when there is no
 * main program. */
static int hm__collect_sites(hm__w_t *w) {
  for (size_t i = 0; i < _hm_pl_module_count(); i++)
    if (_hm_pl_module(i)->is_main) {
      w->remap[i] = ++w->nmods;
      w->order[0] = (int32_t)i;
    }
  if (!w->nmods) return 0;
  for (uint32_t slot = 1; slot < HM_PF_SITES; slot++) {
    _hm_pf_site_t *s = &_hm_pf.sites[slot];
    if (atomic_load(&s->hash) < 2 || !atomic_load(&s->allocs)) continue;
    hm__wsite_t *o = &w->ws[w->nused];
    memset(o, 0, sizeof *o);
    o->slot = slot;
    hm__site_frames(w, s, o);
    if (o->nfr) w->nused++;
  }
  return 1;
}

/* One thread's small allocations: to the site whose innermost frame
 * called malloc. */
static void hm__attribute_thread(hm__w_t *w, _hm_pf_tbuf_t *tb) {
  w->other_count += atomic_load(&tb->other_count);
  w->other_bytes += atomic_load(&tb->other_bytes);
  w->near_count += atomic_load(&tb->near_count);
  w->near_bytes += atomic_load(&tb->near_bytes);
  for (size_t i = 0; i < HM_PF_SMALL; i++) {
    uintptr_t ra = atomic_load(&tb->small[i].ra);
    if (!ra) continue;
    uint64_t c = atomic_load(&tb->small[i].count), by = atomic_load(&tb->small[i].bytes);
    size_t j = 0;
    if (w->nused <= 4096)
      for (; j < w->nused; j++)
        if (_hm_pf.sites[w->ws[j].slot].a[0] == ra) break;
    if (w->nused <= 4096 && j < w->nused) {
      w->ws[j].small_count += c;
      w->ws[j].small_bytes += by;
    } else {
      w->other_count += c;
      w->other_bytes += by;
    }
  }
}

static void hm__attribute_small(hm__w_t *w) {
  w->other_count = atomic_load(&_hm_pf.unsited_count);
  w->other_bytes = atomic_load(&_hm_pf.unsited_bytes);
  for (_hm_pf_tbuf_t *tb = atomic_load(&_hm_pf.threads); tb; tb = tb->next)
    hm__attribute_thread(w, tb);
}

/* Events, sorted per site then time. */
static void hm__collect_events(hm__w_t *w) {
  size_t nev = 0;
  for (_hm_pf_tbuf_t *tb = atomic_load(&_hm_pf.threads); tb; tb = tb->next)
    for (_hm_pf_chunk_t *c = atomic_load(&tb->head); c; c = atomic_load(&c->next))
      nev += atomic_load(&c->n);
  _hm_pf_ev_t *ev = nev ? malloc(nev * sizeof *ev) : NULL;
  if (nev && !ev) nev = 0;
  size_t k = 0;
  /* Other threads may still allocate while this runs (a signal's finisher,
   * or exit() while workers run): only what happened up to `wall` is
   * the run's, and the counters read below may be a little ahead of it. */
  for (_hm_pf_tbuf_t *tb = atomic_load(&_hm_pf.threads); tb && ev; tb = tb->next)
    for (_hm_pf_chunk_t *c = atomic_load(&tb->head); c; c = atomic_load(&c->next)) {
      size_t n = atomic_load(&c->n);
      if (k + n > nev) n = nev - k;
      for (size_t i = 0; i < n; i++)
        if (c->ev[i].t <= w->wall) ev[k++] = c->ev[i];
    }
  if (k) qsort(ev, k, sizeof *ev, hm__ev_cmp);
  w->ev = ev;
  w->nev = k;
}

/* The header line: the run, the sampler, the small allocations. */
static void hm__header(_hm_sb_t *sb, const hm__w_t *w, const char *host, const char *rank) {
  _hm_smp_portable_stats_t ps;
  _hm_smp_portable_stats(&ps);
  uint64_t cpu = ps.cpu_ns;
  double overhead =
      ((double)cpu + (double)ps.faults * (double)ps.fault_cost_ns) / (double)w->wall;
  int threads = atomic_load(&_hm_pf.max_threads);
  double period = strcmp(_hm_pf.sampler_name, "none") ? (double)_hm_pf.page / 64.0 : 1.0;
  char extra[1024] = "";
  if (_hm_pf.precise) {
    period = _hm_smp_period();
    cpu = _hm_smp_cpu_ns(); /* the PMU's interrupts are not in it */
    overhead = (double)(cpu + _hm_smp_program_cost_ns()) / (double)w->wall;
    _hm_smp_describe(extra, sizeof extra);
  }
  _hm_sb_printf(sb,
                "{\"magic\":\"hetmem-profile\",\"schema_version\":1,\"type\":\"header\","
                "\"binary\":0,\"pid\":%ld,\"rank\":%s,\"hostname\":",
                (long)_hm_prim_pid(), rank ? rank : "null");
  _hm_sb_json_str(sb, host);
  _hm_sb_printf(sb,
                ",\"start_unix\":%.6f,\"wall_ns\":%llu,\"depth\":%d,\"threshold\":%zu,"
                "\"bytes_per_access\":64,\"threads\":%d,\"sampler\":{\"name\":\"%s\","
                "\"period\":%.1f,\"overhead\":%.6f,\"interval_us\":%llu,"
                "\"pages_per_block\":%u,\"periods\":%llu,\"armed_pages\":%llu,\"faults\":%llu,"
                "\"fault_cost_ns\":%llu,\"sampler_cpu_ns\":%llu,\"handler_lost\":%s,"
                "\"probed\":%s%s},\"small\":{\"count\":%llu,\"bytes\":%llu,"
                "\"near_threshold\":{\"from\":%zu,\"count\":%llu,\"bytes\":%llu}},"
                "\"stopped_by_signal\":%d,\"outside_peak_bytes\":%llu",
                _hm_pf.start_unix, (unsigned long long)w->wall, _hm_pf.cfg.depth,
                _hm_pf.cfg.threshold, threads > 0 ? threads : 1, _hm_pf.sampler_name, period,
                overhead, (unsigned long long)_hm_pf.cfg.period_us, HM_SMP_PAGES_PER_BLOCK,
                (unsigned long long)ps.periods, (unsigned long long)ps.armings,
                (unsigned long long)ps.faults, (unsigned long long)ps.fault_cost_ns,
                (unsigned long long)cpu, ps.handler_lost ? "true" : "false", _hm_pf.probed,
                extra, (unsigned long long)w->other_count, (unsigned long long)w->other_bytes,
                _hm_pf.cfg.threshold / 4, (unsigned long long)w->near_count,
                (unsigned long long)w->near_bytes, _hm_pl_term_signal(),
                (unsigned long long)_hm_pf_rest_peak());
  _hm_pl_statics_json(sb); /* not sites: the reader says so */
  _hm_sb_puts(sb, "}\n");
}

static void hm__modules(_hm_sb_t *sb, const hm__w_t *w) {
  for (int m = 0; m < w->nmods; m++) {
    const _hm_pl_module_t *mod = _hm_pl_module((size_t)w->order[m]);
    _hm_sb_printf(sb, "{\"type\":\"module\",\"index\":%d,\"path\":", m);
    _hm_sb_json_str(sb, mod->path);
    _hm_sb_printf(sb, ",\"build_id\":\"%s\"}\n", mod->build_id);
  }
}

/* The replay of one site's events [*e, ...): its exact peak, and the
 * series of bucket maxima written into live. */
typedef struct hm__replay_s {
  int64_t cur, peak, bmax, last_emitted;
  uint64_t bucket, width;
  const char *sep;
} hm__replay_t;

static void hm__point(_hm_sb_t *live, hm__replay_t *r, uint64_t t, int64_t v) {
  _hm_sb_printf(live, "%s[%llu,%lld]", r->sep, (unsigned long long)t, (long long)v);
  r->sep = ",";
  r->last_emitted = v;
}

/* A new bucket b starts: the last one's maximum, and the level between. */
static void hm__bucket(_hm_sb_t *live, hm__replay_t *r, uint64_t b) {
  if (r->bucket != UINT64_MAX && r->bmax != r->last_emitted)
    hm__point(live, r, r->bucket * r->width, r->bmax);
  if (r->bucket != UINT64_MAX && b > r->bucket + 1 && r->cur != r->last_emitted)
    hm__point(live, r, (r->bucket + 1) * r->width, r->cur); /* the level between the buckets */
  r->bucket = b;
  r->bmax = r->cur;
}

static int64_t hm__replay(const hm__w_t *w, size_t *e, uint32_t slot, _hm_sb_t *live) {
  hm__replay_t r = {0, 0, 0, -1, UINT64_MAX, w->wall / HM_PF_POINTS + 1, ""};
  for (; *e < w->nev && w->ev[*e].site == slot; (*e)++) {
    uint64_t b = w->ev[*e].t / r.width;
    if (b != r.bucket) hm__bucket(live, &r, b);
    r.cur += w->ev[*e].delta;
    if (r.cur < 0) r.cur = 0;
    if (r.cur > r.bmax) r.bmax = r.cur;
    if (r.cur > r.peak) r.peak = r.cur;
  }
  if (r.bucket != UINT64_MAX) {
    if (r.bmax != r.last_emitted) hm__point(live, &r, r.bucket * r.width, r.bmax);
    if (r.cur != r.last_emitted && (r.bucket + 1) * r.width <= w->wall)
      hm__point(live, &r, (r.bucket + 1) * r.width, r.cur);
  }
  return r.peak;
}

/* The lifetime object of a site with releases, and its remaining members. */
static void hm__site_tail(_hm_sb_t *sb, _hm_pf_site_t *s, const hm__wsite_t *o,
                          uint64_t allocs, uint64_t frees) {
  uint64_t mn = atomic_load(&s->lt_min), mx = atomic_load(&s->lt_max);
  if (frees && mn <= mx) { /* mn > mx: a release still being recorded */
    double mean = (double)atomic_load(&s->lt_sum) / (double)frees;
    if (mean < (double)mn) mean = (double)mn;
    if (mean > (double)mx) mean = (double)mx;
    _hm_sb_printf(sb, ",\"lifetime_ns\":{\"min\":%llu,\"mean\":%.1f,\"max\":%llu}",
                  (unsigned long long)mn, mean, (unsigned long long)mx);
  }
  uint64_t shorts = (atomic_load(&s->shorts) + HM_SMP_FIX / 2) / HM_SMP_FIX;
  _hm_sb_printf(sb, ",\"never_freed\":%llu,\"samples\":{\"loads\":%llu,\"stores\":%llu",
                (unsigned long long)(allocs - frees),
                (unsigned long long)((atomic_load(&s->loads) + HM_SMP_FIX / 2) / HM_SMP_FIX),
                (unsigned long long)((atomic_load(&s->stores) + HM_SMP_FIX / 2) / HM_SMP_FIX));
  uint64_t firsts = (atomic_load(&s->firsts) + HM_SMP_FIX / 2) / HM_SMP_FIX;
  if (firsts) _hm_sb_printf(sb, ",\"first\":%llu", (unsigned long long)firsts);
  uint64_t shorts2 = (atomic_load(&s->shorts2) + HM_SMP_FIX / 2) / HM_SMP_FIX;
  if (shorts || shorts2)
    _hm_sb_printf(sb, ",\"short\":[%llu,%llu]", (unsigned long long)shorts,
                  (unsigned long long)shorts2);
  /* with `short` always: without it (no pair saw the site in a first
   * window, but a second window did) the sums would be read the old way */
  if (shorts || shorts2 || s->pairs_seen)
    _hm_sb_printf(sb, ",\"short_reuse\":[%u,%u,%llu]", s->pairs_seen, s->pairs_reused,
                  (unsigned long long)((s->reuse_fix + HM_SMP_FIX / 2) / HM_SMP_FIX));
  _hm_sb_printf(sb, "},\"small\":{\"count\":%llu,\"bytes\":%llu}}\n",
                (unsigned long long)o->small_count, (unsigned long long)o->small_bytes);
}

/* One site's line; *e moves past its events. */
static void hm__site_json(_hm_sb_t *sb, const hm__w_t *w, const hm__wsite_t *o, size_t *e) {
  _hm_pf_site_t *s = &_hm_pf.sites[o->slot];
  while (*e < w->nev && w->ev[*e].site < o->slot) (*e)++;
  _hm_sb_t live;
  _hm_sb_init(&live);
  int64_t peak = hm__replay(w, e, o->slot, &live);
  char *livetxt = NULL;
  if (_hm_sb_take(&live, &livetxt) != 0) livetxt = NULL;
  uint64_t allocs = atomic_load(&s->allocs), frees = atomic_load(&s->frees);
  uint64_t bytes = atomic_load(&s->bytes);
  if (frees > allocs) frees = allocs;
  int series = 1;
  if ((uint64_t)peak > bytes) { /* an allocation's event seen before its count */
    peak = (int64_t)bytes;
    series = 0;
  }
  _hm_sb_puts(sb, "{\"type\":\"site\",\"frames\":[");
  for (int f = 0; f < o->nfr; f++)
    _hm_sb_printf(sb, "%s[%d,%llu]", f ? "," : "", o->mod[f], (unsigned long long)o->off[f]);
  _hm_sb_printf(sb,
                "],\"allocs\":%llu,\"bytes\":%llu,\"max_bytes\":%llu,"
                "\"peak_live_bytes\":%lld,%s\"live\":[%s]",
                (unsigned long long)allocs, (unsigned long long)bytes,
                (unsigned long long)atomic_load(&s->max_bytes), (long long)peak,
                s->is_static ? "\"static\":true," : "", livetxt && series ? livetxt : "");
  free(livetxt);
  hm__site_tail(sb, s, o, allocs, frees);
}

/* Replaces the profile file with text; one line on stderr when it cannot. */
static void hm__emit(const char *path, const char *text) {
  char why[HM_PATH_MAX + 256];
  if (_hm_pl_out_replace(path, text, why, sizeof why) == 0) return;
  char msg[HM_PATH_MAX + 512];
  int n = snprintf(msg, sizeof msg, "hetmem: cannot write profile '%s': %s\n", path, why);
  if (n > 0) _hm_prim_stderr(msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* Prints what w gathered into the profile file. */
static void hm__print(const hm__w_t *w) {
  char host[256] = "";
  (void)_hm_prim_hostname(host, sizeof host - 1);
  const char *rank = hm__rank();
  char path[HM_PATH_MAX];
  hm__expand(_hm_pf.path_template, path, sizeof path, host, rank);
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  hm__header(&sb, w, host, rank);
  hm__modules(&sb, w);
  size_t e = 0;
  for (size_t i = 0; i < w->nused; i++) hm__site_json(&sb, w, &w->ws[i], &e);
  _hm_sb_printf(&sb, "{\"type\":\"end\",\"sites\":%zu,\"modules\":%d}\n", w->nused, w->nmods);
  char *text = NULL;
  if (_hm_sb_take(&sb, &text) == 0 && text) {
    hm__emit(path, text);
    free(text);
  }
}

void _hm_pf_write(void) {
  hm__w_t w;
  memset(&w, 0, sizeof w);
  w.wall = _hm_pl_prof_now();
  if (w.wall == 0) w.wall = 1;
  w.ws = malloc(sizeof *w.ws * (atomic_load(&_hm_pf.nsites_used) + 1));
  w.remap = calloc(HM_PL_MAX_MODULES, sizeof *w.remap);
  w.order = calloc(HM_PL_MAX_MODULES, sizeof *w.order);
  if (w.ws && w.remap && w.order && hm__collect_sites(&w)) {
    hm__attribute_small(&w);
    hm__collect_events(&w);
    hm__print(&w);
    free(w.ev);
  }
  free(w.ws);
  free(w.remap);
  free(w.order);
}
