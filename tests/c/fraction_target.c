/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_profile_samplers.py to run under `hetmem
 * profile --sampler portable`: three blocks from three allocation sites
 * (one line each), written for WORK_MS milliseconds in a loop that touches
 * every page of `all` (8 MiB), only the first quarter of the pages of
 * `quarter` (16 MiB: a sample stands for twice the pages), and nothing of
 * `idle` (8 MiB) after its first fill. The portable sampler arms
 * consecutive pages from a random start; its estimates per byte must still
 * be proportional to the pages touched: all : quarter about 4 : 1, idle
 * near 0. Each pass of the loop also allocates `temp` (4 MiB), writes
 * every page of it and frees it: a temporary that never outlives a
 * sampling interval, as hot as `all` while it lives.
 *
 * usage: hm_fraction_target WORK_MS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK ((size_t)8 << 20)
#define PAGE ((size_t)4096)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s WORK_MS\n", argv[0]);
    return 2;
  }
  double work = atof(argv[1]);
  /* one line each: the test tells the sites apart by their lines */
  char *all = malloc(BLOCK);     /* site: all */
  char *quarter = malloc(2 * BLOCK); /* site: quarter */
  char *idle = malloc(BLOCK);    /* site: idle */
  if (!all || !quarter || !idle) return 1;
  memset(all, 0, BLOCK);
  memset(quarter, 0, 2 * BLOCK);
  memset(idle, 0, BLOCK);
  unsigned long loops = 0;
  for (double t0 = now_ms(); now_ms() - t0 < work; loops++) {
    for (size_t p = 0; p < BLOCK; p += PAGE) all[p]++;
    for (size_t p = 0; p < 2 * BLOCK / 4; p += PAGE) quarter[p]++;
    char *temp = malloc(BLOCK / 2); /* site: temp */
    if (!temp) return 1;
    for (size_t p = 0; p < BLOCK / 2; p += PAGE) temp[p] = (char)p;
    free(temp);
  }
  unsigned sum = 0;
  for (size_t p = 0; p < BLOCK; p += PAGE) sum += (unsigned char)(all[p] + quarter[p] + idle[p]);
  printf("loops %lu sum %u\n", loops, sum);
  free(all);
  free(quarter);
  free(idle);
  return 0;
}
