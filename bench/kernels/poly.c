/* SPDX-License-Identifier: BSD-3-Clause */
/* Polynomial benchmark of the IMDT study: p(x) of a given degree by Horner's
 * rule over a large array of doubles in (-0.9, 0.9).
 *   ro: one read stream, p(x[i]) summed into thread-local accumulators;
 *   rw: two streams, y[i] = p(x[i]).
 * flops = 2 * degree per element (one multiply and one add per degree);
 * arithmetic intensity as the paper's eq. (1): AI = 2 * degree / sizeof(double).
 * Coefficients c_k = 0.4 / (k+1)^2 keep |p(x)| < 0.66 for |x| < 1 at every
 * degree, so nothing overflows or goes subnormal.
 * Checks: every element (rw) or the total (ro) against a second full pass
 * that evaluates p as a direct power sum (a different algorithm), and a
 * sample of elements against a long double power sum. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

#define PB 32 /* elements evaluated side by side: independent FMA chains */
#define SEED 0x706f6c79u
#define CHUNK 256 /* blocks summed together before joining the total */

static double coef(int k) { return 0.4 / ((double)(k + 1) * (double)(k + 1)); }

static inline double x_init(size_t i) { return hmk_unit(i, SEED, -0.9, 0.9); }

static HMK_CLONES double horner_ro(const double *restrict x, size_t nblk, const double *restrict c, int d) {
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  {
    size_t nchunk = (nblk + CHUNK - 1) / CHUNK;
    /* Two-level sum (lanes per chunk of blocks, then chunks): the rounding
     * error stays ~1e-14 relative at any size, so a check can be tight. */
#pragma omp for schedule(static)
    for (size_t ch = 0; ch < nchunk; ch++) {
      double sum[PB];
      for (int j = 0; j < PB; j++) sum[j] = 0.0;
      size_t end = (ch + 1) * CHUNK < nblk ? (ch + 1) * CHUNK : nblk;
      for (size_t b = ch * CHUNK; b < end; b++) {
        const double *restrict xb = x + b * PB;
        double acc[PB];
        /* degree 0 still reads the element (0*x is not folded in IEEE math) */
        for (int j = 0; j < PB; j++) acc[j] = d == 0 ? c[0] + 0.0 * xb[j] : c[d];
        for (int k = d - 1; k >= 0; k--) {
          const double ck = c[k];
          for (int j = 0; j < PB; j++) acc[j] = acc[j] * xb[j] + ck;
        }
        for (int j = 0; j < PB; j++) sum[j] += acc[j];
      }
      for (int j = 0; j < PB; j++) total += sum[j];
    }
  }
  return total;
}

static HMK_CLONES void horner_rw(const double *restrict x, double *restrict y, size_t nblk,
                                 const double *restrict c, int d) {
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblk; b++) {
    const double *restrict xb = x + b * PB;
    double acc[PB];
    for (int j = 0; j < PB; j++) acc[j] = d == 0 ? c[0] + 0.0 * xb[j] : c[d];
    for (int k = d - 1; k >= 0; k--) {
      const double ck = c[k];
      for (int j = 0; j < PB; j++) acc[j] = acc[j] * xb[j] + ck;
    }
    for (int j = 0; j < PB; j++) y[b * PB + j] = acc[j];
  }
}

/* The reference: sum of c_k x^k with a running power, for one block. */
static inline void direct_block(const double *restrict xb, const double *restrict c, int d,
                                double *restrict s) {
  double xp[PB], acc[PB];
  for (int j = 0; j < PB; j++) {
    xp[j] = 1.0;
    acc[j] = c[0];
  }
  for (int k = 1; k <= d; k++) {
    const double ck = c[k];
    if ((k & 63) == 0) { /* every power flushed: the rest of the sum is 0 */
      int live = 0;
      for (int j = 0; j < PB; j++) live |= xp[j] != 0.0;
      if (!live) break;
    }
    for (int j = 0; j < PB; j++) {
      /* x^k below 1e-200 adds nothing; flushing it keeps the chain out of
       * subnormals, which cost ~100 cycles per multiply. */
      double v = xp[j] * xb[j];
      xp[j] = fabs(v) < 1e-200 ? 0.0 : v;
      acc[j] += ck * xp[j];
    }
  }
  for (int j = 0; j < PB; j++) s[j] = acc[j];
}

/* Full reference pass. For rw the worst element error goes to *maxerr; the
 * sum of all p(x) is returned (for ro), summed in two levels (CHUNK blocks,
 * then chunks) as horner_ro does, so rounding stays far below the check. */
static HMK_CLONES double direct_pass(const double *restrict x, const double *restrict y, size_t nblk,
                                     const double *restrict c, int d, double *maxerr) {
  double total = 0.0, worst = 0.0;
  size_t nchunk = (nblk + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) reduction(+ : total) reduction(max : worst)
  for (size_t ch = 0; ch < nchunk; ch++) {
    double part[PB];
    for (int j = 0; j < PB; j++) part[j] = 0.0;
    size_t end = (ch + 1) * CHUNK < nblk ? (ch + 1) * CHUNK : nblk;
    for (size_t b = ch * CHUNK; b < end; b++) {
      double s[PB];
      direct_block(x + b * PB, c, d, s);
      for (int j = 0; j < PB; j++) part[j] += s[j];
      if (y) {
        for (int j = 0; j < PB; j++) {
          double e = fabs(y[b * PB + j] - s[j]);
          if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
      }
    }
    for (int j = 0; j < PB; j++) total += part[j];
  }
  *maxerr = worst;
  return total;
}

static double horner1(double x, const double *c, int d) {
  double acc = c[d];
  for (int k = d - 1; k >= 0; k--) acc = acc * x + c[k];
  return acc;
}

static long double power_sum_ld(long double x, int d) {
  long double s = 0.0L, xp = 1.0L;
  for (int k = 0; k <= d; k++) {
    s += (0.4L / ((long double)(k + 1) * (long double)(k + 1))) * xp;
    xp *= x;
  }
  return s;
}

/* The timed passes. ro keeps the first pass's sum (checked later) and how
 * far the others strayed from it. */
static void timed_passes(hmk_args_t *a, hmk_result_t *r, const double *x, double *y, size_t nblk, const double *c,
                         int d, double *first_total, double *total_spread) {
  *first_total = 0.0;
  *total_spread = 0.0;
  for (int rep = 0; hmk_more(a, r); rep++) {
    double s = hmk_now();
    if (y) {
      horner_rw(x, y, nblk, c, d);
    } else {
      double tot = horner_ro(x, nblk, c, d);
      if (rep == 0) *first_total = tot;
      *total_spread = fmax(*total_spread, fabs(tot - *first_total));
    }
    r->times[r->n++] = hmk_now() - s;
  }
}

/* 64 sampled elements against a long double evaluation of the original
 * data: checks the double evaluation itself. Largest error. */
static double sampled_error(const double *x, const double *y, size_t n, const double *c, int d) {
  double worst = 0.0;
  for (int s = 0; s < 64; s++) {
    size_t i = (size_t)(hmk_mix((uint64_t)s) % n);
    double got = y ? y[i] : horner1(x[i], c, d);
    double ref = (double)power_sum_ld((long double)x_init(i), d);
    double e = fabs(got - ref);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* The checks: sampled elements, then the whole array against the direct
 * power sum (rw: every y[i]; ro: the total and the passes' agreement). */
static void verify(hmk_result_t *r, const double *x, const double *y, size_t n, const double *c, int d,
                   double first_total, double total_spread) {
  double v0 = hmk_now();
  double elem_tol = (4.0 * d + 16.0) * DBL_EPSILON;
  double sample_err = sampled_error(x, y, n, c, d), maxerr = 0.0;
  double ref_total = direct_pass(x, y, n / PB, c, d, &maxerr);
  r->verify_s = hmk_now() - v0;
  if (!(sample_err <= elem_tol))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: sampled element off by %g (limit %g)", sample_err, elem_tol);
  double rel_total = 0.0;
  if (y) {
    if (!(maxerr <= elem_tol))
      hmk_fail(HMK_EXIT_VERIFY, "verification failed: y[i] off by up to %g (limit %g)", maxerr, elem_tol);
  } else {
    double tol = 1e-11 + elem_tol;
    rel_total = fabs(first_total - ref_total) / fabs(ref_total);
    if (!(rel_total <= tol))
      hmk_fail(HMK_EXIT_VERIFY, "verification failed: sum %.17g, reference %.17g (relative %g, limit %g)",
               first_total, ref_total, rel_total, tol);
    if (!(total_spread <= 1e-11 * fabs(ref_total)))
      hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetitions disagree by %g", total_spread);
  }
  if (!y) hmk_extra_num(r, "sum", first_total);
  hmk_extra_num(r, "max_abs_err", y ? fmax(maxerr, sample_err) : sample_err);
  if (!y) hmk_extra_num(r, "sum_rel_err", rel_total);
}

int main(int argc, char **argv) {
  uint64_t degree = 16;
  hmk_args_t a = {.kernel = "poly",
                  .summary = "Horner polynomial over an array of doubles (IMDT polynomial benchmark); "
                             "ro: footprint 8 B/element, rw: 16 B/element.",
                  .variants = "ro|rw",
                  .variant = "ro",
                  .bytes = 256ull << 20,
                  .min_bytes = 64 * 1024,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--degree", HMK_OPT_COUNT, &degree, NULL, 0, 8192, "polynomial degree 0..8192 (default 16)"},
  };
  hmk_parse(&a, argc, argv, opts, 1);
  int d = (int)degree;
  int rw = strcmp(a.variant, "rw") == 0;
  size_t n = (size_t)(a.bytes / (rw ? 16 : 8)) / PB * PB;
  size_t nblk = n / PB;

  double *c = hmk_alloc(sizeof(double) * (size_t)(d + 1));
  for (int k = 0; k <= d; k++) c[k] = coef(k);

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  double *x = hmk_alloc(n * sizeof(double));
  double *y = rw ? hmk_alloc(n * sizeof(double)) : NULL;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblk; b++)
    for (size_t j = 0; j < PB; j++) {
      x[b * PB + j] = x_init(b * PB + j);
      if (y) y[b * PB + j] = 0.0;
    }
  r.init_s = hmk_now() - t0;

  double first_total, total_spread;
  timed_passes(&a, &r, x, y, nblk, c, d, &first_total, &total_spread);
  r.flops = 2.0 * (double)d * (double)n;
  r.bytes_moved = (rw ? 16.0 : 8.0) * (double)n;
  if (a.inject_error) {
    if (rw)
      y[n / 2] += 1.0;
    else
      x[n / 2] = x[n / 2] < 0 ? 0.99 : -0.99; /* the reference now sees other data */
  }
  hmk_extra_u64(&r, "degree", (uint64_t)d);
  hmk_extra_u64(&r, "elements", n);
  hmk_extra_u64(&r, "streams", rw ? 2 : 1);
  hmk_extra_num(&r, "ai_eq1", 2.0 * d / (double)sizeof(double));
  hmk_extra_num(&r, "ai_moved", r.flops / r.bytes_moved);
  verify(&r, x, y, n, c, d, first_total, total_spread);
  hmk_emit(&a, &r);
  free(x);
  free(y);
  free(c);
  return 0;
}
