/* SPDX-License-Identifier: BSD-3-Clause */
/* C = A * B for square n x n doubles (footprint 3 n^2 * 8 bytes).
 *   blas:  OpenBLAS cblas_dgemm (blocked, compute bound);
 *   naive: unblocked i-j-k triple loop, B walked down its columns (stride n):
 *          the poor-locality case.
 * Checked with a random vector v: C v against A (B v), element by element,
 * with a bound scaled by |A| (|B| |v|). flops = 2 n^3; bytes_moved is the
 * compulsory traffic (each matrix once). */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

static void naive(const double *restrict A, const double *restrict B, double *restrict C, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0.0;
      for (size_t k = 0; k < n; k++) s += A[i * n + k] * B[k * n + j];
      C[i * n + j] = s;
    }
}

/* y = M x (or |M| |x| when absolute), row-major n x n */
static void matvec(const double *restrict M, const double *restrict x, double *restrict y, size_t n, int absolute) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    long double s = 0.0L;
    for (size_t k = 0; k < n; k++) s += absolute ? fabsl((long double)M[i * n + k] * x[k]) : (long double)M[i * n + k] * x[k];
    y[i] = (double)s;
  }
}

int main(int argc, char **argv) {
  hmk_args_t a = {.kernel = "gemm",
                  .summary = "Dense matrix multiply C = A B: OpenBLAS dgemm or an unblocked triple loop.",
                  .variants = "blas|naive",
                  .variant = "blas",
                  .bytes = 96ull << 20,
                  .min_bytes = 3 * 8 * 16 * 16,
                  .reps = 3};
  hmk_parse(&a, argc, argv, NULL, 0);
  int blas = strcmp(a.variant, "blas") == 0;
  size_t n = (size_t)sqrt((double)a.bytes / 24.0);
  while ((n + 1) * (n + 1) * 24 <= a.bytes) n++;
  while (n * n * 24 > a.bytes) n--;
  openblas_set_num_threads(a.threads);

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  double *A = hmk_alloc(n * n * sizeof(double));
  double *B = hmk_alloc(n * n * sizeof(double));
  double *C = hmk_alloc(n * n * sizeof(double));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      A[i * n + j] = hmk_unit(i * n + j, 0xA, -1.0, 1.0);
      B[i * n + j] = hmk_unit(i * n + j, 0xB, -1.0, 1.0);
      C[i * n + j] = 0.0;
    }
  r.init_s = hmk_now() - t0;

  while (hmk_more(&a, &r)) {
    double s = hmk_now();
    if (blas)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, A, (int)n, B, (int)n,
                  0.0, C, (int)n);
    else
      naive(A, B, C, n);
    r.times[r.n++] = hmk_now() - s;
  }
  double nd = (double)n;
  r.flops = 2.0 * nd * nd * nd;
  r.bytes_moved = 3.0 * nd * nd * 8.0;

  if (a.inject_error) C[(n / 2) * n + n / 3] += 1.0;
  double v0 = hmk_now();
  double *v = hmk_alloc(n * sizeof(double)), *w = hmk_alloc(n * sizeof(double));
  double *u = hmk_alloc(n * sizeof(double)), *z = hmk_alloc(n * sizeof(double));
  double *bound = hmk_alloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) v[i] = hmk_unit(i, 0xC, 0.5, 1.0);
  matvec(C, v, z, n, 0); /* C v */
  matvec(B, v, w, n, 0);
  matvec(A, w, u, n, 0); /* A (B v) */
  matvec(B, v, w, n, 1);
  matvec(A, w, bound, n, 1); /* |A| (|B| |v|) */
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i++) {
    double ratio = fabs(z[i] - u[i]) / (4.0 * nd * DBL_EPSILON * bound[i] + DBL_MIN);
    if (!(ratio <= worst)) {
      worst = isnan(ratio) ? INFINITY : ratio;
      worst_i = i;
    }
  }
  r.verify_s = hmk_now() - v0;
  if (!(worst <= 1.0))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: (C v)[%zu] = %.17g but A (B v) = %.17g (%.3g x the bound)",
             worst_i, z[worst_i], u[worst_i], worst);
  hmk_extra_u64(&r, "n", n);
  hmk_extra_num(&r, "check_ratio", worst);
  hmk_emit(&a, &r);
  free(A);
  free(B);
  free(C);
  free(v);
  free(w);
  free(u);
  free(z);
  free(bound);
  return 0;
}
