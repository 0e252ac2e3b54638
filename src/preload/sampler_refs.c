/* SPDX-License-Identifier: BSD-3-Clause */
/* The "refs" access sampler (sampler.h): the kernel's own referenced bits,
 * read per mapping. Every interval the sampler thread reads
 * /proc/self/smaps, credits each mapping's `Referenced` bytes (pages whose
 * accessed bit or referenced flag was set since the last clear) to the
 * live blocks in it, and clears the bits of the anonymous mappings by
 * writing 2 to /proc/self/clear_refs.
 *
 * Why it exists: nothing of the program's memory is ever protected. The
 * portable sampler's PROT_NONE pages made the kernel's copies fail with
 * EFAULT: Open MPI's single-copy transfers (process_vm_readv/CMA from the
 * other rank), read(2) into a sampled buffer, and so on. Here a copy by
 * the kernel or by another process just sets the accessed bit, like any
 * access, and is counted.
 *
 * One sample is "one page of the block was touched in one interval", as
 * with DAMON and the portable sampler, so the profile's period is page
 * size / 64. Profile mode gives each large block a mapping of its own
 * between guard pages while this sampler runs (route.c), so a mapping's
 * count is its block's; where a mapping holds several blocks the count is
 * shared by overlap. Every page touched is credited as a load; the pages
 * of each block's own mapping written in the interval are credited as
 * stores as well (sampler_writes.c), where the kernel can tell.
 *
 * Costs, both growing with the memory the program touches:
 *  - the drain: reading smaps and clear_refs walk the page tables of the
 *    process (about 1 ms per 100 MiB resident here), on the sampler thread;
 *  - the program's next touch of each page after a clear sets its accessed
 *    bit again: a page walk and a locked update of the entry, paid by the
 *    program's threads (0.3-0.5 us a page in this VM, where a 1 GiB memset
 *    ran 2.5x slower right after a clear; expected far less on bare metal);
 *  - the first write to each page after a drain's written-page scan
 *    protected it: a write-protect fault resolved in the kernel
 *    (sampler_writes.c; a page's first write ever takes none).
 * None is bounded by sampling a subset (clear_refs has no range), so
 * the interval is: the start measures the touch cost per page (a 16 MiB
 * mapping timed before and after a clear), and after each drain the next
 * interval is HM__REFS_DUTY x (drain time + pages referenced again x
 * touch cost + write faults x their cost), at least the configured one
 * (HM__REFS_EARLY_DUTY x for the first few). The overhead stays near 1/HM__REFS_DUTY, and half that
 * again for the short windows (hm__short); a short run still gets few
 * intervals (the profile says
 * how many, and `hetmem profile` warns). Samples are not scaled by the
 * interval: a page touched once and one touched all interval long both
 * count once, so a site's samples count the intervals it was used in.
 * The two short windows after each clear (hm__short) tell those apart.
 *
 * First touches are counted apart: the pages a live block's mapping
 * gained since the last drain (smaps' Rss grew by them) were touched for
 * the first time, which sets their bits too. As loads, a block written
 * once at start and never again looked as hot as one read in every later
 * interval of a short run: hm-placement's sparse workload at 256 MiB got
 * 3-5 intervals, the first all initialisation, and the advisor's choice at
 * a 75% budget was a coin flip (0.45-1.24x cache over builds). They are
 * credited as HM_SMP_FIRST (the profile's `first`), and the advisor
 * weighs them (profile.py): whole in a profile of 8 intervals or more,
 * where a phase's array made and used within about one interval (hpcc's
 * HPL matrix) has most of its samples there; left out in a shorter one,
 * where initialisation is much of every array's samples. A freed block
 * keeps them as loads: a temporary made and used within an interval is
 * touched only then. The short windows count them as before. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "prim/prim.h"
#include "sampler.h"

#define HM__REFS_SMAPS "/proc/self/smaps"
#define HM__REFS_CLEAR "/proc/self/clear_refs"
#define HM__REFS_DUTY 33u /* interval >= this x the cost of one: ~3% */
/* The first intervals are a third as long: a run of a second still gets
 * about 8 of them (hm-placement's sparse workload at 256 MiB, 0.6 s, got
 * 3-4, too few to tell its hot arrays from its cold ones: the advisor's
 * choice was a coin flip), for ~10% overhead over them, nothing over a
 * long run. */
#define HM__REFS_EARLY 8u
#define HM__REFS_EARLY_DUTY 11u
/* The first short window lasts at least this long (hm__short); at least
 * HM__SHORT_BUSY_NS after a pair in which tasks waited for a CPU (PSI's
 * cpu "some" time, HM__REFS_PSI) more than HM__BUSY_SHARE of its span
 * (hm__contended). There the sampler's own reads and other work take the
 * program off its CPU for part of a window: in windows of a millisecond
 * or two a sweep's pages grew in one and stalled in the next, which reads
 * as reuse. Beside one busy loop on 2 CPUs the test program's swept array
 * read as reused in 5 of 16 profiles; with 5 ms windows after a contended
 * pair, 1 of 16 (5 ms always: 0 of 16). Measuring the windows in the
 * program's CPU time instead (its threads' clocks) did not help (6 of 16):
 * a gather given little CPU in the first window had not yet touched its
 * pages again. A quiet machine keeps the short windows: their reuse is the
 * stronger lower bound (touched again within ~2 ms, not 5), and waits of
 * 5% of a pair are rare there (1 pair in 27 here). */
#define HM__SHORT_MIN_NS 1000000u
#define HM__SHORT_BUSY_NS 5000000u
#define HM__BUSY_SHARE 0.05
#define HM__REFS_PSI "/proc/pressure/cpu"
/* Calibration pages: more than the TLB covers, or the cost hides (2 MiB
 * showed 5 ns a page here, 8 MiB and more 300-470 ns) */
#define HM__REFS_CAL_PAGES 4096u
/* Pages of the mapping whose protection change flushes the TLB: more than
 * a ranged flush does page by page (x86: 33; arm64 similar), so the
 * kernel flushes the whole address space on every CPU the process runs on */
#define HM__REFS_FLUSH_PAGES 64u

struct _hm_smp_refs_s {
  const char *root;
  char *buf; /* smaps text, mapped (the profiler must not profile itself) */
  size_t cap;
  size_t page;
  uint64_t base_ns;  /* the configured interval */
  uint64_t first_clear, last_clear, last_cost_ns, max_cost_ns, cost_sum_ns;
  uint64_t drains, mappings, attributed, errors;
  double touch_ns;        /* measured cost of re-touching a cleared page */
  uint64_t ref_pages;     /* referenced anonymous pages, all drains */
  /* of which touched again after a clear (the rest were first touches,
   * which cost a page fault of the program's own, not the bit again):
   * estimated as for write faults (sampler_writes.c), a drain's pages
   * beyond the most an earlier drain saw being first touches */
  uint64_t retouched, ref_peak;
  uint64_t fresh_pages; /* first touches of live blocks (HM_SMP_FIRST), all drains */
  uint64_t shorts, short_ns, short2_ns; /* short window pairs read, their summed lengths */
  uint64_t short_cost_ns;                /* what reading them took, waits left out */
  uint64_t short_half_ns;                /* half the last window read's time */
  uint64_t busy_pairs;                   /* pairs read with long windows (hm__short) */
  int busy;                              /* the last pair was contended */
  uint64_t rng;                          /* xorshift state of the intervals' jitter */
  char *flush;                           /* HM__REFS_FLUSH_PAGES pages, see hm__clear */
  _hm_smp_rss_t rss_prev, rss_cur;       /* mappings' Rss at the last drain, and this one's */
  _hm_smp_wr_t *wr;                      /* written pages; NULL: not told apart */
  char wr_why[96];                       /* why not */
  uint64_t next_ns;       /* the next interval */
};

/* Touches one byte per page of [p, p + n pages); its time in ns. */
static uint64_t hm__touch(volatile char *p, size_t n, size_t page) {
  uint64_t t0 = _hm_prim_now_ns();
  for (size_t i = 0; i < n; i++) p[i * page]++;
  return _hm_prim_now_ns() - t0;
}

/* Clears the referenced bits, then flushes the process's TLB: clearing
 * them does not (x86 clears the accessed bit without a flush, by design),
 * so a page whose translation stayed cached in a CPU's TLB set no bit
 * again when touched, however often. A 1 MiB array touched without pause
 * by another thread showed 0.2-0.7 of its 256 pages referenced after a
 * clear, 256 with the flush: small hot arrays ranked cold. The flush is a
 * protection change of the sampler's own pages, present and never
 * touched, too many for a ranged flush. Costs two mprotect calls and
 * their TLB shootdown, then a page walk at each page's next touch, as
 * for a large array. 0, or a negative errno from the clear. */
static int hm__clear(_hm_smp_refs_t *r) {
  int rc = _hm_prim_write_text(r->root, HM__REFS_CLEAR, "2");
  if (r->flush) {
    size_t len = HM__REFS_FLUSH_PAGES * r->page;
    if (_hm_prim_sys_mprotect(r->flush, len, PROT_READ) == 0)
      (void)_hm_prim_sys_mprotect(r->flush, len, PROT_READ | PROT_WRITE);
  }
  return rc;
}

/* The extra cost of the first touch of a page after a clear: a mapping
 * touched, timed warm, cleared and timed again; the less of 2 tries
 * (about 4 ms at start here). */
static double hm__touch_cost(_hm_smp_refs_t *r) {
  size_t len = HM__REFS_CAL_PAGES * r->page;
  void *p = NULL;
  if (_hm_prim_map_anon(len, &p)) return 0.0;
  double best = -1.0;
  (void)hm__touch(p, HM__REFS_CAL_PAGES, r->page); /* fault them in */
  for (int k = 0; k < 2; k++) {
    uint64_t warm = hm__touch(p, HM__REFS_CAL_PAGES, r->page);
    (void)hm__clear(r);
    uint64_t cold = hm__touch(p, HM__REFS_CAL_PAGES, r->page);
    double c = cold > warm ? (double)(cold - warm) / HM__REFS_CAL_PAGES : 0.0;
    if (best < 0 || c < best) best = c;
  }
  _hm_prim_unmap(p, len);
  return best;
}

/* 0 when smaps reads and clear_refs takes the anonymous-memory clear. */
int _hm_smp_refs_probe(const _hm_smp_cfg_t *cfg, char *probed, size_t plen, char *why,
                       size_t wlen) {
  char head[64];
  const char *what = HM__REFS_SMAPS;
  ssize_t n = _hm_prim_read_text(cfg->root, HM__REFS_SMAPS, head, sizeof head);
  int rc = n >= 0 || n == -EFBIG ? 0 : (int)n; /* EFBIG: longer than head */
  if (!rc) {
    what = HM__REFS_CLEAR;
    rc = _hm_prim_write_text(cfg->root, HM__REFS_CLEAR, "2");
  }
  snprintf(probed, plen, "{\"clear_refs\":%s}", rc ? "false" : "true");
  if (rc) snprintf(why, wlen, "%s: %s", what, strerror(-rc));
  return rc;
}

static ssize_t hm__read_smaps(_hm_smp_refs_t *r);

/* Records the mappings' Rss before the first clear: what the program held
 * then is not the first interval's first touches. */
static void hm__rss_start(_hm_smp_refs_t *r) {
  ssize_t n = hm__read_smaps(r);
  if (n < 0) return;
  _hm_smp_spans_t none = {NULL, 0, 0};
  _hm_smp_sink_t nosink = {NULL, NULL, NULL};
  _hm_smp_refs_walk_t w = {&none, &nosink, HM_SMP_LOAD, r->page, 0, 0, 0, NULL, &r->rss_prev, 0};
  _hm_smp_refs_credit_text(r->buf, (size_t)n, &w);
}

/* This drain's Rss becomes the one the next compares with. */
static void hm__rss_swap(_hm_smp_refs_t *r) {
  _hm_smp_rss_t t = r->rss_prev;
  r->rss_prev = r->rss_cur;
  r->rss_cur = t;
}

int _hm_smp_refs_start(const _hm_smp_cfg_t *cfg, _hm_smp_refs_t **out, char *why,
                       size_t wlen) {
  void *p = NULL;
  int rc = _hm_prim_map_anon(sizeof(_hm_smp_refs_t), &p);
  if (rc) {
    snprintf(why, wlen, "refs sampler: %s", strerror(-rc));
    return rc;
  }
  _hm_smp_refs_t *r = p;
  memset(r, 0, sizeof *r);
  r->root = cfg->root;
  r->page = _hm_prim_page_size();
  void *fl = NULL;
  if (_hm_prim_map_anon(HM__REFS_FLUSH_PAGES * r->page, &fl) == 0) {
    r->flush = fl;
    memset(r->flush, 1, HM__REFS_FLUSH_PAGES * r->page); /* present: mprotect changes them */
  }
  r->base_ns = (cfg->period_us ? cfg->period_us : 10000) * 1000ull;
  r->next_ns = r->base_ns;
  r->touch_ns = hm__touch_cost(r);
  if (_hm_smp_wr_open(&r->wr, r->wr_why, sizeof r->wr_why)) r->wr = NULL;
  r->rng = _hm_prim_now_ns() | 1;
  r->first_clear = r->last_clear = _hm_prim_now_ns();
  hm__rss_start(r);
  (void)hm__clear(r); /* start from clean bits */
  *out = r;
  return 0;
}

/* Reads the whole of smaps into r->buf (grown as needed); its length, or
 * a negative errno. */
static ssize_t hm__read_smaps(_hm_smp_refs_t *r) {
  for (;;) {
    if (!r->cap) {
      void *p = NULL;
      if (_hm_prim_map_anon(1u << 20, &p)) return -ENOMEM;
      r->buf = p;
      r->cap = 1u << 20;
    }
    ssize_t n = _hm_prim_read_text(r->root, HM__REFS_SMAPS, r->buf, r->cap);
    if (n != -EFBIG) return n;
    void *p = NULL;
    if (_hm_prim_map_anon(r->cap * 2, &p)) return -ENOMEM;
    _hm_prim_unmap(r->buf, r->cap);
    r->buf = p;
    r->cap *= 2;
  }
}

typedef struct hm__vma_s {
  uint64_t lo, hi, ref, rss;
  int anon; /* no file behind it: what clear_refs 2 clears */
} hm__vma_t;

/* Credits one mapping's referenced bytes to the spans overlapping it, by
 * overlap. Returns the weight credited (x HM_SMP_FIX); *freed: a freed
 * block's mapping (_hm_smp_bury) was among them. */
static uint64_t hm__credit_vma(const hm__vma_t *v, const _hm_smp_refs_walk_t *w, uint64_t fresh,
                               int *freed) {
  const _hm_smp_spans_t *s = w->spans;
  size_t page = w->page;
  if (!v->ref || v->hi <= v->lo) return 0;
  size_t a = 0, b = s->n; /* first span ending above lo */
  while (a < b) {
    size_t m = (a + b) / 2;
    if (s->v[m].hi <= v->lo) a = m + 1;
    else b = m;
  }
  uint64_t total = 0;
  double pages = (double)v->ref / (double)page, len = (double)(v->hi - v->lo);
  double reused = fresh < v->ref ? (double)(v->ref - fresh) / (double)page : 0.0;
  for (size_t i = a; i < s->n && s->v[i].lo < v->hi; i++) {
    uint64_t l = s->v[i].lo > v->lo ? s->v[i].lo : v->lo;
    uint64_t h = s->v[i].hi < v->hi ? s->v[i].hi : v->hi;
    if (h <= l) continue;
    *freed |= s->v[i].lived != 0;
    /* a block that is most of its mapping takes the whole count: the
     * mapping's other bytes are its page-rounding and malloc's header */
    double share = (double)(h - l) / len;
    if (share > 0.5 && s->v[i].lo <= v->lo + page && s->v[i].hi + page >= v->hi) share = 1.0;
    /* a freed block counts for the part of the interval it lived: a
     * temporary made anew ten times an interval is ten blocks of pages
     * touched once, as hot as one block touched all interval long */
    if (s->v[i].lived) share *= (double)s->v[i].lived / 65536.0;
    uint64_t wt = (uint64_t)((s->v[i].lived ? pages : reused) * share * HM_SMP_FIX + 0.5);
    double first = s->v[i].lived || !w->cur ? 0.0 : pages - reused;
    uint64_t wf = (uint64_t)(first * share * HM_SMP_FIX + 0.5);
    if (wf) w->sink->credit(w->sink->arg, s->v[i].site, wf, HM_SMP_FIRST);
    if (!wt) continue;
    w->sink->credit(w->sink->arg, s->v[i].site, wt, w->what);
    total += wt;
  }
  return total;
}

/* Skips n space-separated fields of s. */
static const char *hm__skip(const char *s, int n) {
  for (int k = 0; k < n; k++) {
    while (*s == ' ') s++;
    while (*s && *s != ' ') s++;
  }
  while (*s == ' ') s++;
  return s;
}

/* Parses one smaps header line ("lo-hi perms offset dev inode [path]");
 * 1 when it is one. */
static int hm__vma_header(const char *line, hm__vma_t *v) {
  char c = line[0];
  if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  char *end;
  unsigned long long lo = strtoull(line, &end, 16);
  if (*end != '-') return 0;
  unsigned long long hi = strtoull(end + 1, &end, 16);
  if (*end != ' ') return 0;
  const char *inode = hm__skip(end, 3);
  v->lo = lo, v->hi = hi, v->ref = v->rss = 0;
  v->anon = inode[0] == '0' && (inode[1] == ' ' || inode[1] == '\0');
  return 1;
}

/* Grows t to hold one more mapping; 0, or -ENOMEM (the mapping then goes
 * unrecorded: its next drain credits all it holds as first touches). */
static int hm__rss_room(_hm_smp_rss_t *t) {
  if (t->n < t->cap) return 0;
  size_t cap = t->cap ? t->cap * 2 : 1024;
  void *p = NULL;
  if (_hm_prim_map_anon(cap * 3 * sizeof(uint64_t), &p)) return -ENOMEM;
  if (t->v) {
    memcpy(p, t->v, t->n * 3 * sizeof(uint64_t));
    _hm_prim_unmap(t->v, t->cap * 3 * sizeof(uint64_t));
  }
  t->v = p;
  t->cap = cap;
  return 0;
}

/* The index of t's last mapping starting at or below lo, or t->n. Cost: a
 * binary search. */
static size_t hm__rss_at(const _hm_smp_rss_t *t, uintptr_t lo) {
  size_t a = 0, b = t->n;
  while (a < b) {
    size_t m = (a + b) / 2;
    if (t->v[3 * m] <= lo) a = m + 1;
    else b = m;
  }
  return a ? a - 1 : t->n;
}

/* The bytes a mapping [lo, hi) holding rss now gained since t was taken:
 * all of rss when t has no mapping of the same bounds (new since, or
 * moved). */
static uint64_t hm__rss_since(const _hm_smp_rss_t *t, uint64_t lo, uint64_t hi, uint64_t rss) {
  size_t a = hm__rss_at(t, lo);
  if (a == t->n || t->v[3 * a] != lo || t->v[3 * a + 1] != hi) return rss;
  return rss > t->v[3 * a + 2] ? rss - t->v[3 * a + 2] : 0;
}

uint64_t _hm_smp_rss_grown(const _hm_smp_rss_t *now, const _hm_smp_rss_t *before, uintptr_t lo,
                           uintptr_t hi) {
  size_t a = hm__rss_at(now, lo);
  if (a == now->n || now->v[3 * a + 1] < hi) return 0;
  return hm__rss_since(before, now->v[3 * a], now->v[3 * a + 1], now->v[3 * a + 2]);
}

/* Credits v's spans and adds v's referenced pages to w (the anonymous
 * ones: what the next touches pay for; not a freed block's, which nothing
 * touches again). */
static void hm__account(hm__vma_t *v, _hm_smp_refs_walk_t *w) {
  int freed = 0;
  uint64_t fresh = v->anon && w->prev ? hm__rss_since(w->prev, v->lo, v->hi, v->rss) : 0;
  if (v->anon && w->cur && hm__rss_room(w->cur) == 0) {
    uint64_t *e = w->cur->v + 3 * w->cur->n++;
    e[0] = v->lo, e[1] = v->hi, e[2] = v->rss;
  }
  uint64_t credited = hm__credit_vma(v, w, fresh, &freed);
  if (!freed) w->fresh_pages += (fresh < v->ref ? fresh : v->ref) / w->page;
  w->total += credited;
  if (v->anon && !freed) w->anon_pages += v->ref / w->page;
}

void _hm_smp_refs_credit_text(char *text, size_t len, _hm_smp_refs_walk_t *w) {
  hm__vma_t v = {0, 0, 0, 0, 0};
  int in = 0;
  for (size_t i = 0; i < len;) {
    char *line = text + i, *nl = memchr(line, '\n', len - i);
    size_t ll = nl ? (size_t)(nl - line) : len - i;
    i += ll + 1;
    if (nl) *nl = '\0'; /* the buffer is ours: lines become strings */
    hm__vma_t h;
    if (hm__vma_header(line, &h)) {
      if (in) hm__account(&v, w);
      v = h, in = 1, w->mappings++;
    } else if (in && strncmp(line, "Referenced:", 11) == 0) {
      v.ref = strtoull(line + 11, NULL, 10) * 1024u;
    } else if (in && strncmp(line, "Rss:", 4) == 0) {
      v.rss = strtoull(line + 4, NULL, 10) * 1024u;
    }
  }
  if (in) hm__account(&v, w);
}

/* The next interval: HM__REFS_DUTY x what this one cost (see the top). */
static void hm__next_interval(_hm_smp_refs_t *r, uint64_t drain_ns, uint64_t again,
                              uint64_t wfaults) {
  double cost = (double)drain_ns + (double)again * r->touch_ns +
                (double)wfaults * _hm_smp_wr_fault_ns(r->wr);
  /* jittered by up to +-25%: intervals that are a multiple of a program's
   * time step would put every short window in the same phase of it */
  r->rng ^= r->rng << 13, r->rng ^= r->rng >> 7, r->rng ^= r->rng << 17;
  double duty = r->drains < HM__REFS_EARLY ? HM__REFS_EARLY_DUTY : HM__REFS_DUTY;
  double next = cost * duty * (0.75 + 0.5 * (double)(r->rng >> 11) / 9007199254740992.0);
  r->next_ns = next > (double)r->base_ns ? (uint64_t)next : r->base_ns;
}

/* Reads smaps and credits it as `what`; the read's middle moment, or 0
 * when it failed. *half: half the read's own time (its parse left out). */
static uint64_t hm__window(_hm_smp_refs_t *r, const _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink, int what, uint64_t *half) {
  uint64_t t0 = _hm_prim_now_ns();
  ssize_t n = hm__read_smaps(r);
  uint64_t t1 = _hm_prim_now_ns();
  *half = (t1 - t0) / 2;
  if (n < 0) {
    r->errors++;
    return 0;
  }
  _hm_smp_refs_walk_t w = {spans, sink, what, r->page, 0, 0, 0, NULL, NULL, 0};
  _hm_smp_refs_credit_text(r->buf, (size_t)n, &w);
  return t0 + (t1 - t0) / 2;
}

/* Sleeps until a read that takes 2 x half would have its middle at
 * `want`; the time it took. */
static uint64_t hm__sleep_until(uint64_t want, uint64_t half) {
  uint64_t now = _hm_prim_now_ns();
  if (want <= now + half) return 0;
  _hm_prim_sleep_ns(want - now - half);
  return _hm_prim_now_ns() - now; /* a late wake-up is waiting too, not reading */
}

/* Microseconds tasks have waited for a CPU (PSI: the first line of
 * HM__REFS_PSI, "some ... total=US"), or -1 where the kernel has no PSI.
 * Cost: one small /proc read (~10 us). */
static int64_t hm__cpu_wait_us(const _hm_smp_refs_t *r) {
  char buf[256];
  if (_hm_prim_read_text(r->root, HM__REFS_PSI, buf, sizeof buf) <= 0) return -1;
  const char *t = strncmp(buf, "some ", 5) == 0 ? strstr(buf, "total=") : NULL;
  return t ? (int64_t)strtoll(t + 6, NULL, 10) : -1;
}

/* Whether tasks waited for a CPU more than HM__BUSY_SHARE of the time
 * since `since` (ns), given the wait `w0` read then. */
static int hm__contended(const _hm_smp_refs_t *r, int64_t w0, uint64_t since) {
  int64_t w1 = w0 < 0 ? -1 : hm__cpu_wait_us(r);
  uint64_t span = _hm_prim_now_ns() - since;
  return w1 >= w0 && w0 >= 0 && (double)(w1 - w0) * 1e3 > HM__BUSY_SHARE * (double)span;
}

/* The short windows, read right after the clear: smaps once (window w1,
 * about the time one read takes, at least HM__SHORT_MIN_NS), then again
 * when three times as long has passed since the clear. The interval's samples count a page
 * once whether it was touched once or all interval long; how a site's
 * touched pages grow from the first window to the second tells a sweep
 * (growing in proportion: each page is read once a pass, in order) from
 * reuse (pages touched again and again within the first window: a random
 * gather, a lookup table), which a pager serves so differently. Windows
 * count from the end of the clear and its TLB flush (hm__clear), after
 * which each page's first touch sets its bit. Each window credits the
 * blocks live then and those freed since the drain began (respan).
 * Nothing is cleared after them: the interval goes on and counts these
 * pages too. Costs two more smaps reads, taken at most at half the cost
 * of the drains themselves (_hm_smp_refs_drain): every other drain when a
 * read is most of one. Returns the time waited. */
static uint64_t hm__short(_hm_smp_refs_t *r, _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink, void (*respan)(_hm_smp_spans_t *), uint64_t c1) {
  /* The first window's middle no sooner than HM__SHORT_MIN_NS after the
   * clear: a page's first touch after it costs a page walk (touch_ns,
   * 0.25-0.5 us), so a window of one quick read (0.28 ms for a small
   * process on a fast machine) holds at most a thousand pages of a
   * gather, which then grew with the window like a sweep's. */
  int long_windows = r->busy;
  int64_t wait0 = hm__cpu_wait_us(r);
  uint64_t slept = hm__sleep_until(c1 + (long_windows ? HM__SHORT_BUSY_NS : HM__SHORT_MIN_NS),
                                   r->short_half_ns);
  if (respan) respan(spans);
  uint64_t half = 0, m1 = hm__window(r, spans, sink, HM_SMP_SHORT, &half);
  if (!m1) return slept;
  r->short_half_ns = half;
  /* the second read's middle at c1 + 3 w1: it starts half a read before */
  uint64_t w1 = m1 > c1 ? m1 - c1 : 1;
  slept += hm__sleep_until(c1 + 3 * w1, half);
  if (respan) respan(spans);
  uint64_t m2 = hm__window(r, spans, sink, HM_SMP_SHORT2, &half);
  if (!m2) return slept;
  uint64_t w2 = m2 - c1;
  r->busy = hm__contended(r, wait0, c1);
  if (sink->pair) sink->pair(sink->arg, w2 > w1 ? (double)w1 / (double)(w2 - w1) : 0.0);
  r->busy_pairs += (uint64_t)long_windows;
  r->shorts++;
  r->short_ns += w1;
  r->short2_ns += m2 - c1;
  return slept;
}

uint64_t _hm_smp_refs_drain(_hm_smp_refs_t *r, _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink, void (*respan)(_hm_smp_spans_t *)) {
  if (!r) return 0;
  uint64_t t0 = _hm_prim_now_ns();
  ssize_t n = hm__read_smaps(r);
  _hm_smp_refs_walk_t w = {spans, sink, HM_SMP_LOAD, r->page, 0, 0, 0,
                           &r->rss_prev, &r->rss_cur, 0};
  if (n >= 0) {
    r->rss_cur.n = 0;
    _hm_smp_refs_credit_text(r->buf, (size_t)n, &w);
    hm__rss_swap(r);
    /* the written pages next to the read whose Rss they are taken from
     * (a page first written between the two would count as a store), and
     * before the clear: after it, the scan would lengthen the first short
     * window, which counts from the clear. The parse and the scan (a
     * millisecond or two) delay the clear: a page touched only then is
     * counted in neither interval. */
    /* swapped: rss_prev is now, rss_cur before */
    (void)_hm_smp_wr_drain(r->wr, spans, sink, &r->rss_prev, &r->rss_cur);
  }
  int cleared = hm__clear(r) == 0;
  if (!cleared) r->errors++;
  r->last_clear = _hm_prim_now_ns();
  if (n < 0) {
    r->errors++;
    return 0;
  }
  uint64_t cost = _hm_prim_now_ns() - t0;
  uint64_t wfaults = _hm_smp_wr_faults(r->wr, 1);
  /* the windows at half the drains' own cost at most, and apart from the
   * interval's: paid into it, they stretched a short program's intervals
   * threefold (3 drains in a 1 s run, where 6-8 told its hot arrays from
   * its cold ones) */
  if (cleared && r->short_cost_ns <= (r->cost_sum_ns + cost) / 2) {
    uint64_t w0 = _hm_prim_now_ns();
    uint64_t slept = hm__short(r, spans, sink, respan, r->last_clear);
    r->short_cost_ns += _hm_prim_now_ns() - w0 - slept;
  }
  r->drains++;
  r->mappings = w.mappings;
  r->attributed += w.total;
  r->fresh_pages += w.fresh_pages;
  r->ref_pages += w.anon_pages;
  uint64_t again = _hm_smp_again(w.anon_pages, &r->ref_peak);
  r->retouched += again;
  r->last_cost_ns = cost;
  r->cost_sum_ns += cost;
  if (cost > r->max_cost_ns) r->max_cost_ns = cost;
  hm__next_interval(r, cost, again, wfaults);
  return w.total / HM_SMP_FIX;
}

uint64_t _hm_smp_refs_interval_ns(const _hm_smp_refs_t *r) { return r ? r->next_ns : 10000000u; }

uint64_t _hm_smp_refs_touch_cost_ns(const _hm_smp_refs_t *r) {
  if (!r) return 0;
  double written = (double)_hm_smp_wr_faults(r->wr, 0) * _hm_smp_wr_fault_ns(r->wr);
  return (uint64_t)((double)r->retouched * r->touch_ns + written);
}

void _hm_smp_refs_track(_hm_smp_refs_t *r, void *base, size_t len) {
  if (r) _hm_smp_wr_track(r->wr, base, len);
}

uint64_t _hm_smp_refs_since(const _hm_smp_refs_t *r) { return r->last_clear; }

uint64_t _hm_smp_refs_shorts(const _hm_smp_refs_t *r) { return r ? r->shorts : 0; }

void _hm_smp_refs_describe(const _hm_smp_refs_t *r, char *out, size_t len) {
  uint64_t d = r->drains ? r->drains : 1;
  snprintf(out, len,
           ",\"method\":\"referenced bits: /proc/self/smaps, cleared by /proc/self/clear_refs\","
           "\"mappings\":%llu,\"interval_mean_us\":%.0f,\"drain_mean_us\":%.1f,"
           "\"drain_max_us\":%.1f,\"touch_ns_per_page\":%.1f,\"referenced_pages\":%llu,"
           "\"touch_cost_ns\":%llu,\"errors\":%llu,"
           "\"short_windows\":%llu,\"short_window_us\":[%.1f,%.1f],\"sampled_us\":%.0f,"
           "\"short_cost_us\":%.0f,\"first_touch_pages\":%llu,"
           "\"short_windows_busy\":%llu",
           (unsigned long long)r->mappings,
           (double)(r->last_clear - r->first_clear) / (double)d / 1e3,
           (double)r->cost_sum_ns / (double)d / 1e3, (double)r->max_cost_ns / 1e3, r->touch_ns,
           (unsigned long long)r->ref_pages, (unsigned long long)_hm_smp_refs_touch_cost_ns(r),
           (unsigned long long)r->errors, (unsigned long long)r->shorts,
           r->shorts ? (double)r->short_ns / (double)r->shorts / 1e3 : 0.0,
           r->shorts ? (double)r->short2_ns / (double)r->shorts / 1e3 : 0.0,
           (double)(r->last_clear - r->first_clear) / 1e3, (double)r->short_cost_ns / 1e3,
           (unsigned long long)r->fresh_pages, (unsigned long long)r->busy_pairs);
  size_t k = strlen(out);
  if (k < len) _hm_smp_wr_describe(r->wr, r->wr_why, out + k, len - k);
}

void _hm_smp_refs_stop(_hm_smp_refs_t *r) {
  if (!r) return;
  if (r->buf) _hm_prim_unmap(r->buf, r->cap);
  r->buf = NULL;
  r->cap = 0;
  if (r->flush) _hm_prim_unmap(r->flush, HM__REFS_FLUSH_PAGES * r->page);
  r->flush = NULL;
  _hm_smp_rss_t *t[2] = {&r->rss_prev, &r->rss_cur};
  for (int k = 0; k < 2; k++) {
    if (t[k]->v) _hm_prim_unmap(t[k]->v, t[k]->cap * 3 * sizeof(uint64_t));
    t[k]->v = NULL;
    t[k]->n = t[k]->cap = 0;
  }
}
