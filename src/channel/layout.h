/* SPDX-License-Identifier: BSD-3-Clause */
/* The layout of a channel's shared segment (see channel.c and
 * docs/formats.md), shared by its data path (channel.c) and its creation
 * and opening (open.c). Layout helpers and the lock are inline: they are on
 * the put/get paths. */
#ifndef HM_CHANNEL_LAYOUT_H
#define HM_CHANNEL_LAYOUT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"

#define HM__MAGIC 0x4e41484354454d48ull /* "HMETCHAN" */
#define HM__LAYOUT 1u
#define HM__HDR_BYTES 65536u
#define HM__SLOT_HDR 4096u
#define HM__ALIGN 64u
#define HM__GROW (4u << 20) /* data space is allocated in 4 MiB chunks */
#define HM__SLICE_MS 50     /* blocked waits re-check peers this often */

enum { HM__FREE = 0, HM__FILLING = 1, HM__COMMITTED = 2 };
enum { HM__PEER_NONE = 0, HM__PEER_ACTIVE = 1, HM__PEER_CLOSED = 2, HM__PEER_DEAD = 3 };

typedef struct _hm_chan_peer_s {
  pthread_mutex_t live; /* held by the peer's opening thread while it lives */
  int32_t pid;
  uint32_t state;
  uint64_t last_step; /* writer: last committed step + 1 (0: none) */
} _hm_chan_peer_t;

typedef struct _hm_chan_hdr_s {
  uint64_t magic;
  uint32_t layout, hdr_bytes;
  uint64_t total_bytes, slot_stride, slot_bytes, index_cap, max_objects;
  uint32_t nslots, nwriters, nreaders, policy;
  int32_t timeout_ms, numa_node;
  char tier[32];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t opened_hi; /* highest step ever opened + 1 */
  uint64_t committed, discarded, released;
  uint32_t pad_[2];
  _hm_chan_peer_t writer[HM_CHAN_MAX_RANKS];
  _hm_chan_peer_t reader[HM_CHAN_MAX_RANKS];
} _hm_chan_hdr_t;

typedef struct _hm_chan_slot_s {
  uint64_t step;
  uint32_t state, ncommits;
  uint32_t gen, pad_;
  uint64_t pending; /* reader ranks that have not released the step */
  uint64_t held;    /* reader ranks that waited on it (not discardable) */
  uint64_t committers; /* writer ranks that committed */
  _Atomic uint64_t used;
  _Atomic uint64_t nobj;
  _Atomic uint64_t reserved; /* bytes of the data area allocated in the file */
} _hm_chan_slot_t;

typedef struct _hm_chan_entry_s {
  _Atomic uint64_t word; /* gen << 32 | hash: claimed for this generation */
  _Atomic uint32_t ready;
  uint32_t klen;
  uint64_t off, len;
  char key[HM_CHAN_KEY_MAX + 1];
} _hm_chan_entry_t;

_Static_assert(sizeof(_hm_chan_hdr_t) <= HM__HDR_BYTES, "channel header too large");
_Static_assert(sizeof(_hm_chan_slot_t) <= HM__SLOT_HDR, "slot header too large");

struct hm_chan_s {
  hm_ctx_t *ctx;
  int fd;
  unsigned char *base;
  size_t map_len;
  _hm_chan_hdr_t *h;
  hm_chan_role_t role;
  int rank;
  int timeout_ms;
  /* writer: the slot of the step being filled */
  uint64_t w_step;
  _hm_chan_slot_t *w_slot;
  uint64_t w_last; /* last step this rank committed + 1 */
  /* reader: the last held step */
  uint64_t r_step;
  _hm_chan_slot_t *r_slot;
};

/* ---- layout helpers ---- */

static inline _hm_chan_slot_t *_hm_chan_slot(const _hm_chan_hdr_t *h, unsigned char *base, uint32_t i) {
  return (_hm_chan_slot_t *)(base + h->hdr_bytes + (uint64_t)i * h->slot_stride);
}
static inline _hm_chan_entry_t *_hm_chan_index(_hm_chan_slot_t *s) {
  return (_hm_chan_entry_t *)((unsigned char *)s + HM__SLOT_HDR);
}
static inline uint64_t _hm_chan_data_off(const _hm_chan_hdr_t *h) {
  uint64_t ix = h->index_cap * sizeof(_hm_chan_entry_t);
  return HM__SLOT_HDR + ((ix + 4095) & ~4095ull);
}
static inline unsigned char *_hm_chan_data(const _hm_chan_hdr_t *h, _hm_chan_slot_t *s) {
  return (unsigned char *)s + _hm_chan_data_off(h);
}

static inline uint32_t _hm_chan_hash(const char *key, size_t n) {
  /* FNV-1a, folded; 0 is reserved for "empty". */
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) x = (x ^ (unsigned char)key[i]) * 1099511628211ull;
  uint32_t v = (uint32_t)(x ^ (x >> 32));
  return v ? v : 1;
}

/* ---- locking ---- */

static inline int _hm_chan_lock(_hm_chan_hdr_t *h) {
  int rc = pthread_mutex_lock(&h->mu);
  if (rc == EOWNERDEAD) {
    /* A peer died inside a critical section. Each one leaves the header
     * consistent at every store that matters (states are written last), so
     * the state is usable; the liveness checks report the dead peer. */
    pthread_mutex_consistent(&h->mu);
    return 0;
  }
  return -rc;
}
static inline void _hm_chan_unlock(_hm_chan_hdr_t *h) { pthread_mutex_unlock(&h->mu); }

#endif
