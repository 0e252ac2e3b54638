/* SPDX-License-Identifier: BSD-3-Clause */
/* Idle memory latency: a pointer chase through one random cycle over every
 * cache line of a buffer much larger than the last-level cache. Each load's
 * address comes from the previous load, so neither out-of-order execution
 * nor the prefetchers can overlap them; the time per load is the latency. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"
#include "probe/probe.h"

#define HM__LINE 64

typedef struct hm__line_s {
  struct hm__line_s *next;
  char pad[HM__LINE - sizeof(void *)];
} hm__line_t;

static uint64_t hm__rng(uint64_t *s) {
  /* xorshift64*: fast, and a fixed seed makes runs comparable. */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* Not inlined, and the end pointer escapes, so the loop cannot be dropped. */
__attribute__((noinline)) static hm__line_t *hm__chase(hm__line_t *p, uint64_t loads) {
  for (uint64_t k = 0; k < loads; k += 8) {
    p = p->next;
    p = p->next;
    p = p->next;
    p = p->next;
    p = p->next;
    p = p->next;
    p = p->next;
    p = p->next;
  }
  return p;
}

/* Loaded latency: threads that stream reads through their own slice of a
 * buffer on the same node while the chase runs. The chase thread moves
 * them through these phases (the go word). */
enum { HM__GO_WAIT = 0, HM__GO_STREAM = 1, HM__GO_STOP = 2, HM__GO_COUNT = 3 };
typedef struct hm__loader_s {
  pthread_t tid;
  int cpu;
  const double *base;
  size_t n;            /* doubles in this thread's slice */
  atomic_int *ready;   /* count of loaders that touched their slice */
  atomic_int *go;      /* HM__GO_*: stream (say so in running), count bytes, stop */
  atomic_int *running; /* loaders streaming since go became 1 */
  atomic_int *counted; /* loaders that counted a chunk since go became 3 */
  uint64_t bytes;      /* read while go is HM__GO_COUNT */
  double sink;         /* keeps the sums alive */
  int rc;
} hm__loader_t;

static double hm__read_sum(const double *restrict p, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += p[j];
    s1 += p[j + 1];
    s2 += p[j + 2];
    s3 += p[j + 3];
  }
  for (; j < n; j++) s0 += p[j];
  return s0 + s1 + s2 + s3;
}

static void *hm__loader_main(void *arg) {
  hm__loader_t *l = arg;
  l->rc = _hm_prim_set_thread_cpus(&l->cpu, 1);
  /* First touch by the thread that reads it, 1.0 everywhere. */
  double *w = (double *)(uintptr_t)l->base;
  for (size_t j = 0; j < l->n; j++) w[j] = 1.0;
  atomic_fetch_add(l->ready, 1);
  const size_t chunk = (1u << 20) / sizeof(double);
  size_t off = 0;
  int state, said_running = 0, said_counted = 0;
  while ((state = atomic_load_explicit(l->go, memory_order_relaxed)) != HM__GO_STOP) {
    size_t len = l->n - off < chunk ? l->n - off : chunk;
    l->sink += hm__read_sum(l->base + off, len);
    if (state != HM__GO_WAIT && !said_running) {
      said_running = 1;
      atomic_fetch_add(l->running, 1);
    }
    if (state == HM__GO_COUNT) {
      l->bytes += len * sizeof(double);
      if (!said_counted) {
        said_counted = 1;
        atomic_fetch_add(l->counted, 1);
      }
    }
    off += len;
    if (off >= l->n) off = 0;
  }
  return NULL;
}

void hm_latency_config_default(hm_latency_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->version = HM_LATENCY_CONFIG_VERSION;
  cfg->numa_node = -1;
  cfg->cpu = -1;
}

/* One latency measurement: its buffers, its pinning, its load threads. */
typedef struct hm__lat_s {
  hm_ctx_t *ctx;
  const hm_latency_config_t *cfg;
  uint64_t bytes, loads, lbytes;
  size_t n, len;
  unsigned reps;
  int *cpus, *saved;
  size_t *perm;
  void *mem, *lmem;
  int pinned, nsaved, nc, cpu;
  uint32_t nload, started;
  hm__loader_t *loaders;
  int *loader_cpus;
  hm__line_t *lines;
  atomic_int ready, go, running, counted;
  /* results */
  double best;
  uint64_t lt0, lt1, lbytes_read;
} hm__lat_t;

/* Buffer size (lines), loads and repetitions from cfg and its defaults. */
static int hm__lat_sizes(hm__lat_t *L) {
  const hm_latency_config_t *cfg = L->cfg;
  uint64_t bytes = cfg->buffer_bytes;
  if (!bytes) {
    bytes = 4 * _hm_probe_llc_bytes();
    if (bytes < (64u << 20)) bytes = 64u << 20;
  }
  L->bytes = bytes;
  L->n = (size_t)(bytes / HM__LINE);
  if (L->n < 16) return _hm_error(L->ctx, -EINVAL, "latency: buffer of %llu bytes is too small",
                                  (unsigned long long)bytes);
  L->len = L->n * HM__LINE;
  uint64_t loads = cfg->loads ? cfg->loads : 2000000;
  L->loads = (loads + 7) & ~(uint64_t)7;
  L->reps = cfg->repetitions ? cfg->repetitions : 5;
  L->nload = cfg->load_threads;
  L->lbytes = bytes < (64u << 20) ? (64u << 20) : bytes;
  return 0;
}

/* The load threads' CPUs: the node's CPUs other than the chase's. */
static int hm__lat_loader_cpus(hm__lat_t *L) {
  L->loaders = calloc(L->nload, sizeof *L->loaders);
  L->loader_cpus = calloc(L->nload, sizeof *L->loader_cpus);
  if (!L->loaders || !L->loader_cpus) return _hm_error(L->ctx, -ENOMEM, "latency: out of memory");
  uint32_t k = 0;
  for (int i = 0; i < L->nc && k < L->nload; i++)
    if (L->cpus[i] != L->cpu) L->loader_cpus[k++] = L->cpus[i];
  if (k < L->nload)
    return _hm_error(L->ctx, -EINVAL, "latency: %u load threads need %u CPUs besides CPU %d; "
                     "there are %u", L->nload, L->nload, L->cpu, k);
  return 0;
}

/* Chooses the CPUs and pins this thread to the chase's. */
static int hm__lat_cpus(hm__lat_t *L) {
  const hm_latency_config_t *cfg = L->cfg;
  L->cpus = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  L->saved = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  L->perm = malloc(L->n * sizeof *L->perm);
  if (!L->cpus || !L->saved || !L->perm)
    return _hm_error(L->ctx, -ENOMEM, "latency: out of memory");
  L->nsaved = _hm_prim_allowed_cpus(L->saved, HM_PROBE_MAX_CPUS);
  L->nc = _hm_probe_cpus_for_node(cfg->numa_node, L->cpus, HM_PROBE_MAX_CPUS);
  L->cpu = cfg->cpu >= 0 ? cfg->cpu : (L->nc > 0 ? L->cpus[0] : -1);
  int rc = L->nload ? hm__lat_loader_cpus(L) : 0;
  if (rc) return rc;
  if (L->nsaved <= 0 || L->cpu < 0 || (rc = _hm_prim_set_thread_cpus(&L->cpu, 1)))
    return _hm_error(L->ctx, rc ? rc : -EINVAL, "latency: cannot run on CPU %d", L->cpu);
  L->pinned = 1;
  return 0;
}

/* Maps len bytes on the configured node. */
static int hm__lat_map(hm__lat_t *L, size_t len, void **mem) {
  int rc = _hm_prim_map_anon(len, mem);
  if (rc)
    return _hm_error(L->ctx, rc, "latency: cannot map %llu bytes: %s", (unsigned long long)len,
                     hm_strerror(rc));
  if (L->cfg->numa_node >= 0 && (rc = _hm_prim_bind_node(*mem, len, L->cfg->numa_node)))
    return _hm_error(L->ctx, rc, "latency: cannot bind memory to node %d: %s",
                     L->cfg->numa_node, hm_strerror(rc));
  return 0;
}

/* The chase buffer: one random cycle through its lines. */
static int hm__lat_buffer(hm__lat_t *L) {
  int rc = hm__lat_map(L, L->len, &L->mem);
  if (rc) return rc;
  /* Huge pages keep TLB misses out of the figure, so that it is the memory's
   * latency rather than the page walker's. */
  if (!L->cfg->small_pages) (void)_hm_prim_advise_hugepage(L->mem, L->len);

  /* Sattolo's shuffle yields a single cycle through all n lines, so the
   * chase visits every line (random within and across pages) before it
   * repeats. */
  size_t n = L->n, *perm = L->perm;
  uint64_t seed = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < n; i++) perm[i] = i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)(hm__rng(&seed) % i);
    size_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  L->lines = L->mem;
  for (size_t i = 0; i < n; i++) L->lines[i].next = &L->lines[perm[i]];
  return 0;
}

/* Starts the load threads and waits until each touched its slice. */
static int hm__lat_start_loaders(hm__lat_t *L) {
  size_t per = (size_t)(L->lbytes / sizeof(double)) / L->nload;
  int rc = hm__lat_map(L, L->lbytes, &L->lmem);
  if (rc) return rc;
  for (uint32_t i = 0; i < L->nload; i++) {
    hm__loader_t *l = &L->loaders[i];
    l->cpu = L->loader_cpus[i];
    l->base = (const double *)L->lmem + (size_t)i * per;
    l->n = per;
    l->ready = &L->ready;
    l->go = &L->go;
    l->running = &L->running;
    l->counted = &L->counted;
    if (pthread_create(&l->tid, NULL, hm__loader_main, l)) {
      atomic_store(&L->go, HM__GO_STOP);
      return _hm_error(L->ctx, -EAGAIN, "latency: cannot start load threads");
    }
    L->started++;
  }
  while (atomic_load(&L->ready) < (int)L->nload) (void)_hm_prim_now_ns();
  return 0;
}

/* The measurement proper; the end of the chase comes back to keep it live. */
static hm__line_t *hm__lat_measure(hm__lat_t *L) {
  uint64_t loads = L->loads, n = L->n;
  uint32_t nload = L->nload;
  unsigned reps = L->reps;
  hm__line_t *p = &L->lines[0];
  p = hm__chase(p, loads < n ? loads : n); /* warm the TLB and page tables */
  double best = INFINITY;
  /* The chase is timed only once every load thread streams (on a busy
   * machine one may not have run yet), and the load ends only once each
   * has counted some of its reads, so that "loaded" means loaded. Both
   * waits are bounded (2 s): a thread that never runs is reported by a
   * lower load_gbs, never by a hang. */
  uint64_t wait_end = _hm_prim_now_ns() + 2000000000ull;
  atomic_store(&L->go, HM__GO_STREAM);
  while (nload && atomic_load(&L->running) < (int)nload && _hm_prim_now_ns() < wait_end) {
  }
  atomic_store(&L->go, HM__GO_COUNT);
  uint64_t lt0 = _hm_prim_now_ns();
  for (unsigned k = 0; k < reps; k++) {
    uint64_t t0 = _hm_prim_now_ns();
    p = hm__chase(p, loads);
    uint64_t t1 = _hm_prim_now_ns();
    double ns = (double)(t1 - t0) / (double)loads;
    if (ns < best) best = ns;
  }
  wait_end = _hm_prim_now_ns() + 2000000000ull;
  while (nload && atomic_load(&L->counted) < (int)nload && _hm_prim_now_ns() < wait_end) {
  }
  atomic_store(&L->go, HM__GO_STOP);
  L->lt1 = _hm_prim_now_ns();
  L->lt0 = lt0;
  L->best = best;
  return p;
}

/* Joins the load threads: bytes they read, and a thread that could not pin. */
static int hm__lat_join(hm__lat_t *L) {
  int rc = 0;
  for (uint32_t i = 0; i < L->started; i++) {
    pthread_join(L->loaders[i].tid, NULL);
    L->lbytes_read += L->loaders[i].bytes;
    if (L->loaders[i].rc && !rc)
      rc = _hm_error(L->ctx, L->loaders[i].rc, "latency: cannot pin a load thread to CPU %d",
                     L->loaders[i].cpu);
  }
  L->started = 0;
  return rc;
}

static void hm__lat_free(hm__lat_t *L) {
  if (L->started) {
    atomic_store(&L->go, HM__GO_STOP);
    for (uint32_t i = 0; i < L->started; i++) pthread_join(L->loaders[i].tid, NULL);
  }
  _hm_prim_unmap(L->lmem, L->lbytes);
  free(L->loaders);
  free(L->loader_cpus);
  if (L->pinned) _hm_prim_set_thread_cpus(L->saved, L->nsaved);
  _hm_prim_unmap(L->mem, L->len);
  free(L->perm);
  free(L->cpus);
  free(L->saved);
}

static void hm__lat_result(const hm__lat_t *L, hm_latency_result_t *out) {
  hm_latency_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  r.version = HM_LATENCY_RESULT_VERSION;
  r.buffer_bytes = L->len;
  r.loads = L->loads;
  r.ns_per_load = L->best;
  r.load_threads = L->nload;
  r.load_gbs = L->nload ? (double)L->lbytes_read / (double)(L->lt1 - L->lt0) : 0.0;
  *out = r;
}

int hm_probe_latency(hm_ctx_t *ctx, const hm_latency_config_t *cfg, hm_latency_result_t *out) {
  if (!cfg || !out || cfg->size < sizeof *cfg || out->size < sizeof *out)
    return _hm_error(ctx, -EINVAL, "latency: config or result struct of the wrong size");
  int rc = _hm_probe_check_node(ctx, cfg->numa_node);
  if (rc) return rc;
  hm__lat_t L;
  memset(&L, 0, sizeof L);
  L.ctx = ctx;
  L.cfg = cfg;
  atomic_init(&L.ready, 0);
  atomic_init(&L.go, 0);
  atomic_init(&L.running, 0);
  atomic_init(&L.counted, 0);
  if ((rc = hm__lat_sizes(&L))) return rc;
  rc = hm__lat_cpus(&L);
  if (!rc) rc = hm__lat_buffer(&L);
  if (!rc && L.nload) rc = hm__lat_start_loaders(&L);
  if (!rc) {
    hm__line_t *p = hm__lat_measure(&L);
    rc = hm__lat_join(&L);
    if (!rc && p == NULL) /* cannot happen: the cycle has no NULL; keeps p live */
      rc = _hm_error(ctx, -EIO, "latency: chase left the buffer");
  }
  if (!rc) hm__lat_result(&L, out);
  hm__lat_free(&L);
  return rc;
}
