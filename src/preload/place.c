/* SPDX-License-Identifier: BSD-3-Clause */
/* Placement in the interposer: the compact table that `hetmem run
 * --placement` writes (docs/formats.md, "Compact placement") and the
 * matching of a captured stack to a site.
 *
 * The table is read once at start-up (whole, through prim, then one parser
 * per section: we run from the constructor, before main) into arrays that never change afterwards, so
 * matching reads them without synchronisation.
 *
 * Matching is hetmem.placement.match: frames become (placement module,
 * offset) pairs, innermost first; among the sites that agree with the stack
 * on their common length L >= 1, the longest L wins, ties to the lowest id.
 * Each thread keeps a direct-mapped cache from raw return-address chains to
 * the result (raw addresses are stable within a process), so a site that
 * allocates repeatedly pays the scan once per thread. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "prim/prim.h"

#define HM__PMOD_MAX 1024
#define HM__CACHE 512 /* entries per thread */
#define HM__CACHE_FRAMES 16

typedef struct hm__pmod_s {
  char build_id[129];
  char path[512];
} hm__pmod_t;

typedef struct hm__psite_s {
  uint32_t id, tier, n, first; /* frames at frames[first .. first+n) */
  uint64_t split;              /* fast-tier prefix of each allocation (0: none) */
} hm__psite_t;

typedef struct hm__pframe_s {
  int32_t mod;
  uint64_t off;
} hm__pframe_t;

static struct {
  _hm_pl_tier_t tiers[HM_PL_MAX_TIERS];
  size_t ntiers;
  hm__pmod_t *mods;
  size_t nmods;
  hm__psite_t *sites;
  size_t nsites;
  hm__pframe_t *frames;
  size_t nframes;
  /* loaded module index -> placement module (-2: not yet decided, -1: none) */
  _Atomic int lm2pm[HM_PL_MAX_MODULES];
  _Atomic uint64_t hits, misses;
} hm__pt;

typedef struct hm__centry_s {
  uint64_t hash;
  unsigned gen;
  int32_t site;
  int32_t n;
  uintptr_t a[HM__CACHE_FRAMES];
} hm__centry_t;

static __thread hm__centry_t *hm__cache __attribute__((tls_model("initial-exec")));

static int hm__bad(char *why, size_t len, int line, const char *what) {
  snprintf(why, len, "placement table, line %d: %s", line, what);
  return -EINVAL;
}

/* The rest of a line after n space-separated fields. */
static const char *hm__rest(const char *s, int n) {
  for (int i = 0; i < n; i++) {
    s = strchr(s, ' ');
    if (!s) return NULL;
    s++;
  }
  return s;
}

/* The placement file, read whole, handed out one line at a time. */
typedef struct hm__reader_s {
  char *buf;
  size_t len, pos;
  int ln;     /* the line last handed out */
  char *why;
  size_t wlen;
  size_t fcap; /* frames allocated */
} hm__reader_t;

#define HM__EOF 1 /* no line left: the table has no 'end' */

static int hm__slurp(hm__reader_t *r, const char *path) {
  int fd = _hm_prim_open_read(path);
  if (fd < 0) {
    snprintf(r->why, r->wlen, "cannot read placement table '%s': %s", path, strerror(-fd));
    return fd;
  }
  size_t cap = 0;
  for (;;) {
    if (r->len + 4096 > cap) {
      char *nb = realloc(r->buf, cap = (cap + 4096) * 2);
      if (!nb) break; /* what was read is parsed (as a failed getline would) */
      r->buf = nb;
    }
    ssize_t n = _hm_prim_read(fd, r->buf + r->len, cap - r->len);
    if (n <= 0) break; /* a read error ends the file, as with getline */
    r->len += (size_t)n;
  }
  _hm_prim_close(fd);
  return 0;
}

/* The next line, its newline replaced by NUL: 0, HM__EOF, or an error. */
static int hm__line(hm__reader_t *r, char **line) {
  if (r->pos >= r->len) return HM__EOF;
  r->ln++;
  char *s = r->buf + r->pos;
  char *nl = memchr(s, '\n', r->len - r->pos);
  if (!nl) return hm__bad(r->why, r->wlen, r->ln, "truncated (no newline)");
  *nl = 0;
  r->pos = (size_t)(nl - r->buf) + 1;
  *line = s;
  return 0;
}

static int hm__oom(hm__reader_t *r) {
  snprintf(r->why, r->wlen, "out of memory reading the placement table");
  return -ENOMEM;
}

/* A count line "<kw> <n>". */
static int hm__count(hm__reader_t *r, const char *kw, size_t *want) {
  char *line;
  int rc = hm__line(r, &line), used = -1;
  if (rc) return rc;
  if (sscanf(line, kw, want, &used) != 1 || used != (int)strlen(line))
    return hm__bad(r->why, r->wlen, r->ln, "bad count line");
  return 0;
}

static int hm__parse_header(hm__reader_t *r) {
  char *line;
  int rc = hm__line(r, &line);
  if (rc) return rc;
  if (strcmp(line, "hetmem-placement-compact 1") != 0)
    return hm__bad(r->why, r->wlen, r->ln, "not a version-1 compact placement");
  return 0;
}

static int hm__parse_tiers(hm__reader_t *r) {
  size_t want;
  int rc = hm__count(r, "tiers %zu%n", &want);
  if (rc) return rc;
  if (want == 0 || want > HM_PL_MAX_TIERS)
    return hm__bad(r->why, r->wlen, r->ln, "between 1 and 8 tiers");
  for (size_t got = 0; got < want; got++) {
    char *line;
    size_t idx;
    int numa, used = -1;
    unsigned long long capb;
    _hm_pl_tier_t *t = &hm__pt.tiers[got];
    if ((rc = hm__line(r, &line))) return rc;
    if (sscanf(line, "tier %zu %15s %d %llu %n", &idx, t->kind, &numa, &capb, &used) != 4 ||
        used < 0 || idx != got || numa < -1)
      return hm__bad(r->why, r->wlen, r->ln, "bad tier line");
    t->numa = numa;
    t->capacity = capb;
    snprintf(t->name, sizeof t->name, "%s", line + used);
  }
  hm__pt.ntiers = want;
  return 0;
}

static int hm__parse_module(hm__reader_t *r, size_t got) {
  char *line;
  size_t idx;
  char bid[130];
  int rc = hm__line(r, &line);
  if (rc) return rc;
  const char *p = hm__rest(line, 3);
  if (sscanf(line, "module %zu %129s", &idx, bid) != 2 || idx != got || !p || !*p ||
      strlen(bid) > 128)
    return hm__bad(r->why, r->wlen, r->ln, "bad module line");
  hm__pmod_t *m = &hm__pt.mods[got];
  /* strlen(bid) <= 128 was checked above, so this always fits. */
  size_t blen = strcmp(bid, "-") ? strlen(bid) : 0;
  memcpy(m->build_id, bid, blen);
  m->build_id[blen] = 0;
  snprintf(m->path, sizeof m->path, "%s", p);
  return 0;
}

static int hm__parse_modules(hm__reader_t *r) {
  size_t want;
  int rc = hm__count(r, "modules %zu%n", &want);
  if (rc) return rc;
  if (want > HM__PMOD_MAX) return hm__bad(r->why, r->wlen, r->ln, "too many modules");
  hm__pt.mods = calloc(want ? want : 1, sizeof *hm__pt.mods);
  if (!hm__pt.mods) return hm__oom(r);
  for (size_t got = 0; got < want; got++)
    if ((rc = hm__parse_module(r, got))) return rc;
  hm__pt.nmods = want;
  return 0;
}

/* The frames " mod:off" x n of a site line, appended to the frame array. */
static int hm__parse_frames(hm__reader_t *r, const char *p, unsigned n) {
  if (hm__pt.nframes + n > r->fcap) {
    r->fcap = (r->fcap + n) * 2;
    hm__pframe_t *nf = realloc(hm__pt.frames, r->fcap * sizeof *nf);
    if (!nf) return hm__oom(r);
    hm__pt.frames = nf;
  }
  unsigned i;
  for (i = 0; i < n; i++) {
    unsigned mod;
    unsigned long long off;
    int u = -1;
    if (sscanf(p, " %u:%llx%n", &mod, &off, &u) != 2 || u < 0 || mod >= hm__pt.nmods) break;
    hm__pt.frames[hm__pt.nframes + i].mod = (int32_t)mod;
    hm__pt.frames[hm__pt.nframes + i].off = off;
    p += u;
  }
  if (i != n || *p) return hm__bad(r->why, r->wlen, r->ln, "bad frame in site line");
  return 0;
}

static int hm__parse_site(hm__reader_t *r, size_t got) {
  char *line;
  unsigned id, tier, n;
  int used = -1;
  int rc = hm__line(r, &line);
  if (rc) return rc;
  if (sscanf(line, "site %u %u %u%n", &id, &tier, &n, &used) != 3 || used < 0 || n < 1 ||
      n > HM_PL_MAX_DEPTH || tier >= hm__pt.ntiers || (got && id <= hm__pt.sites[got - 1].id))
    return hm__bad(r->why, r->wlen, r->ln, "bad site line (ids must increase, tier must exist)");
  if ((rc = hm__parse_frames(r, line + used, n))) return rc;
  hm__pt.sites[got] = (hm__psite_t){id, tier, n, (uint32_t)hm__pt.nframes, 0};
  hm__pt.nframes += n;
  return 0;
}

static int hm__parse_sites(hm__reader_t *r) {
  size_t want;
  int rc = hm__count(r, "sites %zu%n", &want);
  if (rc) return rc;
  if (want > (1u << 24)) return hm__bad(r->why, r->wlen, r->ln, "too many sites");
  hm__pt.sites = calloc(want ? want : 1, sizeof *hm__pt.sites);
  if (!hm__pt.sites) return hm__oom(r);
  for (size_t got = 0; got < want; got++)
    if ((rc = hm__parse_site(r, got))) return rc;
  hm__pt.nsites = want;
  return 0;
}

/* "split <id> <bytes>": the site's allocations start on the fastest tier. */
static int hm__parse_split(hm__reader_t *r, const char *line) {
  unsigned id;
  unsigned long long bytes;
  int used = -1;
  if (sscanf(line, "split %u %llu%n", &id, &bytes, &used) != 2 || used != (int)strlen(line))
    return hm__bad(r->why, r->wlen, r->ln, "bad split line");
  for (size_t i = 0; i < hm__pt.nsites; i++)
    if (hm__pt.sites[i].id == id) {
      hm__pt.sites[i].split = bytes;
      return 0;
    }
  return hm__bad(r->why, r->wlen, r->ln, "split line for a site that is not there");
}

/* Any split lines, then 'end', and nothing after it. */
static int hm__parse_end(hm__reader_t *r) {
  char *line;
  int rc;
  while (!(rc = hm__line(r, &line)) && strncmp(line, "split ", 6) == 0)
    if ((rc = hm__parse_split(r, line))) return rc;
  if (rc) return rc;
  if (strcmp(line, "end") != 0) return hm__bad(r->why, r->wlen, r->ln, "expected 'end'");
  rc = hm__line(r, &line);
  if (rc == HM__EOF) return 0;
  return rc ? rc : hm__bad(r->why, r->wlen, r->ln, "data after 'end'");
}

int _hm_pl_place_load(const char *path, char *why, size_t len) {
  hm__reader_t r = {.why = why, .wlen = len};
  int rc = hm__slurp(&r, path);
  if (rc) return rc;
  if (!(rc = hm__parse_header(&r)) && !(rc = hm__parse_tiers(&r)) &&
      !(rc = hm__parse_modules(&r)) && !(rc = hm__parse_sites(&r)))
    rc = hm__parse_end(&r);
  free(r.buf);
  if (rc == HM__EOF) {
    snprintf(why, len, "placement table '%s' is truncated (no 'end' line)", path);
    rc = -EINVAL;
  }
  for (size_t i = 0; i < HM_PL_MAX_MODULES; i++) atomic_store(&hm__pt.lm2pm[i], -2);
  return rc;
}

size_t _hm_pl_place_tiers(void) { return hm__pt.ntiers; }
const _hm_pl_tier_t *_hm_pl_place_tier(size_t i) { return &hm__pt.tiers[i]; }
size_t _hm_pl_place_sites(void) { return hm__pt.nsites; }
void _hm_pl_place_site(size_t i, uint32_t *id, uint32_t *tier) {
  *id = hm__pt.sites[i].id;
  *tier = hm__pt.sites[i].tier;
}

uint64_t _hm_pl_place_split(size_t i) { return i < hm__pt.nsites ? hm__pt.sites[i].split : 0; }

/* The placement module a loaded module is: same build-id, or the same path
 * when the placement has no build-id for it. Decided once per module. */
static int hm__pmod_of(int lm) {
  int v = atomic_load_explicit(&hm__pt.lm2pm[lm], memory_order_relaxed);
  if (v != -2) return v;
  const _hm_pl_module_t *m = _hm_pl_module((size_t)lm);
  v = -1;
  for (size_t i = 0; i < hm__pt.nmods && v < 0; i++) {
    const hm__pmod_t *p = &hm__pt.mods[i];
    if (p->build_id[0] ? strcmp(p->build_id, m->build_id) == 0 : strcmp(p->path, m->path) == 0)
      v = (int)i;
  }
  atomic_store_explicit(&hm__pt.lm2pm[lm], v, memory_order_relaxed);
  return v;
}

static int hm__match_slow(const _hm_pl_stack_t *st) {
  hm__pframe_t fr[HM_PL_MAX_DEPTH];
  int n = st->n;
  for (int i = 0; i < n; i++) {
    uint64_t off = 0;
    int lm = _hm_pl_frame(st->a[i], &off);
    fr[i].mod = lm < 0 ? -1 : hm__pmod_of(lm);
    fr[i].off = off;
  }
  int best = -1;
  uint32_t best_len = 0;
  for (size_t s = 0; s < hm__pt.nsites; s++) {
    const hm__psite_t *ps = &hm__pt.sites[s];
    uint32_t l = ps->n < (uint32_t)n ? ps->n : (uint32_t)n;
    if (l == 0 || l <= best_len) continue; /* sorted by id: an equal length never wins */
    const hm__pframe_t *sf = &hm__pt.frames[ps->first];
    uint32_t k = 0;
    while (k < l && fr[k].mod >= 0 && fr[k].mod == sf[k].mod && fr[k].off == sf[k].off) k++;
    if (k == l) {
      best = (int)s;
      best_len = l;
    }
  }
  return best;
}

int _hm_pl_place_match(const _hm_pl_stack_t *st) {
  if (!hm__pt.nsites || st->n == 0) return -1;
  if (__builtin_expect(!hm__cache, 0)) {
    hm__cache = _hm_prim_map_raw(HM__CACHE * sizeof(hm__centry_t));
    if (!hm__cache) return hm__match_slow(st);
  }
  unsigned gen = _hm_pl_modules_gen();
  hm__centry_t *e = &hm__cache[st->hash % HM__CACHE];
  int cn = st->n < HM__CACHE_FRAMES ? st->n : HM__CACHE_FRAMES;
  if (e->hash == st->hash && e->gen == gen && e->n == st->n &&
      memcmp(e->a, st->a, (size_t)cn * sizeof(uintptr_t)) == 0) {
    atomic_fetch_add_explicit(&hm__pt.hits, 1, memory_order_relaxed);
    return e->site;
  }
  atomic_fetch_add_explicit(&hm__pt.misses, 1, memory_order_relaxed);
  int site = hm__match_slow(st);
  e->hash = st->hash;
  e->gen = _hm_pl_modules_gen(); /* a rescan during the match invalidates it */
  e->n = st->n;
  e->site = site;
  memcpy(e->a, st->a, (size_t)cn * sizeof(uintptr_t));
  return site;
}

void _hm_pl_place_cache_counts(uint64_t *hits, uint64_t *misses) {
  *hits = atomic_load(&hm__pt.hits);
  *misses = atomic_load(&hm__pt.misses);
}

void _hm_pl_place_module_counts(uint32_t *matched, uint32_t *loaded) {
  uint32_t m = 0;
  size_t n = _hm_pl_module_count();
  for (size_t i = 0; i < n && i < HM_PL_MAX_MODULES; i++)
    if (hm__pmod_of((int)i) >= 0) m++;
  *matched = m;
  *loaded = (uint32_t)n;
}
