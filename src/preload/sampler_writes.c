/* SPDX-License-Identifier: BSD-3-Clause */
/* Written pages, for the refs sampler (sampler_refs.c): which pages of each
 * profiled block were written in an interval, not only touched.
 *
 * Why: referenced bits count a page read once and a page written on every
 * time step alike. On the storage tier a written page costs its write-back
 * as well as its read; and where a program sweeps some arrays several times
 * a step and writes them, others once and reads them (LAMMPS: the per-atom
 * arrays, written every step, against the neighbour list, written every
 * 20), stores are what the interval's samples can tell apart: the
 * advisor's choice at a 50% budget was a coin flip without them.
 *
 * How: a userfaultfd in WP_ASYNC mode, which the kernel resolves by itself
 * (no thread ever waits on it), registered for write-protection on each
 * block's own mapping when profile mode makes it (route.c,
 * _hm_smp_track_writes). At each drain one PAGEMAP_SCAN per block reports
 * the pages written since the last one (present, not write-protected,
 * not the zero page) and protects them again in the same call. A fresh
 * block's pages are unpopulated: their first write maps them unprotected,
 * so the scan finds them, but a live block's pages first touched in the
 * interval (its mapping's Rss growth, sampler_refs.c) are taken off its
 * count: initialising an array is not reusing it. Holes are left alone
 * (the anyof selector wants a present or swapped page): a hole protected
 * by the scan would hold a uffd-wp marker, and a page table where a
 * transparent huge page could come.
 * Soft-dirty bits (clear_refs 4) would do without a userfaultfd, but
 * kernels without CONFIG_MEM_SOFT_DIRTY take the clear and never set the
 * bit (this machine's).
 *
 * Costs: the scan, a page-table walk of the blocks (a 64 MiB block, in a
 * one-off C program: 0.6 ms with 16k pages written, 0.2 ms with 4k), on
 * the sampler thread; and
 * for the program, a write-protect fault at the first write of each page
 * after a scan, resolved in the kernel (measured at start: 0.7-0.9 us a
 * page in most profiles in this VM, 2.8 us once), which also splits a huge
 * page it hits into small ones for good. The refs sampler adds it to an
 * interval's cost, which its duty cycle keeps near 3% of the run. Unavailable before Linux 6.7, or
 * where userfaultfd is not permitted: stores are then not told apart.
 *
 * The descriptor stays open until the process ends (close-on-exec): a
 * thread may be registering a block while the sampler halts, and must not
 * find the number reused by another file. A forked child's mappings lose
 * the registration (no UFFD_FEATURE_EVENT_FORK) and their protection. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "prim/prim.h"
#include "sampler.h"

#define HM__WR_VEC 512u         /* written runs per scan call */
#define HM__WR_CAL_PAGES 2048u  /* calibration mapping (8 MiB) */

struct _hm_smp_wr_s {
  int uffd, pagemap;
  size_t page;
  _hm_prim_page_region_t *vec;
  _Atomic uint64_t tracked, refused; /* blocks registered, registrations refused */
  uint64_t scans, errors, pages, scan_ns;
  /* Write-protect faults the program took, estimated: a page a drain
   * finds written took one only if an earlier scan had protected it; a
   * page first written since (the program filling a new block) took
   * none. A drain's written pages beyond the most any earlier drain found
   * are counted as such first writes: otherwise the initialisation of a
   * short run was priced as faults, and its next interval, 11 x its cost,
   * outlasted the run (hm-placement's sparse workload: 3 drains). */
  uint64_t faults, last_faults, peak;
  double fault_ns; /* a write after a scan protected the page, measured */
};

static const _hm_prim_pm_query_t hm__written = {
    HM_PRIM_PM_WP_MATCHING,
    HM_PRIM_PAGE_IS_WRITTEN | HM_PRIM_PAGE_IS_PFNZERO,
    HM_PRIM_PAGE_IS_PFNZERO, /* written, and not the shared zero page */
    HM_PRIM_PAGE_IS_PRESENT | HM_PRIM_PAGE_IS_SWAPPED,
    HM_PRIM_PAGE_IS_WRITTEN,
};

/* Pages of [lo, hi) written since the last scan, protected again;
 * negative errno on failure. */
static int64_t hm__scan(_hm_smp_wr_t *w, uintptr_t lo, uintptr_t hi) {
  int64_t pages = 0;
  while (lo < hi) {
    uint64_t end = hi;
    ssize_t n = _hm_prim_pagemap_query(w->pagemap, (void *)lo, hi - lo, &hm__written, w->vec,
                                       HM__WR_VEC, &end);
    if (n < 0) return n;
    for (ssize_t i = 0; i < n; i++) pages += (int64_t)((w->vec[i].end - w->vec[i].start) / w->page);
    if ((size_t)n < HM__WR_VEC || end <= lo) break;
    lo = (uintptr_t)end; /* the vector filled: go on from where it stopped */
  }
  return pages;
}

/* Writes one byte per page of [p, p + n pages); its time in ns. */
static uint64_t hm__write(volatile char *p, size_t n, size_t page) {
  uint64_t t0 = _hm_prim_now_ns();
  for (size_t i = 0; i < n; i++) p[i * page]++;
  return _hm_prim_now_ns() - t0;
}

/* The cost of a write to a page a scan protected: a mapping registered,
 * written, scanned and written again, against a warm write. 0 when the
 * mapping cannot be made or registered (then nothing else can be). */
static double hm__fault_cost(_hm_smp_wr_t *w) {
  size_t len = HM__WR_CAL_PAGES * w->page;
  void *p = NULL;
  if (_hm_prim_map_anon(len, &p)) return -1.0;
  double cost = -1.0;
  if (_hm_prim_uffd_register_wp(w->uffd, p, len) == 0) {
    (void)hm__write(p, HM__WR_CAL_PAGES, w->page);
    uint64_t warm = hm__write(p, HM__WR_CAL_PAGES, w->page);
    if (hm__scan(w, (uintptr_t)p, (uintptr_t)p + len) == (int64_t)HM__WR_CAL_PAGES) {
      uint64_t cold = hm__write(p, HM__WR_CAL_PAGES, w->page);
      cost = cold > warm ? (double)(cold - warm) / HM__WR_CAL_PAGES : 0.0;
    }
  }
  _hm_prim_unmap(p, len);
  return cost;
}

static void hm__close(_hm_smp_wr_t *w) {
  if (w->uffd >= 0) (void)_hm_prim_close(w->uffd);
  if (w->pagemap >= 0) (void)_hm_prim_close(w->pagemap);
  if (w->vec) _hm_prim_unmap(w->vec, HM__WR_VEC * sizeof *w->vec);
  _hm_prim_unmap(w, sizeof *w);
}

int _hm_smp_wr_open(_hm_smp_wr_t **out, char *why, size_t wlen) {
  void *m = NULL, *v = NULL;
  if (_hm_prim_map_anon(sizeof(_hm_smp_wr_t), &m)) {
    snprintf(why, wlen, "%s", strerror(ENOMEM));
    return -ENOMEM;
  }
  _hm_smp_wr_t *w = m;
  memset(w, 0, sizeof *w);
  w->page = _hm_prim_page_size();
  w->uffd = _hm_prim_uffd_open_wp_async();
  w->pagemap = w->uffd >= 0 ? _hm_prim_pagemap_open() : -1;
  if (!_hm_prim_map_anon(HM__WR_VEC * sizeof *w->vec, &v)) w->vec = v;
  int rc = w->uffd < 0 ? w->uffd : w->pagemap < 0 ? w->pagemap : !w->vec ? -ENOMEM : 0;
  int reg = !rc && (w->fault_ns = hm__fault_cost(w)) < 0;
  if (reg) rc = -EPERM;
  if (rc) {
    snprintf(why, wlen, "%s",
             reg                ? "userfaultfd refused to write-protect anonymous memory"
             : rc == -ENOTSUP ? "userfaultfd WP_ASYNC with PAGEMAP_SCAN needs Linux 6.7"
                              : strerror(-rc));
    hm__close(w); /* closes what is open: negative descriptors are errors */
    return rc;
  }
  *out = w;
  return 0;
}

void _hm_smp_wr_track(_hm_smp_wr_t *w, void *base, size_t len) {
  if (!w) return;
  int rc = _hm_prim_uffd_register_wp(w->uffd, base, len);
  atomic_fetch_add_explicit(rc ? &w->refused : &w->tracked, 1, memory_order_relaxed);
}

uint64_t _hm_smp_wr_drain(_hm_smp_wr_t *w, const _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink,
                          const _hm_smp_rss_t *now, const _hm_smp_rss_t *before) {
  if (!w) return 0;
  uint64_t t0 = _hm_prim_now_ns(), total = 0;
  uintptr_t done = 0; /* spans sharing a page: each page once */
  for (size_t i = 0; i < spans->n; i++) {
    const _hm_smp_span_t *s = &spans->v[i];
    uintptr_t lo = s->lo / w->page * w->page, hi = (s->hi + w->page - 1) / w->page * w->page;
    if (lo < done) lo = done;
    if (hi <= lo) continue;
    done = hi;
    int64_t n = hm__scan(w, lo, hi);
    if (n < 0) {
      w->errors++;
      continue;
    }
    /* a freed block, for the part of the interval it lived (as its loads);
     * a live one less its first touches (sampler_refs.c says why) */
    double share = s->lived ? (double)s->lived / 65536.0 : 1.0;
    int64_t fresh = 0;
    if (!s->lived && now && before)
      fresh = (int64_t)(_hm_smp_rss_grown(now, before, lo, hi) / w->page);
    int64_t kept = fresh < n ? n - fresh : 0;
    uint64_t wt = (uint64_t)((double)kept * share * HM_SMP_FIX + 0.5);
    if (wt) sink->credit(sink->arg, s->site, wt, HM_SMP_STORE);
    total += (uint64_t)n;
  }
  w->scans++;
  w->pages += total;
  w->last_faults = _hm_smp_again(total, &w->peak);
  w->faults += w->last_faults;
  w->scan_ns += _hm_prim_now_ns() - t0;
  return total;
}

double _hm_smp_wr_fault_ns(const _hm_smp_wr_t *w) { return w ? w->fault_ns : 0.0; }

uint64_t _hm_smp_wr_faults(const _hm_smp_wr_t *w, int last) {
  return w ? last ? w->last_faults : w->faults : 0;
}

void _hm_smp_wr_describe(const _hm_smp_wr_t *w, const char *why, char *out, size_t len) {
  if (!w) {
    snprintf(out, len, ",\"loads_and_stores\":\"not told apart: %s\"", why);
    return;
  }
  snprintf(out, len,
           ",\"loads_and_stores\":\"told apart: stores are pages written, userfaultfd "
           "WP_ASYNC + PAGEMAP_SCAN\",\"written_pages\":%llu,\"write_faults\":%llu,"
           "\"write_fault_ns\":%.1f,"
           "\"write_scan_us\":%.0f,\"write_blocks\":%llu,\"write_blocks_refused\":%llu,"
           "\"write_errors\":%llu",
           (unsigned long long)w->pages, (unsigned long long)w->faults, w->fault_ns, (double)w->scan_ns / 1e3,
           (unsigned long long)atomic_load(&w->tracked),
           (unsigned long long)atomic_load(&w->refused), (unsigned long long)w->errors);
}
