/* SPDX-License-Identifier: BSD-3-Clause */
/* The rest of the process in a profile: the most memory it held outside
 * its sites (small blocks, libraries' data, thread stacks, the runtime's
 * own tables), written as the header's `outside_peak_bytes`.
 *
 * Why: `hetmem run` bounds the whole process by its budget, so in flat
 * and hybrid mode this memory comes out of the pager's share beside the
 * DRAM sites. A plan that gives tier 0 all but the pager's least cache
 * left LAMMPS's pager a few hundred KiB (its 7 MiB of other memory ate
 * the rest), and its neighbour list swept through that every step. The
 * advisor keeps this much of the budget free instead (advise.py).
 *
 * How: resident anonymous memory (/proc/self/status) less the live bytes
 * of the sites, at the end of each large allocation, free and realloc
 * and once a period of the access sampler's thread (at most every
 * HM__REST_GAP_NS), and once more at exit. The figure kept
 * is the most seen while the sites held at least half of the most they
 * held at any read: the budget binds then. At start-up and teardown the
 * sites hold little, and memory glibc keeps after they are freed (its
 * heap is not given back) is no one's: LAMMPS read 37 MB outside its
 * sites while freeing them at its end, 7-9 MB while it ran. Each read is
 * kept in a bucket of its site bytes (4 per octave) as the most outside
 * seen there, so that the threshold can be applied at the end. A block being
 * made or given back is resident before it is counted, or after it is
 * not: a figure read while any is under way on any thread (counted in
 * `busy`, and `gen` for those that began and ended during the read) is
 * thrown away, so that no block is taken for other memory. A site block
 * allocated but not yet touched is counted as live and not resident: the
 * figure can be low, never high by a block. Blocks the refs sampler keeps
 * mapped until its next drain (_hm_smp_grave_bytes) and glibc's free
 * memory (mallinfo2: a few us, its arenas' locks) are subtracted. */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>

#include "preload.h"
#include "prim/prim.h"
#include "prof.h"
#include "sampler.h"

#define HM__REST_GAP_NS 5000000ull /* a /proc read costs ~20 us: 0.4% at most */
#define HM__REST_BUCKETS 256        /* 4 per octave of site bytes, 64 octaves */

static struct {
  _Atomic int busy;          /* large allocations, frees and reallocs under way */
  _Atomic uint64_t gen;      /* how many have begun */
  _Atomic int64_t site_live; /* bytes of live site blocks (prof.c's events) */
  _Atomic uint64_t last_ns;  /* the last read */
  _Atomic uint64_t live_max; /* the most site bytes at a read */
  /* the most seen outside the sites, by the site bytes at that read */
  _Atomic uint64_t out[HM__REST_BUCKETS];
} hm__rest;

static void hm__max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

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

void _hm_pf_rest_live(int64_t delta) {
  atomic_fetch_add_explicit(&hm__rest.site_live, delta, memory_order_relaxed);
}

void _hm_pl_prof_busy(void) {
  atomic_fetch_add_explicit(&hm__rest.gen, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hm__rest.busy, 1, memory_order_acq_rel);
}

/* One read: RSS less the sites, kept when no block was under way. */
static void hm__read(void) {
  uint64_t g = atomic_load_explicit(&hm__rest.gen, memory_order_acquire);
  if (atomic_load_explicit(&hm__rest.busy, memory_order_acquire)) return;
  int64_t live = atomic_load_explicit(&hm__rest.site_live, memory_order_acquire);
  uint64_t rss = 0;
  int saved = errno; /* inside malloc: the caller's errno stays */
  int rc = _hm_prim_self_anon_bytes(_hm_pf.fsroot, &rss);
  errno = saved;
  if (rc) return;
  if (atomic_load_explicit(&hm__rest.busy, memory_order_acquire) ||
      atomic_load_explicit(&hm__rest.gen, memory_order_acquire) != g)
    return;
  /* glibc's free memory, its heap's top included: a site block glibc
   * served from its heap (it raises its mmap threshold to a freed block's
   * size) stays there once freed, and is made again there; it is the
   * sites' room, not the rest's (hm-placement --scratch-b: 10 MB) */
  struct mallinfo2 mi = mallinfo2();
  int64_t out = (int64_t)rss - live - (int64_t)_hm_smp_grave_bytes() - (int64_t)mi.fordblks;
  uint64_t l = live > 0 ? (uint64_t)live : 0;
  hm__max(&hm__rest.live_max, l);
  if (out > 0) hm__max(&hm__rest.out[hm__bucket(l)], (uint64_t)out);
}

/* A read unless one was made in the last HM__REST_GAP_NS (or is being). */
static void hm__maybe_read(void) {
  uint64_t now = _hm_prim_now_ns(), last = atomic_load(&hm__rest.last_ns);
  if (now - last < HM__REST_GAP_NS) return;
  if (!atomic_compare_exchange_strong(&hm__rest.last_ns, &last, now)) return; /* another reads */
  hm__read();
}

/* Cost: an atomic decrement; when nothing else is under way and the last
 * read is HM__REST_GAP_NS old, one CAS and one /proc read (~20 us). */
void _hm_pl_prof_idle(void) {
  if (atomic_fetch_sub_explicit(&hm__rest.busy, 1, memory_order_acq_rel) != 1) return;
  hm__maybe_read();
}

void _hm_pl_prof_tick(void) {
  if (!atomic_load_explicit(&hm__rest.busy, memory_order_acquire)) hm__maybe_read();
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
