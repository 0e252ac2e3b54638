/* SPDX-License-Identifier: BSD-3-Clause */
/* Demotion: the units a sequential stream has passed, and those the
 * application advised cold, queued to be evicted before CLOCK runs (the
 * rings demq and coldq, pager_int.h). A fault of a stream calls
 * _hm_sdm_demote_behind under the pager lock it holds; its cost is
 * O(units passed since the stream's last fault). */
#include "sdm/pager_int.h"

/* Empties ring q; the slots whose live entries it held go back to CLOCK. */
static void hm__vq_flush(hm_pager_t *p, _hm_sdm_vq_t *q) {
  for (uint32_t i = 0; q->e && i < q->n; i++) {
    _hm_sdm_vqe_t e = q->e[(q->head + i) % HM_SDM_DEMQ];
    if (p->slots[e.slot].dtag == e.tag) p->slots[e.slot].demoted = 0;
  }
  q->head = q->n = 0;
}

/* The next demotion tag. When the 32-bit tags wrap (after 2^32
 * demotions), both rings are emptied first: an entry left from before,
 * which a ring that is seldom pushed (coldq) can hold that long, could
 * otherwise carry the tag a slot gets now and pass for its live entry.
 * Cost: O(HM_SDM_DEMQ) once per 2^32 demotions. */
static uint32_t hm__next_dtag(hm_pager_t *p) {
  if (++p->dtag == 0) {
    hm__vq_flush(p, &p->demq);
    hm__vq_flush(p, &p->coldq);
    p->dtag = 1;
  }
  return p->dtag;
}

/* Queues slot V->slot on q for eviction first (_hm_sdm_demote_behind on
 * demq; HM_ADVICE_COLD, region.c, on coldq); pager lock held. */
void _hm_sdm_demote(hm_pager_t *p, _hm_sdm_vq_t *q, const _hm_sdm_unit_t *V, _hm_sdm_slot_t *S) {
  /* Its reference bit is cleared: a fault on it from now on says it is
   * used again, and eviction then leaves it to CLOCK. */
  S->demoted = 1;
  S->ref = 0;
  S->dtag = hm__next_dtag(p);
  S->dtick = p->fill_tick;
  if (q->n == HM_SDM_DEMQ) {
    _hm_sdm_vqe_t old = q->e[q->head];
    _hm_sdm_slot_t *O = &p->slots[old.slot];
    if (O->dtag == old.tag) O->demoted = 0; /* the oldest goes back to CLOCK */
    q->head = (q->head + 1) % HM_SDM_DEMQ;
    q->n--;
  }
  q->e[(q->head + q->n++) % HM_SDM_DEMQ] = (_hm_sdm_vqe_t){V->slot, S->dtag};
}

static uint64_t hm__reg_len(const void *reg) { return ((const _hm_sdm_region_t *)reg)->len; }

/* Whether a sequential stream in r sweeps more than the cache holds: r
 * alone, or the regions swept together now (_hm_sdm_demote_behind). */
static int hm__sweep_spills(const hm_pager_t *p, const _hm_sdm_region_t *r,
                            const _hm_sdm_pf_plan_t *pl) {
  if (pl->trend != 1 && pl->trend != -1) return 0;
  if (r->len > p->cap) return 1;
  return p->seen_live > p->cap && _hm_sdm_pf_swept(&p->pf, hm__reg_len) > p->cap;
}

/* A forward pass begins at u: the resident run at the region's end, left
 * by the last pass (its reader went through the last window without
 * faulting, so no fault queued it), up to n units, queued so that eviction
 * takes the last unit first: the pass needs it last. Left to CLOCK, those
 * units and a hot array read without faulting were taken alike, and each
 * hot unit lost was read again (test_sdm_behind). Units within 2n of u
 * stay: they may be this pass's own. Cost: O(n), once per pass. */
static void hm__demote_tail(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u, int64_t n) {
  int64_t lo = (int64_t)r->nunits, stop = (int64_t)u + 2 * n;
  while (lo - 1 > stop && (int64_t)r->nunits - lo < n) {
    const _hm_sdm_unit_t *V = &r->units[lo - 1];
    if (V->state != HM_U_RES || p->slots[V->slot].demoted) break;
    lo--;
  }
  for (int64_t v = lo; v < (int64_t)r->nunits; v++) {
    _hm_sdm_unit_t *V = &r->units[v];
    _hm_sdm_slot_t *S = &p->slots[V->slot];
    if (S->pin) continue;
    V->behind = 0; /* not a span its stream came back to: nothing to learn */
    _hm_sdm_demote(p, &p->demq, V, S);
  }
}

/* A sequential stream at unit u of a region larger than the cache, or of
 * one that fits but is swept together with others that all together do
 * not (STREAM's triad: three arrays that each fit, twice the cache): the
 * resident units its pass went through, from two units (or past the spans
 * its streams came back to soon, r->keep_behind: hm__judge_refill in
 * evict.c) to two windows further behind it, are queued for eviction first
 * (what it passed cannot all stay until its next pass, so keeping them
 * only pushes out other data, first the units prefetched ahead of the
 * streams). Otherwise CLOCK decides: the next pass may find it resident
 * (a hot array read between sweeps of a cold one, test_sdm_behind). The walk back stops at the first unit queued
 * already (an earlier fault of the stream queued those beyond it), so a
 * fault costs O(units passed since the stream's last fault), under the
 * pager lock it holds anyway; a full ring drops its oldest entries. */
void _hm_sdm_demote_behind(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u,
                           const _hm_sdm_pf_plan_t *pl) {
  if (!p->demq.e || !hm__sweep_spills(p, r, pl)) return;
  int64_t w = pl->window < 2 ? 2 : (int64_t)pl->window;
  int64_t k0 = r->keep_behind >= 2 ? (int64_t)r->keep_behind + 1 : 2, k1 = k0 + 2 * w - 2;
  if (pl->trend == 1 && (int64_t)u == pl->first) hm__demote_tail(p, r, u, k1 - k0 + 1);
  for (int64_t k = k0; k <= k1; k++) {
    int64_t v = (int64_t)u - pl->trend * k;
    /* Only what this pass went through: units before its start may still
     * be ahead of another thread's stream (two threads sweeping the halves
     * of an array: the second one's start is the end of the first one's
     * half, which reads it without faulting while it is resident). */
    if (v < 0 || v >= (int64_t)r->nunits || pl->trend * (v - pl->first) < 0) break;
    _hm_sdm_unit_t *V = &r->units[v];
    if (V->state != HM_U_RES) continue;
    _hm_sdm_slot_t *S = &p->slots[V->slot];
    if (S->demoted) break;
    if (S->pin) continue;
    V->behind = (uint16_t)(k < UINT16_MAX ? k : UINT16_MAX);
    _hm_sdm_demote(p, &p->demq, V, S);
  }
}
