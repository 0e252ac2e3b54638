/* SPDX-License-Identifier: BSD-3-Clause */
/* libhetmem_preload.so: the allocation interposer that `hetmem run --mode
 * cache` loads into an unmodified program with LD_PRELOAD.
 *
 * Every allocation of at least alloc_threshold bytes (malloc family, aligned
 * allocations, calloc, realloc, and private anonymous mmap) is served from a
 * pager region whose DRAM cache is the fast_budget; smaller ones stay in
 * glibc. See preload.h for the shape (hook -> route -> backend) that
 * placement extends with allocation sites and tiers. The interposer is:
 *   init.c   start-up (the constructor), the SIGSEGV chain
 *   fork.c   fork: the child's copy of the parent's tiered data
 *   hooks.c  the hooks (malloc family, mmap family, pthread_create, signals)
 *   route.c  routing, accounting, backends, huge-page advice
 *   stats.c  the statistics line and the outputs at exit
 *
 * Safe before main and while the loader resolves symbols: glibc's allocator
 * is reached through its exported __libc_* entry points (no dlsym on the
 * malloc path), the block table lives in raw mmap'd memory, and the
 * runtime (options, pager) is only started from our constructor or on the
 * first large request, never before libc has initialised.
 *
 * Exit: the interposer never calls exit() or _exit() after start-up, so the
 * application's exit status passes through. The one exception is a pager
 * that cannot start: one line "hetmem: cannot start cache mode: <why>" and
 * exit status 2 (at init, before main, when the configuration is wrong). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

const char *const _hm_pl_mode_names[3] = {"cache", "profile", "placement"};
_hm_pl_ctx_t _hm_pl_ctx = {
    .once = PTHREAD_ONCE_INIT, .page = 4096, .fork_lk = PTHREAD_RWLOCK_INITIALIZER};
_Atomic size_t _hm_pl_threshold = (size_t)1 << 20;
_Atomic int _hm_pl_profiling;
__thread _hm_pl_tls_t _hm_pl_tls __attribute__((tls_model("initial-exec")));

void _hm_pl_say(const char *msg) {
  /* One write(2): no stdio, usable inside malloc. */
  char line[HM_ERRMSG_MAX + 64];
  int n = snprintf(line, sizeof line, "hetmem: %s\n", msg);
  if (n > 0) {
    _hm_prim_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  }
}

_Noreturn void _hm_pl_die_inside_malloc(const char *why) {
  char msg[HM_ERRMSG_MAX + 40];
  snprintf(msg, sizeof msg, "cannot start %s mode: %s", _hm_pl_mode_names[_hm_pl_ctx.mode], why);
  _hm_pl_say(msg);
  /* Inside malloc any lock (stdio's included) may be held: exit() could
   * deadlock flushing streams. Only reached when the pager fails after a
   * good start-up check (e.g. userfaultfd refused to this process). */
  _hm_prim_exit_now(2);
}

/* ------------------------------------------------------------------------
 * Start-up
 * ------------------------------------------------------------------------ */
static void hm__thread_exit(void *unused) {
  (void)unused;
  if (_hm_pl_tls.counted) _hm_pl_prof_thread(-1);
  _hm_pl_tls.counted = 0;
  atomic_fetch_add_explicit(&_hm_pl_ctx.small_exited, _hm_pl_tls.small, memory_order_relaxed);
  _hm_pl_tls.small = 0;
  _hm_pl_heap_thread_exit();
  _hm_pl_dio_thread_exit();
  _hm_pl_tls.registered = 0;
}

void _hm_pl_segv_chain(const struct sigaction *app, int sig, siginfo_t *si, void *uc) {
  if (app->sa_handler == SIG_IGN || app->sa_handler == SIG_DFL) {
    _hm_pl_set_default(SIGSEGV); /* a fault is retried: kills as usual */
    if (si->si_code <= 0 && app->sa_handler == SIG_DFL) _hm_prim_raise(SIGSEGV); /* kill(), raise() */
    return;
  }
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &app->sa_mask, &old);
  if (app->sa_flags & SA_SIGINFO)
    app->sa_sigaction(sig, si, uc);
  else
    app->sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int hm__fail(int rc, const char *fmt, ...) HM_PRINTF(2, 3);
static int hm__fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(_hm_pl_ctx.prep_msg, sizeof _hm_pl_ctx.prep_msg, fmt, ap);
  va_end(ap);
  return rc;
}

static int hm__check_dir(const char *dir) {
  int rc = _hm_prim_check_writable_dir(dir);
  return rc ? hm__fail(rc, "storage directory '%s': %s", dir, strerror(-rc)) : 0;
}

static int hm__prepare_common(uint64_t thr) {
  int rc;
  if ((rc = _hm_pl_table_init(&_hm_pl_ctx.table))) return hm__fail(rc, "cannot reserve the block table");
  _hm_pl_ctx.have_key = pthread_key_create(&_hm_pl_ctx.thread_key, hm__thread_exit) == 0;
  _hm_pl_fork_init();
  /* dlsym is safe here: we run from our constructor or from a large
   * allocation, both after libc and the loader are up. */
  _hm_pl_resolve_libc_usable();
  _hm_pl_resolve_signals();
  _hm_pl_dio_resolve();
  atomic_store(&_hm_pl_threshold, (size_t)thr);
  return 0;
}

/* The fetch unit of the pager behind flat/hybrid's slow-tier sites, unless
 * fetch_unit is set: the largest of 256, 128 and 64 KiB with which its
 * cache holds 100 units. Those sites hold what the profile found cold:
 * swept once per use or touched sparsely. Sparse touches need many units
 * resident (bench placement's sparse variant touches 51 units per
 * iteration at 512 MiB: at 256 KiB they overflowed flat's 8 MiB cache and
 * were fetched again every iteration, 73 -> 170 fetches from 2 to 6
 * iterations; at 64 KiB 36 -> 35); sweeps prefer large units (a read, a
 * copy ioctl and an eviction per unit: hybrid's 26 MiB cache swept in
 * 1.10-1.41 s at 256 KiB against 1.41-1.58 s at 64 KiB). */
static uint64_t hm__place_unit(uint64_t cache) {
  for (uint64_t unit = 256u << 10; unit > (64u << 10); unit /= 2)
    if (cache >= 100 * unit) return unit;
  return 64u << 10;
}

/* The pager's least cache in flat/hybrid mode, out of the fast budget:
 * 16 units of at least 256 KiB plus 4 MiB for its tables (8 MiB). With
 * split sites, whose blocks' rest streams through the pager, a quarter of
 * the budget up to 32 MiB: a cache that small starves a sweep (each
 * stream's readahead, the units being written back and those in use do
 * not fit; prefetched units are evicted before use; 64 KiB units cost a
 * fault each). bench/placement's mixed variant (3 x 128 MiB swept
 * together, 96 MiB budget) ran split in 4.6-5.4 s at 8 MiB and 2.8-3.4 s
 * at 24 MiB (cache mode 2.3-2.8 s). Whole sites keep the 8 MiB: a larger
 * floor there pushed bench placement's second hot array out of DRAM. The
 * advisor keeps the same room (placement/advise.py, stream_floor). */
static uint64_t hm__place_floor(uint64_t budget, uint64_t unit) {
  uint64_t least = 16 * (unit > (256u << 10) ? unit : (256u << 10)) + (4u << 20);
  int split = 0;
  for (size_t i = 0; i < _hm_pl_place_sites(); i++) split |= _hm_pl_place_split(i) != 0;
  uint64_t want = budget / 4 < (32u << 20) ? budget / 4 : (32u << 20);
  return split && want > least ? want : least;
}

/* The pager is present in this build (its references are weak). */
static int hm__have_pager(void) {
  if (!hm_pager_open || !hm_pager_map || !hm_pager_unmap || !hm_pager_config_default)
    return hm__fail(-ENOSYS, "this build of hetmem has no pager (src/sdm)");
  return 0;
}

/* Profile mode: starts the profiler and its sampler. */
static int hm__prepare_profile(uint64_t thr, const char *prof, char *why, size_t len) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  char sampler[64];
  uint64_t period = 10000;
  int rc;
  c->mode = HM_PL_M_PROFILE;
  if (hm_option_get(c->ctx, "sampler", sampler, sizeof sampler)) snprintf(sampler, sizeof sampler, "auto");
  if (hm_option_get_u64(c->ctx, "sample_period", &period)) period = 10000;
  if (period == 0) /* was taken silently as the default */
    return hm__fail(-EINVAL, "sample_period must be at least 1 microsecond (0 given)");
  _hm_pl_prof_cfg_t pc = {prof,    c->depth, (size_t)thr,
                          sampler, period,   &c->table, hm_ctx_fsroot(c->ctx)};
  if ((rc = _hm_pl_prof_start(&pc, why, len))) return hm__fail(rc, "%s", why);
  c->own_maps = _hm_pl_prof_per_mapping();
  atomic_store(&_hm_pl_profiling, 1);
  _hm_pl_prof_thread(+1); /* the main thread */
  _hm_pl_tls.counted = 1;
  return 0;
}

/* Which placement tier glibc serves (the fastest, when it is plain DRAM);
 * 1 when a tier is the storage tier (the pager's). */
static int hm__place_tiers_scan(void) {
  size_t nt = _hm_pl_place_tiers();
  int has_storage = 0;
  _hm_pl_ctx.glibc_tier = -1;
  for (size_t i = 0; i < nt; i++) {
    const _hm_pl_tier_t *t = _hm_pl_place_tier(i);
    if (i == 0 && (t->numa < 0 || strcmp(t->kind, "dram") == 0) && strcmp(t->kind, "storage"))
      _hm_pl_ctx.glibc_tier = 0; /* the fastest tier is plain DRAM: glibc serves it */
    if (t->numa < 0 && strcmp(t->kind, "storage") == 0) has_storage = 1;
  }
  return has_storage;
}

/* Placement's storage tier: the pager's budget and fetch unit. */
static int hm__place_storage(void) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  int rc;
  if ((rc = hm__have_pager())) return rc;
  hm_pager_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  hm_pager_config_default(c->ctx, &cfg);
  c->fetch_unit = cfg.fetch_unit ? cfg.fetch_unit : 256 << 10;
  if (cfg.backing_dir && (rc = hm__check_dir(cfg.backing_dir))) return rc;
  /* flat: the least cache (hm__place_floor); hybrid: what the pinned
   * fast-tier sites leave of the budget, at least that */
  uint64_t minimal = hm__place_floor(c->budget, c->fetch_unit);
  uint64_t pinned = _hm_pl_place_tier(0)->capacity;
  c->pager_budget = minimal;
  c->pager_floor = minimal;
  if (c->hybrid && c->budget > pinned && c->budget - pinned > minimal)
    c->pager_budget = c->budget - pinned;
  /* hybrid: the pinned capacity is the sites' peaks added up, more than
   * they hold at once (srealloc'd arrays, sites that peak apart); the pager
   * gets what they leave at each moment (route.c's hm__pager_share) */
  c->pager_max = c->hybrid && c->budget > c->pager_budget ? c->budget : c->pager_budget;
  /* budget_process: the pager measures the whole process against the whole
   * budget (tier 0's blocks and glibc's small blocks included) and keeps to
   * its share (route.c) as well; flat's share is its least cache */
  uint64_t whole = 0;
  if (!hm_option_get_u64(c->ctx, "budget_process", &whole) && whole) {
    if (c->budget > c->pager_max) c->pager_max = c->budget;
    c->rest_room = 1; /* and tier 0 leaves that memory's room (route.c) */
  }
  /* the pager's least cache comes out of the fast budget: DRAM sites and
   * cache together keep to it (1 byte: a budget below that cache leaves
   * tier 0 nothing; 0 would read as unlimited) */
  c->fast_limit = c->budget > c->pager_budget ? c->budget - c->pager_budget : 1;
  /* hybrid: from the least cache, unless fetch_unit is set; `hetmem run`
   * sets it from a hybrid placement's pager_cache_mean_bytes (run/place.py,
   * the same rule): the cache the pager has on average, which the advisor
   * knows from the profile's time axis. The least cache is seldom what it
   * holds when the pinned sites peak apart (hpcc at half its footprint: 64
   * KiB units while the cache averaged 120 MiB, HPL 108 s against 82 at
   * 256 KiB), and the middle of the range was too much when they stay live
   * (LAMMPS at 75%: 256 KiB units in a 7 MiB cache, 250 GB read) */
  if (c->ctx->opts.origin[HM_OPT_FETCH_UNIT] == HM_ORIGIN_DEFAULT)
    c->fetch_unit = hm__place_unit(c->pager_budget);
  return 0;
}

/* auto_fast "MIN" or "MIN:MAX" (sizes): unmatched requests in that range
 * go to tier 0. Checked by `hetmem run` before the launch; a bad value
 * set by hand refuses the mode like any other bad option. */
static int hm__auto_fast(_hm_pl_ctx_t *c) {
  char text[128], *colon;
  if (hm_option_get(c->ctx, "auto_fast", text, sizeof text) || !text[0]) return 0;
  uint64_t lo = 0, hi = UINT64_MAX;
  if ((colon = strchr(text, ':'))) *colon = 0;
  if (hm_parse_size(text, &lo) || lo == 0 || (colon && hm_parse_size(colon + 1, &hi)) || hi < lo)
    return hm__fail(-EINVAL, "auto_fast must be MIN or MIN:MAX (sizes, 0 < MIN <= MAX)");
  c->auto_min = lo;
  c->auto_max = hi;
  return 0;
}

/* Placement mode: loads the placement file and sets up its tiers. */
static int hm__prepare_place(const char *place, char *why, size_t len) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  int rc;
  c->mode = HM_PL_M_PLACE;
  if ((rc = _hm_pl_place_load(place, why, len))) return hm__fail(rc, "%s", why);
  char pm[16];
  if (hm_option_get(c->ctx, "place_mode", pm, sizeof pm)) snprintf(pm, sizeof pm, "flat");
  if (strcmp(pm, "flat") && strcmp(pm, "hybrid"))
    return hm__fail(-EINVAL, "place_mode must be flat or hybrid, not '%s'", pm);
  c->hybrid = strcmp(pm, "hybrid") == 0;
  if (hm_option_get_u64(c->ctx, "fast_budget", &c->budget)) c->budget = 0;
  c->fast_limit = c->budget; /* 0: no budget, tier 0 has its own capacity */
  c->pstat = calloc(_hm_pl_place_sites() + 1, sizeof *c->pstat);
  if (!c->pstat) return hm__fail(-ENOMEM, "out of memory");
  if (hm__place_tiers_scan() && (rc = hm__place_storage())) return rc;
  uint64_t huge = 1;
  if (hm_option_get_u64(c->ctx, "huge_pages", &huge)) huge = 1;
  c->huge = huge ? _hm_pl_thp_advise_size(hm_ctx_fsroot(c->ctx)) : 0;
  return hm__auto_fast(c);
}

/* Profiling and placement: both capture the call site of every large
 * request. */
static int hm__prepare_sites(uint64_t thr, const char *prof, const char *place) {
  int rc;
  uint64_t depth = 8;
  /* named in a refusal below: "cannot start profile mode", not cache mode */
  _hm_pl_ctx.mode = prof[0] ? HM_PL_M_PROFILE : HM_PL_M_PLACE;
  if (hm_option_get_u64(_hm_pl_ctx.ctx, "profile_depth", &depth) || depth < 1 ||
      depth > HM_PL_MAX_DEPTH)
    return hm__fail(-EINVAL, "profile_depth must be 1..%d", HM_PL_MAX_DEPTH);
  _hm_pl_ctx.depth = (int)depth;
  if ((rc = _hm_pl_sites_init())) return hm__fail(rc, "cannot list the loaded modules");
  if ((rc = hm__prepare_common(thr))) return rc;
  char why[HM_ERRMSG_MAX];
  why[0] = 0;
  if (prof[0]) return hm__prepare_profile(thr, prof, why, sizeof why);
  return hm__prepare_place(place, why, sizeof why);
}

/* Cache mode: every large request goes to the pager. */
static int hm__prepare_cache(uint64_t thr) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  int rc;
  if (hm_option_get_u64(c->ctx, "fast_budget", &c->budget) || c->budget == 0)
    return hm__fail(-EINVAL, "no fast-tier budget: set HETMEM_FAST_BUDGET (e.g. 4G)");
  if (hm_option_get_u64(c->ctx, "fetch_unit", &c->fetch_unit) || !c->fetch_unit)
    c->fetch_unit = 256 << 10;
  if (c->budget < c->fetch_unit)
    return hm__fail(-EINVAL, "fast budget of %llu bytes is smaller than one fetch unit (%llu)",
                    (unsigned long long)c->budget, (unsigned long long)c->fetch_unit);
  if ((rc = hm__have_pager())) return rc;
  hm_pager_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  hm_pager_config_default(c->ctx, &cfg);
  if (cfg.fetch_unit) c->fetch_unit = cfg.fetch_unit;
  if (cfg.backing_dir && (rc = hm__check_dir(cfg.backing_dir))) return rc;
  c->pager_budget = c->pager_max = c->budget;
  return hm__prepare_common(thr);
}

static int hm__prepare_inner(void) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  c->page = _hm_prim_page_size();
  int rc = hm_ctx_new(&c->ctx, NULL);
  if (rc) return hm__fail(rc, "%s", c->ctx ? hm_ctx_last_error(c->ctx) : hm_strerror(rc));
  uint64_t thr = 0;
  if (hm_option_get_u64(c->ctx, "alloc_threshold", &thr) || thr < c->page)
    return hm__fail(-EINVAL, "alloc_threshold must be at least one page (%zu bytes)", c->page);
  char prof[HM_PATH_MAX], place[HM_PATH_MAX];
  if (hm_option_get(c->ctx, "profile", prof, sizeof prof)) prof[0] = 0;
  if (hm_option_get(c->ctx, "placement", place, sizeof place)) place[0] = 0;
  if (hm_option_get(c->ctx, "stats", c->stats_path, sizeof c->stats_path)) c->stats_path[0] = 0;
  char policy[256], why[HM_ERRMSG_MAX];
  if (hm_option_get(c->ctx, "storage_full", policy, sizeof policy)) policy[0] = 0;
  if ((rc = _hm_pl_full_init(policy, why, sizeof why))) return hm__fail(rc, "%s", why);
  if (prof[0] || place[0]) return hm__prepare_sites(thr, prof, place);
  return hm__prepare_cache(thr);
}

static void hm__prepare(void) {
  _hm_pl_tls.guard++;
  _hm_pl_ctx.prep_rc = hm__prepare_inner();
  /* a run stopped by a signal still writes its profile or statistics */
  if (!_hm_pl_ctx.prep_rc && (_hm_pl_ctx.mode == HM_PL_M_PROFILE || _hm_pl_ctx.stats_path[0]))
    _hm_pl_term_catch(_hm_pl_outputs);
  _hm_pl_tls.guard--;
}

/* Cache mode with small_blocks: small requests from here on go to the
 * pager's heap (heap.c). One line when it cannot start; glibc then keeps
 * serving them, as without the option. */
static void hm__heap_start(void) {
  uint64_t on = 0;
  if (_hm_pl_ctx.mode != HM_PL_M_CACHE || hm_option_get_u64(_hm_pl_ctx.ctx, "small_blocks", &on) ||
      !on)
    return;
  int rc = _hm_pl_heap_start();
  if (rc) {
    char msg[128];
    snprintf(msg, sizeof msg, "warning: small blocks stay in DRAM: %s", hm_strerror(rc));
    _hm_pl_say(msg);
  }
}

__attribute__((constructor)) static void hm__ctor(void) {
  pthread_once(&_hm_pl_ctx.once, hm__prepare);
  if (_hm_pl_ctx.prep_rc) {
    /* Before main: exit() is safe here and flushes nothing of the app's. */
    char msg[HM_ERRMSG_MAX + 40];
    snprintf(msg, sizeof msg, "cannot start %s mode: %s", _hm_pl_mode_names[_hm_pl_ctx.mode],
             _hm_pl_ctx.prep_msg);
    _hm_pl_say(msg);
    exit(2);
  }
  /* Static data, once prepared (the pager opens through
   * _hm_pl_ensure_prepared) and still before main. */
  _hm_pl_tls.guard++;
  size_t thr = atomic_load(&_hm_pl_threshold);
  _hm_pl_statics_find(thr);
  _hm_pl_statics_prepare(thr);
  hm__heap_start();
  _hm_pl_tls.guard--;
}

/* The mode and its settings, before a large request is routed: a library
 * constructor that runs before hm__ctor (OpenBLAS allocates its buffers in
 * one) makes the first large request while the mode is still unset, and
 * would otherwise be served as in cache mode. Costs one acquire load once
 * prepared (pthread_once), on large requests only. */
void _hm_pl_ensure_prepared(void) {
  pthread_once(&_hm_pl_ctx.once, hm__prepare);
  if (_hm_pl_ctx.prep_rc) _hm_pl_die_inside_malloc(_hm_pl_ctx.prep_msg);
}

