/* SPDX-License-Identifier: BSD-3-Clause */
/* STREAM (McCalpin) copy/scale/add/triad on memory bound to one NUMA node.
 *
 * The kernels are the classic loops, OpenMP static schedule, over arrays
 * that the same pinned threads touch first, so each thread streams through
 * the pages it placed. They are compiled with the flags bench/stream_ref.c
 * is built with (HM_PROBE_KERNEL_FLAGS in probe.cmake), so that `hetmem
 * bench reference` compares code, not compilers. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"
#include "probe/probe.h"

#define HM__STREAM_SCALAR 3.0

/* The arrays live in separate mappings; restrict tells the compiler so and
 * lets it vectorize without run-time overlap checks. */
static void hm__copy(double *restrict c, const double *restrict a, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (size_t j = 0; j < n; j++) c[j] = a[j];
}

static void hm__scale(double *restrict b, const double *restrict c, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (size_t j = 0; j < n; j++) b[j] = HM__STREAM_SCALAR * c[j];
}

static void hm__add(double *restrict c, const double *restrict a, const double *restrict b,
                    size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (size_t j = 0; j < n; j++) c[j] = a[j] + b[j];
}

static void hm__triad(double *restrict a, const double *restrict b, const double *restrict c,
                      size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (size_t j = 0; j < n; j++) a[j] = b[j] + HM__STREAM_SCALAR * c[j];
}

/* First touch by the computing threads, same static split as the kernels. */
static void hm__init(double *restrict a, double *restrict b, double *restrict c, size_t n,
                     int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
  for (size_t j = 0; j < n; j++) {
    a[j] = 1.0;
    b[j] = 2.0;
    c[j] = 0.0;
  }
}

/* Pins OpenMP thread i of an nt-thread team to cpus[i] (or restores every
 * member to the caller's CPU set when all is set). Returns the team size
 * actually granted, or a negative errno. libgomp keeps the same pool thread
 * at the same team position across teams of equal size. */
static int hm__pin_team(const int *cpus, int ncpus, int nt, int all) {
  int rc = 0, got = 0;
#pragma omp parallel num_threads(nt)
  {
    int id = omp_get_thread_num();
    int r = all ? _hm_prim_set_thread_cpus(cpus, ncpus) : _hm_prim_set_thread_cpus(&cpus[id], 1);
    if (id == 0) got = omp_get_num_threads();
    if (r) {
#pragma omp atomic write
      rc = r;
    }
  }
  return rc ? rc : got;
}

static double hm__check(const double *a, const double *b, const double *c, size_t n,
                        unsigned reps, int nt) {
  double aj = 1.0, bj = 2.0, cj = 0.0;
  for (unsigned k = 0; k < reps; k++) {
    cj = aj;
    bj = HM__STREAM_SCALAR * cj;
    cj = aj + bj;
    aj = bj + HM__STREAM_SCALAR * cj;
  }
  double err = 0.0;
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : err)
  for (size_t j = 0; j < n; j++)
    err += fabs(a[j] - aj) / aj + fabs(b[j] - bj) / bj + fabs(c[j] - cj) / cj;
  return err / (3.0 * (double)n);
}

void hm_stream_config_default(hm_stream_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->version = HM_STREAM_CONFIG_VERSION;
  cfg->numa_node = -1;
}

/* One STREAM run: its CPUs, its arrays and its best times. */
typedef struct hm__st_s {
  hm_ctx_t *ctx;
  const hm_stream_config_t *cfg;
  int *cpus, *saved;
  int nsaved, ncpus, nt, got;
  uint64_t bytes;
  size_t n, len;
  unsigned reps;
  double *arr[3];
  double best[4];
} hm__st_t;

/* The CPUs to pin to (cfg's, else the node's) and the team size. */
static int hm__stream_cpus(hm__st_t *S) {
  const hm_stream_config_t *cfg = S->cfg;
  S->cpus = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  S->saved = malloc(sizeof(int) * HM_PROBE_MAX_CPUS);
  if (!S->cpus || !S->saved) return _hm_error(S->ctx, -ENOMEM, "stream: out of memory");
  S->nsaved = _hm_prim_allowed_cpus(S->saved, HM_PROBE_MAX_CPUS);
  if (cfg->ncpus) {
    S->ncpus = cfg->ncpus > HM_PROBE_MAX_CPUS ? HM_PROBE_MAX_CPUS : (int)cfg->ncpus;
    for (int i = 0; i < S->ncpus; i++) S->cpus[i] = cfg->cpus[i];
  } else {
    S->ncpus = _hm_probe_cpus_for_node(cfg->numa_node, S->cpus, HM_PROBE_MAX_CPUS);
  }
  S->nt = cfg->threads ? (int)cfg->threads : S->ncpus;
  if (S->nsaved <= 0 || S->ncpus <= 0 || S->nt > S->ncpus || S->nt <= 0)
    return _hm_error(S->ctx, -EINVAL, "stream: %d threads asked for, %d CPUs to pin them to",
                     S->nt, S->ncpus);
  return 0;
}

/* Array size and repetitions from cfg and its defaults. */
static int hm__stream_sizes(hm__st_t *S) {
  const hm_stream_config_t *cfg = S->cfg;
  uint64_t bytes = cfg->array_bytes;
  if (!bytes) {
    bytes = 4 * _hm_probe_llc_bytes();
    if (bytes < (8u << 20)) bytes = 8u << 20;
  }
  S->bytes = bytes;
  S->n = (size_t)(bytes / sizeof(double));
  S->len = S->n * sizeof(double);
  S->reps = cfg->repetitions ? cfg->repetitions : 10;
  if (S->reps < 2) S->reps = 2;
  if (S->n < 1024)
    return _hm_error(S->ctx, -EINVAL, "stream: arrays of %llu bytes are too small",
                     (unsigned long long)bytes);
  return 0;
}

/* The three arrays, each its own mapping bound to the node. */
static int hm__stream_arrays(hm__st_t *S) {
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    void *p = NULL;
    rc = _hm_prim_map_anon(S->len, &p);
    if (rc) return _hm_error(S->ctx, rc, "stream: cannot map %zu bytes: %s", S->len,
                             hm_strerror(rc));
    S->arr[i] = p;
    if (S->cfg->numa_node >= 0 && (rc = _hm_prim_bind_node(p, S->len, S->cfg->numa_node)))
      _hm_error(S->ctx, rc, "stream: cannot bind memory to node %d: %s", S->cfg->numa_node,
                hm_strerror(rc));
  }
  return rc;
}

static int hm__stream_pin(hm__st_t *S) {
  S->got = hm__pin_team(S->cpus, S->ncpus, S->nt, 0);
  if (S->got < 0) return _hm_error(S->ctx, S->got, "stream: cannot pin threads: %s",
                                   hm_strerror(S->got));
  if (S->got != S->nt)
    return _hm_error(S->ctx, -EINVAL, "stream: OpenMP granted %d of %d threads", S->got, S->nt);
  return 0;
}

/* The measurement proper: first touch, then reps rounds of the 4 kernels,
 * the first a warm-up. */
static void hm__stream_run(hm__st_t *S) {
  double *a = S->arr[0], *b = S->arr[1], *c = S->arr[2];
  size_t n = S->n;
  int nt = S->nt;
  unsigned reps = S->reps;
  hm__init(a, b, c, n, nt);
  double best[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
  for (unsigned k = 0; k < reps; k++) {
    uint64_t t[5];
    t[0] = _hm_prim_now_ns();
    hm__copy(c, a, n, nt);
    t[1] = _hm_prim_now_ns();
    hm__scale(b, c, n, nt);
    t[2] = _hm_prim_now_ns();
    hm__add(c, a, b, n, nt);
    t[3] = _hm_prim_now_ns();
    hm__triad(a, b, c, n, nt);
    t[4] = _hm_prim_now_ns();
    if (k == 0) continue; /* warm-up, as in STREAM */
    for (int i = 0; i < 4; i++) {
      double s = (double)(t[i + 1] - t[i]) * 1e-9;
      if (s < best[i]) best[i] = s;
    }
  }
  memcpy(S->best, best, sizeof best);
}

static void hm__stream_result(const hm__st_t *S, hm_stream_result_t *out) {
  double len = (double)S->len;
  hm_stream_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  r.version = HM_STREAM_RESULT_VERSION;
  r.threads = (uint32_t)S->nt;
  r.repetitions = S->reps;
  r.array_bytes = S->len;
  r.copy_gbs = 2.0 * len / S->best[0] * 1e-9;
  r.scale_gbs = 2.0 * len / S->best[1] * 1e-9;
  r.add_gbs = 3.0 * len / S->best[2] * 1e-9;
  r.triad_gbs = 3.0 * len / S->best[3] * 1e-9;
  *out = r;
}

int hm_probe_stream(hm_ctx_t *ctx, const hm_stream_config_t *cfg, hm_stream_result_t *out) {
  if (!cfg || !out || cfg->size < sizeof *cfg || out->size < sizeof *out)
    return _hm_error(ctx, -EINVAL, "stream: config or result struct of the wrong size");
  int rc = _hm_probe_check_node(ctx, cfg->numa_node);
  if (rc) return rc;
  hm__st_t S;
  memset(&S, 0, sizeof S);
  S.ctx = ctx;
  S.cfg = cfg;
  rc = hm__stream_cpus(&S);
  if (!rc) rc = hm__stream_sizes(&S);
  if (!rc) rc = hm__stream_arrays(&S);
  if (!rc) rc = hm__stream_pin(&S);
  if (!rc) {
    hm__stream_run(&S);
    double err = hm__check(S.arr[0], S.arr[1], S.arr[2], S.n, S.reps, S.nt);
    if (!(err < 1e-13))
      rc = _hm_error(ctx, -EIO, "stream: arrays hold wrong values (relative error %g)", err);
    else
      hm__stream_result(&S, out);
  }
  if (S.got > 0) hm__pin_team(S.saved, S.nsaved, S.got, 1);
  for (int i = 0; i < 3; i++) _hm_prim_unmap(S.arr[i], S.len);
  free(S.cpus);
  free(S.saved);
  return rc;
}
