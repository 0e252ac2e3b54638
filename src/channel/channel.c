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
#include "prim/chan.h"
#include "prim/prim.h"

#define HM__MAGIC 0x4e41484354454d48ull /* "HMETCHAN" */
#define HM__LAYOUT 1u
#define HM__HDR_BYTES 65536u
#define HM__SLOT_HDR 4096u
#define HM__ALIGN 64u
#define HM__GROW (4u << 20) /* data space is allocated in 4 MiB chunks */
#define HM__SLICE_MS 50     /* blocked waits re-check peers this often */

enum { HM__FREE = 0, HM__FILLING = 1, HM__COMMITTED = 2 };
enum { HM__PEER_NONE = 0, HM__PEER_ACTIVE = 1, HM__PEER_CLOSED = 2, HM__PEER_DEAD = 3 };

typedef struct hm__peer_s {
  pthread_mutex_t live; /* held by the peer's opening thread while it lives */
  int32_t pid;
  uint32_t state;
  uint64_t last_step; /* writer: last committed step + 1 (0: none) */
} hm__peer_t;

typedef struct hm__hdr_s {
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
  hm__peer_t writer[HM_CHAN_MAX_RANKS];
  hm__peer_t reader[HM_CHAN_MAX_RANKS];
} hm__hdr_t;

typedef struct hm__slot_s {
  uint64_t step;
  uint32_t state, ncommits;
  uint32_t gen, pad_;
  uint64_t pending; /* reader ranks that have not released the step */
  uint64_t held;    /* reader ranks that waited on it (not discardable) */
  uint64_t committers; /* writer ranks that committed */
  _Atomic uint64_t used;
  _Atomic uint64_t nobj;
  _Atomic uint64_t reserved; /* bytes of the data area allocated in the file */
} hm__slot_t;

typedef struct hm__entry_s {
  _Atomic uint64_t word; /* gen << 32 | hash: claimed for this generation */
  _Atomic uint32_t ready;
  uint32_t klen;
  uint64_t off, len;
  char key[HM_CHAN_KEY_MAX + 1];
} hm__entry_t;

_Static_assert(sizeof(hm__hdr_t) <= HM__HDR_BYTES, "channel header too large");
_Static_assert(sizeof(hm__slot_t) <= HM__SLOT_HDR, "slot header too large");

struct hm_chan_s {
  hm_ctx_t *ctx;
  int fd;
  unsigned char *base;
  size_t map_len;
  hm__hdr_t *h;
  hm_chan_role_t role;
  int rank;
  int timeout_ms;
  /* writer: the slot of the step being filled */
  uint64_t w_step;
  hm__slot_t *w_slot;
  uint64_t w_last; /* last step this rank committed + 1 */
  /* reader: the last held step */
  uint64_t r_step;
  hm__slot_t *r_slot;
};

/* ---- layout helpers ---- */

static hm__slot_t *hm__slot(const hm__hdr_t *h, unsigned char *base, uint32_t i) {
  return (hm__slot_t *)(base + h->hdr_bytes + (uint64_t)i * h->slot_stride);
}
static hm__entry_t *hm__index(hm__slot_t *s) {
  return (hm__entry_t *)((unsigned char *)s + HM__SLOT_HDR);
}
static uint64_t hm__data_off(const hm__hdr_t *h) {
  uint64_t ix = h->index_cap * sizeof(hm__entry_t);
  return HM__SLOT_HDR + ((ix + 4095) & ~4095ull);
}
static unsigned char *hm__data(const hm__hdr_t *h, hm__slot_t *s) {
  return (unsigned char *)s + hm__data_off(h);
}

static uint32_t hm__hash(const char *key, size_t n) {
  /* FNV-1a, folded; 0 is reserved for "empty". */
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) x = (x ^ (unsigned char)key[i]) * 1099511628211ull;
  uint32_t v = (uint32_t)(x ^ (x >> 32));
  return v ? v : 1;
}

static int hm__name_ok(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > 64) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return name[0] != '.';
}

/* Parses a tier string: kind 0 dram, 1 node, 2 file, 3 dax. */
static int hm__tier(const char *tier, int *kind, int *node, const char **dir) {
  *node = -1;
  *dir = "/dev/shm";
  if (!tier || !*tier || !strcmp(tier, "dram") || !strcmp(tier, "shm")) {
    *kind = 0;
    return 0;
  }
  if (!strncmp(tier, "node:", 5)) {
    char *end = NULL;
    long v = strtol(tier + 5, &end, 10);
    if (end == tier + 5 || *end || v < 0 || v >= 1024) return -EINVAL;
    *kind = 1;
    *node = (int)v;
    return 0;
  }
  if (!strncmp(tier, "file:", 5) || !strncmp(tier, "dax:", 4)) {
    *kind = tier[0] == 'f' ? 2 : 3;
    *dir = strchr(tier, ':') + 1;
    return **dir ? 0 : -EINVAL;
  }
  return -EINVAL;
}

int hm_chan_path(const char *tier, const char *name, char *buf, size_t len) {
  int kind, node;
  const char *dir;
  if (!buf || hm__tier(tier, &kind, &node, &dir) || !hm__name_ok(name)) return -EINVAL;
  int n = snprintf(buf, len, "%s/hetmem-chan-%s", dir, name);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void hm_chan_config_default(hm_chan_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->version = HM_CHAN_CONFIG_VERSION;
  cfg->tier = "dram";
  cfg->slots = 2;
  cfg->writers = 1;
  cfg->readers = 1;
  cfg->policy = HM_CHAN_BLOCK;
  cfg->slot_bytes = 64ull << 20;
  cfg->max_objects = 4096;
  cfg->timeout_ms = 30000;
}

/* ---- locking ---- */

static int hm__lock(hm__hdr_t *h) {
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
static void hm__unlock(hm__hdr_t *h) { pthread_mutex_unlock(&h->mu); }

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
static int hm__wait_slice(hm__hdr_t *h, uint64_t t0_ns, int timeout_ms) {
  struct timespec ts;
  hm__deadline(&ts, HM__SLICE_MS);
  int rc = pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&h->mu);
  if (timeout_ms < 0) return 0;
  return _hm_prim_now_ns() - t0_ns >= (uint64_t)timeout_ms * 1000000ull;
}

/* 1 if the peer's process died (its liveness lock was released by the
 * kernel's robust-futex cleanup); marks it dead. Call with mu held. */
static int hm__peer_dead(hm__peer_t *p) {
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

static void hm__free_slot(hm__slot_t *s) {
  s->state = HM__FREE;
  s->pending = s->held = s->committers = 0;
  s->ncommits = 0;
  atomic_store_explicit(&s->used, 0, memory_order_relaxed);
  atomic_store_explicit(&s->nobj, 0, memory_order_relaxed);
  s->gen++; /* invalidates every index entry at once */
  if (!s->gen) s->gen = 1;
}

/* A reader rank died: its share of every step is released. */
static void hm__drop_reader(hm__hdr_t *h, unsigned char *base, int r) {
  uint64_t bit = 1ull << r;
  for (uint32_t i = 0; i < h->nslots; i++) {
    hm__slot_t *s = hm__slot(h, base, i);
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

/* ---- create / open / close ---- */

static int hm__init_sync(hm__hdr_t *h) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&h->mu, &ma);
  for (int i = 0; !rc && i < HM_CHAN_MAX_RANKS; i++) {
    rc = pthread_mutex_init(&h->writer[i].live, &ma);
    if (!rc) rc = pthread_mutex_init(&h->reader[i].live, &ma);
  }
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  return -rc;
}

int hm_chan_create(hm_ctx_t *ctx, const hm_chan_config_t *cfg) {
  if (!ctx || !cfg) return -EINVAL;
  if (cfg->size < sizeof *cfg || cfg->version != HM_CHAN_CONFIG_VERSION)
    return _hm_error(ctx, -EINVAL, "channel config: size/version mismatch");
  int kind, node;
  const char *dir;
  if (hm__tier(cfg->tier, &kind, &node, &dir))
    return _hm_error(ctx, -EINVAL,
                     "channel tier '%s': expected dram, node:N, file:DIR or dax:DIR",
                     cfg->tier ? cfg->tier : "");
  if (!hm__name_ok(cfg->name))
    return _hm_error(ctx, -EINVAL, "channel name '%s': use 1-64 of [A-Za-z0-9._-]",
                     cfg->name ? cfg->name : "");
  uint32_t slots = cfg->slots ? cfg->slots : 2;
  uint32_t writers = cfg->writers ? cfg->writers : 1;
  uint32_t readers = cfg->readers ? cfg->readers : 1;
  uint64_t slot_bytes = cfg->slot_bytes ? cfg->slot_bytes : 64ull << 20;
  uint64_t max_objects = cfg->max_objects ? cfg->max_objects : 4096;
  if (slots > 1024) return _hm_error(ctx, -EINVAL, "channel slots %u: at most 1024", slots);
  if (writers > HM_CHAN_MAX_RANKS || readers > HM_CHAN_MAX_RANKS)
    return _hm_error(ctx, -EINVAL, "channel writers/readers: at most %d ranks each",
                     HM_CHAN_MAX_RANKS);
  if (cfg->policy != HM_CHAN_BLOCK && cfg->policy != HM_CHAN_DISCARD)
    return _hm_error(ctx, -EINVAL, "channel policy %d: block (0) or discard (1)",
                     (int)cfg->policy);
  if (max_objects > (1ull << 30) || slot_bytes > (1ull << 42))
    return _hm_error(ctx, -EINVAL, "channel slot_bytes or max_objects too large");
  uint64_t cap = 16;
  while (cap < max_objects * 2) cap <<= 1; /* load factor <= 1/2: short probes */
  char path[HM_PATH_MAX];
  int rc = hm_chan_path(cfg->tier, cfg->name, path, sizeof path);
  if (rc) return _hm_error(ctx, rc, "channel path for '%s' is too long", cfg->name);
  if (kind >= 2) {
    rc = _hm_prim_check_writable_dir(dir);
    if (rc) return _hm_error(ctx, rc, "channel directory '%s': %s", dir, hm_strerror(rc));
  }

  hm__hdr_t proto;
  memset(&proto, 0, sizeof proto);
  proto.index_cap = cap;
  uint64_t data_off = hm__data_off(&proto);
  uint64_t stride = (data_off + slot_bytes + 4095) & ~4095ull;
  uint64_t total = HM__HDR_BYTES + stride * slots;

  int fd = _hm_prim_chan_open(path, cfg->replace ? 2 : 1);
  if (fd < 0) {
    if (fd == -EEXIST)
      return _hm_error(ctx, fd, "channel '%s' exists (%s); open it or unlink it first",
                       cfg->name, path);
    return _hm_error(ctx, fd, "channel file '%s': %s", path, hm_strerror(fd));
  }
  void *base = NULL;
  int said = 0;
  rc = _hm_prim_chan_truncate(fd, total);
  if (!rc) rc = _hm_prim_chan_map(fd, total, kind == 3, &base);
  if (!rc && kind == 1) {
    rc = _hm_prim_bind_node(base, total, node);
    if (rc) {
      rc = _hm_error(ctx, rc, "channel tier node:%d: mbind failed: %s", node, hm_strerror(rc));
      said = 1;
    }
  }
  /* The header and every slot's header and index are allocated now; data
   * space as steps fill (hm__reserve). */
  if (!rc) rc = _hm_prim_chan_reserve(fd, 0, HM__HDR_BYTES);
  for (uint32_t i = 0; !rc && i < slots; i++)
    rc = _hm_prim_chan_reserve(fd, HM__HDR_BYTES + stride * i, data_off);
  if (rc == -ENOSPC && !said) {
    rc = _hm_error(ctx, rc, "channel '%s': no space on the tier for its index (%llu bytes)",
                   path, (unsigned long long)(HM__HDR_BYTES + data_off * slots));
    said = 1;
  }
  hm__hdr_t *h = base;
  if (!rc) {
    memset(h, 0, sizeof *h);
    rc = hm__init_sync(h);
  }
  if (!rc) {
    h->layout = HM__LAYOUT;
    h->hdr_bytes = HM__HDR_BYTES;
    h->total_bytes = total;
    h->slot_stride = stride;
    h->slot_bytes = slot_bytes;
    h->index_cap = cap;
    h->max_objects = max_objects;
    h->nslots = slots;
    h->nwriters = writers;
    h->nreaders = readers;
    h->policy = (uint32_t)cfg->policy;
    h->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
    h->numa_node = node;
    snprintf(h->tier, sizeof h->tier, "%s",
             kind == 0 ? "dram" : kind == 1 ? "node" : kind == 2 ? "file" : "dax");
    for (uint32_t i = 0; i < slots; i++) {
      hm__slot_t *s = hm__slot(h, base, i);
      memset(s, 0, sizeof *s);
      s->gen = 1;
    }
    atomic_thread_fence(memory_order_release);
    h->magic = HM__MAGIC; /* last: an opener never sees a half-built header */
  }
  if (base) _hm_prim_unmap(base, total);
  _hm_prim_close(fd);
  if (rc) {
    _hm_prim_chan_unlink(path);
    if (!said) return _hm_error(ctx, rc, "channel '%s': %s", path, hm_strerror(rc));
  }
  return rc;
}

int hm_chan_unlink(hm_ctx_t *ctx, const char *tier, const char *name) {
  char path[HM_PATH_MAX];
  int rc = hm_chan_path(tier, name, path, sizeof path);
  if (rc) return _hm_error(ctx, rc, "bad channel tier or name");
  rc = _hm_prim_chan_unlink(path);
  return rc ? _hm_error(ctx, rc, "channel '%s': %s", path, hm_strerror(rc)) : 0;
}

int hm_chan_open(hm_ctx_t *ctx, const char *tier, const char *name, hm_chan_role_t role,
                 int rank, hm_chan_t **out) {
  if (!ctx || !out) return -EINVAL;
  *out = NULL;
  if (role != HM_CHAN_WRITER && role != HM_CHAN_READER)
    return _hm_error(ctx, -EINVAL, "channel role must be writer or reader");
  char path[HM_PATH_MAX];
  int rc = hm_chan_path(tier, name, path, sizeof path);
  if (rc) return _hm_error(ctx, -EINVAL, "bad channel tier '%s' or name '%s'",
                           tier ? tier : "", name ? name : "");
  int fd = _hm_prim_chan_open(path, 0);
  if (fd < 0)
    return _hm_error(ctx, fd, "channel '%s' (%s): %s", name, path,
                     fd == -ENOENT ? "no such channel (create it first)" : hm_strerror(fd));
  uint64_t size = 0;
  void *base = NULL;
  rc = _hm_prim_chan_size(fd, &size);
  if (!rc && size < HM__HDR_BYTES) rc = -EPROTO;
  if (!rc) rc = _hm_prim_chan_map(fd, HM__HDR_BYTES, 0, &base);
  hm__hdr_t *h = base;
  if (!rc && (h->magic != HM__MAGIC || h->layout != HM__LAYOUT || h->total_bytes != size))
    rc = -EPROTO;
  uint64_t total = rc ? 0 : h->total_bytes;
  int kind, node;
  const char *dir;
  hm__tier(tier, &kind, &node, &dir);
  if (base) _hm_prim_unmap(base, HM__HDR_BYTES);
  base = NULL;
  if (!rc) rc = _hm_prim_chan_map(fd, total, kind == 3, &base);
  if (rc) {
    _hm_prim_close(fd);
    if (rc == -EPROTO)
      return _hm_error(ctx, rc, "'%s' is not a hetmem channel of layout %u", path, HM__LAYOUT);
    return _hm_error(ctx, rc, "channel '%s': %s", path, hm_strerror(rc));
  }
  h = base;
  hm_chan_t *ch = calloc(1, sizeof *ch);
  if (!ch) {
    _hm_prim_unmap(base, total);
    _hm_prim_close(fd);
    return -ENOMEM;
  }
  ch->ctx = ctx;
  ch->fd = fd;
  ch->base = base;
  ch->map_len = total;
  ch->h = h;
  ch->role = role;
  ch->timeout_ms = h->timeout_ms;
  uint32_t n = role == HM_CHAN_WRITER ? h->nwriters : h->nreaders;
  hm__peer_t *peers = role == HM_CHAN_WRITER ? h->writer : h->reader;
  if (rank >= (int)n) {
    hm_chan_close(ch);
    return _hm_error(ctx, -EINVAL, "channel '%s' has %u %s ranks; rank %d is out of range",
                     name, n, role == HM_CHAN_WRITER ? "writer" : "reader", rank);
  }
  rc = -EBUSY;
  for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? (int)n : rank + 1); r++) {
    int lr = pthread_mutex_trylock(&peers[r].live);
    if (lr == EOWNERDEAD) {
      pthread_mutex_consistent(&peers[r].live);
      lr = 0;
    }
    if (lr) continue;
    if ((rc = hm__lock(h))) {
      pthread_mutex_unlock(&peers[r].live);
      break;
    }
    peers[r].pid = _hm_prim_chan_pid();
    peers[r].state = HM__PEER_ACTIVE;
    /* A writer rank that returns continues after its last commit. */
    if (role == HM_CHAN_WRITER) ch->w_last = peers[r].last_step;
    hm__unlock(h);
    ch->rank = r;
    rc = 0;
    break;
  }
  if (rc) {
    ch->rank = -1;
    hm_chan_close(ch);
    return _hm_error(ctx, rc, "channel '%s': %s rank %s is held by a live process", name,
                     role == HM_CHAN_WRITER ? "writer" : "reader",
                     rank < 0 ? "(every one)" : "");
  }
  *out = ch;
  return 0;
}

int hm_chan_close(hm_chan_t *ch) {
  if (!ch) return 0;
  hm__hdr_t *h = ch->h;
  if (ch->rank >= 0 && ch->role) {
    hm__peer_t *p = ch->role == HM_CHAN_WRITER ? &h->writer[ch->rank] : &h->reader[ch->rank];
    if (!hm__lock(h)) {
      p->state = HM__PEER_CLOSED;
      if (ch->role == HM_CHAN_WRITER) {
        p->last_step = ch->w_last;
      }
      pthread_cond_broadcast(&h->cv);
      hm__unlock(h);
    }
    pthread_mutex_unlock(&p->live);
  }
  _hm_prim_unmap(ch->base, ch->map_len);
  _hm_prim_close(ch->fd);
  free(ch);
  return 0;
}

int hm_chan_rank(const hm_chan_t *ch) { return ch ? ch->rank : -1; }

void hm_chan_set_timeout(hm_chan_t *ch, int timeout_ms) {
  if (ch) ch->timeout_ms = timeout_ms;
}

/* ---- writer ---- */

static hm__slot_t *hm__find(hm_chan_t *ch, uint64_t step, uint32_t state) {
  for (uint32_t i = 0; i < ch->h->nslots; i++) {
    hm__slot_t *s = hm__slot(ch->h, ch->base, i);
    if (s->state == state && s->step == step) return s;
  }
  return NULL;
}

/* Finds or takes the slot of step for this writer. */
static int hm__acquire(hm_chan_t *ch, uint64_t step) {
  hm__hdr_t *h = ch->h;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->w_last && step < ch->w_last)
    return _hm_error(ctx, -EINVAL, "step %llu: this writer already committed step %llu",
                     (unsigned long long)step, (unsigned long long)(ch->w_last - 1));
  int rc = hm__lock(h);
  if (rc) return _hm_error(ctx, rc, "channel lock: %s", hm_strerror(rc));
  uint64_t t0 = _hm_prim_now_ns();
  hm__slot_t *s = NULL;
  for (;;) {
    s = hm__find(ch, step, HM__FILLING);
    if (s) break;
    if (step < h->opened_hi) {
      hm__unlock(h);
      return _hm_error(ctx, -EINVAL, "step %llu is already committed or was skipped "
                       "(steps increase; the channel is at %llu)",
                       (unsigned long long)step, (unsigned long long)(h->opened_hi - 1));
    }
    for (uint32_t i = 0; i < h->nslots && !s; i++)
        if (hm__slot(h, ch->base, i)->state == HM__FREE) s = hm__slot(h, ch->base, i);
    if (!s && h->policy == HM_CHAN_DISCARD) {
      hm__slot_t *old = NULL;
      for (uint32_t i = 0; i < h->nslots; i++) {
        hm__slot_t *c = hm__slot(h, ch->base, i);
        if (c->state == HM__COMMITTED && !c->held && (!old || c->step < old->step)) old = c;
      }
      if (old) {
        hm__free_slot(old);
        h->discarded++;
        s = old;
      }
    }
    if (s) {
      s->step = step;
      /* Every reader rank owes a release, except ranks known to be dead. */
      s->pending = 0;
      for (uint32_t r = 0; r < h->nreaders; r++)
        if (h->reader[r].state != HM__PEER_DEAD) s->pending |= 1ull << r;
      s->state = HM__FILLING;
      h->opened_hi = step + 1;
      break;
    }
    /* Queue full: wait for a release, watching the readers. */
    for (uint32_t r = 0; r < h->nreaders; r++) {
      if (h->reader[r].state == HM__PEER_ACTIVE && hm__peer_dead(&h->reader[r])) {
        int pid = h->reader[r].pid;
        hm__drop_reader(h, ch->base, (int)r);
        hm__unlock(h);
        return _hm_error(ctx, -EPIPE, "reader rank %u (pid %d) died while the queue was "
                         "full; its steps were released", r, pid);
      }
    }
    if (hm__wait_slice(h, t0, ch->timeout_ms)) {
      hm__unlock(h);
      return _hm_error(ctx, -ETIMEDOUT, "step %llu: queue full (%u steps) for %d ms; "
                       "readers are not releasing steps",
                       (unsigned long long)step, h->nslots, ch->timeout_ms);
    }
  }
  hm__unlock(h);
  ch->w_step = step;
  ch->w_slot = s;
  return 0;
}

/* Allocates file space up to end bytes of a slot's data area. */
static int hm__reserve(hm_chan_t *ch, hm__slot_t *s, uint64_t end) {
  hm__hdr_t *h = ch->h;
  int rc = hm__lock(h);
  if (rc) return rc;
  if (s->reserved < end) {
    uint64_t want = end + HM__GROW;
    if (want > h->slot_bytes) want = h->slot_bytes;
    uint64_t off = (uint64_t)((unsigned char *)s - ch->base) + hm__data_off(h);
    rc = _hm_prim_chan_reserve(ch->fd, off + s->reserved, want - s->reserved);
    if (rc && end < want) /* a full tier may still hold just what is needed */
      rc = _hm_prim_chan_reserve(ch->fd, off + s->reserved, end - s->reserved), want = end;
    if (!rc) s->reserved = want;
  }
  hm__unlock(h);
  return rc;
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
  hm__hdr_t *h = ch->h;
  hm__slot_t *s = ch->w_slot;
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
  uint32_t hv = hm__hash(key, klen);
  uint64_t want = ((uint64_t)s->gen << 32) | hv;
  hm__entry_t *ix = hm__index(s);
  uint64_t mask = h->index_cap - 1;
  for (uint64_t i = hv & mask;; i = (i + 1) & mask) {
    hm__entry_t *e = &ix[i];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    if ((uint32_t)(w >> 32) != s->gen) {
      if (atomic_compare_exchange_strong(&e->word, &w, want)) {
        e->klen = (uint32_t)klen;
        memcpy(e->key, key, klen + 1);
        e->off = off;
        e->len = len;
        atomic_store_explicit(&e->ready, s->gen, memory_order_release);
        *ptr = hm__data(h, s) + off;
        return 0;
      }
      i = (i - 1) & mask; /* lost the race for this entry: look at it again */
      continue;
    }
    if (w == want && atomic_load_explicit(&e->ready, memory_order_acquire) == s->gen &&
        e->klen == klen && !memcmp(e->key, key, klen)) {
      atomic_fetch_sub_explicit(&s->nobj, 1, memory_order_relaxed);
      return _hm_error(ctx, -EEXIST, "key '%s' is already in step %llu", key,
                       (unsigned long long)step);
    }
  }
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
  hm__hdr_t *h = ch->h;
  hm__slot_t *s = ch->w_slot;
  int rc = hm__lock(h);
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
  hm__unlock(h);
  ch->w_last = step + 1;
  ch->w_slot = NULL;
  return 0;
}

/* ---- reader ---- */

int hm_chan_wait(hm_chan_t *ch, uint64_t step, int timeout_ms) {
  if (!ch) return -EINVAL;
  hm_ctx_t *ctx = ch->ctx;
  if (ch->role != HM_CHAN_READER) return _hm_error(ctx, -EINVAL, "wait on a writer handle");
  hm__hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  int rc = hm__lock(h);
  if (rc) return _hm_error(ctx, rc, "channel lock: %s", hm_strerror(rc));
  uint64_t t0 = _hm_prim_now_ns();
  for (;;) {
    hm__slot_t *s = hm__find(ch, step, HM__COMMITTED);
    if (s) {
      if (!(s->pending & bit)) {
        hm__unlock(h);
        return _hm_error(ctx, -ENOENT, "step %llu was already released by reader rank %d",
                         (unsigned long long)step, ch->rank);
      }
      s->held |= bit;
      hm__unlock(h);
      ch->r_step = step;
      ch->r_slot = s;
      return 0;
    }
    if (step < h->opened_hi && !hm__find(ch, step, HM__FILLING)) {
      hm__unlock(h);
      return _hm_error(ctx, -ENOENT, "step %llu is gone (discarded while the queue was full, "
                       "or never written); the channel is at step %llu",
                       (unsigned long long)step, (unsigned long long)(h->opened_hi - 1));
    }
    for (uint32_t w = 0; w < h->nwriters; w++) {
      hm__peer_t *p = &h->writer[w];
      if (p->state == HM__PEER_ACTIVE) hm__peer_dead(p);
      if (p->last_step > step) continue; /* it committed this step */
      if (p->state == HM__PEER_DEAD) {
        int pid = p->pid;
        hm__unlock(h);
        return _hm_error(ctx, -EPIPE, "writer rank %u (pid %d) died before committing step "
                         "%llu", w, pid, (unsigned long long)step);
      }
      if (p->state == HM__PEER_CLOSED) {
        hm__unlock(h);
        return _hm_error(ctx, -ENODATA, "end of stream: writer rank %u closed before step "
                         "%llu", w, (unsigned long long)step);
      }
    }
    if (hm__wait_slice(h, t0, timeout_ms)) {
      hm__unlock(h);
      return _hm_error(ctx, -ETIMEDOUT, "step %llu not committed within %d ms",
                       (unsigned long long)step, timeout_ms);
    }
  }
}

int hm_chan_latest(hm_chan_t *ch, uint64_t *step) {
  if (!ch || !step) return -EINVAL;
  hm__hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  int rc = hm__lock(h);
  if (rc) return rc;
  int found = 0;
  for (uint32_t i = 0; i < h->nslots; i++) {
    hm__slot_t *s = hm__slot(h, ch->base, i);
    if (s->state == HM__COMMITTED && (s->pending & bit) && (!found || s->step > *step)) {
      *step = s->step;
      found = 1;
    }
  }
  hm__unlock(h);
  return found ? 0 : -ENOENT;
}

static hm__slot_t *hm__held(hm_chan_t *ch, uint64_t step) {
  if (hm_likely(ch->r_slot && ch->r_step == step)) return ch->r_slot;
  /* Slots held by this rank do not change until it releases them. */
  uint64_t bit = 1ull << ch->rank;
  for (uint32_t i = 0; i < ch->h->nslots; i++) {
    hm__slot_t *s = hm__slot(ch->h, ch->base, i);
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
  hm__slot_t *s = ch->role == HM_CHAN_READER ? hm__held(ch, step) : NULL;
  if (hm_unlikely(!s))
    return _hm_error(ch->ctx, -EINVAL, "step %llu is not held by this reader (wait first)",
                     (unsigned long long)step);
  hm__hdr_t *h = ch->h;
  size_t klen = strlen(key);
  uint32_t hv = hm__hash(key, klen);
  uint64_t want = ((uint64_t)s->gen << 32) | hv;
  hm__entry_t *ix = hm__index(s);
  uint64_t mask = h->index_cap - 1;
  for (uint64_t i = hv & mask;; i = (i + 1) & mask) {
    hm__entry_t *e = &ix[i];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
    if ((uint32_t)(w >> 32) != s->gen) break;
    if (w == want && e->klen == klen && !memcmp(e->key, key, klen)) {
      *ptr = hm__data(h, s) + e->off;
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
  hm__hdr_t *h = ch->h;
  uint64_t bit = 1ull << ch->rank;
  if (ch->role != HM_CHAN_READER) return _hm_error(ch->ctx, -EINVAL, "release on a writer");
  int rc = hm__lock(h);
  if (rc) return rc;
  hm__slot_t *s = hm__find(ch, step, HM__COMMITTED);
  if (!s || !(s->pending & bit)) {
    hm__unlock(h);
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
  hm__unlock(h);
  if (ch->r_slot == s) ch->r_slot = NULL;
  return 0;
}

int hm_chan_info_json(hm_chan_t *ch, char **out) {
  if (!ch || !out) return -EINVAL;
  hm__hdr_t *h = ch->h;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  int rc = hm__lock(h);
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
    hm__slot_t *s = hm__slot(h, ch->base, i);
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
  hm__unlock(h);
  _hm_sb_puts(&sb, "]}");
  return _hm_sb_take(&sb, out);
}
