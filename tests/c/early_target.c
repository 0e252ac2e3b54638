/* SPDX-License-Identifier: BSD-3-Clause */
/* Runs under `hetmem profile` / `hetmem run` in tests/integration/test_run.py: its
 * library (early_lib.c) allocated in a constructor before the interposer's;
 * this checks those blocks and releases them. Exit 0 when all is well,
 * otherwise the failed checks as bits (1 no block, 2 mmap not page-aligned,
 * 4 malloc data, 8 mmap data, 16 munmap refused). */
#include <stdio.h>

int hm_early_check_and_release(void);

int main(void) {
  int bad = hm_early_check_and_release();
  printf("early blocks: %s (%d)\n", bad ? "FAILED" : "ok", bad);
  return bad;
}
