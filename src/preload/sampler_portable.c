/* SPDX-License-Identifier: BSD-3-Clause */
/* The portable access sampler of the profiler (sampler.h): page
 * protection, for machines without precise-address PMU sampling or DAMON
 * with virtual-address monitoring.
 *
 * Every period (HETMEM_SAMPLE_PERIOD, default 10 ms) a sampler thread makes
 * a run of up to HM_SMP_PAGES_PER_BLOCK consecutive whole pages of each
 * live large block PROT_NONE, from a random page and wrapping to the
 * block's start, so that every page is in with the same chance and the
 * weights stay unbiased. One call per block (two when the run wraps), not
 * one per page: taking access away costs an IPI to every CPU running the
 * program. The first access of any thread faults, the SIGSEGV handler
 * restores the page, and the access is credited to the block's site (a
 * store when the fault's error code says write, else a load), weighted by
 * block pages / sampled pages. Pages not touched by the next period are
 * restored by the sampler. So one sample says "this page was touched in
 * this period"; the profile's period (the accesses one sample stands for)
 * is page size / 64 (each touched page counts as one pass over its cache
 * lines). Costs: one mprotect and TLB shootdown per block and period, one
 * fault + signal + mprotect (no shootdown: access is given, not taken) per
 * touched armed page (measured at start, reported in the profile as
 * `overhead`). Caveats (documented): a system call that writes into an
 * armed page (read(2) into a large buffer) fails with EFAULT instead of
 * faulting; a program that installs its own SIGSEGV handler later takes
 * over the faults (the sampler notices and stops arming). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "internal.h"
#include "preload.h"
#include "sampler.h"
#include "prim/prim.h"

#define HM__ARMED 2048u /* armed pages per table (two tables alternate) */

typedef struct hm__armed_s {
  _Atomic uintptr_t page; /* 0: free */
  _Atomic int state;      /* HM__A_* */
  uint32_t site;
  uint32_t weight;        /* x HM_SMP_FIX */
} hm__armed_t;

/* One block's pages armed in a round: consecutive, given in one call. */
typedef struct hm__run_s {
  uintptr_t page;
  unsigned n;
  hm__armed_t *e[HM_SMP_PAGES_PER_BLOCK];
} hm__run_t;

typedef struct hm__runs_s {
  size_t n;
  hm__run_t run[HM__ARMED];
} hm__runs_t;

enum { HM__A_FREE = 0, HM__A_ARMED = 1, HM__A_CONSUMED = 2, HM__A_IDLE = 3 };

static struct {
  int sampling; /* the handler is in and the thread runs */
  size_t page;
  uint64_t period_us;
  _hm_pl_table_t *table;
  _hm_smp_sink_t sink;
  void (*tick)(void);
  hm__armed_t *armed[2];
  hm__runs_t *runs; /* [2], one per table; the sampler thread's */
  _Atomic int stop, stopped;
  pthread_t thread;
  _Atomic uint64_t faults, armings, periods, cpu_ns;
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
} hm__ps;

static size_t hm__ahash(uintptr_t page) {
  return (size_t)(((page >> 12) * 0x9E3779B97F4A7C15ull) >> 40) & (HM__ARMED - 1);
}

static int hm__mprotect_span(uintptr_t page, size_t pages, int prot) {
  return _hm_prim_sys_mprotect((void *)page, pages * hm__ps.page, prot);
}

static int hm__mprotect(uintptr_t page, int prot) { return hm__mprotect_span(page, 1, prot); }

/* Async-signal-safe: atomics and raw syscalls only. */
static int hm__claim_fault(uintptr_t page, int write) {
  int found = 0;
  for (int t = 0; t < 2; t++) {
    hm__armed_t *tab = hm__ps.armed[t];
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
        atomic_fetch_add_explicit(&hm__ps.faults, 1, memory_order_relaxed);
        if (e->site && e->weight) hm__ps.sink.credit(hm__ps.sink.arg, e->site, e->weight, write);
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
    unsigned a = atomic_load_explicit(&hm__ps.app_seq, memory_order_acquire);
    if (a & 1u) continue;
    memcpy(out, &hm__ps.app_segv, sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&hm__ps.app_seq, memory_order_relaxed) == a) return;
  }
}

static void hm__app_segv_write(const struct sigaction *in) {
  atomic_fetch_add_explicit(&hm__ps.app_seq, 1, memory_order_acq_rel);
  memcpy(&hm__ps.app_segv, in, sizeof *in);
  atomic_fetch_add_explicit(&hm__ps.app_seq, 1, memory_order_release);
}

/* A fault on a page neither table holds may still be one the sampler
 * armed: the thread waited to run its handler (preempted, on a loaded
 * machine) while the sampler gave the page back and, a period later,
 * cleared the table that named it; the page is accessible again, and the
 * process was killed for a fault that was not its own (profile runs at
 * --period 1ms beside two busy loops: 5 of 25 died). So such a fault is
 * retried, up to HM__STALE_RETRIES times for one page within one period;
 * a page that stays inaccessible (the application's own PROT_NONE) then
 * goes to the application's disposition. Cost: a few thread-local
 * compares, on this rare path only. */
#define HM__STALE_RETRIES 4u
static __thread struct {
  uintptr_t page;
  uint64_t period;
  unsigned n;
} hm__stale __attribute__((tls_model("initial-exec")));

static int hm__stale_retry(uintptr_t page) {
  uint64_t per = atomic_load_explicit(&hm__ps.periods, memory_order_relaxed);
  if (hm__stale.page != page || hm__stale.period != per) {
    hm__stale.page = page;
    hm__stale.period = per;
    hm__stale.n = 0;
  }
  return hm__stale.n++ < HM__STALE_RETRIES;
}

static void hm__segv(int sig, siginfo_t *si, void *ucv) {
  int saved = errno;
  uintptr_t page = (uintptr_t)si->si_addr & ~(uintptr_t)(hm__ps.page - 1);
  int write = 0;
#if defined(__x86_64__)
  ucontext_t *uc = ucv;
  write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
  (void)ucv;
#endif
  if (si->si_code == SEGV_ACCERR && (hm__claim_fault(page, write) || hm__stale_retry(page))) {
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

int _hm_smp_portable_segv_action(const struct sigaction *act, struct sigaction *old) {
  if (!hm__ps.sampling || atomic_load(&hm__ps.handler_lost)) return 0;
  struct sigaction want;
  if (act) want = *act; /* read outside the lock: it may be on an armed page */
  pthread_mutex_lock(&hm__ps.app_lk);
  struct sigaction was;
  hm__app_segv_read(&was);
  if (act) hm__app_segv_write(&want);
  pthread_mutex_unlock(&hm__ps.app_lk);
  if (old) *old = was;
  return 1;
}

void _hm_smp_portable_disarm(uintptr_t lo, uintptr_t hi) {
  if (!hm__ps.sampling) return;
  for (int t = 0; t < 2; t++) {
    hm__armed_t *tab = hm__ps.armed[t];
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
  hm__runs_t *rs = &hm__ps.runs[t];
  if (rs->n >= HM__ARMED) return 0;
  hm__run_t *r = &rs->run[rs->n];
  unsigned k = 0;
  while (k < n && k < HM_SMP_PAGES_PER_BLOCK) {
    hm__armed_t *e = hm__slot(hm__ps.armed[t], page + k * hm__ps.page, site, weight);
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
 * handler or a release (_hm_smp_portable_disarm) took first is theirs to give. */
static void hm__disarm_runs(int t) {
  hm__runs_t *rs = &hm__ps.runs[t];
  for (size_t i = 0; i < rs->n; i++) {
    hm__run_t *r = &rs->run[i];
    unsigned from = 0;
    for (unsigned j = 0; j <= r->n; j++) {
      int st = HM__A_ARMED;
      if (j < r->n && atomic_compare_exchange_strong(&r->e[j]->state, &st, HM__A_IDLE)) continue;
      if (j > from) hm__mprotect_span(r->page + from * hm__ps.page, j - from, PROT_READ | PROT_WRITE);
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
  uintptr_t page = (uintptr_t)_hm_prim_map_raw(hm__ps.page);
  if (!page) return 0;
  uint64_t best = UINT64_MAX;
  for (int r = 0; r < 5; r++) {
    memset(hm__ps.armed[1], 0, HM__ARMED * sizeof(hm__armed_t));
    hm__ps.runs[1].n = 0;
    if (!hm__arm_run(1, page, 1, 0, 0)) break;
    uint64_t t = _hm_prim_now_ns();
    *(volatile char *)page = 1;
    uint64_t d = _hm_prim_now_ns() - t;
    if (d < best) best = d;
  }
  memset(hm__ps.armed[1], 0, HM__ARMED * sizeof(hm__armed_t));
  hm__ps.runs[1].n = 0;
  (void)_hm_prim_sys_munmap((void *)page, hm__ps.page);
  atomic_store(&hm__ps.faults, 0);
  return best == UINT64_MAX ? 0 : best;
}

/* Arms up to HM_SMP_PAGES_PER_BLOCK pages of block b in table t (b is
 * pinned: a release waits); returns the pages armed. */
static uint64_t hm__arm_block(int t, _hm_pl_block_t *b, uintptr_t key) {
  uint32_t site = b->site;
  size_t req = atomic_load_explicit(&b->req, memory_order_relaxed);
  size_t pg = hm__ps.page;
  uintptr_t first = (key + pg - 1) & ~(uintptr_t)(pg - 1);
  uintptr_t last = (key + req) & ~(uintptr_t)(pg - 1);
  size_t npages = last > first ? (last - first) / pg : 0;
  if (!npages || !site) return 0;
  unsigned want = npages < HM_SMP_PAGES_PER_BLOCK ? (unsigned)npages : HM_SMP_PAGES_PER_BLOCK;
  uint32_t w = (uint32_t)((npages * HM_SMP_FIX) / want);
  /* `want` consecutive pages from a random one, wrapping to the
   * block's start, so that every page is in with the same chance
   * (want / npages) and the weight stays unbiased */
  size_t s0 = hm__rand() % npages;
  unsigned n1 = npages - s0 < want ? (unsigned)(npages - s0) : want;
  uint64_t armed = hm__arm_run(t, first + s0 * pg, n1, site, w);
  if (n1 < want) armed += hm__arm_run(t, first, want - n1, site, w);
  b->sampled = 1;
  return armed;
}

/* One period's arming of table t over the live blocks of the table. */
static uint64_t hm__arm_all(int t) {
  uint64_t armed = 0;
  size_t cap = _hm_pl_table_capacity();
  for (size_t i = 0; i < cap && armed < HM__ARMED / 2; i++) {
    _hm_pl_block_t *b = _hm_pl_table_slot(hm__ps.table, i);
    uintptr_t key = atomic_load_explicit(&b->key, memory_order_acquire);
    if (key <= HM_PL_KEY_BUSY) continue;
    atomic_fetch_add(&b->pin, 1);
    if (atomic_load(&b->key) == key) armed += hm__arm_block(t, b, key);
    atomic_fetch_sub(&b->pin, 1);
  }
  return armed;
}

static void *hm__sampler(void *unused) {
  (void)unused;
  hm__ps.fault_cost_ns = hm__calibrate();
  uint64_t period_ns = hm__ps.period_us * 1000ull;
  unsigned k = 0;
  while (!atomic_load(&hm__ps.stop)) {
    _hm_prim_sleep_ns(period_ns);
    if (atomic_load(&hm__ps.stop)) break;
    /* restore what the last period armed and nobody touched; clear the
     * table of two periods ago (long disarmed) and fill it */
    hm__disarm_runs((int)((k + 1) & 1));
    int t = (int)(k & 1);
    hm__armed_t *tab = hm__ps.armed[t];
    hm__disarm_runs(t);
    for (size_t i = 0; i < HM__ARMED; i++) {
      atomic_store(&tab[i].page, 0);
      atomic_store(&tab[i].state, HM__A_FREE);
    }
    if (!hm__handler_is_ours()) {
      atomic_store(&hm__ps.handler_lost, 1);
      break;
    }
    atomic_fetch_add(&hm__ps.armings, hm__arm_all(t));
    atomic_fetch_add(&hm__ps.periods, 1);
    if (hm__ps.tick) hm__ps.tick();
    atomic_store(&hm__ps.cpu_ns, hm__thread_cpu_ns());
    k++;
  }
  hm__disarm_runs(0);
  hm__disarm_runs(1);
  atomic_store(&hm__ps.cpu_ns, hm__thread_cpu_ns());
  atomic_store(&hm__ps.stopped, 1);
  return NULL;
}

/* The tables the sampler arms pages in. */
static int hm__tables(char *why, size_t len) {
  hm__ps.armed[0] = _hm_prim_map_raw(2 * HM__ARMED * sizeof(hm__armed_t));
  if (!hm__ps.armed[0]) {
    snprintf(why, len, "cannot reserve the sampler's tables");
    return -ENOMEM;
  }
  hm__ps.armed[1] = hm__ps.armed[0] + HM__ARMED;
  hm__ps.runs = _hm_prim_map_raw(2 * sizeof(hm__runs_t));
  if (!hm__ps.runs) {
    snprintf(why, len, "cannot reserve the sampler's tables");
    return -ENOMEM;
  }
  return 0;
}

int _hm_smp_portable_start(const _hm_smp_cfg_t *cfg, _hm_pl_table_t *table,
                           const _hm_smp_sink_t *sink, char *why, size_t len) {
  int rc;
  hm__ps.page = _hm_prim_page_size();
  hm__ps.period_us = cfg->period_us;
  hm__ps.tick = cfg->tick;
  hm__ps.table = table;
  hm__ps.sink = *sink;
  if ((rc = hm__tables(why, len))) return rc;
  hm__rng = _hm_prim_now_ns() | 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = hm__segv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  pthread_mutex_init(&hm__ps.app_lk, NULL);
  if (_hm_pl_real_sigaction(SIGSEGV, &sa, &hm__ps.app_segv) != 0) {
    snprintf(why, len, "cannot install the sampler's SIGSEGV handler: %s", strerror(errno));
    return -errno;
  }
  hm__ps.sampling = 1;
  rc = pthread_create(&hm__ps.thread, NULL, hm__sampler, NULL);
  if (rc) {
    hm__ps.sampling = 0;
    _hm_pl_real_sigaction(SIGSEGV, &hm__ps.app_segv, NULL);
    snprintf(why, len, "cannot start the sampler thread: %s", strerror(rc));
    return -rc;
  }
  pthread_detach(hm__ps.thread);
  return 0;
}

void _hm_smp_portable_stop(void) {
  if (!hm__ps.sampling) return;
  atomic_store(&hm__ps.stop, 1);
  /* the sampler wakes within one period */
  for (int i = 0; i < 2000 && !atomic_load(&hm__ps.stopped); i++) {
    _hm_prim_sleep_ns(1000000);
  }
  hm__ps.sampling = 0;
}

void _hm_smp_portable_stats(_hm_smp_portable_stats_t *out) {
  out->periods = atomic_load(&hm__ps.periods);
  out->armings = atomic_load(&hm__ps.armings);
  out->faults = atomic_load(&hm__ps.faults);
  out->fault_cost_ns = hm__ps.fault_cost_ns;
  out->cpu_ns = atomic_load(&hm__ps.cpu_ns);
  out->handler_lost = atomic_load(&hm__ps.handler_lost);
}
