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

int hm_probe_latency(hm_ctx_t *ctx, const hm_latency_config_t *cfg, hm_latency_result_t *out) {
  if (!cfg || !out || cfg->size < sizeof *cfg || out->size < sizeof *out)
    return _hm_error(ctx, -EINVAL, "latency: config or result struct of the wrong size");
  int rc = _hm_probe_check_node(ctx, cfg->numa_node);
  if (rc) return rc;
  uint64_t bytes = cfg->buffer_bytes;
  if (!bytes) {
    bytes = 4 * _hm_probe_llc_bytes();
    if (bytes < (64u << 20)) bytes = 64u << 20;
  }
  size_t n = (size_t)(bytes / HM__LINE);
  if (n < 16) return _hm_error(ctx, -EINVAL, "latency: buffer of %llu bytes is too small",
                               (unsigned long long)bytes);
  size_t len = n * HM__LINE;
  uint64_t loads = cfg->loads ? cfg->loads : 2000000;
  loads = (loads + 7) & ~(uint64_t)7;
  unsigned reps = cfg->repetitions ? cfg->repetitions : 5;

  int *cpus = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  int *saved = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  size_t *perm = malloc(n * sizeof *perm);
  void *mem = NULL;
  int pinned = 0, nsaved = 0;
  uint32_t nload = cfg->load_threads, started = 0;
  hm__loader_t *loaders = NULL;
  int *loader_cpus = NULL;
  void *lmem = NULL;
  uint64_t lbytes = bytes < (64u << 20) ? (64u << 20) : bytes;
  atomic_int ready = 0, go = 0, running = 0, counted = 0;
  if (!cpus || !saved || !perm) {
    rc = _hm_error(ctx, -ENOMEM, "latency: out of memory");
    goto done;
  }
  nsaved = _hm_prim_allowed_cpus(saved, HM_PROBE_MAX_CPUS);
  int nc = _hm_probe_cpus_for_node(cfg->numa_node, cpus, HM_PROBE_MAX_CPUS);
  int cpu = cfg->cpu >= 0 ? cfg->cpu : (nc > 0 ? cpus[0] : -1);
  if (nload) {
    loaders = calloc(nload, sizeof *loaders);
    loader_cpus = calloc(nload, sizeof *loader_cpus);
    if (!loaders || !loader_cpus) {
      rc = _hm_error(ctx, -ENOMEM, "latency: out of memory");
      goto done;
    }
    uint32_t k = 0;
    for (int i = 0; i < nc && k < nload; i++)
      if (cpus[i] != cpu) loader_cpus[k++] = cpus[i];
    if (k < nload) {
      rc = _hm_error(ctx, -EINVAL, "latency: %u load threads need %u CPUs besides CPU %d; "
                     "there are %u", nload, nload, cpu, k);
      goto done;
    }
  }
  if (nsaved <= 0 || cpu < 0 || (rc = _hm_prim_set_thread_cpus(&cpu, 1))) {
    rc = _hm_error(ctx, rc ? rc : -EINVAL, "latency: cannot run on CPU %d", cpu);
    goto done;
  }
  pinned = 1;
  if ((rc = _hm_prim_map_anon(len, &mem))) {
    _hm_error(ctx, rc, "latency: cannot map %zu bytes: %s", len, hm_strerror(rc));
    goto done;
  }
  if (cfg->numa_node >= 0 && (rc = _hm_prim_bind_node(mem, len, cfg->numa_node))) {
    _hm_error(ctx, rc, "latency: cannot bind memory to node %d: %s", cfg->numa_node,
              hm_strerror(rc));
    goto done;
  }
  /* Huge pages keep TLB misses out of the figure, so that it is the memory's
   * latency rather than the page walker's. */
  if (!cfg->small_pages) (void)_hm_prim_advise_hugepage(mem, len);

  /* Sattolo's shuffle yields a single cycle through all n lines, so the
   * chase visits every line (random within and across pages) before it
   * repeats. */
  uint64_t seed = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < n; i++) perm[i] = i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)(hm__rng(&seed) % i);
    size_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  hm__line_t *lines = mem;
  for (size_t i = 0; i < n; i++) lines[i].next = &lines[perm[i]];

  if (nload) {
    size_t per = (size_t)(lbytes / sizeof(double)) / nload;
    if ((rc = _hm_prim_map_anon(lbytes, &lmem))) {
      _hm_error(ctx, rc, "latency: cannot map %llu bytes: %s", (unsigned long long)lbytes,
                hm_strerror(rc));
      goto done;
    }
    if (cfg->numa_node >= 0 && (rc = _hm_prim_bind_node(lmem, lbytes, cfg->numa_node))) {
      _hm_error(ctx, rc, "latency: cannot bind memory to node %d: %s", cfg->numa_node,
                hm_strerror(rc));
      goto done;
    }
    for (uint32_t i = 0; i < nload; i++) {
      hm__loader_t *l = &loaders[i];
      l->cpu = loader_cpus[i];
      l->base = (const double *)lmem + (size_t)i * per;
      l->n = per;
      l->ready = &ready;
      l->go = &go;
      l->running = &running;
      l->counted = &counted;
      if (pthread_create(&l->tid, NULL, hm__loader_main, l)) {
        rc = _hm_error(ctx, -EAGAIN, "latency: cannot start load threads");
        atomic_store(&go, HM__GO_STOP);
        goto done;
      }
      started++;
    }
    while (atomic_load(&ready) < (int)nload) (void)_hm_prim_now_ns();
  }

  hm__line_t *p = &lines[0];
  p = hm__chase(p, loads < n ? loads : n); /* warm the TLB and page tables */
  double best = INFINITY;
  /* The chase is timed only once every load thread streams (on a busy
   * machine one may not have run yet), and the load ends only once each
   * has counted some of its reads, so that "loaded" means loaded. Both
   * waits are bounded (2 s): a thread that never runs is reported by a
   * lower load_gbs, never by a hang. */
  uint64_t wait_end = _hm_prim_now_ns() + 2000000000ull;
  atomic_store(&go, HM__GO_STREAM);
  while (nload && atomic_load(&running) < (int)nload && _hm_prim_now_ns() < wait_end) {
  }
  atomic_store(&go, HM__GO_COUNT);
  uint64_t lt0 = _hm_prim_now_ns();
  for (unsigned k = 0; k < reps; k++) {
    uint64_t t0 = _hm_prim_now_ns();
    p = hm__chase(p, loads);
    uint64_t t1 = _hm_prim_now_ns();
    double ns = (double)(t1 - t0) / (double)loads;
    if (ns < best) best = ns;
  }
  wait_end = _hm_prim_now_ns() + 2000000000ull;
  while (nload && atomic_load(&counted) < (int)nload && _hm_prim_now_ns() < wait_end) {
  }
  atomic_store(&go, HM__GO_STOP);
  uint64_t lt1 = _hm_prim_now_ns();
  uint64_t lbytes_read = 0;
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(loaders[i].tid, NULL);
    lbytes_read += loaders[i].bytes;
    if (loaders[i].rc && !rc)
      rc = _hm_error(ctx, loaders[i].rc, "latency: cannot pin a load thread to CPU %d",
                     loaders[i].cpu);
  }
  started = 0;
  if (rc) goto done;
  if (p == NULL) { /* cannot happen: the cycle has no NULL; keeps p live */
    rc = _hm_error(ctx, -EIO, "latency: chase left the buffer");
    goto done;
  }
  hm_latency_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  r.version = HM_LATENCY_RESULT_VERSION;
  r.buffer_bytes = len;
  r.loads = loads;
  r.ns_per_load = best;
  r.load_threads = nload;
  r.load_gbs = nload ? (double)lbytes_read / (double)(lt1 - lt0) : 0.0;
  *out = r;
done:
  if (started) {
    atomic_store(&go, HM__GO_STOP);
    for (uint32_t i = 0; i < started; i++) pthread_join(loaders[i].tid, NULL);
  }
  _hm_prim_unmap(lmem, lbytes);
  free(loaders);
  free(loader_cpus);
  if (pinned) _hm_prim_set_thread_cpus(saved, nsaved);
  _hm_prim_unmap(mem, len);
  free(perm);
  free(cpus);
  free(saved);
  return rc;
}
