/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_statics.py to run under `hetmem
 * profile --sampler refs`: three 8 MiB static arrays in .bss, page-aligned
 * so that they touch one another, written once; then hot_a and hot_c are
 * swept again and again for the given seconds while cold_b is left alone.
 * A sampler that tells the arrays apart credits the two hot ones many
 * times what it credits cold_b; one that shares the .bss's count among
 * them by size credits all three alike.
 *
 * usage: hm_statics_target SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN ((size_t)8 << 20)

static char hot_a[LEN] __attribute__((aligned(4096)));
static char cold_b[LEN] __attribute__((aligned(4096)));
static char hot_c[LEN] __attribute__((aligned(4096)));

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
    return 2;
  }
  double secs = atof(argv[1]), t0 = now_s();
  memset(hot_a, 1, LEN);
  memset(cold_b, 2, LEN);
  memset(hot_c, 3, LEN);
  unsigned long sum = 0, passes = 0;
  while (now_s() - t0 < secs) {
    for (size_t i = 0; i < LEN; i += 4096) sum += (unsigned char)(hot_a[i] + hot_c[i]);
    passes++;
  }
  printf("{\"passes\": %lu, \"sum\": %lu, \"cold\": %d}\n", passes, sum, cold_b[LEN - 1]);
  return 0;
}
