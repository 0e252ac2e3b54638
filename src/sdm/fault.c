/* SPDX-License-Identifier: BSD-3-Clause */
/* The fault path: a fault on a unit being filled or evicted (in transit), a
 * write-protect fault, a hit on a filled page (MINOR fault), the readahead
 * trigger page, and a miss; the fills a miss or a prefetch starts, and their
 * completion. Cost: see "Fault path cost" in pager.c. Every helper of the
 * fault path is static in this file (or inline in pager_int.h), so that the
 * compiler keeps inlining them as it did when the pager was one file; the
 * calls that leave it (eviction, queueing a plan) run outside the lock or
 * before I/O, but for demotion (demote.c): one call per fault of a stream,
 * beside the walk it makes under the lock anyway. */
#include <errno.h>

#include "sdm/pager_int.h"

/* Where a fault landed, read under the pager lock. */
typedef struct hm__at_s {
  _hm_sdm_region_t *r;
  _hm_sdm_unit_t *U;
  char *ub;
  uint32_t u, pg, maxw;
  int seq, pf_on;
} hm__at_t;

static void hm__account(hm_pager_t *p) {
  if (p->resident > p->peak) p->peak = p->resident;
}

/* A prefetched unit was touched: counts and adapts (pager lock held). */
static void hm__touched(hm_pager_t *p, _hm_sdm_slot_t *S) {
  if (!S->prefetched) return;
  S->prefetched = 0;
  p->pf_untouched -= p->unit;
  _hm_sdm_pf_resolved(p, S->reg, 1);
  HM_SDM_ADD(p, c_pf_used, 1);
}

/* Units from..end of r are all resident or being filled. Walked from the
 * end, so it stops at once when the last unit is absent (a stream evicts
 * what it passed); at most HM__TAIL units are read (a longer resident tail
 * is not seen, and the end is then missed for this pass), under the pager
 * lock. */
#define HM__TAIL 512
static int hm__tail_present(const _hm_sdm_region_t *r, int64_t from) {
  if (from < 0 || (int64_t)r->nunits - from > HM__TAIL) return 0;
  for (int64_t v = (int64_t)r->nunits - 1; v >= from; v--)
    if (r->units[v].state == HM_U_NONE) return 0;
  return 1;
}

/* A forward stream of thread tid reached the end of r, whose successor is
 * known: the successor's first window (the stream's own) is chosen for
 * prefetch and its stream seeded (pager lock held; see prefetch.c). Only
 * across regions: a new pass over the same region starts with what the
 * cache still holds of it. */
static void hm__pf_successor(_hm_sdm_handler_t *h, int tid, _hm_sdm_region_t *r,
                             uint32_t window) {
  hm_pager_t *p = h->p;
  if (!r->succ_addr || h->succ_reg) return;
  _hm_sdm_region_t *q = _hm_sdm_find(p, r->succ_addr);
  if (!q || q->dead || q == r) return;
  uint64_t u = (r->succ_addr - (uint64_t)(uintptr_t)q->base) / p->unit;
  uint32_t count = window < 2 ? 2 : window;
  if (u + count > q->nunits) count = (uint32_t)(q->nunits - u);
  if (_hm_sdm_pf_seed(&p->pf, tid, q, (int64_t)u, count, &h->succ) < 0) return;
  q->busy++;
  h->succ_reg = q;
  HM_SDM_ADD(p, c_pf_succ, 1);
}

/* Whether the reader stepped over unit v of r, next to its fault along
 * its stream, rather than through it: v holds a prefetch its reader never
 * touched, where touches are seen (in memfd mode every touch of an
 * unmapped page is a MINOR fault, hm__touched; in anonymous mode a
 * prefetch is installed at once and its touches are unseen); or v is
 * absent and was not evicted within the last cache-full of fills, so no
 * reader went through it lately. The second is what tells a strided reader
 * (4 units a step) from a sequential one that walked the window its
 * stream requested, when that window was never read: in NO_WP memfd mode
 * the plans waited behind write-back, and the stride, one past the
 * window, read as progress at every fault, a whole unit per touch (2
 * runs in 12 of test_sdm_basic). Cost: a few loads (pager lock held). */
static int hm__skipped(const hm_pager_t *p, const _hm_sdm_region_t *r, int64_t v) {
  if (v < 0 || v >= (int64_t)r->nunits) return 0;
  const _hm_sdm_unit_t *V = &r->units[v];
  if (V->state == HM_U_NONE)
    return !(V->flags & HM_UF_OUT) || p->fill_tick - V->out_at >= p->cap / p->unit;
  if (!p->memfd_mode || (V->state != HM_U_RES && V->state != HM_U_FILLING)) return 0;
  const _hm_sdm_slot_t *S = &p->slots[V->slot];
  return S->prefetched && !S->mapped;
}

/* Feeds a fault at page pg of unit u to the stream detector, and learns or
 * uses region successors (pager lock held). */
static void hm__pf_feed(_hm_sdm_handler_t *h, int tid, _hm_sdm_region_t *r, uint32_t u,
                        uint32_t pg, int hit, int seq, uint32_t maxw, _hm_sdm_pf_plan_t *plan) {
  hm_pager_t *p = h->p;
  int hints = (seq ? HM_SDM_PF_SEQ : 0) | (r->rnd_score >= 8 ? HM_SDM_PF_RANDOM_REGION : 0) |
              (hm__skipped(p, r, (int64_t)u - 1) ? HM_SDM_PF_SKIP_BELOW : 0) |
              (hm__skipped(p, r, (int64_t)u + 1) ? HM_SDM_PF_SKIP_ABOVE : 0);
  _hm_sdm_pf_fault(&p->pf, tid, r, u, hit, hints, maxw, plan);
  plan->pg = pg;
  if (plan->pred) {
    /* Streams of an unmapped region are forgotten: pred is a live region. */
    _hm_sdm_region_t *e = (_hm_sdm_region_t *)(uintptr_t)plan->pred;
    e->succ_addr = (uint64_t)(uintptr_t)_hm_sdm_ubase(r, p, u);
  }
  /* What the stream has requested reaches within a window of the region's
   * end, or what lies beyond it is there already (the tail of the last
   * pass, which eviction leaves behind the units a stream passes): the
   * reader may fault no more before the end. */
  int64_t reach = plan->count ? plan->from + (int64_t)plan->count : (int64_t)u + 1;
  if (plan->trend == 1 && !plan->ended && p->cfg.prefetch != HM_PREFETCH_OFF &&
      (reach + (int64_t)plan->window >= (int64_t)r->nunits || hm__tail_present(r, reach)) &&
      _hm_sdm_pf_end(&p->pf, tid, r))
    hm__pf_successor(h, tid, r, plan->window);
  _hm_sdm_demote_behind(p, r, u, plan);
}

/* hm__pf_feed for the fault f at `at` (pager lock held). */
static void hm__feed_at(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at,
                        int hit, _hm_sdm_pf_plan_t *plan) {
  hm__pf_feed(h, f->tid, at->r, at->u, at->pg, hit, at->seq, at->maxw, plan);
}

/* Whether page i of S is filled or being filled by a page fill. */
static inline int hm__have(const _hm_sdm_slot_t *S, uint32_t i) {
  return _hm_sdm_bit(S->filled, i) || _hm_sdm_infl(S, i);
}

/* The pages a random fill of a resident unit covers from pg: one, unless
 * the unit is walked page after page over time. FFT's strided pass does
 * that, each of its ~200 planes one row further per step, interleaved, so
 * the detector sees jumps and fills single pages, which left it at one
 * 4 KiB read per fault where Linux swap reads ahead 8 pages. Two random
 * fills in a row that each began where the last ended start a read-ahead
 * within the unit, doubling per step up to 16 pages (64 KiB) and stopping
 * at a filled page. A truly random reader (GUPS) lands twice in a row on
 * the next page of a unit about once in a thousand faults. */
static uint32_t hm__walk_run(const hm_pager_t *p, _hm_sdm_slot_t *S, uint32_t pg) {
  S->walk = (uint8_t)(S->walk_next == pg + 1u ? (S->walk < 4 ? S->walk + 1 : 4) : 0);
  uint32_t want = S->walk >= 2 ? 1u << S->walk : 1u, end = pg + 1;
  while (end < p->upages && end - pg < want && !hm__have(S, end)) end++;
  return end - pg;
}

/* Installs [a, a+len) in the application's view: UFFDIO_COPY from src in
 * anonymous mode, UFFDIO_CONTINUE of the memfd's pages when src is NULL.
 * EAGAIN (a racing zap or fault) goes on from where it stopped; ENOENT on a
 * run means it crosses a mapping boundary (advice on part of a region split
 * the mapping), so the rest goes page by page; a page already mapped
 * (EEXIST), or ENOENT page by page, is skipped. EFAULT stops: the range
 * changed under us, and the caller's wake makes the thread fault again. */
static void hm__install(hm_pager_t *p, char *a, const char *src, size_t len, int wp) {
  int single = 0;
  while (len > 0) {
    size_t done = 0, chunk = single ? HM_SDM_PAGE : len;
    int rc = src ? _hm_prim_uffd_copy(p->uffd, a, src, chunk, wp, &done)
                 : _hm_prim_uffd_continue(p->uffd, a, chunk, wp, &done);
    if (rc == 0) done = chunk;
    if (done > chunk) done = chunk;
    a += done;
    if (src) src += done;
    len -= done;
    if (rc == 0 || rc == -EAGAIN) continue;
    if (rc == -ENOENT && !single) {
      single = 1;
      continue;
    }
    if ((rc == -EEXIST || rc == -ENOENT) && len >= HM_SDM_PAGE) {
      a += HM_SDM_PAGE;
      if (src) src += HM_SDM_PAGE;
      len -= HM_SDM_PAGE;
      continue;
    }
    break;
  }
}

/* Maps every filled page of a unit in the application's view (memfd mode),
 * write-protected as hm__fill_wp says. */
static void hm__map_runs(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u, const uint64_t *bits,
                         int wp) {
  char *ub = _hm_sdm_ubase(r, p, u);
  unsigned i = 0, n;
  while ((n = _hm_sdm_run(bits, p->upages, &i)) > 0) {
    hm__install(p, ub + (size_t)i * HM_SDM_PAGE, NULL, (size_t)n * HM_SDM_PAGE, wp);
    i += n;
  }
}

/* Whether pages installed into S now must be write-protected, for every
 * fill and map of either mode. wp_async: always (the kernel tracks each
 * page). sync: not when the unit is dirty already: a dirty unit is
 * unprotected and written back whole, so its later fills need no WP fault
 * of their own (FFT at 2x the budget took one per fill, 84k per run,
 * before). Read under the lock while S is pinned or FILLING: neither
 * eviction nor flush clears dirty then, and a WP fault that sets it
 * meanwhile only costs the new pages one more fault. */
static int hm__fill_wp(const hm_pager_t *p, const _hm_sdm_slot_t *S) {
  return p->dirty_mode == HM_SDM_DIRTY_ASYNC || (p->dirty_mode == HM_SDM_DIRTY_SYNC && !S->dirty);
}

/* Pages installed write-protected into S while a WP fault made it dirty:
 * that fault unprotected the unit before they were there, so its writer
 * would fault on them again. They are unprotected now (sync mode; S
 * pinned; pager lock held on entry and return, dropped for the ioctl).
 * The fault sets dirty under the lock before it unprotects, so either it
 * runs after the install and covers these pages, or this sees dirty set.
 * Under a parallel ctest, a 16-unit update pass took 18-32 WP faults
 * where one per unit is due (test_sdm_dirtyguess). Cost: a compare. */
static void hm__unprotect_late(hm_pager_t *p, const _hm_sdm_slot_t *S, char *ub, int wp) {
  if (!wp || p->dirty_mode != HM_SDM_DIRTY_SYNC || !S->dirty) return;
  pthread_mutex_unlock(&p->lk);
  (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 0);
  pthread_mutex_lock(&p->lk);
}

/* Anonymous mode: installs pages [pg0, pg0+npg) of a unit from src. */
static void hm__copy_in(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u, uint32_t pg0,
                        uint32_t npg, const char *src, int wp) {
  hm__install(p, _hm_sdm_ubase(r, p, u) + (size_t)pg0 * HM_SDM_PAGE, src,
              (size_t)npg * HM_SDM_PAGE, wp);
}

/* ------------------------------------------------------------------------
 * Fills
 * ------------------------------------------------------------------------ */

static size_t hm__op_len(const hm_pager_t *p, const _hm_sdm_op_t *op) {
  return op->nu > 1 ? (size_t)op->nu * p->unit : (size_t)op->npg * HM_SDM_PAGE;
}

static char *hm__fill_target(hm_pager_t *p, _hm_sdm_op_t *op) {
  if (p->memfd_mode)
    return op->reg->alias + (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
  return op->small ? op->buf : op->buf + (uint64_t)op->pg0 * HM_SDM_PAGE;
}

static uint64_t hm__op_foff(const hm_pager_t *p, const _hm_sdm_op_t *op) {
  return (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
}

/* A read that returned res for an op of len bytes into dst: a short or
 * failed read is tried once more, synchronously. A second failure ends the
 * process (guard.c): zeros where the program's data was would be silent
 * corruption, and leaving the thread waiting is a hang. */
static void hm__fill_check(hm_pager_t *p, _hm_sdm_op_t *op, char *dst, size_t len, int res) {
  if (op->zero) return;
  if (res != (int)len) {
    uint64_t foff = hm__op_foff(p, op);
    ssize_t got = _hm_prim_vm_pio(op->reg->file, 0, dst, len, foff);
    if (got != (ssize_t)len) {
      HM_SDM_ADD(p, c_io_errors, 1);
      _hm_sdm_io_fatal(p->dir, 0, foff, len, got < 0 ? (int)got : -EIO);
    }
  }
  HM_SDM_ADD(p, c_bytes_read, len);
  if (!op->prefetch) HM_SDM_ADD(p, c_demand_bytes, len);
}

/* Whether this fill of S holds back a readahead trigger page. */
static int hm__fill_holds(const hm_pager_t *p, const _hm_sdm_op_t *op, const _hm_sdm_slot_t *S) {
  if (!op->trigger || p->memfd_mode || op->nu != 1) return 0;
  if (op->pg0 != 0 || op->npg != p->upages || op->npg <= 1) return 0;
  return S->prefetched && p->held && (~p->held_used & HM_SDM_HELD_MASK) != 0;
}

/* Readahead trigger: the stream's first page of this unit is held back
 * (copied aside, ~0.2 us under the lock so that a fault on it never finds
 * the copy half made), so the reader's first touch faults and the next half
 * window is requested (see hm__fault_trigger). Returns the page held, or
 * UINT32_MAX; narrows what copy_in installs to [*cpg0, *cpg0 + *cnpg). */
static uint32_t hm__fill_hold(hm_pager_t *p, const _hm_sdm_op_t *op, _hm_sdm_slot_t *S,
                              const char *dst, uint32_t *cpg0, uint32_t *cnpg) {
  if (!hm__fill_holds(p, op, S)) return UINT32_MAX;
  unsigned idx = (unsigned)__builtin_ctzll(~p->held_used & HM_SDM_HELD_MASK);
  p->held_used |= 1ull << idx;
  uint32_t hold = op->trigger > 0 ? 0 : p->upages - 1;
  memcpy(p->held + (size_t)idx * HM_SDM_PAGE, dst + (size_t)hold * HM_SDM_PAGE, HM_SDM_PAGE);
  S->held = (uint8_t)((idx + 1) | (hold ? 0x80u : 0u));
  if (hold == 0) *cpg0 = 1;
  *cnpg = op->npg - 1;
  return hold;
}

/* Anonymous mode installs prefetched pages at once (there is no page cache
 * to park them in), so their first touch is invisible: they are counted
 * neither used nor wasted, and accuracy cannot throttle. */
static void hm__fill_anon_prefetched(hm_pager_t *p, _hm_sdm_slot_t *S) {
  if (p->memfd_mode || !S->prefetched) return;
  S->prefetched = 0;
  p->pf_untouched -= p->unit;
  /* ...and no fault sets their reference bit either: without it CLOCK
   * took them as the first victims, before the stream reached them,
   * and they were read again on demand (STREAM triad at 4x a 64 MiB
   * budget read 1.78x its footprint per pass; 1.12x with the bit). */
  S->ref = 1;
}

/* What a completed fill installs, per unit of the op. */
typedef struct hm__fillmap_s {
  uint64_t bits[HM_SDM_GROUP][HM_SDM_BITMAP_WORDS];
  int map[HM_SDM_GROUP], wp[HM_SDM_GROUP];
  uint32_t cpg0, cnpg; /* what copy_in installs (anonymous mode) */
} hm__fillmap_t;

/* Marks unit k of a completed fill resident and records what to map
 * (pager lock held); pins its slot until it is mapped. */
static void hm__fill_unit(hm_pager_t *p, const _hm_sdm_op_t *op, uint32_t k, const char *dst,
                          hm__fillmap_t *m) {
  _hm_sdm_slot_t *S = &p->slots[op->slots[k]];
  uint32_t hold = hm__fill_hold(p, op, S, dst, &m->cpg0, &m->cnpg);
  for (uint32_t i = 0; i < op->npg; i++)
    if (op->pg0 + i != hold) _hm_sdm_setbit(S->filled, op->pg0 + i);
  uint32_t got = hold == UINT32_MAX ? op->npg : op->npg - 1;
  S->nfilled = (uint16_t)(S->nfilled + got);
  p->resident += (uint64_t)got * HM_SDM_PAGE;
  op->reg->units[op->unit + k].state = HM_U_RES;
  if (op->pfill) {
    S->infl &= ~_hm_sdm_page_bits(op->pg0, op->npg);
    S->pfills--;
  }
  int map = !op->prefetch || !S->prefetched; /* touched while in flight: map now */
  m->map[k] = map;
  hm__fill_anon_prefetched(p, S);
  if (p->memfd_mode && map && S->mapped) {
    /* Earlier pages are mapped already: map only the new ones, so a unit
     * filled page by page costs one CONTINUE per fill, not per page. */
    memset(m->bits[k], 0, sizeof m->bits[k]);
    for (uint32_t i = 0; i < op->npg; i++) _hm_sdm_setbit(m->bits[k], op->pg0 + i);
  } else {
    memcpy(m->bits[k], S->filled, sizeof m->bits[k]);
  }
  if (p->memfd_mode && map) S->mapped = 1;
  m->wp[k] = hm__fill_wp(p, S);
  S->pin++;
  S->installing = (uint8_t)(S->installing + !p->memfd_mode); /* until copied in: hm__fault_hit */
}

void _hm_sdm_fill_finish(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res) {
  hm_pager_t *p = h->p;
  _hm_sdm_region_t *r = op->reg;
  size_t len = hm__op_len(p, op);
  char *dst = hm__fill_target(p, op);
  hm__fill_check(p, op, dst, len, res);
  hm__fillmap_t m;
  m.cpg0 = op->pg0;
  m.cnpg = op->npg;
  pthread_mutex_lock(&p->lk);
  if (!op->zero) r->bytes_read += len; /* read_back (stats.c): an add under the lock taken */
  for (uint32_t k = 0; k < op->nu; k++) hm__fill_unit(p, op, k, dst, &m);
  hm__account(p);
  pthread_mutex_unlock(&p->lk);
  for (uint32_t k = 0; k < op->nu; k++) {
    if (p->memfd_mode) {
      if (m.map[k]) hm__map_runs(p, r, op->unit + k, m.bits[k], m.wp[k]);
    } else {
      hm__copy_in(p, r, op->unit, m.cpg0, m.cnpg,
                  dst + (size_t)(m.cpg0 - op->pg0) * HM_SDM_PAGE, m.wp[k]);
    }
  }
  char *ub = _hm_sdm_ubase(r, p, op->unit);
  pthread_mutex_lock(&p->lk);
  for (uint32_t k = 0; k < op->nu; k++)
    hm__unprotect_late(p, &p->slots[op->slots[k]], ub + (size_t)k * p->unit,
                       m.wp[k] && (m.map[k] || !p->memfd_mode));
  for (uint32_t k = 0; k < op->nu; k++) {
    _hm_sdm_slot_t *S = &p->slots[op->slots[k]];
    S->pin = (uint16_t)(S->pin - 1u - op->pfill); /* and the page fill's own (_hm_sdm_pfill_mark) */
    if (!p->memfd_mode) S->installing--;
  }
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  /* After installing is cleared: a fault that saw it set was left to this
   * wake (hm__fault_hit). */
  _hm_sdm_wake(p, ub, (size_t)op->nu * p->unit);
  if (!op->prefetch) HM_SDM_ADD(p, c_fault_ns, _hm_prim_now_ns() - op->t0);
}

void _hm_sdm_fill_done(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res) {
  _hm_sdm_fill_finish(h, op, res);
  _hm_sdm_op_put(h, op);
}

void _hm_sdm_fill_start(_hm_sdm_handler_t *h, _hm_sdm_op_t *op) {
  hm_pager_t *p = h->p;
  size_t len = hm__op_len(p, op);
  char *dst = hm__fill_target(p, op);
  if (op->zero) {
    /* Never written back: zeros without I/O. */
    HM_SDM_ADD(p, c_zero_fills, 1);
    if (p->memfd_mode) {
      if (_hm_prim_vm_fallocate(op->reg->memfd, 0, hm__op_foff(p, op), len)) memset(dst, 0, len);
    } else {
      memset(dst, 0, len);
    }
    _hm_sdm_fill_done(h, op, (int)len);
    return;
  }
  /* memfd mode: prefetch reads go to io_uring's workers, since issuing a
   * read allocates its target pages, which would otherwise delay this
   * thread's next fault. Anonymous mode reads into bounce buffers that
   * exist already: the read is issued inline (a worker would only add a
   * thread switch per read, on a machine with few cores a real cost). */
  int async = op->prefetch && p->memfd_mode;
  if (_hm_prim_ring_rw(h->ring, async ? HM_PRIM_RING_ASYNC : 0, op->reg->file, dst,
                       (unsigned)len, hm__op_foff(p, op), (uint64_t)(uintptr_t)op) < 0) {
    _hm_sdm_fill_done(h, op, -EBUSY); /* cannot happen: ops <= ring entries */
    return;
  }
  if (!op->prefetch) {
    /* A thread waits for this read: it goes to the device now, not when
     * the handler next waits on its ring after serving what else is ready
     * (one more io_uring_enter per demand read; 6.6 us from the fault's
     * message to the read's submission on average before, GUPS read4k). */
    (void)_hm_prim_ring_submit(h->ring);
    HM_SDM_ADD(p, c_fetches, 1);
  }
}

/* ------------------------------------------------------------------------
 * Faults. Each hm__fault_* is entered with the pager lock held and the
 * fault located (hm__locate) and leaves it released.
 * ------------------------------------------------------------------------ */

/* Locates f (pager lock held); 0 when it is in no live region. */
static int hm__locate(hm_pager_t *p, const _hm_sdm_fault_t *f, hm__at_t *at) {
  _hm_sdm_region_t *r = _hm_sdm_find(p, f->addr);
  if (!r || r->dead) return 0;
  uint64_t off = f->addr - (uint64_t)(uintptr_t)r->base;
  at->r = r;
  at->u = (uint32_t)(off / p->unit);
  at->pg = (uint32_t)((off % p->unit) / HM_SDM_PAGE);
  at->U = &r->units[at->u];
  at->ub = _hm_sdm_ubase(r, p, at->u);
  at->seq = p->cfg.prefetch == HM_PREFETCH_SEQUENTIAL || (at->U->flags & HM_UF_SEQ);
  at->pf_on = p->cfg.prefetch != HM_PREFETCH_OFF && !(at->U->flags & HM_UF_RANDOM);
  at->maxw = r->pf_limit; /* at most p->maxwin (budget.c) */
  return 1;
}

/* The unit is being filled or evicted: its transition ends with a wake. */
static int hm__fault_transit(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at) {
  hm_pager_t *p = h->p;
  _hm_sdm_pf_plan_t lplan = {0};
  if (at->U->state == HM_U_BUSY) at->U->waits = 1;
  if (at->U->state == HM_U_FILLING) {
    _hm_sdm_slot_t *S = &p->slots[at->U->slot];
    if (S->prefetched) {
      /* A late prefetch hit: still a hit for the stream, which must
       * keep running ahead of a reader that caught up with it. */
      hm__touched(p, S);
      S->ref = 1;
      if (at->pf_on) hm__feed_at(h, f, at, 1, &lplan);
    }
  }
  _hm_sdm_plan_hold(at->r, &lplan);
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_plan_queue(h, at->r, &lplan);
  return 0;
}

/* A write to a write-protected resident unit (wp_sync): dirty from now on,
 * unprotected as a whole. */
static int hm__fault_wp(hm_pager_t *p, const _hm_sdm_fault_t *f, const hm__at_t *at,
                        _hm_sdm_slot_t *S) {
  S->dirty = 1;
  S->wpf = 1;
  S->ref = 1;
  S->pin++;
  at->r->busy++; /* pin keeps the unit, busy keeps the region */
  pthread_mutex_unlock(&p->lk);
  HM_SDM_ADD(p, c_wp_faults, 1);
  (void)_hm_prim_uffd_wp(p->uffd, at->ub, p->unit, 0);
  _hm_sdm_wake(p, at->ub, p->unit);
  pthread_mutex_lock(&p->lk);
  S->pin--;
  at->r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  HM_SDM_ADD(p, c_fault_ns, _hm_prim_now_ns() - f->t0);
  return 0;
}

/* Units that arrived ahead of a sequential reader, mapped with its hit. */
typedef struct hm__ahead_s {
  int32_t slot[8];
  uint8_t wp[8];
  unsigned n;
} hm__ahead_t;

/* A confirmed sequential stream: units that arrived ahead of the reader
 * are mapped now, so that it does not wait for this thread once per unit
 * (the MINOR round trip is mostly scheduling latency on a busy machine).
 * They count as used: the stream walks them. Takes and pins them (pager
 * lock held). */
static void hm__ahead_take(hm_pager_t *p, const _hm_sdm_fault_t *f, const hm__at_t *at,
                           const _hm_sdm_pf_plan_t *hplan, hm__ahead_t *a) {
  _hm_sdm_region_t *r = at->r;
  unsigned m = hplan->window / 2 < 8 ? hplan->window / 2 : 8;
  for (unsigned i = 1; i <= m; i++) {
    int64_t v = (int64_t)at->u + hplan->trend * (int64_t)i;
    if (v < 0 || v >= (int64_t)r->nunits) break;
    _hm_sdm_unit_t *V = &r->units[v];
    if (V->state != HM_U_RES) break;
    _hm_sdm_slot_t *T = &p->slots[V->slot];
    if (!T->prefetched || T->mapped || T->nfilled != p->upages) break;
    hm__touched(p, T);
    T->ref = 1;
    T->mapped = 1;
    T->pin++;
    a->wp[a->n] = (uint8_t)hm__fill_wp(p, T);
    a->slot[a->n++] = V->slot;
  }
  if (a->n) _hm_sdm_pf_advance(&p->pf, f->tid, r, (int64_t)at->u + hplan->trend * (int64_t)a->n);
}

/* A MINOR fault on a filled page. */
static int hm__fault_hit(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at,
                         _hm_sdm_slot_t *S) {
  hm_pager_t *p = h->p;
  _hm_sdm_region_t *r = at->r;
  if (S->installing) {
    /* Anonymous mode: another thread is copying this unit in, and its
     * wake, after it clears installing, resolves this fault. Waking now
     * would only make the thread fault again until the copy ends. */
    pthread_mutex_unlock(&p->lk);
    return 0;
  }
  int hit = S->prefetched;
  hm__touched(p, S);
  S->ref = 1;
  /* A minor fault means some filled page is not mapped: never yet, or
   * another handler is still mapping it (mapping twice only costs an
   * EEXIST; waking without mapping would let the thread spin). */
  int map = p->memfd_mode;
  S->mapped = (uint8_t)(S->mapped | p->memfd_mode);
  uint64_t bits[HM_SDM_BITMAP_WORDS];
  memcpy(bits, S->filled, sizeof bits);
  _hm_sdm_pf_plan_t hplan = {0};
  if (hit && at->pf_on) hm__feed_at(h, f, at, 1, &hplan);
  hm__ahead_t ahead;
  ahead.n = 0;
  if (map && (hplan.trend == 1 || hplan.trend == -1)) hm__ahead_take(p, f, at, &hplan, &ahead);
  int wp = hm__fill_wp(p, S);
  S->pin++;
  r->busy++;
  _hm_sdm_plan_hold(r, &hplan);
  pthread_mutex_unlock(&p->lk);
  HM_SDM_ADD(p, c_minor_hits, 1);
  if (map) hm__map_runs(p, r, at->u, bits, wp);
  _hm_sdm_wake(p, at->ub, p->unit);
  for (unsigned i = 0; i < ahead.n; i++) {
    _hm_sdm_slot_t *T = &p->slots[ahead.slot[i]];
    hm__map_runs(p, r, T->unit, T->filled, ahead.wp[i]);
  }
  pthread_mutex_lock(&p->lk);
  hm__unprotect_late(p, S, at->ub, map && wp);
  for (unsigned i = 0; i < ahead.n; i++) {
    _hm_sdm_slot_t *T = &p->slots[ahead.slot[i]];
    hm__unprotect_late(p, T, _hm_sdm_ubase(r, p, T->unit), ahead.wp[i]);
  }
  S->pin--;
  for (unsigned i = 0; i < ahead.n; i++) p->slots[ahead.slot[i]].pin--;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  HM_SDM_ADD(p, c_fault_ns, _hm_prim_now_ns() - f->t0);
  _hm_sdm_plan_queue(h, r, &hplan);
  return 0;
}

/* Whether pg of the resident unit of S is its held readahead trigger page. */
static int hm__is_trigger(const hm_pager_t *p, const _hm_sdm_slot_t *S, uint32_t pg) {
  return S->held && pg == ((S->held & 0x80u) ? p->upages - 1 : 0);
}

/* The readahead trigger: install the held page (no I/O) and request the
 * next half window along the stream. */
static int hm__fault_trigger(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at,
                             _hm_sdm_slot_t *S) {
  hm_pager_t *p = h->p;
  _hm_sdm_region_t *r = at->r;
  unsigned idx = (S->held & 0x7fu) - 1u;
  S->held = 0; /* the page is this thread's to install; its pool bit until then */
  _hm_sdm_setbit(S->filled, at->pg);
  S->nfilled++;
  p->resident += HM_SDM_PAGE;
  hm__account(p);
  S->ref = 1;
  _hm_sdm_pf_plan_t hplan = {0};
  if (at->pf_on) hm__feed_at(h, f, at, 1, &hplan);
  int wp = hm__fill_wp(p, S);
  S->pin++;
  r->busy++;
  _hm_sdm_plan_hold(r, &hplan);
  pthread_mutex_unlock(&p->lk);
  hm__copy_in(p, r, at->u, at->pg, 1, p->held + (size_t)idx * HM_SDM_PAGE, wp);
  HM_SDM_ADD(p, c_ra_triggers, 1); /* before the wake, like every count */
  pthread_mutex_lock(&p->lk);
  hm__unprotect_late(p, S, at->ub, wp);
  p->held_used &= ~(1ull << idx);
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_wake(p, at->ub, p->unit);
  HM_SDM_ADD(p, c_fault_ns, _hm_prim_now_ns() - f->t0);
  pthread_mutex_lock(&p->lk);
  S->pin--;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_plan_queue(h, r, &hplan);
  return 0;
}

/* Random fills. A random miss reads the region's learned number of pages
 * from its page (r->rnd_npg: 1, 2 or 4), not the unit's missing run: a
 * random reader wants what it touches, and a 256 KiB read per 4 KiB block
 * read 56-67 KiB per fault (GUPS read4k at 4x its budget). The count is
 * learned per epoch of HM__RND_EPOCH random fills: when the page right after
 * a fill faults next in at least a quarter of them (a 4 KiB block that is
 * not page-aligned spans two pages, and malloc's blocks start 16 bytes into
 * one), the count doubles, so such a block costs one read of 8 KiB instead
 * of two reads in a row; every 8th epoch fills half as much, to see whether
 * that would do. Cost: a few compares and increments under the pager lock
 * the fault path holds anyway. */
#define HM__RND_EPOCH 256u
#define HM__RND_MAX 4u

static uint32_t hm__rnd_pages(const _hm_sdm_region_t *r) {
  uint32_t n = r->rnd_npg;
  return r->rnd_epoch % 8u == 7u && n > 1 ? n / 2 : n;
}

/* A random fill at pg of the unit of S (pager lock held): counted, and
 * counted short when it starts where the last random fill of the unit
 * ended and the thread's last fault was on this unit (its next access
 * needed the next page; a unit walked over time, interleaved with others,
 * is hm__walk_run's); the epoch ends. */
static void hm__rnd_count(_hm_sdm_region_t *r, const _hm_sdm_slot_t *S, uint32_t pg, int res,
                          int same) {
  if (res && same && S->walk_next == pg + 1u) r->rnd_short++;
  if (++r->rnd_fills < HM__RND_EPOCH) return;
  uint32_t used = hm__rnd_pages(r);
  if (r->rnd_short * 4u >= r->rnd_fills) {
    uint32_t want = used * 2u > HM__RND_MAX ? HM__RND_MAX : used * 2u;
    if (want > r->rnd_npg) r->rnd_npg = (uint16_t)want;
  } else if (used < r->rnd_npg) {
    r->rnd_npg = (uint16_t)used;
  }
  r->rnd_fills = r->rnd_short = 0;
  r->rnd_epoch++;
}

/* A random fill of npg pages into S (pager lock held): S is fast when its
 * random fills reach half the unit within an eighth of the cache's
 * turnover since it was filled (page_tick - born). A row of a table read
 * at random gathers half its pages far slower: GUPS at 2x its budget in
 * about 70 k page fills, against 8 k allowed; a hot grid of XSBench, in
 * about 4 k of 24 k. A unit seen fast before needs an eighth of its pages
 * (its page-sized stay after its whole refills is what relearning costs:
 * test_sdm_heat 0.944 reads per lookup, 0.971 at half). Never for an
 * advised random range: the caller said what it reads. In a sparse spell
 * (sparse.c), where page fills are the rule, the half must also hold a
 * run of a quarter of the unit, as a dense sweep's walk fills it: a unit
 * of 8 rows of a matrix read down its columns, evicted late in one page
 * column and filled again, took the next page column's fills soon after,
 * half its pages in runs of 2, and that ended the spell (hm-kernel-scan
 * cols at 2x: 4-8 spells a pass, whole units prefetched between them,
 * 3.9 GiB read in 4 passes of 128 MiB). */
void _hm_sdm_rnd_dense(hm_pager_t *p, _hm_sdm_slot_t *S, uint32_t npg) {
  const _hm_sdm_unit_t *U = &S->reg->units[S->unit];
  S->rpages = (uint16_t)(S->rpages + npg);
  uint32_t part = (U->dense & HM_DENSE_SEEN) && !S->reg->sparse ? 8u : 2u;
  if (S->fast || (U->flags & HM_UF_RANDOM) || S->rpages * part < p->upages) return;
  if (p->page_tick - S->born > (uint32_t)(p->cap / HM_SDM_PAGE / 8)) return;
  if (S->reg->sparse && (_hm_sdm_longest_run(p, S->filled) + npg) * 4u < p->upages) return;
  S->fast = 1;
}

/* Pages from pg a random fill of a resident unit covers: at least want,
 * stopping at a filled page or the unit's end. */
static uint32_t hm__rnd_run(const hm_pager_t *p, const _hm_sdm_slot_t *S, uint32_t pg,
                            uint32_t want) {
  uint32_t end = pg + 1;
  while (end < p->upages && end - pg < want && !hm__have(S, end)) end++;
  return end - pg;
}

/* The pages a miss fills: of a partly filled unit, the missing run around
 * pg (or a random reader's pages, or a walk, unless random fills have
 * filled it fast: hm__rnd_dense); of an absent one, the whole
 * unit, a random reader's pages, or a strided stream's part. */
static void hm__miss_pages(const hm_pager_t *p, const hm__at_t *at, int random, int zero,
                           int64_t trend, uint32_t *pg0, uint32_t *npg) {
  uint32_t pg = at->pg;
  *pg0 = 0;
  *npg = p->upages;
  uint32_t rn = hm__rnd_pages(at->r);
  if (at->U->state == HM_U_RES) {
    _hm_sdm_slot_t *S = &p->slots[at->U->slot];
    uint32_t lo = pg, end = pg + 1;
    if (!random || S->fast) {
      while (lo > 0 && !hm__have(S, lo - 1)) lo--;
      while (end < p->upages && !hm__have(S, end)) end++;
    } else {
      uint32_t walk = hm__walk_run(p, S, pg);
      end = pg + hm__rnd_run(p, S, pg, walk > rn ? walk : rn);
    }
    *pg0 = lo;
    *npg = end - lo;
  } else if (random && !zero) {
    *pg0 = pg;
    *npg = pg + rn > p->upages ? p->upages - pg : rn;
  } else if (!zero) {
    _hm_sdm_sub(p, trend, pg, pg0, npg);
  }
}

/* The demand fill of a miss, budget reserved (pager lock held). random:
 * 0 no, 1 a random fill, 2 one on the unit of the thread's last fault.
 * pfill: a page fill of a sparse spell, which leaves the unit resident. */
static _hm_sdm_op_t *hm__miss_op(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f,
                                 const hm__at_t *at, uint32_t pg0, uint32_t npg, int zero,
                                 int random, int pfill) {
  hm_pager_t *p = h->p;
  _hm_sdm_op_t *op = _hm_sdm_op_get(h);
  int res = at->U->state != HM_U_NONE;
  int32_t s = _hm_sdm_fill_slot(p, at->r, at->u, npg);
  if (random && !zero) {
    _hm_sdm_rnd_dense(p, &p->slots[s], npg);
    hm__rnd_count(at->r, &p->slots[s], at->pg, res, random == 2);
    _hm_sdm_sparse_filled(at->r, &p->slots[s]);
    p->slots[s].walk_next = (uint16_t)(pg0 + npg + 1);
  }
  /* A write fault on an absent page: the thread would take a WP fault
   * right after the fill; the unit is dirty now and filled unprotected
   * (one round trip per unit less for stores first, like initialisation
   * loops and STREAM's target array). */
  if ((f->flags & UFFD_PAGEFAULT_FLAG_WRITE) && p->dirty_mode == HM_SDM_DIRTY_SYNC) {
    p->slots[s].dirty = 1;
    p->slots[s].pdirty = 0; /* seen written, not only guessed */
  }
  _hm_sdm_op_pages(op, &p->slots[s], at->r, at->u, s, pg0, npg, pfill);
  op->prefetch = 0;
  op->zero = (uint8_t)zero;
  op->t0 = f->t0;
  return op;
}

/* Starts the fills a fault queued (pager lock not held): its own first. */
static void hm__start_all(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, _hm_sdm_op_t **ahead,
                          unsigned n) {
  if (op) _hm_sdm_fill_start(h, op);
  for (unsigned i = 0; i < n; i++) _hm_sdm_fill_start(h, ahead[i]);
  /* to the device now: the thread reaches these pages within microseconds,
   * and until the handler next waits on its ring they would hold their ops */
  if (n) (void)_hm_prim_ring_submit(h->ring);
}

/* A fault on a unit that page fills are reading (pager lock held): on a
 * page one reads, or any page once the spell is over, it waits for their
 * completion's wake; a strided thread that caught up with its fills reads
 * further ahead meanwhile. */
static int hm__fault_pending(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at) {
  _hm_sdm_op_t *ahead[HM_SDM_AHEAD];
  unsigned n = at->r->sparse ? _hm_sdm_sparse_ahead(h, at->r, f->tid, f->addr, ahead) : 0;
  pthread_mutex_unlock(&h->p->lk);
  hm__start_all(h, NULL, ahead, n);
  return 0;
}

/* What the misses of the region were lately (hm__miss_random). */
static void hm__rnd_score(_hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *plan) {
  if (plan->random && r->rnd_score < 16) r->rnd_score++;
  if (plan->trend != 0) r->rnd_score = r->rnd_score > 4 ? (uint8_t)(r->rnd_score - 4) : 0;
}

/* Whether a miss fills as random (pager lock held): advised so, or so
 * classified by its stream; or, with no trend of its own, the thread's
 * first miss in a region whose misses were mostly random, or another miss
 * on a unit that random fills made (a second page of the same reader's
 * block: filling the unit's whole missing run there read 64 KiB per 4 KiB
 * block). */
static int hm__miss_random(const hm_pager_t *p, const hm__at_t *at,
                           const _hm_sdm_pf_plan_t *plan) {
  if ((at->U->flags & HM_UF_RANDOM) || plan->random) return 1;
  if (_hm_sdm_sparse_fill(at->r, at->u)) return 1;
  if (plan->trend != 0) return 0;
  if (plan->fresh && at->r->rnd_score >= 8) return 1;
  return at->U->state == HM_U_RES && p->slots[at->U->slot].walk_next != 0;
}

/* Whether a random miss on an absent unit reads the whole unit, spending
 * one of its dense credits (evict.c, hm__learn_dense): it filled half its
 * pages at random fast in a recent stay, and came back soon after CLOCK
 * evicted it (hm__judge_refill's test) at least twice in a row. Such a
 * unit is hot as a whole, and page-sized fills brought it back one read
 * per page each time it was evicted: XSBench's per-nuclide grids, read at
 * random by every lookup, made 1.83 M reads at a 50% budget where swap,
 * whose LRU keeps them, made 0.97 M. Not for advised random ranges: the
 * caller said what it reads. Cost: a few compares under the pager lock the
 * miss holds. */
static int hm__dense_back(const hm_pager_t *p, const hm__at_t *at) {
  const _hm_sdm_unit_t *U = at->U;
  if (U->state != HM_U_NONE || !(U->dense & HM_DENSE_CREDITS) || (U->flags & HM_UF_RANDOM))
    return 0;
  if ((U->flags & (HM_UF_OUT | HM_UF_MRU_OUT)) != HM_UF_OUT) return 0;
  if (!(U->flags & HM_UF_HEAT) || at->r->rnd_score < 8) return 0;
  return p->fill_tick - U->out_at < p->nact / 8;
}

/* A miss: the unit is absent, or this page of it is. The detector sees
 * each fault once (*fed), even when eviction makes us look at the unit
 * again. 1: look again (eviction made room), else as _hm_sdm_fault. */
static int hm__fault_miss(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at,
                          _hm_sdm_pf_plan_t *plan, int *fed) {
  hm_pager_t *p = h->p;
  /* fed with prefetch off too: the streams it finds are what keeps a loop
   * larger than the cache partly resident (_hm_sdm_demote_behind), and what
   * tells a random miss from a sweep's; only their windows go unread */
  if (!(at->U->flags & HM_UF_RANDOM) && !_hm_sdm_sparse_fill(at->r, at->u) && !*fed) {
    hm__feed_at(h, f, at, 0, plan);
    hm__rnd_score(at->r, plan);
    *fed = 1;
  }
  int random = hm__miss_random(p, at, plan);
  if (!at->pf_on) memset(plan, 0, sizeof *plan);
  int zero = !(at->U->flags & HM_UF_ONDISK);
  int whole = random && hm__dense_back(p, at);
  if (whole) random = 0;
  uint32_t pg0, npg;
  hm__miss_pages(p, at, random, zero, whole ? 0 : plan->trend, &pg0, &npg);
  uint64_t bytes = (uint64_t)npg * HM_SDM_PAGE;
  if (!_hm_sdm_ops_free(h)) {
    pthread_mutex_unlock(&p->lk);
    return -EAGAIN;
  }
  if (!_hm_sdm_reserve(p, bytes, at->U->state == HM_U_NONE)) {
    pthread_mutex_unlock(&p->lk);
    /* Writes in flight: deferred, retried when the handler wakes */
    if (_hm_sdm_evict_async(h, bytes)) return -EAGAIN;
    return 1; /* state may have changed meanwhile: look again */
  }
  /* a sparse spell's page fill leaves the unit resident, and a strided
   * thread's next pages are read ahead of it (sparse.c) */
  int pfill = random && at->r->sparse && !(at->U->flags & HM_UF_RANDOM) &&
              _hm_sdm_sparse_units(p);
  _hm_sdm_op_t *op =
      hm__miss_op(h, f, at, pg0, npg, zero, random && plan->same ? 2 : random, pfill);
  if (whole) {
    at->U->dense--;
    p->slots[op->slots[0]].whole = 1;
  }
  _hm_sdm_op_t *ahead[HM_SDM_AHEAD];
  unsigned n = pfill ? _hm_sdm_sparse_ahead(h, at->r, f->tid, f->addr, ahead) : 0;
  _hm_sdm_plan_hold(at->r, plan);
  pthread_mutex_unlock(&p->lk);
  hm__start_all(h, op, ahead, n);
  _hm_sdm_plan_queue(h, at->r, plan);
  return 0;
}

/* One pass over a located fault (pager lock held, released on return);
 * 1: look again. */
static int hm__fault_once(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f, const hm__at_t *at,
                          _hm_sdm_pf_plan_t *plan, int *fed) {
  hm_pager_t *p = h->p;
  _hm_sdm_unit_t *U = at->U;
  if (U->state == HM_U_FILLING || U->state == HM_U_BUSY) return hm__fault_transit(h, f, at);
  if (U->state == HM_U_RES) {
    _hm_sdm_slot_t *S = &p->slots[U->slot];
    if (f->flags & UFFD_PAGEFAULT_FLAG_WP) return hm__fault_wp(p, f, at, S);
    if (_hm_sdm_bit(S->filled, at->pg)) return hm__fault_hit(h, f, at, S);
    if (hm__is_trigger(p, S, at->pg)) return hm__fault_trigger(h, f, at, S);
    if (S->pfills && (_hm_sdm_infl(S, at->pg) || !at->r->sparse))
      return hm__fault_pending(h, f, at);
  }
  return hm__fault_miss(h, f, at, plan, fed);
}

int _hm_sdm_fault(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f) {
  hm_pager_t *p = h->p;
  _hm_sdm_pf_plan_t plan = {0};
  int fed = 0, rc;
  do {
    pthread_mutex_lock(&p->lk);
    hm__at_t at;
    if (!hm__locate(p, f, &at)) {
      pthread_mutex_unlock(&p->lk);
      _hm_sdm_wake(p, (void *)(uintptr_t)(f->addr & ~(uint64_t)(HM_SDM_PAGE - 1)), HM_SDM_PAGE);
      return 0;
    }
    rc = hm__fault_once(h, f, &at, &plan, &fed);
  } while (rc == 1);
  return rc;
}
