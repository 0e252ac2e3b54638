/* Background eviction: one thread per pager keeps the free part of the
 * cache between two water marks, so that a miss finds room reserved for it
 * and the write-back of dirty victims runs off the fault path.
 *
 * Without it a handler thread evicted when a reservation failed, and waited
 * there for the victims' write-backs to complete while no fault was served
 * (GUPS update4k at 2x: every miss also wrote a dirty victim back, on the
 * handler, in line). Now a reservation that leaves less than `low` bytes
 * free wakes the evictor (one flag test and, once per episode, a condition
 * signal, under the pager lock the reservation holds anyway); it evicts
 * with _hm_sdm_evict, victims chosen as always, until `high` bytes are
 * free, then sleeps. A fault still evicts by itself when the budget is
 * truly exhausted (the evictor behind, or every victim busy): the budget
 * stays a hard cap either way. The marks are a small part of the cache
 * (high: 1/32 of it, at most 8 MiB; low: half of that: free cache is
 * cache that holds nothing, and 1/16 cost cyclic sweeps 2-3% of their hits,
 * tests/c/test_sdm_loop); caches under 4 MiB run without the thread. */
#include <errno.h>
#include <stdlib.h>

#include "sdm/pager_int.h"

#define HM__HIGH_MAX (8u << 20)
#define HM__MIN_CACHE (4u << 20)

static uint64_t hm__free(const hm_pager_t *p) { return p->used >= p->cap ? 0 : p->cap - p->used; }

void _hm_sdm_evictor_kick(hm_pager_t *p) {
  p->ev_kicked = 1;
  pthread_cond_signal(&p->ev_cv);
}

/* Evicts until high bytes are free or nothing can be evicted now (pager
 * lock held on entry and on return, dropped while it works). */
static void hm__evict_to_high(hm_pager_t *p) {
  while (!atomic_load(&p->stop)) {
    uint64_t fr = hm__free(p);
    if (fr >= p->ev_high) break;
    pthread_mutex_unlock(&p->lk);
    int rc = _hm_sdm_evict(p->evh, p->ev_high - fr);
    pthread_mutex_lock(&p->lk);
    /* Every resident unit busy: the next reservation under low kicks again. */
    if (rc) break;
    HM_SDM_ADD(p, c_bg_evict_calls, 1);
  }
  p->ev_kicked = 0;
}

static void *hm__evictor_main(void *arg) {
  hm_pager_t *p = arg;
  pthread_mutex_lock(&p->lk);
  while (!atomic_load(&p->stop)) {
    if (!p->ev_kicked) {
      pthread_cond_wait(&p->ev_cv, &p->lk);
      continue;
    }
    hm__evict_to_high(p);
  }
  pthread_mutex_unlock(&p->lk);
  return NULL;
}

int _hm_sdm_evictor_new(hm_pager_t *p) {
  p->ev_high = p->cap / 32 < HM__HIGH_MAX ? p->cap / 32 : HM__HIGH_MAX;
  p->ev_low = p->ev_high / 2;
  if (p->cap < HM__MIN_CACHE) {
    p->ev_low = 0; /* no thread: _hm_sdm_reserve never kicks */
    return 0;
  }
  _hm_sdm_handler_t *h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  h->p = p;
  p->evh = h;
  h->vec = calloc(HM_SDM_MAX_UNIT_PAGES, sizeof *h->vec);
  if (!h->vec) return -ENOMEM;
  return _hm_prim_ring_new(p->cfg.io_depth, &h->wring);
}

int _hm_sdm_evictor_start(hm_pager_t *p) {
  if (!p->evh) return 0;
  if (pthread_create(&p->evh->th, NULL, hm__evictor_main, p) != 0) return -EAGAIN;
  p->evh->started = 1;
  return 0;
}

void _hm_sdm_evictor_free(hm_pager_t *p) {
  _hm_sdm_handler_t *h = p->evh;
  if (!h) return;
  if (h->started) {
    pthread_mutex_lock(&p->lk);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->ev_cv);
    pthread_mutex_unlock(&p->lk);
    pthread_join(h->th, NULL);
  }
  _hm_prim_ring_free(h->wring);
  free(h->vec);
  free(h);
  p->evh = NULL;
}
