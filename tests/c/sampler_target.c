/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_profile_samplers.py to run under `hetmem
 * profile`: two blocks from two allocation sites (8 MiB in alloc_a, 24 MiB
 * in alloc_b), touched, then READY is created and the program waits for
 * DONE (at most 60 s) and exits without freeing them, so they are live
 * when the profiler drains its sampler at exit.
 *
 * usage: hm_sampler_target READY DONE */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

__attribute__((noinline)) static char *alloc_a(void) { return malloc(8 * MIB); }
__attribute__((noinline)) static char *alloc_b(void) { return malloc(24 * MIB); }

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s READY DONE\n", argv[0]);
    return 2;
  }
  char *a = alloc_a(), *b = alloc_b();
  if (!a || !b) return 1;
  memset(a, 1, 8 * MIB);
  memset(b, 2, 24 * MIB);
  printf("a=%p b=%p\n", (void *)a, (void *)b);
  fflush(stdout);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  close(fd);
  long sum = 0;
  for (int i = 0; i < 60000 && access(argv[2], F_OK) != 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    sum += a[(size_t)i * 4096 % (8 * MIB)];
  }
  return sum < 0; /* keeps the reads */
}
