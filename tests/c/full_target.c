/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_hardening_c_storage.py: asks for TOTAL MiB in
 * blocks of BLOCK MiB (malloc), writes a pattern into every block it gets,
 * reads all of them back, and prints one line:
 *   served=N refused=M enomem=K bad=B
 * (refused: malloc returned NULL; enomem: of those, with errno ENOMEM;
 * bad: bytes that did not read back). Exit status 0 when every served
 * byte read back, 1 otherwise.
 *
 * usage: hm_full_target TOTAL_MIB BLOCK_MIB */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s TOTAL_MIB BLOCK_MIB\n", argv[0]);
    return 2;
  }
  size_t block = (size_t)strtoul(argv[2], NULL, 10) << 20;
  size_t n = block ? ((size_t)strtoul(argv[1], NULL, 10) << 20) / block : 0;
  unsigned char **b = calloc(n ? n : 1, sizeof *b);
  if (!b) return 2;
  size_t served = 0, refused = 0, enomem = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    errno = 0;
    b[i] = malloc(block);
    if (!b[i]) {
      refused++;
      enomem += errno == ENOMEM;
      continue;
    }
    served++;
    for (size_t k = 0; k < block; k += 512) b[i][k] = (unsigned char)(i * 7 + k / 512);
  }
  for (size_t i = 0; i < n; i++)
    if (b[i])
      for (size_t k = 0; k < block; k += 512) bad += b[i][k] != (unsigned char)(i * 7 + k / 512);
  printf("served=%zu refused=%zu enomem=%zu bad=%zu\n", served, refused, enomem, bad);
  for (size_t i = 0; i < n; i++) free(b[i]);
  free(b);
  return bad ? 1 : 0;
}
