/* SPDX-License-Identifier: BSD-3-Clause */
/* Sequential scans over one array of 64-bit words holding x[i] = i.
 *   read: sum of all words (one read stream), checked against n(n-1)/2 (+ the
 *         rmw increments) in every repetition;
 *   rmw:  x[i] += C (read and write streams), checked word by word against
 *         i + reps*C after the run.
 * Integers, so every check is exact. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"



int main(int argc, char **argv) {
  hmk_args_t a = {.kernel = "scan",
                  .summary = "Sequential read scan (sum) or read-modify-write scan (x[i] += 3) over 64-bit words.",
                  .variants = "read|rmw",
                  .variant = "read",
                  .bytes = 256ull << 20,
                  .min_bytes = 4096,
                  .reps = 5};
  hmk_parse(&a, argc, argv, NULL, 0);
  int rmw = strcmp(a.variant, "rmw") == 0;
  size_t n = (size_t)(a.bytes / 8);

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  uint64_t *x = hmk_alloc(n * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = i;
  r.init_s = hmk_now() - t0;

  /* n(n-1)/2 modulo 2^64, as the wrapping sum computes it */
  uint64_t nn = (uint64_t)n;
  uint64_t expect = (nn % 2 == 0) ? (nn / 2) * (nn - 1) : nn * ((nn - 1) / 2);
  int bad_rep = -1;
  uint64_t bad_sum = 0;
  for (int rep = 0; hmk_more(&a, &r); rep++) {
    if (!rmw && a.inject_error && rep == a.reps - 1) x[n / 2] += 1; /* a word changes under us */
    double s = hmk_now();
    if (rmw) {
      hmk_scan_rmw(x, n);
    } else {
      uint64_t sum = hmk_scan_read(x, n);
      if (sum != expect && bad_rep < 0) {
        bad_rep = rep;
        bad_sum = sum;
      }
    }
    r.times[r.n++] = hmk_now() - s;
  }
  r.bytes_moved = (rmw ? 16.0 : 8.0) * (double)n;
  r.flops = (double)n;

  double v0 = hmk_now();
  size_t wrong = 0, first_wrong = 0;
  if (rmw) {
    if (a.inject_error) x[n / 2] ^= 1;
    uint64_t add = (uint64_t)a.reps * HMK_SCAN_INC;
    first_wrong = n;
#pragma omp parallel for schedule(static) reduction(+ : wrong) reduction(min : first_wrong)
    for (size_t i = 0; i < n; i++)
      if (x[i] != (uint64_t)i + add) {
        wrong++;
        if (i < first_wrong) first_wrong = i;
      }
  }
  r.verify_s = hmk_now() - v0;
  if (bad_rep >= 0)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetition %d summed to %llu, expected %llu", bad_rep,
             (unsigned long long)bad_sum, (unsigned long long)expect);
  if (wrong)
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: %zu words wrong after the scans (first at index %zu)", wrong,
             first_wrong);
  hmk_extra_u64(&r, "elements", n);
  hmk_extra_u64(&r, "streams", rmw ? 2 : 1);
  hmk_emit(&a, &r);
  free(x);
  return 0;
}
