/* The allocation-site profiler of the interposer (`hetmem profile`).
 *
 * What it records, and how without a lock on any hook:
 *  - sites: a global open-addressing table keyed by the hash of the raw
 *    return-address chain, slots claimed with CAS, counters updated with
 *    relaxed atomics (only allocations at or above the threshold get here);
 *  - live bytes over time: every large allocation and release appends an
 *    event (time, site, +/-bytes) to a buffer of the calling thread; at exit
 *    the events are sorted per site and replayed into a step function whose
 *    points are bucket maxima (at most HM__POINTS buckets over the run);
 *  - small allocations: counted per caller return address in a table of the
 *    calling thread (no atomics read-modify-write: one writer), attributed at
 *    exit to the site whose innermost frame is that return address;
 *  - accesses: the portable sampler below.
 *
 * The portable sampler. This machine has no precise-address PMU sampling
 * and DAMON without virtual-address monitoring, so accesses are observed
 * with page protection: every period (HETMEM_SAMPLE_PERIOD, default 10 ms)
 * a sampler thread makes a run of up to HM__PAGES_PER_BLOCK consecutive
 * whole pages of each live large block PROT_NONE, from a random page and
 * wrapping to the block's start, so that every page is in with the same
 * chance and the weights stay unbiased. One call per block (two when the
 * run wraps), not one per page: taking access away costs an IPI to every
 * CPU running the program. The first access of any thread faults, the
 * SIGSEGV handler restores the page, and the access is credited to the
 * block's site (a store when the fault's error code says write, else a
 * load), weighted by block pages / sampled pages. Pages not touched by the
 * next period are restored by the sampler. So one sample says "this page
 * was touched in this period"; the profile's period (the accesses one
 * sample stands for) is page size / 64 (each touched page counts as one
 * pass over its cache lines). Costs: one mprotect and TLB shootdown per
 * block and period, one fault + signal + mprotect (no shootdown: access is
 * given, not taken) per touched armed page (measured at start, reported in
 * the profile as `overhead`). Caveats (documented): a system call that
 * writes into an armed page (read(2) into a large buffer) fails with
 * EFAULT instead of faulting; a program that installs its own SIGSEGV
 * handler later takes over the faults (the sampler notices and stops
 * arming). --sampler none disables it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "internal.h"
#include "preload.h"
#include "sampler.h"
#include "prim/prim.h"

#define HM__SITES 16384u         /* site slots (slot 0 unused) */
#define HM__CHUNK 65536u         /* events per buffer chunk */
#define HM__SMALL 4096u          /* caller slots per thread */
#define HM__POINTS 512           /* most points of a live series */
#define HM__ARMED 2048u          /* armed pages per table (two tables alternate) */
#define HM__PAGES_PER_BLOCK 8u
#define HM__FIX 16u              /* fixed-point scale of sample weights */

typedef struct hm__site_s {
  _Atomic uint64_t hash; /* 0 empty, 1 being filled */
  int n;
  uintptr_t a[HM_PL_MAX_DEPTH];
  /* Each frame's module, resolved when the site is first seen: a module
   * dlopen'ed and dlclose'd before the profile is written is still named
   * (the module table keeps its entry). -1: no module holds the frame. */
  int16_t mod[HM_PL_MAX_DEPTH];
  _Atomic uint64_t allocs, bytes, max_bytes, frees, lt_sum, lt_min, lt_max;
  _Atomic uint64_t loads, stores; /* x HM__FIX */
} hm__site_t;

typedef struct hm__ev_s {
  uint64_t t;
  uint32_t site;
  uint32_t pad;
  int64_t delta;
} hm__ev_t;

typedef struct hm__chunk_s {
  struct hm__chunk_s *_Atomic next; /* linked by the owner, read by the writer */
  _Atomic size_t n;
  hm__ev_t ev[HM__CHUNK];
} hm__chunk_t;

typedef struct hm__small_s {
  _Atomic uintptr_t ra;
  _Atomic uint64_t count, bytes;
} hm__small_t;

typedef struct hm__tbuf_s {
  struct hm__tbuf_s *next; /* every thread's buffer, pushed once */
  hm__chunk_t *_Atomic head; /* set by the owner, read by the writer */
  hm__chunk_t *cur;
  _Atomic uint64_t other_count, other_bytes; /* small table full */
  hm__small_t small[HM__SMALL];
} hm__tbuf_t;

typedef struct hm__armed_s {
  _Atomic uintptr_t page; /* 0: free */
  _Atomic int state;      /* HM__A_* */
  uint32_t site;
  uint32_t weight;        /* x HM__FIX */
} hm__armed_t;

/* One block's pages armed in a round: consecutive, given in one call. */
typedef struct hm__run_s {
  uintptr_t page;
  unsigned n;
  hm__armed_t *e[HM__PAGES_PER_BLOCK];
} hm__run_t;

typedef struct hm__runs_s {
  size_t n;
  hm__run_t run[HM__ARMED];
} hm__runs_t;

enum { HM__A_FREE = 0, HM__A_ARMED = 1, HM__A_CONSUMED = 2, HM__A_IDLE = 3 };

static struct {
  _hm_pl_prof_cfg_t cfg;
  char path_template[HM_PATH_MAX];
  char sampler_name[32];
  char probed[4096];
  char fsroot[HM_PATH_MAX];
  int precise; /* a sampler of sampler.c runs (pebs, ibs, spe, damon) */
  uint64_t t0;
  double start_unix;
  hm__site_t *sites;
  _Atomic uint32_t nsites_used;
  _Atomic uint64_t unsited_count, unsited_bytes;
  hm__tbuf_t *_Atomic threads;
  _Atomic int live_threads, max_threads;
  /* sampler */
  int sampling;
  size_t page;
  hm__armed_t *armed[2];
  hm__runs_t *runs; /* [2], one per table; the sampler thread's */
  _Atomic int stop, stopped;
  pthread_t thread;
  _Atomic uint64_t faults, armings, periods, sampler_cpu_ns;
  uint64_t fault_cost_ns;
  /* The application's SIGSEGV disposition: what was there when the
   * sampler's handler went in, then what the application set since (the
   * sigaction and signal hooks keep it here rather than replace ours).
   * A seqlock: writers serialize on app_lk, the handler copies and
   * retries while app_seq is odd or moved. */
  struct sigaction app_segv;
  _Atomic unsigned app_seq;
  pthread_mutex_t app_lk;
  _Atomic int handler_lost;
} hm__pf;

static __thread hm__tbuf_t *hm__tb __attribute__((tls_model("initial-exec")));

static uint64_t hm__mono(void) { return _hm_prim_now_ns(); }

uint64_t _hm_pl_prof_now(void) { return hm__mono() - hm__pf.t0; }

static hm__tbuf_t *hm__tbuf(void) {
  hm__tbuf_t *tb = hm__tb;
  if (__builtin_expect(tb != NULL, 1)) return tb;
  tb = _hm_prim_map_raw(sizeof *tb);
  if (!tb) return NULL;
  hm__tbuf_t *head = atomic_load(&hm__pf.threads);
  do tb->next = head;
  while (!atomic_compare_exchange_weak(&hm__pf.threads, &head, tb));
  hm__tb = tb;
  return tb;
}

static void hm__event(uint32_t site, int64_t delta) {
  hm__tbuf_t *tb = hm__tbuf();
  if (!tb) return;
  hm__chunk_t *c = tb->cur;
  if (!c || atomic_load_explicit(&c->n, memory_order_relaxed) == HM__CHUNK) {
    hm__chunk_t *nc = _hm_prim_map_raw(sizeof *nc);
    if (!nc) return;
    if (c) atomic_store_explicit(&c->next, nc, memory_order_release);
    else atomic_store_explicit(&tb->head, nc, memory_order_release);
    tb->cur = c = nc;
  }
  size_t i = atomic_load_explicit(&c->n, memory_order_relaxed);
  c->ev[i] = (hm__ev_t){_hm_pl_prof_now(), site, 0, delta};
  atomic_store_explicit(&c->n, i + 1, memory_order_release);
}

static void hm__max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

static void hm__min(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v < cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

uint32_t _hm_pl_prof_site(const _hm_pl_stack_t *st) {
  if (!hm__pf.sites || st->n == 0) return 0;
  uint32_t h = (uint32_t)(st->hash ^ (st->hash >> 32));
  for (uint32_t i = 0; i < HM__SITES; i++) {
    uint32_t slot = (h + i) & (HM__SITES - 1);
    if (slot == 0) continue;
    hm__site_t *s = &hm__pf.sites[slot];
    uint64_t cur = atomic_load_explicit(&s->hash, memory_order_acquire);
    if (cur == 0) {
      if (atomic_compare_exchange_strong(&s->hash, &cur, 1)) {
        s->n = st->n;
        memcpy(s->a, st->a, (size_t)st->n * sizeof(uintptr_t));
        for (int f = 0; f < st->n; f++) { /* once per site: may rescan the modules */
          uint64_t off;
          s->mod[f] = (int16_t)_hm_pl_frame(st->a[f], &off);
        }
        atomic_store(&s->lt_min, UINT64_MAX);
        atomic_store_explicit(&s->hash, st->hash, memory_order_release);
        atomic_fetch_add(&hm__pf.nsites_used, 1);
        return slot;
      }
    }
    while (cur == 1) cur = atomic_load_explicit(&s->hash, memory_order_acquire); /* being filled */
    if (cur == st->hash && s->n == st->n &&
        memcmp(s->a, st->a, (size_t)st->n * sizeof(uintptr_t)) == 0)
      return slot;
  }
  return 0;
}

void _hm_pl_prof_alloc(uint32_t site, size_t size) {
  if (!site) {
    atomic_fetch_add_explicit(&hm__pf.unsited_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hm__pf.unsited_bytes, size, memory_order_relaxed);
    return;
  }
  hm__site_t *s = &hm__pf.sites[site];
  atomic_fetch_add_explicit(&s->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->bytes, size, memory_order_relaxed);
  hm__max(&s->max_bytes, size);
  hm__event(site, (int64_t)size);
}

static void hm__disarm_range(uintptr_t lo, uintptr_t hi);

void _hm_pl_prof_release(_hm_pl_block_t *b, uint32_t site, uint64_t t, uintptr_t key,
                         size_t req) {
  /* The caller has taken b out of the table: once no sampler pins it, no
   * page of it can be armed again. */
  while (atomic_load(&b->pin)) _hm_prim_yield();
  if (hm__pf.sampling) hm__disarm_range(key, key + req);
  if (!site || !hm__pf.sites) return;
  hm__site_t *s = &hm__pf.sites[site];
  uint64_t now = _hm_pl_prof_now();
  uint64_t lt = now > t ? now - t : 0;
  atomic_fetch_add_explicit(&s->frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->lt_sum, lt, memory_order_relaxed);
  hm__min(&s->lt_min, lt);
  hm__max(&s->lt_max, lt);
  hm__event(site, -(int64_t)req);
}

void _hm_pl_prof_small(uintptr_t ra, size_t size) {
  hm__tbuf_t *tb = hm__tbuf();
  if (!tb) return;
  size_t h = (size_t)((ra * 0x9E3779B97F4A7C15ull) >> 52) & (HM__SMALL - 1);
  for (unsigned i = 0; i < 8; i++) {
    hm__small_t *e = &tb->small[(h + i) & (HM__SMALL - 1)];
    uintptr_t cur = atomic_load_explicit(&e->ra, memory_order_relaxed);
    if (cur == 0) {
      atomic_store_explicit(&e->ra, ra, memory_order_relaxed);
      cur = ra;
    }
    if (cur == ra) {
      /* one writer: a load and a store, no locked instruction */
      atomic_store_explicit(&e->count, atomic_load_explicit(&e->count, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      atomic_store_explicit(&e->bytes,
                            atomic_load_explicit(&e->bytes, memory_order_relaxed) + size,
                            memory_order_relaxed);
      return;
    }
  }
  atomic_store_explicit(&tb->other_count,
                        atomic_load_explicit(&tb->other_count, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  atomic_store_explicit(&tb->other_bytes,
                        atomic_load_explicit(&tb->other_bytes, memory_order_relaxed) + size,
                        memory_order_relaxed);
}

void _hm_pl_prof_thread(int delta) {
  int now = atomic_fetch_add(&hm__pf.live_threads, delta) + delta;
  int cur = atomic_load(&hm__pf.max_threads);
  while (now > cur && !atomic_compare_exchange_weak(&hm__pf.max_threads, &cur, now)) {
  }
}

/* ------------------------------------------------------------------------
 * The portable sampler
 * ------------------------------------------------------------------------ */
static size_t hm__ahash(uintptr_t page) {
  return (size_t)(((page >> 12) * 0x9E3779B97F4A7C15ull) >> 40) & (HM__ARMED - 1);
}

static int hm__mprotect_span(uintptr_t page, size_t pages, int prot) {
  return _hm_prim_sys_mprotect((void *)page, pages * hm__pf.page, prot);
}

static int hm__mprotect(uintptr_t page, int prot) { return hm__mprotect_span(page, 1, prot); }

/* Async-signal-safe: atomics and raw syscalls only. */
static int hm__claim_fault(uintptr_t page, int write) {
  int found = 0;
  for (int t = 0; t < 2; t++) {
    hm__armed_t *tab = hm__pf.armed[t];
    size_t h = hm__ahash(page);
    for (size_t i = 0; i < HM__ARMED; i++) {
      hm__armed_t *e = &tab[(h + i) & (HM__ARMED - 1)];
      uintptr_t p = atomic_load_explicit(&e->page, memory_order_acquire);
      if (p == 0) break;
      if (p != page) continue;
      found = 1;
      int st = HM__A_ARMED;
      if (atomic_compare_exchange_strong(&e->state, &st, HM__A_CONSUMED)) {
        hm__mprotect(page, PROT_READ | PROT_WRITE);
        atomic_fetch_add_explicit(&hm__pf.faults, 1, memory_order_relaxed);
        if (e->site && e->weight) {
          hm__site_t *s = &hm__pf.sites[e->site];
          atomic_fetch_add_explicit(write ? &s->stores : &s->loads, e->weight,
                                    memory_order_relaxed);
        }
        return 1;
      }
    }
  }
  /* ours but not armed any more: the page is being restored; the access
   * is retried */
  return found;
}

static void hm__app_segv_read(struct sigaction *out) {
  for (;;) {
    unsigned a = atomic_load_explicit(&hm__pf.app_seq, memory_order_acquire);
    if (a & 1u) continue;
    memcpy(out, &hm__pf.app_segv, sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&hm__pf.app_seq, memory_order_relaxed) == a) return;
  }
}

static void hm__app_segv_write(const struct sigaction *in) {
  atomic_fetch_add_explicit(&hm__pf.app_seq, 1, memory_order_acq_rel);
  memcpy(&hm__pf.app_segv, in, sizeof *in);
  atomic_fetch_add_explicit(&hm__pf.app_seq, 1, memory_order_release);
}

static void hm__segv(int sig, siginfo_t *si, void *ucv) {
  int saved = errno;
  uintptr_t page = (uintptr_t)si->si_addr & ~(uintptr_t)(hm__pf.page - 1);
  int write = 0;
#if defined(__x86_64__)
  ucontext_t *uc = ucv;
  write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
  (void)ucv;
#endif
  if (si->si_code == SEGV_ACCERR && hm__claim_fault(page, write)) {
    errno = saved;
    return;
  }
  errno = saved;
  /* Not ours: the application's disposition, as the kernel would run it. */
  struct sigaction app;
  hm__app_segv_read(&app);
  if ((app.sa_flags & SA_RESETHAND) && app.sa_handler != SIG_DFL) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    hm__app_segv_write(&dfl);
  }
  _hm_pl_segv_chain(&app, sig, si, ucv);
}

int _hm_pl_prof_segv_action(const struct sigaction *act, struct sigaction *old) {
  if (!hm__pf.sampling || atomic_load(&hm__pf.handler_lost)) return 0;
  struct sigaction want;
  if (act) want = *act; /* read outside the lock: it may be on an armed page */
  pthread_mutex_lock(&hm__pf.app_lk);
  struct sigaction was;
  hm__app_segv_read(&was);
  if (act) hm__app_segv_write(&want);
  pthread_mutex_unlock(&hm__pf.app_lk);
  if (old) *old = was;
  return 1;
}

static void hm__disarm_range(uintptr_t lo, uintptr_t hi) {
  for (int t = 0; t < 2; t++) {
    hm__armed_t *tab = hm__pf.armed[t];
    for (size_t i = 0; i < HM__ARMED; i++) {
      hm__armed_t *e = &tab[i];
      uintptr_t p = atomic_load(&e->page);
      if (p < lo || p >= hi) continue;
      int st = HM__A_ARMED;
      if (atomic_compare_exchange_strong(&e->state, &st, HM__A_IDLE))
        hm__mprotect(p, PROT_READ | PROT_WRITE);
    }
  }
}

/* A table slot for `page`, filled and ARMED, or NULL (chosen already this
 * round, or the probe chain is full). */
static hm__armed_t *hm__slot(hm__armed_t *tab, uintptr_t page, uint32_t site, uint32_t weight) {
  size_t h = hm__ahash(page);
  for (size_t i = 0; i < HM__ARMED / 2; i++) {
    hm__armed_t *e = &tab[(h + i) & (HM__ARMED - 1)];
    uintptr_t p = atomic_load(&e->page);
    if (p == page) return NULL;
    if (p) continue;
    e->site = site;
    e->weight = weight;
    atomic_store(&e->state, HM__A_ARMED);
    atomic_store_explicit(&e->page, page, memory_order_release);
    return e;
  }
  return NULL;
}

/* Arms up to n consecutive pages from `page` with one mprotect and records
 * them as one run of table t. Taking access away costs a TLB shootdown, an
 * IPI to every CPU running the program (20-30 us here, in a VM, against
 * 2-4 us to give it back, which needs none); one call per run pays it once
 * per block and round instead of once per page. Returns the pages armed. */
static unsigned hm__arm_run(int t, uintptr_t page, unsigned n, uint32_t site, uint32_t weight) {
  hm__runs_t *rs = &hm__pf.runs[t];
  if (rs->n >= HM__ARMED) return 0;
  hm__run_t *r = &rs->run[rs->n];
  unsigned k = 0;
  while (k < n && k < HM__PAGES_PER_BLOCK) {
    hm__armed_t *e = hm__slot(hm__pf.armed[t], page + k * hm__pf.page, site, weight);
    if (!e) break;
    r->e[k++] = e;
  }
  if (!k) return 0;
  if (hm__mprotect_span(page, k, PROT_NONE) != 0) {
    for (unsigned j = 0; j < k; j++) {
      int st = HM__A_ARMED;
      atomic_compare_exchange_strong(&r->e[j]->state, &st, HM__A_IDLE);
    }
    return 0;
  }
  r->page = page;
  r->n = k;
  rs->n++;
  return k;
}

/* Gives back the pages of table t's runs that are still armed, each
 * stretch of them in one call; the sampler thread's only. A page the fault
 * handler or a release (hm__disarm_range) took first is theirs to give. */
static void hm__disarm_runs(int t) {
  hm__runs_t *rs = &hm__pf.runs[t];
  for (size_t i = 0; i < rs->n; i++) {
    hm__run_t *r = &rs->run[i];
    unsigned from = 0;
    for (unsigned j = 0; j <= r->n; j++) {
      int st = HM__A_ARMED;
      if (j < r->n && atomic_compare_exchange_strong(&r->e[j]->state, &st, HM__A_IDLE)) continue;
      if (j > from) hm__mprotect_span(r->page + from * hm__pf.page, j - from, PROT_READ | PROT_WRITE);
      from = j + 1;
    }
  }
  rs->n = 0;
}

static uint64_t hm__rng;
static uint64_t hm__rand(void) {
  hm__rng ^= hm__rng << 13;
  hm__rng ^= hm__rng >> 7;
  hm__rng ^= hm__rng << 17;
  return hm__rng;
}

static uint64_t hm__thread_cpu_ns(void) { return _hm_prim_thread_cpu_ns(); }

static int hm__handler_is_ours(void) {
  struct sigaction cur;
  if (_hm_pl_real_sigaction(SIGSEGV, NULL, &cur) != 0) return 0;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == hm__segv;
}

/* One fault's cost (fault, signal delivery, handler, mprotect, return),
 * measured on a scratch page of our own. */
static uint64_t hm__calibrate(void) {
  uintptr_t page = (uintptr_t)_hm_prim_map_raw(hm__pf.page);
  if (!page) return 0;
  uint64_t best = UINT64_MAX;
  for (int r = 0; r < 5; r++) {
    memset(hm__pf.armed[1], 0, HM__ARMED * sizeof(hm__armed_t));
    hm__pf.runs[1].n = 0;
    if (!hm__arm_run(1, page, 1, 0, 0)) break;
    uint64_t t = hm__mono();
    *(volatile char *)page = 1;
    uint64_t d = hm__mono() - t;
    if (d < best) best = d;
  }
  memset(hm__pf.armed[1], 0, HM__ARMED * sizeof(hm__armed_t));
  hm__pf.runs[1].n = 0;
  (void)_hm_prim_sys_munmap((void *)page, hm__pf.page);
  atomic_store(&hm__pf.faults, 0);
  return best == UINT64_MAX ? 0 : best;
}

static void *hm__sampler(void *unused) {
  (void)unused;
  hm__pf.fault_cost_ns = hm__calibrate();
  uint64_t period_ns = hm__pf.cfg.period_us * 1000ull;
  unsigned k = 0;
  size_t cap = _hm_pl_table_capacity();
  while (!atomic_load(&hm__pf.stop)) {
    _hm_prim_sleep_ns(period_ns);
    if (atomic_load(&hm__pf.stop)) break;
    /* restore what the last period armed and nobody touched; clear the
     * table of two periods ago (long disarmed) and fill it */
    hm__disarm_runs((int)((k + 1) & 1));
    int t = (int)(k & 1);
    hm__armed_t *tab = hm__pf.armed[t];
    hm__disarm_runs(t);
    for (size_t i = 0; i < HM__ARMED; i++) {
      atomic_store(&tab[i].page, 0);
      atomic_store(&tab[i].state, HM__A_FREE);
    }
    if (!hm__handler_is_ours()) {
      atomic_store(&hm__pf.handler_lost, 1);
      break;
    }
    uint64_t armed = 0;
    for (size_t i = 0; i < cap && armed < HM__ARMED / 2; i++) {
      _hm_pl_block_t *b = _hm_pl_table_slot(hm__pf.cfg.table, i);
      uintptr_t key = atomic_load_explicit(&b->key, memory_order_acquire);
      if (key <= HM_PL_KEY_BUSY) continue;
      atomic_fetch_add(&b->pin, 1);
      if (atomic_load(&b->key) == key) {
        uint32_t site = b->site;
        size_t req = atomic_load_explicit(&b->req, memory_order_relaxed);
        size_t pg = hm__pf.page;
        uintptr_t first = (key + pg - 1) & ~(uintptr_t)(pg - 1);
        uintptr_t last = (key + req) & ~(uintptr_t)(pg - 1);
        size_t npages = last > first ? (last - first) / pg : 0;
        if (npages && site) {
          unsigned want = npages < HM__PAGES_PER_BLOCK ? (unsigned)npages : HM__PAGES_PER_BLOCK;
          uint32_t w = (uint32_t)((npages * HM__FIX) / want);
          /* `want` consecutive pages from a random one, wrapping to the
           * block's start, so that every page is in with the same chance
           * (want / npages) and the weight stays unbiased */
          size_t s0 = hm__rand() % npages;
          unsigned n1 = npages - s0 < want ? (unsigned)(npages - s0) : want;
          armed += hm__arm_run(t, first + s0 * pg, n1, site, w);
          if (n1 < want) armed += hm__arm_run(t, first, want - n1, site, w);
          b->sampled = 1;
        }
      }
      atomic_fetch_sub(&b->pin, 1);
    }
    atomic_fetch_add(&hm__pf.armings, armed);
    atomic_fetch_add(&hm__pf.periods, 1);
    atomic_store(&hm__pf.sampler_cpu_ns, hm__thread_cpu_ns());
    k++;
  }
  hm__disarm_runs(0);
  hm__disarm_runs(1);
  atomic_store(&hm__pf.sampler_cpu_ns, hm__thread_cpu_ns());
  atomic_store(&hm__pf.stopped, 1);
  return NULL;
}

/* Credits from a precise sampler (sampler.c's thread). */
static void hm__credit(void *arg, uint32_t site, uint64_t wfix, int store) {
  (void)arg;
  if (!site || site >= HM__SITES) return;
  hm__site_t *s = &hm__pf.sites[site];
  atomic_fetch_add_explicit(store ? &s->stores : &s->loads, wfix, memory_order_relaxed);
}

int _hm_pl_prof_start(const _hm_pl_prof_cfg_t *cfg, char *why, size_t len) {
  hm__pf.cfg = *cfg;
  snprintf(hm__pf.path_template, sizeof hm__pf.path_template, "%s", cfg->path_template);
  hm__pf.cfg.path_template = hm__pf.path_template;
  hm__pf.t0 = hm__mono();
  uint64_t rt = _hm_prim_realtime_ns();
  hm__pf.start_unix = (double)(rt / 1000000000u) + (double)(rt % 1000000000u) / 1e9;
  hm__pf.page = _hm_prim_page_size();
  if (hm__pf.cfg.depth < 1 || hm__pf.cfg.depth > HM_PL_MAX_DEPTH) {
    snprintf(why, len, "profile depth must be 1..%d", HM_PL_MAX_DEPTH);
    return -EINVAL;
  }
  /* The profile is written at exit: a directory it cannot go into is
   * refused now, not found after the whole run (a directory part with %
   * expansions is only known then). */
  const char *slash = strrchr(hm__pf.path_template, '/');
  if (slash) {
    char dir[sizeof hm__pf.path_template];
    size_t dl = slash == hm__pf.path_template ? 1 : (size_t)(slash - hm__pf.path_template);
    memcpy(dir, hm__pf.path_template, dl);
    dir[dl] = 0;
    int drc = strchr(dir, '%') ? 0 : _hm_prim_check_writable_dir(dir);
    if (drc) {
      snprintf(why, len, "cannot write the profile into '%s': %s", dir, strerror(-drc));
      return drc;
    }
  }
  /* and one where another user could swap the file (checked again at exit) */
  if (!strchr(hm__pf.path_template, '%')) {
    char dwhy[HM_PATH_MAX + 256];
    int drc = _hm_pl_out_dir_check(hm__pf.path_template, dwhy, sizeof dwhy);
    if (drc) {
      snprintf(why, len, "cannot write the profile: %s", dwhy);
      return drc;
    }
  }
  hm__pf.sites = _hm_prim_map_raw(HM__SITES * sizeof(hm__site_t));
  if (!hm__pf.sites) {
    snprintf(why, len, "cannot reserve the site table");
    return -ENOMEM;
  }
  snprintf(hm__pf.probed, sizeof hm__pf.probed, "{}");
  snprintf(hm__pf.fsroot, sizeof hm__pf.fsroot, "%s", cfg->fsroot ? cfg->fsroot : "/");
  const char *s = cfg->sampler && *cfg->sampler ? cfg->sampler : "auto";
  if (strcmp(s, "none") == 0) {
    snprintf(hm__pf.sampler_name, sizeof hm__pf.sampler_name, "none");
    return 0;
  }
  /* precise samplers first (sampler.c); the portable one below */
  _hm_smp_cfg_t sc = {hm__pf.fsroot, hm__pf.cfg.period_us, 0, _hm_prim_pid(), NULL};
  _hm_smp_kind_t kind = HM_SMP_PORTABLE;
  int src = _hm_smp_select(&sc, s, &kind, hm__pf.probed, sizeof hm__pf.probed, why, len);
  if (src) return src;
  if (kind != HM_SMP_PORTABLE) {
    if ((src = _hm_smp_run(&sc, kind, hm__pf.cfg.table, hm__credit, NULL, why, len))) return src;
    snprintf(hm__pf.sampler_name, sizeof hm__pf.sampler_name, "%s", _hm_smp_kind_name(kind));
    hm__pf.precise = 1;
    return 0;
  }
  snprintf(hm__pf.sampler_name, sizeof hm__pf.sampler_name, "portable");
  if (hm__pf.cfg.period_us < 100) hm__pf.cfg.period_us = 100;
  hm__pf.armed[0] = _hm_prim_map_raw(2 * HM__ARMED * sizeof(hm__armed_t));
  if (!hm__pf.armed[0]) {
    snprintf(why, len, "cannot reserve the sampler's tables");
    return -ENOMEM;
  }
  hm__pf.armed[1] = hm__pf.armed[0] + HM__ARMED;
  hm__pf.runs = _hm_prim_map_raw(2 * sizeof(hm__runs_t));
  if (!hm__pf.runs) {
    snprintf(why, len, "cannot reserve the sampler's tables");
    return -ENOMEM;
  }
  hm__rng = hm__pf.t0 | 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = hm__segv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  pthread_mutex_init(&hm__pf.app_lk, NULL);
  if (_hm_pl_real_sigaction(SIGSEGV, &sa, &hm__pf.app_segv) != 0) {
    snprintf(why, len, "cannot install the sampler's SIGSEGV handler: %s", strerror(errno));
    return -errno;
  }
  hm__pf.sampling = 1;
  int rc = pthread_create(&hm__pf.thread, NULL, hm__sampler, NULL);
  if (rc) {
    hm__pf.sampling = 0;
    _hm_pl_real_sigaction(SIGSEGV, &hm__pf.app_segv, NULL);
    snprintf(why, len, "cannot start the sampler thread: %s", strerror(rc));
    return -rc;
  }
  pthread_detach(hm__pf.thread);
  return 0;
}

/* ------------------------------------------------------------------------
 * Writing the profile (at exit)
 * ------------------------------------------------------------------------ */
static int hm__ev_cmp(const void *a, const void *b) {
  const hm__ev_t *x = a, *y = b;
  if (x->site != y->site) return x->site < y->site ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return 0;
}

static const char *hm__rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = _hm_prim_getenv(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (!*end && r >= 0) return v;
    }
  }
  return NULL;
}

static void hm__expand(const char *tpl, char *out, size_t len, const char *host,
                       const char *rank) {
  size_t k = 0;
  for (const char *p = tpl; *p && k + 1 < len; p++) {
    char buf[64];
    const char *ins = NULL;
    if (*p == '%' && p[1]) {
      p++;
      if (*p == 'h') ins = host;
      else if (*p == 'r') ins = rank ? rank : "norank";
      else if (*p == 'p') {
        snprintf(buf, sizeof buf, "%ld", (long)_hm_prim_pid());
        ins = buf;
      } else if (*p == '%') ins = "%";
      else {
        buf[0] = '%';
        buf[1] = *p;
        buf[2] = 0;
        ins = buf;
      }
      size_t n = strlen(ins);
      if (k + n >= len) break;
      memcpy(out + k, ins, n);
      k += n;
    } else {
      out[k++] = *p;
    }
  }
  out[k] = 0;
}

typedef struct hm__wsite_s {
  uint32_t slot;
  int nfr;
  int32_t mod[HM_PL_MAX_DEPTH];
  uint64_t off[HM_PL_MAX_DEPTH];
  uint64_t small_count, small_bytes;
} hm__wsite_t;

static void hm__write(void) {
  uint64_t wall = _hm_pl_prof_now();
  if (wall == 0) wall = 1;
  /* sites in use, their frames as (loaded module, offset) */
  size_t nused = 0;
  hm__wsite_t *ws = malloc(sizeof *ws * (atomic_load(&hm__pf.nsites_used) + 1));
  int32_t *remap = calloc(HM_PL_MAX_MODULES, sizeof *remap); /* loaded -> file index + 1 */
  int32_t *order = calloc(HM_PL_MAX_MODULES, sizeof *order);
  if (!ws || !remap || !order) goto out_free;
  int nmods = 0;
  for (size_t i = 0; i < _hm_pl_module_count(); i++)
    if (_hm_pl_module(i)->is_main) {
      remap[i] = ++nmods;
      order[0] = (int32_t)i;
    }
  if (!nmods) goto out_free;
  for (uint32_t slot = 1; slot < HM__SITES; slot++) {
    hm__site_t *s = &hm__pf.sites[slot];
    if (atomic_load(&s->hash) < 2 || !atomic_load(&s->allocs)) continue;
    hm__wsite_t *w = &ws[nused];
    memset(w, 0, sizeof *w);
    w->slot = slot;
    for (int f = 0; f < s->n; f++) {
      int lm = s->mod[f];
      if (lm < 0) break; /* a frame no module holds ends the stack */
      uint64_t off = s->a[f] - _hm_pl_module((size_t)lm)->bias;
      if (!remap[lm]) {
        order[nmods] = lm;
        remap[lm] = ++nmods;
      }
      w->mod[w->nfr] = remap[lm] - 1;
      w->off[w->nfr] = off;
      w->nfr++;
    }
    if (w->nfr) nused++;
  }
  /* small allocations: to the site whose innermost frame called malloc */
  uint64_t other_count = atomic_load(&hm__pf.unsited_count);
  uint64_t other_bytes = atomic_load(&hm__pf.unsited_bytes);
  for (hm__tbuf_t *tb = atomic_load(&hm__pf.threads); tb; tb = tb->next) {
    other_count += atomic_load(&tb->other_count);
    other_bytes += atomic_load(&tb->other_bytes);
    for (size_t i = 0; i < HM__SMALL; i++) {
      uintptr_t ra = atomic_load(&tb->small[i].ra);
      if (!ra) continue;
      uint64_t c = atomic_load(&tb->small[i].count), by = atomic_load(&tb->small[i].bytes);
      size_t j = 0;
      if (nused <= 4096)
        for (; j < nused; j++)
          if (hm__pf.sites[ws[j].slot].a[0] == ra) break;
      if (nused <= 4096 && j < nused) {
        ws[j].small_count += c;
        ws[j].small_bytes += by;
      } else {
        other_count += c;
        other_bytes += by;
      }
    }
  }
  /* events, sorted per site then time */
  size_t nev = 0;
  for (hm__tbuf_t *tb = atomic_load(&hm__pf.threads); tb; tb = tb->next)
    for (hm__chunk_t *c = atomic_load(&tb->head); c; c = atomic_load(&c->next))
      nev += atomic_load(&c->n);
  hm__ev_t *ev = nev ? malloc(nev * sizeof *ev) : NULL;
  if (nev && !ev) nev = 0;
  size_t k = 0;
  /* Other threads may still allocate while this runs (a signal's finisher,
   * or exit() while workers run): only what happened up to `wall` is
   * the run's, and the counters read below may be a little ahead of it. */
  for (hm__tbuf_t *tb = atomic_load(&hm__pf.threads); tb && ev; tb = tb->next)
    for (hm__chunk_t *c = atomic_load(&tb->head); c; c = atomic_load(&c->next)) {
      size_t n = atomic_load(&c->n);
      if (k + n > nev) n = nev - k;
      for (size_t i = 0; i < n; i++)
        if (c->ev[i].t <= wall) ev[k++] = c->ev[i];
    }
  nev = k;
  if (nev) qsort(ev, nev, sizeof *ev, hm__ev_cmp);

  char host[256] = "";
  (void)_hm_prim_hostname(host, sizeof host - 1);
  const char *rank = hm__rank();
  char path[HM_PATH_MAX];
  hm__expand(hm__pf.path_template, path, sizeof path, host, rank);

  _hm_sb_t sb;
  _hm_sb_init(&sb);
  uint64_t cpu = atomic_load(&hm__pf.sampler_cpu_ns);
  double overhead =
      ((double)cpu + (double)atomic_load(&hm__pf.faults) * (double)hm__pf.fault_cost_ns) /
      (double)wall;
  int threads = atomic_load(&hm__pf.max_threads);
  double period = strcmp(hm__pf.sampler_name, "none") ? (double)hm__pf.page / 64.0 : 1.0;
  char extra[1024] = "";
  if (hm__pf.precise) {
    period = _hm_smp_period();
    cpu = _hm_smp_cpu_ns(); /* the PMU's interrupts are not in it */
    overhead = (double)cpu / (double)wall;
    _hm_smp_describe(extra, sizeof extra);
  }
  _hm_sb_printf(&sb,
                "{\"magic\":\"hetmem-profile\",\"schema_version\":1,\"type\":\"header\","
                "\"binary\":0,\"pid\":%ld,\"rank\":%s,\"hostname\":",
                (long)_hm_prim_pid(), rank ? rank : "null");
  _hm_sb_json_str(&sb, host);
  _hm_sb_printf(&sb,
                ",\"start_unix\":%.6f,\"wall_ns\":%llu,\"depth\":%d,\"threshold\":%zu,"
                "\"bytes_per_access\":64,\"threads\":%d,\"sampler\":{\"name\":\"%s\","
                "\"period\":%.1f,\"overhead\":%.6f,\"interval_us\":%llu,"
                "\"pages_per_block\":%u,\"periods\":%llu,\"armed_pages\":%llu,\"faults\":%llu,"
                "\"fault_cost_ns\":%llu,\"sampler_cpu_ns\":%llu,\"handler_lost\":%s,"
                "\"probed\":%s%s},\"small\":{\"count\":%llu,\"bytes\":%llu},"
                "\"stopped_by_signal\":%d}\n",
                hm__pf.start_unix, (unsigned long long)wall, hm__pf.cfg.depth,
                hm__pf.cfg.threshold, threads > 0 ? threads : 1, hm__pf.sampler_name,
                period,
                overhead, (unsigned long long)hm__pf.cfg.period_us, HM__PAGES_PER_BLOCK,
                (unsigned long long)atomic_load(&hm__pf.periods),
                (unsigned long long)atomic_load(&hm__pf.armings),
                (unsigned long long)atomic_load(&hm__pf.faults),
                (unsigned long long)hm__pf.fault_cost_ns, (unsigned long long)cpu,
                atomic_load(&hm__pf.handler_lost) ? "true" : "false", hm__pf.probed, extra,
                (unsigned long long)other_count, (unsigned long long)other_bytes,
                _hm_pl_term_signal());
  for (int m = 0; m < nmods; m++) {
    const _hm_pl_module_t *mod = _hm_pl_module((size_t)order[m]);
    _hm_sb_printf(&sb, "{\"type\":\"module\",\"index\":%d,\"path\":", m);
    _hm_sb_json_str(&sb, mod->path);
    _hm_sb_printf(&sb, ",\"build_id\":\"%s\"}\n", mod->build_id);
  }
  size_t e = 0;
  uint64_t width = wall / HM__POINTS + 1;
  for (size_t i = 0; i < nused; i++) {
    hm__wsite_t *w = &ws[i];
    hm__site_t *s = &hm__pf.sites[w->slot];
    while (e < nev && ev[e].site < w->slot) e++;
    /* replay: exact peak, bucketed series of maxima */
    _hm_sb_t live;
    _hm_sb_init(&live);
    int64_t cur = 0, peak = 0, bmax = 0, last_emitted = -1;
    uint64_t bucket = UINT64_MAX;
    const char *sep = "";
    for (; e < nev && ev[e].site == w->slot; e++) {
      uint64_t b = ev[e].t / width;
      if (b != bucket) {
        if (bucket != UINT64_MAX && bmax != last_emitted) {
          _hm_sb_printf(&live, "%s[%llu,%lld]", sep, (unsigned long long)(bucket * width),
                        (long long)bmax);
          sep = ",";
          last_emitted = bmax;
        }
        if (bucket != UINT64_MAX && b > bucket + 1 && cur != last_emitted) {
          /* the level between the buckets */
          _hm_sb_printf(&live, "%s[%llu,%lld]", sep, (unsigned long long)((bucket + 1) * width),
                        (long long)cur);
          sep = ",";
          last_emitted = cur;
        }
        bucket = b;
        bmax = cur;
      }
      cur += ev[e].delta;
      if (cur < 0) cur = 0;
      if (cur > bmax) bmax = cur;
      if (cur > peak) peak = cur;
    }
    if (bucket != UINT64_MAX) {
      if (bmax != last_emitted) {
        _hm_sb_printf(&live, "%s[%llu,%lld]", sep, (unsigned long long)(bucket * width),
                      (long long)bmax);
        sep = ",";
        last_emitted = bmax;
      }
      if (cur != last_emitted && (bucket + 1) * width <= wall)
        _hm_sb_printf(&live, "%s[%llu,%lld]", sep, (unsigned long long)((bucket + 1) * width),
                      (long long)cur);
    }
    char *livetxt = NULL;
    if (_hm_sb_take(&live, &livetxt) != 0) livetxt = NULL;
    uint64_t allocs = atomic_load(&s->allocs), frees = atomic_load(&s->frees);
    uint64_t bytes = atomic_load(&s->bytes);
    if (frees > allocs) frees = allocs;
    int series = 1;
    if ((uint64_t)peak > bytes) { /* an allocation's event seen before its count */
      peak = (int64_t)bytes;
      series = 0;
    }
    _hm_sb_puts(&sb, "{\"type\":\"site\",\"frames\":[");
    for (int f = 0; f < w->nfr; f++)
      _hm_sb_printf(&sb, "%s[%d,%llu]", f ? "," : "", w->mod[f], (unsigned long long)w->off[f]);
    _hm_sb_printf(&sb,
                  "],\"allocs\":%llu,\"bytes\":%llu,\"max_bytes\":%llu,"
                  "\"peak_live_bytes\":%lld,\"live\":[%s]",
                  (unsigned long long)allocs, (unsigned long long)bytes,
                  (unsigned long long)atomic_load(&s->max_bytes), (long long)peak,
                  livetxt && series ? livetxt : "");
    free(livetxt);
    uint64_t mn = atomic_load(&s->lt_min), mx = atomic_load(&s->lt_max);
    if (frees && mn <= mx) { /* mn > mx: a release still being recorded */
      double mean = (double)atomic_load(&s->lt_sum) / (double)frees;
      if (mean < (double)mn) mean = (double)mn;
      if (mean > (double)mx) mean = (double)mx;
      _hm_sb_printf(&sb, ",\"lifetime_ns\":{\"min\":%llu,\"mean\":%.1f,\"max\":%llu}",
                    (unsigned long long)mn, mean, (unsigned long long)mx);
    }
    _hm_sb_printf(&sb,
                  ",\"never_freed\":%llu,\"samples\":{\"loads\":%llu,\"stores\":%llu},"
                  "\"small\":{\"count\":%llu,\"bytes\":%llu}}\n",
                  (unsigned long long)(allocs - frees),
                  (unsigned long long)((atomic_load(&s->loads) + HM__FIX / 2) / HM__FIX),
                  (unsigned long long)((atomic_load(&s->stores) + HM__FIX / 2) / HM__FIX),
                  (unsigned long long)w->small_count, (unsigned long long)w->small_bytes);
  }
  _hm_sb_printf(&sb, "{\"type\":\"end\",\"sites\":%zu,\"modules\":%d}\n", nused, nmods);
  char *text = NULL;
  if (_hm_sb_take(&sb, &text) == 0 && text) {
    char why[HM_PATH_MAX + 256];
    if (_hm_pl_out_replace(path, text, why, sizeof why) != 0) {
      char msg[HM_PATH_MAX + 512];
      int n = snprintf(msg, sizeof msg, "hetmem: cannot write profile '%s': %s\n", path, why);
      if (n > 0) {
        _hm_prim_stderr(msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
      }
    }
    free(text);
  }
  free(ev);
out_free:
  free(ws);
  free(remap);
  free(order);
}

/* Called once per process (stats.c's _hm_pl_outputs runs the writers once). */
void _hm_pl_prof_finish(void) {
  if (!hm__pf.sites) return;
  if (hm__pf.precise) _hm_smp_halt();
  if (hm__pf.sampling) {
    atomic_store(&hm__pf.stop, 1);
    /* the sampler wakes within one period */
    for (int i = 0; i < 2000 && !atomic_load(&hm__pf.stopped); i++) {
      _hm_prim_sleep_ns(1000000);
    }
    hm__pf.sampling = 0;
  }
  hm__write();
}
