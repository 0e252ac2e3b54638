/* SPDX-License-Identifier: BSD-3-Clause */
/* Large static arrays in profile and placement mode (statics.c lists them).
 *
 * A static array is a site like an allocation site, with one frame: the
 * address of its first byte as (module, offset), the symbol's link-time
 * address. No return address can equal it (code and .bss never share an
 * address), so matching (place.c, hetmem.placement.match) tells the two
 * kinds apart with no rule of its own, and profiles merge it like any
 * site. It is allocated once, before main, and never freed.
 *
 * Profile mode: the array's untouched pages become a tracked block of its
 * site, so the samplers credit its accesses as for a heap block (under the
 * refs sampler in a mapping of their own, hm__own_mapping).
 * Placement mode: its site's tier decides, as for an allocation, except
 * that the memory already exists at a fixed address: the fast tier (or a
 * split's head) leaves it in plain memory, a NUMA tier binds its untouched
 * pages to the node (first touch allocates there), the storage tier puts
 * them behind the pager at the same address. Pages touched before main
 * (the loader's copy relocations, what constructors wrote) stay in plain
 * memory. An array that is not in the placement stays as it is: a
 * placement made without it never said where it goes.
 *
 * Cost: a mincore per array and one site match, once, before main. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

/* The one-frame stack of a static array at addr. */
static void hm__stack_of(uintptr_t addr, _hm_pl_stack_t *st) {
  st->n = 1;
  st->a[0] = addr;
  _hm_pl_stack_hash(st);
}

/* Whether the mapping of [a, b) is to be MAP_NORESERVE: yes, unless an
 * array remapped before touches it and is. */
static int hm__noreserve_for(uintptr_t a, uintptr_t b) {
  const _hm_pl_ctx_t *c = &_hm_pl_ctx;
  for (int i = 0; i < c->nstatics; i++) {
    const _hm_pl_static_t *o = &c->statics[i];
    if (o->managed && (o->at + o->managed == a || o->at == b)) return !o->noreserve;
  }
  return 1;
}

/* Profile mode under the refs sampler, which counts per mapping: the
 * untouched pages [a, b) of one array get a mapping of their own, so that
 * its count is its own, where the arrays of one .bss shared the segment's
 * count by size (a hot and a cold array read alike). The pages are zeros
 * (untouched), so a fresh anonymous mapping over them changes nothing the
 * program sees. The kernel merges adjacent anonymous mappings whose flags
 * agree; MAP_NORESERVE is a flag bit (VM_NORESERVE against the .bss's
 * VM_ACCOUNT) that changes nothing else where memory is overcommitted
 * heuristically, the default: so the mapping is MAP_NORESERVE, or not where
 * an array remapped before touches it and is. Where the kernel refuses
 * (or ignores the flag: overcommit_memory=2), the count is shared as
 * before. Cost: one mmap per large static array, once, before main. */
static void hm__own_mapping(_hm_pl_static_t *s, uintptr_t a, uintptr_t b) {
  int nr = hm__noreserve_for(a, b);
  void *got = NULL;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (nr ? MAP_NORESERVE : 0);
  if (_hm_prim_sys_mmap((void *)a, b - a, PROT_READ | PROT_WRITE, flags, -1, 0, &got) == 0) {
    s->noreserve = nr;
    _hm_pl_prof_own_mapped((void *)a, b - a);
    return;
  }
  /* a MAP_FIXED that fails may have unmapped the range: zeros again */
  (void)_hm_prim_sys_mmap((void *)a, b - a, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0, &got);
}

void _hm_pl_statics_profile(_hm_pl_static_t *s) {
  uintptr_t a = 0, b = 0;
  if (!_hm_pl_statics_untouched(s->lo, s->hi, &a, &b) || b <= a) {
    s->why = "written before main: not profiled";
    return;
  }
  if (_hm_pl_ctx.own_maps) hm__own_mapping(s, a, b);
  _hm_pl_stack_t st;
  hm__stack_of(s->sym, &st);
  uint32_t site = _hm_pl_prof_site(&st);
  if (!site) {
    s->why = "the profile's site table is full";
    return;
  }
  _hm_pl_prof_mark_static(site);
  if (!_hm_pl_table_insert_ex(&_hm_pl_ctx.table, a, 0, b - a, b - a, HM_PL_FAST, HM_PL_STATIC,
                              site, 0, _hm_pl_prof_now())) {
    s->why = "the block table is full";
    return;
  }
  _hm_pl_prof_alloc(site, s->hi - s->lo);
  s->site = (int)site;
  s->at = a;
  s->managed = b - a;
}

/* Bytes of a len-byte array that stay in plain memory as tier 0's. */
static size_t hm__head(int want, uint64_t split, size_t len) {
  size_t pg = _hm_pl_ctx.page;
  if (want == 0) return len;
  if (!split) return 0;
  size_t head = ((size_t)split + pg - 1) / pg * pg;
  return head < len ? head : len;
}

/* The untouched pages of [lo, hi) onto slower tier t; 0, or why not. */
static const char *hm__move(_hm_pl_static_t *s, uintptr_t lo, int t) {
  const _hm_pl_tier_t *ti = _hm_pl_place_tier((size_t)t);
  uintptr_t a = 0, b = 0;
  if (!_hm_pl_statics_untouched(lo, s->hi, &a, &b) || b <= a) return "written before main";
  if (ti->numa >= 0) {
    if (_hm_prim_bind_node((void *)a, b - a, ti->numa)) return "mbind refused it";
  } else {
    size_t unit = (size_t)_hm_pl_ctx.fetch_unit;
    if (_hm_pl_open_pager() != 0 || !hm_pager_map_at) return "the pager could not be opened";
    b = a + (b - a) / unit * unit;
    if (b <= a) return "shorter than a pager unit";
    if (hm_pager_map_at(_hm_pl_ctx.pager, (void *)a, b - a) != 0) {
      void *got = NULL; /* its mapping there is gone: zeros again, as they were */
      (void)_hm_prim_sys_mmap((void *)a, b - a, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0, &got);
      return "the pager refused it (storage tier full?)";
    }
    /* a pager block: a forked child is told, not crashed */
    (void)_hm_pl_table_insert(&_hm_pl_ctx.table, a, 0, b - a, b - a, HM_PL_PAGER, HM_PL_STATIC);
    _hm_pl_ctx.statics_managed++;
  }
  s->at = a;
  s->managed = b - a;
  return NULL;
}

/* The first tier from t on with room for len bytes (the slowest always). */
static int hm__tier_from(int t, size_t len) {
  int nt = (int)_hm_pl_place_tiers();
  for (; t < nt; t++)
    if (_hm_pl_tier_reserve(t, len)) return t;
  return nt - 1;
}

void _hm_pl_statics_place(_hm_pl_static_t *s) {
  _hm_pl_stack_t st;
  hm__stack_of(s->sym, &st);
  int site = _hm_pl_place_match(&st);
  if (site < 0) {
    s->why = "not in the placement: stays in plain memory";
    return;
  }
  size_t len = s->hi - s->lo;
  int want = _hm_pl_place_want(site, len);
  size_t head = hm__head(want, _hm_pl_place_split((size_t)site), len);
  if (head && !_hm_pl_tier_reserve(0, head)) head = 0; /* no room: all slower */
  int t = head == len ? 0 : hm__tier_from(want > 0 ? want : 1, len - head);
  _hm_pl_pstat_t *ps = &_hm_pl_ctx.pstat[site + 1];
  s->site = site + 1;
  s->fast = head;
  s->tier = t;
  atomic_fetch_add_explicit(&ps->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&ps->bytes[0], head, memory_order_relaxed);
  if (head && head < len) atomic_fetch_add_explicit(&ps->splits, 1, memory_order_relaxed);
  if (t == 0) return;
  atomic_fetch_add_explicit(&ps->bytes[t], len - head, memory_order_relaxed);
  atomic_fetch_add_explicit(&_hm_pl_ctx.tier_allocs[t], 1, memory_order_relaxed);
  if (t != want && want > 0) atomic_fetch_add_explicit(&ps->overflows, 1, memory_order_relaxed);
  if (t == _hm_pl_ctx.glibc_tier) return;
  s->why = hm__move(s, s->lo + head, t);
}
