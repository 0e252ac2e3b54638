/* SPDX-License-Identifier: BSD-3-Clause */
/* The rest of the process: the memory it holds outside its large blocks
 * (small blocks, libraries' data, thread stacks, the runtime's own tables).
 *
 * Why: `hetmem run` bounds the whole process by its budget, so in flat
 * and hybrid mode this memory comes out of the pager's share beside the
 * DRAM sites. A plan that gave tier 0 all but the pager's least cache
 * left LAMMPS's pager a few hundred KiB (its ~7 MiB of other memory ate
 * the rest), and its neighbour list swept through that every step. So:
 *  - profile mode measures it for the advisor (the header's
 *    `outside_peak_bytes`), which keeps it out of tier 0 (advise.py);
 *  - placement mode measures it as the run goes, and tier 0 gets only the
 *    budget less the pager's least cache less the most seen
 *    (_hm_pl_rest_bytes, route.c): the run holds more than the profile
 *    saw (LAMMPS: 7.1 MB against 3.0; the pager's threads, their arenas,
 *    the block table), and a placement may come from another input.
 *
 * How: resident anonymous memory (/proc/self/status) less what is
 * accounted for (profile: the sites' live bytes and the blocks the refs
 * sampler keeps until its drain; placement: the live bytes of the tiers
 * in plain memory, and the pager's resident and own bytes) less glibc's
 * free memory (mallinfo2, its heap's top included: a freed DRAM block
 * glibc served from its heap stays there and is made again there). Read
 * at the start and end of each large allocation, free and realloc, and
 * once a period of the profile sampler's thread, at most every
 * HM__REST_GAP_NS.
 *
 * A block being made or given back is resident before it is counted or
 * after it is not: a figure read while any is under way on any thread
 * (`busy`, and `gen` for those that began and ended during the read) is
 * thrown away, so that no block is taken for other memory; the pager's
 * resident bytes are read before and after /proc and the larger taken.
 * A block counted but not yet touched makes the figure low, never high,
 * and so does the pager's own memory, charged before it is touched: a
 * program that makes all its arrays before it writes any is seen only by
 * the profile's figure.
 *
 * The profile keeps the most seen while its sites held at least half of
 * the most they held at any read: the budget binds then. At start-up and
 * teardown the sites hold little (LAMMPS read 37 MB outside its sites
 * while freeing them at its end, 3-9 MB while it ran). Each read is kept
 * in a bucket of its site bytes (4 per octave) as the most outside seen
 * there, so that the threshold can be applied at the end. */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "hetmem.h"
#include "preload.h"
#include "prim/prim.h"
#include "prof.h"
#include "sampler.h"

#define HM__REST_GAP_NS 5000000ull /* a /proc read costs ~20 us: 0.4% at most */
#define HM__REST_BUCKETS 256        /* 4 per octave of site bytes, 64 octaves */

static struct {
  _Atomic int busy;          /* large allocations, frees and reallocs under way */
  _Atomic uint64_t gen;      /* how many have begun */
  _Atomic int64_t site_live; /* profile: bytes of live site blocks (prof.c's events) */
  _Atomic uint64_t last_ns;  /* the last read */
  _Atomic uint64_t live_max; /* profile: the most site bytes at a read */
  /* profile: the most seen outside the sites, by the site bytes at that read */
  _Atomic uint64_t out[HM__REST_BUCKETS];
  _Atomic uint64_t peak; /* placement: the most seen outside */
} hm__rest;

/* Bucket of n site bytes: 4 x its octave plus its next two bits. */
static unsigned hm__bucket(uint64_t n) {
  if (n < 4) return (unsigned)n;
  unsigned oct = 63u - (unsigned)__builtin_clzll(n);
  return 4u * oct + (unsigned)((n >> (oct - 2)) & 3u);
}

/* The least site bytes of bucket k. */
static uint64_t hm__bucket_low(unsigned k) {
  if (k < 4) return k;
  unsigned oct = k / 4;
  return (4ull | (k % 4)) << (oct - 2);
}

void _hm_pl_rest_live(int64_t delta) {
  atomic_fetch_add_explicit(&hm__rest.site_live, delta, memory_order_relaxed);
}


/* The pager's resident and own bytes (0 without a pager). */
static uint64_t hm__pager_bytes(void) {
  if (!_hm_pl_ctx.pager) return 0;
  hm_pager_stats_t s;
  s.size = sizeof s;
  if (hm_pager_stats(_hm_pl_ctx.pager, &s)) return 0;
  return s.resident_bytes + s.own_bytes;
}

/* Placement: the live bytes of the tiers in plain memory (not the pager's). */
static uint64_t hm__tiers_bytes(void) {
  uint64_t n = 0;
  size_t nt = _hm_pl_place_tiers();
  for (size_t t = 0; t < nt && t < HM_PL_MAX_TIERS; t++)
    if (strcmp(_hm_pl_place_tier(t)->kind, "storage") != 0)
      n += atomic_load_explicit(&_hm_pl_ctx.tier_live[t], memory_order_acquire);
  return n;
}

/* What the mode accounts for besides the rest, as of now. */
static uint64_t hm__accounted(int profile) {
  if (profile) {
    int64_t live = atomic_load_explicit(&hm__rest.site_live, memory_order_acquire);
    return (live > 0 ? (uint64_t)live : 0) + _hm_smp_grave_bytes();
  }
  return hm__tiers_bytes() + hm__pager_bytes();
}

static void hm__keep(int profile, int64_t out) {
  if (!profile) {
    if (out > 0) _hm_pl_atomic_max(&hm__rest.peak, (uint64_t)out);
    return;
  }
  int64_t live = atomic_load_explicit(&hm__rest.site_live, memory_order_relaxed);
  uint64_t l = live > 0 ? (uint64_t)live : 0;
  _hm_pl_atomic_max(&hm__rest.live_max, l);
  if (out > 0) _hm_pl_atomic_max(&hm__rest.out[hm__bucket(l)], (uint64_t)out);
}

/* One read: RSS less what is accounted for, kept when no block was under
 * way meanwhile. */
static void hm__read(void) {
  int profile = _hm_pl_ctx.mode == HM_PL_M_PROFILE;
  uint64_t g = atomic_load_explicit(&hm__rest.gen, memory_order_acquire);
  if (atomic_load_explicit(&hm__rest.busy, memory_order_acquire)) return;
  uint64_t before = hm__accounted(profile), rss = 0;
  int saved = errno; /* inside malloc: the caller's errno stays */
  int rc = _hm_prim_self_anon_bytes(hm_ctx_fsroot(_hm_pl_ctx.ctx), &rss);
  errno = saved;
  if (rc) return;
  uint64_t after = hm__accounted(profile);
  struct mallinfo2 mi = mallinfo2();
  if (atomic_load_explicit(&hm__rest.busy, memory_order_acquire) ||
      atomic_load_explicit(&hm__rest.gen, memory_order_acquire) != g)
    return;
  uint64_t acc = before > after ? before : after;
  hm__keep(profile, (int64_t)rss - (int64_t)acc - (int64_t)mi.fordblks);
}

/* A read unless one was made in the last HM__REST_GAP_NS (or is being),
 * or no one uses it (placement where tier 0 need not leave the room). */
static void hm__maybe_read(void) {
  if (_hm_pl_ctx.mode == HM_PL_M_PLACE && !_hm_pl_ctx.rest_room) return;
  uint64_t now = _hm_prim_now_ns(), last = atomic_load(&hm__rest.last_ns);
  if (now - last < HM__REST_GAP_NS) return;
  if (!atomic_compare_exchange_strong(&hm__rest.last_ns, &last, now)) return; /* another reads */
  hm__read();
}

/* A read first when nothing is under way: the blocks made before are
 * touched by now, while the one just made when the last read came (at its
 * idle) was not. */
void _hm_pl_rest_busy(void) {
  if (!atomic_load_explicit(&hm__rest.busy, memory_order_acquire)) hm__maybe_read();
  atomic_fetch_add_explicit(&hm__rest.gen, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hm__rest.busy, 1, memory_order_acq_rel);
}

/* Cost: an atomic decrement; when nothing else is under way and the last
 * read is HM__REST_GAP_NS old, one CAS, one /proc read and mallinfo2
 * (~20 us with glibc's arena locks). */
void _hm_pl_rest_idle(void) {
  if (atomic_fetch_sub_explicit(&hm__rest.busy, 1, memory_order_acq_rel) != 1) return;
  hm__maybe_read();
}

void _hm_pl_rest_tick(void) {
  if (!atomic_load_explicit(&hm__rest.busy, memory_order_acquire)) hm__maybe_read();
}

uint64_t _hm_pl_rest_bytes(void) {
  return atomic_load_explicit(&hm__rest.peak, memory_order_relaxed);
}

uint64_t _hm_pf_rest_peak(void) {
  hm__read(); /* at exit: what the program holds at its end */
  uint64_t half = atomic_load(&hm__rest.live_max) / 2, peak = 0;
  for (unsigned k = 0; k < HM__REST_BUCKETS; k++) {
    uint64_t o = atomic_load(&hm__rest.out[k]);
    if (o > peak && hm__bucket_low(k) >= half) peak = o;
  }
  return peak;
}
