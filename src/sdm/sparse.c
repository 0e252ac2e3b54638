/* SPDX-License-Identifier: BSD-3-Clause */
/* Sparse sweeps: a loop that uses a few pages of every unit of a region,
 * the same pages pass after pass. numpy's copy of a transposed matrix
 * reads one word of every row per output row, and the same page of each
 * row for 512 output rows in a row; so does a sum down the columns of a
 * row-major matrix (hm-kernel-scan --variant cols). Its pages in use are a
 * small part of the region, which Linux swap keeps with its 4 KiB pages,
 * but at unit granularity every pass touches every unit: the pager filled
 * the whole matrix again each pass. hm-kernel-scan cols on 128 MiB at a 64
 * MiB budget read 293 GiB in 300 s without finishing two passes; swap ran
 * a pass in 2.9 s; advised random (page-sized fills), the pager ran one in
 * 4.9 s, reading 325 MiB in all.
 *
 * Anonymous mode installs a whole unit at once and never sees which pages
 * are used, so now and then a unit of a region being refilled whole is
 * watched: prefetch leaves it out, and its misses fill page by page (the
 * random fills of fault.c, whose in-unit walk brings a sequential reader
 * 16 pages a fault within a few faults). Its filled pages when it is
 * evicted are what that stay used. A stay that used more than a quarter
 * of the unit, or filled fast (hm__rnd_dense), ends the watch: a dense
 * sweep. Otherwise the watch goes on for PROBE_STAYS stays (PROBE_EARLY
 * where those used an eighth): if together
 * they used at most a quarter of the unit, its pages are used again pass
 * after pass; if those pages of the whole region also fit in 3/4 of the
 * cache, the region fills page by page, without whole-unit prefetch, for
 * SPARSE_FILLS page fills, then watches again. Not one stay against the
 * next: two threads sweeping at two column offsets each use 8 pages of a
 * unit a pass, other pages than the other thread's pass before. A
 * row-strip sweep (an LU's trailing update, scan-strips) also uses few
 * pages of a unit a pass, but other pages each pass (6 passes: most of the
 * unit): page fills would read as much, a read per page, so it keeps whole
 * units. Page fills cost a read per page, where prefetched units come at 2
 * GB/s: they pay only where the pages stay resident. While sparse, three
 * things make them cheaper. A thread whose faults are the same stride
 * apart (a row, down a column) has the next pages along it read ahead, a
 * page a read, several in flight in one unit, which stays resident
 * meanwhile (_hm_sdm_sparse_ahead). The clock hand drops a referenced
 * unit's pages filled before its last pass instead of leaving the unit
 * whole until it evicts it with the pages in use (_hm_sdm_sparse_old).
 * And a spell whose page fills ran out goes on when its own stays still
 * look sparse (hm__spell_check). OpenBLAS's GEMM at 4x a 64 MiB budget
 * packs blocks whose watched units used 33-39 of 64 pages in 6 stays;
 * judged reused at half the unit, it took a spell now and then and ran 25%
 * slower. While sparse, a unit that filled fast ends it at once (fault.c:
 * half its pages soon, a quarter in one run, as a dense sweep fills).
 *
 * A watch that finds nothing doubles the wait before the next, from
 * PROBE_WAIT refills of the region up to PROBE_WAIT << PROBE_BACKOFF_MAX;
 * a watch costs a dense sweep the unit's page-sized fills (about 6 faults
 * with the walk) once per wait. A watch the reader leaves unvisited for
 * PROBE_PATIENCE cache-fulls of fills is dropped: a pass of numpy's FFT
 * along the columns of a complex matrix 4x the cache, reading one matrix
 * and writing another, takes 8 (after 4, no watch of it ever ended).
 * Cost: a few compares per prefetched unit, miss and eviction, under the
 * pager lock those hold. */
#include "sdm/pager_int.h"

#define PROBE_WAIT 64u        /* refills of a region before its first watch */
#define PROBE_BACKOFF_MAX 10u /* the wait doubles up to 64 << 10 refills */
#define PROBE_STAYS 6u        /* stays of a watched unit judged together */
#define PROBE_EARLY 3u        /* ...or this many, where they used an eighth of it */
#define PROBE_PATIENCE 32u    /* cache-fulls of fills a watch waits for the next stay */
#define SPARSE_FILLS 65536u   /* page fills between checks while sparse */

static unsigned hm__popcount(const uint64_t *bits) {
  unsigned n = 0;
  for (unsigned i = 0; i < HM_SDM_BITMAP_WORDS; i++) n += (unsigned)__builtin_popcountll(bits[i]);
  return n;
}

static void hm__probe_end(_hm_sdm_region_t *r, int found) {
  r->probe = 0;
  r->probe_stays = 0;
  if (found) {
    r->probe_backoff = 0;
  } else if (r->probe_backoff < PROBE_BACKOFF_MAX) {
    r->probe_backoff++;
  }
  r->probe_wait = PROBE_WAIT << r->probe_backoff;
}

/* A spell's page fills ran out (pager lock held): it goes on if its own
 * stays say the sweep is still sparse, at least 8 of them and no more
 * than one in 8 that used over a quarter of its unit; else the region
 * watches again. A stay is a unit evicted, or one whose old pages the
 * hand dropped (_hm_sdm_sparse_old). Ending every spell after its fills
 * cost hm-kernel-scan cols at 2x a watch's worth of whole-unit refills
 * (8 times the pages in use) every 2 passes. */
static void hm__spell_check(_hm_sdm_region_t *r) {
  int on = r->sparse_ok >= 8 && r->sparse_bad * 8 <= r->sparse_ok;
  r->sparse_ok = r->sparse_bad = 0;
  if (on) {
    r->sparse_left = SPARSE_FILLS;
    return;
  }
  r->sparse = 0;
  r->probe_wait = PROBE_WAIT;
}

/* A page-sized fill into slot S of r (pager lock held): counts down a
 * sparse spell. A watched unit takes no reference or heat from it: the
 * pager sees every use of it and of no other unit in anonymous mode, and
 * its stays, kept by those uses, lasted 4 passes of a sweep where other
 * units stayed one, which made a watch take 4 times as long. */
void _hm_sdm_sparse_filled(_hm_sdm_region_t *r, _hm_sdm_slot_t *S) {
  if (r->probe == S->unit + 1u) S->ref = S->heat = 0;
  if (r->sparse && --r->sparse_left == 0) hm__spell_check(r);
}

/* Whether prefetch leaves out absent unit u of r (pager lock held): the
 * region fills page by page, or u is watched, or a watch begins on it (a
 * unit refilled, in a region not read at random, whose wait is over,
 * where the caller lets one begin: watch). */
int _hm_sdm_sparse_skip(hm_pager_t *p, _hm_sdm_region_t *r, int64_t u, int watch) {
  if (r->sparse || r->probe == (uint32_t)u + 1u) return 1;
  if (r->probe) {
    if (p->fill_tick - r->probe_since <= PROBE_PATIENCE * p->nact + 64) return 0;
    hm__probe_end(r, 0); /* the reader left it */
  }
  const _hm_sdm_unit_t *U = &r->units[u];
  if (!watch || !(U->flags & HM_UF_OUT) || !(U->flags & HM_UF_ONDISK) || r->rnd_score >= 8) return 0;
  if (r->probe_wait == 0 && r->probe_backoff == 0) r->probe_wait = PROBE_WAIT;
  if (--r->probe_wait > 0) return 0;
  r->probe = (uint32_t)u + 1u;
  r->probe_since = p->fill_tick;
  r->probe_stays = 0;
  memset(r->probe_bits, 0, sizeof r->probe_bits);
  return 1;
}

/* Slot S of unit u of r leaves the cache (pager lock held): a watched
 * stay is judged; while sparse, a unit that filled fast ends it. */
void _hm_sdm_sparse_out(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                        const _hm_sdm_slot_t *S) {
  /* S->fast: its page fills reached half the unit soon (fault.c); a unit
   * filled whole before the spell began says nothing of the sweep now */
  if (r->sparse && S->fast) {
    r->sparse = 0;
    r->probe_wait = PROBE_WAIT << r->probe_backoff;
  }
  if (r->sparse) {
    if (_hm_sdm_longest_run(p, S->filled) * 4u > p->upages)
      r->sparse_bad++;
    else
      r->sparse_ok++;
  }
  if (r->probe != u + 1u) return;
  unsigned used = hm__popcount(S->filled);
  int dense = S->fast || used * 4u > p->upages;
  if (dense || used == 0) {
    hm__probe_end(r, 0);
    return;
  }
  for (unsigned i = 0; i < HM_SDM_BITMAP_WORDS; i++) r->probe_bits[i] |= S->filled[i];
  r->probe_since = p->fill_tick;
  /* Judged early where PROBE_EARLY stays used an eighth of the unit
   * together: a pass as sparse as 6 stays in a quarter allow, whose spell
   * then begins 3 cache-fulls of whole-unit refills sooner. numpy's
   * fft(axis=0) and fft2 of a 3000x3000 matrix at a 64 MiB budget make a
   * few passes over arrays 2x the cache, each region watched anew: 6.0-7.0
   * s against 5.75-6.4 s, and 12.9-15.7 s against 12.3-12.4 s (side by
   * side, 3 rounds each); no spell in GEMM, LU, strips, STREAM or FFT
   * kernels either way. */
  uint64_t all = hm__popcount(r->probe_bits);
  ++r->probe_stays;
  int early = r->probe_stays >= PROBE_EARLY && all * 8u <= p->upages;
  if (r->probe_stays < PROBE_STAYS && !early) return;
  /* The pages used together: no more than one stay may use, and, over the
   * whole region, within 3/4 of the cache. */
  int reused = all * 4u <= p->upages && all * r->len * 4u <= (uint64_t)p->upages * p->cap * 3u;
  hm__probe_end(r, reused);
  if (reused) {
    r->sparse = 1;
    r->sparse_left = SPARSE_FILLS;
    r->sparse_ok = r->sparse_bad = 0;
    HM_SDM_ADD(p, c_sparse, 1);
  }
}

/* The pages the clock hand drops from resident unit S of a sparse region
 * as it passes it referenced (pager lock held): those filled before its
 * last pass (old; 1 when there are any to drop). A sparse sweep uses a few
 * pages of every unit at a time, and the pages it used before are done
 * with, but CLOCK evicts whole units: hm-kernel-scan cols at 2x a 64 MiB
 * budget (two threads, 16 pages of a unit in use, 8 rows of 4 pages) read
 * its matrix 8 times a pass, the units that still held the pages in use
 * being evicted with the old ones, where Linux swap's LRU, page by page,
 * keeps the pages in use. The hand passes a unit about once per cache-full
 * of fills: a page filled before its last pass was filled over a
 * cache-full ago and, in anonymous mode, no use of it since is seen; the
 * unit's newer pages stay. Only clean units (sync write-protect: a dirty
 * one is written back whole), not in memfd mode (its pages are seen as
 * they are mapped again, and it unmaps to see them), and units of at most
 * 64 pages (one word of bits per slot). Cost: a few
 * loads, ands and compares a word of the bitmap, per unit the hand
 * passes, under the lock it holds. */
int _hm_sdm_sparse_old(const hm_pager_t *p, _hm_sdm_region_t *r, _hm_sdm_slot_t *S,
                       uint64_t *old) {
  *old = 0;
  if (!_hm_sdm_sparse_units(p)) return 0;
  uint64_t o = S->filled[0] & S->seen, keep = S->filled[0] & ~S->seen;
  S->seen = S->filled[0];
  if (!o || !keep || !r->sparse || p->memfd_mode || p->dirty_mode != HM_SDM_DIRTY_SYNC) return 0;
  if (S->dirty || S->pdirty || S->held || S->prefetched || S->installing) return 0;
  S->seen &= ~o;
  *old = o;
  r->sparse_ok++; /* a stay that used few pages, for hm__spell_check */
  return 1;
}

/* A page fill that reads page pg of unit u of r ahead of a strided thread
 * in a sparse spell, budget reserved (pager lock held; sparse.c). The unit
 * is on disk and resident or absent; the page is neither filled nor being
 * filled. */
static _hm_sdm_op_t *hm__pfill_op(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, uint32_t u,
                                  uint32_t pg) {
  hm_pager_t *p = h->p;
  _hm_sdm_op_t *op = _hm_sdm_pop_get(h);
  int32_t s = _hm_sdm_fill_slot(p, r, u, 1);
  _hm_sdm_rnd_dense(p, &p->slots[s], 1); /* a dense sweep read ahead still ends the spell */
  _hm_sdm_sparse_filled(r, &p->slots[s]);
  _hm_sdm_op_pages(op, &p->slots[s], r, u, s, pg, 1, 1);
  op->prefetch = 1;
  op->zero = 0;
  op->t0 = 0;
  HM_SDM_ADD(p, c_page_ahead, 1);
  return op;
}

/* Drops old[k] from the resident units of slots[k], which
 * _hm_sdm_sparse_old chose and the hand made BUSY (pager lock not held;
 * one process_madvise for up to 64 runs), then the units are resident
 * again with the rest, and the threads that faulted on them meanwhile
 * wake. The pages are clean: a fault on one fills it again from the file,
 * or with zeros where it was never written back. */
void _hm_sdm_sparse_trim(_hm_sdm_handler_t *h, const int32_t *slots, const uint64_t *old,
                         unsigned n) {
  hm_pager_t *p = h->p;
  void *addr[64];
  size_t len[64];
  char *ub[64];
  unsigned nr = 0;
  for (unsigned k = 0; k < n && k < 64; k++) {
    _hm_sdm_slot_t *S = &p->slots[slots[k]];
    ub[k] = _hm_sdm_ubase(S->reg, p, S->unit);
    unsigned i = 0, m;
    while ((m = _hm_sdm_run(&old[k], p->upages, &i)) > 0) {
      if (nr == 64) {
        (void)_hm_prim_vm_dontneed_runs(p->pidfd, addr, len, nr);
        nr = 0;
      }
      addr[nr] = ub[k] + (size_t)i * HM_SDM_PAGE;
      len[nr++] = (size_t)m * HM_SDM_PAGE;
      i += m;
    }
  }
  if (nr) (void)_hm_prim_vm_dontneed_runs(p->pidfd, addr, len, nr);
  uint64_t dropped = 0;
  pthread_mutex_lock(&p->lk);
  for (unsigned k = 0; k < n && k < 64; k++) {
    _hm_sdm_slot_t *S = &p->slots[slots[k]];
    unsigned m = (unsigned)__builtin_popcountll(old[k]);
    S->filled[0] &= ~old[k];
    S->nfilled = (uint16_t)(S->nfilled - m);
    p->used -= (uint64_t)m * HM_SDM_PAGE;
    p->resident -= (uint64_t)m * HM_SDM_PAGE;
    dropped += m;
    if (!_hm_sdm_unbusy(S)) ub[k] = NULL;
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  HM_SDM_ADD(p, c_trimmed, dropped);
  for (unsigned k = 0; k < n && k < 64; k++)
    if (ub[k]) _hm_sdm_wake(p, ub[k], p->unit);
}

/* The strider of (tid, r) (pager lock held): its own entry, or the least
 * recently used one, made its. */
static _hm_sdm_strider_t *hm__strider(hm_pager_t *p, int tid, const void *r) {
  _hm_sdm_strider_t *old = &p->striders[0];
  for (unsigned i = 0; i < HM_SDM_STRIDERS; i++) {
    _hm_sdm_strider_t *t = &p->striders[i];
    if (t->reg == r && t->tid == tid) {
      t->stamp = ++p->strider_stamp;
      return t;
    }
    if (t->stamp < old->stamp) old = t;
  }
  memset(old, 0, sizeof *old);
  old->reg = r;
  old->tid = tid;
  old->stamp = ++p->strider_stamp;
  return old;
}

/* Whether page x of r needs a read ahead: on disk, not read at random,
 * its unit neither in transit nor holding or reading it (pager lock
 * held). */
static int hm__wants_page(const hm_pager_t *p, const _hm_sdm_region_t *r, uint32_t u,
                          uint32_t pg) {
  const _hm_sdm_unit_t *U = &r->units[u];
  if (!(U->flags & HM_UF_ONDISK) || (U->flags & HM_UF_RANDOM)) return 0;
  if (U->state == HM_U_NONE) return 1;
  if (U->state != HM_U_RES) return 0;
  const _hm_sdm_slot_t *S = &p->slots[U->slot];
  return !_hm_sdm_bit(S->filled, pg) && !_hm_sdm_infl(S, pg);
}

/* Page fills ahead of thread tid at addr in sparse region r (pager lock
 * held): once its last faults there were the same stride apart twice in a
 * row, the pages one to HM_SDM_AHEAD strides further, those not read
 * ahead already; their ops go to ops (started by the caller once the lock
 * is dropped). A sweep down the columns of a matrix faults once per row,
 * the same page of each: Linux swap, whose readahead reads the faulting
 * page's neighbours in the address space, keeps ahead of it there, and
 * the pager's page fills were demand reads one at a time, about 150 us a
 * fault (hm-kernel-scan cols at 2x: 5 s a pass, swap 2.9 s). A fill ahead
 * is one page, so the pages in the cache are those the sweep uses now, as
 * with demand fills; the thread's next fault is on a page still being
 * read, or past them, and reads further ahead. Each fill holds a page op
 * (HM_SDM_PAGE_OPS a handler) until it completes; at most HM_SDM_AHEAD
 * are issued a fault. Write faults too: a store down a column (numpy's
 * FFT along axis 0 writes its output so) to a page on disk reads it first;
 * read ahead, numpy's fft(axis=0) of a 3000x3000 matrix at a 64 MiB budget
 * ran 5.9-6.9 s against 10.7-12.4 s (side by side, 3 rounds; swap 5.7 s
 * once). Page-aligned fault addresses had made FFT2's rows of 11.7 pages
 * look 11 and 12 pages apart by turns, and reading ahead on writes then
 * doubled its time; with exact addresses (pager.c) strides are exact.
 * Cost: a scan of HM_SDM_STRIDERS entries and up to HM_SDM_AHEAD page
 * lookups per fault in a spell, under the lock the fault holds. */
unsigned _hm_sdm_sparse_ahead(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int tid, uint64_t addr,
                              _hm_sdm_op_t **ops) {
  hm_pager_t *p = h->p;
  _hm_sdm_strider_t *t = hm__strider(p, tid, r);
  /* addr is exact where the kernel reports it (pager.c): a complex
   * matrix of 3000 columns has rows 11.7 pages apart, and page-aligned
   * faults were 11 and 12 pages apart by turns */
  const uint64_t a = addr;
  if (a != t->last) {
    /* a multiple of the stride within the window: the reader went over
     * pages read ahead (in anonymous mode, installed and never seen) */
    int64_t d = (int64_t)(a - t->last);
    int64_t k = t->stride ? d / t->stride : 0;
    if (t->last && k >= 1 && k <= HM_SDM_AHEAD + 1 && d == k * t->stride) {
      if (t->conf < 2) t->conf++;
    } else {
      t->stride = d;
      t->conf = 0;
      t->next = 0;
    }
    t->last = a;
  }
  /* a stride under two pages is a walk: the walk's fills (fault.c) read it,
   * and filling fast, it ends the spell */
  if (t->conf == 0) return 0;
  if (t->stride < 2 * HM_SDM_PAGE && t->stride > -2 * HM_SDM_PAGE) return 0;
  int64_t d = t->stride;
  uint64_t base = (uint64_t)(uintptr_t)r->base;
  uint64_t x = a + (uint64_t)d;
  int64_t k0 = t->next ? (int64_t)(t->next - a) / d : 0;
  if (k0 > 1 && k0 <= HM_SDM_AHEAD) x = t->next;
  unsigned n = 0;
  for (; n < HM_SDM_AHEAD && (int64_t)(x - a) / d <= HM_SDM_AHEAD; x += (uint64_t)d) {
    if (x < base || x - base >= r->len) break;
    uint32_t u = (uint32_t)((x - base) / p->unit);
    uint32_t pg = (uint32_t)((x - base) % p->unit / HM_SDM_PAGE);
    if (!hm__wants_page(p, r, u, pg)) continue;
    if (!h->free_pops || !_hm_sdm_reserve(p, HM_SDM_PAGE, r->units[u].state == HM_U_NONE))
      break;
    ops[n++] = hm__pfill_op(h, r, u, pg);
  }
  t->next = x;
  return n;
}
