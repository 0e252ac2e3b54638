/* SPDX-License-Identifier: BSD-3-Clause */
/* 3D complex FFT of an N x N x N grid of doubles (footprint 16 N^3 bytes),
 * in place through FFTW with its OpenMP threads: each repetition is one
 * forward and one inverse transform (timed), then a 1/N^3 rescale (not
 * timed). The grid is a pure function of the index, so the check compares
 * every point with the original regenerated: max error below 1e-10.
 * N is the largest 2,3,5,7-smooth size that fits --bytes.
 * flops = 2 x 5 N^3 log2(N^3) (the usual FFT count); bytes_moved is an
 * estimate: one read and one write of the grid per dimension and transform. */
#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

static int smooth(size_t n) {
  static const size_t f[] = {2, 3, 5, 7};
  for (int k = 0; k < 4; k++)
    while (n % f[k] == 0) n /= f[k];
  return n == 1;
}

static inline double re0(size_t i) { return hmk_unit(i, 0x52, -1.0, 1.0); }
static inline double im0(size_t i) { return hmk_unit(i, 0x49, -1.0, 1.0); }

int main(int argc, char **argv) {
  hmk_args_t a = {.kernel = "fft",
                  .summary = "3D complex FFT (FFTW, OpenMP threads): forward + inverse per repetition.",
                  .bytes = 64ull << 20,
                  .min_bytes = 16 * 8 * 8 * 8,
                  .reps = 3};
  hmk_parse(&a, argc, argv, NULL, 0);
  a.variant = "c2c";
  size_t N = (size_t)cbrt((double)a.bytes / 16.0);
  while ((N + 1) * (N + 1) * (N + 1) * 16 <= a.bytes) N++;
  while (N * N * N * 16 > a.bytes) N--;
  while (N > 1 && !smooth(N)) N--;
  size_t total = N * N * N;
  if (!fftw_init_threads()) hmk_fail(HMK_EXIT_RESOURCE, "fftw_init_threads failed");
  fftw_plan_with_nthreads(a.threads);

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  fftw_complex *x = hmk_alloc(total * sizeof(fftw_complex));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < total; i++) {
    x[i][0] = re0(i);
    x[i][1] = im0(i);
  }
  /* FFTW_ESTIMATE plans without touching the data. */
  fftw_plan fwd = fftw_plan_dft_3d((int)N, (int)N, (int)N, x, x, FFTW_FORWARD, FFTW_ESTIMATE);
  fftw_plan inv = fftw_plan_dft_3d((int)N, (int)N, (int)N, x, x, FFTW_BACKWARD, FFTW_ESTIMATE);
  if (!fwd || !inv) hmk_fail(HMK_EXIT_RESOURCE, "FFTW could not plan a %zu^3 transform", N);
  r.init_s = hmk_now() - t0;

  double bf = INFINITY, bi = INFINITY; /* best forward and inverse times */
  const double scale = 1.0 / (double)total;
  while (hmk_more(&a, &r)) {
    double s = hmk_now();
    fftw_execute(fwd);
    double m = hmk_now();
    fftw_execute(inv);
    double e = hmk_now();
    bf = fmin(bf, m - s);
    bi = fmin(bi, e - m);
    r.times[r.n++] = e - s;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; i++) {
      x[i][0] *= scale;
      x[i][1] *= scale;
    }
  }
  double lg = log2((double)total);
  r.flops = 2.0 * 5.0 * (double)total * lg;
  r.bytes_moved = 2.0 * 3.0 * 2.0 * 16.0 * (double)total;

  if (a.inject_error) x[total / 2][0] += 1.0;
  double v0 = hmk_now();
  double worst = 0.0;
#pragma omp parallel for schedule(static) reduction(max : worst)
  for (size_t i = 0; i < total; i++) {
    double e = fmax(fabs(x[i][0] - re0(i)), fabs(x[i][1] - im0(i)));
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  r.verify_s = hmk_now() - v0;
  const double tol = 1e-10;
  if (!(worst <= tol))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: inverse(forward(x)) differs from x by %g (limit %g)", worst, tol);

  char buf[64];
  hmk_extra_u64(&r, "n", N);
  snprintf(buf, sizeof buf, "[%zu,%zu,%zu]", N, N, N);
  hmk_extra_raw(&r, "shape", buf);
  hmk_extra_num(&r, "forward_best_s", bf);
  hmk_extra_num(&r, "inverse_best_s", bi);
  hmk_extra_num(&r, "max_abs_err", worst);
  hmk_emit(&a, &r);
  fftw_destroy_plan(fwd);
  fftw_destroy_plan(inv);
  fftw_cleanup_threads();
  free(x);
  return 0;
}
