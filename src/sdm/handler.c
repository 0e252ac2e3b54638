/* SPDX-License-Identifier: BSD-3-Clause */
/* The handler threads: each polls its io_uring for userfaultfd messages,
 * the WILLNEED eventfd and completed fills; reads faults in batches; keeps
 * the faults that found no op or budget and retries them; and runs the
 * prefetch plans faults queued, one read at a time in between, so that a
 * reader never waits behind prefetch work (see pager.c). */
#include <errno.h>
#include <stdlib.h>

#include "sdm/pager_int.h"

#define HM__TAG_UFFD 1u
#define HM__TAG_EVENT 2u
#define HM__TAG_RET 3u /* the copier gave ops back while none was free */
#define HM__TAG_WB 4u  /* write-backs of the eviction batch completed */
#define HM__MSG_BATCH 64

/* ------------------------------------------------------------------------
 * Prefetch reads
 * ------------------------------------------------------------------------ */

#define HM__PF_FWD 1u   /* going forward: one read may cover several units */
#define HM__PF_WATCH 2u /* a sparse watch may begin here (sparse.c) */

/* Whether unit u of r may be prefetched now (pager lock held): 1 yes, 0
 * nothing to do there, < 0 to stop the plan. */
static int hm__group_ok(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int64_t u, unsigned how) {
  hm_pager_t *p = h->p;
  if (r->dead || u < 0 || u >= (int64_t)r->nunits) return 0;
  _hm_sdm_unit_t *U = &r->units[u];
  if (U->state != HM_U_NONE || (U->flags & HM_UF_RANDOM)) return 0;
  /* filled page by page (sparse.c) */
  if (_hm_sdm_sparse_skip(p, r, u, (how & HM__PF_WATCH) != 0)) return 0;
  /* Prefetch never holds more than half of the cache untouched. */
  if (p->pf_untouched + p->unit > p->cap / 2) return -ENOSPC;
  /* Every read slot is in flight: the plan waits for one (dropping it
   * would leave a hole the stream believes requested). */
  if (!_hm_sdm_ops_free(h)) return -EBUSY;
  return 1;
}

/* How many absent units from u one read covers (pager lock held): going
 * forward in memfd mode, up to max of them of the same kind (on disk or
 * zero), within HM_SDM_GROUP_BYTES and half the cache. */
static uint32_t hm__group_extent(hm_pager_t *p, _hm_sdm_region_t *r, int64_t u, uint32_t max,
                                 int dir) {
  uint32_t n = 1;
  uint32_t gmax = _hm_sdm_read_units(p);
  if (gmax > max) gmax = max;
  if (dir != 1 || !p->memfd_mode) return n;
  const _hm_sdm_unit_t *U = &r->units[u];
  while (n < gmax && u + n < (int64_t)r->nunits) {
    _hm_sdm_unit_t *V = &r->units[u + n];
    if (V->state != HM_U_NONE || (V->flags & HM_UF_RANDOM) ||
        _hm_sdm_sparse_fill(r, (uint32_t)(u + n)) ||
        ((V->flags ^ U->flags) & HM_UF_ONDISK) ||
        p->pf_untouched + (n + 1) * p->unit > p->cap / 2)
      break;
    n++;
  }
  return n;
}

/* The op of a prefetch of units [u, u + n), budget reserved (pager lock
 * held). */
static _hm_sdm_op_t *hm__group_op(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int64_t u,
                                  uint32_t n, int trigger, uint32_t pg0, uint32_t npg) {
  hm_pager_t *p = h->p;
  _hm_sdm_op_t *op = _hm_sdm_op_get(h);
  op->reg = r;
  op->unit = (uint32_t)u;
  op->nu = n;
  op->pg0 = npg < p->upages ? pg0 : 0;
  op->npg = npg < p->upages ? npg : p->upages;
  op->prefetch = 1;
  op->pfill = 0;
  op->zero = !(r->units[u].flags & HM_UF_ONDISK);
  /* Zero units are not held back: their file range may hold stale data
   * that a later partial write-back would make readable. */
  op->trigger = (int8_t)(n == 1 && !op->zero ? trigger : 0);
  op->t0 = 0;
  for (uint32_t k = 0; k < n; k++) {
    int32_t sl = _hm_sdm_slot_take(p, r, (uint32_t)u + k);
    p->slots[sl].prefetched = 1;
    r->units[u + k].state = HM_U_FILLING;
    op->slots[k] = sl;
    HM_SDM_ADD(p, c_pf_issued, 1);
  }
  p->pf_untouched += (uint64_t)n * p->unit;
  r->busy++;
  return op;
}

/* Issues a prefetch of unit u and, going forward (HM__PF_FWD in how), of
 * up to max - 1 more absent units after it in the same read (pager lock
 * held, released on return). Returns the number of units it covered (0: u
 * needed nothing), -EBUSY to try again later (no op free), another < 0 to
 * stop. */
static int hm__prefetch_locked(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int64_t u,
                               uint32_t max, unsigned how, int trigger, uint32_t pg0,
                               uint32_t npg) {
  hm_pager_t *p = h->p;
  /* At most two tries, the second after eviction made room: every path
   * of the second returns (reserved, or -EAGAIN). */
  for (int attempt = 0;; attempt++) {
    int ok = hm__group_ok(h, r, u, how);
    if (ok <= 0) {
      pthread_mutex_unlock(&p->lk);
      return ok;
    }
    uint32_t n = hm__group_extent(p, r, u, max, (how & HM__PF_FWD) ? 1 : 0);
    uint64_t bytes = npg < p->upages ? (uint64_t)npg * HM_SDM_PAGE : (uint64_t)n * p->unit;
    if (_hm_sdm_reserve(p, bytes, n)) {
      _hm_sdm_op_t *op = hm__group_op(h, r, u, n, trigger, pg0, npg);
      pthread_mutex_unlock(&p->lk);
      _hm_sdm_fill_start(h, op);
      return (int)n;
    }
    pthread_mutex_unlock(&p->lk);
    if (attempt) return -EAGAIN;
    /* A prefetch waits for a batch's writes: a plan held back while they
     * run fell behind its reader (scan rmw at 2x: 1500 demand misses a
     * run, against 25). */
    int ev = _hm_sdm_evict_async(h, bytes);
    if (ev == -EINPROGRESS) ev = _hm_sdm_evict_wait(h);
    if (ev) return -EAGAIN;
    pthread_mutex_lock(&p->lk);
  }
}

/* hm__prefetch_locked, taking the lock. */
static int hm__prefetch_group(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int64_t u, uint32_t max,
                              unsigned how, int trigger, uint32_t pg0, uint32_t npg) {
  pthread_mutex_lock(&h->p->lk);
  return hm__prefetch_locked(h, r, u, max, how, trigger, pg0, npg);
}

/* ------------------------------------------------------------------------
 * Plans
 * ------------------------------------------------------------------------ */

/* Queues a plan; the caller took a busy reference on r (_hm_sdm_plan_hold)
 * so that an unmap cannot free r before the plan has run (or been
 * dropped). A sparse watch begins only in a stream's own plan: a watched
 * unit is left out and its reader fills it page by page (about 6 faults),
 * which a WILLNEED range was promised not to cost, nor a successor's head
 * (test_sdm_successor: a watch there made 5-6 demand fetches of a head the
 * pager had read for the reader, 1 run in 5 under ASan). */
static void hm__queue_plan(_hm_sdm_handler_t *h, _hm_sdm_region_t *r,
                           const _hm_sdm_pf_plan_t *pl, int watch) {
  if (pl->stride == 0 || pl->count == 0) return;
  if (h->nplans == sizeof h->plans / sizeof h->plans[0]) {
    _hm_sdm_release(h->p, h->plans[0].reg); /* the oldest is the least useful */
    memmove(&h->plans[0], &h->plans[1], (h->nplans - 1) * sizeof h->plans[0]);
    h->nplans--;
  }
  _hm_sdm_qplan_t *q = &h->plans[h->nplans];
  q->reg = r;
  q->from = pl->from;
  q->stride = pl->stride;
  q->count = pl->count;
  q->trigger = pl->trigger;
  q->pg = pl->pg;
  q->first = pl->first;
  q->tid = pl->tid;
  q->watch = watch;
  q->k = 0;
  h->nplans++;
}

void _hm_sdm_plan_queue(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl) {
  hm__queue_plan(h, r, pl, pl->tid >= 0);
  if (h->succ_reg) {
    _hm_sdm_region_t *q = h->succ_reg;
    h->succ_reg = NULL;
    hm__queue_plan(h, q, &h->succ, 0);
  }
}

/* Steps pl over the units its stream's reader has gone past since the
 * plan was queued (pager lock held). Plans wait in line behind the reads
 * of older ones; when prefetch fell behind a fast sequential reader, the
 * reader missed, its stream planned the window again from the miss, and
 * the plans still in line then read units the reader had passed and
 * demote-behind had just evicted (test_sdm_behind: a sweep of 128 MiB read
 * 20-45% of itself twice in about one run of eight). Cost: a scan of the
 * 64-entry stream table per read, under the lock the read takes anyway
 * (a read is >= 4 KiB of I/O). */
static void hm__plan_skip_passed(hm_pager_t *p, _hm_sdm_qplan_t *pl) {
  if (pl->tid < 0 || (pl->stride != 1 && pl->stride != -1)) return;
  while (pl->k < pl->count &&
         _hm_sdm_pf_passed(&p->pf, pl->tid, pl->reg, pl->first, pl->stride,
                           pl->from + (int64_t)pl->k * pl->stride))
    pl->k++;
}

/* Drops the oldest plan, done or given up; 1 if plans remain. */
static int hm__plan_pop(_hm_sdm_handler_t *h) {
  _hm_sdm_release(h->p, h->plans[0].reg);
  memmove(&h->plans[0], &h->plans[1], (h->nplans - 1) * sizeof h->plans[0]);
  h->nplans--;
  return h->nplans > 0;
}

/* Runs one read of the oldest plan; 1 if plans remain. */
static int hm__plan_step(_hm_sdm_handler_t *h) {
  if (h->nplans == 0) return 0;
  hm_pager_t *p = h->p;
  _hm_sdm_qplan_t *pl = &h->plans[0];
  pthread_mutex_lock(&p->lk);
  hm__plan_skip_passed(p, pl);
  if (pl->k >= pl->count) {
    pthread_mutex_unlock(&p->lk);
    return hm__plan_pop(h);
  }
  int64_t u = pl->from + (int64_t)pl->k * pl->stride;
  uint32_t pg0, npg;
  _hm_sdm_sub(p, pl->stride, pl->pg, &pg0, &npg);
  unsigned how = (pl->stride == 1 ? HM__PF_FWD : 0u) | (pl->watch ? HM__PF_WATCH : 0u);
  int n = hm__prefetch_locked(h, pl->reg, u, pl->count - pl->k, how,
                              u == pl->trigger ? (pl->stride > 0 ? 1 : -1) : 0, pg0, npg);
  if (n == -EBUSY) {
    h->plan_blocked = 1;
    return 1;
  }
  if (n >= 0) pl->k += n > 0 ? (uint32_t)n : 1;
  if (n < 0 || pl->k >= pl->count) return hm__plan_pop(h);
  return 1;
}

/* ------------------------------------------------------------------------
 * Faults, WILLNEED, the poll loop
 * ------------------------------------------------------------------------ */

static void hm__defer(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f) {
  if (h->ndef == h->capdef) {
    unsigned cap = h->capdef ? h->capdef * 2 : 256;
    _hm_sdm_fault_t *n = realloc(h->def, cap * sizeof *n);
    if (!n) return; /* the thread is woken by the next transition on its unit */
    h->def = n;
    h->capdef = cap;
  }
  h->def[h->ndef++] = *f;
}

static void hm__read_faults(_hm_sdm_handler_t *h) {
  hm_pager_t *p = h->p;
  struct uffd_msg msgs[HM__MSG_BATCH];
  for (int rounds = 0; rounds < 16; rounds++) {
    ssize_t n = _hm_prim_uffd_read(p->uffd, msgs, sizeof msgs);
    if (n <= 0) break;
    uint64_t t0 = _hm_prim_now_ns();
    size_t cnt = (size_t)n / sizeof msgs[0];
    for (size_t i = 0; i < cnt; i++) {
      if (msgs[i].event != UFFD_EVENT_PAGEFAULT) continue;
      _hm_sdm_fault_t f = {.addr = msgs[i].arg.pagefault.address,
                           .flags = msgs[i].arg.pagefault.flags,
                           .t0 = t0,
                           .tid = (int)msgs[i].arg.pagefault.feat.ptid};
      HM_SDM_ADD(p, c_faults, 1);
      if (_hm_sdm_fault(h, &f) == -EAGAIN) hm__defer(h, &f);
    }
    if (cnt < HM__MSG_BATCH) break;
  }
}

static void hm__retry_deferred(_hm_sdm_handler_t *h) {
  unsigned n = h->ndef, k = 0;
  for (unsigned i = 0; i < n; i++) {
    _hm_sdm_fault_t f = h->def[i];
    if (_hm_sdm_fault(h, &f) == -EAGAIN) h->def[k++] = f;
  }
  /* Faults deferred during this pass were appended after n. */
  for (unsigned i = n; i < h->ndef; i++) h->def[k++] = h->def[i];
  h->ndef = k;
}

/* Prefetches units [w->u0, w->u1) of a WILLNEED range (its region held). */
static void hm__willneed(_hm_sdm_handler_t *h, const _hm_sdm_wq_t *w) {
  hm_pager_t *p = h->p;
  for (uint32_t u = w->u0; u < w->u1;) {
    int n = hm__prefetch_group(h, w->reg, u, w->u1 - u, HM__PF_FWD, 0, 0, p->upages);
    if (n == -EBUSY) {
      /* Out of read slots: the rest becomes a plan, run as slots free. */
      _hm_sdm_pf_plan_t pl = {
          .stride = 1, .from = u, .count = w->u1 - u, .trigger = -1, .tid = -1};
      pthread_mutex_lock(&p->lk);
      _hm_sdm_plan_hold(w->reg, &pl);
      pthread_mutex_unlock(&p->lk);
      _hm_sdm_plan_queue(h, w->reg, &pl);
      break;
    }
    if (n < 0) break;
    u += n > 0 ? (uint32_t)n : 1;
  }
}

static void hm__drain_willneed(_hm_sdm_handler_t *h) {
  hm_pager_t *p = h->p;
  for (;;) {
    pthread_mutex_lock(&p->lk);
    if (p->nwq == 0) {
      pthread_mutex_unlock(&p->lk);
      return;
    }
    _hm_sdm_wq_t w = p->wq[--p->nwq];
    if (w.reg->dead) {
      pthread_mutex_unlock(&p->lk);
      continue;
    }
    w.reg->busy++; /* keeps it mapped while we work on it */
    pthread_mutex_unlock(&p->lk);
    hm__willneed(h, &w);
    _hm_sdm_release(p, w.reg);
  }
}

/* One completion of the ring: 0, or -1 when the pager stops. */
static int hm__dispatch(_hm_sdm_handler_t *h, uint64_t tag, int res) {
  hm_pager_t *p = h->p;
  if (tag == HM__TAG_UFFD) {
    hm__read_faults(h);
    (void)_hm_prim_ring_poll(h->ring, p->uffd, HM__TAG_UFFD);
  } else if (tag == HM__TAG_EVENT) {
    if (atomic_load(&p->stop)) return -1;
    uint64_t v;
    (void)_hm_prim_read(p->evfd, &v, sizeof v); /* fails when another handler took it */
    _hm_sdm_budget_apply(h);
    hm__drain_willneed(h);
    (void)_hm_prim_ring_poll(h->ring, p->evfd, HM__TAG_EVENT);
  } else if (tag == HM__TAG_RET) {
    uint64_t v;
    (void)_hm_prim_read(h->retfd, &v, sizeof v);
    (void)_hm_sdm_copier_reclaim(h); /* clears plan_blocked if it got any */
    (void)_hm_prim_ring_poll(h->ring, h->retfd, HM__TAG_RET);
  } else if (tag == HM__TAG_WB) {
    uint64_t v;
    (void)_hm_prim_read(h->wbfd, &v, sizeof v);
    h->wb_armed = 0;
    _hm_sdm_evict_ahead(h); /* ends the batch once its last write is in */
  } else {
    _hm_sdm_op_t *op = (_hm_sdm_op_t *)(uintptr_t)tag;
    if (!_hm_sdm_copier_take(h, op, res)) _hm_sdm_fill_done(h, op, res);
  }
  return 0;
}

/* Handles what the ring has ready (waiting up to wait_us for the first). */
static void hm__poll_once(_hm_sdm_handler_t *h, int wait_us) {
  uint64_t tag;
  int res;
  int rc = _hm_prim_ring_next(h->ring, wait_us, &tag, &res);
  while (rc == 1) {
    if (hm__dispatch(h, tag, res)) return;
    rc = _hm_prim_ring_next(h->ring, 0, &tag, &res);
  }
}

void *_hm_sdm_handler_main(void *arg) {
  _hm_sdm_handler_t *h = arg;
  hm_pager_t *p = h->p;
  (void)_hm_prim_ring_poll(h->ring, p->uffd, HM__TAG_UFFD);
  (void)_hm_prim_ring_poll(h->ring, p->evfd, HM__TAG_EVENT);
  if (h->copier) (void)_hm_prim_ring_poll(h->ring, h->retfd, HM__TAG_RET);
  /* handler 0 measures the process for HM_PAGER_PROCESS_BUDGET: it waits
   * at most 100 ms, and one clock read per pass tells when */
  int measure = h == &p->h[0] && (p->cfg.flags & HM_PAGER_PROCESS_BUDGET);
  while (!atomic_load(&p->stop)) {
    /* Woken by write completions while a batch has writes out: each
     * queues the batch's next run (hm__wb_pump). Waking only on the faults
     * and fills instead left a batch's writes waiting for them (GUPS
     * update4k at 2x ran 2x slower). */
    if (!h->wb_armed && _hm_sdm_evict_busy(h)) {
      (void)_hm_prim_ring_poll(h->ring, h->wbfd, HM__TAG_WB);
      h->wb_armed = 1;
    }
    int ready = h->nplans && !h->plan_blocked;
    hm__poll_once(h, ready ? 0 : h->ndef ? 500 : measure ? 100000 : -1);
    if (measure && _hm_sdm_budget_measure(h, _hm_prim_now_ns())) _hm_sdm_budget_apply(h);
    _hm_sdm_evict_ahead(h);
    if (h->ndef) hm__retry_deferred(h);
    /* One prefetch read, then look for faults and completions again. */
    if (h->nplans && !h->plan_blocked) {
      for (int k = 0; k < 8 && h->nplans && !h->plan_blocked; k++) (void)hm__plan_step(h);
      (void)_hm_prim_ring_submit(h->ring);
      hm__read_faults(h);
    }
  }
  _hm_sdm_evict_drain(h);
  while (h->nplans) {
    _hm_sdm_release(p, h->plans[h->nplans - 1].reg);
    h->nplans--;
  }
  if (h->succ_reg) _hm_sdm_release(p, h->succ_reg);
  h->succ_reg = NULL;
  return NULL;
}
