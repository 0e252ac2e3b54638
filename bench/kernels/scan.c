/* SPDX-License-Identifier: BSD-3-Clause */
/* Sequential scans over one array of 64-bit words holding x[i] = i.
 *   read:   sum of all words (one read stream), checked against n(n-1)/2 (+
 *           the rmw increments) in every repetition;
 *   rmw:    x[i] += C (read and write streams), checked word by word against
 *           i + reps*C after the run;
 *   strips: x[i] += C as well, but over the array as a column-major matrix
 *           of m = isqrt(n) rows, in strips of --strip-rows rows across all
 *           columns, the threads splitting the columns, each strip touching
 *           a few KiB of every column: the loop that the pager's fault trace
 *           of LAPACK's dgetrf under OpenBLAS (an LU's trailing update, as
 *           in HPL) matches, and which reads as much per pass.
 *           Words past the last whole column are not touched (checked too).
 *   cols:   sum of the same matrix's words read across its rows, one word
 *           of every row per step (the source side of numpy's copy of a
 *           transpose, or a Fortran loop along a row of a column-major
 *           array), the threads splitting the steps: each step touches one
 *           page of every row, the same pages for 512 steps in a row. Its
 *           pages in use at any time are a small part of the matrix, which
 *           Linux swap keeps; a pager that fills whole units must hold the
 *           whole matrix. Checked against the sum of the words it covers.
 * Integers, so every check is exact. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

/* One strips repetition: m rows by cols columns, p rows a strip. */
static void scan_strips(uint64_t *restrict x, size_t m, size_t cols, size_t p) {
  for (size_t r0 = 0; r0 < m; r0 += p) {
    size_t r1 = r0 + p < m ? r0 + p : m;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < cols; c++)
      for (size_t r = r0; r < r1; r++) x[c * m + r] += HMK_SCAN_INC;
  }
}

/* One cols repetition: the sum of the m x cols words, read down each of the
 * cols columns of the row-major view (x[r * cols + c]), rows innermost. */
static uint64_t scan_cols(const uint64_t *restrict x, size_t m, size_t cols) {
  uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
  for (size_t c = 0; c < cols; c++)
    for (size_t r = 0; r < m; r++) sum += x[r * cols + c];
  return sum;
}

/* One scan's data and shape; touched: the words the variant reads (the
 * matrix variants leave a tail of fewer than m words alone). */
typedef struct {
  uint64_t *x;
  size_t n, m, cols, strip_rows, touched;
  int strips, rmw, colsum;
} scan_t;

/* The timed scans. Read scans check each repetition's sum against
 * t(t-1)/2 modulo 2^64 over the t words summed (as the wrapping sum
 * computes it) and fail, after the timings, on the first that differs. */
static void timed_scans(hmk_args_t *a, hmk_result_t *r, const scan_t *sc) {
  uint64_t nn = (uint64_t)sc->touched;
  uint64_t expect = (nn % 2 == 0) ? (nn / 2) * (nn - 1) : nn * ((nn - 1) / 2);
  int bad_rep = -1;
  uint64_t bad_sum = 0;
  for (int rep = 0; hmk_more(a, r); rep++) {
    if (!sc->rmw && a->inject_error && rep == a->reps - 1) sc->x[sc->n / 2] += 1; /* a word changes under us */
    double s = hmk_now();
    if (sc->strips) {
      scan_strips(sc->x, sc->m, sc->cols, sc->strip_rows);
    } else if (sc->rmw) {
      hmk_scan_rmw(sc->x, sc->n);
    } else {
      uint64_t sum = sc->colsum ? scan_cols(sc->x, sc->m, sc->cols) : hmk_scan_read(sc->x, sc->n);
      if (sum != expect && bad_rep < 0) {
        bad_rep = rep;
        bad_sum = sum;
      }
    }
    r->times[r->n++] = hmk_now() - s;
  }
  if (bad_rep >= 0)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetition %d summed to %llu, expected %llu", bad_rep,
             (unsigned long long)bad_sum, (unsigned long long)expect);
}

/* Read-modify-write scans: every touched word is its index plus what the
 * repetitions added, every other word its index. */
static void check_rmw(const hmk_args_t *a, const scan_t *sc) {
  if (a->inject_error) sc->x[sc->n / 2] ^= 1;
  uint64_t add = (uint64_t)a->reps * HMK_SCAN_INC;
  size_t wrong = 0, first_wrong = sc->n;
  const uint64_t *x = sc->x;
  size_t n = sc->n, touched = sc->touched;
#pragma omp parallel for schedule(static) reduction(+ : wrong) reduction(min : first_wrong)
  for (size_t i = 0; i < n; i++)
    if (x[i] != (uint64_t)i + (i < touched ? add : 0)) {
      wrong++;
      if (i < first_wrong) first_wrong = i;
    }
  if (wrong)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: %zu words wrong after the scans (first at index %zu)", wrong,
             first_wrong);
}

int main(int argc, char **argv) {
  hmk_args_t a = {.kernel = "scan",
                  .summary = "Sequential read scan (sum) or read-modify-write scan (x[i] += 3) over 64-bit words, "
                             "or x[i] += 3 in row strips of a column-major matrix (an LU's trailing update), "
                             "or a sum read down the columns of a row-major matrix (a transpose's source).",
                  .variants = "read|rmw|strips|cols",
                  .variant = "read",
                  .bytes = 256ull << 20,
                  .min_bytes = 4096,
                  .reps = 5};
  uint64_t strip_rows = 0; /* 0: not given */
  hmk_opt_t opts[] = {
      {"--strip-rows", HMK_OPT_COUNT, &strip_rows, NULL, 1, UINT64_MAX,
       "strips: rows per strip (default 512: 4 KiB of each column)"},
  };
  hmk_parse(&a, argc, argv, opts, 1);
  int strips = strcmp(a.variant, "strips") == 0;
  if (strip_rows && !strips) hmk_fail(HMK_EXIT_USAGE, "--strip-rows applies to --variant strips only");
  if (!strip_rows) strip_rows = 512;
  int colsum = strcmp(a.variant, "cols") == 0;
  int rmw = strips || strcmp(a.variant, "rmw") == 0;
  size_t n = (size_t)(a.bytes / 8);
  size_t m = hmk_isqrt(n), cols = n / m; /* strips, cols: the matrix (min_bytes: m >= 22) */
  size_t touched = strips || colsum ? m * cols : n;

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  uint64_t *x = hmk_alloc(n * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = i;
  r.init_s = hmk_now() - t0;

  scan_t sc = {.x = x, .n = n, .m = m, .cols = cols, .strip_rows = (size_t)strip_rows, .strips = strips,
               .rmw = rmw, .colsum = colsum, .touched = touched};
  timed_scans(&a, &r, &sc);
  r.bytes_moved = (rmw ? 16.0 : 8.0) * (double)touched;
  r.flops = (double)touched;
  double v0 = hmk_now();
  if (rmw) check_rmw(&a, &sc);
  r.verify_s = hmk_now() - v0;
  hmk_extra_u64(&r, "elements", n);
  hmk_extra_u64(&r, "streams", rmw ? 2 : 1);
  if (strips || colsum) {
    hmk_extra_u64(&r, "rows", m);
    hmk_extra_u64(&r, "columns", cols);
    if (strips) hmk_extra_u64(&r, "strip_rows", strip_rows);
  }
  hmk_emit(&a, &r);
  free(x);
  return 0;
}
