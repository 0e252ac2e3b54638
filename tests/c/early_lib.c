/* SPDX-License-Identifier: BSD-3-Clause */
/* A shared library whose constructor allocates large blocks before
 * libhetmem_preload.so's own constructor has run, as OpenBLAS does
 * (dependencies of the program are initialized before LD_PRELOAD objects
 * that do not depend on them). Linked into hm_early_target. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HM_EARLY_BYTES ((size_t)4 << 20)

__attribute__((visibility("default"))) int hm_early_check_and_release(void);

static unsigned char *hm__early_malloc, *hm__early_mmap;

__attribute__((noinline)) static void early_ctor_alloc(void) {
  hm__early_malloc = malloc(HM_EARLY_BYTES);
  void *m = mmap(NULL, HM_EARLY_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  hm__early_mmap = m == MAP_FAILED ? NULL : m;
  for (size_t i = 0; hm__early_malloc && i < HM_EARLY_BYTES; i++)
    hm__early_malloc[i] = (unsigned char)(i * 7u);
  for (size_t i = 0; hm__early_mmap && i < HM_EARLY_BYTES; i++)
    hm__early_mmap[i] = (unsigned char)(i * 13u);
}

__attribute__((constructor)) static void early_ctor(void) { early_ctor_alloc(); }

__attribute__((visibility("default"))) int hm_early_check_and_release(void) {
  int bad = 0;
  if (!hm__early_malloc || !hm__early_mmap) return 1;
  if ((uintptr_t)hm__early_mmap % 4096) bad |= 2; /* mmap must return a page */
  for (size_t i = 0; i < HM_EARLY_BYTES; i++) {
    if (hm__early_malloc[i] != (unsigned char)(i * 7u)) bad |= 4;
    if (hm__early_mmap[i] != (unsigned char)(i * 13u)) bad |= 8;
  }
  free(hm__early_malloc);
  if (munmap(hm__early_mmap, HM_EARLY_BYTES)) bad |= 16;
  return bad;
}
