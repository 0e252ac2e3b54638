/* SPDX-License-Identifier: BSD-3-Clause */
/* memkind.h on this machine's tiers: which kinds are available (DAX_KMEM
 * only where a pmem or cxl node exists), and every call of every kind: data
 * kept through realloc, calloc zeroed, alignment honoured, the kind found
 * from the block, unavailable and invalid kinds refused as memkind does.
 * Where the pages land is checked on real multi-node kernels by tests/vm. */
#include <errno.h>
#include <memkind.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hetmem.h"
#include "testhelper.h"

static int has_dax_kmem(void) {
  hm_ctx_t *ctx = NULL;
  static const char *const none[1] = {NULL};
  int found = 0;
  if (hm_ctx_new(&ctx, NULL) == 0 && hm_tiers_discover(ctx, none, 0) == 0) {
    for (size_t i = 0; i < hm_tier_count(ctx); i++) {
      hm_tier_t t = {.size = sizeof t};
      if (hm_tier_get(ctx, i, &t) == 0 && (t.kind == HM_TIER_PMEM || t.kind == HM_TIER_CXL))
        found = 1;
    }
  }
  hm_ctx_free(ctx);
  return found;
}

static void one_kind(memkind_t kind) {
  size_t n = 3 << 20;
  unsigned char *p = memkind_malloc(kind, n);
  CHECK(p != NULL);
  if (!p) return;
  CHECK(memkind_detect_kind(p) == kind);
  CHECK(memkind_malloc_usable_size(kind, p) >= n);
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7u);
  unsigned char *q = memkind_realloc(kind, p, 2 * n); /* grows: a new block, data kept */
  CHECK(q != NULL);
  if (!q) return;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += q[i] != (unsigned char)(i * 7u);
  CHECK_EQ_INT(bad, 0);
  q = memkind_realloc(NULL, q, n / 2); /* NULL kind: the block's own */
  CHECK(q != NULL && memkind_detect_kind(q) == kind);
  memkind_free(NULL, q);

  unsigned char *z = memkind_calloc(kind, 1000, 1000);
  CHECK(z != NULL);
  if (z) {
    bad = 0;
    for (size_t i = 0; i < 1000 * 1000; i++) bad += z[i] != 0;
    CHECK_EQ_INT(bad, 0);
    memkind_free(kind, z);
  }
  void *a = NULL;
  CHECK_EQ_INT(memkind_posix_memalign(kind, &a, 1 << 16, 12345), 0);
  CHECK(a != NULL && ((uintptr_t)a & 0xffff) == 0);
  memkind_free(kind, a);
  CHECK_EQ_INT(memkind_posix_memalign(kind, &a, 24, 100), EINVAL);
  CHECK(memkind_realloc(kind, memkind_malloc(kind, 10), 0) == NULL); /* frees */
  memkind_free(kind, NULL);
}

int main(void) {
  memkind_t served[] = {MEMKIND_DEFAULT, MEMKIND_REGULAR, MEMKIND_HBW, MEMKIND_HBW_PREFERRED,
                        MEMKIND_HBW_INTERLEAVE, MEMKIND_HBW_ALL};
  for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
    CHECK_EQ_INT(memkind_check_available(served[i]), 0);
    one_kind(served[i]);
  }
  memkind_t dax[] = {MEMKIND_DAX_KMEM, MEMKIND_DAX_KMEM_PREFERRED, MEMKIND_DAX_KMEM_ALL};
  int want = has_dax_kmem() ? 0 : MEMKIND_ERROR_UNAVAILABLE;
  for (size_t i = 0; i < 3; i++) {
    CHECK_EQ_INT(memkind_check_available(dax[i]), want);
    if (want == 0) {
      one_kind(dax[i]);
      continue;
    }
    errno = 0;
    CHECK(memkind_malloc(dax[i], 4096) == NULL && errno == ENOMEM);
    void *a = NULL;
    CHECK_EQ_INT(memkind_posix_memalign(dax[i], &a, 64, 4096), ENOMEM);
  }
  memkind_t bogus = (memkind_t)(uintptr_t)77;
  CHECK_EQ_INT(memkind_check_available(bogus), MEMKIND_ERROR_INVALID);
  CHECK(memkind_malloc(bogus, 16) == NULL);
  CHECK(memkind_malloc(NULL, 16) == NULL);
  char msg[MEMKIND_ERROR_MESSAGE_SIZE];
  memkind_error_message(MEMKIND_ERROR_UNAVAILABLE, msg, sizeof msg);
  CHECK(strstr(msg, "not on this machine") != NULL);
  return hm_test_done("test_memkind");
}
