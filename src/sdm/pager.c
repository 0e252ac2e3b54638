/* The pager: a userfaultfd-driven DRAM cache over O_DIRECT backing files.
 *
 * Layout. Each region is a memfd (shmem) mapped twice: the application's
 * view, registered MISSING|MINOR|WP with the userfaultfd, and an alias that
 * is not registered. A fill reads the backing file with O_DIRECT straight
 * into the alias (the page lands in the memfd's page cache, no bounce copy)
 * and UFFDIO_CONTINUE maps it into the application's view (HM_PAGER_MEMFD).
 * By default, and on kernels without MINOR faults on shmem, regions are
 * private anonymous memory filled through bounce buffers with UFFDIO_COPY,
 * which measured faster (see hm_pager_open). Regions are split into fetch units
 * (64 KiB..2 MiB); a unit is the grain of eviction and write-back, while a
 * fill may cover single pages of it (random access) or all of it.
 *
 * Dirty tracking, chosen at run time from the UFFDIO_API feature bits:
 *  - wp_async (Linux 6.7+): pages are mapped write-protected (CONTINUE with
 *    MODE_WP); a write is resolved by the kernel itself and only clears the
 *    PTE's uffd-wp bit. To evict a unit the pager zaps the application's
 *    PTEs (MADV_DONTNEED, which on shmem only unmaps): protected PTEs become
 *    uffd-wp markers, written ones become empty. PAGEMAP_SCAN then reports
 *    the markers (PAGE_IS_SWAPPED); a filled page without one was written.
 *    Zapping first also stops writers (they fault and wait), so nothing is
 *    written during the write-back. A page table freed by the zap reads as
 *    "written": conservative, never lossy.
 *  - wp_sync: the first write to a unit raises a WP fault; the unit is marked
 *    dirty and unprotected as a whole (one round trip per unit per
 *    residency). Eviction re-protects it before writing back.
 *  - all: no write-protect: every resident unit is written back.
 * Units never written back are "zero" units: their fill is a fallocate of
 * the memfd (or a COPY of zeros), no I/O.
 *
 * Budget. One hard cap per pager: cache pages (filled or being filled) plus
 * the pager's own memory (slot table, bounce buffers, per-region unit
 * tables) never exceed cfg.dram_budget. Eviction takes first the units a
 * sequential stream has passed in a region larger than the cache (queued
 * by hm__demote_behind), then runs CLOCK over the resident units with a
 * reference bit set on faults; prefetched units that the hand has passed
 * once without their being touched go first (wasted prefetch).
 * Memory is really freed: PUNCH_HOLE on the memfd, MADV_DONTNEED on
 * anonymous memory.
 *
 * Prefetch (prefetch.c detects the streams): a plan is queued by the fault
 * that produced it and run one read at a time between faults, so a reader
 * never waits behind prefetch work. Reads along a forward stream cover up to
 * 1 MiB of contiguous absent units each; they are handed to io_uring's
 * workers (IOSQE_ASYNC), which also allocate the target pages. Prefetched
 * units stay unmapped in the memfd's page cache: the first touch is a cheap
 * MINOR fault, which is how prefetch_used is observed; on such a hit, up to
 * 8 further units that already arrived along the same stream are mapped at
 * once. Accuracy (used / resolved) over 64 prefetches halves or doubles the
 * region's window limit; prefetch never holds more than half the cache
 * untouched, and the windows of all streams active at once share half of
 * it (so six streams in a small cache do not each ask for a quarter of
 * it). Anonymous mode has no page cache to park prefetched units in:
 * they are installed on arrival and their use is invisible, so a stream
 * would fault only past its window's end and wait there for a demand read
 * with the device idle. Each plan therefore names a readahead trigger half
 * a window before its end (prefetch.c), whose stream-first page is held
 * back in a small pool (HM__HELD pages, charged to the budget; a plan
 * that finds the pool full goes without a held page): the
 * reader's touch of it is a fault that installs it without I/O and
 * requests the next half window while half a window is still ahead.
 * Across regions, the pager learns which region's stream follows the end of
 * another's (region successors, see prefetch.c) and requests the next
 * region's first window when a stream nears the end of the one before.
 *
 * Fault path cost: a handler thread reads up to 64 uffd_msg per read(2),
 * takes the pager mutex for O(1) bookkeeping (region lookup by binary
 * search, unit state, CLOCK slot, stream detector: ~0.2-0.5 us; a stream
 * not yet at its end whose region's last unit is resident also reads up
 * to 512 unit states to see whether its end is near), and does every ioctl
 * and I/O outside it. A hit on a prefetched unit is a MINOR fault
 * resolved by one UFFDIO_CONTINUE of the unit (~2-4 us round trip); a miss
 * adds one O_DIRECT read through io_uring (queue depth cfg.io_depth,
 * many misses in flight at once). Faults that arrive while their unit is
 * being filled or evicted are dropped: every such transition ends with a
 * UFFDIO_WAKE of the whole unit, after which the thread retries the access
 * and faults again if it must. Failed resolutions (EEXIST, ENOENT, EAGAIN)
 * are followed by an explicit UFFDIO_WAKE, never treated as fatal.
 *
 * Huge pages: an application may madvise MADV_HUGEPAGE on a region (numpy
 * does on every large array). Every fill is a UFFDIO_COPY or CONTINUE of
 * base pages (a huge fault on an empty PMD is a MISSING fault like any
 * other), and the kernel refuses to collapse a registered region into huge
 * pages (khugepaged, MADV_COLLAPSE), so eviction and the budget stay per
 * base page. Advice on part of a region splits the kernel's mapping, and
 * UFFDIO_COPY/CONTINUE fail with ENOENT on a range that crosses the split:
 * such a fill goes on page by page (it used to wake the faulting thread
 * without mapping anything, forever: the livelock numpy's hint caused).
 * tests/c/test_sdm_thp.c.
 * Fork: regions are MADV_DONTFORK, so a child never sees them (an access in
 * the child is SIGSEGV) and never reads zeros where data was.
 * Signals: the handler threads block every signal; a faulting thread that
 * takes a signal simply retries its access after the handler.
 *
 * Re-entrancy: map/unmap may be called from inside malloc (the preload
 * interposer). The pager never calls malloc with its mutex held, and every
 * allocation whose size grows with the region (unit tables) is an mmap, so a
 * nested malloc can neither deadlock nor recurse into the pager. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sdm/sdm.h"

#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1ULL << 15)
#endif
#ifndef UFFDIO_REGISTER_MODE_MINOR
#define UFFDIO_REGISTER_MODE_MINOR ((__u64)1 << 2)
#endif
#define HM__PAGE_IS_WRITTEN (1ULL << 1)
#define HM__PAGE_IS_SWAPPED (1ULL << 4)
#define HM__PM_SCAN_WP_MATCHING (1ULL << 0)

enum { HM__DIRTY_ASYNC = 0, HM__DIRTY_SYNC = 1, HM__DIRTY_ALL = 2 };
static const char *const hm__dirty_names[] = {"wp_async", "wp_sync", "all"};

#define HM__TAG_UFFD 1u
#define HM__TAG_EVENT 2u
#define HM__MSG_BATCH 64
#define HM__WQ 256

#define HM__GROUP 16               /* most units one prefetch read covers */
#define HM__HELD 32                /* readahead trigger pages held at once (anonymous mode) */
/* The pool's bits in held_used: a free page is a zero bit among these only
 * (the word has 64 bits; a free index of 32 or more would be past the
 * pool's mapping). */
#define HM__HELD_MASK ((1ull << HM__HELD) - 1u)
_Static_assert(HM__HELD < 64, "held_used is one word (and S->held keeps idx+1 in 7 bits)");
#define HM__SUB_PAGES 16u          /* a strided stream's fill: 64 KiB around its page */
#define HM__DEMQ 1024u             /* slots of units left behind by streams, evicted first */
#define HM__GROUP_BYTES (1u << 20) /* and most bytes, unless one unit is more */

typedef struct hm__op_s {
  _hm_sdm_region_t *reg;
  uint32_t unit, pg0, npg;
  uint32_t nu;               /* units covered: > 1 only for whole-unit prefetches */
  int32_t slots[HM__GROUP]; /* one per unit */
  uint8_t prefetch, zero;
  int8_t trigger; /* anonymous mode: hold back the stream's first page (1: forward, -1: back) */
  uint64_t t0;
  char *buf; /* anonymous mode: bounce buffer of one unit */
  struct hm__op_s *next;
} hm__op_t;

typedef struct hm__fault_s {
  uint64_t addr, flags, t0;
  int tid;
} hm__fault_t;

typedef struct hm__plan_s {
  _hm_sdm_region_t *reg;
  int64_t from, stride, trigger;
  uint32_t count, k; /* units in the plan, units done */
  uint32_t pg;       /* strided plans: the page (within a unit) the stream touches */
} hm__plan_t;

typedef struct hm__handler_s {
  hm_pager_t *p;
  pthread_t th;
  int started;
  _hm_prim_ring_t *ring;  /* fills and polls */
  _hm_prim_ring_t *wring; /* write-backs of evictions */
  hm__op_t *ops, *free_ops;
  unsigned nops;
  char *bounce;
  size_t bounce_bytes;
  hm__fault_t *def; /* faults waiting for an op or for budget */
  unsigned ndef, capdef;
  /* Prefetch plans waiting to run: faults are served first, and plans run
   * one read at a time in between, so a reader never waits behind a long
   * batch of prefetch submissions and evictions. */
  hm__plan_t plans[32];
  unsigned nplans;
  int plan_blocked; /* the next plan step waits for a free op */
  /* A successor prefetch chosen under the pager lock by hm__pf_feed, queued
   * by the next hm__prefetch_plan once the lock is dropped (its region
   * holds a busy reference until then). */
  _hm_sdm_pf_plan_t succ;
  _hm_sdm_region_t *succ_reg;
  _hm_prim_page_region_t *vec;
} hm__handler_t;

typedef struct hm__wq_s {
  _hm_sdm_region_t *reg;
  uint32_t u0, u1;
} hm__wq_t;

struct hm_pager_s {
  hm_ctx_t *ctx;
  hm_pager_config_t cfg;
  int pid; /* the process that opened it: a forked child must open its own */
  char dir[HM_PATH_MAX];
  int uffd, pagemap, evfd;
  uint64_t features;
  int memfd_mode, dirty_mode;
  uint64_t unit;
  uint32_t upages;
  uint64_t cap;      /* bytes of cache pages allowed now (budget - own memory) */
  uint64_t own;      /* the pager's own memory charged to the budget */
  uint64_t used;     /* filled + being filled */
  uint64_t resident; /* filled */
  uint64_t peak;
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
  uint32_t slot_fresh; /* slots at and above this index were never used (see hm__slot_take) */
  uint64_t pf_untouched;
  _hm_sdm_pf_t pf;
  hm__wq_t wq[HM__WQ];
  unsigned nwq;
  char *zeros; /* anonymous mode: one unit of zeros for UFFDIO_COPY */
  /* Anonymous mode: pages held back from readahead trigger units (see
   * hm__fill_done), HM__HELD of them, a bit per page in use. */
  char *held;
  uint64_t held_used;
  /* Slots of the units a sequential stream has passed (hm__demote_behind),
   * evicted before CLOCK runs (a ring of HM__DEMQ, oldest first; an entry
   * counts while its slot's `demoted` flag is set, which a slot taken again
   * starts without). CLOCK alone cannot tell them from reused data: a
   * stream's units carry the reference bit of their fault or prefetch, and
   * resident data that is reused never faults, so a pass over more data
   * than the cache pushed out what the program comes back to (the hot
   * arrays of a cache-mode run). */
  int32_t *demq;
  uint32_t demq_head, demq_n;
  hm__handler_t *h;
  unsigned nh;
  atomic_int stop;
  /* counters (relaxed atomics) */
  atomic_ullong c_faults, c_fetches, c_pf_issued, c_pf_used, c_pf_wasted, c_evictions,
      c_writebacks, c_bytes_read, c_bytes_written, c_fault_ns, c_zero_fills, c_minor_hits,
      c_io_errors, c_wp_faults, c_ra_triggers, c_pf_succ;
};

#define HM__ADD(p, c, v) atomic_fetch_add_explicit(&(p)->c, (v), memory_order_relaxed)
#define HM__GET(p, c) atomic_load_explicit(&(p)->c, memory_order_relaxed)

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

static uint64_t hm__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int hm__bit(const uint64_t *b, unsigned i) { return (int)((b[i / 64] >> (i % 64)) & 1u); }
static void hm__setbit(uint64_t *b, unsigned i) { b[i / 64] |= 1ull << (i % 64); }

/* Next run of set bits in b starting at *i (below n); returns its length. */
static unsigned hm__run(const uint64_t *b, unsigned n, unsigned *i) {
  while (*i < n && !hm__bit(b, *i)) (*i)++;
  unsigned j = *i;
  while (j < n && hm__bit(b, j)) j++;
  return j - *i;
}

static char *hm__ubase(const _hm_sdm_region_t *r, const hm_pager_t *p, uint32_t u) {
  return r->base + (uint64_t)u * p->unit;
}

static void hm__wake(hm_pager_t *p, void *addr, size_t len) {
  /* ENOENT once the range is gone is harmless: nobody can wait there. */
  (void)_hm_prim_uffd_wake(p->uffd, addr, len);
}

/* Region containing addr (pager lock held). */
static _hm_sdm_region_t *hm__find(hm_pager_t *p, uint64_t addr) {
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

static void hm__account(hm_pager_t *p) {
  if (p->resident > p->peak) p->peak = p->resident;
}

/* Reserves bytes of budget and want_slots free slots (pager lock held). */
static int hm__reserve(hm_pager_t *p, uint64_t bytes, uint32_t want_slots) {
  if (p->used + bytes > p->cap) return 0;
  if (p->nact + want_slots > p->nslots) return 0;
  p->used += bytes;
  return 1;
}

/* A slot for unit u of r (a reservation made room for it). Slots given
 * back are reused first; otherwise the next never-used one is taken from
 * the bump index slot_fresh, so the slot table (sized for the budget, up
 * to ~108 bytes per 8 KiB of it, reserved MAP_NORESERVE) is touched only
 * as far as the most slots in use at once: RSS follows use, not the budget,
 * and opening a pager touches none of it. Cost on the fault path: one
 * compare beside the list pop, under the pager lock as before. */
static int32_t hm__slot_take(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u) {
  int32_t s = p->free_slot;
  if (s >= 0)
    p->free_slot = p->slots[s].next_free;
  else
    s = (int32_t)p->slot_fresh++; /* below nslots: hm__reserve counted nact */
  _hm_sdm_slot_t *S = &p->slots[s];
  memset(S, 0, sizeof *S);
  S->used = 1;
  S->reg = r;
  S->unit = u;
  S->next_free = -1;
  S->act_pos = p->nact;
  p->act[p->nact++] = (uint32_t)s;
  r->units[u].slot = s;
  return s;
}

static void hm__slot_put(hm_pager_t *p, int32_t s) {
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

/* Accuracy over the last 64 resolved prefetches (used, or evicted unused)
 * sets the region's window limit: halved below 50%, doubled above 75%.
 * Counting resolved ones, not issued ones, keeps the prefetches still in
 * flight from reading as misses. Pager lock held. */
static void hm__pf_resolved(hm_pager_t *p, _hm_sdm_region_t *r, int used) {
  if (used) r->pf_used++;
  if (++r->pf_issued < 64 || !p->memfd_mode) return;
  if (r->pf_used * 2 < r->pf_issued)
    r->pf_limit = r->pf_limit > 1 ? r->pf_limit / 2 : 1;
  else if (r->pf_used * 4 >= r->pf_issued * 3)
    r->pf_limit = r->pf_limit * 2 > p->maxwin ? p->maxwin : r->pf_limit * 2;
  r->pf_issued = r->pf_used = 0;
}

/* A prefetched unit was touched: counts and adapts (pager lock held). */
static void hm__touched(hm_pager_t *p, _hm_sdm_slot_t *S) {
  if (!S->prefetched) return;
  S->prefetched = 0;
  p->pf_untouched -= p->unit;
  hm__pf_resolved(p, S->reg, 1);
  HM__ADD(p, c_pf_used, 1);
}

static void hm__pf_count_issue(hm_pager_t *p) { HM__ADD(p, c_pf_issued, 1); }

/* A sequential stream at unit u of a region larger than the cache: the
 * resident units from two units to two windows behind it are queued for
 * eviction first (what it passed cannot all stay until its next pass, so
 * keeping them only pushes out other data, first the units prefetched
 * ahead of the streams). A region that fits is left to CLOCK: its next
 * pass may find it resident. The walk back stops at the first unit queued
 * already (an earlier fault of the stream queued those beyond it), so a
 * fault costs O(units passed since the stream's last fault), under the
 * pager lock it holds anyway; a full ring drops its oldest entries. */
static void hm__demote_behind(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                              const _hm_sdm_pf_plan_t *pl) {
  if (!p->demq || (pl->trend != 1 && pl->trend != -1) || r->len <= p->cap) return;
  int64_t w = pl->window < 2 ? 2 : (int64_t)pl->window;
  for (int64_t k = 2; k <= 2 * w; k++) {
    int64_t v = (int64_t)u - pl->trend * k;
    if (v < 0 || v >= (int64_t)r->nunits) break;
    _hm_sdm_unit_t *V = &r->units[v];
    if (V->state != HM_U_RES) continue;
    _hm_sdm_slot_t *S = &p->slots[V->slot];
    if (S->demoted) break;
    if (S->pin) continue;
    /* Its reference bit is cleared: a fault on it from now on says it is
     * used again, and hm__evict then leaves it to CLOCK. */
    S->demoted = 1;
    S->ref = 0;
    if (p->demq_n == HM__DEMQ) {
      p->slots[p->demq[p->demq_head]].demoted = 0; /* the oldest goes back to CLOCK */
      p->demq_head = (p->demq_head + 1) % HM__DEMQ;
      p->demq_n--;
    }
    p->demq[(p->demq_head + p->demq_n++) % HM__DEMQ] = V->slot;
  }
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
static void hm__pf_successor(hm__handler_t *h, int tid, _hm_sdm_region_t *r, uint32_t window) {
  hm_pager_t *p = h->p;
  if (!r->succ_addr || h->succ_reg) return;
  _hm_sdm_region_t *q = hm__find(p, r->succ_addr);
  if (!q || q->dead || q == r) return;
  uint64_t u = (r->succ_addr - (uint64_t)(uintptr_t)q->base) / p->unit;
  uint32_t count = window < 2 ? 2 : window;
  if (u + count > q->nunits) count = (uint32_t)(q->nunits - u);
  if (_hm_sdm_pf_seed(&p->pf, tid, q, (int64_t)u, count, &h->succ) < 0) return;
  q->busy++;
  h->succ_reg = q;
  HM__ADD(p, c_pf_succ, 1);
}

/* Feeds a fault at page pg of unit u to the stream detector, and learns or
 * uses region successors (pager lock held). */
static void hm__pf_feed(hm__handler_t *h, int tid, _hm_sdm_region_t *r, uint32_t u, uint32_t pg,
                        int hit, int seq, uint32_t maxw, _hm_sdm_pf_plan_t *plan) {
  hm_pager_t *p = h->p;
  _hm_sdm_pf_fault(&p->pf, tid, r, u, hit, seq, maxw, plan);
  plan->pg = pg;
  if (plan->pred) {
    /* Streams of an unmapped region are forgotten: pred is a live region. */
    _hm_sdm_region_t *e = (_hm_sdm_region_t *)(uintptr_t)plan->pred;
    e->succ_addr = (uint64_t)(uintptr_t)hm__ubase(r, p, u);
  }
  /* What the stream has requested reaches within a window of the region's
   * end, or what lies beyond it is there already (the tail of the last
   * pass, which eviction leaves behind the units a stream passes): the
   * reader may fault no more before the end. */
  int64_t reach = plan->count ? plan->from + (int64_t)plan->count : (int64_t)u + 1;
  if (plan->trend == 1 && !plan->ended &&
      (reach + (int64_t)plan->window >= (int64_t)r->nunits || hm__tail_present(r, reach)) &&
      _hm_sdm_pf_end(&p->pf, tid, r))
    hm__pf_successor(h, tid, r, plan->window);
  hm__demote_behind(p, r, u, plan);
}

/* The pages a strided stream (more than one unit per step) fills of a
 * unit: HM__SUB_PAGES around the page it touches, not the whole unit. A
 * sparse reader (one cache line every few MiB) then reads 64 KiB per step
 * whatever the unit, like flat mode's 64 KiB units, instead of 256 KiB or
 * more; a reader that wants more of the unit faults again and gets the
 * rest as a partial fill. */
static void hm__sub(const hm_pager_t *p, int64_t stride, uint32_t pg, uint32_t *pg0, uint32_t *npg) {
  *pg0 = 0;
  *npg = p->upages;
  if ((stride > 1 || stride < -1) && p->upages > HM__SUB_PAGES) {
    *pg0 = pg / HM__SUB_PAGES * HM__SUB_PAGES;
    *npg = HM__SUB_PAGES;
  }
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
  while (end < p->upages && end - pg < want && !hm__bit(S->filled, end)) end++;
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
  char *ub = hm__ubase(r, p, u);
  unsigned i = 0, n;
  while ((n = hm__run(bits, p->upages, &i)) > 0) {
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
  return p->dirty_mode == HM__DIRTY_ASYNC || (p->dirty_mode == HM__DIRTY_SYNC && !S->dirty);
}

/* Anonymous mode: installs pages [pg0, pg0+npg) of a unit from src. */
static void hm__copy_in(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u, uint32_t pg0,
                        uint32_t npg, const char *src, int wp) {
  hm__install(p, hm__ubase(r, p, u) + (size_t)pg0 * HM_SDM_PAGE, src, (size_t)npg * HM_SDM_PAGE,
              wp);
}

/* ------------------------------------------------------------------------
 * Fills
 * ------------------------------------------------------------------------ */

static hm__op_t *hm__op_get(hm__handler_t *h) {
  hm__op_t *op = h->free_ops;
  if (op) h->free_ops = op->next;
  return op;
}

static void hm__op_put(hm__handler_t *h, hm__op_t *op) {
  op->next = h->free_ops;
  h->free_ops = op;
  h->plan_blocked = 0;
}

static size_t hm__op_len(const hm_pager_t *p, const hm__op_t *op) {
  return op->nu > 1 ? (size_t)op->nu * p->unit : (size_t)op->npg * HM_SDM_PAGE;
}

static char *hm__fill_target(hm_pager_t *p, hm__op_t *op) {
  if (p->memfd_mode)
    return op->reg->alias + (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
  return op->buf + (uint64_t)op->pg0 * HM_SDM_PAGE;
}

static void hm__fill_done(hm__handler_t *h, hm__op_t *op, int res) {
  hm_pager_t *p = h->p;
  _hm_sdm_region_t *r = op->reg;
  size_t len = hm__op_len(p, op);
  char *dst = hm__fill_target(p, op);
  uint64_t foff = (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
  if (!op->zero && res != (int)len) {
    /* Short or failed read: once more, synchronously. A second failure
     * ends the process (guard.c): zeros where the program's data was would
     * be silent corruption, and leaving the thread waiting is a hang. */
    ssize_t got = _hm_prim_vm_pio(r->file, 0, dst, len, foff);
    if (got != (ssize_t)len) {
      HM__ADD(p, c_io_errors, 1);
      _hm_sdm_io_fatal(p->dir, 0, foff, len, got < 0 ? (int)got : -EIO);
    }
  }
  if (!op->zero) HM__ADD(p, c_bytes_read, len);
  uint64_t bits[HM__GROUP][HM_SDM_BITMAP_WORDS];
  int map[HM__GROUP], wp[HM__GROUP];
  uint32_t cpg0 = op->pg0, cnpg = op->npg; /* what copy_in installs (anonymous mode) */
  pthread_mutex_lock(&p->lk);
  for (uint32_t k = 0; k < op->nu; k++) {
    _hm_sdm_slot_t *S = &p->slots[op->slots[k]];
    uint32_t hold = UINT32_MAX;
    if (op->trigger && !p->memfd_mode && op->nu == 1 && op->pg0 == 0 && op->npg == p->upages &&
        op->npg > 1 && S->prefetched && p->held && (~p->held_used & HM__HELD_MASK) != 0) {
      /* Readahead trigger: the stream's first page of this unit is held
       * back (copied aside, ~0.2 us under the lock so that a fault on it
       * never finds the copy half made), so the reader's first touch
       * faults and the next half window is requested (see hm__fault). */
      unsigned idx = (unsigned)__builtin_ctzll(~p->held_used & HM__HELD_MASK);
      p->held_used |= 1ull << idx;
      hold = op->trigger > 0 ? 0 : p->upages - 1;
      memcpy(p->held + (size_t)idx * HM_SDM_PAGE, dst + (size_t)hold * HM_SDM_PAGE, HM_SDM_PAGE);
      S->held = (uint8_t)((idx + 1) | (hold ? 0x80u : 0u));
      if (hold == 0) cpg0 = 1;
      cnpg = op->npg - 1;
    }
    for (uint32_t i = 0; i < op->npg; i++)
      if (op->pg0 + i != hold) hm__setbit(S->filled, op->pg0 + i);
    uint32_t got = hold == UINT32_MAX ? op->npg : op->npg - 1;
    S->nfilled = (uint16_t)(S->nfilled + got);
    p->resident += (uint64_t)got * HM_SDM_PAGE;
    r->units[op->unit + k].state = HM_U_RES;
    map[k] = !op->prefetch || !S->prefetched; /* touched while in flight: map now */
    if (!p->memfd_mode && S->prefetched) {
      /* Anonymous mode installs prefetched pages at once (there is no page
       * cache to park them in), so their first touch is invisible: they are
       * counted neither used nor wasted, and accuracy cannot throttle. */
      S->prefetched = 0;
      p->pf_untouched -= p->unit;
      /* ...and no fault sets their reference bit either: without it CLOCK
       * took them as the first victims, before the stream reached them,
       * and they were read again on demand (STREAM triad at 4x a 64 MiB
       * budget read 1.78x its footprint per pass; 1.12x with the bit). */
      S->ref = 1;
    }
    if (p->memfd_mode && map[k] && S->mapped) {
      /* Earlier pages are mapped already: map only the new ones, so a unit
       * filled page by page costs one CONTINUE per fill, not per page. */
      memset(bits[k], 0, sizeof bits[k]);
      for (uint32_t i = 0; i < op->npg; i++) hm__setbit(bits[k], op->pg0 + i);
    } else {
      memcpy(bits[k], S->filled, sizeof bits[k]);
    }
    if (p->memfd_mode && map[k]) S->mapped = 1;
    wp[k] = hm__fill_wp(p, S);
    S->pin++;
  }
  hm__account(p);
  pthread_mutex_unlock(&p->lk);
  for (uint32_t k = 0; k < op->nu; k++) {
    if (p->memfd_mode) {
      if (map[k]) hm__map_runs(p, r, op->unit + k, bits[k], wp[k]);
    } else {
      hm__copy_in(p, r, op->unit, cpg0, cnpg, dst + (size_t)(cpg0 - op->pg0) * HM_SDM_PAGE,
                  wp[k]);
    }
  }
  hm__wake(p, hm__ubase(r, p, op->unit), (size_t)op->nu * p->unit);
  if (!op->prefetch) HM__ADD(p, c_fault_ns, hm__now() - op->t0);
  pthread_mutex_lock(&p->lk);
  for (uint32_t k = 0; k < op->nu; k++) p->slots[op->slots[k]].pin--;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  hm__op_put(h, op);
}

/* Starts a fill prepared under the lock (called without it). */
static void hm__fill_start(hm__handler_t *h, hm__op_t *op) {
  hm_pager_t *p = h->p;
  size_t len = hm__op_len(p, op);
  char *dst = hm__fill_target(p, op);
  if (op->zero) {
    /* Never written back: zeros without I/O. */
    HM__ADD(p, c_zero_fills, 1);
    if (p->memfd_mode) {
      uint64_t off = (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
      if (_hm_prim_vm_fallocate(op->reg->memfd, 0, off, len)) memset(dst, 0, len);
    } else {
      memset(dst, 0, len);
    }
    hm__fill_done(h, op, (int)len);
    return;
  }
  uint64_t foff = (uint64_t)op->unit * p->unit + (uint64_t)op->pg0 * HM_SDM_PAGE;
  /* memfd mode: prefetch reads go to io_uring's workers, since issuing a
   * read allocates its target pages, which would otherwise delay this
   * thread's next fault. Anonymous mode reads into bounce buffers that
   * exist already: the read is issued inline (a worker would only add a
   * thread switch per read, on a machine with few cores a real cost). */
  int async = op->prefetch && p->memfd_mode;
  if (_hm_prim_ring_rw(h->ring, async ? HM_PRIM_RING_ASYNC : 0, op->reg->file, dst,
                          (unsigned)len, foff,
                          (uint64_t)(uintptr_t)op) < 0) {
    hm__fill_done(h, op, -EBUSY); /* cannot happen: ops <= ring entries */
    return;
  }
  if (!op->prefetch) HM__ADD(p, c_fetches, 1);
}

/* ------------------------------------------------------------------------
 * Eviction
 * ------------------------------------------------------------------------ */

#define HM__MAXVICT 16

/* Finds which filled pages of a victim must be written and stops writers.
 * Victim is BUSY, so no fault on it is being resolved meanwhile. */
static void hm__victim_dirty(hm__handler_t *h, _hm_sdm_slot_t *S, uint64_t *D) {
  hm_pager_t *p = h->p;
  char *ub = hm__ubase(S->reg, p, S->unit);
  memset(D, 0, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  if (p->dirty_mode == HM__DIRTY_ASYNC) {
    if (!S->mapped) return; /* never visible to the application: clean */
    (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
    uint64_t marked[HM_SDM_BITMAP_WORDS];
    memset(marked, 0, sizeof marked);
    ssize_t n = _hm_prim_pagemap_scan(p->pagemap, ub, p->unit, 0, HM__PAGE_IS_SWAPPED, 0,
                                      HM__PAGE_IS_SWAPPED, h->vec, p->upages);
    for (ssize_t k = 0; k < n; k++) {
      uint64_t a = h->vec[k].start, b = h->vec[k].end, base = (uint64_t)(uintptr_t)ub;
      for (uint64_t x = a; x < b; x += HM_SDM_PAGE) hm__setbit(marked, (unsigned)((x - base) / HM_SDM_PAGE));
    }
    for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) D[w] = S->filled[w] & ~marked[w];
  } else if (p->dirty_mode == HM__DIRTY_SYNC) {
    if (!S->dirty) return;
    (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 1);
    memcpy(D, S->filled, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  } else {
    if (p->memfd_mode && !S->mapped) return; /* never visible: clean */
    if (p->memfd_mode) (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
    memcpy(D, S->filled, sizeof(uint64_t) * HM_SDM_BITMAP_WORDS);
  }
}

/* Evicts at least `need` bytes (or one unit). 0 when something was freed,
 * -EAGAIN when every resident unit is busy (fills in flight). */
static int hm__evict(hm__handler_t *h, uint64_t need) {
  hm_pager_t *p = h->p;
  int32_t vict[HM__MAXVICT];
  unsigned nv = 0;
  uint64_t freed = 0;
  /* Evict in batches of up to 2 MiB (1/16 of the cache at most): the
   * write-backs of a batch run in parallel, and the bookkeeping is shared. */
  uint64_t batch = p->cap / 16 < (2u << 20) ? p->cap / 16 : (2u << 20);
  if (need < batch) need = batch;
  pthread_mutex_lock(&p->lk);
  while (p->demq_n && nv < HM__MAXVICT && (nv == 0 || freed < need)) {
    int32_t e = p->demq[p->demq_head];
    p->demq_head = (p->demq_head + 1) % HM__DEMQ;
    p->demq_n--;
    _hm_sdm_slot_t *S = &p->slots[e];
    /* Still demoted: the flag is reset when the slot is taken again (an
     * entry must not outlive the fill it was made for, or a unit evicted
     * and refilled into the same slot would be taken again at once, before
     * its faulting thread ran) and when an entry for it is consumed. */
    if (!S->used || !S->demoted) continue;
    S->demoted = 0; /* from here on CLOCK's, whether taken now or not */
    if (S->pin || S->ref) continue; /* in use, or faulted on since it was left behind */
    _hm_sdm_region_t *r = S->reg;
    _hm_sdm_unit_t *U = &r->units[S->unit];
    if (r->dead || U->state != HM_U_RES || U->slot != e) continue;
    U->state = HM_U_BUSY;
    r->busy++;
    vict[nv++] = e;
    freed += (uint64_t)S->nfilled * HM_SDM_PAGE;
  }
  for (uint32_t steps = 0; steps < 3 * p->nact + 3 && nv < HM__MAXVICT && (nv == 0 || freed < need);
       steps++) {
    if (p->nact == 0) break;
    if (p->hand >= p->nact) p->hand = 0;
    uint32_t idx = p->act[p->hand++];
    _hm_sdm_slot_t *S = &p->slots[idx];
    if (!S->used || S->pin) continue;
    _hm_sdm_region_t *r = S->reg;
    if (r->units[S->unit].state != HM_U_RES || r->dead) continue;
    if (S->ref) {
      S->ref = 0;
      continue;
    }
    if (S->prefetched && !S->passed) {
      S->passed = 1;
      continue;
    }
    r->units[S->unit].state = HM_U_BUSY;
    r->busy++;
    vict[nv++] = (int32_t)idx;
    freed += (uint64_t)S->nfilled * HM_SDM_PAGE;
  }
  pthread_mutex_unlock(&p->lk);
  if (nv == 0) return -EAGAIN;

  uint64_t D[HM__MAXVICT][HM_SDM_BITMAP_WORDS];
  int failed[HM__MAXVICT];
  unsigned inflight = 0;
  for (unsigned v = 0; v < nv; v++) {
    _hm_sdm_slot_t *S = &p->slots[vict[v]];
    failed[v] = 0;
    hm__victim_dirty(h, S, D[v]);
    _hm_sdm_region_t *r = S->reg;
    char *src0 = p->memfd_mode ? r->alias + (uint64_t)S->unit * p->unit : hm__ubase(r, p, S->unit);
    unsigned i = 0, n;
    while ((n = hm__run(D[v], p->upages, &i)) > 0) {
      uint64_t off = (uint64_t)S->unit * p->unit + (uint64_t)i * HM_SDM_PAGE;
      uint64_t tag = ((uint64_t)v << 32) | i;
      while (_hm_prim_ring_rw(h->wring, HM_PRIM_RING_WRITE, r->file, src0 + (size_t)i * HM_SDM_PAGE,
                                 n * HM_SDM_PAGE, off, tag) == -EBUSY) {
        uint64_t t;
        int res;
        if (_hm_prim_ring_next(h->wring, -1, &t, &res) == 1) {
          inflight--;
          unsigned vv = (unsigned)(t >> 32);
          if (res < 0) failed[vv] = res;
        }
      }
      inflight++;
      HM__ADD(p, c_bytes_written, (uint64_t)n * HM_SDM_PAGE);
      i += n;
    }
  }
  while (inflight > 0) {
    uint64_t t;
    int res;
    int rc = _hm_prim_ring_next(h->wring, -1, &t, &res);
    if (rc < 0) break;
    if (rc == 0) continue;
    inflight--;
    if (res < 0) failed[(unsigned)(t >> 32)] = res;
  }
  for (unsigned v = 0; v < nv; v++) {
    _hm_sdm_slot_t *S = &p->slots[vict[v]];
    _hm_sdm_region_t *r = S->reg;
    uint32_t u = S->unit;
    char *ub = hm__ubase(r, p, u);
    int wrote = 0;
    for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) wrote |= D[v][w] != 0;
    if (failed[v] && wrote) {
      /* Retry synchronously, page run by page run. If the device still
       * refuses, the process ends (guard.c): kept resident, such units
       * would fill the cache until every fault waited for budget forever,
       * and dropped, their data would be lost. */
      char *src0 = p->memfd_mode ? r->alias + (uint64_t)u * p->unit : ub;
      unsigned i = 0, n;
      while ((n = hm__run(D[v], p->upages, &i)) > 0) {
        uint64_t off = (uint64_t)u * p->unit + (uint64_t)i * HM_SDM_PAGE;
        ssize_t w =
            _hm_prim_vm_pio(r->file, 1, src0 + (size_t)i * HM_SDM_PAGE, n * HM_SDM_PAGE, off);
        if (w < 0) {
          HM__ADD(p, c_io_errors, 1);
          _hm_sdm_io_fatal(p->dir, 1, off, (size_t)n * HM_SDM_PAGE, (int)w);
        }
        i += n;
      }
    }
    if (p->memfd_mode)
      (void)_hm_prim_vm_punch(r->memfd, (uint64_t)u * p->unit, p->unit);
    else
      (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
    pthread_mutex_lock(&p->lk);
    uint64_t bytes = (uint64_t)S->nfilled * HM_SDM_PAGE;
    if (S->prefetched) {
      p->pf_untouched -= p->unit;
      hm__pf_resolved(p, r, 0);
      HM__ADD(p, c_pf_wasted, 1);
    }
    p->used -= bytes;
    p->resident -= bytes;
    if (wrote) r->units[u].flags |= HM_UF_ONDISK;
    r->units[u].state = HM_U_NONE;
    r->units[u].slot = -1;
    hm__slot_put(p, vict[v]);
    r->busy--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lk);
    HM__ADD(p, c_evictions, 1);
    if (wrote) HM__ADD(p, c_writebacks, 1);
    hm__wake(p, ub, p->unit);
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Faults and prefetches
 * ------------------------------------------------------------------------ */

static void hm__prefetch_plan(hm__handler_t *h, _hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl);

/* Issues a prefetch of unit u and, going forward (dir 1), of up to max - 1
 * more absent units after it in the same read (no lock held). Returns the
 * number of units it covered (0: u needed nothing), < 0 to stop. */
static int hm__prefetch_group(hm__handler_t *h, _hm_sdm_region_t *r, int64_t u, uint32_t max,
                              int dir, int trigger, uint32_t pg0, uint32_t npg) {
  hm_pager_t *p = h->p;
  for (int attempt = 0; attempt < 2; attempt++) {
    pthread_mutex_lock(&p->lk);
    if (r->dead || u < 0 || u >= (int64_t)r->nunits) {
      pthread_mutex_unlock(&p->lk);
      return 0;
    }
    _hm_sdm_unit_t *U = &r->units[u];
    if (U->state != HM_U_NONE || (U->flags & HM_UF_RANDOM)) {
      pthread_mutex_unlock(&p->lk);
      return 0;
    }
    /* Prefetch never holds more than half of the cache untouched. */
    if (p->pf_untouched + p->unit > p->cap / 2) {
      pthread_mutex_unlock(&p->lk);
      return -ENOSPC;
    }
    if (!h->free_ops) {
      /* Every read slot is in flight: the plan waits for one (dropping it
       * would leave a hole the stream believes requested). */
      pthread_mutex_unlock(&p->lk);
      return -EBUSY;
    }
    uint32_t n = 1;
    uint32_t gmax = HM__GROUP_BYTES / p->unit;
    if (gmax > HM__GROUP) gmax = HM__GROUP;
    if (gmax > max) gmax = max;
    if (dir == 1 && p->memfd_mode)
      while (n < gmax && u + n < (int64_t)r->nunits) {
        _hm_sdm_unit_t *V = &r->units[u + n];
        if (V->state != HM_U_NONE || (V->flags & HM_UF_RANDOM) ||
            ((V->flags ^ U->flags) & HM_UF_ONDISK) ||
            p->pf_untouched + (n + 1) * p->unit > p->cap / 2)
          break;
        n++;
      }
    uint64_t bytes = npg < p->upages ? (uint64_t)npg * HM_SDM_PAGE : (uint64_t)n * p->unit;
    if (!hm__reserve(p, bytes, n)) {
      pthread_mutex_unlock(&p->lk);
      if (attempt || hm__evict(h, bytes)) return -EAGAIN;
      continue;
    }
    hm__op_t *op = hm__op_get(h);
    op->reg = r;
    op->unit = (uint32_t)u;
    op->nu = n;
    op->pg0 = npg < p->upages ? pg0 : 0;
    op->npg = npg < p->upages ? npg : p->upages;
    op->prefetch = 1;
    op->zero = !(U->flags & HM_UF_ONDISK);
    /* Zero units are not held back: their file range may hold stale data
     * that a later partial write-back would make readable. */
    op->trigger = (int8_t)(n == 1 && !op->zero ? trigger : 0);
    op->t0 = 0;
    for (uint32_t k = 0; k < n; k++) {
      int32_t sl = hm__slot_take(p, r, (uint32_t)u + k);
      p->slots[sl].prefetched = 1;
      r->units[u + k].state = HM_U_FILLING;
      op->slots[k] = sl;
      hm__pf_count_issue(p);
    }
    p->pf_untouched += (uint64_t)n * p->unit;
    r->busy++;
    pthread_mutex_unlock(&p->lk);
    hm__fill_start(h, op);
    return (int)n;
  }
  return -EAGAIN;
}

static void hm__release(hm_pager_t *p, _hm_sdm_region_t *r) {
  pthread_mutex_lock(&p->lk);
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
}

/* Queues a plan; the caller took a busy reference on r (hm__plan_hold) so
 * that an unmap cannot free r before the plan has run (or been dropped). */
static void hm__queue_plan(hm__handler_t *h, _hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl) {
  if (pl->stride == 0 || pl->count == 0) return;
  if (h->nplans == sizeof h->plans / sizeof h->plans[0]) {
    hm__release(h->p, h->plans[0].reg); /* the oldest is the least useful */
    memmove(&h->plans[0], &h->plans[1], (h->nplans - 1) * sizeof h->plans[0]);
    h->nplans--;
  }
  h->plans[h->nplans].reg = r;
  h->plans[h->nplans].from = pl->from;
  h->plans[h->nplans].stride = pl->stride;
  h->plans[h->nplans].count = pl->count;
  h->plans[h->nplans].trigger = pl->trigger;
  h->plans[h->nplans].pg = pl->pg;
  h->plans[h->nplans].k = 0;
  h->nplans++;
}

/* Queues a fault's plan, then the successor prefetch it chose, if any (no
 * lock held). */
static void hm__prefetch_plan(hm__handler_t *h, _hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl) {
  hm__queue_plan(h, r, pl);
  if (h->succ_reg) {
    _hm_sdm_region_t *q = h->succ_reg;
    h->succ_reg = NULL;
    hm__queue_plan(h, q, &h->succ);
  }
}

/* Runs one read of the oldest plan; 1 if plans remain. */
static int hm__plan_step(hm__handler_t *h) {
  if (h->nplans == 0) return 0;
  hm__plan_t *pl = &h->plans[0];
  int64_t u = pl->from + (int64_t)pl->k * pl->stride;
  uint32_t pg0, npg;
  hm__sub(h->p, pl->stride, pl->pg, &pg0, &npg);
  int n = hm__prefetch_group(h, pl->reg, u, pl->count - pl->k, pl->stride == 1,
                             u == pl->trigger ? (pl->stride > 0 ? 1 : -1) : 0, pg0, npg);
  if (n == -EBUSY) {
    h->plan_blocked = 1;
    return 1;
  }
  if (n >= 0) pl->k += n > 0 ? (uint32_t)n : 1;
  if (n < 0 || pl->k >= pl->count) {
    hm__release(h->p, pl->reg);
    memmove(&h->plans[0], &h->plans[1], (h->nplans - 1) * sizeof h->plans[0]);
    h->nplans--;
  }
  return h->nplans > 0;
}

/* Pager lock held: keeps r alive for a plan run after the lock is dropped. */
static void hm__plan_hold(_hm_sdm_region_t *r, const _hm_sdm_pf_plan_t *pl) {
  if (pl->stride != 0 && pl->count != 0) r->busy++;
}

/* Handles one fault. 0 when resolved or left to a transition's wake,
 * -EAGAIN when it must be retried later (no free op or budget yet). */
static int hm__fault(hm__handler_t *h, const hm__fault_t *f) {
  hm_pager_t *p = h->p;
  /* The detector sees each fault once, even when eviction makes us look
   * at the unit again. */
  _hm_sdm_pf_plan_t plan = {0};
  int fed = 0;
  for (;;) {
    pthread_mutex_lock(&p->lk);
    _hm_sdm_region_t *r = hm__find(p, f->addr);
    if (!r || r->dead) {
      pthread_mutex_unlock(&p->lk);
      hm__wake(p, (void *)(uintptr_t)(f->addr & ~(uint64_t)(HM_SDM_PAGE - 1)), HM_SDM_PAGE);
      return 0;
    }
    uint64_t off = f->addr - (uint64_t)(uintptr_t)r->base;
    uint32_t u = (uint32_t)(off / p->unit);
    uint32_t pg = (uint32_t)((off % p->unit) / HM_SDM_PAGE);
    _hm_sdm_unit_t *U = &r->units[u];
    char *ub = hm__ubase(r, p, u);
    int seq = p->cfg.prefetch == HM_PREFETCH_SEQUENTIAL || (U->flags & HM_UF_SEQ);
    int pf_on = p->cfg.prefetch != HM_PREFETCH_OFF && !(U->flags & HM_UF_RANDOM);
    uint32_t maxw = r->pf_limit;
    if (U->state == HM_U_FILLING || U->state == HM_U_BUSY) {
      _hm_sdm_pf_plan_t lplan = {0};
      if (U->state == HM_U_FILLING) {
        _hm_sdm_slot_t *S = &p->slots[U->slot];
        if (S->prefetched) {
          /* A late prefetch hit: still a hit for the stream, which must
           * keep running ahead of a reader that caught up with it. */
          hm__touched(p, S);
          S->ref = 1;
          if (pf_on) hm__pf_feed(h, f->tid, r, u, pg, 1, seq, maxw, &lplan);
        }
      }
      hm__plan_hold(r, &lplan);
      pthread_mutex_unlock(&p->lk);
      hm__prefetch_plan(h, r, &lplan);
      return 0;
    }
    if (U->state == HM_U_RES) {
      _hm_sdm_slot_t *S = &p->slots[U->slot];
      if (f->flags & UFFD_PAGEFAULT_FLAG_WP) {
        S->dirty = 1;
        S->ref = 1;
        S->pin++;
        r->busy++; /* pin keeps the unit, busy keeps the region */
        pthread_mutex_unlock(&p->lk);
        HM__ADD(p, c_wp_faults, 1);
        (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 0);
        hm__wake(p, ub, p->unit);
        pthread_mutex_lock(&p->lk);
        S->pin--;
        r->busy--;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lk);
        HM__ADD(p, c_fault_ns, hm__now() - f->t0);
        return 0;
      }
      if (hm__bit(S->filled, pg)) {
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
        if (hit && pf_on) hm__pf_feed(h, f->tid, r, u, pg, 1, seq, maxw, &hplan);
        /* A confirmed sequential stream: units that arrived ahead of the
         * reader are mapped now, so that it does not wait for this thread
         * once per unit (the MINOR round trip is mostly scheduling latency
         * on a busy machine). They count as used: the stream walks them. */
        int32_t ahead[8];
        uint8_t ahead_wp[8];
        unsigned nahead = 0;
        if (map && (hplan.trend == 1 || hplan.trend == -1)) {
          unsigned m = hplan.window / 2 < 8 ? hplan.window / 2 : 8;
          for (unsigned i = 1; i <= m; i++) {
            int64_t v = (int64_t)u + hplan.trend * (int64_t)i;
            if (v < 0 || v >= (int64_t)r->nunits) break;
            _hm_sdm_unit_t *V = &r->units[v];
            if (V->state != HM_U_RES) break;
            _hm_sdm_slot_t *T = &p->slots[V->slot];
            if (!T->prefetched || T->mapped || T->nfilled != p->upages) break;
            hm__touched(p, T);
            T->ref = 1;
            T->mapped = 1;
            T->pin++;
            ahead_wp[nahead] = (uint8_t)hm__fill_wp(p, T);
            ahead[nahead++] = V->slot;
          }
          if (nahead)
            _hm_sdm_pf_advance(&p->pf, f->tid, r, (int64_t)u + hplan.trend * (int64_t)nahead);
        }
        int wp = hm__fill_wp(p, S);
        S->pin++;
        r->busy++;
        hm__plan_hold(r, &hplan);
        pthread_mutex_unlock(&p->lk);
        HM__ADD(p, c_minor_hits, 1);
        if (map) hm__map_runs(p, r, u, bits, wp);
        hm__wake(p, ub, p->unit);
        for (unsigned i = 0; i < nahead; i++) {
          _hm_sdm_slot_t *T = &p->slots[ahead[i]];
          hm__map_runs(p, r, T->unit, T->filled, ahead_wp[i]);
        }
        pthread_mutex_lock(&p->lk);
        S->pin--;
        for (unsigned i = 0; i < nahead; i++) p->slots[ahead[i]].pin--;
        r->busy--;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lk);
        HM__ADD(p, c_fault_ns, hm__now() - f->t0);
        hm__prefetch_plan(h, r, &hplan);
        return 0;
      }
    }
    if (U->state == HM_U_RES && p->slots[U->slot].held &&
        pg == ((p->slots[U->slot].held & 0x80u) ? p->upages - 1 : 0)) {
      /* The readahead trigger: install the held page (no I/O) and request
       * the next half window along the stream. */
      _hm_sdm_slot_t *S = &p->slots[U->slot];
      unsigned idx = (S->held & 0x7fu) - 1u;
      S->held = 0; /* the page is this thread's to install; its pool bit until then */
      hm__setbit(S->filled, pg);
      S->nfilled++;
      p->resident += HM_SDM_PAGE;
      hm__account(p);
      S->ref = 1;
      _hm_sdm_pf_plan_t hplan = {0};
      if (pf_on) hm__pf_feed(h, f->tid, r, u, pg, 1, seq, maxw, &hplan);
      int wp = hm__fill_wp(p, S);
      S->pin++;
      r->busy++;
      hm__plan_hold(r, &hplan);
      pthread_mutex_unlock(&p->lk);
      hm__copy_in(p, r, u, pg, 1, p->held + (size_t)idx * HM_SDM_PAGE, wp);
      hm__wake(p, ub, p->unit);
      HM__ADD(p, c_ra_triggers, 1);
      HM__ADD(p, c_fault_ns, hm__now() - f->t0);
      pthread_mutex_lock(&p->lk);
      p->held_used &= ~(1ull << idx);
      S->pin--;
      r->busy--;
      pthread_cond_broadcast(&p->cv);
      pthread_mutex_unlock(&p->lk);
      hm__prefetch_plan(h, r, &hplan);
      return 0;
    }
    /* A miss: the unit is absent, or this page of it is. */
    int random = (U->flags & HM_UF_RANDOM) != 0;
    if (p->cfg.prefetch != HM_PREFETCH_OFF && !random && !fed) {
      hm__pf_feed(h, f->tid, r, u, pg, 0, seq, maxw, &plan);
      fed = 1;
    }
    random |= plan.random;
    if (!pf_on) memset(&plan, 0, sizeof plan);
    uint32_t pg0 = 0, npg = p->upages;
    int zero = !(U->flags & HM_UF_ONDISK);
    if (U->state == HM_U_RES) {
      /* Partly filled unit: the missing run around pg (or just pg). */
      _hm_sdm_slot_t *S = &p->slots[U->slot];
      pg0 = pg;
      uint32_t end = pg + 1;
      if (!random) {
        while (pg0 > 0 && !hm__bit(S->filled, pg0 - 1)) pg0--;
        while (end < p->upages && !hm__bit(S->filled, end)) end++;
      } else {
        end = pg + hm__walk_run(p, S, pg);
      }
      npg = end - pg0;
    } else if (random && !zero) {
      pg0 = pg;
      npg = 1;
    } else if (!zero) {
      hm__sub(p, plan.trend, pg, &pg0, &npg);
    }
    uint64_t bytes = (uint64_t)npg * HM_SDM_PAGE;
    int need_slot = U->state == HM_U_NONE;
    if (!h->free_ops) {
      pthread_mutex_unlock(&p->lk);
      return -EAGAIN;
    }
    if (!hm__reserve(p, bytes, need_slot)) {
      pthread_mutex_unlock(&p->lk);
      if (hm__evict(h, bytes)) return -EAGAIN;
      continue; /* state may have changed meanwhile: look again */
    }
    hm__op_t *op = hm__op_get(h);
    int32_t s = need_slot ? hm__slot_take(p, r, u) : U->slot;
    p->slots[s].ref = 1;
    if (random) p->slots[s].walk_next = (uint16_t)(pg0 + npg + 1);
    /* A write fault on an absent page: the thread would take a WP fault
     * right after the fill; the unit is dirty now and filled unprotected
     * (one round trip per unit less for stores first, like initialisation
     * loops and STREAM's target array). */
    if ((f->flags & UFFD_PAGEFAULT_FLAG_WRITE) && p->dirty_mode == HM__DIRTY_SYNC)
      p->slots[s].dirty = 1;
    U->state = HM_U_FILLING;
    r->busy++;
    op->reg = r;
    op->unit = u;
    op->nu = 1;
    op->pg0 = pg0;
    op->npg = npg;
    op->slots[0] = s;
    op->prefetch = 0;
    op->zero = (uint8_t)zero;
    op->t0 = f->t0;
    hm__plan_hold(r, &plan);
    pthread_mutex_unlock(&p->lk);
    hm__fill_start(h, op);
    hm__prefetch_plan(h, r, &plan);
    return 0;
  }
}

static void hm__defer(hm__handler_t *h, const hm__fault_t *f) {
  if (h->ndef == h->capdef) {
    unsigned cap = h->capdef ? h->capdef * 2 : 256;
    hm__fault_t *n = realloc(h->def, cap * sizeof *n);
    if (!n) return; /* the thread is woken by the next transition on its unit */
    h->def = n;
    h->capdef = cap;
  }
  h->def[h->ndef++] = *f;
}

static void hm__read_faults(hm__handler_t *h) {
  hm_pager_t *p = h->p;
  struct uffd_msg msgs[HM__MSG_BATCH];
  for (int rounds = 0; rounds < 16; rounds++) {
    ssize_t n = _hm_prim_uffd_read(p->uffd, msgs, sizeof msgs);
    if (n <= 0) break;
    uint64_t t0 = hm__now();
    size_t cnt = (size_t)n / sizeof msgs[0];
    for (size_t i = 0; i < cnt; i++) {
      if (msgs[i].event != UFFD_EVENT_PAGEFAULT) continue;
      hm__fault_t f = {.addr = msgs[i].arg.pagefault.address,
                       .flags = msgs[i].arg.pagefault.flags,
                       .t0 = t0,
                       .tid = (int)msgs[i].arg.pagefault.feat.ptid};
      HM__ADD(p, c_faults, 1);
      if (hm__fault(h, &f) == -EAGAIN) hm__defer(h, &f);
    }
    if (cnt < HM__MSG_BATCH) break;
  }
}

static void hm__retry_deferred(hm__handler_t *h) {
  unsigned n = h->ndef, k = 0;
  for (unsigned i = 0; i < n; i++) {
    hm__fault_t f = h->def[i];
    if (hm__fault(h, &f) == -EAGAIN) h->def[k++] = f;
  }
  /* Faults deferred during this pass were appended after n. */
  for (unsigned i = n; i < h->ndef; i++) h->def[k++] = h->def[i];
  h->ndef = k;
}

static void hm__drain_willneed(hm__handler_t *h) {
  hm_pager_t *p = h->p;
  for (;;) {
    pthread_mutex_lock(&p->lk);
    if (p->nwq == 0) {
      pthread_mutex_unlock(&p->lk);
      return;
    }
    hm__wq_t w = p->wq[--p->nwq];
    if (w.reg->dead) {
      pthread_mutex_unlock(&p->lk);
      continue;
    }
    w.reg->busy++; /* keeps it mapped while we work on it */
    pthread_mutex_unlock(&p->lk);
    for (uint32_t u = w.u0; u < w.u1;) {
      int n = hm__prefetch_group(h, w.reg, u, w.u1 - u, 1, 0, 0, h->p->upages);
      if (n == -EBUSY) {
        /* Out of read slots: the rest becomes a plan, run as slots free. */
        _hm_sdm_pf_plan_t pl = {.stride = 1, .from = u, .count = w.u1 - u, .trigger = -1};
        pthread_mutex_lock(&p->lk);
        hm__plan_hold(w.reg, &pl);
        pthread_mutex_unlock(&p->lk);
        hm__prefetch_plan(h, w.reg, &pl);
        break;
      }
      if (n < 0) break;
      u += n > 0 ? (uint32_t)n : 1;
    }
    pthread_mutex_lock(&p->lk);
    w.reg->busy--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lk);
  }
}

/* Handles what the ring has ready (waiting up to wait_us for the first). */
static void hm__poll_once(hm__handler_t *h, int wait_us) {
  hm_pager_t *p = h->p;
  uint64_t tag;
  int res;
  int rc = _hm_prim_ring_next(h->ring, wait_us, &tag, &res);
  while (rc == 1) {
    if (tag == HM__TAG_UFFD) {
      hm__read_faults(h);
      (void)_hm_prim_ring_poll(h->ring, p->uffd, HM__TAG_UFFD);
    } else if (tag == HM__TAG_EVENT) {
      if (atomic_load(&p->stop)) return;
      uint64_t v;
      if (read(p->evfd, &v, sizeof v) < 0) { /* another handler took it */
      }
      hm__drain_willneed(h);
      (void)_hm_prim_ring_poll(h->ring, p->evfd, HM__TAG_EVENT);
    } else {
      hm__fill_done(h, (hm__op_t *)(uintptr_t)tag, res);
    }
    rc = _hm_prim_ring_next(h->ring, 0, &tag, &res);
  }
}

static void *hm__handler_main(void *arg) {
  hm__handler_t *h = arg;
  hm_pager_t *p = h->p;
  (void)_hm_prim_ring_poll(h->ring, p->uffd, HM__TAG_UFFD);
  (void)_hm_prim_ring_poll(h->ring, p->evfd, HM__TAG_EVENT);
  while (!atomic_load(&p->stop)) {
    int ready = h->nplans && !h->plan_blocked;
    hm__poll_once(h, ready ? 0 : h->ndef ? 500 : -1);
    if (h->ndef) hm__retry_deferred(h);
    /* One prefetch read, then look for faults and completions again. */
    if (h->nplans && !h->plan_blocked) {
      for (int k = 0; k < 8 && h->nplans && !h->plan_blocked; k++) (void)hm__plan_step(h);
      (void)_hm_prim_ring_submit(h->ring);
      hm__read_faults(h);
    }
  }
  while (h->nplans) {
    hm__release(p, h->plans[h->nplans - 1].reg);
    h->nplans--;
  }
  if (h->succ_reg) hm__release(p, h->succ_reg);
  h->succ_reg = NULL;
  return NULL;
}

/* ------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------ */

static const char *hm__storage_default(const hm_ctx_t *ctx) {
  const char *s = _hm_opt_str(ctx, HM_OPT_STORAGE);
  if (s && *s) return s;
  /* The option's documented fallback: TMPDIR, then /var/tmp. */
  s = getenv("TMPDIR");
  if (s && *s) return s;
  return "/var/tmp";
}

/* The default fetch unit (option fetch_unit, 256 KiB) was chosen with
 * tests/c/sdm_perf (budget 256 MiB, /var/tmp on ext4 over virtio, 2 vCPUs
 * shared with other jobs; raw O_DIRECT 2.87 GB/s sequential, 59k 4 KiB
 * IOPS at QD2), in one run, unit by unit:
 *   unit               64K   128K  256K  512K  1M    2M
 *   seq scan, 2x, GB/s 0.89  0.63  0.76  0.79  0.87  1.01
 *   rand 4K, 4x, % QD2 64    76    85    95    87    77
 * Sequential throughput is bounded by the memfd page allocation cost and
 * barely depends on the unit (prefetch reads span up to 1 MiB anyway);
 * random reads fill single pages, and units of 256 KiB..1 MiB keep the most
 * of them cached. 256 KiB is the smallest unit in that plateau, which keeps
 * eviction and write-back fine-grained for mixed workloads. */
void hm_pager_config_default(const hm_ctx_t *ctx, hm_pager_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->version = HM_PAGER_CONFIG_VERSION;
  cfg->dram_budget = ctx ? _hm_opt_u64(ctx, HM_OPT_FAST_BUDGET) : 0;
  cfg->backing_dir = ctx ? hm__storage_default(ctx) : "/var/tmp";
  cfg->fetch_unit = ctx ? _hm_opt_u64(ctx, HM_OPT_FETCH_UNIT) : 256 * 1024;
  cfg->io_depth = ctx ? (uint32_t)_hm_opt_u64(ctx, HM_OPT_IO_DEPTH) : 32;
  const char *pf = ctx ? _hm_opt_str(ctx, HM_OPT_PREFETCH) : "auto";
  cfg->prefetch = !strcmp(pf, "off")          ? HM_PREFETCH_OFF
                  : !strcmp(pf, "sequential") ? HM_PREFETCH_SEQUENTIAL
                                              : HM_PREFETCH_AUTO;
  cfg->handler_threads = 0;
  cfg->flags = 0;
}

static int hm__check_dir(hm_ctx_t *ctx, const char *dir) {
  struct stat st;
  if (!dir || !*dir) return _hm_error(ctx, -EINVAL, "no backing directory given for the pager");
  if (stat(dir, &st)) {
    int e = -errno;
    return _hm_error(ctx, e, "backing directory '%s': %s", dir, hm_strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return _hm_error(ctx, -ENOTDIR, "backing directory '%s' is not a directory", dir);
  int fd = _hm_prim_vm_backing_file(dir, 1);
  if (fd == -EINVAL)
    return _hm_error(ctx, -EINVAL,
                     "backing directory '%s' does not support O_DIRECT (tmpfs?): choose a "
                     "directory on a disk",
                     dir);
  if (fd < 0) {
    if (fd == -EROFS || fd == -EACCES || fd == -EPERM)
      return _hm_error(ctx, fd, "backing directory '%s' is not writable: %s", dir,
                       hm_strerror(fd));
    return _hm_error(ctx, fd, "cannot create a backing file in '%s': %s", dir, hm_strerror(fd));
  }
  close(fd);
  _hm_prim_fsinfo_t fs;
  if (_hm_prim_fs_info(dir, &fs) == 0 &&
      (fs.fs_magic == 0x01021994ull || fs.fs_magic == 0x858458f6ull))
    return _hm_error(ctx, -EINVAL,
                     "backing directory '%s' is on tmpfs/ramfs, which is memory, not a "
                     "storage tier: choose a directory on a disk",
                     dir);
  return 0;
}

static void hm__free_handlers(hm_pager_t *p) {
  for (unsigned i = 0; i < p->nh; i++) {
    hm__handler_t *h = &p->h[i];
    _hm_prim_ring_free(h->ring);
    _hm_prim_ring_free(h->wring);
    free(h->ops);
    free(h->def);
    free(h->vec);
    if (h->bounce) (void)_hm_prim_vm_unmap(h->bounce, h->bounce_bytes);
  }
  free(p->h);
  p->h = NULL;
}

static void hm__destroy(hm_pager_t *p) {
  if (p->h) {
    atomic_store(&p->stop, 1);
    uint64_t one = (uint64_t)p->nh;
    if (p->evfd >= 0 && write(p->evfd, &one, sizeof one) < 0) {
    }
    for (unsigned i = 0; i < p->nh; i++)
      if (p->h[i].started) pthread_join(p->h[i].th, NULL);
    hm__free_handlers(p);
  }
  if (p->slots) (void)_hm_prim_vm_unmap(p->slots, p->slots_bytes);
  if (p->zeros) (void)_hm_prim_vm_unmap(p->zeros, p->unit);
  if (p->held) (void)_hm_prim_vm_unmap(p->held, (size_t)HM__HELD * HM_SDM_PAGE);
  if (p->demq) (void)_hm_prim_vm_unmap(p->demq, HM__DEMQ * sizeof(int32_t));
  if (p->uffd >= 0) close(p->uffd);
  if (p->pagemap >= 0) close(p->pagemap);
  if (p->evfd >= 0) close(p->evfd);
  free(p->regs);
  pthread_mutex_destroy(&p->lk);
  pthread_cond_destroy(&p->cv);
  free(p);
}

int hm_pager_open(hm_ctx_t *ctx, const hm_pager_config_t *cfg_in, hm_pager_t **out) {
  if (!out) return _hm_error(ctx, -EINVAL, "hm_pager_open: out is NULL");
  *out = NULL;
  if (!cfg_in || cfg_in->size < offsetof(hm_pager_config_t, flags) ||
      cfg_in->version != HM_PAGER_CONFIG_VERSION)
    return _hm_error(ctx, -EINVAL, "hm_pager_open: config is missing or of another version");
  hm_pager_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  memcpy(&cfg, cfg_in, cfg_in->size < sizeof cfg ? cfg_in->size : sizeof cfg);
  cfg.size = sizeof cfg;
  uint64_t unit = cfg.fetch_unit;
  if (unit < 64 * 1024 || unit > 2 * 1024 * 1024 || (unit & (unit - 1)))
    return _hm_error(ctx, -EINVAL,
                     "fetch unit %llu is not a power of two between 64 KiB and 2 MiB",
                     (unsigned long long)unit);
  if (cfg.dram_budget < unit)
    return _hm_error(ctx, -EINVAL, "budget %llu is smaller than one fetch unit %llu",
                     (unsigned long long)cfg.dram_budget, (unsigned long long)unit);
  if (cfg.io_depth == 0) cfg.io_depth = 32;
  if (cfg.io_depth > 4096)
    return _hm_error(ctx, -EINVAL, "io_depth %u is above 4096", cfg.io_depth);
  if (cfg.prefetch > HM_PREFETCH_SEQUENTIAL)
    return _hm_error(ctx, -EINVAL, "unknown prefetch policy %d", (int)cfg.prefetch);
  int rc = _hm_sdm_check_budget(ctx, cfg.dram_budget);
  if (!rc) rc = hm__check_dir(ctx, cfg.backing_dir);
  if (rc) return rc;

  hm_pager_t *p = calloc(1, sizeof *p);
  if (!p) return _hm_error(ctx, -ENOMEM, "out of memory for the pager");
  p->ctx = ctx;
  p->pid = (int)getpid();
  p->uffd = p->pagemap = p->evfd = -1;
  pthread_mutex_init(&p->lk, NULL);
  pthread_cond_init(&p->cv, NULL);
  snprintf(p->dir, sizeof p->dir, "%s", cfg.backing_dir);
  cfg.backing_dir = p->dir;
  p->unit = unit;
  p->upages = (uint32_t)(unit / HM_SDM_PAGE);
  p->free_slot = -1;

  /* Fill mode. The default is anonymous memory + UFFDIO_COPY from bounce
   * buffers that O_DIRECT fills, although it copies each page once more:
   * measured with tests/c/sdm_perf (budget 256 MiB, unit 256 KiB, 2 shared
   * vCPUs, Linux 6.18), the sequential scan at 2x reached 68-79% of raw
   * O_DIRECT in anonymous mode against 32-45% with memfd + CONTINUE
   * (HM_PAGER_MEMFD), in the same runs. The memfd mode's cost is kernel CPU
   * time, not copies: every fill allocates and zeroes shmem pages and every
   * eviction frees them with a punch-hole (~0.7 ms of CPU per MiB against
   * ~0.4 ms for COPY + MADV_DONTNEED, single-threaded microbenchmark).
   * UFFDIO_MOVE (6.8+) would recycle pages with no copy (~0.15 ms/MiB), but
   * it maps the pages writable with no uffd-wp bit and no MODE_WP exists:
   * a write by another thread between the MOVE and the re-protection would
   * escape dirty tracking, so it is not used.
   * Features: asked for according to the flags, granted by the kernel. */
  uint64_t want = UFFD_FEATURE_THREAD_ID;
  if (!(cfg.flags & HM_PAGER_NO_WP)) want |= UFFD_FEATURE_PAGEFAULT_FLAG_WP;
  if ((cfg.flags & HM_PAGER_MEMFD) && !(cfg.flags & HM_PAGER_NO_MINOR)) {
    want |= UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_MISSING_SHMEM;
    if (!(cfg.flags & HM_PAGER_NO_WP)) want |= UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
    if (!(cfg.flags & (HM_PAGER_NO_WP | HM_PAGER_NO_WP_ASYNC))) want |= UFFD_FEATURE_WP_ASYNC;
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = _hm_prim_uffd_open(want, &p->features);
    if (fd == -EPERM || fd == -EACCES) {
      hm__destroy(p);
      return _hm_error(ctx, -EPERM,
                       "userfaultfd is not permitted for this process: run as root or set "
                       "sysctl vm.unprivileged_userfaultfd=1");
    }
    if (fd < 0) {
      hm__destroy(p);
      return _hm_error(ctx, fd == -ENOSYS ? -ENOSYS : fd, "userfaultfd is unavailable: %s",
                       hm_strerror(fd));
    }
    p->uffd = fd;
    int minor = (p->features & UFFD_FEATURE_MINOR_SHMEM) != 0;
    if (!minor && (p->features & UFFD_FEATURE_WP_ASYNC)) {
      /* Anonymous mode tracks dirt synchronously: ask again without it. */
      close(fd);
      p->uffd = -1;
      want &= ~(uint64_t)UFFD_FEATURE_WP_ASYNC;
      continue;
    }
    break;
  }
  p->memfd_mode = (p->features & UFFD_FEATURE_MINOR_SHMEM) != 0;
  if (p->memfd_mode) {
    if (p->features & UFFD_FEATURE_WP_ASYNC) {
      p->pagemap = _hm_prim_pagemap_open();
      p->dirty_mode = HM__DIRTY_ASYNC;
      if (p->pagemap < 0) {
        /* WP_ASYNC without PAGEMAP_SCAN cannot be: treat as no WP at all. */
        p->dirty_mode = HM__DIRTY_ALL;
      }
    } else if ((p->features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM) &&
               (p->features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
      p->dirty_mode = HM__DIRTY_SYNC;
    } else {
      p->dirty_mode = HM__DIRTY_ALL;
    }
  } else {
    if (!(p->features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
      hm__destroy(p);
      return _hm_error(ctx, -ENOSYS,
                       "the pager needs userfaultfd minor faults on shmem (Linux 5.14) or "
                       "write-protect on anonymous memory (Linux 5.7)");
    }
    p->dirty_mode = HM__DIRTY_SYNC;
  }

  p->nh = cfg.handler_threads;
  if (p->nh == 0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    p->nh = ncpu >= 8 ? 2 : 1;
  }
  if (p->nh > 16) p->nh = 16;
  cfg.handler_threads = p->nh;

  /* The pager's own memory is charged to the budget first. */
  uint64_t cache_units = cfg.dram_budget / unit;
  uint64_t nslots = cfg.dram_budget / (8 * 1024);
  if (nslots < 4 * cache_units) nslots = 4 * cache_units;
  if (nslots < 4) nslots = 4;
  if (nslots > (1u << 30)) nslots = 1u << 30;
  p->nslots = (uint32_t)nslots;
  p->slots_bytes = (nslots * (sizeof(_hm_sdm_slot_t) + sizeof(uint32_t)) + HM_SDM_PAGE - 1) &
                   ~(size_t)(HM_SDM_PAGE - 1);
  unsigned nops = cfg.io_depth;
  size_t bounce = 0;
  if (!p->memfd_mode) {
    /* One bounce buffer per read in flight: up to 8 MiB of them per
     * handler (the device's sequential depth), at most 1/4 of the budget,
     * at least 2. */
    uint64_t lim = (8u << 20) / unit;
    uint64_t blim = cfg.dram_budget / 4 / unit / p->nh;
    if (lim > blim) lim = blim;
    if (lim < 2) lim = 2;
    nops = nops > lim ? (unsigned)lim : nops;
    bounce = (size_t)nops * unit;
  }
  p->own = p->slots_bytes + (uint64_t)p->nh * bounce + (p->memfd_mode ? 0 : unit);
  if (cfg.dram_budget < p->own + unit) {
    uint64_t own = p->own;
    hm__destroy(p);
    return _hm_error(ctx, -EINVAL,
                     "budget %llu is smaller than one fetch unit %llu plus the pager's own "
                     "memory %llu",
                     (unsigned long long)cfg.dram_budget, (unsigned long long)unit,
                     (unsigned long long)own);
  }
  p->cap = (cfg.dram_budget - p->own) & ~(uint64_t)(HM_SDM_PAGE - 1);
  uint64_t cu = p->cap / unit;
  /* The window may cover io_depth reads of up to HM__GROUP_BYTES each (a
   * prefetch read spans several units), and a quarter of the cache. */
  uint64_t per_read = HM__GROUP_BYTES / unit > HM__GROUP ? HM__GROUP : HM__GROUP_BYTES / unit;
  if (per_read < 1 || !p->memfd_mode) per_read = 1;
  uint64_t mw = (uint64_t)cfg.io_depth * per_read;
  p->maxwin = (uint32_t)(cu / 4 < mw ? cu / 4 : mw);
  if (p->maxwin < 1) p->maxwin = 1;
  p->pf.share = (uint32_t)(cu / 2 > UINT32_MAX ? UINT32_MAX : cu / 2);
  p->cfg = cfg;

  void *mem = NULL;
  rc = _hm_prim_vm_map(-1, p->slots_bytes, &mem);
  if (rc) goto oom;
  p->slots = mem;
  p->act = (uint32_t *)(void *)(p->slots + p->nslots);
  p->free_slot = -1; /* every slot is fresh: hm__slot_take */
  p->slot_fresh = 0;
  if (p->cap >= (uint64_t)HM__DEMQ * sizeof(int32_t) * 8) {
    /* charged to the budget; a cache too small for it (under 32 KiB) does without */
    rc = _hm_prim_vm_map(-1, HM__DEMQ * sizeof(int32_t), &mem);
    if (rc) goto oom;
    p->demq = mem;
    p->own += HM__DEMQ * sizeof(int32_t);
    p->cap -= HM__DEMQ * sizeof(int32_t);
  }
  if (!p->memfd_mode) {
    rc = _hm_prim_vm_map(-1, unit, &mem);
    if (rc) goto oom;
    p->zeros = mem;
    /* Readahead trigger pages: charged to the budget, and only where they
     * are at most 1/32 of it (a tiny cache does without). */
    if ((uint64_t)HM__HELD * HM_SDM_PAGE * 32 <= cfg.dram_budget &&
        p->cap >= (uint64_t)HM__HELD * HM_SDM_PAGE + unit) {
      rc = _hm_prim_vm_map(-1, (size_t)HM__HELD * HM_SDM_PAGE, &mem);
      if (rc) goto oom;
      p->held = mem;
      p->own += (uint64_t)HM__HELD * HM_SDM_PAGE;
      p->cap -= (uint64_t)HM__HELD * HM_SDM_PAGE;
    }
  }
  p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->evfd < 0) {
    rc = -errno;
    goto oom;
  }
  p->h = calloc(p->nh, sizeof *p->h);
  if (!p->h) {
    rc = -ENOMEM;
    goto oom;
  }
  for (unsigned i = 0; i < p->nh; i++) {
    hm__handler_t *h = &p->h[i];
    h->p = p;
    h->nops = nops;
    h->ops = calloc(nops, sizeof *h->ops);
    h->vec = calloc(HM_SDM_MAX_UNIT_PAGES, sizeof *h->vec);
    if (!h->ops || !h->vec) {
      rc = -ENOMEM;
      goto oom;
    }
    rc = _hm_prim_ring_new(nops + 4, &h->ring);
    if (!rc) rc = _hm_prim_ring_new(cfg.io_depth, &h->wring);
    if (rc) {
      hm__destroy(p);
      return _hm_error(ctx, rc, "io_uring setup failed: %s", hm_strerror(rc));
    }
    if (bounce) {
      rc = _hm_prim_vm_map(-1, bounce, &mem);
      if (rc) goto oom;
      h->bounce = mem;
      h->bounce_bytes = bounce;
    }
    for (unsigned k = 0; k < nops; k++) {
      h->ops[k].buf = h->bounce ? h->bounce + (size_t)k * unit : NULL;
      hm__op_put(h, &h->ops[k]);
    }
  }
  /* Handler threads take no signals: a signal must never interrupt the
   * resolution of another thread's fault. */
  unsigned char oldset[256];
  (void)_hm_prim_vm_block_signals(oldset);
  for (unsigned i = 0; i < p->nh; i++) {
    if (pthread_create(&p->h[i].th, NULL, hm__handler_main, &p->h[i]) == 0)
      p->h[i].started = 1;
    else
      rc = -EAGAIN;
  }
  (void)_hm_prim_vm_restore_signals(oldset);
  if (rc) {
    hm__destroy(p);
    return _hm_error(ctx, rc, "cannot start the pager's handler threads");
  }
  *out = p;
  return 0;
oom:
  hm__destroy(p);
  return _hm_error(ctx, rc, "pager setup failed: %s", hm_strerror(rc));
}

static void hm__region_free(hm_pager_t *p, _hm_sdm_region_t *r) {
  if (r->base) {
    (void)_hm_prim_uffd_unregister(p->uffd, r->base, r->len);
    (void)_hm_prim_vm_unmap(r->base, r->len);
  }
  if (r->alias) (void)_hm_prim_vm_unmap(r->alias, r->len);
  if (r->memfd >= 0) close(r->memfd);
  if (r->file >= 0) close(r->file);
  if (r->units) (void)_hm_prim_vm_unmap(r->units, r->units_bytes);
  free(r);
}

int hm_pager_map(hm_pager_t *p, size_t length, void **addr) {
  if (!p || !addr || length == 0) return -EINVAL;
  *addr = NULL;
  hm_ctx_t *ctx = p->ctx;
  if ((int)getpid() != p->pid)
    /* The userfaultfd and the handler threads belong to the parent. */
    return _hm_error(ctx, -ECHILD,
                     "this pager belongs to process %d: a forked child must open its own",
                     p->pid);
  size_t len = (length + p->unit - 1) & ~(size_t)(p->unit - 1);
  if (len < length || len / p->unit > UINT32_MAX)
    return _hm_error(ctx, -EINVAL, "region of %zu bytes is too large", length);
  _hm_sdm_region_t *r = calloc(1, sizeof *r);
  if (!r) return _hm_error(ctx, -ENOMEM, "out of memory for a pager region");
  r->memfd = r->file = -1;
  r->len = len;
  r->nunits = (uint32_t)(len / p->unit);
  r->pf_limit = p->maxwin;
  int rc;
  r->file = _hm_prim_vm_backing_file(p->dir, 1);
  if (r->file < 0) {
    rc = r->file;
    r->file = -1;
    hm__region_free(p, r);
    return _hm_error(ctx, rc, "cannot create a backing file in '%s': %s", p->dir,
                     hm_strerror(rc));
  }
  rc = _hm_prim_vm_fallocate(r->file, 0, 0, len);
  if (rc) {
    hm__region_free(p, r);
    if (rc == -ENOSPC)
      return _hm_error(ctx, rc,
                       "no space in '%s' for a %zu-byte pager region (the backing store is "
                       "reserved when a region is mapped)",
                       p->dir, len);
    return _hm_error(ctx, rc, "cannot reserve %zu bytes in '%s': %s", len, p->dir,
                     hm_strerror(rc));
  }
  r->units_bytes = ((size_t)r->nunits * sizeof(_hm_sdm_unit_t) + HM_SDM_PAGE - 1) &
                   ~(size_t)(HM_SDM_PAGE - 1);
  void *mem = NULL;
  rc = _hm_prim_vm_map(-1, r->units_bytes, &mem);
  if (rc) goto fail;
  r->units = mem;
  for (uint32_t u = 0; u < r->nunits; u++) r->units[u].slot = -1;
  if (p->memfd_mode) {
    rc = _hm_prim_vm_memfd("hetmem-sdm", len);
    if (rc < 0) goto fail;
    r->memfd = rc;
    rc = _hm_prim_vm_map(r->memfd, len, &mem);
    if (rc) goto fail;
    r->base = mem;
    rc = _hm_prim_vm_map(r->memfd, len, &mem);
    if (rc) goto fail;
    r->alias = mem;
    (void)_hm_prim_vm_madvise(r->alias, len, MADV_DONTFORK);
  } else {
    rc = _hm_prim_vm_map(-1, len, &mem);
    if (rc) goto fail;
    r->base = mem;
  }
  /* The child of a fork never sees a region (see hetmem.h). */
  rc = _hm_prim_vm_madvise(r->base, len, MADV_DONTFORK);
  if (rc) goto fail;
  uint64_t mode = UFFDIO_REGISTER_MODE_MISSING;
  if (p->memfd_mode) mode |= UFFDIO_REGISTER_MODE_MINOR;
  if (p->dirty_mode != HM__DIRTY_ALL) mode |= UFFDIO_REGISTER_MODE_WP;
  rc = _hm_prim_uffd_register(p->uffd, r->base, len, mode, NULL);
  if (rc) {
    (void)_hm_prim_vm_unmap(r->base, len);
    r->base = NULL;
    goto fail;
  }
  pthread_mutex_lock(&p->lk);
  if (p->own + r->units_bytes + p->unit > p->cfg.dram_budget) {
    pthread_mutex_unlock(&p->lk);
    hm__region_free(p, r);
    return _hm_error(ctx, -ENOMEM,
                     "the unit table of a %zu-byte region (%zu bytes) does not fit in the "
                     "budget %llu; use a larger fetch unit or budget",
                     len, r->units_bytes, (unsigned long long)p->cfg.dram_budget);
  }
  if (p->nregs == p->capregs) {
    /* realloc under the lock could re-enter an interposed malloc: grow
     * outside it and retry. */
    size_t cap = p->capregs ? p->capregs * 2 : 16;
    pthread_mutex_unlock(&p->lk);
    _hm_sdm_region_t **n = malloc(cap * sizeof *n);
    if (!n) {
      hm__region_free(p, r);
      return _hm_error(ctx, -ENOMEM, "out of memory for the region table");
    }
    pthread_mutex_lock(&p->lk);
    if (cap > p->capregs) {
      if (p->nregs) memcpy(n, p->regs, p->nregs * sizeof *n);
      _hm_sdm_region_t **old = p->regs;
      p->regs = n;
      p->capregs = cap;
      n = old;
    }
    pthread_mutex_unlock(&p->lk);
    free(n);
    pthread_mutex_lock(&p->lk);
    if (p->nregs == p->capregs) { /* lost a race with another map; rare */
      pthread_mutex_unlock(&p->lk);
      hm__region_free(p, r);
      return _hm_error(ctx, -EAGAIN, "region table busy, try again");
    }
  }
  size_t i = p->nregs;
  while (i > 0 && p->regs[i - 1]->base > r->base) {
    p->regs[i] = p->regs[i - 1];
    i--;
  }
  p->regs[i] = r;
  p->nregs++;
  /* The unit table is charged to the budget from now on. Units filled
   * before stay until the next fill evicts: a region mapped while the cache
   * is full overshoots the budget by its table (a page per 512 units: per
   * 32 MiB at 64 KiB units) for that long. */
  p->own += r->units_bytes;
  p->cap = (p->cfg.dram_budget - p->own) & ~(uint64_t)(HM_SDM_PAGE - 1);
  pthread_mutex_unlock(&p->lk);
  *addr = r->base;
  return 0;
fail:
  hm__region_free(p, r);
  return _hm_error(ctx, rc, "cannot map a %zu-byte pager region: %s", len, hm_strerror(rc));
}

int hm_pager_unmap(hm_pager_t *p, void *addr, size_t length) {
  if (!p || !addr) return -EINVAL;
  pthread_mutex_lock(&p->lk);
  _hm_sdm_region_t *r = NULL;
  size_t idx = 0;
  for (size_t i = 0; i < p->nregs; i++)
    if (p->regs[i]->base == addr) {
      r = p->regs[i];
      idx = i;
      break;
    }
  size_t len = (length + p->unit - 1) & ~(size_t)(p->unit - 1);
  if (!r || (length && len != r->len)) {
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EINVAL, "hm_pager_unmap: %p (%zu bytes) is not a pager region",
                     addr, length);
  }
  r->dead = 1;
  memmove(&p->regs[idx], &p->regs[idx + 1], (p->nregs - idx - 1) * sizeof *p->regs);
  p->nregs--;
  for (unsigned i = 0; i < p->nwq;)
    if (p->wq[i].reg == r)
      p->wq[i] = p->wq[--p->nwq];
    else
      i++;
  while (r->busy) pthread_cond_wait(&p->cv, &p->lk);
  for (uint32_t u = 0; u < r->nunits; u++) {
    int32_t s = r->units[u].slot;
    if (s < 0) continue;
    _hm_sdm_slot_t *S = &p->slots[s];
    uint64_t bytes = (uint64_t)S->nfilled * HM_SDM_PAGE;
    p->used -= bytes;
    p->resident -= bytes;
    if (S->prefetched) p->pf_untouched -= p->unit;
    hm__slot_put(p, s);
    r->units[u].slot = -1;
  }
  _hm_sdm_pf_forget(&p->pf, r);
  p->own -= r->units_bytes;
  p->cap = (p->cfg.dram_budget - p->own) & ~(uint64_t)(HM_SDM_PAGE - 1);
  pthread_mutex_unlock(&p->lk);
  hm__region_free(p, r);
  return 0;
}

int hm_pager_close(hm_pager_t *p) {
  if (!p) return 0;
  for (;;) {
    pthread_mutex_lock(&p->lk);
    void *a = p->nregs ? p->regs[0]->base : NULL;
    pthread_mutex_unlock(&p->lk);
    if (!a) break;
    if (hm_pager_unmap(p, a, 0)) break;
  }
  hm__destroy(p);
  return 0;
}

/* Region and unit range of [addr, addr+length) (pager lock held). */
static _hm_sdm_region_t *hm__range(hm_pager_t *p, void *addr, size_t length, uint64_t *off) {
  _hm_sdm_region_t *r = hm__find(p, (uint64_t)(uintptr_t)addr);
  if (!r) return NULL;
  *off = (uint64_t)((char *)addr - r->base);
  if (length > r->len - *off) return NULL;
  return r;
}

/* Discards whole units [u0, u1) of r (DONTNEED). */
static void hm__discard(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1) {
  for (uint32_t u = u0; u < u1; u++) {
    pthread_mutex_lock(&p->lk);
    _hm_sdm_unit_t *U = &r->units[u];
    while (U->state == HM_U_FILLING || U->state == HM_U_BUSY ||
           (U->slot >= 0 && p->slots[U->slot].pin))
      pthread_cond_wait(&p->cv, &p->lk);
    U->flags &= (uint8_t)~HM_UF_ONDISK;
    if (U->state != HM_U_RES) {
      pthread_mutex_unlock(&p->lk);
      continue;
    }
    U->state = HM_U_BUSY;
    r->busy++;
    pthread_mutex_unlock(&p->lk);
    char *ub = hm__ubase(r, p, u);
    if (p->memfd_mode)
      (void)_hm_prim_vm_punch(r->memfd, (uint64_t)u * p->unit, p->unit);
    else
      (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
    pthread_mutex_lock(&p->lk);
    _hm_sdm_slot_t *S = &p->slots[U->slot];
    uint64_t bytes = (uint64_t)S->nfilled * HM_SDM_PAGE;
    p->used -= bytes;
    p->resident -= bytes;
    if (S->prefetched) p->pf_untouched -= p->unit;
    hm__slot_put(p, U->slot);
    U->slot = -1;
    U->state = HM_U_NONE;
    r->busy--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lk);
    hm__wake(p, ub, p->unit);
  }
}

int hm_pager_advise(hm_pager_t *p, void *addr, size_t length, hm_advice_t advice) {
  if (!p || !addr) return -EINVAL;
  if (length == 0) return 0;
  pthread_mutex_lock(&p->lk);
  uint64_t off;
  _hm_sdm_region_t *r = hm__range(p, addr, length, &off);
  if (!r) {
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EINVAL, "hm_pager_advise: range is not inside one pager region");
  }
  uint32_t ufirst = (uint32_t)(off / p->unit);
  uint32_t ulast = (uint32_t)((off + length - 1) / p->unit);
  int rc = 0;
  switch (advice) {
  case HM_ADVICE_NORMAL:
  case HM_ADVICE_SEQUENTIAL:
  case HM_ADVICE_RANDOM:
    for (uint32_t u = ufirst; u <= ulast; u++) {
      uint8_t f = r->units[u].flags & (uint8_t)~(HM_UF_RANDOM | HM_UF_SEQ);
      if (advice == HM_ADVICE_SEQUENTIAL) f |= HM_UF_SEQ;
      if (advice == HM_ADVICE_RANDOM) f |= HM_UF_RANDOM;
      r->units[u].flags = f;
    }
    pthread_mutex_unlock(&p->lk);
    break;
  case HM_ADVICE_WILLNEED:
    if (p->nwq < HM__WQ) p->wq[p->nwq++] = (hm__wq_t){r, ufirst, ulast + 1};
    pthread_mutex_unlock(&p->lk);
    {
      uint64_t one = 1;
      if (write(p->evfd, &one, sizeof one) < 0) rc = -errno;
    }
    break;
  case HM_ADVICE_DONTNEED: {
    /* Whole units are dropped; partial ones at the edges are zeroed. */
    uint64_t a = off, b = off + length;
    uint64_t fa = (a + p->unit - 1) / p->unit, fb = b / p->unit;
    r->busy++;
    pthread_mutex_unlock(&p->lk);
    if (fa < fb) {
      hm__discard(p, r, (uint32_t)fa, (uint32_t)fb);
      if (a < fa * p->unit) memset(r->base + a, 0, fa * p->unit - a);
      if (fb * p->unit < b) memset(r->base + fb * p->unit, 0, b - fb * p->unit);
    } else {
      memset(r->base + a, 0, length);
    }
    pthread_mutex_lock(&p->lk);
    r->busy--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lk);
    break;
  }
  default:
    pthread_mutex_unlock(&p->lk);
    rc = _hm_error(p->ctx, -EINVAL, "hm_pager_advise: unknown advice %d", (int)advice);
  }
  return rc;
}

/* Writes back the dirty pages of one resident unit, keeping it resident. */
static int hm__flush_unit(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                          _hm_prim_page_region_t *vec) {
  pthread_mutex_lock(&p->lk);
  _hm_sdm_unit_t *U = &r->units[u];
  while (U->state == HM_U_FILLING || U->state == HM_U_BUSY ||
         (U->slot >= 0 && p->slots[U->slot].pin))
    pthread_cond_wait(&p->cv, &p->lk);
  if (U->state != HM_U_RES) {
    pthread_mutex_unlock(&p->lk);
    return 0;
  }
  _hm_sdm_slot_t *S = &p->slots[U->slot];
  U->state = HM_U_BUSY;
  r->busy++;
  uint64_t filled[HM_SDM_BITMAP_WORDS], D[HM_SDM_BITMAP_WORDS];
  memcpy(filled, S->filled, sizeof filled);
  int mapped = S->mapped, dirty = S->dirty;
  S->dirty = 0;
  pthread_mutex_unlock(&p->lk);
  char *ub = hm__ubase(r, p, u);
  memset(D, 0, sizeof D);
  if (p->dirty_mode == HM__DIRTY_ASYNC) {
    if (mapped) {
      /* Re-arms protection atomically while reporting what was written. */
      ssize_t n = _hm_prim_pagemap_scan(p->pagemap, ub, p->unit, HM__PM_SCAN_WP_MATCHING,
                                        HM__PAGE_IS_WRITTEN, 0, HM__PAGE_IS_WRITTEN, vec,
                                        p->upages);
      if (n < 0) memcpy(D, filled, sizeof D);
      for (ssize_t k = 0; k < n; k++)
        for (uint64_t x = vec[k].start; x < vec[k].end; x += HM_SDM_PAGE)
          hm__setbit(D, (unsigned)((x - (uint64_t)(uintptr_t)ub) / HM_SDM_PAGE));
      for (unsigned w = 0; w < HM_SDM_BITMAP_WORDS; w++) D[w] &= filled[w];
    }
  } else if (p->dirty_mode == HM__DIRTY_SYNC) {
    if (dirty) {
      (void)_hm_prim_uffd_wp(p->uffd, ub, p->unit, 1);
      memcpy(D, filled, sizeof D);
    }
  } else {
    memcpy(D, filled, sizeof D);
  }
  char *src0 = p->memfd_mode ? r->alias + (uint64_t)u * p->unit : ub;
  unsigned i = 0, n;
  int rc = 0, wrote = 0;
  while ((n = hm__run(D, p->upages, &i)) > 0) {
    uint64_t foff = (uint64_t)u * p->unit + (uint64_t)i * HM_SDM_PAGE;
    ssize_t w = _hm_prim_vm_pio(r->file, 1, src0 + (size_t)i * HM_SDM_PAGE, n * HM_SDM_PAGE, foff);
    if (w < 0) rc = (int)w;
    else HM__ADD(p, c_bytes_written, (uint64_t)w);
    wrote = 1;
    i += n;
  }
  pthread_mutex_lock(&p->lk);
  if (wrote && !rc) U->flags |= HM_UF_ONDISK;
  if (rc) S->dirty = 1;
  U->state = HM_U_RES;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  if (wrote && !rc) HM__ADD(p, c_writebacks, 1);
  hm__wake(p, ub, p->unit);
  return rc;
}

/* Writes back units u0..u1 of r, which the caller holds busy, then lets
 * it go; the first error stays in *rc. */
static void hm__flush_range(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1,
                            _hm_prim_page_region_t *vec, int *rc) {
  for (uint32_t u = u0; u <= u1; u++) {
    int e = hm__flush_unit(p, r, u, vec);
    if (e && !*rc) *rc = e;
  }
  hm__release(p, r);
}

int hm_pager_flush(hm_pager_t *p, void *addr, size_t length) {
  if (!p) return -EINVAL;
  _hm_prim_page_region_t *vec = calloc(HM_SDM_MAX_UNIT_PAGES, sizeof *vec);
  if (!vec) return -ENOMEM;
  int rc = 0;
  if (addr) {
    pthread_mutex_lock(&p->lk);
    uint64_t off;
    _hm_sdm_region_t *r = hm__range(p, addr, length ? length : 1, &off);
    if (r) r->busy++;
    pthread_mutex_unlock(&p->lk);
    if (!r) {
      free(vec);
      return _hm_error(p->ctx, -EINVAL, "hm_pager_flush: range is not inside one pager region");
    }
    uint32_t u1 = (uint32_t)((off + (length ? length : 1) - 1) / p->unit);
    hm__flush_range(p, r, (uint32_t)(off / p->unit), u1, vec, &rc);
  } else {
    for (size_t i = 0;; i++) {
      pthread_mutex_lock(&p->lk);
      _hm_sdm_region_t *r = i < p->nregs ? p->regs[i] : NULL;
      if (r) r->busy++;
      pthread_mutex_unlock(&p->lk);
      if (!r) break;
      hm__flush_range(p, r, 0, r->nunits - 1, vec, &rc);
    }
  }
  free(vec);
  if (rc) return _hm_error(p->ctx, rc, "hm_pager_flush: write-back failed: %s", hm_strerror(rc));
  return 0;
}

int hm_pager_stats(hm_pager_t *p, hm_pager_stats_t *out) {
  if (!p || !out || out->size < offsetof(hm_pager_stats_t, fault_ns) + sizeof(uint64_t))
    return -EINVAL;
  hm_pager_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
  s.version = HM_PAGER_STATS_VERSION;
  s.faults = HM__GET(p, c_faults);
  s.fetches = HM__GET(p, c_fetches);
  s.prefetch_issued = HM__GET(p, c_pf_issued);
  s.prefetch_used = HM__GET(p, c_pf_used);
  s.prefetch_wasted = HM__GET(p, c_pf_wasted);
  s.evictions = HM__GET(p, c_evictions);
  s.writebacks = HM__GET(p, c_writebacks);
  s.bytes_read = HM__GET(p, c_bytes_read);
  s.bytes_written = HM__GET(p, c_bytes_written);
  s.fault_ns = HM__GET(p, c_fault_ns);
  s.zero_fills = HM__GET(p, c_zero_fills);
  s.minor_hits = HM__GET(p, c_minor_hits);
  s.wp_faults = HM__GET(p, c_wp_faults);
  s.io_errors = HM__GET(p, c_io_errors);
  s.readahead_triggers = HM__GET(p, c_ra_triggers);
  s.successor_prefetches = HM__GET(p, c_pf_succ);
  pthread_mutex_lock(&p->lk);
  s.resident_bytes = p->resident;
  s.peak_resident_bytes = p->peak;
  s.own_bytes = p->own;
  s.budget_bytes = p->cfg.dram_budget;
  pthread_mutex_unlock(&p->lk);
  memcpy(out, &s, s.size);
  return 0;
}

int hm_pager_stats_json(hm_pager_t *p, char **out) {
  if (!p || !out) return -EINVAL;
  hm_pager_stats_t s;
  s.size = sizeof s;
  int rc = hm_pager_stats(p, &s);
  if (rc) return rc;
  static const char *const pf_names[] = {"auto", "off", "sequential"};
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_printf(&sb, "{\"schema_version\": 1, \"config\": {\"dram_budget\": %llu, \"backing_dir\": ",
                (unsigned long long)p->cfg.dram_budget);
  _hm_sb_json_str(&sb, p->dir);
  _hm_sb_printf(&sb,
                ", \"fetch_unit\": %llu, \"prefetch\": \"%s\", \"io_depth\": %u, "
                "\"handler_threads\": %u, \"flags\": %u}, ",
                (unsigned long long)p->unit, pf_names[p->cfg.prefetch], p->cfg.io_depth,
                p->cfg.handler_threads, p->cfg.flags);
  _hm_sb_printf(&sb,
                "\"features\": {\"fill\": \"%s\", \"dirty_tracking\": \"%s\", "
                "\"uffd_features\": %llu}, ",
                p->memfd_mode ? "memfd_minor_continue" : "anon_copy",
                hm__dirty_names[p->dirty_mode], (unsigned long long)p->features);
  _hm_sb_printf(
      &sb,
      "\"counters\": {\"faults\": %llu, \"fetches\": %llu, \"prefetch_issued\": %llu, "
      "\"prefetch_used\": %llu, \"prefetch_wasted\": %llu, \"evictions\": %llu, "
      "\"writebacks\": %llu, \"bytes_read\": %llu, \"bytes_written\": %llu, "
      "\"resident_bytes\": %llu, \"peak_resident_bytes\": %llu, \"fault_ns\": %llu, "
      "\"zero_fills\": %llu, \"minor_hits\": %llu, \"wp_faults\": %llu, \"io_errors\": %llu, "
      "\"own_bytes\": %llu, \"readahead_triggers\": %llu, \"successor_prefetches\": %llu}}",
      (unsigned long long)s.faults, (unsigned long long)s.fetches,
      (unsigned long long)s.prefetch_issued, (unsigned long long)s.prefetch_used,
      (unsigned long long)s.prefetch_wasted, (unsigned long long)s.evictions,
      (unsigned long long)s.writebacks, (unsigned long long)s.bytes_read,
      (unsigned long long)s.bytes_written, (unsigned long long)s.resident_bytes,
      (unsigned long long)s.peak_resident_bytes, (unsigned long long)s.fault_ns,
      (unsigned long long)s.zero_fills, (unsigned long long)s.minor_hits,
      (unsigned long long)s.wp_faults, (unsigned long long)s.io_errors,
      (unsigned long long)s.own_bytes, (unsigned long long)s.readahead_triggers,
      (unsigned long long)s.successor_prefetches);
  return _hm_sb_take(&sb, out);
}
