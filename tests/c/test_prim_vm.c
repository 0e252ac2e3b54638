/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's memory primitives. _hm_prim_vm_map_huge, which backs the
 * pager's bounce buffers: one mapping of exactly the asked length at a
 * 2 MiB boundary (what THP needs to back it), advised for huge pages, and
 * unmapped whole with the same (address, length); the pager relies on it
 * for its read rate (one DMA segment per unit, see src/sdm/pager.c). And
 * _hm_prim_vm_dontneed_many, which frees a batch of eviction victims. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "prim/prim.h"
#include "testhelper.h"

#define MiB ((size_t)1 << 20)

/* The smaps fields of the mapping that starts at a: its end, and whether
 * the kernel would back it with huge pages (THPeligible). 0 if found. */
static int vma_of(uintptr_t a, uintptr_t *end, int *eligible) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -errno;
  char line[512];
  int found = 0;
  *eligible = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (found) break; /* the next mapping */
      if (lo == a) found = 1, *end = hi;
      continue;
    }
    int v;
    if (found && sscanf(line, "THPeligible: %d", &v) == 1) *eligible = v;
  }
  fclose(f);
  return found ? 0 : -ENOENT;
}

/* Whether THP is enabled for madvised mappings ("never" is the only mode
 * in which the advice cannot take). */
static int thp_on(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return 0;
  char buf[128] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strstr(buf, "[never]") == NULL;
}

static void one(size_t len) {
  void *mem = NULL;
  CHECK_EQ_INT(_hm_prim_vm_map_huge(len, &mem), 0);
  if (!mem) return;
  uintptr_t a = (uintptr_t)mem, end = 0;
  CHECK_EQ_INT(a % (2 * MiB), 0);
  memset(mem, 0x5a, len); /* writable, all of it */
  int eligible = -1;
  CHECK_EQ_INT(vma_of(a, &end, &eligible), 0);
  CHECK_EQ_INT(end - a, len); /* head and tail of the over-map are gone */
  if (thp_on()) CHECK_EQ_INT(eligible, 1);
  printf("len %zu MiB at %#lx: THPeligible %d\n", len / MiB, (unsigned long)a, eligible);
  CHECK_EQ_INT(_hm_prim_vm_unmap(mem, len), 0);
  CHECK_EQ_INT(vma_of(a, &end, &eligible), -ENOENT);
}

/* _hm_prim_vm_dontneed_many frees exactly the ranges it is given (they
 * read back as zeros; their neighbours keep their data), in one call or
 * range by range (pidfd -1). */
static void dontneed(int pidfd) {
  const size_t unit = 256 * 1024;
  const unsigned n = 8;
  unsigned char *m = NULL;
  CHECK_EQ_INT(_hm_prim_vm_map(-1, 2 * n * unit, (void **)&m), 0);
  if (!m) return;
  memset(m, 0xa5, 2 * n * unit);
  void *addr[8];
  for (unsigned k = 0; k < n; k++) addr[k] = m + (size_t)2 * k * unit; /* every other unit */
  CHECK_EQ_INT(_hm_prim_vm_dontneed_many(pidfd, addr, unit, n), 0);
  size_t zeros = 0, kept = 0;
  for (size_t i = 0; i < 2 * n * unit; i += 512) {
    int freed = (i / unit) % 2 == 0;
    if (freed) zeros += m[i] == 0;
    else kept += m[i] == 0xa5;
  }
  CHECK_EQ_INT(zeros, n * unit / 512);
  CHECK_EQ_INT(kept, n * unit / 512);
  CHECK_EQ_INT(_hm_prim_vm_dontneed_many(pidfd, addr, unit, 65), -EINVAL);
  CHECK_EQ_INT(_hm_prim_vm_unmap(m, 2 * n * unit), 0);
}

int main(void) {
  int pidfd = _hm_prim_vm_pidfd_self();
  CHECK(pidfd >= 0);
  dontneed(pidfd);
  dontneed(-1);
  if (pidfd >= 0) (void)_hm_prim_close(pidfd);
  one(8 * MiB);
  one(2 * MiB);
  one(3 * MiB + 4096); /* a length that is no multiple of 2 MiB */
  void *mem = NULL;
  CHECK_EQ_INT(_hm_prim_vm_map_huge(0, &mem), -EINVAL);
  return hm_test_done("test_prim_vm");
}
