/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager: a userfaultfd-driven DRAM cache over O_DIRECT backing files.
 *
 * Layout. Each region is a memfd (shmem) mapped twice: the application's
 * view, registered MISSING|MINOR|WP with the userfaultfd, and an alias that
 * is not registered. A fill reads the backing file with O_DIRECT straight
 * into the alias (the page lands in the memfd's page cache, no bounce copy)
 * and UFFDIO_CONTINUE maps it into the application's view (HM_PAGER_MEMFD).
 * By default, and on kernels without MINOR faults on shmem, regions are
 * private anonymous memory filled through bounce buffers with UFFDIO_COPY,
 * which measured faster (see hm__uffd_want). Regions are split into fetch
 * units (64 KiB..2 MiB); a unit is the grain of eviction and write-back,
 * while a fill may cover single pages of it (random access) or all of it.
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
 *    residency). Eviction re-protects it before writing back. A unit seen
 *    written in its last two residencies is filled unprotected and taken
 *    as dirty for the next two (evict.c, hm__guess_dirty).
 *  - all: no write-protect: every resident unit is written back.
 * Units never written back are "zero" units: their fill is a fallocate of
 * the memfd (or a COPY of zeros), no I/O.
 *
 * Budget. One hard cap per pager: cache pages (filled or being filled) plus
 * the pager's own memory (slot table, bounce buffers, per-region unit
 * tables) never exceed cfg.dram_budget. Eviction takes first the units a
 * sequential stream has passed in a region larger than the cache (queued
 * by _hm_sdm_demote_behind in demote.c), the most recently passed first, so
 * that a region swept over and over keeps what a sweep passed first; then
 * it runs CLOCK over the resident units with a reference bit set on
 * faults, and extra turns for units of randomly read regions that came
 * back soon after their last eviction (heat: the pager sees no access to
 * data that is all filled, so this is how hot tables stay); prefetched
 * units that the hand has passed once without their being touched go
 * first (wasted prefetch).
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
 * back in a small pool (HM_SDM_HELD pages, charged to the budget; a plan
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
 * and faults again if it must (a fault on a unit whose pages are being
 * copied in waits for that copy's wake). Failed resolutions (EEXIST,
 * ENOENT, EAGAIN) are followed by an explicit UFFDIO_WAKE, never treated
 * as fatal. Eviction frees its victims' pages in one process_madvise per
 * batch (one TLB shootdown, evict.c).
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
 * the child is SIGSEGV) and never reads zeros where data was. The
 * interposer gives a forked child a copy of its blocks made at the fork
 * (preload/fork.c).
 * Signals: the handler threads block every signal; a faulting thread that
 * takes a signal simply retries its access after the handler.
 *
 * Re-entrancy: map/unmap may be called from inside malloc (the preload
 * interposer). The pager never calls malloc with its mutex held, and every
 * allocation whose size grows with the region (unit tables) is an mmap, so a
 * nested malloc can neither deadlock nor recurse into the pager.
 *
 * Files. pager_int.h: the shared structures (pager, handler, fill op) and
 * the small helpers the files share, inline. pager.c: configuration and
 * open/close (config checks, userfaultfd negotiation, cache sizing, handler
 * start). handler.c: the handler threads (poll loop, fault reading,
 * deferred retries, WILLNEED, prefetch plans and their reads). copier.c:
 * the thread beside each handler that installs completed prefetch fills
 * in anonymous mode while the handler serves faults. fault.c: the
 * fault path (in transit, write-protect, hit, readahead trigger, miss) and
 * fills (start, completion). demote.c: the queues of units streams passed
 * and of units advised cold. evict.c: the slot table, CLOCK, taking from
 * those queues, dirty victims and write-back. region.c: map,
 * unmap, advise, flush. stats.c: statistics and their JSON. prefetch.c:
 * the stream detector. sparse.c: sweeps that use a few pages of every
 * unit, the same ones each pass, found and filled page by page. guard.c:
 * the budget and I/O-error guards. Every
 * OS call goes through prim/ (prim.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "sdm/pager_int.h"

/* ------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------ */

static const char *hm__storage_default(const hm_ctx_t *ctx) {
  const char *s = _hm_opt_str(ctx, HM_OPT_STORAGE);
  if (s && *s) return s;
  /* The option's documented fallback: TMPDIR, then /var/tmp. */
  s = _hm_prim_getenv("TMPDIR");
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
  cfg->handler_threads = ctx ? (uint32_t)_hm_opt_u64(ctx, HM_OPT_HANDLER_THREADS) : 0;
  cfg->flags = ctx && !_hm_opt_u64(ctx, HM_OPT_COPIER) ? HM_PAGER_NO_COPIER : 0;
  if (ctx && _hm_opt_u64(ctx, HM_OPT_BUDGET_PROCESS)) cfg->flags |= HM_PAGER_PROCESS_BUDGET;
  if (ctx && !strcmp(_hm_opt_str(ctx, HM_OPT_PAGER_FILL), "memfd")) cfg->flags |= HM_PAGER_MEMFD;

}

/* The backing directory: a directory on a disk where O_DIRECT files can
 * be made. */
static int hm__check_dir(hm_ctx_t *ctx, const char *dir) {
  if (!dir || !*dir) return _hm_error(ctx, -EINVAL, "no backing directory given for the pager");
  int isdir = _hm_prim_stat_dir(dir);
  if (isdir < 0)
    return _hm_error(ctx, isdir, "backing directory '%s': %s", dir, hm_strerror(isdir));
  if (!isdir) return _hm_error(ctx, -ENOTDIR, "backing directory '%s' is not a directory", dir);
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
  (void)_hm_prim_close(fd);
  _hm_prim_fsinfo_t fs;
  if (_hm_prim_fs_info(dir, &fs) == 0 &&
      (fs.fs_magic == 0x01021994ull || fs.fs_magic == 0x858458f6ull))
    return _hm_error(ctx, -EINVAL,
                     "backing directory '%s' is on tmpfs/ramfs, which is memory, not a "
                     "storage tier: choose a directory on a disk",
                     dir);
  return 0;
}

/* A word option of the pager (a, b or c; c may be NULL): anything else is a
 * one-line error, where hm_pager_config_default would have taken the
 * default without a word (HETMEM_PREFETCH=of ran with prefetch on). */
static int hm__check_word(hm_ctx_t *ctx, _hm_opt_id_t id, const char *name, const char *a,
                          const char *b, const char *c) {
  const char *v = ctx ? _hm_opt_str(ctx, id) : a;
  if (!strcmp(v, a) || !strcmp(v, b) || (c && !strcmp(v, c))) return 0;
  if (c) return _hm_error(ctx, -EINVAL, "%s must be %s, %s or %s, not '%s'", name, a, b, c, v);
  return _hm_error(ctx, -EINVAL, "%s must be %s or %s, not '%s'", name, a, b, v);
}

/* Copies cfg_in into cfg and checks it; an error message set. */
static int hm__check_config(hm_ctx_t *ctx, const hm_pager_config_t *cfg_in,
                            hm_pager_config_t *cfg) {
  if (!cfg_in || cfg_in->size < offsetof(hm_pager_config_t, flags) ||
      cfg_in->version != HM_PAGER_CONFIG_VERSION)
    return _hm_error(ctx, -EINVAL, "hm_pager_open: config is missing or of another version");
  memset(cfg, 0, sizeof *cfg);
  memcpy(cfg, cfg_in, cfg_in->size < sizeof *cfg ? cfg_in->size : sizeof *cfg);
  cfg->size = sizeof *cfg;
  int rc = hm__check_word(ctx, HM_OPT_PREFETCH, "prefetch", "auto", "off", "sequential");
  if (!rc) rc = hm__check_word(ctx, HM_OPT_PAGER_FILL, "pager_fill", "anon", "memfd", NULL);
  if (rc) return rc;
  uint64_t unit = cfg->fetch_unit;
  if (unit < 64 * 1024 || unit > 2 * 1024 * 1024 || (unit & (unit - 1)))
    return _hm_error(ctx, -EINVAL,
                     "fetch unit %llu is not a power of two between 64 KiB and 2 MiB",
                     (unsigned long long)unit);
  if (cfg->dram_budget < unit)
    return _hm_error(ctx, -EINVAL, "budget %llu is smaller than one fetch unit %llu",
                     (unsigned long long)cfg->dram_budget, (unsigned long long)unit);
  if (cfg->io_depth == 0) cfg->io_depth = 32;
  if (cfg->io_depth > 4096)
    return _hm_error(ctx, -EINVAL, "io_depth %u is above 4096", cfg->io_depth);
  if (cfg->prefetch > HM_PREFETCH_SEQUENTIAL)
    return _hm_error(ctx, -EINVAL, "unknown prefetch policy %d", (int)cfg->prefetch);
  rc = _hm_sdm_check_budget(ctx, cfg->dram_budget);
  if (!rc) rc = hm__check_dir(ctx, cfg->backing_dir);
  return rc;
}

/* ------------------------------------------------------------------------
 * Teardown
 * ------------------------------------------------------------------------ */

static void hm__free_handlers(hm_pager_t *p) {
  for (unsigned i = 0; i < p->nh; i++) {
    _hm_sdm_handler_t *h = &p->h[i];
    _hm_sdm_copier_free(h); /* installs what it holds: uses ops and bounce */
    _hm_prim_ring_free(h->ring);
    _hm_prim_ring_free(h->wring);
    if (h->wbfd >= 0) (void)_hm_prim_close(h->wbfd);
    _hm_sdm_evict_fini(h);
    free(h->ops);
    free(h->pops);
    free(h->def);
    free(h->vec);
    if (h->bounce) (void)_hm_prim_vm_unmap(h->bounce, h->bounce_bytes);
    if (h->pbounce) (void)_hm_prim_vm_unmap(h->pbounce, (size_t)HM_SDM_PAGE_OPS * HM_SDM_PAGE);
  }
  free(p->h);
  p->h = NULL;
}

/* Stops the handler threads and frees what open made, whatever it got to. */
static void hm__destroy(hm_pager_t *p) {
  if (p->h) {
    atomic_store(&p->stop, 1);
    uint64_t one = (uint64_t)p->nh;
    if (p->evfd >= 0) (void)_hm_prim_write(p->evfd, &one, sizeof one);
    for (unsigned i = 0; i < p->nh; i++)
      if (p->h[i].started) pthread_join(p->h[i].th, NULL);
    hm__free_handlers(p);
  }
  if (p->slots) (void)_hm_prim_vm_unmap(p->slots, p->slots_bytes);
  if (p->zeros) (void)_hm_prim_vm_unmap(p->zeros, p->unit);
  if (p->held) (void)_hm_prim_vm_unmap(p->held, (size_t)HM_SDM_HELD * HM_SDM_PAGE);
  if (p->demq.e) (void)_hm_prim_vm_unmap(p->demq.e, 2 * HM_SDM_DEMQ * sizeof(_hm_sdm_vqe_t));
  if (p->uffd >= 0) (void)_hm_prim_close(p->uffd);
  if (p->pagemap >= 0) (void)_hm_prim_close(p->pagemap);
  if (p->evfd >= 0) (void)_hm_prim_close(p->evfd);
  if (p->pidfd >= 0) (void)_hm_prim_close(p->pidfd);
  free(p->regs);
  pthread_mutex_destroy(&p->lk);
  pthread_cond_destroy(&p->cv);
  free(p);
}

/* hm__destroy, then the error; returns it. */
static int hm__fail(hm_pager_t *p, int rc, const char *what) {
  hm_ctx_t *ctx = p->ctx;
  hm__destroy(p);
  return _hm_error(ctx, rc, "%s", what);
}

/* ------------------------------------------------------------------------
 * Userfaultfd negotiation
 * ------------------------------------------------------------------------ */

/* The features to ask for. Fill mode: the default is anonymous memory +
 * UFFDIO_COPY from bounce buffers that O_DIRECT fills, although it copies
 * each page once more: measured with tests/c/sdm_perf (budget 256 MiB, unit
 * 256 KiB, 2 shared vCPUs, Linux 6.18), the sequential scan at 2x reached
 * 68-79% of raw O_DIRECT in anonymous mode against 32-45% with memfd +
 * CONTINUE (HM_PAGER_MEMFD), in the same runs. The memfd mode's cost is
 * kernel CPU time, not copies: every fill allocates and zeroes shmem pages
 * and every eviction frees them with a punch-hole (~0.7 ms of CPU per MiB
 * against ~0.4 ms for COPY + MADV_DONTNEED, single-threaded
 * microbenchmark). UFFDIO_MOVE (6.8+) would recycle pages with no copy
 * (~0.15 ms/MiB), but it maps the pages writable with no uffd-wp bit and no
 * MODE_WP exists: a write by another thread between the MOVE and the
 * re-protection would escape dirty tracking, so it is not used.
 * Features: asked for according to the flags, granted by the kernel. */
static uint64_t hm__uffd_want(uint32_t flags) {
  uint64_t want = UFFD_FEATURE_THREAD_ID;
#ifdef UFFD_FEATURE_EXACT_ADDRESS
  /* 5.18+: the byte a thread faulted on, so that a sparse sweep's stride
   * is exact where its rows are not whole pages apart (sparse.c) */
  want |= UFFD_FEATURE_EXACT_ADDRESS;
#endif
  if (!(flags & HM_PAGER_NO_WP)) want |= UFFD_FEATURE_PAGEFAULT_FLAG_WP;
  if ((flags & HM_PAGER_MEMFD) && !(flags & HM_PAGER_NO_MINOR)) {
    want |= UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_MISSING_SHMEM;
    if (!(flags & HM_PAGER_NO_WP)) want |= UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
    if (!(flags & (HM_PAGER_NO_WP | HM_PAGER_NO_WP_ASYNC))) want |= UFFD_FEATURE_WP_ASYNC;
  }
  return want;
}

/* Opens the userfaultfd (p->uffd, p->features); an error message set, p
 * destroyed on failure. */
static int hm__uffd_open(hm_pager_t *p, uint64_t want) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = _hm_prim_uffd_open(want, &p->features);
    if (fd == -EPERM || fd == -EACCES)
      return hm__fail(p, -EPERM,
                      "userfaultfd is not permitted for this process: run as root or set "
                      "sysctl vm.unprivileged_userfaultfd=1");
    if (fd < 0) {
      hm_ctx_t *ctx = p->ctx;
      hm__destroy(p);
      return _hm_error(ctx, fd == -ENOSYS ? -ENOSYS : fd, "userfaultfd is unavailable: %s",
                       hm_strerror(fd));
    }
    p->uffd = fd;
    int minor = (p->features & UFFD_FEATURE_MINOR_SHMEM) != 0;
    if (minor || !(p->features & UFFD_FEATURE_WP_ASYNC)) break;
    /* Anonymous mode tracks dirt synchronously: ask again without it. */
    (void)_hm_prim_close(fd);
    p->uffd = -1;
    want &= ~(uint64_t)UFFD_FEATURE_WP_ASYNC;
  }
  return 0;
}

/* Fill and dirty-tracking modes from the features granted; an error
 * message set, p destroyed on failure. */
static int hm__pick_modes(hm_pager_t *p) {
  uint64_t ft = p->features;
  p->memfd_mode = (ft & UFFD_FEATURE_MINOR_SHMEM) != 0;
  if (!p->memfd_mode) {
    if (!(ft & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
      return hm__fail(p, -ENOSYS,
                      "the pager needs userfaultfd minor faults on shmem (Linux 5.14) or "
                      "write-protect on anonymous memory (Linux 5.7)");
    p->dirty_mode = HM_SDM_DIRTY_SYNC;
  } else if (ft & UFFD_FEATURE_WP_ASYNC) {
    p->pagemap = _hm_prim_pagemap_open();
    /* WP_ASYNC without PAGEMAP_SCAN cannot be: treat as no WP at all. */
    p->dirty_mode = p->pagemap < 0 ? HM_SDM_DIRTY_ALL : HM_SDM_DIRTY_ASYNC;
  } else if ((ft & UFFD_FEATURE_WP_HUGETLBFS_SHMEM) && (ft & UFFD_FEATURE_PAGEFAULT_FLAG_WP) &&
             _hm_prim_uffd_continue_wp_works(p->uffd)) {
    p->dirty_mode = HM_SDM_DIRTY_SYNC;
  } else {
    /* Synchronous write-protect in memfd mode maps each fill with
     * UFFDIO_CONTINUE_MODE_WP (Linux 6.6): before it, the call fails with
     * EINVAL and the faulting thread was never woken (found on 6.1 in
     * the tests/vm guest). Mapping first and protecting after would let
     * another thread write unseen in between, so these kernels write back
     * every evicted unit instead. */
    p->dirty_mode = HM_SDM_DIRTY_ALL;
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Cache sizing
 * ------------------------------------------------------------------------ */

/* Reads in flight per handler (ops) and the bytes of its bounce buffers. */
typedef struct hm__sizing_s {
  unsigned nops;
  size_t bounce;
} hm__sizing_t;

static unsigned hm__handler_count(unsigned asked) {
  unsigned nh = asked;
  if (nh == 0) nh = _hm_prim_ncpus() >= 8 ? 2 : 1;
  return nh > 16 ? 16 : nh;
}

/* The slot table: a slot per 8 KiB of budget, at least 4 per unit of cache. */
static void hm__size_slots(hm_pager_t *p, uint64_t budget) {
  uint64_t cache_units = budget / p->unit;
  uint64_t nslots = budget / (8 * 1024);
  if (nslots < 4 * cache_units) nslots = 4 * cache_units;
  if (nslots < 4) nslots = 4;
  if (nslots > (1u << 30)) nslots = 1u << 30;
  p->nslots = (uint32_t)nslots;
  p->slots_bytes = (nslots * (sizeof(_hm_sdm_slot_t) + sizeof(uint32_t)) + HM_SDM_PAGE - 1) &
                   ~(size_t)(HM_SDM_PAGE - 1);
}

/* Reads in flight per handler; in anonymous mode one bounce buffer per
 * read: up to 8 MiB of them per handler (the device's sequential depth),
 * at most 1/32 of the budget, at least 2. The buffers are charged to the
 * budget, so below 256 MiB they are the cache's: at 64 MiB, 1/4 of the
 * budget left the cache 55 MiB and 1/32 leaves it 61; GUPS read4k at 2x
 * faulted 7% less and ran 23.0-28.3k against 28.8-30.3k lookups/s, the
 * read-modify-write scan 2.30-2.73 against 3.13-3.27 GB/s, the read scan
 * and STREAM triad alike (3 rounds each, HETMEM_IO_DEPTH=8 and 32). */
static hm__sizing_t hm__size_ops(const hm_pager_t *p, const hm_pager_config_t *cfg) {
  hm__sizing_t z = {cfg->io_depth, 0};
  if (p->memfd_mode) return z;
  uint64_t lim = (8u << 20) / p->unit;
  uint64_t blim = cfg->dram_budget / 32 / p->unit / p->nh;
  if (lim > blim) lim = blim;
  if (lim < 2) lim = 2;
  z.nops = z.nops > lim ? (unsigned)lim : z.nops;
  z.bounce = (size_t)z.nops * p->unit;
  return z;
}

/* The pager's own memory is charged to the budget first; what is left is
 * the cache. An error message set, p destroyed on failure. */
static int hm__size_cache(hm_pager_t *p, hm_pager_config_t *cfg, hm__sizing_t *z) {
  p->nh = hm__handler_count(cfg->handler_threads);
  cfg->handler_threads = p->nh;
  hm__size_slots(p, cfg->dram_budget);
  *z = hm__size_ops(p, cfg);
  p->own = p->slots_bytes + (uint64_t)p->nh * z->bounce + (p->memfd_mode ? 0 : p->unit);
  if (!p->memfd_mode) p->own += (uint64_t)p->nh * HM_SDM_PAGE_OPS * HM_SDM_PAGE; /* page ops */
  if (cfg->dram_budget < p->own + p->unit) {
    hm_ctx_t *ctx = p->ctx;
    uint64_t own = p->own, unit = p->unit;
    hm__destroy(p);
    return _hm_error(ctx, -EINVAL,
                     "budget %llu is smaller than one fetch unit %llu plus the pager's own "
                     "memory %llu",
                     (unsigned long long)cfg->dram_budget, (unsigned long long)unit,
                     (unsigned long long)own);
  }
  p->cfg = *cfg;
  p->budget = p->budget_low = cfg->dram_budget;
  atomic_init(&p->budget_want, cfg->dram_budget);
  p->budget_t0 = p->budget_t = _hm_prim_now_ns();
  _hm_sdm_cap_update(p);
  return 0;
}

/* Maps len bytes of the pager's own memory, charged to the budget. */
static int hm__own_map(hm_pager_t *p, size_t len, void **out) {
  int rc = _hm_prim_vm_map(-1, len, out);
  if (rc) return rc;
  p->own += len;
  _hm_sdm_cap_update(p);
  return 0;
}

/* The slot table, the demotion queue, and in anonymous mode the unit of
 * zeros and the pool of held pages. */
static int hm__alloc_tables(hm_pager_t *p) {
  void *mem = NULL;
  int rc = _hm_prim_vm_map(-1, p->slots_bytes, &mem);
  if (rc) return rc;
  p->slots = mem;
  p->act = (uint32_t *)(void *)(p->slots + p->nslots);
  p->free_slot = -1; /* every slot is fresh: _hm_sdm_slot_take */
  p->slot_fresh = 0;
  if (p->cap >= (uint64_t)HM_SDM_DEMQ * sizeof(_hm_sdm_vqe_t) * 8) {
    /* both rings, charged to the budget; a cache too small for them (under
     * 64 KiB) does without */
    rc = hm__own_map(p, 2 * HM_SDM_DEMQ * sizeof(_hm_sdm_vqe_t), &mem);
    if (rc) return rc;
    p->demq.e = mem;
    p->coldq.e = p->demq.e + HM_SDM_DEMQ;
  }
  if (p->memfd_mode) return 0;
  rc = _hm_prim_vm_map(-1, p->unit, &mem);
  if (rc) return rc;
  p->zeros = mem;
  /* Readahead trigger pages: charged to the budget, and only where they
   * are at most 1/32 of it (a tiny cache does without). */
  if ((uint64_t)HM_SDM_HELD * HM_SDM_PAGE * 32 <= p->cfg.dram_budget &&
      p->cap >= (uint64_t)HM_SDM_HELD * HM_SDM_PAGE + p->unit) {
    rc = hm__own_map(p, (size_t)HM_SDM_HELD * HM_SDM_PAGE, &mem);
    if (rc) return rc;
    p->held = mem;
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Handlers
 * ------------------------------------------------------------------------ */

/* Whether each handler gets a copier (copier.c): anonymous mode, where
 * installing a fill is a copy, on a machine with a CPU to spare for it,
 * unless the option copier is off (HM_PAGER_NO_COPIER). */
static int hm__copier_wanted(const hm_pager_t *p) {
  return !p->memfd_mode && !(p->cfg.flags & HM_PAGER_NO_COPIER) && _hm_prim_ncpus() >= 2;
}

/* One handler's ops, rings and bounce buffers. -ENOMEM and map failures
 * are reported as such; a ring failure as *ring_rc. */
static int hm__handler_new(hm_pager_t *p, _hm_sdm_handler_t *h, const hm__sizing_t *z,
                           int *ring_rc) {
  h->p = p;
  h->nops = z->nops;
  h->ops = calloc(z->nops, sizeof *h->ops);
  h->pops = calloc(HM_SDM_PAGE_OPS, sizeof *h->pops);
  h->vec = calloc(HM_SDM_MAX_UNIT_PAGES, sizeof *h->vec);
  if (!h->ops || !h->pops || !h->vec) return -ENOMEM;
  int rc = _hm_sdm_evict_init(h);
  if (rc) return rc;
  rc = _hm_prim_eventfd();
  if (rc < 0) return rc;
  h->wbfd = rc;
  rc = _hm_prim_ring_new(z->nops + HM_SDM_PAGE_OPS + 4, &h->ring);
  if (!rc) rc = _hm_prim_ring_new(p->cfg.io_depth, &h->wring);
  if (!rc) rc = _hm_prim_ring_notify(h->wring, h->wbfd);
  if (rc) {
    *ring_rc = rc;
    return rc;
  }
  if (z->bounce) {
    void *mem = NULL;
    /* Huge pages where the kernel has them (faulted in by the first read
     * into each, not at open). Why: a read's pages are its DMA segments,
     * and the virtio disk here takes at most 254 segments a request, so
     * reads into 4 KiB pages merged at most 3 adjacent 256 KiB units into
     * one request (0.8 MB measured), each served in 4-5 ms whatever its
     * size: the scan read 1.2-1.3 GB/s. From huge pages a unit is one
     * segment: 1.6-1.9 GB/s in the same minutes (bench seqread). */
    rc = _hm_prim_vm_map_huge(z->bounce, &mem);
    if (rc) return rc;
    h->bounce = mem;
    h->bounce_bytes = z->bounce;
  }
  for (unsigned k = 0; k < z->nops; k++) {
    h->ops[k].buf = h->bounce ? h->bounce + (size_t)k * p->unit : NULL;
    _hm_sdm_op_put(h, &h->ops[k]);
  }
  if (!p->memfd_mode) {
    void *mem = NULL;
    rc = _hm_prim_vm_map_huge((size_t)HM_SDM_PAGE_OPS * HM_SDM_PAGE, &mem);
    if (rc) return rc;
    h->pbounce = mem;
  }
  for (unsigned k = 0; k < HM_SDM_PAGE_OPS; k++) {
    h->pops[k].small = 1;
    h->pops[k].buf = h->pbounce ? h->pbounce + (size_t)k * HM_SDM_PAGE : NULL;
    _hm_sdm_op_put(h, &h->pops[k]);
  }
  return hm__copier_wanted(p) ? _hm_sdm_copier_new(h) : 0;
}

/* The eventfd and every handler; an error message set, p destroyed on
 * failure. */
static int hm__handlers_new(hm_pager_t *p, const hm__sizing_t *z) {
  hm_ctx_t *ctx = p->ctx;
  int rc = _hm_prim_eventfd();
  if (rc >= 0) {
    p->evfd = rc;
    p->h = calloc(p->nh, sizeof *p->h);
    rc = p->h ? 0 : -ENOMEM;
  }
  for (unsigned i = 0; p->h && i < p->nh; i++) p->h[i].wbfd = -1;
  for (unsigned i = 0; i < p->nh && rc == 0; i++) {
    int ring_rc = 0;
    rc = hm__handler_new(p, &p->h[i], z, &ring_rc);
    if (ring_rc) {
      hm__destroy(p);
      return _hm_error(ctx, rc, "io_uring setup failed: %s", hm_strerror(rc));
    }
  }
  if (rc) {
    hm__destroy(p);
    return _hm_error(ctx, rc, "pager setup failed: %s", hm_strerror(rc));
  }
  return 0;
}

/* Starts the handler threads; an error message set, p destroyed on
 * failure. Handler threads take no signals: a signal must never interrupt
 * the resolution of another thread's fault. */
static int hm__handlers_start(hm_pager_t *p) {
  int rc = 0;
  unsigned char oldset[256];
  (void)_hm_prim_vm_block_signals(oldset);
  for (unsigned i = 0; i < p->nh; i++) {
    if (pthread_create(&p->h[i].th, NULL, _hm_sdm_handler_main, &p->h[i]) == 0)
      p->h[i].started = 1;
    else
      rc = -EAGAIN;
    if (!rc) rc = _hm_sdm_copier_start(&p->h[i]);
  }
  (void)_hm_prim_vm_restore_signals(oldset);
  if (rc) return hm__fail(p, rc, "cannot start the pager's handler threads");
  return 0;
}

/* ------------------------------------------------------------------------
 * Open and close
 * ------------------------------------------------------------------------ */

static hm_pager_t *hm__pager_new(hm_ctx_t *ctx, hm_pager_config_t *cfg) {
  hm_pager_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->ctx = ctx;
  p->pid = _hm_prim_pid();
  p->uffd = p->pagemap = p->evfd = -1;
  /* Without it (a kernel before pidfds) evictions use one madvise each. */
  int pfd = _hm_prim_vm_pidfd_self();
  p->pidfd = pfd >= 0 ? pfd : -1;
  pthread_mutex_init(&p->lk, NULL);
  pthread_cond_init(&p->cv, NULL);
  snprintf(p->dir, sizeof p->dir, "%s", cfg->backing_dir);
  cfg->backing_dir = p->dir;
  p->unit = cfg->fetch_unit;
  p->upages = (uint32_t)(p->unit / HM_SDM_PAGE);
  p->free_slot = -1;
  return p;
}

int hm_pager_open(hm_ctx_t *ctx, const hm_pager_config_t *cfg_in, hm_pager_t **out) {
  if (!out) return _hm_error(ctx, -EINVAL, "hm_pager_open: out is NULL");
  *out = NULL;
  hm_pager_config_t cfg;
  int rc = hm__check_config(ctx, cfg_in, &cfg);
  if (rc) return rc;
  hm_pager_t *p = hm__pager_new(ctx, &cfg);
  if (!p) return _hm_error(ctx, -ENOMEM, "out of memory for the pager");
  /* Each step below destroys p and sets the error when it fails. */
  rc = hm__uffd_open(p, hm__uffd_want(cfg.flags));
  if (rc) return rc;
  rc = hm__pick_modes(p);
  if (rc) return rc;
  hm__sizing_t z;
  rc = hm__size_cache(p, &cfg, &z);
  if (rc) return rc;
  rc = hm__alloc_tables(p);
  if (rc) {
    hm__destroy(p);
    return _hm_error(ctx, rc, "pager setup failed: %s", hm_strerror(rc));
  }
  rc = hm__handlers_new(p, &z);
  if (!rc) rc = hm__handlers_start(p);
  if (rc) return rc;
  *out = p;
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
