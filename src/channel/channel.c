/* SPDX-License-Identifier: BSD-3-Clause */
/* The workflow channel: one shared segment per channel, laid out as
 *
 *   [header 64 KiB: layout, process-shared robust mutex + condvar, ranks]
 *   [slot 0: slot header 4 KiB | hash index | data area] [slot 1] ...
 *
 * (documented in docs/formats.md). A slot holds one step. The hot paths
 * (put into the step a writer already holds, get from a held step) take no
 * lock: space is claimed with one atomic add, an index entry with one CAS,
 * and publication happens under the mutex at commit, which orders every
 * store of the step before any reader's loads. Cost per 4.5 KB object: the
 * copy plus ~50 ns of hashing and probing. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "layout.h"
#include "prim/chan.h"
#include "prim/prim.h"

static void hm__deadline(struct timespec *ts, int ms) {
  /* The condvar waits on CLOCK_MONOTONIC, the clock _hm_prim_now_ns reads. */
  uint64_t now = _hm_prim_now_ns();
  ts->tv_sec = (time_t)(now / 1000000000u);
  ts->tv_nsec = (long)(now % 1000000000u);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Waits on the condvar for one slice; returns 1 when the overall timeout
 * (started at t0_ns) is over. */
static int hm__wait_slice(_hm_chan_hdr_t *h, uint64_t t0_ns, int timeout_ms) {
  struct timespec ts;
  hm__deadline(&ts, HM__SLICE_MS);
  int rc = pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&h->mu);
  if (timeout_ms < 0) return 0;
  return _hm_prim_now_ns() - t0_ns >= (uint64_t)timeout_ms * 1000000ull;
}

/* 1 if the peer's process died (its liveness lock was released by the
 * kernel's robust-futex cleanup); marks it dead. Call with mu held. */
static int hm__peer_dead(_hm_chan_peer_t *p) {
  if (p->state == HM__PEER_DEAD) return 1;
  if (p->state != HM__PEER_ACTIVE) return 0;
  int rc = pthread_mutex_trylock(&p->live);
  if (rc == EBUSY) return 0;
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&p->live);
    pthread_mutex_unlock(&p->live);
    p->state = HM__PEER_DEAD;
    return 1;
  }
  if (rc == 0) { /* the owner thread ended without closing: treat as dead */
    pthread_mutex_unlock(&p->live);
    p->state = HM__PEER_DEAD;
    return 1;
  }
  return 0;
}

static void hm__free_slot(_hm_chan_slot_t *s) {
  s->state = HM__FREE;
  s->pending = s->held = s->committers = 0;
  s->ncommits = 0;
  atomic_store_explicit(&s->used, 0, memory_order_relaxed);
  atomic_store_explicit(&s->nobj, 0, memory_order_relaxed);
  s->gen++; /* invalidates every index entry at once */
  if (!s->gen) s->gen = 1;
}

/* A reader rank died: its share of every step is released. */
static void hm__drop_reader(_hm_chan_hdr_t *h, unsigned char *base, int r) {
  uint64_t bit = 1ull << r;
  for (uint32_t i = 0; i < h->nslots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(h, base, i);
    if (s->state == HM__FREE) continue;
    s->held &= ~bit;
    if (s->state == HM__FILLING) {
      s->pending &= ~bit;
      continue;
    }
    if (s->pending & bit) {
      s->pending &= ~bit;
      if (!s->pending) {
        hm__free_slot(s);
        h->released++;
      }
    }
  }
  pthread_cond_broadcast(&h->cv);
}

/* ---- writer ---- */

static _hm_chan_slot_t *hm__find(hm_chan_t *ch, uint64_t step, uint32_t state) {
  for (uint32_t i = 0; i < ch->h->nslots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(ch->h, ch->base, i);
    if (s->state == state && s->step == step) return s;
  }
  return NULL;
}

/* A free slot for step, else (discard policy) the oldest committed step
 * no reader holds; NULL when the queue is full. Under the lock. */
static _hm_chan_slot_t *hm__take_slot(hm_chan_t *ch, uint64_t step) {
  _hm_chan_hdr_t *h = ch->h;
  _hm_chan_slot_t *s = NULL;
  for (uint32_t i = 0; i < h->nslots && !s; i++)
    if (_hm_chan_slot(h, ch->base, i)->state == HM__FREE) s = _hm_chan_slot(h, ch->base, i);
  if (!s && h->policy == HM_CHAN_DISCARD) {
    _hm_chan_slot_t *old = NULL;
    for (uint32_t i = 0; i < h->nslots; i++) {
      _hm_chan_slot_t *c = _hm_chan_slot(h, ch->base, i);
      if (c->state == HM__COMMITTED && !c->held && (!old || c->step < old->step)) old = c;
    }
    if (old) {
      hm__free_slot(old);
      h->discarded++;
      s = old;
    }
  }
  if (!s) return NULL;
  s->step = step;
  /* Every reader rank owes a release, except ranks known to be dead. */
  s->pending = 0;
  for (uint32_t r = 0; r < h->nreaders; r++)
    if (h->reader[r].state != HM__PEER_DEAD) s->pending |= 1ull << r;
  s->state = HM__FILLING;
  h->opened_hi = step + 1;
  return s;
}

/* Queue full: a reader rank that died is dropped and reported (-EPIPE,
 * with the lock released). Under the lock. */
static int hm__check_readers(hm_chan_t *ch) {
  _hm_chan_hdr_t *h = ch->h;
  for (uint32_t r = 0; r < h->nreaders; r++) {
    if (h->reader[r].state == HM__PEER_ACTIVE && hm__peer_dead(&h->reader[r])) {
      int pid = h->reader[r].pid;
      hm__drop_reader(h, ch->base, (int)r);
      _hm_chan_unlock(h);
      return _hm_error(ch->ctx, -EPIPE, "reader rank %u (pid %d) died while the queue was "
                       "full; its steps were released", r, pid);
    }
  }
  return 0;
}

/* Finds or takes the slot of step for this writer. */
static int hm__acquire(hm_chan_t *ch, uint64_t step) {
  _hm_chan_hdr_t *h = ch->h;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->w_last && step < ch->w_last)
    return _hm_error(ctx, -EINVAL, "step %llu: this writer already committed step %llu",
                     (unsigned long long)step, (unsigned long long)(ch->w_last - 1));
  int rc = _hm_chan_lock(h);
  if (rc) return _hm_error(ctx, rc, "channel lock: %s", hm_strerror(rc));
  uint64_t t0 = _hm_prim_now_ns();
  _hm_chan_slot_t *s = NULL;
  for (;;) {
    s = hm__find(ch, step, HM__FILLING);
    if (s) break;
    if (step < h->opened_hi) {
      _hm_chan_unlock(h);
      return _hm_error(ctx, -EINVAL, "step %llu is already committed or was skipped "
                       "(steps increase; the channel is at %llu)",
                       (unsigned long long)step, (unsigned long long)(h->opened_hi - 1));
    }
    if ((s = hm__take_slot(ch, step))) break;
    /* Queue full: wait for a release, watching the readers. */
    if ((rc = hm__check_readers(ch))) return rc;
    if (hm__wait_slice(h, t0, ch->timeout_ms)) {
      _hm_chan_unlock(h);
      return _hm_error(ctx, -ETIMEDOUT, "step %llu: queue full (%u steps) for %d ms; "
                       "readers are not releasing steps",
                       (unsigned long long)step, h->nslots, ch->timeout_ms);
    }
  }
  _hm_chan_unlock(h);
  ch->w_step = step;
  ch->w_slot = s;
  return 0;
}

/* Allocates file space up to end bytes of a slot's data area. */
static int hm__reserve(hm_chan_t *ch, _hm_chan_slot_t *s, uint64_t end) {
  _hm_chan_hdr_t *h = ch->h;
  int rc = _hm_chan_lock(h);
  if (rc) return rc;
  if (s->reserved < end) {
    uint64_t want = end + HM__GROW;
    if (want > h->slot_bytes) want = h->slot_bytes;
    uint64_t off = (uint64_t)((unsigned char *)s - ch->base) + _hm_chan_data_off(h);
    rc = _hm_prim_chan_reserve(ch->fd, off + s->reserved, want - s->reserved);
    if (rc && end < want) /* a full tier may still hold just what is needed */
      rc = _hm_prim_chan_reserve(ch->fd, off + s->reserved, end - s->reserved), want = end;
    if (!rc) s->reserved = want;
  }
  _hm_chan_unlock(h);
  return rc;
}

/* Claims an object count and len bytes of s's data area (one atomic add
 * each; the file grows under the lock only past what is reserved). */
static int hm__put_space(hm_chan_t *ch, _hm_chan_slot_t *s, uint64_t step, size_t len,
                         uint64_t *off_out) {
  _hm_chan_hdr_t *h = ch->h;
  hm_ctx_t *ctx = ch->ctx;
  uint64_t n = atomic_fetch_add_explicit(&s->nobj, 1, memory_order_relaxed);
  if (hm_unlikely(n >= h->max_objects)) {
    atomic_fetch_sub_explicit(&s->nobj, 1, memory_order_relaxed);
    return _hm_error(ctx, -E2BIG, "step %llu: more than max_objects (%llu) objects",
                     (unsigned long long)step, (unsigned long long)h->max_objects);
  }
  uint64_t alen = (len + HM__ALIGN - 1) & ~(uint64_t)(HM__ALIGN - 1);
  uint64_t off = atomic_fetch_add_explicit(&s->used, alen, memory_order_relaxed);
  if (hm_unlikely(off + alen > h->slot_bytes)) {
    atomic_fetch_sub_explicit(&s->nobj, 1, memory_order_relaxed);
    return _hm_error(ctx, -E2BIG, "step %llu: objects exceed slot_bytes (%llu bytes)",
                     (unsigned long long)step, (unsigned long long)h->slot_bytes);
  }
  if (hm_unlikely(off + alen > s->reserved)) {
    int rc = hm__reserve(ch, s, off + alen);
    if (rc) {
      atomic_fetch_sub_explicit(&s->nobj, 1, memory_order_relaxed);
      return _hm_error(ctx, rc, "step %llu: the channel's tier is full (%s); committed "
                       "steps stay readable", (unsigned long long)step, hm_strerror(rc));
    }
  }
  *off_out = off;
  return 0;
}

/* Claims key's index entry with one CAS (linear probing) and fills it;
 * -EEXIST when the step already has the key. */
static int hm__put_index(hm_chan_t *ch, _hm_chan_slot_t *s, const char *key, size_t klen,
                         uint64_t step, uint64_t off, size_t len, void **ptr) {
  _hm_chan_hdr_t *h = ch->h;
  uint32_t hv = _hm_chan_hash(key, klen);
  uint64_t want = ((uint64_t)s->gen << 32) | hv;
  _hm_chan_entry_t *ix = _hm_chan_index(s);
  uint64_t mask = h->index_cap - 1;
  for (uint64_t i = hv & mask;; i = (i + 1) & mask) {
    _hm_chan_entry_t *e = &ix[i];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    if ((uint32_t)(w >> 32) != s->gen) {
      if (atomic_compare_exchange_strong(&e->word, &w, want)) {
        e->klen = (uint32_t)klen;
        memcpy(e->key, key, klen + 1);
        e->off = off;
        e->len = len;
        atomic_store_explicit(&e->ready, s->gen, memory_order_release);
        *ptr = _hm_chan_data(h, s) + off;
        return 0;
      }
      i = (i - 1) & mask; /* lost the race for this entry: look at it again */
      continue;
    }
    if (w == want && atomic_load_explicit(&e->ready, memory_order_acquire) == s->gen &&
        e->klen == klen && !memcmp(e->key, key, klen)) {
      atomic_fetch_sub_explicit(&s->nobj, 1, memory_order_relaxed);
      return _hm_error(ch->ctx, -EEXIST, "key '%s' is already in step %llu", key,
                       (unsigned long long)step);
    }
  }
}

int hm_chan_put_alloc(hm_chan_t *ch, const char *key, uint64_t step, size_t len, void **ptr) {
  if (!ch || !key || !ptr) return -EINVAL;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->role != HM_CHAN_WRITER) return _hm_error(ctx, -EINVAL, "put on a reader handle");
  size_t klen = strlen(key);
  if (klen == 0 || klen > HM_CHAN_KEY_MAX)
    return _hm_error(ctx, -EINVAL, "key '%.80s': 1-%d bytes", key, HM_CHAN_KEY_MAX);
  if (hm_unlikely(ch->w_slot == NULL || ch->w_step != step)) {
    int rc = hm__acquire(ch, step);
    if (rc) return rc;
  }
  _hm_chan_slot_t *s = ch->w_slot;
  uint64_t off = 0;
  int rc = hm__put_space(ch, s, step, len, &off);
  if (rc) return rc;
  return hm__put_index(ch, s, key, klen, step, off, len, ptr);
}

int hm_chan_put(hm_chan_t *ch, const char *key, uint64_t step, const void *buf, size_t len) {
  if (!ch || (!buf && len)) return -EINVAL;
  void *dst = NULL;
  int rc = hm_chan_put_alloc(ch, key, step, len, &dst);
  if (rc) return rc;
  if (len) memcpy(dst, buf, len);
  return 0;
}

int hm_chan_commit(hm_chan_t *ch, uint64_t step) {
  if (!ch) return -EINVAL;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->role != HM_CHAN_WRITER) return _hm_error(ctx, -EINVAL, "commit on a reader handle");
  if (ch->w_slot == NULL || ch->w_step != step) {
    int rc = hm__acquire(ch, step); /* a step with no objects from this rank */
    if (rc) return rc;
  }
  _hm_chan_hdr_t *h = ch->h;
  _hm_chan_slot_t *s = ch->w_slot;
  int rc = _hm_chan_lock(h);
  if (rc) return _hm_error(ctx, rc, "channel lock: %s", hm_strerror(rc));
  uint64_t bit = 1ull << ch->rank;
  if (!(s->committers & bit)) {
    s->committers |= bit;
    s->ncommits++;
  }
  if (s->ncommits >= h->nwriters) {
    s->state = HM__COMMITTED;
    h->committed++;
    if (!s->pending) { /* every reader rank is dead: nobody will release it */
      hm__free_slot(s);
      h->released++;
    }
    pthread_cond_broadcast(&h->cv);
  }
  h->writer[ch->rank].last_step = step + 1;
  _hm_chan_unlock(h);
  ch->w_last = step + 1;
  ch->w_slot = NULL;
  return 0;
}

/* ---- reader ---- */

/* Step not committed yet: a writer rank that died or closed before
 * committing it ends the wait (with the lock released). Under the lock. */
static int hm__check_writers(hm_chan_t *ch, uint64_t step) {
  _hm_chan_hdr_t *h = ch->h;
  for (uint32_t w = 0; w < h->nwriters; w++) {
    _hm_chan_peer_t *p = &h->writer[w];
    if (p->state == HM__PEER_ACTIVE) hm__peer_dead(p);
    if (p->last_step > step) continue; /* it committed this step */
    if (p->state == HM__PEER_DEAD) {
      int pid = p->pid;
      _hm_chan_unlock(h);
      return _hm_error(ch->ctx, -EPIPE, "writer rank %u (pid %d) died before committing step "
                       "%llu", w, pid, (unsigned long long)step);
    }
    if (p->state == HM__PEER_CLOSED) {
      _hm_chan_unlock(h);
      return _hm_error(ch->ctx, -ENODATA, "end of stream: writer rank %u closed before step "
                       "%llu", w, (unsigned long long)step);
    }
  }
  return 0;
}

int hm_chan_wait(hm_chan_t *ch, uint64_t step, int timeout_ms) {
  if (!ch) return -EINVAL;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->role != HM_CHAN_READER) return _hm_error(ctx, -EINVAL, "wait on a writer handle");
  _hm_chan_hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  int rc = _hm_chan_lock(h);
  if (rc) return _hm_error(ctx, rc, "channel lock: %s", hm_strerror(rc));
  uint64_t t0 = _hm_prim_now_ns();
  for (;;) {
    _hm_chan_slot_t *s = hm__find(ch, step, HM__COMMITTED);
    if (s) {
      if (!(s->pending & bit)) {
        _hm_chan_unlock(h);
        return _hm_error(ctx, -ENOENT, "step %llu was already released by reader rank %d",
                         (unsigned long long)step, ch->rank);
      }
      s->held |= bit;
      _hm_chan_unlock(h);
      ch->r_step = step;
      ch->r_slot = s;
      return 0;
    }
    if (step < h->opened_hi && !hm__find(ch, step, HM__FILLING)) {
      _hm_chan_unlock(h);
      return _hm_error(ctx, -ENOENT, "step %llu is gone (discarded while the queue was full, "
                       "or never written); the channel is at step %llu",
                       (unsigned long long)step, (unsigned long long)(h->opened_hi - 1));
    }
    if ((rc = hm__check_writers(ch, step))) return rc;
    if (hm__wait_slice(h, t0, timeout_ms)) {
      _hm_chan_unlock(h);
      return _hm_error(ctx, -ETIMEDOUT, "step %llu not committed within %d ms",
                       (unsigned long long)step, timeout_ms);
    }
  }
}

int hm_chan_latest(hm_chan_t *ch, uint64_t *step) {
  if (!ch || !step) return -EINVAL;
  _hm_chan_hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  int rc = _hm_chan_lock(h);
  if (rc) return rc;
  int found = 0;
  for (uint32_t i = 0; i < h->nslots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(h, ch->base, i);
    if (s->state == HM__COMMITTED && (s->pending & bit) && (!found || s->step > *step)) {
      *step = s->step;
      found = 1;
    }
  }
  _hm_chan_unlock(h);
  return found ? 0 : -ENOENT;
}

static _hm_chan_slot_t *hm__held(hm_chan_t *ch, uint64_t step) {
  if (hm_likely(ch->r_slot && ch->r_step == step)) return ch->r_slot;
  /* Slots held by this rank do not change until it releases them. */
  uint64_t bit = 1ull << ch->rank;
  for (uint32_t i = 0; i < ch->h->nslots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(ch->h, ch->base, i);
    if (s->state == HM__COMMITTED && s->step == step && (s->held & bit)) {
      ch->r_step = step;
      ch->r_slot = s;
      return s;
    }
  }
  return NULL;
}

int hm_chan_get(hm_chan_t *ch, const char *key, uint64_t step, const void **ptr, size_t *len) {
  if (!ch || !key || !ptr || !len) return -EINVAL;
  _hm_chan_slot_t *s = ch->role == HM_CHAN_READER ? hm__held(ch, step) : NULL;
  if (hm_unlikely(!s))
    return _hm_error(ch->ctx, -EINVAL, "step %llu is not held by this reader (wait first)",
                     (unsigned long long)step);
  _hm_chan_hdr_t *h = ch->h;
  size_t klen = strlen(key);
  uint32_t hv = _hm_chan_hash(key, klen);
  uint64_t want = ((uint64_t)s->gen << 32) | hv;
  _hm_chan_entry_t *ix = _hm_chan_index(s);
  uint64_t mask = h->index_cap - 1;
  for (uint64_t i = hv & mask;; i = (i + 1) & mask) {
    _hm_chan_entry_t *e = &ix[i];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
    if ((uint32_t)(w >> 32) != s->gen) break;
    if (w == want && e->klen == klen && !memcmp(e->key, key, klen)) {
      *ptr = _hm_chan_data(h, s) + e->off;
      *len = e->len;
      return 0;
    }
  }
  return _hm_error(ch->ctx, -ENOENT, "key '%.80s' is not in step %llu", key,
                   (unsigned long long)step);
}

int hm_chan_get_copy(hm_chan_t *ch, const char *key, uint64_t step, void *buf, size_t cap,
                     size_t *len) {
  const void *p = NULL;
  size_t n = 0;
  int rc = hm_chan_get(ch, key, step, &p, &n);
  if (rc) return rc;
  if (len) *len = n;
  if (n > cap)
    return _hm_error(ch->ctx, -ENOBUFS, "key '%.80s' holds %zu bytes; the buffer has %zu", key,
                     n, cap);
  if (n) memcpy(buf, p, n);
  return 0;
}

/* ---- batches: one call for many objects ----
 * What a call from Python costs per object (ctypes argument conversion,
 * key encoding, a numpy view) is ~10x the channel's own work on a 4.5 KB
 * object; these move that cost to once per step. keys are count
 * NUL-terminated strings packed one after another. */

int hm_chan_put_many(hm_chan_t *ch, uint64_t step, const char *keys, size_t count,
                     const void *base, const uint64_t *offs, const uint64_t *lens,
                     size_t *done) {
  if (done) *done = 0;
  if (!ch || (count && (!keys || !base || !offs || !lens))) return -EINVAL;
  const char *k = keys;
  for (size_t i = 0; i < count; i++) {
    void *dst = NULL;
    int rc = hm_chan_put_alloc(ch, k, step, (size_t)lens[i], &dst);
    if (rc) return rc;
    if (lens[i]) memcpy(dst, (const unsigned char *)base + offs[i], (size_t)lens[i]);
    k += strlen(k) + 1;
    if (done) *done = i + 1;
  }
  return 0;
}

int hm_chan_get_many(hm_chan_t *ch, uint64_t step, const char *keys, size_t count,
                     const void **ptrs, uint64_t *lens) {
  if (!ch || (count && (!keys || !ptrs || !lens))) return -EINVAL;
  const char *k = keys;
  for (size_t i = 0; i < count; i++) {
    size_t n = 0;
    int rc = hm_chan_get(ch, k, step, &ptrs[i], &n);
    if (rc) return rc;
    lens[i] = n;
    k += strlen(k) + 1;
  }
  return 0;
}

int hm_chan_get_many_copy(hm_chan_t *ch, uint64_t step, const char *keys, size_t count,
                          void *buf, size_t cap, uint64_t *lens) {
  if (!ch || (count && (!keys || !buf || !lens))) return -EINVAL;
  const char *k = keys;
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    const void *p = NULL;
    size_t n = 0;
    int rc = hm_chan_get(ch, k, step, &p, &n);
    if (rc) return rc;
    lens[i] = n;
    if (n > cap - at)
      return _hm_error(ch->ctx, -ENOBUFS, "key '%.80s': the %zu objects need more than the "
                       "buffer's %zu bytes", k, count, cap);
    if (n) memcpy((unsigned char *)buf + at, p, n);
    at += n;
    k += strlen(k) + 1;
  }
  return 0;
}

int hm_chan_release(hm_chan_t *ch, uint64_t step) {
  if (!ch) return -EINVAL;
  _hm_chan_hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  if (ch->role != HM_CHAN_READER) return _hm_error(ch->ctx, -EINVAL, "release on a writer");
  int rc = _hm_chan_lock(h);
  if (rc) return rc;
  _hm_chan_slot_t *s = hm__find(ch, step, HM__COMMITTED);
  if (!s || !(s->pending & bit)) {
    _hm_chan_unlock(h);
    return _hm_error(ch->ctx, -ENOENT, "step %llu is not committed or already released",
                     (unsigned long long)step);
  }
  s->pending &= ~bit;
  s->held &= ~bit;
  if (!s->pending) {
    hm__free_slot(s);
    h->released++;
    pthread_cond_broadcast(&h->cv);
  }
  _hm_chan_unlock(h);
  if (ch->r_slot == s) ch->r_slot = NULL;
  return 0;
}

int hm_chan_info_json(hm_chan_t *ch, char **out) {
  if (!ch || !out) return -EINVAL;
  _hm_chan_hdr_t *h = ch->h;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  int rc = _hm_chan_lock(h);
  if (rc) return rc;
  _hm_sb_printf(&sb, "{\"schema_version\": 1, \"tier\": ");
  _hm_sb_json_str(&sb, h->tier);
  _hm_sb_printf(&sb,
                ", \"numa_node\": %d, \"slots\": %u, \"writers\": %u, \"readers\": %u, "
                "\"policy\": \"%s\", \"slot_bytes\": %llu, \"max_objects\": %llu, "
                "\"index_capacity\": %llu, \"total_bytes\": %llu, \"committed\": %llu, "
                "\"discarded\": %llu, \"released\": %llu, \"opened_hi\": %llu, \"steps\": [",
                h->numa_node, h->nslots, h->nwriters, h->nreaders,
                h->policy == HM_CHAN_DISCARD ? "discard" : "block",
                (unsigned long long)h->slot_bytes, (unsigned long long)h->max_objects,
                (unsigned long long)h->index_cap, (unsigned long long)h->total_bytes,
                (unsigned long long)h->committed, (unsigned long long)h->discarded,
                (unsigned long long)h->released, (unsigned long long)h->opened_hi);
  int first = 1;
  for (uint32_t i = 0; i < h->nslots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(h, ch->base, i);
    if (s->state == HM__FREE) continue;
    _hm_sb_printf(&sb,
                  "%s{\"step\": %llu, \"state\": \"%s\", \"objects\": %llu, \"bytes\": %llu, "
                  "\"pending_readers\": %d}",
                  first ? "" : ", ", (unsigned long long)s->step,
                  s->state == HM__COMMITTED ? "committed" : "filling",
                  (unsigned long long)atomic_load(&s->nobj),
                  (unsigned long long)atomic_load(&s->used), __builtin_popcountll(s->pending));
    first = 0;
  }
  _hm_chan_unlock(h);
  _hm_sb_puts(&sb, "]}");
  return _hm_sb_take(&sb, out);
}
