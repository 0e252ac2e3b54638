/* SPDX-License-Identifier: BSD-3-Clause */
/* The slot table and eviction: slots of resident units, the queue of units
 * streams left behind, CLOCK, finding the dirty pages of a victim (per
 * dirty-tracking mode, see pager.c), the batched write-back of victims
 * through io_uring, and the write-back of one unit that stays resident
 * (hm_pager_flush). */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "sdm/pager_int.h"

#define HM__MAXVICT 16
#define HM__WB_DEPTH 4 /* a batch's writes in flight while faults are served */
#define HM__DENSE_EARNED 3u /* whole-unit refills a fast stay earns */

/* Unit U of r is filled again (pager lock held); returns its heat.
 *
 * One evicted as left behind by a stream and read again before an eighth
 * of the cache was filled since was not done with: the stream was sweeping
 * a span shorter than the cache again (a tile a BLAS call packs in several
 * passes, a panel reused for every tile of a row), where plain CLOCK would
 * have kept it. The region's streams then leave the units up to that far
 * behind them to CLOCK (_hm_sdm_demote_behind in demote.c); each such refill
 * widens the span by up to a walk, so a few refills learn a tile. What lies
 * further behind is still evicted first, which keeps part of a sweep larger
 * than the cache resident (test_sdm_loop).
 *
 * Heat: the pager sees a resident unit's use only when it faults, and data
 * all filled never faults again, so CLOCK was FIFO for it (XSBench at a 50%
 * budget: its hot per-nuclide grids were evicted as often as the index grid
 * it reads once per lookup; 2.3 M reads where swap, whose LRU sees the
 * accessed bits, missed 0.97 M times). One CLOCK evicted and filled again
 * within nact/8 fills would have been a hit in a slightly larger cache
 * (ARC's ghost hit, on a short list): its heat rises (to 3), and CLOCK
 * gives it as many extra turns (hm__take); one back later cools
 * (halves). nact/8, not nact: a row of a large table read at random came
 * back within nact fills half the time and took heat as the hot data did
 * (test_sdm_heat: 1.20 reads per lookup, 1.08 with nact/8, 1.30 without
 * heat). That window is for regions read mostly at random (rnd_score): a
 * STREAM triad at 2x ran 10-15% slower when its streams' units took heat
 * on it. Elsewhere a unit takes heat when it comes back in under 3/4 of
 * the mean refill distance of such refills (an exponential mean over the
 * last ~64), at most 8 cache-fulls: in a loop every unit comes back after
 * about the same number of fills and none is below the mean, but LAMMPS's
 * atom arrays (used by its force loop and four communication sweeps a
 * step) came back within 3-4 cache-fulls while its neighbour list, swept
 * once a step, came back after 13, and CLOCK, seeing no hit, evicted both
 * alike: at a 25% budget the arrays were read back 200 times in 50 steps.
 * Cost: a subtraction, two compares, a shift-add and a flag update per
 * fill. */
static unsigned hm__judge_refill(hm_pager_t *p, _hm_sdm_region_t *r, _hm_sdm_unit_t *U) {
  unsigned heat = (U->flags & HM_UF_HEAT) >> HM_UF_HEAT_SHIFT;
  if (!(U->flags & HM_UF_OUT)) return heat;
  uint32_t since = p->fill_tick - U->out_at;
  uint64_t eighth = p->cap / p->unit / 8;
  if ((U->flags & HM_UF_MRU_OUT) && since < eighth) {
    uint32_t span = (uint32_t)U->behind + 1u;
    if (span > eighth) span = (uint32_t)eighth;
    if (span > r->keep_behind) r->keep_behind = span;
    HM_SDM_ADD(p, c_resweep_refills, 1);
  } else if (!(U->flags & HM_UF_MRU_OUT)) {
    int soon;
    if (r->rnd_score >= 8) {
      soon = since < p->nact / 8;
    } else {
      /* below 3/4 of the mean (fixed point, x16), then into it */
      soon = (uint64_t)since * 16 * 4 < p->refault_avg * 3 && since < 8 * p->nact;
      p->refault_avg = p->refault_avg - p->refault_avg / 64 + (uint64_t)since * 16 / 64;
    }
    heat = soon ? (heat < 3 ? heat + 1 : 3) : heat / 2;
  }
  U->flags &= (uint8_t)~(HM_UF_OUT | HM_UF_MRU_OUT | HM_UF_HEAT);
  U->flags |= (uint8_t)(heat << HM_UF_HEAT_SHIFT);
  return heat;
}

/* wp_sync: a unit seen written in each of its last two residencies is
 * taken as dirty when filled again, and mapped unprotected. Otherwise its
 * first store waits for a write-protect fault, which the handler serves
 * between its reads and evictions: the tiled LU at 4x a 1 GiB budget took
 * 65k of them per run, and with every fill unprotected instead it ran in
 * 68-71 s, not 75-77 s, though it wrote 38% more. The price is the
 * write-back of a unit that was only read: of three fills of a unit, two
 * go unprotected and the third is watched. Only in regions where a unit
 * written in one residency mostly takes a WP fault in its next watched
 * one (read, then updated: LU's tiles) and not where it is mostly clean
 * then (written in one loop, read in the next: STREAM's arrays, whose
 * write-backs grew 35% at 2x when every region guessed). Cost: a few
 * compares per fill and per eviction, under the pager lock the caller
 * holds. */
static void hm__guess_dirty(const hm_pager_t *p, const _hm_sdm_region_t *r,
                            const _hm_sdm_unit_t *U, _hm_sdm_slot_t *S) {
  if (p->dirty_mode != HM_SDM_DIRTY_SYNC || U->wrote < 2 || r->guess_score < 0) return;
  S->dirty = 1;
  S->pdirty = 1;
}

/* What a victim's residency says of its unit's writes (pager lock held):
 * written as seen (a WP fault, or a store to an absent page) raises the
 * history, a guessed residency spends it, a clean one ends it. A watched
 * residency after a written one scores its region: +1 for a WP fault, -2
 * when clean (a store first, with no fault to save, counts neither). */
static void hm__learn_dirty(const hm_pager_t *p, _hm_sdm_region_t *r, _hm_sdm_unit_t *U,
                            const _hm_sdm_slot_t *S) {
  if (p->dirty_mode != HM_SDM_DIRTY_SYNC) return;
  if (S->pdirty) {
    U->wrote--;
    return;
  }
  if (U->wrote && (S->wpf || !S->dirty)) {
    int sc = r->guess_score + (S->wpf ? 1 : -2);
    r->guess_score = (int8_t)(sc > 16 ? 16 : sc < -16 ? -16 : sc);
  }
  U->wrote = S->dirty ? (U->wrote ? 3u : 1u) : 0u;
}

/* What a victim's residency says of its unit's density (pager lock held):
 * pages brought in fast by random demand fills (S->fast, hm__rnd_dense in
 * fault.c) earn it three whole-unit refills (hm__dense_back). A unit filled whole
 * cannot show whether its pages were used (anonymous mode sees no hits),
 * so it keeps what credit is left, and one refill in four is page-sized
 * again and learns anew, from fewer pages (hm__rnd_dense in fault.c;
 * test_sdm_heat, before that: 0.975 reads per lookup with two
 * credits, 0.971 with three; 0.924 when every dense unit came back whole,
 * which GUPS then did too: 12.4 KiB read per demand fault, not 6.8). */
static void hm__learn_dense(_hm_sdm_unit_t *U, const _hm_sdm_slot_t *S) {
  if (S->fast)
    U->dense = HM_DENSE_SEEN | HM__DENSE_EARNED;
  else if (!S->whole)
    U->dense = 0;
}

/* A slot for unit u of r (a reservation made room for it). Slots given
 * back are reused first; otherwise the next never-used one is taken from
 * the bump index slot_fresh, so the slot table (sized for the budget, up
 * to ~124 bytes per 8 KiB of it, reserved MAP_NORESERVE) is touched only
 * as far as the most slots in use at once: RSS follows use, not the budget,
 * and opening a pager touches none of it. Cost on the fault path: one
 * compare beside the list pop, under the pager lock as before (and one
 * call: the miss that takes a slot goes on to a read). */
int32_t _hm_sdm_slot_take(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u) {
  int32_t s = p->free_slot;
  if (s >= 0)
    p->free_slot = p->slots[s].next_free;
  else
    s = (int32_t)p->slot_fresh++; /* below nslots: _hm_sdm_reserve counted nact */
  _hm_sdm_slot_t *S = &p->slots[s];
  memset(S, 0, sizeof *S);
  S->used = 1;
  S->reg = r;
  S->unit = u;
  S->next_free = -1;
  S->act_pos = p->nact;
  S->born = p->page_tick;
  p->act[p->nact++] = (uint32_t)s;
  r->units[u].slot = s;
  p->fill_tick++;
  S->heat = (uint8_t)hm__judge_refill(p, r, &r->units[u]);
  hm__guess_dirty(p, r, &r->units[u], S);
  if (!(r->units[u].flags & HM_UF_SEEN)) {
    r->units[u].flags |= HM_UF_SEEN;
    r->seen_units++;
    p->seen_live += p->unit;
    if (p->seen_live > p->seen_peak) p->seen_peak = p->seen_live;
  }
  return s;
}

void _hm_sdm_slot_put(hm_pager_t *p, int32_t s) {
  _hm_sdm_slot_t *S = &p->slots[s];
  if (S->held) {
    /* A held page was reserved with its unit but never counted filled. */
    p->held_used &= ~(1ull << ((S->held & 0x7fu) - 1u));
    p->used -= HM_SDM_PAGE;
    S->held = 0;
  }
  uint32_t last = p->act[--p->nact];
  p->act[S->act_pos] = last;
  p->slots[last].act_pos = S->act_pos;
  S->used = 0;
  S->reg = NULL;
  S->next_free = p->free_slot;
  p->free_slot = s;
}

void _hm_sdm_drop_slot(hm_pager_t *p, int32_t s) {
  _hm_sdm_slot_t *S = &p->slots[s];
  uint64_t bytes = (uint64_t)S->nfilled * HM_SDM_PAGE;
  p->used -= bytes;
  p->resident -= bytes;
  if (S->prefetched) p->pf_untouched -= p->unit;
  _hm_sdm_slot_put(p, s);
}

/* ------------------------------------------------------------------------
 * Choosing victims (pager lock held)
 * ------------------------------------------------------------------------ */

/* Referenced units the hand passed that are unmapped to see their next
 * use (hm__see_add), after the lock is dropped: up to HM__MAXSEE a batch. */
#define HM__MAXSEE 32

/* Referenced units of sparse regions whose old pages the hand drops
 * (hm__trim_add), after the lock is dropped: up to HM__MAXTRIM a batch. */
#define HM__MAXTRIM 16

typedef struct hm__victims_s {
  int32_t slot[HM__MAXVICT];
  unsigned n;
  uint64_t freed, need;
  int32_t see[HM__MAXSEE];
  unsigned nsee;
  int32_t trim[HM__MAXTRIM];
  uint64_t told[HM__MAXTRIM]; /* the pages each drops (units of at most 64 pages) */
  unsigned ntrim;
} hm__victims_t;

static int hm__want_more(const hm__victims_t *v) {
  return v->n < HM__MAXVICT && (v->n == 0 || v->freed < v->need);
}

static void hm__victim_add(hm__victims_t *v, _hm_sdm_region_t *r, const _hm_sdm_slot_t *S,
                           int32_t s) {
  r->units[S->unit].state = HM_U_BUSY;
  r->busy++;
  v->slot[v->n++] = s;
  v->freed += (uint64_t)S->nfilled * HM_SDM_PAGE;
}

/* First the units streams left behind (_hm_sdm_demote_behind, demote.c), the
 * most recently left first. A region swept over and over that is larger
 * than the cache then keeps what the sweep passed first resident: those
 * units are hits on the next sweep, where taking the oldest first (what
 * CLOCK and LRU do) evicted each unit just before the sweep came back to it
 * and read the whole region on every sweep (a conjugate gradient at 1/3 of
 * its footprint re-read its matrix each iteration). An entry the ring
 * dropped goes back to CLOCK. The units advised cold (coldq) are taken the
 * same way, before these, and are not marked as left behind (a refill of
 * one says nothing about the stream's reach: hm__judge_refill). */
static void hm__take_demoted(hm_pager_t *p, _hm_sdm_vq_t *q, hm__victims_t *v) {
  while (q->n && hm__want_more(v)) {
    q->n--;
    _hm_sdm_vqe_t qe = q->e[(q->head + q->n) % HM_SDM_DEMQ];
    int32_t e = qe.slot;
    _hm_sdm_slot_t *S = &p->slots[e];
    /* Still demoted by this entry: the flag is reset when the slot is
     * taken again (an entry must not outlive the fill it was made for, or
     * a unit evicted and refilled into the same slot would be taken again
     * at once, before its faulting thread ran) and when an entry for it is
     * consumed; a slot queued again since has a newer tag. */
    if (!S->used || !S->demoted || S->dtag != qe.tag) continue;
    S->demoted = 0; /* from here on CLOCK's, whether taken now or not */
    if (S->pin || S->ref) continue; /* in use, or faulted on since it was left behind */
    _hm_sdm_region_t *r = S->reg;
    _hm_sdm_unit_t *U = &r->units[S->unit];
    if (r->dead || U->state != HM_U_RES || U->slot != e) continue;
    S->mru_victim = q == &p->demq;
    hm__victim_add(v, r, S, e);
  }
}

static void hm__vec_bits(const char *ub, const _hm_prim_page_region_t *vec, ssize_t n,
                         uint64_t *D);

/* Unmaps a mapped unit's pages (async write-protect, memfd mode: the memfd
 * keeps them) and sets in W its filled pages that were written since they
 * were mapped or last scanned: those whose write-protect marker is gone
 * (every filled page where the scan fails). -errno, nothing changed, when
 * the unmap failed. Cost: a madvise and a PAGEMAP_SCAN of one unit. */
static int hm__unmap_written(_hm_sdm_handler_t *h, const _hm_sdm_slot_t *S, uint64_t *W) {
  hm_pager_t *p = h->p;
  char *ub = _hm_sdm_ubase(S->reg, p, S->unit);
  int rc = _hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
  if (rc) return rc;
  uint64_t marked[HM_SDM_BITMAP_WORDS];
  memset(marked, 0, sizeof marked);
  static const _hm_prim_pm_query_t marked_q = {0, HM_PRIM_PAGE_IS_SWAPPED, 0, 0,
                                               HM_PRIM_PAGE_IS_SWAPPED};
  ssize_t n = _hm_prim_pagemap_query(p->pagemap, ub, p->unit, &marked_q, h->vec, p->upages, NULL);
  hm__vec_bits(ub, h->vec, n, marked); /* n < 0: none marked, all written */
  for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) W[w] = S->filled[w] & ~marked[w];
  return 0;
}

static int hm__any(const uint64_t *D) {
  int any = 0;
  for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) any |= D[w] != 0;
  return any;
}

/* A fresh reference bit for a unit the hand passes (memfd mode with async
 * write-protect, regions read mostly at random): CLOCK learns of a
 * resident unit's use only from a fault, so data that never faults again
 * looked unused however hot it was. Its pages are unmapped (the memfd
 * keeps them) as the hand clears the bit; the next access is a minor
 * fault that maps them again and sets the bit (hm__fault_hit), as the
 * kernel's LRU reads the accessed bits. test_sdm_heat: 0.91 reads per
 * lookup, what the cold table alone misses, against 1.09 with heat alone
 * in anonymous mode, where unmapping would drop the data. Written pages
 * lose their markers when unmapped and the minor fault maps them
 * protected again, so any such page makes the unit dirty as a whole
 * first. Cost, per referenced unit the hand passes: a madvise and a
 * PAGEMAP_SCAN, and a minor fault at its next use. */
static int hm__wants_seeing(const hm_pager_t *p, const _hm_sdm_region_t *r,
                            const _hm_sdm_slot_t *S) {
  return p->dirty_mode == HM_SDM_DIRTY_ASYNC && S->mapped && r->rnd_score >= 8;
}

static void hm__unmap_to_see(_hm_sdm_handler_t *h, _hm_sdm_slot_t *S) {
  uint64_t W[HM_SDM_BITMAP_WORDS];
  if (hm__unmap_written(h, S, W)) return;
  S->mapped = 0;
  if (hm__any(W)) S->dirty = 1;
}

/* The unit goes BUSY (a fault on it waits, as on a victim) and is
 * unmapped by hm__see_done once the lock is dropped: done under the lock,
 * the madvise and the scan held up every other thread's faults. Past
 * HM__MAXSEE a batch, under the lock as before. */
static void hm__see_add(_hm_sdm_handler_t *h, hm__victims_t *v, _hm_sdm_region_t *r,
                        _hm_sdm_slot_t *S, int32_t s) {
  if (!hm__wants_seeing(h->p, r, S)) return;
  if (v->nsee == HM__MAXSEE) {
    hm__unmap_to_see(h, S);
    return;
  }
  r->units[S->unit].state = HM_U_BUSY;
  r->busy++;
  v->see[v->nsee++] = s;
}

/* Unmaps the units hm__see_add queued (pager lock not held), makes them
 * resident again and wakes the threads that faulted on them meanwhile
 * (U->waits, set under the lock by the fault path): most units are seen
 * with no thread on them, and each wake is an ioctl. */
static void hm__see_done(_hm_sdm_handler_t *h, hm__victims_t *v) {
  hm_pager_t *p = h->p;
  uint64_t W[HM__MAXSEE][HM_SDM_BITMAP_WORDS];
  int ok[HM__MAXSEE];
  char *ub[HM__MAXSEE]; /* taken while BUSY: the slot may be reused after */
  for (unsigned k = 0; k < v->nsee; k++) {
    _hm_sdm_slot_t *S = &p->slots[v->see[k]];
    ub[k] = _hm_sdm_ubase(S->reg, p, S->unit);
    ok[k] = hm__unmap_written(h, S, W[k]) == 0;
  }
  pthread_mutex_lock(&p->lk);
  for (unsigned k = 0; k < v->nsee; k++) {
    _hm_sdm_slot_t *S = &p->slots[v->see[k]];
    if (ok[k]) S->mapped = 0;
    if (ok[k] && hm__any(W[k])) S->dirty = 1;
    if (!_hm_sdm_unbusy(S)) ub[k] = NULL;
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  for (unsigned k = 0; k < v->nsee; k++)
    if (ub[k]) _hm_sdm_wake(p, ub[k], p->unit);
  v->nsee = 0;
}

/* A referenced unit of a sparse region keeps its newer pages and drops
 * those filled before the hand's last pass (sparse.c, _hm_sdm_sparse_old).
 * It goes BUSY, like a unit to see, and hm__trim_done drops the pages once
 * the lock is dropped. 1 when queued. */
static int hm__trim_add(_hm_sdm_handler_t *h, hm__victims_t *v, _hm_sdm_region_t *r,
                        _hm_sdm_slot_t *S, int32_t s) {
  if (v->ntrim == HM__MAXTRIM || !_hm_sdm_sparse_old(h->p, r, S, &v->told[v->ntrim])) return 0;
  r->units[S->unit].state = HM_U_BUSY;
  r->busy++;
  v->freed += (uint64_t)__builtin_popcountll(v->told[v->ntrim]) * HM_SDM_PAGE;
  v->trim[v->ntrim++] = s;
  return 1;
}

/* Drops the pages hm__trim_add queued (sparse.c). */
static void hm__trim_done(_hm_sdm_handler_t *h, hm__victims_t *v) {
  _hm_sdm_sparse_trim(h, v->trim, v->told, v->ntrim);
  v->ntrim = 0;
}

/* CLOCK: a reference bit buys a unit one more turn, and so do each degree
 * of heat (hm__judge_refill) and being prefetched and not yet passed once
 * by the hand.
 *
 * First the cold (cool 0): the hand takes unreferenced units without heat
 * and passes hot ones without cooling them, while hot ones are at most 3/4
 * of what it passed (past 32 units); then, for what is still wanted, as
 * above (cool 1). Cooling hot units at every pass gave them only 3 more
 * turns, and a stream that fills the cache many times a step (LAMMPS's
 * neighbour list, 14 cache-fulls) wore that off before the arrays were
 * used again; cold units are what such a stream brings in, so while there
 * are enough of them they are the victims. test_sdm_cycle: a small array
 * used 4 times a step beside a stream 6x the cache was read back 2.8 times
 * in 24 uses, 24 times before. Cost: at most one pass over the units in
 * use before the cooling pass, under the lock eviction holds. */
static void hm__take(_hm_sdm_handler_t *h, hm__victims_t *v, int cool) {
  hm_pager_t *p = h->p;
  /* a unit may need 5 turns: its reference bit, 3 of heat, a prefetch's pass */
  uint32_t hot = 0, most = cool ? 5 * p->nact + 5 : p->nact;
  for (uint32_t steps = 0; steps < most && hm__want_more(v); steps++) {
    if (p->nact == 0 || (!cool && steps >= 32 && hot * 4 > steps * 3)) break;
    if (p->hand >= p->nact) p->hand = 0;
    uint32_t idx = p->act[p->hand++];
    _hm_sdm_slot_t *S = &p->slots[idx];
    if (!S->used || S->pin) continue;
    _hm_sdm_region_t *r = S->reg;
    if (r->units[S->unit].state != HM_U_RES || r->dead) continue;
    if (!cool && S->heat) {
      hot++;
      continue;
    }
    if (S->ref) {
      S->ref = 0;
      if (!hm__trim_add(h, v, r, S, (int32_t)idx)) hm__see_add(h, v, r, S, (int32_t)idx);
      continue;
    }
    if (S->heat) {
      S->heat--;
      continue;
    }
    if (S->prefetched && !S->passed) {
      S->passed = 1;
      continue;
    }
    hm__victim_add(v, r, S, (int32_t)idx);
  }
}


/* ------------------------------------------------------------------------
 * Dirty pages and write-back
 * ------------------------------------------------------------------------ */

/* Sets in D the pages of [ub, ub + unit) that vec's n regions cover. */
static void hm__vec_bits(const char *ub, const _hm_prim_page_region_t *vec, ssize_t n,
                         uint64_t *D) {
  uint64_t base = (uint64_t)(uintptr_t)ub;
  for (ssize_t k = 0; k < n; k++)
    for (uint64_t x = vec[k].start; x < vec[k].end; x += HM_SDM_PAGE)
      _hm_sdm_setbit(D, (unsigned)((x - base) / HM_SDM_PAGE));
}

/* Finds which filled pages of a victim must be written and stops writers.
 * Victim is BUSY, so no fault on it is being resolved meanwhile. */
static void hm__victim_dirty(_hm_sdm_handler_t *h, _hm_sdm_slot_t *S, uint64_t *D) {
  hm_pager_t *p = h->p;
  char *ub = _hm_sdm_ubase(S->reg, p, S->unit);
  memset(D, 0, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  if (p->dirty_mode == HM_SDM_DIRTY_ASYNC) {
    /* dirty: a flush whose write failed left its pages protected
     * (PAGEMAP_SCAN re-armed them), or hm__unmap_to_see found written
     * pages: their markers say nothing, write all */
    if (S->dirty) memcpy(D, S->filled, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
    if (!S->mapped) return; /* not visible to the application since */
    uint64_t W[HM_SDM_BITMAP_WORDS];
    if (hm__unmap_written(h, S, W)) memcpy(W, S->filled, sizeof W);
    for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) D[w] |= W[w];
  } else if (p->dirty_mode == HM_SDM_DIRTY_SYNC) {
    if (!S->dirty) return;
    (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 1);
    memcpy(D, S->filled, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  } else {
    if (p->memfd_mode && !S->mapped) return; /* never visible: clean */
    if (p->memfd_mode) (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
    memcpy(D, S->filled, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  }
}

/* Where the pager reads unit u of r to write it back: the alias in memfd
 * mode, the application's view otherwise. */
static char *hm__wb_src(const hm_pager_t *p, const _hm_sdm_region_t *r, uint32_t u) {
  return p->memfd_mode ? r->alias + (uint64_t)u * p->unit : _hm_sdm_ubase(r, p, u);
}

/* A batch's write-backs: victim v's dirty pages in D[v], its failure in
 * failed[v]; the next run to submit at page ci of victim ck. */
typedef struct hm__wb_s {
  uint64_t D[HM__MAXVICT][HM_SDM_BITMAP_WORDS];
  int failed[HM__MAXVICT];
  unsigned inflight, ck, ci;
} hm__wb_t;

/* A write-back the device refused: retried synchronously, page run by page
 * run. If the device still refuses, the process ends (guard.c): kept
 * resident, such units would fill the cache until every fault waited for
 * budget forever, and dropped, their data would be lost. */
static void hm__wb_retry(hm_pager_t *p, const _hm_sdm_slot_t *S, const uint64_t *D) {
  _hm_sdm_region_t *r = S->reg;
  uint32_t u = S->unit;
  char *src0 = hm__wb_src(p, r, u);
  unsigned i = 0, n;
  while ((n = _hm_sdm_run(D, p->upages, &i)) > 0) {
    uint64_t off = (uint64_t)u * p->unit + (uint64_t)i * HM_SDM_PAGE;
    ssize_t w = _hm_prim_vm_pio(r->file, 1, src0 + (size_t)i * HM_SDM_PAGE, n * HM_SDM_PAGE, off);
    if (w < 0) {
      HM_SDM_ADD(p, c_io_errors, 1);
      _hm_sdm_io_fatal(p->dir, 1, off, (size_t)n * HM_SDM_PAGE, (int)w);
    }
    i += n;
  }
}

/* Releases the victims' memory once written back (a refused write-back
 * retried first, from the pages themselves). Anonymous mode frees the
 * whole batch in one call: one TLB shootdown for up to HM__MAXVICT units
 * where the kernel batches them, where one madvise per unit interrupted
 * the other CPUs once per unit (madvise was 20% of the handler's time on a
 * 2x scan, most of it tlb_finish_mmu). */
static void hm__victims_release(hm_pager_t *p, const hm__victims_t *v, const hm__wb_t *wb) {
  void *addr[HM__MAXVICT];
  for (unsigned k = 0; k < v->n; k++) {
    _hm_sdm_slot_t *S = &p->slots[v->slot[k]];
    if (wb->failed[k] && hm__any(wb->D[k])) hm__wb_retry(p, S, wb->D[k]);
    if (p->memfd_mode)
      (void)_hm_prim_vm_punch(S->reg->memfd, (uint64_t)S->unit * p->unit, p->unit);
    addr[k] = _hm_sdm_ubase(S->reg, p, S->unit);
  }
  if (!p->memfd_mode) (void)_hm_prim_vm_dontneed_many(p->pidfd, addr, p->unit, v->n);
}

/* Whether victim S was left behind by its stream lately: within the last
 * cache-full of fills. The demoted are taken newest first, so one queued a
 * sweep ago may be taken only a few fills before its stream comes round
 * again; counted as just left, it read as a span the stream came back to
 * soon (hm__judge_refill), and a loop of 3x the cache (two threads)
 * learned keep_behind from it and kept 0.62-0.71 of its cache under a
 * parallel ctest instead of 0.8 (test_sdm_loop). Dating such units from
 * their pass instead cost OpenBLAS GEMM at 4x 13.5-14.8 s against
 * 11.2-11.5: its panels' spans are learned from evictions soon after the
 * pass. Pager lock held. */
static int hm__just_left(const hm_pager_t *p, const _hm_sdm_slot_t *S) {
  return S->mru_victim && p->fill_tick - S->dtick < p->cap / p->unit;
}

/* Frees victim s once its memory is released: its slot, its budget; wakes
 * the threads that faulted on it meanwhile. */
static void hm__victim_free(hm_pager_t *p, int32_t s, const uint64_t *D) {
  _hm_sdm_slot_t *S = &p->slots[s];
  _hm_sdm_region_t *r = S->reg;
  uint32_t u = S->unit;
  char *ub = _hm_sdm_ubase(r, p, u);
  int wrote = hm__any(D);
  /* Counted before the unit leaves BUSY: a flush that waited for it reads
   * counters that include its write-back. */
  HM_SDM_ADD(p, c_evictions, 1);
  if (wrote) HM_SDM_ADD(p, c_writebacks, 1);
  pthread_mutex_lock(&p->lk);
  uint64_t bytes = (uint64_t)S->nfilled * HM_SDM_PAGE;
  if (S->prefetched) {
    p->pf_untouched -= p->unit;
    _hm_sdm_pf_resolved(p, r, 0);
    HM_SDM_ADD(p, c_pf_wasted, 1);
  }
  p->used -= bytes;
  p->resident -= bytes;
  if (wrote) r->units[u].flags |= HM_UF_ONDISK;
  hm__learn_dirty(p, r, &r->units[u], S);
  r->units[u].flags |= (uint8_t)(HM_UF_OUT | (hm__just_left(p, S) ? HM_UF_MRU_OUT : 0));
  r->units[u].out_at = p->fill_tick;
  hm__learn_dense(&r->units[u], S);
  _hm_sdm_sparse_out(p, r, u, S);
  r->units[u].state = HM_U_NONE;
  r->units[u].slot = -1;
  _hm_sdm_slot_put(p, s);
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_wake(p, ub, p->unit);
}

/* Bytes one eviction batch frees: up to 2 MiB, 1/16 of the cache at most
 * (the write-backs of a batch run in parallel, and the bookkeeping is
 * shared). Pager lock held: the cache's size moves with the regions. */
static uint64_t hm__batch_bytes(const hm_pager_t *p) {
  return p->cap / 16 < (2u << 20) ? p->cap / 16 : (2u << 20);
}

/* An eviction batch whose write-backs are in flight. Its victims stay BUSY
 * (a fault on one waits, hm__fault_transit) while the handler serves the
 * other faults; the batch ends when its last write completes (the write
 * ring's eventfd wakes the handler, _hm_sdm_evict_ahead). One per handler:
 * a second would only queue behind the first on the device. */
struct _hm_sdm_evb_s {
  hm__victims_t v;
  hm__wb_t wb;
  int active;
  int stalled; /* a fault or a prefetch waited for it */
};

/* Chooses victims for `need` bytes, finds their dirty pages and queues
 * their writes; -EAGAIN when every resident unit is busy, 1 when dropping
 * old pages of sparse units alone made room (no batch). */
static int hm__batch_start(_hm_sdm_handler_t *h, uint64_t need) {
  hm_pager_t *p = h->p;
  struct _hm_sdm_evb_s *b = h->evb;
  b->v.n = 0;
  b->v.nsee = 0;
  b->v.ntrim = 0;
  b->v.freed = 0;
  pthread_mutex_lock(&p->lk);
  uint64_t batch = hm__batch_bytes(p);
  b->v.need = need < batch ? batch : need;
  hm__take_demoted(p, &p->coldq, &b->v); /* advised cold, then left behind */
  hm__take_demoted(p, &p->demq, &b->v);
  hm__take(h, &b->v, 0); /* the cold, then CLOCK */
  hm__take(h, &b->v, 1);
  pthread_mutex_unlock(&p->lk);
  if (b->v.nsee) hm__see_done(h, &b->v);
  int trimmed = b->v.ntrim > 0;
  if (trimmed) hm__trim_done(h, &b->v);
  if (b->v.n == 0) return trimmed ? 1 : -EAGAIN; /* room made, nothing to write */
  b->wb.inflight = b->wb.ck = b->wb.ci = 0;
  for (unsigned k = 0; k < b->v.n; k++) {
    b->wb.failed[k] = 0;
    hm__victim_dirty(h, &p->slots[b->v.slot[k]], b->wb.D[k]);
  }
  b->active = 1;
  b->stalled = 0;
  return 0;
}

/* Queues the batch's next runs until depth writes are in flight (or the
 * ring is full). Why a depth: the device serves reads behind the writes
 * queued before them, and a fault's read waited behind a whole batch (2
 * MiB) of writes; the kernel's I/O schedulers favour reads likewise. */
static void hm__wb_pump(_hm_sdm_handler_t *h, unsigned depth) {
  hm_pager_t *p = h->p;
  hm__wb_t *wb = &h->evb->wb;
  const hm__victims_t *v = &h->evb->v;
  unsigned n0 = wb->inflight;
  while (wb->ck < v->n && wb->inflight < depth) {
    _hm_sdm_slot_t *S = &p->slots[v->slot[wb->ck]];
    unsigned n = _hm_sdm_run(wb->D[wb->ck], p->upages, &wb->ci);
    if (n == 0) {
      wb->ck++;
      wb->ci = 0;
      continue;
    }
    char *src = hm__wb_src(p, S->reg, S->unit) + (size_t)wb->ci * HM_SDM_PAGE;
    uint64_t off = (uint64_t)S->unit * p->unit + (uint64_t)wb->ci * HM_SDM_PAGE;
    uint64_t tag = ((uint64_t)wb->ck << 32) | wb->ci;
    if (_hm_prim_ring_rw(h->wring, HM_PRIM_RING_WRITE, S->reg->file, src, n * HM_SDM_PAGE, off,
                         tag))
      break; /* full: the next completion makes room */
    wb->inflight++;
    HM_SDM_ADD(p, c_bytes_written, (uint64_t)n * HM_SDM_PAGE);
    wb->ci += n;
  }
  if (wb->inflight > n0) (void)_hm_prim_ring_submit(h->wring);
}

/* Reaps the batch's completed writes (waiting for all of them when wait);
 * once none is left, frees its victims. 1 when the batch has ended. */
static int hm__batch_reap(_hm_sdm_handler_t *h, int wait) {
  hm_pager_t *p = h->p;
  struct _hm_sdm_evb_s *b = h->evb;
  for (;;) {
    /* Once a fault or a prefetch waits for the room (stalled), what
     * matters is the batch's end: its writes go all at once. */
    hm__wb_pump(h, wait || b->stalled ? UINT32_MAX : HM__WB_DEPTH);
    if (b->wb.inflight == 0) {
      /* none could be queued (no write was in flight to free a ring
       * entry): what is left is written from the pages themselves */
      for (unsigned k = b->wb.ck; k < b->v.n; k++) b->wb.failed[k] = -EBUSY;
      break;
    }
    uint64_t t;
    int res;
    int rc = _hm_prim_ring_next(h->wring, wait ? -1 : 0, &t, &res);
    if (rc == 0 && !wait) return 0; /* the handler's poll wakes on its completions */
    if (rc != 1) { /* the ring failed: each unit is written again from its pages */
      for (unsigned k = 0; k < b->v.n; k++) b->wb.failed[k] = rc < 0 ? rc : -EIO;
      break;
    }
    b->wb.inflight--;
    if (res < 0) b->wb.failed[(unsigned)(t >> 32)] = res;
  }
  hm__victims_release(p, &b->v, &b->wb);
  for (unsigned k = 0; k < b->v.n; k++) hm__victim_free(p, b->v.slot[k], b->wb.D[k]);
  b->active = 0;
  if (b->stalled) HM_SDM_ADD(p, c_wb_stalls, 1);
  return 1;
}

int _hm_sdm_evict(_hm_sdm_handler_t *h, uint64_t need) {
  if (h->evb->active) (void)hm__batch_reap(h, 1);
  int rc = hm__batch_start(h, need);
  if (rc) return rc < 0 ? -EAGAIN : 0;
  (void)hm__batch_reap(h, 1);
  return 0;
}

int _hm_sdm_evict_async(_hm_sdm_handler_t *h, uint64_t need) {
  struct _hm_sdm_evb_s *b = h->evb;
  if (!b->active) {
    int rc = hm__batch_start(h, need);
    if (rc) return rc < 0 ? -EAGAIN : 0;
  }
  if (hm__batch_reap(h, 0)) return 0; /* clean victims end at once */
  b->stalled = 1;
  return -EINPROGRESS;
}

/* Low water: less than a batch free. Cost per handler pass: two loads
 * under the pager lock, taken only when no batch is in flight. */
void _hm_sdm_evict_ahead(_hm_sdm_handler_t *h) {
  hm_pager_t *p = h->p;
  if (h->evb->active) {
    (void)hm__batch_reap(h, 0);
    return;
  }
  pthread_mutex_lock(&p->lk);
  uint64_t batch = hm__batch_bytes(p);
  int low = p->used + batch > p->cap && p->nact > 0;
  pthread_mutex_unlock(&p->lk);
  if (!low || hm__batch_start(h, batch)) return;
  HM_SDM_ADD(p, c_ev_ahead, 1);
  (void)hm__batch_reap(h, 0);
}

int _hm_sdm_evict_wait(_hm_sdm_handler_t *h) {
  if (!h->evb->active) return -EAGAIN;
  h->evb->stalled = 1;
  (void)hm__batch_reap(h, 1);
  return 0;
}

int _hm_sdm_evict_busy(const _hm_sdm_handler_t *h) { return h->evb->active; }

void _hm_sdm_evict_drain(_hm_sdm_handler_t *h) {
  if (h->evb->active) (void)hm__batch_reap(h, 1);
}

int _hm_sdm_evict_init(_hm_sdm_handler_t *h) {
  h->evb = calloc(1, sizeof *h->evb);
  return h->evb ? 0 : -ENOMEM;
}

void _hm_sdm_evict_fini(_hm_sdm_handler_t *h) {
  free(h->evb);
  h->evb = NULL;
}

/* ------------------------------------------------------------------------
 * Write-back of a unit that stays resident (hm_pager_flush)
 * ------------------------------------------------------------------------ */

/* What hm__flush_begin saw of a unit it made BUSY. */
typedef struct hm__flushing_s {
  _hm_sdm_slot_t *S;
  uint64_t filled[HM_SDM_BITMAP_WORDS];
  int mapped, dirty;
} hm__flushing_t;

/* Waits for the unit and makes it BUSY; 0 when it is not resident. */
static int hm__flush_begin(hm_pager_t *p, _hm_sdm_region_t *r, _hm_sdm_unit_t *U,
                           hm__flushing_t *fl) {
  pthread_mutex_lock(&p->lk);
  _hm_sdm_wait_unit(p, U);
  if (U->state != HM_U_RES) {
    pthread_mutex_unlock(&p->lk);
    return 0;
  }
  _hm_sdm_slot_t *S = &p->slots[U->slot];
  U->state = HM_U_BUSY;
  r->busy++;
  fl->S = S;
  memcpy(fl->filled, S->filled, sizeof fl->filled);
  fl->mapped = S->mapped;
  fl->dirty = S->dirty;
  S->dirty = 0;
  S->pdirty = 0; /* protected again below: its next write is seen */
  pthread_mutex_unlock(&p->lk);
  return 1;
}

/* The pages of a flushed unit to write, per dirty-tracking mode; protection
 * is re-armed so that later writes are seen. */
static void hm__flush_dirty(hm_pager_t *p, char *ub, const hm__flushing_t *fl,
                            _hm_prim_page_region_t *vec, uint64_t *D) {
  memset(D, 0, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  if (p->dirty_mode == HM_SDM_DIRTY_ASYNC) {
    if (fl->dirty) memcpy(D, fl->filled, sizeof fl->filled); /* see hm__victim_dirty */
    if (!fl->mapped) return;
    /* Re-arms protection atomically while reporting what was written. */
    static const _hm_prim_pm_query_t written_q = {HM_PRIM_PM_WP_MATCHING, HM_PRIM_PAGE_IS_WRITTEN,
                                                  0, 0, HM_PRIM_PAGE_IS_WRITTEN};
    ssize_t n = _hm_prim_pagemap_query(p->pagemap, ub, p->unit, &written_q, vec, p->upages, NULL);
    if (n < 0) memcpy(D, fl->filled, sizeof fl->filled);
    hm__vec_bits(ub, vec, n, D);
    for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) D[w] &= fl->filled[w];
  } else if (p->dirty_mode == HM_SDM_DIRTY_SYNC) {
    if (!fl->dirty) return;
    (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 1);
    memcpy(D, fl->filled, sizeof fl->filled);
  } else {
    memcpy(D, fl->filled, sizeof fl->filled);
  }
}

/* Writes D's runs of unit u synchronously; the first error, or 0. */
static int hm__flush_write(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u, const uint64_t *D,
                           int *wrote) {
  char *src0 = hm__wb_src(p, r, u);
  unsigned i = 0, n;
  int rc = 0;
  while ((n = _hm_sdm_run(D, p->upages, &i)) > 0) {
    uint64_t foff = (uint64_t)u * p->unit + (uint64_t)i * HM_SDM_PAGE;
    ssize_t w = _hm_prim_vm_pio(r->file, 1, src0 + (size_t)i * HM_SDM_PAGE, n * HM_SDM_PAGE, foff);
    if (w < 0)
      rc = (int)w;
    else
      HM_SDM_ADD(p, c_bytes_written, (uint64_t)w);
    *wrote = 1;
    i += n;
  }
  return rc;
}

int _hm_sdm_flush_unit(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                       _hm_prim_page_region_t *vec) {
  _hm_sdm_unit_t *U = &r->units[u];
  hm__flushing_t fl;
  if (!hm__flush_begin(p, r, U, &fl)) return 0;
  char *ub = _hm_sdm_ubase(r, p, u);
  uint64_t D[HM_SDM_BITMAP_WORDS];
  hm__flush_dirty(p, ub, &fl, vec, D);
  int wrote = 0;
  int rc = hm__flush_write(p, r, u, D, &wrote);
  pthread_mutex_lock(&p->lk);
  if (wrote && !rc) U->flags |= HM_UF_ONDISK;
  if (rc) fl.S->dirty = 1;
  U->state = HM_U_RES;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  if (wrote && !rc) HM_SDM_ADD(p, c_writebacks, 1);
  _hm_sdm_wake(p, ub, p->unit);
  return rc;
}
