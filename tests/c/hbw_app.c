/* SPDX-License-Identifier: BSD-3-Clause */
/* A program written for memkind's hbwmalloc, unchanged: built by
 * tests/integration/test_hbw.py against include/hbwmalloc.h and linked with -lhetmem.
 * Checks what it gets back and exits 0, or prints what failed and exits 1. */
#include <errno.h>
#include <hbwmalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c)                                              \
  do {                                                        \
    if (!(c)) {                                               \
      fprintf(stderr, "hbw_app: check failed: %s (line %d)\n", #c, __LINE__); \
      return 1;                                               \
    }                                                         \
  } while (0)

int main(void) {
  CHECK(hbw_get_policy() == HBW_POLICY_PREFERRED);
  CHECK(hbw_set_policy((hbw_policy_t)99) == EINVAL);
  CHECK(hbw_set_policy(HBW_POLICY_BIND) == 0);
  CHECK(hbw_set_policy(HBW_POLICY_PREFERRED) == EPERM); /* only once */
  CHECK(hbw_get_policy() == HBW_POLICY_BIND);
  if (hbw_check_available() != 0) {
    printf("hbw: not available\n");
    return 1;
  }
  size_t n = (size_t)8 << 20;
  double *a = hbw_malloc(n * sizeof(double));
  CHECK(a != NULL);
  for (size_t i = 0; i < n; i++) a[i] = (double)i;
  CHECK(hbw_malloc_usable_size(a) >= n * sizeof(double));
  CHECK(hbw_verify_memory_region(a, n * sizeof(double), HBW_TOUCH_PAGES) == 0);
  int *z = hbw_calloc(1000, sizeof(int));
  CHECK(z != NULL);
  for (int i = 0; i < 1000; i++) CHECK(z[i] == 0);
  a = hbw_realloc(a, 2 * n * sizeof(double));
  CHECK(a != NULL);
  for (size_t i = 0; i < n; i += 4099) CHECK(a[i] == (double)i);
  void *al = NULL;
  CHECK(hbw_posix_memalign(&al, 4096, 12345) == 0);
  CHECK(((uintptr_t)al & 4095) == 0);
  memset(al, 7, 12345);
  CHECK(hbw_posix_memalign(&al, 3, 10) == EINVAL);
  void *hp = NULL;
  CHECK(hbw_posix_memalign_psize(&hp, 2 << 20, 4 << 20, HBW_PAGESIZE_2MB) == 0);
  CHECK(hp != NULL);
  hbw_free(hp);
  hbw_free(al);
  hbw_free(z);
  hbw_free(a);
  hbw_free(NULL);
  printf("hbw: ok\n");
  return 0;
}
