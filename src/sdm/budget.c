/* SPDX-License-Identifier: BSD-3-Clause */
/* The budget at run time (hm_pager_set_budget): a caller that shares its
 * fast budget with memory of its own (hybrid placement: the sites pinned
 * in DRAM) gives the pager what that memory leaves free at each moment,
 * not a share fixed at start-up for the other memory's peak.
 *
 * The new budget is published with one atomic store and a handler is woken
 * (the WILLNEED eventfd); the handler applies it under the pager lock and,
 * when the cache now holds more than it may, evicts down to it. Growing
 * takes effect at the next fill; faults deferred for want of budget retry
 * within 0.5 ms. Cost to the caller: a store and an eventfd write.
 *
 * With HM_PAGER_PROCESS_BUDGET the budget bounds the whole process, as a
 * memory cgroup bounds what Linux swap gets: handler 0 reads the process's
 * anonymous and shared memory every 100 ms (one /proc/self/status read,
 * 10 us here), takes the cache and the pager's own memory out of it, and
 * the cache gets the budget opened with less that other memory (heap
 * blocks below the interposer's threshold, static data, stacks, tier 0's
 * blocks in hybrid mode), or the budget set, whichever is less. Between
 * two measures the process can run over by what it grew in 100 ms. */
#include <errno.h>

#include "sdm/pager_int.h"

/* The prefetch window limit and the streams' shared window, from the
 * cache: a window may cover io_depth reads of up to HM_SDM_GROUP_BYTES
 * each (a prefetch read spans several units), and a quarter of the cache.
 * All streams' windows together cover at most half the cache and twice
 * that limit: the device cannot have more than one window's reads in
 * flight, so more ahead only takes cache from what a loop keeps resident
 * (STREAM's triad, six streams, kept 0.4-0.7 of the cache when they shared
 * half of it). Sized again whenever the cache moves: sized once for the
 * budget a hybrid run's pager opens with (the whole fast budget), the
 * windows stayed that large when the DRAM sites left it 5 MiB, and LAMMPS
 * at a 50% budget read 31 GB for a 69 MB footprint in 50 steps (12 GB
 * with prefetch off). Every region's own limit follows (O(regions)): it
 * never exceeds the pager's, and without the accuracy feedback that moves
 * it (memfd mode only, _hm_sdm_pf_resolved) it is the pager's; a new
 * region (limit 0) starts at it. */
static void hm__size_windows(hm_pager_t *p) {
  uint64_t cu = p->cap / p->unit;
  uint64_t mw = (uint64_t)p->cfg.io_depth * _hm_sdm_read_units(p);
  p->maxwin = (uint32_t)(cu / 4 < mw ? cu / 4 : mw);
  if (p->maxwin < 1) p->maxwin = 1;
  uint64_t share = cu / 2 < 2 * mw ? cu / 2 : 2 * mw;
  p->pf.share = (uint32_t)(share > UINT32_MAX ? UINT32_MAX : share);
  for (size_t i = 0; i < p->nregs; i++) {
    _hm_sdm_region_t *r = p->regs[i];
    if (!p->memfd_mode || !r->pf_limit || r->pf_limit > p->maxwin) r->pf_limit = p->maxwin;
  }
}

/* The cache the budget allows (pager lock held): the budget less the
 * pager's own memory, at least 4 units so that a stream and its prefetch
 * still make progress, never more than the budget the pager was opened
 * with; and the prefetch windows that fit it. Called again whenever the
 * budget or the own memory changes (region.c). */
void _hm_sdm_cap_update(hm_pager_t *p) {
  uint64_t floor = p->own + 4 * p->unit, b = p->budget;
  if (b < floor) b = floor;
  if (b > p->cfg.dram_budget) b = p->cfg.dram_budget;
  p->cap = b > p->own ? (b - p->own) & ~(uint64_t)(HM_SDM_PAGE - 1) : 0;
  hm__size_windows(p);
}

/* Adds the time at the budget held until now to its integral (pager lock
 * held): the mean budget of the run is reported (hm_pager_stats). */
static void hm__budget_tick(hm_pager_t *p, uint64_t now) {
  p->budget_area += (double)(p->cap + p->own) * (double)(now - p->budget_t);
  p->budget_t = now;
}

int hm_pager_set_budget(hm_pager_t *p, uint64_t bytes) {
  if (!p || bytes == 0) return -EINVAL;
  if (bytes > p->cfg.dram_budget) bytes = p->cfg.dram_budget;
  uint64_t old = atomic_exchange_explicit(&p->budget_want, bytes, memory_order_relaxed);
  if (old == bytes) return 0;
  uint64_t one = 1;
  ssize_t w = _hm_prim_write(p->evfd, &one, sizeof one);
  return w < 0 ? (int)w : 0;
}

int hm_pager_exclude_bytes(hm_pager_t *p, int64_t delta) {
  if (!p) return -EINVAL;
  atomic_fetch_add_explicit(&p->excluded, delta, memory_order_relaxed);
  return 0;
}

/* The budget to apply now (pager lock held): the last one set, and under
 * HM_PAGER_PROCESS_BUDGET at most what the rest of the process leaves of
 * the budget opened with. A change smaller than a unit is not applied:
 * the measure moves by a few pages every time. */
static uint64_t hm__budget_target(hm_pager_t *p) {
  uint64_t want = atomic_load_explicit(&p->budget_want, memory_order_relaxed);
  if (p->cfg.flags & HM_PAGER_PROCESS_BUDGET) {
    uint64_t left = p->cfg.dram_budget > p->other ? p->cfg.dram_budget - p->other : 0;
    if (left < want) want = left;
  }
  uint64_t d = want > p->budget ? want - p->budget : p->budget - want;
  return d < p->unit ? p->budget : want;
}

/* Measures the rest of the process (handler 0, every 100 ms, under
 * HM_PAGER_PROCESS_BUDGET): 1 when the budget should move. */
int _hm_sdm_budget_measure(_hm_sdm_handler_t *h, uint64_t now) {
  hm_pager_t *p = h->p;
  if (now < p->other_next) return 0;
  p->other_next = now + 100 * 1000 * 1000;
  uint64_t all;
  if (_hm_prim_self_anon_bytes(hm_ctx_fsroot(p->ctx), &all)) return 0;
  pthread_mutex_lock(&p->lk);
  /* resident, not used: units being filled are not in RSS yet */
  int64_t ex = atomic_load_explicit(&p->excluded, memory_order_relaxed);
  uint64_t mine = p->resident + p->own + (ex > 0 ? (uint64_t)ex : 0);
  p->other = all > mine ? all - mine : 0;
  if (p->other > p->other_peak) p->other_peak = p->other;
  int move = hm__budget_target(p) != p->budget;
  pthread_mutex_unlock(&p->lk);
  return move;
}

/* Applies the budget last set (a handler, woken by hm_pager_set_budget or
 * by a measure of the process): evicts until the cache is within it, or
 * nothing more can go now (units in transit: the next fills evict the
 * rest). */
void _hm_sdm_budget_apply(_hm_sdm_handler_t *h) {
  hm_pager_t *p = h->p;
  pthread_mutex_lock(&p->lk);
  uint64_t want = hm__budget_target(p);
  if (want == p->budget) {
    pthread_mutex_unlock(&p->lk);
    return;
  }
  hm__budget_tick(p, _hm_prim_now_ns());
  p->budget = want;
  _hm_sdm_cap_update(p);
  if (p->cap + p->own < p->budget_low) p->budget_low = p->cap + p->own;
  uint64_t over = p->used > p->cap ? p->used - p->cap : 0;
  pthread_mutex_unlock(&p->lk);
  while (over > 0 && _hm_sdm_evict(h, over) == 0) {
    pthread_mutex_lock(&p->lk);
    over = p->used > p->cap ? p->used - p->cap : 0;
    pthread_mutex_unlock(&p->lk);
  }
}

/* The budget's mean over the pager's life so far and its lowest value
 * (pager lock held). */
void _hm_sdm_budget_figures(hm_pager_t *p, uint64_t *mean, uint64_t *low) {
  uint64_t now = _hm_prim_now_ns();
  hm__budget_tick(p, now);
  double span = (double)(now - p->budget_t0);
  *mean = span > 0 ? (uint64_t)(p->budget_area / span) : p->budget;
  *low = p->budget_low;
}
