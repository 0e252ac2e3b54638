/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals shared by the pager's files (src/sdm/): the pager, handler and
 * fill-operation structures, the helpers every file uses, and the functions
 * one file calls in another. See pager.c for the design and for which file
 * holds what. Everything here runs under the rules stated there: the pager
 * mutex guards the bookkeeping, every ioctl and I/O runs outside it, and
 * nothing is allocated with it held. */
#ifndef HM_SDM_PAGER_INT_H
#define HM_SDM_PAGER_INT_H

#include <linux/userfaultfd.h>
#include <string.h>

#include "sdm/sdm.h"

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1ULL << 15)
#endif
#ifndef UFFDIO_REGISTER_MODE_MINOR
#define UFFDIO_REGISTER_MODE_MINOR ((__u64)1 << 2)
#endif

enum { HM_SDM_DIRTY_ASYNC = 0, HM_SDM_DIRTY_SYNC = 1, HM_SDM_DIRTY_ALL = 2 };

#define HM_SDM_WQ 256                /* WILLNEED ranges queued at once */
#define HM_SDM_GROUP 16              /* most units one prefetch read covers */
#define HM_SDM_HELD 32               /* readahead trigger pages held at once (anonymous mode) */
/* The pool's bits in held_used: a free page is a zero bit among these only
 * (the word has 64 bits; a free index of 32 or more would be past the
 * pool's mapping). */
#define HM_SDM_HELD_MASK ((1ull << HM_SDM_HELD) - 1u)
_Static_assert(HM_SDM_HELD < 64, "held_used is one word (and S->held keeps idx+1 in 7 bits)");
#define HM_SDM_SUB_PAGES 16u          /* a strided stream's fill: 64 KiB around its page */
#define HM_SDM_DEMQ 1024u             /* slots of units left behind by streams, evicted first */
#define HM_SDM_GROUP_BYTES (1u << 20) /* and most bytes, unless one unit is more */

/* One fill: a demand read of pages of a unit, or a prefetch of whole units. */
typedef struct _hm_sdm_op_s {
  _hm_sdm_region_t *reg;
  uint32_t unit, pg0, npg;
  uint32_t nu;                  /* units covered: > 1 only for whole-unit prefetches */
  int32_t slots[HM_SDM_GROUP]; /* one per unit */
  uint8_t prefetch, zero;
  uint8_t pfill; /* a page fill of a sparse spell: the unit stays resident (sparse.c) */
  uint8_t small; /* one of the handler's page ops (pops): anonymous mode, a page's buffer */
  int8_t trigger; /* anonymous mode: hold back the stream's first page (1: forward, -1: back) */
  uint64_t t0;
  char *buf; /* anonymous mode: bounce buffer of one unit */
  int res;   /* the read's result, while queued to the copier */
  struct _hm_sdm_op_s *next;
} _hm_sdm_op_t;

typedef struct _hm_sdm_fault_s {
  uint64_t addr, flags, t0;
  int tid;
} _hm_sdm_fault_t;

/* A prefetch plan queued by a fault, run one read at a time (handler.c). */
typedef struct _hm_sdm_qplan_s {
  _hm_sdm_region_t *reg;
  int64_t from, stride, trigger;
  uint32_t count, k; /* units in the plan, units done */
  uint32_t pg;       /* strided plans: the page (within a unit) the stream touches */
  int64_t first;     /* the pass of the stream that made it (_hm_sdm_pf_passed) */
  int tid;           /* that stream's thread, -1: none */
  int watch;         /* a sparse watch may begin in it (sparse.c) */
} _hm_sdm_qplan_t;

typedef struct _hm_sdm_handler_s {
  hm_pager_t *p;
  pthread_t th;
  int started;
  _hm_prim_ring_t *ring;  /* fills and polls */
  _hm_prim_ring_t *wring; /* write-backs of evictions */
  int wbfd;               /* eventfd of wring's completions, polled on ring */
  int wb_armed;           /* wbfd's poll is queued on ring */
  struct _hm_sdm_evb_s *evb; /* the eviction batch in flight (evict.c) */
  _hm_sdm_op_t *ops, *free_ops;
  unsigned nops;
  char *bounce;
  size_t bounce_bytes;
  /* Page ops, for reads ahead of one page (sparse.c), HM_SDM_PAGE_OPS of
   * them: in anonymous mode ops are few (their buffers a unit each, at
   * most 1/32 of the budget: 8 at 64 MiB), and reads ahead held them all. */
  _hm_sdm_op_t *pops, *free_pops;
  char *pbounce; /* anonymous mode: their buffers, a page each */
  _hm_sdm_fault_t *def; /* faults waiting for an op or for budget */
  unsigned ndef, capdef;
  /* Prefetch plans waiting to run: faults are served first, and plans run
   * one read at a time in between, so a reader never waits behind a long
   * batch of prefetch submissions and evictions. */
  _hm_sdm_qplan_t plans[32];
  unsigned nplans;
  int plan_blocked; /* the next plan step waits for a free op */
  /* A successor prefetch chosen under the pager lock by the fault path
   * (fault.c), queued by the next _hm_sdm_plan_queue once the lock is
   * dropped (its region holds a busy reference until then). */
  _hm_sdm_pf_plan_t succ;
  _hm_sdm_region_t *succ_reg;
  _hm_prim_page_region_t *vec;
  /* The copier (copier.c): installs this handler's completed prefetch
   * fills in anonymous mode. qlk guards cq, ret, want_ops and cstop. */
  int copier, cstarted, cstop, want_ops, retfd;
  pthread_t cth;
  pthread_mutex_t qlk;
  pthread_cond_t qcv;
  _hm_sdm_op_t *cq, *cq_tail; /* fills to install, oldest first */
  _hm_sdm_op_t *ret;          /* installed: to go back on free_ops */
} _hm_sdm_handler_t;

typedef struct _hm_sdm_wq_s {
  _hm_sdm_region_t *reg;
  uint32_t u0, u1;
} _hm_sdm_wq_t;

/* An entry of such a ring: the slot and the tag it was queued with. A
 * slot taken again while an entry for it is still queued starts without
 * `demoted` and may be queued again; only the entry whose tag matches the
 * slot's `dtag` is its live one, so a stale entry neither takes the slot
 * out of turn nor, dropped at the ring's end, clears the live one. */
typedef struct {
  int32_t slot;
  uint32_t tag;
} _hm_sdm_vqe_t;

/* A ring of HM_SDM_DEMQ slots queued for eviction first (demq, coldq). */
typedef struct _hm_sdm_vq_s {
  _hm_sdm_vqe_t *e; /* NULL: a cache too small for the rings does without */
  uint32_t head, n;
} _hm_sdm_vq_t;

/* Bytes read back from the files of regions of one length (stats.c): which
 * blocks a run read again and again, where the counters give only the sum
 * (LAMMPS at a 25% budget: its three 11.5 MiB atom arrays read 200 times
 * each, 7.4 of its 17.7 GB). */
#define HM_SDM_READ_SIZES 16
typedef struct {
  uint64_t len, blocks, bytes;
  uint64_t over; /* of bytes, what the length it replaced had read */
} _hm_sdm_rsize_t;

/* A thread's last faults in a sparse region (sparse.c): the stride its
 * page fills read ahead along. */
#define HM_SDM_STRIDERS 16
typedef struct _hm_sdm_strider_s {
  const void *reg;
  uint64_t last, next; /* the last fault's address; the next to read ahead */
  int64_t stride;      /* bytes between its last two faults */
  uint32_t stamp;
  int tid;
  uint8_t conf; /* the same stride again, in a row */
} _hm_sdm_strider_t;

struct hm_pager_s {
  hm_ctx_t *ctx;
  hm_pager_config_t cfg;
  int pid; /* the process that opened it: a forked child must open its own */
  char dir[HM_PATH_MAX];
  int uffd, pagemap, evfd;
  int pidfd; /* this process, for batched MADV_DONTNEED (evict.c); -1: none */
  uint64_t features;
  int memfd_mode, dirty_mode;
  uint64_t unit;
  uint32_t upages;
  uint64_t cap;      /* bytes of cache pages allowed now (budget - own memory) */
  uint64_t own;      /* the pager's own memory charged to the budget */
  uint64_t used;     /* filled + being filled */
  uint64_t resident; /* filled */
  uint64_t peak;
  /* The budget at run time (budget.c): the last one applied (the cache is
   * cap = budget - own, within bounds), the last one set, the lowest
   * applied, and the integral over time behind the mean reported.
   * cfg.dram_budget, the budget opened with, is the most it can be. */
  uint64_t budget, budget_low, budget_t0, budget_t;
  double budget_area;
  _Atomic uint64_t budget_want;
  /* HM_PAGER_PROCESS_BUDGET (budget.c): the rest of the process's memory
   * at the last measure and its peak, and when handler 0 measures next. */
  uint64_t other, other_peak, other_next;
  _Atomic int64_t excluded; /* hm_pager_exclude_bytes: not the process's own */
  /* Data touched: fetch units of live regions filled at least once, and
   * the most of it at once (footprint_bytes). A program that frees and
   * allocates again counts what it holds, not what it ever held. */
  uint64_t seen_live, seen_peak;
  /* Bytes read, by region length, of the regions unmapped so far: the
   * HM_SDM_READ_SIZES lengths read most (stats.c; pager lock). */
  _hm_sdm_rsize_t rsizes[HM_SDM_READ_SIZES];
  uint32_t maxwin;
  pthread_mutex_t lk;
  pthread_cond_t cv;
  _hm_sdm_region_t **regs;
  size_t nregs, capregs;
  _hm_sdm_slot_t *slots;
  size_t slots_bytes;
  uint32_t nslots, hand;
  uint32_t *act; /* slots in use, densely: the CLOCK walks this, not all slots */
  uint32_t nact;
  int32_t free_slot;   /* slots used before and given back, a list through next_free */
  uint32_t slot_fresh; /* slots at and above this index were never used (see _hm_sdm_slot_take) */
  uint64_t pf_untouched;
  _hm_sdm_pf_t pf;
  _hm_sdm_strider_t striders[HM_SDM_STRIDERS]; /* sparse.c (pager lock) */
  uint32_t strider_stamp;
  _hm_sdm_wq_t wq[HM_SDM_WQ];
  unsigned nwq;
  char *zeros; /* anonymous mode: one unit of zeros for UFFDIO_COPY */
  /* Anonymous mode: pages held back from readahead trigger units (see
   * _hm_sdm_fill_done), HM_SDM_HELD of them, a bit per page in use. */
  char *held;
  uint64_t held_used;
  /* Slots of the units a sequential stream has passed (_hm_sdm_demote_behind
   * in demote.c), evicted before CLOCK runs (a ring of HM_SDM_DEMQ, oldest
   * first; an entry counts while its slot's `demoted` flag is set, which a
   * slot taken again starts without). CLOCK alone cannot tell them from
   * reused data: a stream's units carry the reference bit of their fault or
   * prefetch, and resident data that is reused never faults, so a pass over
   * more data than the cache pushed out what the program comes back to (the
   * hot arrays of a cache-mode run). */
  _hm_sdm_vq_t demq;
  /* Slots of units the application advised cold (HM_ADVICE_COLD, which
   * the interposer gives for MADV_COLD and MADV_PAGEOUT): a second such
   * ring, in demq's mapping, taken before it: the program's own word on
   * what it will not use soon comes before a guess from its streams. */
  _hm_sdm_vq_t coldq;
  uint32_t dtag; /* the tag of the last entry queued on either ring (wraps: demote.c) */
  /* Units filled so far (wraps): the clock by which a unit read again soon
   * after it was evicted as left behind is told from one read again a
   * sweep later (_hm_sdm_slot_take). */
  uint32_t fill_tick;
  uint64_t refault_avg; /* mean fills between eviction and refill, x16 (evict.c) */
  /* Pages demand fills brought in (wraps): the cache's turnover, by which
   * a unit filled fast at random is told from one filled over a long stay
   * (hm__dense_back in fault.c). */
  uint32_t page_tick;
  _hm_sdm_handler_t *h;
  unsigned nh;
  atomic_int stop;
  /* counters (relaxed atomics) */
  atomic_ullong c_faults, c_fetches, c_pf_issued, c_pf_used, c_pf_wasted, c_evictions,
      c_writebacks, c_bytes_read, c_bytes_written, c_fault_ns, c_zero_fills, c_minor_hits,
      c_io_errors, c_wp_faults, c_ra_triggers, c_pf_succ, c_demand_bytes, c_resweep_refills,
      c_ev_ahead, c_wb_stalls, c_sparse, c_trimmed, c_page_ahead;
};

#define HM_SDM_ADD(p, c, v) atomic_fetch_add_explicit(&(p)->c, (v), memory_order_relaxed)
#define HM_SDM_GET(p, c) atomic_load_explicit(&(p)->c, memory_order_relaxed)

/* ------------------------------------------------------------------------
 * Small helpers, inline: most run on the fault path under the pager lock.
 * ------------------------------------------------------------------------ */

static inline int _hm_sdm_bit(const uint64_t *b, unsigned i) {
  return (int)((b[i / 64] >> (i % 64)) & 1u);
}
static inline void _hm_sdm_setbit(uint64_t *b, unsigned i) { b[i / 64] |= 1ull << (i % 64); }

/* Next run of set bits in b starting at *i (below n); returns its length. */
static inline unsigned _hm_sdm_run(const uint64_t *b, unsigned n, unsigned *i) {
  while (*i < n && !_hm_sdm_bit(b, *i)) (*i)++;
  unsigned j = *i;
  while (j < n && _hm_sdm_bit(b, j)) j++;
  return j - *i;
}

static inline char *_hm_sdm_ubase(const _hm_sdm_region_t *r, const hm_pager_t *p, uint32_t u) {
  return r->base + (uint64_t)u * p->unit;
}

static inline void _hm_sdm_wake(hm_pager_t *p, void *addr, size_t len) {
  /* ENOENT once the range is gone is harmless: nobody can wait there. */
  (void)_hm_prim_uffd_wake(p->uffd, addr, len);
}

/* Region containing addr (pager lock held). */
static inline _hm_sdm_region_t *_hm_sdm_find(hm_pager_t *p, uint64_t addr) {
  size_t lo = 0, hi = p->nregs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    _hm_sdm_region_t *r = p->regs[mid];
    uint64_t b = (uint64_t)(uintptr_t)r->base;
    if (addr < b)
      hi = mid;
    else if (addr >= b + r->len)
      lo = mid + 1;
    else
      return r;
  }
  return NULL;
}

/* The most units one read of a backing file covers: in memfd mode a
 * prefetch group (HM_SDM_GROUP units and HM_SDM_GROUP_BYTES at most, at
 * least one unit); in anonymous mode one, since a read fills one bounce
 * buffer. */
static inline uint32_t _hm_sdm_read_units(const hm_pager_t *p) {
  if (!p->memfd_mode) return 1;
  uint64_t g = HM_SDM_GROUP_BYTES / p->unit;
  if (g > HM_SDM_GROUP) g = HM_SDM_GROUP;
  return g ? (uint32_t)g : 1;
}

/* The longest run of set bits among a unit's pages: a dense sweep's walk
 * fills runs, a sparse one scattered pages (sparse.c). */
static inline uint32_t _hm_sdm_longest_run(const hm_pager_t *p, const uint64_t *bits) {
  unsigned i = 0, n, most = 0;
  while ((n = _hm_sdm_run(bits, p->upages, &i)) > 0) {
    if (n > most) most = n;
    i += n;
  }
  return most;
}

/* Reserves bytes of budget and want_slots free slots (pager lock held). */
static inline int _hm_sdm_reserve(hm_pager_t *p, uint64_t bytes, uint32_t want_slots) {
  if (p->used + bytes > p->cap) return 0;
  if (p->nact + want_slots > p->nslots) return 0;
  p->used += bytes;
  return 1;
}

/* Accuracy over the last 64 resolved prefetches (used, or evicted unused)
 * sets the region's window limit: halved below 50%, doubled above 75%.
 * Counting resolved ones, not issued ones, keeps the prefetches still in
 * flight from reading as misses. Pager lock held. */
static inline void _hm_sdm_pf_resolved(hm_pager_t *p, _hm_sdm_region_t *r, int used) {
  if (used) r->pf_used++;
  if (++r->pf_issued < 64 || !p->memfd_mode) return;
  if (r->pf_used * 2 < r->pf_issued)
    r->pf_limit = r->pf_limit > 1 ? r->pf_limit / 2 : 1;
  else if (r->pf_used * 4 >= r->pf_issued * 3)
    r->pf_limit = r->pf_limit * 2 > p->maxwin ? p->maxwin : r->pf_limit * 2;
  r->pf_issued = r->pf_used = 0;
}

/* The pages a strided stream (more than one unit per step) fills of a
 * unit: HM_SDM_SUB_PAGES around the page it touches, not the whole unit. A
 * sparse reader (one cache line every few MiB) then reads 64 KiB per step
 * whatever the unit, like flat mode's 64 KiB units, instead of 256 KiB or
 * more; a reader that wants more of the unit faults again and gets the
 * rest as a partial fill. */
static inline void _hm_sdm_sub(const hm_pager_t *p, int64_t stride, uint32_t pg, uint32_t *pg0,
                               uint32_t *npg) {
  *pg0 = 0;
  *npg = p->upages;
  if ((stride > 1 || stride < -1) && p->upages > HM_SDM_SUB_PAGES) {
    *pg0 = pg / HM_SDM_SUB_PAGES * HM_SDM_SUB_PAGES;
    *npg = HM_SDM_SUB_PAGES;
  }
}

static inline _hm_sdm_op_t *_hm_sdm_op_get(_hm_sdm_handler_t *h) {
  _hm_sdm_op_t *op = h->free_ops;
  if (op) h->free_ops = op->next;
  return op;
}

static inline void _hm_sdm_op_put(_hm_sdm_handler_t *h, _hm_sdm_op_t *op) {
  if (op->small) {
    op->next = h->free_pops;
    h->free_pops = op;
    return;
  }
  op->next = h->free_ops;
  h->free_ops = op;
  h->plan_blocked = 0;
}

static inline _hm_sdm_op_t *_hm_sdm_pop_get(_hm_sdm_handler_t *h) {
  _hm_sdm_op_t *op = h->free_pops;
  if (op) h->free_pops = op->next;
  return op;
}

int _hm_sdm_copier_reclaim(_hm_sdm_handler_t *h);

/* Whether the handler has a free op, taking back the copier's first. */
static inline int _hm_sdm_ops_free(_hm_sdm_handler_t *h) {
  return h->free_ops != NULL || (h->copier && _hm_sdm_copier_reclaim(h));
}

/* Drops a busy reference on r and wakes whoever waits for it. */
static inline void _hm_sdm_release(hm_pager_t *p, _hm_sdm_region_t *r) {
  pthread_mutex_lock(&p->lk);
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
}

/* Pager lock held: keeps r alive for a plan run after the lock is dropped. */
static inline void _hm_sdm_plan_hold(_hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl) {
  if (pl->stride != 0 && pl->count != 0) r->busy++;
}

/* Waits until no fill, eviction or mapping works on U (pager lock held). */
static inline void _hm_sdm_wait_unit(hm_pager_t *p, const _hm_sdm_unit_t *U) {
  while (U->state == HM_U_FILLING || U->state == HM_U_BUSY ||
         (U->slot >= 0 && p->slots[U->slot].pin))
    pthread_cond_wait(&p->cv, &p->lk);
}

/* ------------------------------------------------------------------------
 * Across files
 * ------------------------------------------------------------------------ */

/* fault.c: the fault path and fills. _hm_sdm_fault returns 0 when the
 * fault is resolved or left to a transition's wake, -EAGAIN when it must be
 * retried later (no free op or budget yet). */
int _hm_sdm_fault(_hm_sdm_handler_t *h, const _hm_sdm_fault_t *f);
/* Starts a fill prepared under the lock (called without it). */
void _hm_sdm_fill_start(_hm_sdm_handler_t *h, _hm_sdm_op_t *op);
/* Completes a fill whose read returned res (bytes, or -errno): installs
 * it, wakes its waiters and frees the op (fill_finish keeps the op). */
void _hm_sdm_fill_done(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res);
void _hm_sdm_fill_finish(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res);

/* demote.c: the queues of units evicted before CLOCK runs (pager lock held
 * for both). demote queues a resident unit's slot: a stream left it
 * behind, or the application advised it cold. demote_behind, at a fault of
 * a sequential stream at unit u of r (plan pl), queues the units it passed
 * when its sweep spills the cache. */
void _hm_sdm_demote(hm_pager_t *p, _hm_sdm_vq_t *q, const _hm_sdm_unit_t *V, _hm_sdm_slot_t *S);
void _hm_sdm_demote_behind(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                           const _hm_sdm_pf_plan_t *pl);

/* region.c: marks the resident units [u0, u1] of r referenced (WILLNEED,
 * pager lock held): by the range's units, or by the slots in use where
 * fewer. */
void _hm_sdm_mark_willneed(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1);

/* copier.c: the thread that installs prefetch fills beside a handler.
 * take: 1 when op went to the copier (a prefetch fill of anonymous mode),
 * 0 when the caller completes it. reclaim: the copier's finished ops back
 * on free_ops; whether any op is free (if not, the copier's next return
 * wakes the handler through retfd). */
int _hm_sdm_copier_new(_hm_sdm_handler_t *h);
int _hm_sdm_copier_start(_hm_sdm_handler_t *h);
void _hm_sdm_copier_free(_hm_sdm_handler_t *h);
int _hm_sdm_copier_take(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res);
/* _hm_sdm_copier_reclaim is declared above _hm_sdm_ops_free, its caller. */

/* handler.c: the handler threads and the prefetch plans they run. */
void *_hm_sdm_handler_main(void *arg);
/* Queues a fault's plan, then the successor prefetch it chose, if any (no
 * lock held; the caller took a busy reference with _hm_sdm_plan_hold). */
void _hm_sdm_plan_queue(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl);

/* evict.c: the slot table, CLOCK, eviction and write-back. */
int32_t _hm_sdm_slot_take(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u);

/* sparse.c: sparse sweeps, filled page by page (pager lock held). Whether
 * a miss on unit u of r fills page by page: inline, as the fault path asks
 * it on every miss (two loads and compares). */
static inline int _hm_sdm_sparse_fill(const _hm_sdm_region_t *r, uint32_t u) {
  return r->sparse || r->probe == u + 1u;
}
void _hm_sdm_sparse_filled(_hm_sdm_region_t *r, _hm_sdm_slot_t *S);
int _hm_sdm_sparse_skip(hm_pager_t *p, _hm_sdm_region_t *r, int64_t u, int watch);
int _hm_sdm_sparse_old(const hm_pager_t *p, _hm_sdm_region_t *r, _hm_sdm_slot_t *S,
                       uint64_t *old);
void _hm_sdm_sparse_trim(_hm_sdm_handler_t *h, const int32_t *slots, const uint64_t *old,
                         unsigned n);
unsigned _hm_sdm_sparse_ahead(_hm_sdm_handler_t *h, _hm_sdm_region_t *r, int tid, uint64_t addr,
                              _hm_sdm_op_t **ops);
#define HM_SDM_AHEAD 12   /* page fills a strided thread has in flight ahead of it */
#define HM_SDM_PAGE_OPS 32 /* a handler's page ops: reads ahead of a page in flight */

/* Pages [pg0, pg0 + npg) of a unit of at most 64 pages as one word of
 * bits (seen, infl). */
static inline uint64_t _hm_sdm_page_bits(uint32_t pg0, uint32_t npg) {
  return (npg >= 64 ? ~0ull : (1ull << npg) - 1u) << pg0;
}

/* A page fill of a sparse spell marked in flight in S (pager lock held):
 * the unit stays resident, its other pages take hits and fills of their
 * own meanwhile, and eviction passes it by (pin) until it completes. */
static inline void _hm_sdm_pfill_mark(_hm_sdm_slot_t *S, uint32_t pg0, uint32_t npg) {
  S->infl |= _hm_sdm_page_bits(pg0, npg);
  S->pfills++;
  S->pin++;
}

/* The slot a fill of npg pages of unit u of r goes to (pager lock held):
 * the unit's own where it is resident (a fill of missing pages), else a
 * free one; referenced, and the pages counted as filled. */
static inline int32_t _hm_sdm_fill_slot(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                                        uint32_t npg) {
  const _hm_sdm_unit_t *U = &r->units[u];
  int32_t s = U->state != HM_U_NONE ? U->slot : _hm_sdm_slot_take(p, r, u);
  p->slots[s].ref = 1;
  p->page_tick += npg;
  return s;
}

/* Op fills pages [pg0, pg0 + npg) of unit u of r into slot s (pager lock
 * held): the unit is FILLING until it completes, or, for a page fill of a
 * sparse spell (pfill), stays resident with the pages marked in flight.
 * The caller sets prefetch, zero and t0. Shared by demand misses (fault.c)
 * and pages read ahead (sparse.c). */
static inline void _hm_sdm_op_pages(_hm_sdm_op_t *op, _hm_sdm_slot_t *S, _hm_sdm_region_t *r,
                                    uint32_t u, int32_t s, uint32_t pg0, uint32_t npg,
                                    int pfill) {
  r->units[u].state = pfill ? HM_U_RES : HM_U_FILLING;
  if (pfill) _hm_sdm_pfill_mark(S, pg0, npg);
  r->busy++;
  op->reg = r;
  op->unit = u;
  op->nu = 1;
  op->pg0 = pg0;
  op->npg = npg;
  op->slots[0] = s;
  op->pfill = (uint8_t)pfill;
  op->trigger = 0;
}

/* A unit the eviction batch made BUSY for a moment (to see its use, or to
 * drop old pages) is resident again (pager lock held); 1 when a thread
 * faulted on it meanwhile and waits for a wake (U->waits, set under the
 * lock by the fault path: most units have none, and a wake is an ioctl). */
static inline int _hm_sdm_unbusy(_hm_sdm_slot_t *S) {
  _hm_sdm_unit_t *U = &S->reg->units[S->unit];
  int waits = U->waits;
  U->state = HM_U_RES;
  U->waits = 0;
  S->reg->busy--;
  return waits;
}

/* Whether page pg of S is being read by a page fill. */
static inline int _hm_sdm_infl(const _hm_sdm_slot_t *S, uint32_t pg) {
  return pg < 64 && ((S->infl >> pg) & 1u);
}

/* Whether units are small enough for page fills and trims (one word of
 * bits: seen, infl). */
static inline int _hm_sdm_sparse_units(const hm_pager_t *p) { return p->upages <= 64; }
/* fault.c: a random fill's pages counted into S (pager lock held). */
void _hm_sdm_rnd_dense(hm_pager_t *p, _hm_sdm_slot_t *S, uint32_t npg);
void _hm_sdm_sparse_out(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                        const _hm_sdm_slot_t *S);
void _hm_sdm_slot_put(hm_pager_t *p, int32_t s);
/* Gives back the slot of a unit being dropped, with its bytes (pager lock
 * held). */
void _hm_sdm_drop_slot(hm_pager_t *p, int32_t s);
/* Evicts at least `need` bytes (or one unit), waiting for the write-backs
 * (the batch in flight first). 0 when something was freed, -EAGAIN when
 * every resident unit is busy (fills in flight). */
int _hm_sdm_evict(_hm_sdm_handler_t *h, uint64_t need);
/* The fault path's eviction: starts a batch and returns without waiting
 * for its writes. 0 when memory was freed (clean victims, or the batch in
 * flight ended), -EINPROGRESS while a batch's writes run (the caller
 * defers; the write ring's eventfd wakes the handler), -EAGAIN as above. */
int _hm_sdm_evict_async(_hm_sdm_handler_t *h, uint64_t need);
/* Once per handler pass: ends the batch in flight when its writes are
 * done, and starts one ahead of need when less than a batch is free,
 * so that a fault waits for write-back only when the budget is spent. */
void _hm_sdm_evict_ahead(_hm_sdm_handler_t *h);
/* A prefetch that found no room waits for the batch in flight (counted as
 * a stall): 0 when one ended, -EAGAIN when none was in flight. */
int _hm_sdm_evict_wait(_hm_sdm_handler_t *h);
/* Whether a batch is in flight: it has writes to queue or in flight once
 * any evict call has returned (each one that starts a batch reaps it
 * until it ends or must wait), so the handler polls the write ring's
 * eventfd while it is. */
int _hm_sdm_evict_busy(const _hm_sdm_handler_t *h);
/* Waits for the batch in flight (a handler that stops). */
void _hm_sdm_evict_drain(_hm_sdm_handler_t *h);
int _hm_sdm_evict_init(_hm_sdm_handler_t *h);
void _hm_sdm_evict_fini(_hm_sdm_handler_t *h);

/* stats.c: adds blocks regions of len bytes that were read bytes to table t
 * of n lengths (pager lock held for the pager's). */
void _hm_sdm_rsize_add(_hm_sdm_rsize_t *t, size_t n, uint64_t len, uint64_t blocks,
                        uint64_t bytes);

/* budget.c */
void _hm_sdm_cap_update(hm_pager_t *p);
void _hm_sdm_budget_apply(_hm_sdm_handler_t *h);
void _hm_sdm_budget_figures(hm_pager_t *p, uint64_t *mean, uint64_t *low);
int _hm_sdm_budget_measure(_hm_sdm_handler_t *h, uint64_t now);
/* Writes back the dirty pages of one resident unit, keeping it resident. */
int _hm_sdm_flush_unit(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                       _hm_prim_page_region_t *vec);

#endif
