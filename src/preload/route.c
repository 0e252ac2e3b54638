/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's routing (preload.h: hook -> size filter -> route ->
 * backend): which backend serves a large request, the accounting of large
 * blocks and placement tiers, the backends themselves (the pager, a NUMA
 * node bound with mbind, tracked glibc memory) and huge-page advice.
 *
 * Costs: a large block costs a hash probe in the lock-free block table plus
 * the backend's own map/unmap cost; no lock anywhere. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

/* Usable size of a glibc block; before dlsym has run, the request. */
static size_t hm__libc_usable_early(void *p, size_t req) {
  return _hm_pl_ctx.libc_usable ? _hm_pl_ctx.libc_usable(p) : req;
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
size_t _hm_pl_thp_advise_size(const char *root) {
  char mode[128];
  uint64_t size = 0;
  if (_hm_prim_read_text(root, "/sys/kernel/mm/transparent_hugepage/enabled", mode,
                         sizeof mode) < 0 ||
      !strstr(mode, "[madvise]"))
    return 0;
  if (_hm_prim_read_u64(root, "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", &size) ||
      size < 2 * _hm_pl_ctx.page || (size & (size - 1)))
    return 0;
  return (size_t)size;
}

/* Hybrid mode: the pager's budget is what tier 0's blocks leave of the
 * fast budget now, at least its share at start-up (the budget less tier 0's
 * capacity: tier 0 never holds more). Flat mode with budget_process opens
 * the pager with the whole budget too, and sets its least cache here once.
 * Called after every change of tier 0's live bytes, each a block of at
 * least the threshold. A change of less than 1/64 of the budget from the
 * last one sent is not sent (tier 0 and the cache then overlap by at most
 * that): a program that makes and frees blocks of a few MiB in a loop pays
 * two loads, not an eventfd write (hm_pager_set_budget) per block. Nothing
 * while the pager is not open. */
static void hm__pager_share(void) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  if (c->pager_max == c->pager_budget || !hm_pager_set_budget ||
      atomic_load_explicit(&c->state, memory_order_acquire) != HM_PL_READY)
    return;
  uint64_t live = atomic_load_explicit(&c->tier_live[0], memory_order_relaxed);
  uint64_t want = c->hybrid && c->budget > live ? c->budget - live : 0;
  if (want < c->pager_budget) want = c->pager_budget;
  uint64_t sent = atomic_load_explicit(&c->share_sent, memory_order_relaxed);
  if ((want > sent ? want - sent : sent - want) < c->budget / 64) return;
  atomic_store_explicit(&c->share_sent, want, memory_order_relaxed);
  (void)hm_pager_set_budget(c->pager, want);
}

/* The pager is opened on the first large request: processes that never
 * make one (shells, tools the command spawns) never start its threads. */
static int hm__ensure_pager(void) {
  int s = atomic_load_explicit(&_hm_pl_ctx.state, memory_order_acquire);
  if (hm_likely(s == HM_PL_READY)) return 0;
  _hm_pl_ensure_prepared();
  for (;;) {
    s = HM_PL_NONE;
    if (atomic_compare_exchange_strong(&_hm_pl_ctx.state, &s, HM_PL_OPENING)) {
      hm_pager_config_t cfg;
      memset(&cfg, 0, sizeof cfg);
      hm_pager_config_default(_hm_pl_ctx.ctx, &cfg);
      cfg.dram_budget = _hm_pl_ctx.pager_max;
      cfg.fetch_unit = _hm_pl_ctx.fetch_unit; /* placement may choose its own */
      int rc = hm_pager_open(_hm_pl_ctx.ctx, &cfg, &_hm_pl_ctx.pager);
      if (rc) {
        const char *m = hm_ctx_last_error(_hm_pl_ctx.ctx);
        _hm_pl_die_inside_malloc(m && *m ? m : hm_strerror(rc));
      }
      atomic_store_explicit(&_hm_pl_ctx.share_sent, cfg.dram_budget, memory_order_relaxed);
      atomic_store_explicit(&_hm_pl_ctx.state, HM_PL_READY, memory_order_release);
      hm__pager_share();
      return 0;
    }
    if (s == HM_PL_READY) return 0;
    if (s == HM_PL_FORKED) return -1;
    _hm_prim_yield(); /* another thread is opening it (once per process) */
  }
}

int _hm_pl_open_pager(void) { return hm__ensure_pager(); }

/* ------------------------------------------------------------------------
 * Routing and backends
 * ------------------------------------------------------------------------ */
/* Which backend serves a large request. Placement will look up the
 * allocation site here; cache mode sends everything to the pager. */
static _hm_pl_backend_t hm__route(const _hm_pl_req_t *req) {
  (void)req;
  return HM_PL_PAGER;
}

static void hm__account_alloc(size_t req, uint16_t flags) {
  atomic_fetch_add_explicit(&_hm_pl_ctx.large_allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&_hm_pl_ctx.large_bytes, req, memory_order_relaxed);
  if (flags & HM_PL_FROM_MMAP) atomic_fetch_add_explicit(&_hm_pl_ctx.mmap_allocs, 1, memory_order_relaxed);
  uint64_t live = atomic_fetch_add_explicit(&_hm_pl_ctx.live_bytes, req, memory_order_relaxed) + req;
  _hm_pl_atomic_max(&_hm_pl_ctx.peak_live_bytes, live);
}

/* A large request glibc serves instead (the storage tier's failures are
 * full.c's, which has said so). */
static void hm__note_fallback(void) {
  atomic_fetch_add_explicit(&_hm_pl_ctx.fallbacks, 1, memory_order_relaxed);
}

/* NULL from a large allocation: glibc serves the request, unless the
 * storage tier could not back it under HETMEM_STORAGE_FULL=error; then it
 * fails with ENOMEM. Called on that rare path only. */
int _hm_pl_refused(void) {
  if (hm_likely(!_hm_pl_tls.refused)) return 0;
  _hm_pl_tls.refused = 0;
  errno = ENOMEM;
  return 1;
}

void _hm_pl_tier_account(int t, size_t req, int sign) {
  if (sign > 0) {
    uint64_t live =
        atomic_fetch_add_explicit(&_hm_pl_ctx.tier_live[t], req, memory_order_relaxed) + req;
    _hm_pl_atomic_max(&_hm_pl_ctx.tier_peak[t], live);
  } else {
    atomic_fetch_sub_explicit(&_hm_pl_ctx.tier_live[t], req, memory_order_relaxed);
  }
  if (t == 0) hm__pager_share();
}

/* Tier t's capacity (0 = unlimited). Tier 0 keeps within fast_limit (the
 * budget less the pager's least cache; hybrid: the sites' planned peaks)
 * and, where the budget bounds the whole process (rest_room), within the
 * budget less that cache less the most memory seen outside the tiers and
 * the pager (rest.c): that memory comes out of the pager's share, and a
 * plan that did not leave room for it (LAMMPS: 7 MiB; its profile saw 3)
 * left the pager a few MiB. Cost: one relaxed load. */
uint64_t _hm_pl_tier_cap(int t) {
  uint64_t cap = _hm_pl_place_tier((size_t)t)->capacity, lim = _hm_pl_ctx.fast_limit;
  if (t == 0 && lim && _hm_pl_ctx.rest_room) {
    /* hybrid's limit is the sites' planned peaks: the room is checked
     * apart, against the budget, as the plan's slack was the pager's */
    uint64_t used = _hm_pl_ctx.pager_floor + _hm_pl_rest_bytes(), b = _hm_pl_ctx.budget;
    uint64_t room = b > used + 1 ? b - used : 1; /* 1: room for nothing; 0 reads unlimited */
    if (room < lim) lim = room;
  }
  if (t == 0 && lim && (cap == 0 || cap > lim)) cap = lim;
  return cap;
}

/* Claims req bytes of tier t's capacity (0 = unlimited); 0 when full. */
int _hm_pl_tier_reserve(int t, size_t req) {
  uint64_t cap = _hm_pl_tier_cap(t);
  if (cap == 0 || (size_t)t + 1 == _hm_pl_place_tiers()) {
    _hm_pl_tier_account(t, req, +1);
    return 1;
  }
  uint64_t live = atomic_load_explicit(&_hm_pl_ctx.tier_live[t], memory_order_relaxed);
  for (;;) {
    if (live + req > cap) return 0;
    if (atomic_compare_exchange_weak_explicit(&_hm_pl_ctx.tier_live[t], &live, live + req,
                                              memory_order_relaxed, memory_order_relaxed))
      break;
  }
  _hm_pl_tier_account(t, 0, +1); /* peak */
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
static size_t hm__lead(const _hm_pl_req_t *req) {
  return req->align <= 16 && !(req->flags & HM_PL_FROM_MMAP) ? 2 * sizeof(size_t) : 0;
}

/* The mapping length for req rounded to q (with room for its alignment
 * padding and glibc's lead), or 0 when it would overflow with slack bytes
 * more. */
static size_t hm__maplen(const _hm_pl_req_t *req, size_t q, size_t slack) {
  size_t pad = req->align > _hm_pl_ctx.page ? req->align : 0, lead = hm__lead(req);
  if (req->size > SIZE_MAX - pad - lead - q - slack) return 0;
  return (req->size + pad + lead + q - 1) / q * q;
}

/* Where in a mapping at base a block for req starts: aligned as asked,
 * then glibc's lead; its offset and the mapping length go out. */
static void *hm__key_in(const _hm_pl_req_t *req, void *base, size_t maplen, size_t *maplen_out,
                        uint32_t *off_out) {
  uintptr_t key = (uintptr_t)base;
  if (req->align > _hm_pl_ctx.page) key = (key + req->align - 1) & ~(uintptr_t)(req->align - 1);
  key += hm__lead(req);
  *maplen_out = maplen;
  *off_out = (uint32_t)(key - (uintptr_t)base);
  return (void *)key;
}

/* The pager's mapping for a large request, or NULL. */
static void *hm__pager_block(const _hm_pl_req_t *req, size_t *maplen_out, uint32_t *off_out) {
  if (hm__ensure_pager() != 0) return NULL;
  size_t maplen = hm__maplen(req, (size_t)_hm_pl_ctx.fetch_unit, 0);
  if (!maplen) return NULL;
  void *base = NULL;
  int rc = hm_pager_map(_hm_pl_ctx.pager, maplen, &base);
  if (rc) {
    hm_pager_config_t cfg;
    hm_pager_config_default(_hm_pl_ctx.ctx, &cfg);
    /* the caller counts the fallback to glibc, unless this refused it */
    if (_hm_pl_full_note(rc, cfg.backing_dir, maplen) == 1) _hm_pl_tls.refused = 1;
    return NULL;
  }
  return hm__key_in(req, base, maplen, maplen_out, off_out);
}

/* Anonymous memory bound to a NUMA node. */
static void *hm__numa_block(const _hm_pl_req_t *req, int node, size_t *maplen_out,
                            uint32_t *off_out) {
  size_t maplen = hm__maplen(req, _hm_pl_ctx.page, 0);
  void *base = NULL;
  if (!maplen) return NULL;
  if (_hm_prim_sys_mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0,
                        &base))
    return NULL;
  if (_hm_prim_bind_node(base, maplen, node) != 0) {
    (void)_hm_prim_sys_munmap(base, maplen);
    return NULL;
  }
  return hm__key_in(req, base, maplen, maplen_out, off_out);
}

/* A block in an anonymous mapping of its own, between two read-only guard
 * pages (profile mode under the refs sampler): the kernel merges
 * neighbouring anonymous mappings with the same flags, ours or not, and
 * the guards keep one block's pages in one mapping, whose Referenced count
 * in smaps is then the block's. glibc serves large blocks from mappings of
 * their own too (past its mmap threshold); the guards cost address space
 * and two mappings. They are readable, not PROT_NONE: vectorized kernels
 * read past an array's end (OpenBLAS's zgemv_n read 1.3 KiB past a 1.2 MiB
 * block in Quantum ESPRESSO's Davidson solver), which under glibc lands in
 * whatever follows, and a profile must not crash a program that runs; a
 * read of a guard maps the shared zero page. Fresh anonymous memory reads
 * as zeros: calloc needs no memset. maplen is the block's part; base is
 * one page in. The refs sampler counts its writes from here (one ioctl). */
static void *hm__own_block(const _hm_pl_req_t *req, size_t *maplen_out, uint32_t *off_out) {
  size_t pg = _hm_pl_ctx.page, maplen = hm__maplen(req, pg, 2 * pg);
  void *all = NULL;
  if (!maplen) return NULL;
  if (_hm_prim_sys_mmap(NULL, maplen + 2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0,
                        &all))
    return NULL;
  char *base = (char *)all + pg;
  if (_hm_prim_sys_mprotect(base, maplen, PROT_READ | PROT_WRITE)) {
    (void)_hm_prim_sys_munmap(all, maplen + 2 * pg);
    return NULL;
  }
  _hm_pl_prof_own_mapped(base, maplen);
  return hm__key_in(req, base, maplen, maplen_out, off_out);
}

/* glibc memory, tracked (the fast tier, or any block while profiling). */
static void *hm__glibc_block(const _hm_pl_req_t *req, int zero, size_t *maplen_out) {
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
    if (_hm_pl_ctx.pager) hm_pager_unmap(_hm_pl_ctx.pager, base, maplen);
    break;
  case HM_PL_NUMA: (void)_hm_prim_sys_munmap(base, maplen); break;
  case HM_PL_OWN: /* with its guards */
    (void)_hm_prim_sys_munmap((char *)base - _hm_pl_ctx.page, maplen + 2 * _hm_pl_ctx.page);
    break;
  case HM_PL_FAST: __libc_free((void *)key); break;
  default: break;
  }
}

/* Advises a DRAM or NUMA block that holds a huge-page-aligned part (see
 * _hm_pl_thp_advise_size). One madvise per large block, beside the mmap that
 * serves it; a block of glibc's heap is advised too (glibc's own
 * malloc.hugetlb=1 does the same). The block's whole pages are advised, not
 * only that part: a block glibc mmapped is then still one mapping, which
 * glibc's realloc can mremap (across the three mappings that advising the
 * part made, mremap failed with EFAULT and glibc copied the block: tier 0's
 * grown arrays were copied whole, both copies resident). huge_bytes counts
 * the aligned part, where huge pages can be. */
static void hm__advise_huge(void *p, size_t size) {
  uintptr_t h = _hm_pl_ctx.huge, a = ((uintptr_t)p + h - 1) & ~(h - 1);
  uintptr_t e = ((uintptr_t)p + size) & ~(h - 1), pg = _hm_pl_ctx.page;
  uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + size + pg - 1) & ~(pg - 1);
  if (e > a && _hm_prim_advise_hugepage((void *)lo, hi - lo) == 0)
    atomic_fetch_add_explicit(&_hm_pl_ctx.huge_bytes, e - a, memory_order_relaxed);
}

/* ------------------------------------------------------------------------
 * Split placement: a site's allocations start on the fastest tier (the
 * placement's `split` bytes of each) and go on on the site's own tier, in
 * one range of addresses: an anonymous mapping whose head stays in DRAM
 * (or is bound to the fast node) and whose tail is the pager's region at
 * that address (hm_pager_map_at) or is bound to the slow node. The advisor
 * splits a large site when the fast tier has room for part of it only,
 * taking its accesses as spread evenly over it. Costs: one more mmap and
 * mbind or pager region per allocation of such a site.
 * ------------------------------------------------------------------------ */
typedef struct hm__split_s {
  size_t lead, head, tail; /* head: the fast pages (lead included); tail: the rest, mapped */
} hm__split_t;

/* The layout for req with split fast bytes over slow tier t; 0 when the
 * split would leave a side empty (then the whole block goes to t). */
static int hm__split_layout(const _hm_pl_req_t *req, uint64_t split, int t, hm__split_t *L) {
  size_t pg = _hm_pl_ctx.page, lead = hm__lead(req);
  if (req->align > pg || split >= req->size) return 0;
  size_t head = (lead + (size_t)split) / pg * pg, total = lead + req->size;
  if (head < pg || head >= total) return 0;
  size_t q = _hm_pl_place_tier((size_t)t)->numa >= 0 ? pg : (size_t)_hm_pl_ctx.fetch_unit;
  L->lead = lead;
  L->head = head;
  L->tail = (total - head + q - 1) / q * q;
  return 1;
}

/* Maps L: the head bound to the fast node (when tier 0 is one), the tail
 * on tier t. The mapping's start, or NULL. */
static void *hm__split_map(const hm__split_t *L, int t) {
  const _hm_pl_tier_t *fast = _hm_pl_place_tier(0), *slow = _hm_pl_place_tier((size_t)t);
  void *base = NULL;
  size_t len = L->head + L->tail;
  if (_hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0,
                        &base))
    return NULL;
  char *tail = (char *)base + L->head;
  int rc = fast->numa >= 0 ? _hm_prim_bind_node(base, L->head, fast->numa) : 0;
  if (!rc && slow->numa >= 0) rc = _hm_prim_bind_node(tail, L->tail, slow->numa);
  else if (!rc)
    rc = hm__ensure_pager() != 0 || !hm_pager_map_at ||
         hm_pager_map_at(_hm_pl_ctx.pager, tail, L->tail) != 0;
  if (rc) {
    (void)_hm_prim_sys_munmap(base, len);
    return NULL;
  }
  if (_hm_pl_ctx.huge) hm__advise_huge(base, L->head);
  return base;
}

static void hm__split_unmap(void *base, size_t head, size_t maplen, int t) {
  if (_hm_pl_place_tier((size_t)t)->numa < 0 && _hm_pl_ctx.pager)
    hm_pager_unmap(_hm_pl_ctx.pager, (char *)base + head, maplen - head);
  (void)_hm_prim_sys_munmap(base, _hm_pl_place_tier((size_t)t)->numa < 0 ? head : maplen);
}

/* Serves req split between tier 0 and tier want (site's split bytes), or
 * NULL when the site has none, the split leaves a side empty or tier 0 has
 * no room for the head: the caller then serves it whole. */
static void *hm__split_serve(const _hm_pl_req_t *req, int site, int want) {
  hm__split_t L;
  if (want <= 0) return NULL;
  /* a head is cut to tier 0's room left rather than refused: the rest of
   * the process may hold more than the plan left for it (rest.c) */
  uint64_t split = _hm_pl_place_split((size_t)site), cap = _hm_pl_tier_cap(0);
  uint64_t live = atomic_load_explicit(&_hm_pl_ctx.tier_live[0], memory_order_relaxed);
  uint64_t room = cap > live ? cap - live : 0;
  if (cap && split > room) split = room;
  if (!hm__split_layout(req, split, want, &L)) return NULL;
  size_t fast = L.head - L.lead, slow = req->size - fast;
  if (!_hm_pl_tier_reserve(0, fast)) return NULL;
  if (!_hm_pl_tier_reserve(want, slow)) {
    _hm_pl_tier_account(0, fast, -1);
    return NULL;
  }
  void *base = hm__split_map(&L, want);
  _hm_pl_block_t *b = NULL;
  if (base)
    b = _hm_pl_table_insert_ex(&_hm_pl_ctx.table, (uintptr_t)base + L.lead, (uint32_t)L.lead,
                               L.head + L.tail, req->size, HM_PL_SPLIT, req->flags,
                               (uint32_t)(site + 1), (uint16_t)want, 0);
  if (!b) {
    if (base) hm__split_unmap(base, L.head, L.head + L.tail, want);
    _hm_pl_tier_account(0, fast, -1);
    _hm_pl_tier_account(want, slow, -1);
    return NULL;
  }
  b->split_pages = (uint32_t)(L.head / _hm_pl_ctx.page); /* before the caller sees it */
  _hm_pl_pstat_t *ps = &_hm_pl_ctx.pstat[site + 1];
  atomic_fetch_add_explicit(&ps->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&ps->bytes[0], fast, memory_order_relaxed);
  atomic_fetch_add_explicit(&ps->bytes[want], slow, memory_order_relaxed);
  atomic_fetch_add_explicit(&ps->splits, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&_hm_pl_ctx.tier_allocs[want], 1, memory_order_relaxed);
  hm__account_alloc(req->size, req->flags);
  return (char *)base + L.lead;
}

/* Placement: serves req from tier want or, when it is full, the next
 * slower tier with room (the slowest never refuses). site: placement site
 * index or -1. */
static void *hm__place_serve(const _hm_pl_req_t *req, int zero, int site, int want) {
  int nt = (int)_hm_pl_place_tiers();
  _hm_pl_pstat_t *ps = &_hm_pl_ctx.pstat[site + 1];
  void *split = site >= 0 ? hm__split_serve(req, site, want) : NULL;
  if (split) return split;
  for (int t = want; t < nt; t++) {
    if (!_hm_pl_tier_reserve(t, req->size)) continue;
    const _hm_pl_tier_t *ti = _hm_pl_place_tier((size_t)t);
    size_t maplen = 0;
    uint32_t off = 0;
    uint16_t backend;
    void *p;
    if (t == _hm_pl_ctx.glibc_tier) {
      backend = HM_PL_FAST;
      p = hm__glibc_block(req, zero, &maplen);
    } else if (ti->numa >= 0) {
      backend = HM_PL_NUMA;
      p = hm__numa_block(req, ti->numa, &maplen, &off);
    } else {
      backend = HM_PL_PAGER;
      p = hm__pager_block(req, &maplen, &off);
    }
    if (p && backend != HM_PL_PAGER && _hm_pl_ctx.huge) hm__advise_huge(p, req->size);
    if (p) {
      _hm_pl_block_t *b = _hm_pl_table_insert_ex(&_hm_pl_ctx.table, (uintptr_t)p, off, maplen,
                                                 req->size, backend, req->flags,
                                                 (uint32_t)(site + 1), (uint16_t)t, 0);
      if (b) {
        atomic_fetch_add_explicit(&ps->allocs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&ps->bytes[t], req->size, memory_order_relaxed);
        atomic_fetch_add_explicit(&_hm_pl_ctx.tier_allocs[t], 1, memory_order_relaxed);
        if (t != want) atomic_fetch_add_explicit(&ps->overflows, 1, memory_order_relaxed);
        hm__account_alloc(req->size, req->flags);
        return p;
      }
      hm__release_memory(backend, (void *)((uintptr_t)p - off), (uintptr_t)p, maplen);
    }
    _hm_pl_tier_account(t, req->size, -1);
  }
  return NULL;
}

int _hm_pl_place_want(int site, size_t size) {
  if (site < 0) {
    /* no site: auto_fast sizes to the fastest tier (memkind's autohbw),
     * the rest to the slowest */
    const _hm_pl_ctx_t *c = &_hm_pl_ctx;
    if (c->auto_min && size >= c->auto_min && size <= c->auto_max) return 0;
    return (int)_hm_pl_place_tiers() - 1;
  }
  uint32_t id, tier;
  _hm_pl_place_site((size_t)site, &id, &tier);
  return (int)tier;
}

/* Profile mode: a tracked glibc block, recorded at its call site. */
static void *hm__alloc_profile(const _hm_pl_req_t *req, int zero) {
  _hm_pl_stack_t st;
  _hm_pl_capture(&st, _hm_pl_ctx.depth);
  uint32_t site = _hm_pl_prof_site(&st);
  size_t maplen = 0;
  uint32_t off = 0;
  uint16_t backend = _hm_pl_ctx.own_maps ? HM_PL_OWN : HM_PL_FAST;
  void *user = backend == HM_PL_OWN ? hm__own_block(req, &maplen, &off)
                                    : hm__glibc_block(req, zero, &maplen);
  if (!user && backend == HM_PL_OWN) { /* out of mappings: glibc's, shared */
    backend = HM_PL_FAST;
    off = 0;
    user = hm__glibc_block(req, zero, &maplen);
  }
  if (!user) return NULL;
  if (_hm_pl_table_insert_ex(&_hm_pl_ctx.table, (uintptr_t)user, off, maplen, req->size,
                             backend, req->flags, site, 0, _hm_pl_prof_now())) {
    _hm_pl_prof_alloc(site, req->size);
    hm__account_alloc(req->size, req->flags);
    return user;
  }
  hm__note_fallback(); /* table full: an untracked glibc block */
  if (backend == HM_PL_OWN) { /* free() must find glibc's block */
    hm__release_memory(backend, (void *)((uintptr_t)user - off), (uintptr_t)user, maplen);
    user = hm__glibc_block(req, zero, &maplen);
  }
  return user;
}

/* Whether anonymous mmaps of at least the threshold go to the pager: in
 * cache mode, and in hybrid mode when the slowest tier is the pager's. No
 * profile has their sites (profiling leaves mmap to the kernel), and in
 * hybrid mode the pager is the part of the budget that follows what the
 * program touches: left to the kernel, hpcc's two 128 MiB OpenBLAS
 * buffers held 12 MiB of DRAM through its FFTs, whose 128 MiB then no
 * longer fit the pager (single FFT 0.11 Gflop/s against 0.66 with them
 * paged, as in cache mode). Flat mode's pager is its least cache: there
 * they stay with the kernel. */
int _hm_pl_mmap_paged(void) {
  const _hm_pl_ctx_t *c = &_hm_pl_ctx;
  if (c->mode == HM_PL_M_CACHE) return 1;
  size_t nt = _hm_pl_place_tiers();
  return c->mode == HM_PL_M_PLACE && c->hybrid && nt > 1 && _hm_pl_place_tier(nt - 1)->numa < 0;
}

/* Placement mode: the tier of the call site's placement site; hybrid's
 * mmaps (_hm_pl_mmap_paged) to the pager, counted as matching no site. */
static void *hm__alloc_place(const _hm_pl_req_t *req, int zero) {
  if (req->flags & HM_PL_FROM_MMAP) {
    void *user = hm__place_serve(req, zero, -1, (int)_hm_pl_place_tiers() - 1);
    if (!user && !_hm_pl_tls.refused) hm__note_fallback();
    return user;
  }
  _hm_pl_stack_t st;
  _hm_pl_capture(&st, _hm_pl_ctx.depth);
  int site = _hm_pl_place_match(&st);
  void *user = hm__place_serve(req, zero, site, _hm_pl_place_want(site, req->size));
  if (!user && !_hm_pl_tls.refused) hm__note_fallback();
  return user;
}

/* Cache mode: a pager block. */
static void *hm__alloc_cache(const _hm_pl_req_t *req) {
  if (hm__ensure_pager() != 0 || hm__route(req) != HM_PL_PAGER) {
    hm__note_fallback();
    return NULL;
  }
  size_t maplen = 0;
  uint32_t off = 0;
  void *key = hm__pager_block(req, &maplen, &off);
  if (!key) {
    if (!_hm_pl_tls.refused) hm__note_fallback();
    return NULL;
  }
  _hm_pl_block_t *b = _hm_pl_table_insert(&_hm_pl_ctx.table, (uintptr_t)key, off, maplen,
                                          req->size, HM_PL_PAGER, req->flags);
  if (!b) {
    hm_pager_unmap(_hm_pl_ctx.pager, (void *)((uintptr_t)key - off), maplen);
    hm__note_fallback();
    return NULL;
  }
  hm__account_alloc(req->size, req->flags);
  return key;
}

/* Serves a large request from its backend and records the block; NULL when
 * it cannot (the caller then falls back to glibc). Runs under the guard.
 * zero: the memory must read as zeros (calloc). */
void *_hm_pl_large_alloc_z(const _hm_pl_req_t *req, int zero) {
  _hm_pl_tls.refused = 0;
  if (_hm_pl_tls.guard) return NULL;
  _hm_pl_tls.guard++;
  _hm_pl_ensure_prepared();
  /* shared with other allocations and frees; a fork waits (fork.c) */
  pthread_rwlock_rdlock(&_hm_pl_ctx.fork_lk);
  void *user = NULL;
  if (req->size < atomic_load_explicit(&_hm_pl_threshold, memory_order_relaxed))
    user = NULL; /* the threshold was unset too */
  else if (_hm_pl_ctx.mode == HM_PL_M_PROFILE) {
    _hm_pl_rest_busy();
    user = hm__alloc_profile(req, zero);
    _hm_pl_rest_idle();
  } else if (_hm_pl_ctx.mode == HM_PL_M_PLACE) {
    _hm_pl_rest_busy();
    user = hm__alloc_place(req, zero);
    _hm_pl_rest_idle();
  } else
    user = hm__alloc_cache(req);
  pthread_rwlock_unlock(&_hm_pl_ctx.fork_lk);
  _hm_pl_tls.guard--;
  return user;
}

void *_hm_pl_large_alloc(const _hm_pl_req_t *req) { return _hm_pl_large_alloc_z(req, 0); }

/* A block that a moving realloc replaces gives its bytes back before the
 * new one is made: the live-bytes event of its profile site, its tier's
 * capacity in placement. realloc replaces; it does not add. Counted both,
 * LAMMPS's srealloc'd per-atom arrays peaked at twice their size in a
 * profile (22 MiB for an 11 MiB array), and a placement held DRAM for both
 * copies, or sent the grown copy of a DRAM array to a slower tier for the
 * rest of the run. Both copies exist only during the copy. Split blocks
 * (two tiers) keep the old order. sign -1 gives back and returns 1 when it
 * did (free the block with _hm_pl_large_free_moved); +1 undoes it (the new
 * block could not be made). */
int _hm_pl_realloc_retire(_hm_pl_block_t *b, int sign) {
  size_t req = atomic_load_explicit(&b->req, memory_order_relaxed);
  if (b->backend == HM_PL_SPLIT) return 0;
  if (_hm_pl_ctx.mode != HM_PL_M_PROFILE && _hm_pl_ctx.mode != HM_PL_M_PLACE) return 0;
  if (sign < 0) _hm_pl_rest_busy(); /* idle once freed (_hm_pl_large_free_moved) */
  if (_hm_pl_ctx.mode == HM_PL_M_PROFILE) _hm_pl_prof_live(b->site, sign * (int64_t)req);
  else _hm_pl_tier_account(b->tier, req, sign);
  if (sign > 0) _hm_pl_rest_idle();
  return 1;
}

/* Placement: a block of glibc's tier that stays there is resized by glibc
 * itself (the caller checked that its site still wants that tier). glibc
 * moves a block it mmapped with mremap: page tables move, no byte is
 * copied, and there is never a second copy in memory. Moved by the generic
 * path instead (new block, memcpy, free), LAMMPS's per-atom arrays, grown
 * by srealloc 16384 atoms at a time, were copied whole at each step, and
 * tier 0 held both copies at once beyond its capacity. The old entry leaves
 * the table before glibc frees the old block, whose address glibc may hand
 * to another thread at once. 0: not done, tier 0 has no room for the growth
 * (b is as it was: the caller moves the block); 1: done, *out the block,
 * or NULL with errno ENOMEM when glibc refused (ptr as it was). */
static int hm__realloc_glibc(_hm_pl_block_t *b, void *ptr, size_t size, void **out) {
  size_t req = atomic_load_explicit(&b->req, memory_order_relaxed);
  uint16_t tier = b->tier, flags = b->flags;
  uint32_t site = b->site;
  uint64_t t_alloc = b->t_alloc;
  if (size > req && !_hm_pl_tier_reserve(tier, size - req)) return 0;
  _hm_pl_table_remove(&_hm_pl_ctx.table, b);
  _hm_pl_tls.guard++;
  void *n = __libc_realloc(ptr, size);
  _hm_pl_tls.guard--;
  *out = n;
  if (!n) { /* ptr as it was: back in the table */
    if (size > req) _hm_pl_tier_account(tier, size - req, -1);
    n = ptr, size = req;
  } else if (size < req) {
    _hm_pl_tier_account(tier, req - size, -1);
  }
  if (!_hm_pl_table_insert_ex(&_hm_pl_ctx.table, (uintptr_t)n, 0, hm__libc_usable_early(n, size),
                              size, HM_PL_FAST, flags, site, tier, t_alloc)) {
    /* the table filled meanwhile: a glibc block, untracked (free() finds
     * it glibc's) */
    _hm_pl_tier_account(tier, size, -1);
    atomic_fetch_sub_explicit(&_hm_pl_ctx.live_bytes, req, memory_order_relaxed);
    return 1;
  }
  if (!*out) return 1;
  /* glibc copied a block out of its heap: advise the copy (a block mremap
   * moved keeps its advice; advising it again costs one madvise) */
  if (n != ptr && _hm_pl_ctx.huge) hm__advise_huge(n, size);
  if (size > req)
    atomic_fetch_add_explicit(&_hm_pl_ctx.pstat[site].bytes[tier], size - req,
                              memory_order_relaxed);
  atomic_fetch_add_explicit(&_hm_pl_ctx.live_bytes, size - req, memory_order_relaxed);
  if (n != ptr) atomic_fetch_add_explicit(&_hm_pl_ctx.realloc_moves, 1, memory_order_relaxed);
  return 1;
}

int _hm_pl_realloc_glibc(_hm_pl_block_t *b, void *ptr, size_t size, void **out) {
  _hm_pl_rest_busy(); /* its tier's bytes and glibc's move apart meanwhile */
  int rc = hm__realloc_glibc(b, ptr, size, out);
  _hm_pl_rest_idle();
  return rc;
}

void _hm_pl_large_free(_hm_pl_block_t *b) { _hm_pl_large_free_moved(b, 0); }

static void hm__large_release(_hm_pl_block_t *b, int retired);

/* A forked child's copy of its parent's pager or split block (fork.c) is
 * plain memory: unmapped. */
static int hm__free_forked_copy(_hm_pl_block_t *b) {
  if (atomic_load_explicit(&_hm_pl_ctx.state, memory_order_relaxed) != HM_PL_FORKED ||
      (b->backend != HM_PL_PAGER && b->backend != HM_PL_SPLIT))
    return 0;
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  void *base = (void *)(key - b->off);
  size_t maplen = b->maplen, req = b->req;
  _hm_pl_table_remove(&_hm_pl_ctx.table, b);
  atomic_fetch_add_explicit(&_hm_pl_ctx.large_frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&_hm_pl_ctx.live_bytes, req, memory_order_relaxed);
  (void)_hm_prim_sys_munmap(base, maplen);
  return 1;
}

void _hm_pl_large_free_moved(_hm_pl_block_t *b, int retired) {
  pthread_rwlock_rdlock(&_hm_pl_ctx.fork_lk); /* a fork waits (fork.c) */
  if (!hm__free_forked_copy(b)) hm__large_release(b, retired);
  pthread_rwlock_unlock(&_hm_pl_ctx.fork_lk);
}

static void hm__large_release(_hm_pl_block_t *b, int retired) {
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  void *base = (void *)(key - b->off);
  size_t maplen = b->maplen;
  size_t req = b->req;
  uint16_t backend = b->backend, tier = b->tier;
  uint32_t site = b->site;
  uint64_t t_alloc = b->t_alloc;
  size_t head = (size_t)b->split_pages * _hm_pl_ctx.page;
  _hm_pl_table_remove(&_hm_pl_ctx.table, b);
  atomic_fetch_add_explicit(&_hm_pl_ctx.large_frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&_hm_pl_ctx.live_bytes, req, memory_order_relaxed);
  _hm_pl_tls.guard++;
  int prof = _hm_pl_ctx.mode == HM_PL_M_PROFILE;
  int measured = prof || _hm_pl_ctx.mode == HM_PL_M_PLACE;
  if (measured && !retired) _hm_pl_rest_busy(); /* a retired one is already */
  if (prof) _hm_pl_prof_release(b, site, t_alloc, key, req, !retired);
  if (backend == HM_PL_SPLIT) {
    size_t fast = head - (size_t)(key - (uintptr_t)base);
    _hm_pl_tier_account(0, fast, -1);
    _hm_pl_tier_account(tier, req - fast, -1);
    hm__split_unmap(base, head, maplen, tier);
  } else if (backend == HM_PL_OWN && _hm_pl_prof_bury(base, maplen, key, req, site, t_alloc)) {
    /* kept mapped until the refs sampler's next drain has read it */
  } else {
    if (_hm_pl_ctx.mode == HM_PL_M_PLACE && !retired) _hm_pl_tier_account(tier, req, -1);
    hm__release_memory(backend, base, key, maplen);
  }
  if (measured) _hm_pl_rest_idle();
  _hm_pl_tls.guard--;
}
