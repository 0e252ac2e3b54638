/* SPDX-License-Identifier: BSD-3-Clause */
/* Sparse sweeps: a loop that uses a few pages of every unit of a region,
 * the same pages pass after pass. numpy's copy of a transposed matrix
 * reads one word of every row per output row, and the same page of each
 * row for 512 output rows in a row; so does a sum down the columns of a
 * row-major matrix (hm-kernel-scan --variant cols). Its pages in use are a
 * small part of the region, which Linux swap keeps with its 4 KiB pages,
 * but at unit granularity every pass touches every unit: the pager filled
 * the whole matrix again each pass. hm-kernel-scan cols on 128 MiB at a 64
 * MiB budget read 293 GiB in 300 s without finishing two passes; swap ran
 * a pass in 2.9 s; advised random (page-sized fills), the pager ran one in
 * 4.9 s, reading 325 MiB in all.
 *
 * Anonymous mode installs a whole unit at once and never sees which pages
 * are used, so now and then a unit of a region being refilled whole is
 * watched: prefetch leaves it out, and its misses fill page by page (the
 * random fills of fault.c, whose in-unit walk brings a sequential reader
 * 16 pages a fault within a few faults). Its filled pages when it is
 * evicted are what that stay used. A stay that used more than a quarter
 * of the unit, or filled fast (hm__rnd_dense), ends the watch: a dense
 * sweep. Otherwise the watch goes on for PROBE_STAYS stays: if together
 * they used at most a quarter of the unit, its pages are used again pass
 * after pass; if those pages of the whole region also fit in 3/4 of the
 * cache, the region fills page by page, without whole-unit prefetch, for
 * SPARSE_FILLS page fills, then watches again. Not one stay against the
 * next: two threads sweeping at two column offsets each use 8 pages of a
 * unit a pass, other pages than the other thread's pass before. A
 * row-strip sweep (an LU's trailing update, scan-strips) also uses few
 * pages of a unit a pass, but other pages each pass (6 passes: most of the
 * unit): page fills would read as much, a read per page, so it keeps whole
 * units. Page fills are demand reads one page at a time, 40 MB/s a thread
 * where prefetched units come at 2 GB/s: they pay only where the pages
 * stay resident. OpenBLAS's GEMM at 4x a 64 MiB budget packs blocks whose
 * watched units used 33-39 of 64 pages in 6 stays; judged reused at half
 * the unit, it took a spell now and then and ran 25% slower. While
 * sparse, a unit that filled fast ends it at once.
 *
 * A watch that finds nothing doubles the wait before the next, from
 * PROBE_WAIT refills of the region up to PROBE_WAIT << PROBE_BACKOFF_MAX;
 * a watch costs a dense sweep the unit's page-sized fills (about 6 faults
 * with the walk) once per wait. A watch the reader leaves unvisited for
 * PROBE_PATIENCE cache-fulls of fills is dropped: a pass of numpy's FFT
 * along the columns of a complex matrix 4x the cache, reading one matrix
 * and writing another, takes 8 (after 4, no watch of it ever ended).
 * Cost: a few compares per prefetched unit, miss and eviction, under the
 * pager lock those hold. */
#include "sdm/pager_int.h"

#define PROBE_WAIT 64u        /* refills of a region before its first watch */
#define PROBE_BACKOFF_MAX 10u /* the wait doubles up to 64 << 10 refills */
#define PROBE_STAYS 6u        /* stays of a watched unit judged together */
#define PROBE_PATIENCE 32u    /* cache-fulls of fills a watch waits for the next stay */
#define SPARSE_FILLS 65536u   /* page fills between checks while sparse */

static unsigned hm__popcount(const uint64_t *bits) {
  unsigned n = 0;
  for (unsigned i = 0; i < HM_SDM_BITMAP_WORDS; i++) n += (unsigned)__builtin_popcountll(bits[i]);
  return n;
}

static void hm__probe_end(_hm_sdm_region_t *r, int found) {
  r->probe = 0;
  r->probe_stays = 0;
  if (found) {
    r->probe_backoff = 0;
  } else if (r->probe_backoff < PROBE_BACKOFF_MAX) {
    r->probe_backoff++;
  }
  r->probe_wait = PROBE_WAIT << r->probe_backoff;
}

/* A page-sized fill into slot S of r (pager lock held): counts down a
 * sparse spell. A watched unit takes no reference or heat from it: the
 * pager sees every use of it and of no other unit in anonymous mode, and
 * its stays, kept by those uses, lasted 4 passes of a sweep where other
 * units stayed one, which made a watch take 4 times as long. */
void _hm_sdm_sparse_filled(_hm_sdm_region_t *r, _hm_sdm_slot_t *S) {
  if (r->probe == S->unit + 1u) S->ref = S->heat = 0;
  if (r->sparse && --r->sparse_left == 0) {
    r->sparse = 0;
    r->probe_wait = PROBE_WAIT;
  }
}

/* Whether prefetch leaves out absent unit u of r (pager lock held): the
 * region fills page by page, or u is watched, or a watch begins on it (a
 * unit refilled, in a region not read at random, whose wait is over). */
int _hm_sdm_sparse_skip(hm_pager_t *p, _hm_sdm_region_t *r, int64_t u) {
  if (r->sparse || r->probe == (uint32_t)u + 1u) return 1;
  if (r->probe) {
    if (p->fill_tick - r->probe_since <= PROBE_PATIENCE * p->nact + 64) return 0;
    hm__probe_end(r, 0); /* the reader left it */
  }
  const _hm_sdm_unit_t *U = &r->units[u];
  if (!(U->flags & HM_UF_OUT) || !(U->flags & HM_UF_ONDISK) || r->rnd_score >= 8) return 0;
  if (r->probe_wait == 0 && r->probe_backoff == 0) r->probe_wait = PROBE_WAIT;
  if (--r->probe_wait > 0) return 0;
  r->probe = (uint32_t)u + 1u;
  r->probe_since = p->fill_tick;
  r->probe_stays = 0;
  memset(r->probe_bits, 0, sizeof r->probe_bits);
  return 1;
}

/* Slot S of unit u of r leaves the cache (pager lock held): a watched
 * stay is judged; while sparse, a unit that filled fast ends it. */
void _hm_sdm_sparse_out(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                        const _hm_sdm_slot_t *S) {
  /* S->fast: its page fills reached half the unit soon (fault.c); a unit
   * filled whole before the spell began says nothing of the sweep now */
  if (r->sparse && S->fast) {
    r->sparse = 0;
    r->probe_wait = PROBE_WAIT << r->probe_backoff;
  }
  if (r->probe != u + 1u) return;
  unsigned used = hm__popcount(S->filled);
  int dense = S->fast || used * 4u > p->upages;
  if (dense || used == 0) {
    hm__probe_end(r, 0);
    return;
  }
  for (unsigned i = 0; i < HM_SDM_BITMAP_WORDS; i++) r->probe_bits[i] |= S->filled[i];
  r->probe_since = p->fill_tick;
  if (++r->probe_stays < PROBE_STAYS) return;
  /* The pages used together: no more than one stay may use, and, over the
   * whole region, within 3/4 of the cache. */
  uint64_t all = hm__popcount(r->probe_bits);
  int reused = all * 4u <= p->upages && all * r->len * 4u <= (uint64_t)p->upages * p->cap * 3u;
  hm__probe_end(r, reused);
  if (reused) {
    r->sparse = 1;
    r->sparse_left = SPARSE_FILLS;
    HM_SDM_ADD(p, c_sparse, 1);
  }
}
