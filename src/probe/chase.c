/* Idle memory latency: a pointer chase through one random cycle over every
 * cache line of a buffer much larger than the last-level cache. Each load's
 * address comes from the previous load, so neither out-of-order execution
 * nor the prefetchers can overlap them; the time per load is the latency. */
#include <errno.h>
#include <math.h>
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
  if (!cpus || !saved || !perm) {
    rc = _hm_error(ctx, -ENOMEM, "latency: out of memory");
    goto done;
  }
  nsaved = _hm_prim_allowed_cpus(saved, HM_PROBE_MAX_CPUS);
  int cpu = cfg->cpu;
  if (cpu < 0) {
    int nc = _hm_probe_cpus_for_node(cfg->numa_node, cpus, HM_PROBE_MAX_CPUS);
    cpu = nc > 0 ? cpus[0] : -1;
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

  hm__line_t *p = &lines[0];
  p = hm__chase(p, loads < n ? loads : n); /* warm the TLB and page tables */
  double best = INFINITY;
  for (unsigned k = 0; k < reps; k++) {
    uint64_t t0 = _hm_prim_now_ns();
    p = hm__chase(p, loads);
    uint64_t t1 = _hm_prim_now_ns();
    double ns = (double)(t1 - t0) / (double)loads;
    if (ns < best) best = ns;
  }
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
  *out = r;
done:
  if (pinned) _hm_prim_set_thread_cpus(saved, nsaved);
  _hm_prim_unmap(mem, len);
  free(perm);
  free(cpus);
  free(saved);
  return rc;
}
