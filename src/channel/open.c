/* SPDX-License-Identifier: BSD-3-Clause */
/* A channel's creation, opening and closing: tier and name checks, the
 * segment's geometry, the robust process-shared lock, and rank claims. The
 * data path (put, commit, wait, get, release) is in channel.c; the layout
 * both share is in layout.h. */
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

/* ---- create / open / close ---- */

static int hm__init_sync(_hm_chan_hdr_t *h) {
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

/* A channel's geometry, from its config with the defaults filled in. */
typedef struct hm__geom_s {
  uint32_t slots, writers, readers;
  uint64_t slot_bytes, max_objects, cap, data_off, stride, total;
  int kind, node;
  const char *dir;
} hm__geom_t;

/* Zero fields of cfg take their defaults. */
static void hm__geom_defaults(const hm_chan_config_t *cfg, hm__geom_t *g) {
  g->slots = cfg->slots ? cfg->slots : 2;
  g->writers = cfg->writers ? cfg->writers : 1;
  g->readers = cfg->readers ? cfg->readers : 1;
  g->slot_bytes = cfg->slot_bytes ? cfg->slot_bytes : 64ull << 20;
  g->max_objects = cfg->max_objects ? cfg->max_objects : 4096;
}

/* Index capacity, slot stride and file size of a checked geometry. */
static void hm__geom_layout(hm__geom_t *g) {
  g->cap = 16;
  while (g->cap < g->max_objects * 2) g->cap <<= 1; /* load factor <= 1/2: short probes */
  _hm_chan_hdr_t proto;
  memset(&proto, 0, sizeof proto);
  proto.index_cap = g->cap;
  g->data_off = _hm_chan_data_off(&proto);
  g->stride = (g->data_off + g->slot_bytes + 4095) & ~4095ull;
  g->total = HM__HDR_BYTES + g->stride * g->slots;
}

/* Checks cfg (in the order users meet the messages) and fills g. */
static int hm__create_check(hm_ctx_t *ctx, const hm_chan_config_t *cfg, hm__geom_t *g) {
  if (cfg->size < sizeof *cfg || cfg->version != HM_CHAN_CONFIG_VERSION)
    return _hm_error(ctx, -EINVAL, "channel config: size/version mismatch");
  if (hm__tier(cfg->tier, &g->kind, &g->node, &g->dir))
    return _hm_error(ctx, -EINVAL,
                     "channel tier '%s': expected dram, node:N, file:DIR or dax:DIR",
                     cfg->tier ? cfg->tier : "");
  if (!hm__name_ok(cfg->name))
    return _hm_error(ctx, -EINVAL, "channel name '%s': use 1-64 of [A-Za-z0-9._-]",
                     cfg->name ? cfg->name : "");
  hm__geom_defaults(cfg, g);
  if (g->slots > 1024) return _hm_error(ctx, -EINVAL, "channel slots %u: at most 1024", g->slots);
  if (g->writers > HM_CHAN_MAX_RANKS || g->readers > HM_CHAN_MAX_RANKS)
    return _hm_error(ctx, -EINVAL, "channel writers/readers: at most %d ranks each",
                     HM_CHAN_MAX_RANKS);
  if (cfg->policy != HM_CHAN_BLOCK && cfg->policy != HM_CHAN_DISCARD)
    return _hm_error(ctx, -EINVAL, "channel policy %d: block (0) or discard (1)",
                     (int)cfg->policy);
  if (g->max_objects > (1ull << 30) || g->slot_bytes > (1ull << 42))
    return _hm_error(ctx, -EINVAL, "channel slot_bytes or max_objects too large");
  hm__geom_layout(g);
  return 0;
}

/* Sizes, maps (and binds) the new file and allocates its headers and
 * indexes. *said: the error is already on ctx. */
static int hm__create_space(hm_ctx_t *ctx, int fd, const char *path, const hm__geom_t *g,
                            void **base, int *said) {
  int rc = _hm_prim_chan_truncate(fd, g->total);
  if (!rc) rc = _hm_prim_chan_map(fd, g->total, g->kind == 3, base);
  if (!rc && g->kind == 1) {
    rc = _hm_prim_bind_node(*base, g->total, g->node);
    if (rc) {
      *said = 1;
      return _hm_error(ctx, rc, "channel tier node:%d: mbind failed: %s", g->node,
                       hm_strerror(rc));
    }
  }
  /* The header and every slot's header and index are allocated now; data
   * space as steps fill (hm__reserve). */
  if (!rc) rc = _hm_prim_chan_reserve(fd, 0, HM__HDR_BYTES);
  for (uint32_t i = 0; !rc && i < g->slots; i++)
    rc = _hm_prim_chan_reserve(fd, HM__HDR_BYTES + g->stride * i, g->data_off);
  if (rc == -ENOSPC) {
    *said = 1;
    return _hm_error(ctx, rc, "channel '%s': no space on the tier for its index (%llu bytes)",
                     path, (unsigned long long)(HM__HDR_BYTES + g->data_off * g->slots));
  }
  return rc;
}

static int hm__create_header(_hm_chan_hdr_t *h, const hm_chan_config_t *cfg, const hm__geom_t *g) {
  memset(h, 0, sizeof *h);
  int rc = hm__init_sync(h);
  if (rc) return rc;
  h->layout = HM__LAYOUT;
  h->hdr_bytes = HM__HDR_BYTES;
  h->total_bytes = g->total;
  h->slot_stride = g->stride;
  h->slot_bytes = g->slot_bytes;
  h->index_cap = g->cap;
  h->max_objects = g->max_objects;
  h->nslots = g->slots;
  h->nwriters = g->writers;
  h->nreaders = g->readers;
  h->policy = (uint32_t)cfg->policy;
  h->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
  h->numa_node = g->node;
  snprintf(h->tier, sizeof h->tier, "%s",
           g->kind == 0 ? "dram" : g->kind == 1 ? "node" : g->kind == 2 ? "file" : "dax");
  for (uint32_t i = 0; i < g->slots; i++) {
    _hm_chan_slot_t *s = _hm_chan_slot(h, (unsigned char *)h, i);
    memset(s, 0, sizeof *s);
    s->gen = 1;
  }
  atomic_thread_fence(memory_order_release);
  h->magic = HM__MAGIC; /* last: an opener never sees a half-built header */
  return 0;
}

int hm_chan_create(hm_ctx_t *ctx, const hm_chan_config_t *cfg) {
  if (!ctx || !cfg) return -EINVAL;
  hm__geom_t g;
  int rc = hm__create_check(ctx, cfg, &g);
  if (rc) return rc;
  char path[HM_PATH_MAX];
  rc = hm_chan_path(cfg->tier, cfg->name, path, sizeof path);
  if (rc) return _hm_error(ctx, rc, "channel path for '%s' is too long", cfg->name);
  if (g.kind >= 2) {
    rc = _hm_prim_check_writable_dir(g.dir);
    if (rc) return _hm_error(ctx, rc, "channel directory '%s': %s", g.dir, hm_strerror(rc));
  }
  int fd = _hm_prim_chan_open(path, cfg->replace ? 2 : 1);
  if (fd < 0) {
    if (fd == -EEXIST)
      return _hm_error(ctx, fd, "channel '%s' exists (%s); open it or unlink it first",
                       cfg->name, path);
    return _hm_error(ctx, fd, "channel file '%s': %s", path, hm_strerror(fd));
  }
  void *base = NULL;
  int said = 0;
  rc = hm__create_space(ctx, fd, path, &g, &base, &said);
  if (!rc) rc = hm__create_header(base, cfg, &g);
  if (base) _hm_prim_unmap(base, g.total);
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

/* Maps the whole channel file after checking its header; -EPROTO when it is
 * not a channel of this layout. */
static int hm__open_map(int fd, int dax, void **base, uint64_t *total) {
  uint64_t size = 0;
  void *hdr = NULL;
  int rc = _hm_prim_chan_size(fd, &size);
  if (!rc && size < HM__HDR_BYTES) rc = -EPROTO;
  if (!rc) rc = _hm_prim_chan_map(fd, HM__HDR_BYTES, 0, &hdr);
  const _hm_chan_hdr_t *h = hdr;
  if (!rc && (h->magic != HM__MAGIC || h->layout != HM__LAYOUT || h->total_bytes != size))
    rc = -EPROTO;
  *total = rc ? 0 : h->total_bytes;
  if (hdr) _hm_prim_unmap(hdr, HM__HDR_BYTES);
  if (!rc) rc = _hm_prim_chan_map(fd, *total, dax, base);
  return rc;
}

/* Takes rank (or, rank < 0, the first free one) of ch's role: -EBUSY when
 * a live process holds it. */
static int hm__claim_rank(hm_chan_t *ch, _hm_chan_peer_t *peers, uint32_t n, int rank) {
  _hm_chan_hdr_t *h = ch->h;
  int rc = -EBUSY;
  for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? (int)n : rank + 1); r++) {
    int lr = pthread_mutex_trylock(&peers[r].live);
    if (lr == EOWNERDEAD) {
      pthread_mutex_consistent(&peers[r].live);
      lr = 0;
    }
    if (lr) continue;
    if ((rc = _hm_chan_lock(h))) {
      pthread_mutex_unlock(&peers[r].live);
      break;
    }
    peers[r].pid = _hm_prim_chan_pid();
    peers[r].state = HM__PEER_ACTIVE;
    /* A writer rank that returns continues after its last commit. */
    if (ch->role == HM_CHAN_WRITER) ch->w_last = peers[r].last_step;
    _hm_chan_unlock(h);
    ch->rank = r;
    return 0;
  }
  return rc;
}

/* The handle of a mapped channel, owning fd and the mapping. */
static hm_chan_t *hm__chan_new(hm_ctx_t *ctx, int fd, void *base, uint64_t total,
                               hm_chan_role_t role) {
  hm_chan_t *ch = calloc(1, sizeof *ch);
  if (!ch) return NULL;
  _hm_chan_hdr_t *h = base;
  ch->ctx = ctx;
  ch->fd = fd;
  ch->base = base;
  ch->map_len = total;
  ch->h = h;
  ch->role = role;
  /* No rank until hm__claim_rank takes one: hm_chan_close on a handle
   * refused before then must not mark or unlock rank 0. */
  ch->rank = -1;
  ch->timeout_ms = h->timeout_ms;
  return ch;
}

/* Opens and maps the segment of (tier, name); errors name its path. */
static int hm__open_segment(hm_ctx_t *ctx, const char *tier, const char *name, int *fd_out,
                            void **base, uint64_t *total) {
  char path[HM_PATH_MAX];
  int rc = hm_chan_path(tier, name, path, sizeof path);
  if (rc) return _hm_error(ctx, -EINVAL, "bad channel tier '%s' or name '%s'",
                           tier ? tier : "", name ? name : "");
  int fd = _hm_prim_chan_open(path, 0);
  if (fd < 0)
    return _hm_error(ctx, fd, "channel '%s' (%s): %s", name, path,
                     fd == -ENOENT ? "no such channel (create it first)" : hm_strerror(fd));
  int kind, node;
  const char *dir;
  hm__tier(tier, &kind, &node, &dir);
  rc = hm__open_map(fd, kind == 3, base, total);
  if (rc) {
    _hm_prim_close(fd);
    if (rc == -EPROTO)
      return _hm_error(ctx, rc, "'%s' is not a hetmem channel of layout %u", path, HM__LAYOUT);
    return _hm_error(ctx, rc, "channel '%s': %s", path, hm_strerror(rc));
  }
  *fd_out = fd;
  return 0;
}

/* Gives ch the asked rank of its role, or closes it and says why. */
static int hm__open_rank(hm_ctx_t *ctx, hm_chan_t *ch, const char *name, int rank) {
  _hm_chan_hdr_t *h = ch->h;
  hm_chan_role_t role = ch->role;
  uint32_t n = role == HM_CHAN_WRITER ? h->nwriters : h->nreaders;
  if (rank >= (int)n) {
    hm_chan_close(ch);
    return _hm_error(ctx, -EINVAL, "channel '%s' has %u %s ranks; rank %d is out of range",
                     name, n, role == HM_CHAN_WRITER ? "writer" : "reader", rank);
  }
  int rc = hm__claim_rank(ch, role == HM_CHAN_WRITER ? h->writer : h->reader, n, rank);
  if (rc) {
    hm_chan_close(ch);
    return _hm_error(ctx, rc, "channel '%s': %s rank %s is held by a live process", name,
                     role == HM_CHAN_WRITER ? "writer" : "reader",
                     rank < 0 ? "(every one)" : "");
  }
  return 0;
}

int hm_chan_open(hm_ctx_t *ctx, const char *tier, const char *name, hm_chan_role_t role,
                 int rank, hm_chan_t **out) {
  if (!ctx || !out) return -EINVAL;
  *out = NULL;
  if (role != HM_CHAN_WRITER && role != HM_CHAN_READER)
    return _hm_error(ctx, -EINVAL, "channel role must be writer or reader");
  int fd = -1;
  void *base = NULL;
  uint64_t total = 0;
  int rc = hm__open_segment(ctx, tier, name, &fd, &base, &total);
  if (rc) return rc;
  hm_chan_t *ch = hm__chan_new(ctx, fd, base, total, role);
  if (!ch) {
    _hm_prim_unmap(base, total);
    _hm_prim_close(fd);
    return -ENOMEM;
  }
  rc = hm__open_rank(ctx, ch, name, rank);
  if (rc) return rc;
  *out = ch;
  return 0;
}

int hm_chan_close(hm_chan_t *ch) {
  if (!ch) return 0;
  _hm_chan_hdr_t *h = ch->h;
  if (ch->rank >= 0 && ch->role) {
    _hm_chan_peer_t *p = ch->role == HM_CHAN_WRITER ? &h->writer[ch->rank] : &h->reader[ch->rank];
    if (!_hm_chan_lock(h)) {
      p->state = HM__PEER_CLOSED;
      if (ch->role == HM_CHAN_WRITER) {
        p->last_step = ch->w_last;
      }
      pthread_cond_broadcast(&h->cv);
      _hm_chan_unlock(h);
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
