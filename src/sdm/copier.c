/* SPDX-License-Identifier: BSD-3-Clause */
/* The copier: a thread beside each handler that installs completed
 * prefetch fills of anonymous mode (UFFDIO_COPY from the bounce buffer,
 * then the wake), so that the handler goes on reading faults and issuing
 * reads meanwhile.
 *
 * Why: on a sequential scan the handler spent 62% of its time in
 * UFFDIO_COPY (page allocation, memcg charge, copy, PTE install) and was
 * the limit: 1.7 GB/s where the device reads 3.0-3.5 GB/s at the same read
 * size and depth. A second handler thread also splits that work, but it
 * splits faults too, and random 4 KiB reads (each its own demand read)
 * ran 10-15% slower with two. Demand fills stay on the handler: a thread
 * waits on each, and a hand-off would only add a thread switch to its
 * latency.
 *
 * Protocol. The handler queues a completed op (res kept in it) under the
 * handler's queue lock qlk and signals qcv; the copier pops ops oldest
 * first and runs the fill's completion (_hm_sdm_fill_finish, which takes
 * the pager lock itself), then returns the op on the ret list. The
 * handler takes ops back into its free list when it has none
 * (_hm_sdm_copier_reclaim); if there are none to take it sets want_ops,
 * and the copier's next return writes the eventfd retfd, which the
 * handler's ring polls. Lock order: the pager lock, then qlk; the copier
 * never holds qlk while it takes the pager lock. Cost on the fill path:
 * one uncontended mutex pair and a futex wake when the copier sleeps
 * (about 2-5 us against ~100 us of installing 256 KiB). */
#include <errno.h>

#include "sdm/pager_int.h"

/* Only ring completions come here: zero fills complete where they start,
 * and a handler has a copier only in anonymous mode (pager.c). */
int _hm_sdm_copier_take(_hm_sdm_handler_t *h, _hm_sdm_op_t *op, int res) {
  /* a page fill read ahead (sparse.c) installs one page, a few us: the
   * handler does it, and its op is free at once, where queued behind the
   * copier on 2 CPUs the ops ran out and the reads ahead stopped */
  if (!h->copier || !op->prefetch || op->pfill) return 0;
  op->res = res;
  op->next = NULL;
  pthread_mutex_lock(&h->qlk);
  if (h->cq_tail)
    h->cq_tail->next = op;
  else
    h->cq = op;
  h->cq_tail = op;
  pthread_cond_signal(&h->qcv);
  pthread_mutex_unlock(&h->qlk);
  return 1;
}

int _hm_sdm_copier_reclaim(_hm_sdm_handler_t *h) {
  pthread_mutex_lock(&h->qlk);
  _hm_sdm_op_t *op = h->ret;
  h->ret = NULL;
  h->want_ops = op == NULL;
  pthread_mutex_unlock(&h->qlk);
  while (op) {
    _hm_sdm_op_t *next = op->next;
    _hm_sdm_op_put(h, op);
    op = next;
  }
  return h->free_ops != NULL;
}

/* The next op to install, or NULL when the copier stops. */
static _hm_sdm_op_t *hm__pop(_hm_sdm_handler_t *h) {
  pthread_mutex_lock(&h->qlk);
  while (!h->cq && !h->cstop) pthread_cond_wait(&h->qcv, &h->qlk);
  _hm_sdm_op_t *op = h->cq;
  if (op) {
    h->cq = op->next;
    if (!h->cq) h->cq_tail = NULL;
  }
  pthread_mutex_unlock(&h->qlk);
  return op;
}

static void hm__give_back(_hm_sdm_handler_t *h, _hm_sdm_op_t *op) {
  pthread_mutex_lock(&h->qlk);
  op->next = h->ret;
  h->ret = op;
  int want = h->want_ops;
  h->want_ops = 0;
  pthread_mutex_unlock(&h->qlk);
  if (want) {
    uint64_t one = 1;
    (void)_hm_prim_write(h->retfd, &one, sizeof one);
  }
}

/* Runs until stopped; what is queued then is installed first, so that no
 * thread is left waiting on a unit a read has already brought in. */
static void *hm__copier_main(void *arg) {
  _hm_sdm_handler_t *h = arg;
  _hm_sdm_op_t *op;
  while ((op = hm__pop(h)) != NULL) {
    _hm_sdm_fill_finish(h, op, op->res);
    hm__give_back(h, op);
  }
  return NULL;
}

/* Sets up h's copier (not started); 0 or a negative errno. */
int _hm_sdm_copier_new(_hm_sdm_handler_t *h) {
  h->retfd = -1;
  int rc = _hm_prim_eventfd();
  if (rc < 0) return rc;
  h->retfd = rc;
  pthread_mutex_init(&h->qlk, NULL);
  pthread_cond_init(&h->qcv, NULL);
  h->copier = 1;
  return 0;
}

/* Starts the thread (signals already blocked by the caller). */
int _hm_sdm_copier_start(_hm_sdm_handler_t *h) {
  if (!h->copier) return 0;
  if (pthread_create(&h->cth, NULL, hm__copier_main, h)) return -EAGAIN;
  h->cstarted = 1;
  return 0;
}

/* Stops and joins the thread (after the handler's), frees what new made. */
void _hm_sdm_copier_free(_hm_sdm_handler_t *h) {
  if (!h->copier) return;
  if (h->cstarted) {
    pthread_mutex_lock(&h->qlk);
    h->cstop = 1;
    pthread_cond_signal(&h->qcv);
    pthread_mutex_unlock(&h->qlk);
    pthread_join(h->cth, NULL);
    h->cstarted = 0;
  }
  pthread_mutex_destroy(&h->qlk);
  pthread_cond_destroy(&h->qcv);
  if (h->retfd >= 0) (void)_hm_prim_close(h->retfd);
  h->retfd = -1;
  h->copier = 0;
}
