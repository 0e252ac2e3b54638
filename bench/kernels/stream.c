/* SPDX-License-Identifier: BSD-3-Clause */
/* STREAM (McCalpin): copy c=a, scale b=s*c, add c=a+b, triad a=b+s*c over
 * three arrays of n doubles; bytes counted as STREAM does (2, 2, 3, 3 words
 * per element, no write-allocate traffic). Checked as STREAM's
 * checkSTREAMresults does, but element by element so one wrong value fails. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

#define SCALAR 3.0

static HMK_CLONES void op_copy(double *restrict c, const double *restrict a, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) c[i] = a[i];
}

static HMK_CLONES void op_scale(double *restrict b, const double *restrict c, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) b[i] = SCALAR * c[i];
}

static HMK_CLONES void op_add(double *restrict c, const double *restrict a, const double *restrict b,
                              size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}

static HMK_CLONES void op_triad(double *restrict a, const double *restrict b, const double *restrict c,
                                size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = b[i] + SCALAR * c[i];
}

/* Largest relative error of any element of x against the expected value
 * (absolute error where the expected value is 0). */
static double max_rel_err(const double *x, size_t n, double expect) {
  double worst = 0.0;
  double scale = expect != 0.0 ? fabs(expect) : 1.0;
#pragma omp parallel for schedule(static) reduction(max : worst)
  for (size_t i = 0; i < n; i++) {
    double e = fabs(x[i] - expect) / scale;
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

static const double words[4] = {2, 2, 3, 3}; /* words moved per element, as STREAM counts */
static const char *const names[4] = {"copy", "scale", "add", "triad"};

/* The operations first..last in each repetition; each one's best time. */
static void timed_ops(hmk_args_t *a, hmk_result_t *r, double *A, double *B, double *C, size_t n, int first, int last,
                      double op_best[4]) {
  for (int rep = 0; hmk_more(a, r); rep++) {
    double total = 0.0;
    for (int k = first; k <= last; k++) {
      double s = hmk_now();
      switch (k) {
      case 0: op_copy(C, A, n); break;
      case 1: op_scale(B, C, n); break;
      case 2: op_add(C, A, B, n); break;
      default: op_triad(A, B, C, n); break;
      }
      double dt = hmk_now() - s;
      total += dt;
      if (dt < op_best[k]) op_best[k] = dt;
    }
    r->times[r->n++] = total;
  }
}

/* Expected values of a, b and c: the same recurrence run on scalars. */
static void expected(int reps, int first, int last, double e[3]) {
  double ea = 1.0, eb = 2.0, ec = 0.0;
  for (int rep = 0; rep < reps; rep++)
    for (int k = first; k <= last; k++) switch (k) {
      case 0: ec = ea; break;
      case 1: eb = SCALAR * ec; break;
      case 2: ec = ea + eb; break;
      default: ea = eb + SCALAR * ec; break;
      }
  e[0] = ea;
  e[1] = eb;
  e[2] = ec;
}

/* Each operation's best time and rate as a JSON object. */
static void ops_json(char *ops, size_t cap, size_t n, int first, int last, const double op_best[4]) {
  size_t len = 0;
  ops[len++] = '{';
  for (int k = first; k <= last; k++) {
    double bytes = words[k] * 8.0 * (double)n;
    len += (size_t)snprintf(ops + len, cap - len, "%s\"%s\":{\"time_best_s\":%.9g,\"gbs\":%.9g}",
                            k == first ? "" : ",", names[k], op_best[k], bytes / op_best[k] / 1e9);
  }
  snprintf(ops + len, cap - len, "}");
}

/* Which operation --op names (0..3); all runs 0..3. */
static int op_index(const char *op) {
  return !strcmp(op, "copy") ? 0 : !strcmp(op, "scale") ? 1 : !strcmp(op, "add") ? 2 : 3;
}

int main(int argc, char **argv) {
  const char *op = "all";
  hmk_args_t a = {.kernel = "stream",
                  .summary = "STREAM copy/scale/add/triad over three arrays of doubles (footprint 24 B/element).",
                  .bytes = 256ull << 20,
                  .min_bytes = 3 * 8 * 1024,
                  .reps = 10};
  hmk_opt_t opts[] = {
      {"--op", HMK_OPT_CHOICE, &op, "all|copy|scale|add|triad", 0, 0,
       "all|copy|scale|add|triad: which STREAM operation(s) a repetition runs (default all)"},
  };
  hmk_parse(&a, argc, argv, opts, 1);
  a.variant = op;
  int all = strcmp(op, "all") == 0;
  /* a grows 15x per full iteration; keep the check inside double range. */
  if (all && a.reps > 200) hmk_fail(HMK_EXIT_USAGE, "--reps must be <= 200 with --op all");
  if (all) a.max_reps = 200; /* and --min-time stops there too */

  size_t n = (size_t)(a.bytes / 24);
  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  double *A = hmk_alloc(n * sizeof(double));
  double *B = hmk_alloc(n * sizeof(double));
  double *C = hmk_alloc(n * sizeof(double));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A[i] = 1.0;
    B[i] = 2.0;
    C[i] = 0.0;
  }
  r.init_s = hmk_now() - t0;

  double op_best[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
  int first = all ? 0 : op_index(op), last = all ? 3 : first;
  timed_ops(&a, &r, A, B, C, n, first, last, op_best);
  const double flops_per_elem[4] = {0, 1, 1, 2};
  r.bytes_moved = 0;
  for (int k = first; k <= last; k++) {
    r.bytes_moved += words[k] * 8.0 * (double)n;
    r.flops += flops_per_elem[k] * (double)n;
  }
  double e[3];
  expected(a.reps, first, last, e);
  if (a.inject_error) {
    double *target = (first == 0 || first == 2) ? C : first == 1 ? B : A;
    /* Relative, so it shows however large many repetitions made the values. */
    target[n / 2] += 1.0 + 1e-9 * fabs(target[n / 2]);
  }
  double v0 = hmk_now();
  double ea_err = max_rel_err(A, n, e[0]), eb_err = max_rel_err(B, n, e[1]), ec_err = max_rel_err(C, n, e[2]);
  r.verify_s = hmk_now() - v0;
  const double eps = 1e-13;
  if (!(ea_err <= eps && eb_err <= eps && ec_err <= eps))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: max relative error a=%g b=%g c=%g (limit %g)", ea_err,
             eb_err, ec_err, eps);
  char ops[512];
  ops_json(ops, sizeof ops, n, first, last, op_best);
  hmk_extra_u64(&r, "elements", n);
  hmk_extra_num(&r, "scalar", SCALAR);
  hmk_extra_raw(&r, "ops", ops);
  hmk_extra_num(&r, "max_rel_err", fmax(ea_err, fmax(eb_err, ec_err)));
  hmk_emit(&a, &r);
  free(A);
  free(B);
  free(C);
  return 0;
}
