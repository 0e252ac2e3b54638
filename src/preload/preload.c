/* libhetmem_preload.so: the allocation interposer that `hetmem run --mode
 * cache` loads into an unmodified program with LD_PRELOAD.
 *
 * Every allocation of at least alloc_threshold bytes (malloc family, aligned
 * allocations, calloc, realloc, and private anonymous mmap) is served from a
 * pager region whose DRAM cache is the fast_budget; smaller ones stay in
 * glibc. See preload.h for the shape (hook -> route -> backend) that
 * placement extends with allocation sites and tiers.
 *
 * Costs on the hot paths (no lock anywhere on them):
 *  - small malloc/calloc/memalign: one relaxed load of the threshold, one
 *    compare, one increment of a thread-local counter, a tail call into
 *    glibc;
 *  - free/realloc/malloc_usable_size of a small pointer: one call, one shift,
 *    one load from the granule map, one branch, then glibc;
 *  - large blocks: a hash probe in the lock-free block table plus the
 *    pager's own map/unmap cost.
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
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

/* glibc exports its allocator under these names precisely so that
 * interposers can reach it without dlsym (which may itself allocate). */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

/* The pager may be absent from a build (a partial checkout): the weak
 * references then read as NULL and cache mode says so at start-up. */
#pragma weak hm_pager_open
#pragma weak hm_pager_map
#pragma weak hm_pager_unmap
#pragma weak hm_pager_advise
#pragma weak hm_pager_config_default
#pragma weak hm_pager_stats_json

#define HM__EXPORT __attribute__((visibility("default")))
#define HM__DECLARE(ret, name, params) HM__EXPORT ret name params;
HM_PL_HOOKS(HM__DECLARE)
#undef HM__DECLARE

/* ------------------------------------------------------------------------
 * The one process-wide context of the interposer.
 *
 * It is process-wide because the hooks are called with no handle; it is
 * the only such state in hetmem (hetmem.h's handles carry everything
 * else). Fields written once during start-up are read without locks after
 * `state` (acquire) says READY; counters are relaxed atomics, read at exit.
 * ------------------------------------------------------------------------ */
enum { HM__NONE = 0, HM__OPENING = 1, HM__READY = 2, HM__FORKED = 3 };

/* What the interposer does with large requests, fixed at start-up. */
enum { HM__M_CACHE = 0, HM__M_PROFILE = 1, HM__M_PLACE = 2 };
static const char *const hm__mode_names[] = {"cache", "profile", "placement"};

/* Placement counters, per site (index 0: allocations that matched no site)
 * and per tier; relaxed atomics, read at exit. */
typedef struct hm__pstat_s {
  _Atomic uint64_t allocs, overflows;
  _Atomic uint64_t bytes[HM_PL_MAX_TIERS];
} hm__pstat_t;

typedef struct hm__pl_s {
  /* start-up (hm__prepare, once) */
  pthread_once_t once;
  int mode;                  /* HM__M_* */
  int depth;                 /* frames captured per large allocation */
  int hybrid;                /* placement: hybrid (else flat) */
  uint64_t pager_budget;     /* the pager's DRAM cache (cache: budget) */
  hm__pstat_t *pstat;        /* placement: 1 + sites */
  _Atomic uint64_t tier_live[HM_PL_MAX_TIERS], tier_peak[HM_PL_MAX_TIERS];
  _Atomic uint64_t tier_allocs[HM_PL_MAX_TIERS];
  int glibc_tier;            /* placement tier that glibc serves (-1: none) */
  size_t huge;               /* placement: THP size to advise DRAM/NUMA blocks with (0: no) */
  _Atomic uint64_t huge_bytes; /* bytes so advised */
  int prep_rc;               /* 0 or a negative errno */
  char prep_msg[HM_ERRMSG_MAX];
  hm_ctx_t *ctx;             /* options; never freed (blocks outlive main) */
  uint64_t budget;           /* fast_budget: the pager's DRAM cache */
  uint64_t fetch_unit;
  size_t page;
  char stats_path[HM_PATH_MAX];
  pthread_key_t thread_key;  /* flushes per-thread counters at thread exit */
  int have_key;
  size_t (*libc_usable)(void *);
  int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  _hm_pl_table_t table;      /* live large blocks */
  /* backends */
  _Atomic int state;         /* HM__NONE .. HM__FORKED */
  hm_pager_t *pager;
  /* counters */
  _Atomic uint64_t large_allocs, large_frees, large_bytes, live_bytes, peak_live_bytes;
  _Atomic uint64_t mmap_allocs, fallbacks, realloc_moves, small_exited;
} hm__pl_t;

static hm__pl_t hm__pl = {.once = PTHREAD_ONCE_INIT, .page = 4096};

/* Read on every allocation; 1 MiB (the option's default) until start-up
 * has read the option. */
static _Atomic size_t hm__threshold = (size_t)1 << 20;

/* Set once profiling runs: small allocations are then counted per caller. */
static _Atomic int hm__profiling;

/* Per thread: the recursion guard (non-zero while this thread runs inside
 * hetmem, so the runtime's own allocations go straight to glibc) and the
 * count of small allocations. initial-exec: no __tls_get_addr call, no
 * allocation on first access. */
typedef struct hm__tls_s {
  unsigned guard;
  unsigned registered;
  unsigned counted; /* in the profile's thread count (hetmem's own are not) */
  unsigned refused; /* the last large request failed by policy (full.c): no glibc fallback */
  uint64_t small;
} hm__tls_t;
static __thread hm__tls_t hm__tls __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------------
 * Raw syscalls for the memory the application maps itself.
 * ------------------------------------------------------------------------ */
static void *hm__sys_mmap(void *a, size_t l, int prot, int flags, int fd, off_t off) {
  return (void *)syscall(SYS_mmap, a, l, prot, flags, fd, off);
}
static int hm__sys_munmap(void *a, size_t l) { return (int)syscall(SYS_munmap, a, l); }

static void hm__say(const char *msg) {
  /* One write(2): no stdio, usable inside malloc. */
  char line[HM_ERRMSG_MAX + 64];
  int n = snprintf(line, sizeof line, "hetmem: %s\n", msg);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
}

static _Noreturn void hm__die_inside_malloc(const char *why) {
  char msg[HM_ERRMSG_MAX + 40];
  snprintf(msg, sizeof msg, "cannot start %s mode: %s", hm__mode_names[hm__pl.mode], why);
  hm__say(msg);
  /* Inside malloc any lock (stdio's included) may be held: exit() could
   * deadlock flushing streams. Only reached when the pager fails after a
   * good start-up check (e.g. userfaultfd refused to this process). */
  _exit(2);
}

/* ------------------------------------------------------------------------
 * Start-up
 * ------------------------------------------------------------------------ */
static void hm__thread_exit(void *unused) {
  (void)unused;
  if (hm__tls.counted) _hm_pl_prof_thread(-1);
  hm__tls.counted = 0;
  atomic_fetch_add_explicit(&hm__pl.small_exited, hm__tls.small, memory_order_relaxed);
  hm__tls.small = 0;
  hm__tls.registered = 0;
}

/* A forked child's record of the parent's pager blocks, which it did not
 * inherit: a touch of one is a SIGSEGV that hm__forked_segv explains before
 * the default action (a core dump, or a multiprocessing worker dying
 * unexplained). Set once in the child, read only by the handler. */
static struct {
  uintptr_t (*range)[2];
  size_t n;
  struct sigaction prev;
} hm__forked;

static void hm__forked_segv(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  for (size_t i = 0; i < hm__forked.n; i++) {
    if (a < hm__forked.range[i][0] || a >= hm__forked.range[i][1]) continue;
    static const char msg[] =
        "hetmem: this process was forked (without exec) from one whose large blocks are in "
        "hetmem's pager, and touched one of them: a forked child does not inherit them. Exec a "
        "program in the child, or in Python use multiprocessing's 'spawn' start method\n";
    (void)!write(2, msg, sizeof msg - 1);
    _hm_pl_set_default(SIGSEGV); /* retried: kills as usual */
    return;
  }
  if ((hm__forked.prev.sa_flags & SA_RESETHAND) && hm__forked.prev.sa_handler != SIG_DFL) {
    _hm_pl_set_default(SIGSEGV); /* the kernel's reset, as it would have done */
  }
  _hm_pl_segv_chain(&hm__forked.prev, sig, si, uc); /* not ours: as before us */
}

void _hm_pl_segv_chain(const struct sigaction *app, int sig, siginfo_t *si, void *uc) {
  if (app->sa_handler == SIG_IGN || app->sa_handler == SIG_DFL) {
    _hm_pl_set_default(SIGSEGV); /* a fault is retried: kills as usual */
    if (si->si_code <= 0 && app->sa_handler == SIG_DFL) raise(SIGSEGV); /* kill(), raise() */
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

/* Records the pager blocks the parent had live and installs hm__forked_segv
 * (only then). Runs in the single-threaded child right after fork: no malloc,
 * the array comes from mmap. */
static void hm__forked_watch(void) {
  size_t cap = _hm_pl_table_capacity(), n = 0, counted = 0;
  for (int pass = 0; pass < 2; pass++) {
    n = 0;
    for (size_t i = 0; i < cap; i++) {
      _hm_pl_block_t *b = _hm_pl_table_slot(&hm__pl.table, i);
      uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
      if (key == HM_PL_KEY_EMPTY || key == HM_PL_KEY_DELETED || b->backend != HM_PL_PAGER)
        continue;
      if (pass && n == counted) break;
      if (pass) {
        hm__forked.range[n][0] = key - b->off;
        hm__forked.range[n][1] = key - b->off + b->maplen;
      }
      n++;
    }
    if (n == 0) return;
    if (!pass) {
      counted = n;
      void *m = hm__sys_mmap(NULL, n * sizeof *hm__forked.range, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return;
      hm__forked.range = m;
    }
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = hm__forked_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (_hm_pl_real_sigaction(SIGSEGV, &sa, &hm__forked.prev) == 0) hm__forked.n = n;
}

static void hm__atfork_child(void) {
  /* The pager's regions are MADV_DONTFORK and its threads did not come
   * along: this process has none of the parent's large blocks, and their
   * addresses may be reused by anything here, so the table forgets them.
   * New large requests are served by glibc (counted as fallbacks); a child
   * that execs starts afresh with a pager of its own. The child is
   * single-threaded here, so nothing races with the clear. */
  if (atomic_load(&hm__pl.state) != HM__NONE) atomic_store(&hm__pl.state, HM__FORKED);
  if (atomic_load(&hm__pl.large_allocs) != atomic_load(&hm__pl.large_frees)) {
    hm__forked_watch();
    _hm_pl_table_clear(&hm__pl.table);
  }
  atomic_store(&hm__pl.live_bytes, 0);
  atomic_store(&hm__pl.small_exited, 0);
  hm__tls.small = 0;
}

/* Usable size of a glibc block; before dlsym has run, the request. */
static size_t hm__libc_usable_early(void *p, size_t req) {
  return hm__pl.libc_usable ? hm__pl.libc_usable(p) : req;
}

static int hm__fail(int rc, const char *fmt, ...) HM_PRINTF(2, 3);
static int hm__fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(hm__pl.prep_msg, sizeof hm__pl.prep_msg, fmt, ap);
  va_end(ap);
  return rc;
}

static int hm__check_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return hm__fail(-errno, "storage directory '%s': %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return hm__fail(-ENOTDIR, "storage directory '%s': %s", dir, strerror(ENOTDIR));
  if (access(dir, W_OK | X_OK) != 0)
    return hm__fail(-errno, "storage directory '%s': %s", dir, strerror(errno));
  return 0;
}

static void hm__resolve_signals(void); /* with the sigaction hook below */

static void hm__resolve_libc_usable(void) {
  hm__tls.guard++;
  void *sym = dlsym(RTLD_NEXT, "malloc_usable_size");
  hm__tls.guard--;
  if (sym) memcpy(&hm__pl.libc_usable, &sym, sizeof sym); /* object -> function pointer */
}

static int hm__prepare_common(uint64_t thr) {
  int rc;
  if ((rc = _hm_pl_table_init(&hm__pl.table))) return hm__fail(rc, "cannot reserve the block table");
  hm__pl.have_key = pthread_key_create(&hm__pl.thread_key, hm__thread_exit) == 0;
  pthread_atfork(NULL, NULL, hm__atfork_child);
  /* dlsym is safe here: we run from our constructor or from a large
   * allocation, both after libc and the loader are up. */
  hm__resolve_libc_usable();
  hm__resolve_signals();
  atomic_store(&hm__threshold, (size_t)thr);
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

/* The size of a transparent huge page when the kernel backs with them only
 * ranges advised MADV_HUGEPAGE (the usual default), else 0: with "always"
 * every large anonymous range gets them anyway, with "never" none does.
 *
 * Placement advises the large blocks of its DRAM and NUMA tiers
 * (huge_pages, on by default): the sites put there are the hot ones, and
 * `hetmem bench placement --huge-pages-ab` measures it side by side (hot
 * passes 0.70-0.89 of their time with huge pages here). The pager's regions
 * keep small pages: it installs them 4 KiB at a time (UFFDIO_COPY). */
static size_t hm__thp_advise_size(const char *root) {
  char mode[128];
  uint64_t size = 0;
  if (_hm_prim_read_text(root, "/sys/kernel/mm/transparent_hugepage/enabled", mode,
                         sizeof mode) < 0 ||
      !strstr(mode, "[madvise]"))
    return 0;
  if (_hm_prim_read_u64(root, "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", &size) ||
      size < 2 * hm__pl.page || (size & (size - 1)))
    return 0;
  return (size_t)size;
}

/* Profiling and placement: both capture the call site of every large
 * request. */
static int hm__prepare_sites(uint64_t thr, const char *prof, const char *place) {
  int rc;
  uint64_t depth = 8;
  /* named in a refusal below: "cannot start profile mode", not cache mode */
  hm__pl.mode = prof[0] ? HM__M_PROFILE : HM__M_PLACE;
  if (hm_option_get_u64(hm__pl.ctx, "profile_depth", &depth) || depth < 1 ||
      depth > HM_PL_MAX_DEPTH)
    return hm__fail(-EINVAL, "profile_depth must be 1..%d", HM_PL_MAX_DEPTH);
  hm__pl.depth = (int)depth;
  if ((rc = _hm_pl_sites_init())) return hm__fail(rc, "cannot list the loaded modules");
  if ((rc = hm__prepare_common(thr))) return rc;
  char why[HM_ERRMSG_MAX];
  why[0] = 0;
  if (prof[0]) {
    hm__pl.mode = HM__M_PROFILE;
    char sampler[64];
    uint64_t period = 10000;
    if (hm_option_get(hm__pl.ctx, "sampler", sampler, sizeof sampler)) snprintf(sampler, sizeof sampler, "auto");
    if (hm_option_get_u64(hm__pl.ctx, "sample_period", &period)) period = 10000;
    if (period == 0) /* was taken silently as the default */
      return hm__fail(-EINVAL, "sample_period must be at least 1 microsecond (0 given)");
    _hm_pl_prof_cfg_t pc = {prof,   (int)depth,    (size_t)thr,
                            sampler, period, &hm__pl.table, hm_ctx_fsroot(hm__pl.ctx)};
    if ((rc = _hm_pl_prof_start(&pc, why, sizeof why))) return hm__fail(rc, "%s", why);
    atomic_store(&hm__profiling, 1);
    _hm_pl_prof_thread(+1); /* the main thread */
    hm__tls.counted = 1;
    return 0;
  }
  hm__pl.mode = HM__M_PLACE;
  if ((rc = _hm_pl_place_load(place, why, sizeof why))) return hm__fail(rc, "%s", why);
  char pm[16];
  if (hm_option_get(hm__pl.ctx, "place_mode", pm, sizeof pm)) snprintf(pm, sizeof pm, "flat");
  if (strcmp(pm, "flat") && strcmp(pm, "hybrid"))
    return hm__fail(-EINVAL, "place_mode must be flat or hybrid, not '%s'", pm);
  hm__pl.hybrid = strcmp(pm, "hybrid") == 0;
  if (hm_option_get_u64(hm__pl.ctx, "fast_budget", &hm__pl.budget)) hm__pl.budget = 0;
  hm__pl.pstat = calloc(_hm_pl_place_sites() + 1, sizeof *hm__pl.pstat);
  if (!hm__pl.pstat) return hm__fail(-ENOMEM, "out of memory");
  hm__pl.glibc_tier = -1;
  size_t nt = _hm_pl_place_tiers();
  int has_storage = 0;
  for (size_t i = 0; i < nt; i++) {
    const _hm_pl_tier_t *t = _hm_pl_place_tier(i);
    if (i == 0 && (t->numa < 0 || strcmp(t->kind, "dram") == 0) && strcmp(t->kind, "storage"))
      hm__pl.glibc_tier = 0; /* the fastest tier is plain DRAM: glibc serves it */
    if (t->numa < 0 && strcmp(t->kind, "storage") == 0) has_storage = 1;
  }
  if (has_storage) {
    if (!hm_pager_open || !hm_pager_map || !hm_pager_unmap || !hm_pager_config_default)
      return hm__fail(-ENOSYS, "this build of hetmem has no pager (src/sdm)");
    hm_pager_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    hm_pager_config_default(hm__pl.ctx, &cfg);
    hm__pl.fetch_unit = cfg.fetch_unit ? cfg.fetch_unit : 256 << 10;
    if (cfg.backing_dir && (rc = hm__check_dir(cfg.backing_dir))) return rc;
    /* flat: a cache of 16 units of at least 256 KiB (plus room for the pager's own
     * tables); hybrid: what the pinned fast-tier sites leave of the budget */
    uint64_t minimal = 16 * (hm__pl.fetch_unit > (256u << 10) ? hm__pl.fetch_unit : (256u << 10)) +
                       (4u << 20);
    uint64_t pinned = _hm_pl_place_tier(0)->capacity;
    hm__pl.pager_budget = minimal;
    if (hm__pl.hybrid && hm__pl.budget > pinned && hm__pl.budget - pinned > minimal)
      hm__pl.pager_budget = hm__pl.budget - pinned;
    if (hm__pl.ctx->opts.origin[HM_OPT_FETCH_UNIT] == HM_ORIGIN_DEFAULT)
      hm__pl.fetch_unit = hm__place_unit(hm__pl.pager_budget);
  }
  uint64_t huge = 1;
  if (hm_option_get_u64(hm__pl.ctx, "huge_pages", &huge)) huge = 1;
  hm__pl.huge = huge ? hm__thp_advise_size(hm_ctx_fsroot(hm__pl.ctx)) : 0;
  return 0;
}

static int hm__prepare_inner(void) {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg > 0) hm__pl.page = (size_t)pg;
  int rc = hm_ctx_new(&hm__pl.ctx, NULL);
  if (rc) return hm__fail(rc, "%s", hm__pl.ctx ? hm_ctx_last_error(hm__pl.ctx) : hm_strerror(rc));
  uint64_t thr = 0;
  if (hm_option_get_u64(hm__pl.ctx, "alloc_threshold", &thr) || thr < hm__pl.page)
    return hm__fail(-EINVAL, "alloc_threshold must be at least one page (%zu bytes)",
                    hm__pl.page);
  char prof[HM_PATH_MAX], place[HM_PATH_MAX];
  if (hm_option_get(hm__pl.ctx, "profile", prof, sizeof prof)) prof[0] = 0;
  if (hm_option_get(hm__pl.ctx, "placement", place, sizeof place)) place[0] = 0;
  if (hm_option_get(hm__pl.ctx, "stats", hm__pl.stats_path, sizeof hm__pl.stats_path))
    hm__pl.stats_path[0] = 0;
  char policy[256], why[HM_ERRMSG_MAX];
  if (hm_option_get(hm__pl.ctx, "storage_full", policy, sizeof policy)) policy[0] = 0;
  if ((rc = _hm_pl_full_init(policy, why, sizeof why))) return hm__fail(rc, "%s", why);
  if (prof[0] || place[0]) return hm__prepare_sites(thr, prof, place);
  if (hm_option_get_u64(hm__pl.ctx, "fast_budget", &hm__pl.budget) || hm__pl.budget == 0)
    return hm__fail(-EINVAL, "no fast-tier budget: set HETMEM_FAST_BUDGET (e.g. 4G)");
  if (hm_option_get_u64(hm__pl.ctx, "fetch_unit", &hm__pl.fetch_unit) || !hm__pl.fetch_unit)
    hm__pl.fetch_unit = 256 << 10;
  if (hm__pl.budget < hm__pl.fetch_unit)
    return hm__fail(-EINVAL, "fast budget of %llu bytes is smaller than one fetch unit (%llu)",
                    (unsigned long long)hm__pl.budget, (unsigned long long)hm__pl.fetch_unit);
  if (!hm_pager_open || !hm_pager_map || !hm_pager_unmap || !hm_pager_config_default)
    return hm__fail(-ENOSYS, "this build of hetmem has no pager (src/sdm)");
  hm_pager_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  hm_pager_config_default(hm__pl.ctx, &cfg);
  if (cfg.fetch_unit) hm__pl.fetch_unit = cfg.fetch_unit;
  if (cfg.backing_dir && (rc = hm__check_dir(cfg.backing_dir))) return rc;
  hm__pl.pager_budget = hm__pl.budget;
  return hm__prepare_common(thr);
}

static void hm__outputs(void);

static void hm__prepare(void) {
  hm__tls.guard++;
  hm__pl.prep_rc = hm__prepare_inner();
  /* a run stopped by a signal still writes its profile or statistics */
  if (!hm__pl.prep_rc && (hm__pl.mode == HM__M_PROFILE || hm__pl.stats_path[0]))
    _hm_pl_term_catch(hm__outputs);
  hm__tls.guard--;
}

__attribute__((constructor)) static void hm__ctor(void) {
  pthread_once(&hm__pl.once, hm__prepare);
  if (hm__pl.prep_rc) {
    /* Before main: exit() is safe here and flushes nothing of the app's. */
    fprintf(stderr, "hetmem: cannot start %s mode: %s\n", hm__mode_names[hm__pl.mode],
            hm__pl.prep_msg);
    exit(2);
  }
}

/* The mode and its settings, before a large request is routed: a library
 * constructor that runs before hm__ctor (OpenBLAS allocates its buffers in
 * one) makes the first large request while the mode is still unset, and
 * would otherwise be served as in cache mode. Costs one acquire load once
 * prepared (pthread_once), on large requests only. */
static void hm__ensure_prepared(void) {
  pthread_once(&hm__pl.once, hm__prepare);
  if (hm__pl.prep_rc) hm__die_inside_malloc(hm__pl.prep_msg);
}

/* The pager is opened on the first large request: processes that never
 * make one (shells, tools the command spawns) never start its threads. */
static int hm__ensure_pager(void) {
  int s = atomic_load_explicit(&hm__pl.state, memory_order_acquire);
  if (hm_likely(s == HM__READY)) return 0;
  hm__ensure_prepared();
  for (;;) {
    s = HM__NONE;
    if (atomic_compare_exchange_strong(&hm__pl.state, &s, HM__OPENING)) {
      hm_pager_config_t cfg;
      memset(&cfg, 0, sizeof cfg);
      hm_pager_config_default(hm__pl.ctx, &cfg);
      cfg.dram_budget = hm__pl.pager_budget;
      cfg.fetch_unit = hm__pl.fetch_unit; /* placement may choose its own */
      int rc = hm_pager_open(hm__pl.ctx, &cfg, &hm__pl.pager);
      if (rc) {
        const char *m = hm_ctx_last_error(hm__pl.ctx);
        hm__die_inside_malloc(m && *m ? m : hm_strerror(rc));
      }
      atomic_store_explicit(&hm__pl.state, HM__READY, memory_order_release);
      return 0;
    }
    if (s == HM__READY) return 0;
    if (s == HM__FORKED) return -1;
    sched_yield(); /* another thread is opening it (once per process) */
  }
}

/* ------------------------------------------------------------------------
 * Routing and backends
 * ------------------------------------------------------------------------ */
typedef struct hm__req_s {
  size_t size;
  size_t align;   /* 0: the backend's natural alignment (a page or more) */
  uint16_t flags; /* HM_PL_FROM_MMAP */
} hm__req_t;

/* Which backend serves a large request. Placement will look up the
 * allocation site here; cache mode sends everything to the pager. */
static _hm_pl_backend_t hm__route(const hm__req_t *req) {
  (void)req;
  return HM_PL_PAGER;
}

static void hm__account_alloc(size_t req, uint16_t flags) {
  atomic_fetch_add_explicit(&hm__pl.large_allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hm__pl.large_bytes, req, memory_order_relaxed);
  if (flags & HM_PL_FROM_MMAP) atomic_fetch_add_explicit(&hm__pl.mmap_allocs, 1, memory_order_relaxed);
  uint64_t live = atomic_fetch_add_explicit(&hm__pl.live_bytes, req, memory_order_relaxed) + req;
  uint64_t peak = atomic_load_explicit(&hm__pl.peak_live_bytes, memory_order_relaxed);
  while (live > peak && !atomic_compare_exchange_weak_explicit(&hm__pl.peak_live_bytes, &peak, live,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed)) {
  }
}

/* A large request glibc serves instead (the storage tier's failures are
 * full.c's, which has said so). */
static void hm__note_fallback(void) {
  atomic_fetch_add_explicit(&hm__pl.fallbacks, 1, memory_order_relaxed);
}

/* NULL from a large allocation: glibc serves the request, unless the
 * storage tier could not back it under HETMEM_STORAGE_FULL=error; then it
 * fails with ENOMEM. Called on that rare path only. */
static int hm__refused(void) {
  if (hm_likely(!hm__tls.refused)) return 0;
  hm__tls.refused = 0;
  errno = ENOMEM;
  return 1;
}

static void hm__tier_account(int t, size_t req, int sign) {
  if (sign > 0) {
    uint64_t live =
        atomic_fetch_add_explicit(&hm__pl.tier_live[t], req, memory_order_relaxed) + req;
    uint64_t peak = atomic_load_explicit(&hm__pl.tier_peak[t], memory_order_relaxed);
    while (live > peak && !atomic_compare_exchange_weak_explicit(
                              &hm__pl.tier_peak[t], &peak, live, memory_order_relaxed,
                              memory_order_relaxed)) {
    }
  } else {
    atomic_fetch_sub_explicit(&hm__pl.tier_live[t], req, memory_order_relaxed);
  }
}

/* Claims req bytes of tier t's capacity (0 = unlimited); 0 when full. */
static int hm__tier_reserve(int t, size_t req) {
  uint64_t cap = _hm_pl_place_tier((size_t)t)->capacity;
  if (t == 0 && hm__pl.budget && (cap == 0 || cap > hm__pl.budget)) cap = hm__pl.budget;
  if (cap == 0 || (size_t)t + 1 == _hm_pl_place_tiers()) {
    hm__tier_account(t, req, +1);
    return 1;
  }
  uint64_t live = atomic_load_explicit(&hm__pl.tier_live[t], memory_order_relaxed);
  for (;;) {
    if (live + req > cap) return 0;
    if (atomic_compare_exchange_weak_explicit(&hm__pl.tier_live[t], &live, live + req,
                                              memory_order_relaxed, memory_order_relaxed))
      break;
  }
  hm__tier_account(t, 0, +1); /* peak */
  return 1;
}

/* Where a block without an alignment of its own starts in its mapping:
 * 16 bytes in, where glibc puts the blocks it serves from an mmap of their
 * own (behind its chunk header). A page-aligned start changes what
 * alignment-sensitive code does: FFTW plans other codelets for data that is
 * 32-byte aligned, and a 128^3 transform ran 8-10% slower on it here, in
 * cache mode with data that fits. Keeping glibc's placement within the page
 * leaves the program computing as it does without hetmem. Alignments asked
 * for (posix_memalign, aligned_alloc, mmap) are kept as asked. */
static size_t hm__lead(const hm__req_t *req) {
  return req->align <= 16 && !(req->flags & HM_PL_FROM_MMAP) ? 2 * sizeof(size_t) : 0;
}

/* The pager's mapping for a large request, or NULL. */
static void *hm__pager_block(const hm__req_t *req, size_t *maplen_out, uint32_t *off_out) {
  if (hm__ensure_pager() != 0) return NULL;
  size_t unit = (size_t)hm__pl.fetch_unit;
  size_t pad = req->align > hm__pl.page ? req->align : 0;
  size_t lead = hm__lead(req);
  if (req->size > SIZE_MAX - pad - lead - unit) return NULL;
  size_t maplen = (req->size + pad + lead + unit - 1) / unit * unit;
  void *base = NULL;
  int rc = hm_pager_map(hm__pl.pager, maplen, &base);
  if (rc) {
    hm_pager_config_t cfg;
    hm_pager_config_default(hm__pl.ctx, &cfg);
    /* the caller counts the fallback to glibc, unless this refused it */
    if (_hm_pl_full_note(rc, cfg.backing_dir, maplen) == 1) hm__tls.refused = 1;
    return NULL;
  }
  uintptr_t key = (uintptr_t)base;
  if (pad) key = (key + req->align - 1) & ~(uintptr_t)(req->align - 1);
  key += lead;
  *maplen_out = maplen;
  *off_out = (uint32_t)(key - (uintptr_t)base);
  return (void *)key;
}

/* Anonymous memory bound to a NUMA node. */
static void *hm__numa_block(const hm__req_t *req, int node, size_t *maplen_out,
                            uint32_t *off_out) {
  size_t pg = hm__pl.page;
  size_t pad = req->align > pg ? req->align : 0;
  size_t lead = hm__lead(req);
  if (req->size > SIZE_MAX - pad - lead - pg) return NULL;
  size_t maplen = (req->size + pad + lead + pg - 1) / pg * pg;
  void *base = hm__sys_mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
  if (base == MAP_FAILED) return NULL;
  if (_hm_prim_bind_node(base, maplen, node) != 0) {
    hm__sys_munmap(base, maplen);
    return NULL;
  }
  uintptr_t key = (uintptr_t)base;
  if (pad) key = (key + req->align - 1) & ~(uintptr_t)(req->align - 1);
  key += lead;
  *maplen_out = maplen;
  *off_out = (uint32_t)(key - (uintptr_t)base);
  return (void *)key;
}

/* glibc memory, tracked (the fast tier, or any block while profiling). */
static void *hm__glibc_block(const hm__req_t *req, int zero, size_t *maplen_out) {
  void *p = req->align ? __libc_memalign(req->align, req->size)
            : zero     ? __libc_calloc(1, req->size)
                       : __libc_malloc(req->size);
  if (p && req->align && zero) memset(p, 0, req->size);
  if (p) *maplen_out = hm__libc_usable_early(p, req->size);
  return p;
}

static void hm__release_memory(uint16_t backend, void *base, uintptr_t key, size_t maplen) {
  switch (backend) {
  case HM_PL_PAGER:
    if (hm__pl.pager) hm_pager_unmap(hm__pl.pager, base, maplen);
    break;
  case HM_PL_NUMA: hm__sys_munmap(base, maplen); break;
  case HM_PL_FAST: __libc_free((void *)key); break;
  default: break;
  }
}

/* Advises the huge-page-aligned part of a DRAM or NUMA block (see
 * hm__thp_advise_size). One madvise per large block, beside the mmap that
 * serves it; a block of glibc's heap is advised too (glibc's own
 * malloc.hugetlb=1 does the same). */
static void hm__advise_huge(void *p, size_t size) {
  uintptr_t h = hm__pl.huge, a = ((uintptr_t)p + h - 1) & ~(h - 1);
  uintptr_t e = ((uintptr_t)p + size) & ~(h - 1);
  if (e > a && _hm_prim_advise_hugepage((void *)a, e - a) == 0)
    atomic_fetch_add_explicit(&hm__pl.huge_bytes, e - a, memory_order_relaxed);
}

/* Placement: serves req from tier want or, when it is full, the next
 * slower tier with room (the slowest never refuses). site: placement site
 * index or -1. */
static void *hm__place_serve(const hm__req_t *req, int zero, int site, int want) {
  int nt = (int)_hm_pl_place_tiers();
  hm__pstat_t *ps = &hm__pl.pstat[site + 1];
  for (int t = want; t < nt; t++) {
    if (!hm__tier_reserve(t, req->size)) continue;
    const _hm_pl_tier_t *ti = _hm_pl_place_tier((size_t)t);
    size_t maplen = 0;
    uint32_t off = 0;
    uint16_t backend;
    void *p;
    if (t == hm__pl.glibc_tier) {
      backend = HM_PL_FAST;
      p = hm__glibc_block(req, zero, &maplen);
    } else if (ti->numa >= 0) {
      backend = HM_PL_NUMA;
      p = hm__numa_block(req, ti->numa, &maplen, &off);
    } else {
      backend = HM_PL_PAGER;
      p = hm__pager_block(req, &maplen, &off);
    }
    if (p && backend != HM_PL_PAGER && hm__pl.huge) hm__advise_huge(p, req->size);
    if (p) {
      _hm_pl_block_t *b = _hm_pl_table_insert_ex(&hm__pl.table, (uintptr_t)p, off, maplen,
                                                 req->size, backend, req->flags,
                                                 (uint32_t)(site + 1), (uint16_t)t, 0);
      if (b) {
        atomic_fetch_add_explicit(&ps->allocs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&ps->bytes[t], req->size, memory_order_relaxed);
        atomic_fetch_add_explicit(&hm__pl.tier_allocs[t], 1, memory_order_relaxed);
        if (t != want) atomic_fetch_add_explicit(&ps->overflows, 1, memory_order_relaxed);
        hm__account_alloc(req->size, req->flags);
        return p;
      }
      hm__release_memory(backend, (void *)((uintptr_t)p - off), (uintptr_t)p, maplen);
    }
    hm__tier_account(t, req->size, -1);
  }
  return NULL;
}

static int hm__place_want(int site) {
  if (site < 0) return (int)_hm_pl_place_tiers() - 1; /* no site: the slowest tier */
  uint32_t id, tier;
  _hm_pl_place_site((size_t)site, &id, &tier);
  return (int)tier;
}

/* Serves a large request from its backend and records the block; NULL when
 * it cannot (the caller then falls back to glibc). Runs under the guard.
 * zero: the memory must read as zeros (calloc). */
static void *hm__large_alloc_z(const hm__req_t *req, int zero) {
  hm__tls.refused = 0;
  if (hm__tls.guard) return NULL;
  hm__tls.guard++;
  hm__ensure_prepared();
  void *user = NULL;
  if (req->size < atomic_load_explicit(&hm__threshold, memory_order_relaxed))
    goto out; /* the threshold was unset too */
  if (hm__pl.mode == HM__M_PROFILE) {
    _hm_pl_stack_t st;
    _hm_pl_capture(&st, hm__pl.depth);
    uint32_t site = _hm_pl_prof_site(&st);
    size_t maplen = 0;
    user = hm__glibc_block(req, zero, &maplen);
    if (user) {
      if (_hm_pl_table_insert_ex(&hm__pl.table, (uintptr_t)user, 0, maplen, req->size,
                                 HM_PL_FAST, req->flags, site, 0, _hm_pl_prof_now())) {
        _hm_pl_prof_alloc(site, req->size);
        hm__account_alloc(req->size, req->flags);
      } else {
        hm__note_fallback(); /* table full: an untracked glibc block */
      }
    }
    goto out;
  }
  if (hm__pl.mode == HM__M_PLACE) {
    _hm_pl_stack_t st;
    _hm_pl_capture(&st, hm__pl.depth);
    int site = _hm_pl_place_match(&st);
    user = hm__place_serve(req, zero, site, hm__place_want(site));
    if (!user && !hm__tls.refused) hm__note_fallback();
    goto out;
  }
  if (hm__ensure_pager() != 0 || hm__route(req) != HM_PL_PAGER) {
    hm__note_fallback();
    goto out;
  }
  size_t maplen = 0;
  uint32_t off = 0;
  void *key = hm__pager_block(req, &maplen, &off);
  if (!key) {
    if (!hm__tls.refused) hm__note_fallback();
    goto out;
  }
  _hm_pl_block_t *b = _hm_pl_table_insert(&hm__pl.table, (uintptr_t)key, off, maplen,
                                          req->size, HM_PL_PAGER, req->flags);
  if (!b) {
    hm_pager_unmap(hm__pl.pager, (void *)((uintptr_t)key - off), maplen);
    hm__note_fallback();
    goto out;
  }
  hm__account_alloc(req->size, req->flags);
  user = key;
out:
  hm__tls.guard--;
  return user;
}

static void *hm__large_alloc(const hm__req_t *req) { return hm__large_alloc_z(req, 0); }

static void hm__large_free(_hm_pl_block_t *b) {
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  void *base = (void *)(key - b->off);
  size_t maplen = b->maplen;
  size_t req = b->req;
  uint16_t backend = b->backend, tier = b->tier;
  uint32_t site = b->site;
  uint64_t t_alloc = b->t_alloc;
  _hm_pl_table_remove(&hm__pl.table, b);
  atomic_fetch_add_explicit(&hm__pl.large_frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&hm__pl.live_bytes, req, memory_order_relaxed);
  hm__tls.guard++;
  if (hm__pl.mode == HM__M_PROFILE) _hm_pl_prof_release(b, site, t_alloc, key, req);
  if (hm__pl.mode == HM__M_PLACE) hm__tier_account(tier, req, -1);
  hm__release_memory(backend, base, key, maplen);
  hm__tls.guard--;
}

static size_t hm__libc_usable(void *p) {
  if (hm_likely(hm__pl.libc_usable != NULL)) return hm__pl.libc_usable(p);
  return 0; /* only before start-up: callers then keep the block in glibc */
}

/* ------------------------------------------------------------------------
 * The hooks
 * ------------------------------------------------------------------------ */
static inline size_t hm__thr(void) {
  return atomic_load_explicit(&hm__threshold, memory_order_relaxed);
}

static inline _hm_pl_block_t *hm__find(const void *p) {
  if (hm_likely(!_hm_pl_table_maybe(&hm__pl.table, p))) return NULL;
  return _hm_pl_table_find(&hm__pl.table, p);
}

__attribute__((noinline, cold)) static void hm__register_thread(void) {
  /* First small allocation of this thread: have its count flushed when it
   * exits (keys below 32 need no allocation in glibc). */
  if (hm__pl.have_key && !hm__tls.registered) {
    hm__tls.registered = 1;
    pthread_setspecific(hm__pl.thread_key, (void *)1);
    /* the main thread is counted at start-up */
    if (atomic_load_explicit(&hm__profiling, memory_order_relaxed) && getpid() != gettid() &&
        !hm__tls.guard) {
      hm__tls.counted = 1;
      _hm_pl_prof_thread(+1);
    }
  }
}

/* The rare part of counting a small allocation: a thread's first one, or
 * profiling. Out of line, so that the common case stays a few instructions
 * (malloc saves one register and ends in a jump to glibc). */
__attribute__((noinline)) static void hm__count_small_slow(void *ra, size_t size, int first) {
  if (first) hm__register_thread();
  if (atomic_load_explicit(&hm__profiling, memory_order_relaxed) && !hm__tls.guard)
    _hm_pl_prof_small((uintptr_t)ra, size);
}

/* Cost: a TLS increment, one relaxed load and a branch; while profiling,
 * also a probe of this thread's caller table (prof.c). */
static inline void hm__count_small(void *ra, size_t size) {
  int first = hm__tls.small++ == 0;
  if (hm_unlikely(first | atomic_load_explicit(&hm__profiling, memory_order_relaxed)))
    hm__count_small_slow(ra, size, first);
}

/* Kept out of line so that the small path of malloc needs no stack frame. */
__attribute__((noinline)) static void *hm__malloc_large(size_t size) {
  hm__req_t r = {size, 0, 0};
  void *p = hm__large_alloc(&r);
  return p || hm__refused() ? p : __libc_malloc(size);
}

/* Cost of a small malloc: a compare with the threshold, hm__count_small,
 * and a tail call to glibc. */
void *malloc(size_t size) {
  if (hm_likely(size < hm__thr())) {
    hm__count_small(__builtin_return_address(0), size);
    return __libc_malloc(size);
  }
  return hm__malloc_large(size);
}

__attribute__((noinline)) static void hm__free_maybe_ours(void *ptr) {
  _hm_pl_block_t *b = _hm_pl_table_find(&hm__pl.table, ptr);
  if (b) hm__large_free(b);
  else __libc_free(ptr);
}

/* Cost of freeing a glibc block: one byte of the table's 2 MiB-granule map
 * and a tail call to glibc (no stack frame). */
void free(void *ptr) {
  if (hm_likely(!_hm_pl_table_maybe(&hm__pl.table, ptr))) {
    __libc_free(ptr);
    return;
  }
  hm__free_maybe_ours(ptr);
}

void *calloc(size_t nmemb, size_t size) {
  size_t total;
  if (hm_unlikely(__builtin_mul_overflow(nmemb, size, &total))) {
    errno = ENOMEM;
    return NULL;
  }
  if (hm_likely(total < hm__thr())) {
    hm__count_small(__builtin_return_address(0), total);
    return __libc_calloc(nmemb, size);
  }
  hm__req_t r = {total, 0, 0};
  void *p = hm__large_alloc_z(&r, 1); /* pager and NUMA regions start zero-filled */
  return p || hm__refused() ? p : __libc_calloc(nmemb, size);
}

static void *hm__realloc_large(_hm_pl_block_t *b, void *ptr, size_t size) {
  size_t usable = b->maplen - b->off;
  if (size == 0) {
    hm__large_free(b);
    return NULL;
  }
  int stay = 1;
  if (hm__pl.mode == HM__M_PROFILE) {
    stay = 0; /* recorded as a release and an allocation at the caller's site */
  } else if (hm__pl.mode == HM__M_PLACE && size >= hm__thr()) {
    /* the caller's site decides the tier: a block whose site now lives
     * elsewhere moves */
    hm__tls.guard++;
    _hm_pl_stack_t st;
    _hm_pl_capture(&st, hm__pl.depth);
    int want = hm__place_want(_hm_pl_place_match(&st));
    hm__tls.guard--;
    stay = want == (int)b->tier;
  }
  if (stay && size >= hm__thr() && size <= usable) {
    if (hm__pl.mode == HM__M_PLACE) {
      if (size > b->req) hm__tier_account(b->tier, size - b->req, +1);
      else hm__tier_account(b->tier, b->req - size, -1);
    }
    atomic_fetch_add_explicit(&hm__pl.live_bytes, size - b->req, memory_order_relaxed);
    b->req = size;
    return ptr;
  }
  void *n = NULL;
  if (size >= hm__thr()) {
    hm__req_t r = {size, 0, 0};
    n = hm__large_alloc(&r);
    if (!n && hm__refused()) return NULL; /* the old block is untouched */
  }
  if (!n) n = __libc_malloc(size);
  if (!n) return NULL; /* errno is ENOMEM; the old block is untouched */
  memcpy(n, ptr, size < usable ? size : usable);
  atomic_fetch_add_explicit(&hm__pl.realloc_moves, 1, memory_order_relaxed);
  hm__large_free(b);
  return n;
}

void *realloc(void *ptr, size_t size) {
  if (!ptr) return malloc(size);
  _hm_pl_block_t *b = hm__find(ptr);
  if (hm_likely(b == NULL)) {
    if (hm_likely(size < hm__thr()) || hm__tls.guard) return __libc_realloc(ptr, size);
    /* A glibc block grows past the threshold: move it to the tier. */
    size_t old = hm__libc_usable(ptr);
    hm__req_t r = {size, 0, 0};
    void *n = old ? hm__large_alloc(&r) : NULL;
    if (!n) return hm__refused() ? NULL : __libc_realloc(ptr, size);
    memcpy(n, ptr, old < size ? old : size);
    atomic_fetch_add_explicit(&hm__pl.realloc_moves, 1, memory_order_relaxed);
    __libc_free(ptr);
    return n;
  }
  return hm__realloc_large(b, ptr, size);
}

void *reallocarray(void *ptr, size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(ptr, total);
}

static inline int hm__pow2(size_t a) { return a && !(a & (a - 1)); }

static void *hm__aligned(size_t alignment, size_t size, void *ra) {
  if (hm_likely(size < hm__thr()) || !hm__pow2(alignment) || alignment > (1u << 30)) {
    hm__count_small(ra, size);
    return __libc_memalign(alignment, size);
  }
  hm__req_t r = {size, alignment, 0};
  void *p = hm__large_alloc(&r);
  return p || hm__refused() ? p : __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
  return hm__aligned(alignment, size, __builtin_return_address(0));
}

int posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (!hm__pow2(alignment) || alignment % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = hm__aligned(alignment, size, __builtin_return_address(0));
  errno = saved; /* posix_memalign reports through its result only */
  if (!p) return ENOMEM;
  *memptr = p;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
  return hm__aligned(alignment, size, __builtin_return_address(0));
}

void *valloc(size_t size) {
  if (hm_likely(size < hm__thr())) {
    hm__count_small(__builtin_return_address(0), size);
    return __libc_valloc(size);
  }
  return hm__aligned(hm__pl.page, size, __builtin_return_address(0));
}

void *pvalloc(size_t size) {
  size_t pg = hm__pl.page;
  if (size > SIZE_MAX - pg) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = size ? (size + pg - 1) / pg * pg : pg;
  if (hm_likely(rounded < hm__thr())) {
    hm__count_small(__builtin_return_address(0), size);
    return __libc_pvalloc(size);
  }
  return hm__aligned(pg, rounded, __builtin_return_address(0));
}

size_t malloc_usable_size(void *ptr) {
  if (!ptr) return 0;
  _hm_pl_block_t *b = hm__find(ptr);
  if (hm_likely(b == NULL)) {
    if (hm_unlikely(!hm__pl.libc_usable)) hm__resolve_libc_usable();
    return hm__libc_usable(ptr);
  }
  return b->maplen - b->off;
}

/* Only plain private anonymous read-write mappings at a place of the
 * kernel's choosing are ours: anything fixed, shared, huge-page, stack-like
 * or reserved without access stays with the kernel. */
static int hm__mmap_is_ours(void *addr, size_t length, int prot, int flags) {
  const int refuse = MAP_FIXED | MAP_HUGETLB | MAP_GROWSDOWN | MAP_STACK
#ifdef MAP_FIXED_NOREPLACE
                     | MAP_FIXED_NOREPLACE
#endif
      ;
  if (!(addr == NULL && length >= hm__thr() && (flags & MAP_TYPE) == MAP_PRIVATE &&
        (flags & MAP_ANONYMOUS) && !(flags & refuse) && prot == (PROT_READ | PROT_WRITE) &&
        !hm__tls.guard))
    return 0;
  hm__ensure_prepared(); /* the mode is unset before hm__ctor */
  /* profiling and placement leave mmap to the kernel (sites are malloc's) */
  return hm__pl.mode == HM__M_CACHE && length >= hm__thr();
}

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (hm_unlikely(hm__mmap_is_ours(addr, length, prot, flags))) {
    hm__req_t r = {length, 0, HM_PL_FROM_MMAP};
    void *p = hm__large_alloc(&r);
    if (p) return p;
    if (hm__refused()) return MAP_FAILED;
  }
  return hm__sys_mmap(addr, length, prot, flags, fd, offset);
}

extern __typeof(mmap) mmap64 __attribute__((alias("mmap")));

int munmap(void *addr, size_t length) {
  if (hm_likely(hm__tls.guard)) return hm__sys_munmap(addr, length); /* the pager's own */
  _hm_pl_block_t *b = _hm_pl_table_find_containing(&hm__pl.table, addr);
  if (hm_likely(b == NULL) || atomic_load(&hm__pl.state) != HM__READY)
    return hm__sys_munmap(addr, length);
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  uintptr_t start = key - b->off, end = start + b->maplen;
  uintptr_t a = (uintptr_t)addr;
  size_t pg = hm__pl.page;
  uintptr_t e = a + (length + pg - 1) / pg * pg;
  int rc = 0;
  if (e > end) rc = hm__sys_munmap((void *)end, e - end); /* beyond the block: the kernel's */
  if (a <= key && e >= key + (b->req + pg - 1) / pg * pg) {
    hm__large_free(b);
    return rc;
  }
  /* A partial unmap (allocators trimming an over-sized mapping): the range
   * stops holding data; the block is released when a later munmap covers
   * what the application asked for. Reading the range afterwards returns
   * zeros rather than SIGSEGV. */
  if (hm_pager_advise) {
    hm__tls.guard++;
    (void)hm_pager_advise(hm__pl.pager, addr, (size_t)((e < end ? e : end) - a),
                          HM_ADVICE_DONTNEED);
    hm__tls.guard--;
  }
  return rc;
}

/* Advice on a pager block goes to the pager (its prefetcher takes the
 * application's hints); huge-page advice goes to the kernel (the pager
 * copes with THP on its regions: tests/c/test_sdm_thp.c); advice that would
 * change fork inheritance or remove the range is the pager's to decide and
 * is accepted without effect. Other ranges go to the kernel. */
int madvise(void *addr, size_t length, int advice) {
  if (hm_likely(hm__tls.guard || !_hm_pl_table_maybe(&hm__pl.table, addr)))
    return (int)syscall(SYS_madvise, addr, length, advice);
  _hm_pl_block_t *b = _hm_pl_table_find_containing(&hm__pl.table, addr);
  if (!b || atomic_load(&hm__pl.state) != HM__READY || !hm_pager_advise)
    return (int)syscall(SYS_madvise, addr, length, advice);
  uintptr_t start = atomic_load_explicit(&b->key, memory_order_relaxed) - b->off;
  uintptr_t a = (uintptr_t)addr;
  size_t len = a + length > start + b->maplen ? (size_t)(start + b->maplen - a) : length;
  hm_advice_t hint;
  switch (advice) {
  case MADV_NORMAL: hint = HM_ADVICE_NORMAL; break;
  case MADV_WILLNEED: hint = HM_ADVICE_WILLNEED; break;
  case MADV_SEQUENTIAL: hint = HM_ADVICE_SEQUENTIAL; break;
  case MADV_RANDOM: hint = HM_ADVICE_RANDOM; break;
  case MADV_DONTNEED:
#ifdef MADV_FREE
  case MADV_FREE:
#endif
    hint = HM_ADVICE_DONTNEED;
    break;
  case MADV_HUGEPAGE:
  case MADV_NOHUGEPAGE: return (int)syscall(SYS_madvise, addr, len, advice);
  default: return 0;
  }
  hm__tls.guard++;
  (void)hm_pager_advise(hm__pl.pager, addr, len, hint);
  hm__tls.guard--;
  return 0;
}

void *mremap(void *old_address, size_t old_size, size_t new_size, int flags, ...) {
  void *new_address = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_address = va_arg(ap, void *);
    va_end(ap);
  }
  _hm_pl_block_t *b = hm__find(old_address);
  if (hm_likely(b == NULL))
    return (void *)syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address);
  size_t usable = b->maplen - b->off;
  if (new_size == 0 || (flags & MREMAP_FIXED)
#ifdef MREMAP_DONTUNMAP
      || (flags & MREMAP_DONTUNMAP)
#endif
  ) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (new_size <= usable) {
    atomic_fetch_add_explicit(&hm__pl.live_bytes, new_size - b->req, memory_order_relaxed);
    b->req = new_size;
    return old_address;
  }
  if (!(flags & MREMAP_MAYMOVE)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  hm__req_t r = {new_size, 0, HM_PL_FROM_MMAP};
  void *n = hm__large_alloc(&r);
  if (!n) {
    n = hm__sys_mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (n == MAP_FAILED) return MAP_FAILED;
  }
  memcpy(n, old_address, old_size < usable ? old_size : usable);
  atomic_fetch_add_explicit(&hm__pl.realloc_moves, 1, memory_order_relaxed);
  hm__large_free(b);
  return n;
}

/* Threads started from inside hetmem (the pager's fault handlers) run with
 * the guard set for their whole life, so whatever they allocate comes from
 * glibc and can never recurse into the pager. */
typedef struct hm__tramp_s {
  void *(*start)(void *);
  void *arg;
} hm__tramp_t;

static void *hm__tramp(void *p) {
  hm__tramp_t t = *(hm__tramp_t *)p;
  __libc_free(p);
  hm__tls.guard = 1;
  return t.start(t.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                   void *arg) {
  if (hm_unlikely(!hm__pl.real_pthread_create)) {
    /* First call (never on an allocation path): dlsym may allocate. */
    hm__tls.guard++;
    void *sym = dlsym(RTLD_NEXT, "pthread_create");
    hm__tls.guard--;
    if (!sym) return EAGAIN;
    memcpy(&hm__pl.real_pthread_create, &sym, sizeof sym);
  }
  if (hm_likely(!hm__tls.guard)) return hm__pl.real_pthread_create(thread, attr, start, arg);
  hm__tramp_t *t = __libc_malloc(sizeof *t);
  if (!t) return EAGAIN;
  t->start = start;
  t->arg = arg;
  int rc = hm__pl.real_pthread_create(thread, attr, hm__tramp, t);
  if (rc) __libc_free(t);
  return rc;
}

/* Signal dispositions. While the portable access sampler runs (profile
 * mode) its SIGSEGV handler must stay installed: a program that sets its
 * own (gfortran's runtime does, for its backtraces) has it kept aside and
 * called for every fault that is not the sampler's, and reads it back as
 * its own. SIGINT, SIGTERM and SIGHUP at their default are term.c's.
 * Everything else goes to glibc. The real sigaction is looked up once at
 * start-up (hm__prepare_common), or here on a call before it. */
static int (*hm__real_sigaction)(int, const struct sigaction *, struct sigaction *);

static void hm__resolve_signals(void) {
  hm__tls.guard++;
  void *a = dlsym(RTLD_NEXT, "sigaction");
  hm__tls.guard--;
  if (a) memcpy(&hm__real_sigaction, &a, sizeof a);
}

int _hm_pl_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (hm_unlikely(!hm__real_sigaction)) hm__resolve_signals();
  if (!hm__real_sigaction) {
    errno = ENOSYS;
    return -1;
  }
  return hm__real_sigaction(sig, act, old);
}

void _hm_pl_set_default(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  (void)_hm_pl_real_sigaction(sig, &dfl, NULL);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (sig == SIGSEGV && _hm_pl_prof_segv_action(act, old)) return 0;
  int rc;
  if (_hm_pl_term_action(sig, act, old, &rc)) return rc;
  return _hm_pl_real_sigaction(sig, act, old);
}

__sighandler_t signal(int sig, __sighandler_t handler) {
  /* glibc's signal() is sigaction with BSD semantics: the hook above
   * decides for both */
  struct sigaction sa, was;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, sig);
  return sigaction(sig, &sa, &was) ? SIG_ERR : was.sa_handler;
}

/* ------------------------------------------------------------------------
 * Statistics at exit
 * ------------------------------------------------------------------------ */
static void hm__bytes_json(_hm_sb_t *sb, const hm__pstat_t *ps, size_t nt) {
  _hm_sb_puts(sb, "[");
  for (size_t t = 0; t < nt; t++)
    _hm_sb_printf(sb, "%s%llu", t ? "," : "", (unsigned long long)atomic_load(&ps->bytes[t]));
  _hm_sb_puts(sb, "]");
}

/* Per-site placement outcomes (docs/formats.md, "Interposer statistics"). */
static void hm__placement_json(_hm_sb_t *sb) {
  size_t nt = _hm_pl_place_tiers(), ns = _hm_pl_place_sites();
  uint64_t hits = 0, misses = 0;
  uint32_t matched = 0, loaded = 0;
  _hm_pl_place_cache_counts(&hits, &misses);
  _hm_pl_place_module_counts(&matched, &loaded);
  _hm_sb_printf(sb,
                ",\"placement\":{\"place_mode\":\"%s\",\"pager_budget\":%llu,"
                "\"huge_page_size\":%zu,\"huge_page_bytes\":%llu,"
                "\"match_cache\":{\"hits\":%llu,\"misses\":%llu},"
                "\"modules\":{\"loaded\":%u,\"matched\":%u},\"tiers\":[",
                hm__pl.hybrid ? "hybrid" : "flat", (unsigned long long)hm__pl.pager_budget,
                hm__pl.huge, (unsigned long long)atomic_load(&hm__pl.huge_bytes),
                (unsigned long long)hits, (unsigned long long)misses, loaded, matched);
  for (size_t t = 0; t < nt; t++) {
    const _hm_pl_tier_t *ti = _hm_pl_place_tier(t);
    _hm_sb_printf(sb,
                  "%s{\"index\":%zu,\"kind\":\"%s\",\"numa_node\":%d,\"capacity\":%llu,"
                  "\"served_by\":\"%s\",\"allocations\":%llu,\"live_bytes\":%llu,"
                  "\"peak_bytes\":%llu}",
                  t ? "," : "", t, ti->kind, ti->numa, (unsigned long long)ti->capacity,
                  (int)t == hm__pl.glibc_tier ? "glibc" : ti->numa >= 0 ? "mbind" : "pager",
                  (unsigned long long)atomic_load(&hm__pl.tier_allocs[t]),
                  (unsigned long long)atomic_load(&hm__pl.tier_live[t]),
                  (unsigned long long)atomic_load(&hm__pl.tier_peak[t]));
  }
  _hm_sb_puts(sb, "],\"unmatched\":{\"allocations\":");
  _hm_sb_printf(sb, "%llu,\"overflows\":%llu,\"bytes\":",
                (unsigned long long)atomic_load(&hm__pl.pstat[0].allocs),
                (unsigned long long)atomic_load(&hm__pl.pstat[0].overflows));
  hm__bytes_json(sb, &hm__pl.pstat[0], nt);
  _hm_sb_puts(sb, "},\"sites\":[");
  const char *sep = "";
  for (size_t i = 0; i < ns; i++) {
    const hm__pstat_t *ps = &hm__pl.pstat[i + 1];
    if (!atomic_load(&ps->allocs)) continue;
    uint32_t id, tier;
    _hm_pl_place_site(i, &id, &tier);
    _hm_sb_printf(sb, "%s{\"id\":%u,\"tier\":%u,\"allocations\":%llu,\"overflows\":%llu,"
                      "\"bytes\":",
                  sep, id, tier, (unsigned long long)atomic_load(&ps->allocs),
                  (unsigned long long)atomic_load(&ps->overflows));
    hm__bytes_json(sb, ps, nt);
    _hm_sb_puts(sb, "}");
    sep = ",";
  }
  _hm_sb_puts(sb, "]}");
}

static void hm__stats_json(_hm_sb_t *sb) {
  char exe[HM_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  uint64_t small = atomic_load(&hm__pl.small_exited) + hm__tls.small;
  _hm_sb_printf(sb,
                "{\"schema_version\":1,\"pid\":%ld,\"ppid\":%ld,\"stopped_by_signal\":%d,"
                "\"exe\":",
                (long)getpid(), (long)getppid(), _hm_pl_term_signal());
  _hm_sb_json_str(sb, exe);
  _hm_sb_printf(sb,
                ",\"threshold\":%zu,\"budget\":%llu,\"interposer\":{"
                "\"large_allocations\":%llu,\"large_frees\":%llu,\"large_bytes\":%llu,"
                "\"live_large_bytes\":%llu,\"peak_live_large_bytes\":%llu,"
                "\"mmap_allocations\":%llu,\"fallbacks\":%llu,\"realloc_moves\":%llu,"
                "\"small_allocations\":%llu,\"table_capacity\":%zu,\"hooks\":[",
                hm__thr(), (unsigned long long)hm__pl.budget,
                (unsigned long long)atomic_load(&hm__pl.large_allocs),
                (unsigned long long)atomic_load(&hm__pl.large_frees),
                (unsigned long long)atomic_load(&hm__pl.large_bytes),
                (unsigned long long)atomic_load(&hm__pl.live_bytes),
                (unsigned long long)atomic_load(&hm__pl.peak_live_bytes),
                (unsigned long long)atomic_load(&hm__pl.mmap_allocs),
                (unsigned long long)atomic_load(&hm__pl.fallbacks),
                (unsigned long long)atomic_load(&hm__pl.realloc_moves), (unsigned long long)small,
                _hm_pl_table_capacity());
  const char *sep = "";
#define HM__NAME(ret, name, params) _hm_sb_printf(sb, "%s\"" #name "\"", sep), sep = ",";
  HM_PL_HOOKS(HM__NAME)
#undef HM__NAME
  _hm_sb_puts(sb, "]}");
  _hm_sb_printf(sb, ",\"mode\":\"%s\"", hm__mode_names[hm__pl.mode]);
  _hm_pl_full_json(sb);
  if (hm__pl.mode == HM__M_PLACE) hm__placement_json(sb);
  _hm_sb_puts(sb, ",\"pager\":");
  char *pj = NULL;
  if (atomic_load(&hm__pl.state) == HM__READY && hm__pl.pager && hm_pager_stats_json &&
      hm_pager_stats_json(hm__pl.pager, &pj) == 0 && pj) {
    _hm_sb_puts(sb, pj);
    hm_free(pj);
  } else {
    _hm_sb_puts(sb, "null");
  }
  _hm_sb_puts(sb, "}\n");
}

/* Writes the profile (profile mode) and appends one JSON line of statistics
 * per process (a command's children inherit the setting, and each process
 * has its own pager): O_APPEND with a single write keeps concurrent
 * writers' lines whole, and never through a symbolic link (outfile.c).
 * Once per process: at exit, or on the finisher
 * thread of a run stopped by a signal (term.c); a second caller waits for
 * the first rather than let the process end mid-write. The pager is
 * deliberately not closed: other destructors may still touch large blocks,
 * and the kernel reclaims everything (backing files were unlinked at
 * creation). */
static void hm__outputs(void) {
  static _Atomic int state; /* 0 not yet, 1 being written, 2 written */
  int was = 0;
  if (!atomic_compare_exchange_strong(&state, &was, 1)) {
    for (int i = 0; i < 10000 && atomic_load(&state) != 2; i++) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    return;
  }
  int saved = errno;
  hm__tls.guard++;
  if (hm__pl.mode == HM__M_PROFILE) _hm_pl_prof_finish();
  if (hm__pl.stats_path[0]) {
    _hm_sb_t sb;
    _hm_sb_init(&sb);
    hm__stats_json(&sb);
    char *text = NULL;
    if (_hm_sb_take(&sb, &text) == 0 && text) {
      char why[256], msg[HM_PATH_MAX + 320];
      if (_hm_pl_out_append(hm__pl.stats_path, text, why, sizeof why) != 0) {
        snprintf(msg, sizeof msg, "warning: statistics not written to '%s': %s",
                 hm__pl.stats_path, why);
        hm__say(msg);
      }
      hm_free(text);
    }
  }
  hm__tls.guard--;
  atomic_store(&state, 2);
  errno = saved;
}

__attribute__((destructor)) static void hm__dtor(void) {
  if (hm__pl.prep_rc || !hm__pl.ctx) return;
  hm__outputs();
}
