/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-stream-ref: a McCalpin-style STREAM, written for hetmem as the reference
 * that `hetmem bench reference` runs beside the probe. It is the classic
 * program: four OpenMP loops over global arrays, each timed on its own with
 * the wall clock, best of NTIMES after the first, McCalpin byte counting
 * (copy/scale: 2 arrays, add/triad: 3, 8 bytes per element), then a check of
 * the values. It is built with the probe's kernel flags (bench.cmake).
 *
 * usage: hm-stream-ref [--elements N] [--ntimes K]
 * Threads and pinning come from OpenMP's environment (OMP_NUM_THREADS,
 * OMP_PROC_BIND, OMP_PLACES). Prints one JSON object on stdout.
 *
 * Built with -DHM_STREAM_STATIC=N it is hm-stream-static: the arrays are
 * static, of N elements each (zero-initialized .bss, as in McCalpin's
 * original and in NAS-style codes), and --elements may not exceed N. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALAR 3.0

static double *a, *b, *c;
#ifdef HM_STREAM_STATIC
static double sa[HM_STREAM_STATIC], sb[HM_STREAM_STATIC], sc[HM_STREAM_STATIC];
#define HM__PROGRAM "hm-stream-static"
#else
#define HM__PROGRAM "hm-stream-ref"
#endif

/* The arrays: malloc'd, or the static ones. */
static int arrays(size_t n) {
#ifdef HM_STREAM_STATIC
  if (n > HM_STREAM_STATIC) {
    fprintf(stderr, HM__PROGRAM ": at most %zu elements\n", (size_t)HM_STREAM_STATIC);
    return 0;
  }
  a = sa, b = sb, c = sc;
#else
  a = malloc(n * sizeof(double));
  b = malloc(n * sizeof(double));
  c = malloc(n * sizeof(double));
#endif
  return a && b && c;
}

static double mysecond(void) { return omp_get_wtime(); }

static int check(size_t n, int ntimes) {
  double aj = 1.0, bj = 2.0, cj = 0.0;
  aj = 2.0 * aj; /* the timing-granularity pass below */
  for (int k = 0; k < ntimes; k++) {
    cj = aj;
    bj = SCALAR * cj;
    cj = aj + bj;
    aj = bj + SCALAR * cj;
  }
  double ea = 0, eb = 0, ec = 0;
#pragma omp parallel for reduction(+ : ea, eb, ec)
  for (size_t j = 0; j < n; j++) {
    ea += fabs(a[j] - aj);
    eb += fabs(b[j] - bj);
    ec += fabs(c[j] - cj);
  }
  double eps = 1e-13;
  return ea / (double)n / fabs(aj) < eps && eb / (double)n / fabs(bj) < eps &&
         ec / (double)n / fabs(cj) < eps;
}

int main(int argc, char **argv) {
#ifdef HM_STREAM_STATIC
  size_t n = HM_STREAM_STATIC;
#else
  size_t n = 80000000;
#endif
  int ntimes = 10;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--elements") && i + 1 < argc) {
      n = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--ntimes") && i + 1 < argc) {
      ntimes = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--elements N] [--ntimes K]\n", argv[0]);
      return 2;
    }
  }
  if (n < 1024 || ntimes < 2) {
    fprintf(stderr, HM__PROGRAM ": need at least 1024 elements and 2 repetitions\n");
    return 2;
  }
  if (!arrays(n)) {
    fprintf(stderr, HM__PROGRAM ": cannot have 3 x %zu doubles\n", n);
    return 1;
  }
  int threads = 1;
#pragma omp parallel
  {
#pragma omp master
    threads = omp_get_num_threads();
  }
  /* Initialise in parallel so that each thread places its own pages. */
#pragma omp parallel for
  for (size_t j = 0; j < n; j++) {
    a[j] = 1.0;
    b[j] = 2.0;
    c[j] = 0.0;
  }
#pragma omp parallel for
  for (size_t j = 0; j < n; j++) a[j] = 2.0 * a[j];

  double mintime[4] = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
  double times[4];
  for (int k = 0; k < ntimes; k++) {
    times[0] = mysecond();
#pragma omp parallel for
    for (size_t j = 0; j < n; j++) c[j] = a[j];
    times[0] = mysecond() - times[0];

    times[1] = mysecond();
#pragma omp parallel for
    for (size_t j = 0; j < n; j++) b[j] = SCALAR * c[j];
    times[1] = mysecond() - times[1];

    times[2] = mysecond();
#pragma omp parallel for
    for (size_t j = 0; j < n; j++) c[j] = a[j] + b[j];
    times[2] = mysecond() - times[2];

    times[3] = mysecond();
#pragma omp parallel for
    for (size_t j = 0; j < n; j++) a[j] = b[j] + SCALAR * c[j];
    times[3] = mysecond() - times[3];

    if (k == 0) continue; /* first iteration excluded, as in STREAM */
    for (int i = 0; i < 4; i++)
      if (times[i] < mintime[i]) mintime[i] = times[i];
  }
  double bytes[4] = {2.0 * sizeof(double) * (double)n, 2.0 * sizeof(double) * (double)n,
                     3.0 * sizeof(double) * (double)n, 3.0 * sizeof(double) * (double)n};
  int valid = check(n, ntimes);
  printf("{\"program\": \"" HM__PROGRAM "\", \"elements\": %zu, \"array_bytes\": %zu, "
         "\"threads\": %d, \"ntimes\": %d, \"copy_gbs\": %.4f, \"scale_gbs\": %.4f, "
         "\"add_gbs\": %.4f, \"triad_gbs\": %.4f, \"valid\": %s}\n",
         n, n * sizeof(double), threads, ntimes, bytes[0] / mintime[0] * 1e-9,
         bytes[1] / mintime[1] * 1e-9, bytes[2] / mintime[2] * 1e-9,
         bytes[3] / mintime[3] * 1e-9, valid ? "true" : "false");
#ifndef HM_STREAM_STATIC
  free(a);
  free(b);
  free(c);
#endif
  return valid ? 0 : 1;
}
