/* SPDX-License-Identifier: BSD-3-Clause */
/* A storage tier that cannot back a large allocation (issue 19): the pager
 * reserves a region's backing space when it is mapped (fallocate, so that
 * write-back never meets ENOSPC later), and the map fails with -ENOSPC
 * when the tier is full. One documented policy, the option storage_full
 * (HETMEM_STORAGE_FULL):
 *  - error (default): the allocation fails (malloc returns NULL, errno
 *    ENOMEM; mmap MAP_FAILED) and one line on stderr says which directory
 *    is full, by how much, and how to choose the other policy;
 *  - fallback: the allocation is served from DRAM beyond the fast budget,
 *    once warned on stderr and counted in the statistics line
 *    ("storage_full": fallbacks, fallback_bytes), so that the end-of-run
 *    summary can say how far the budget was exceeded.
 * A map that fails for another reason of the tier's (EIO, EROFS: a tier
 * failing or removed) takes the same policy, with its reason in the line.
 * Costs: nothing on any path but a failed map (relaxed counters). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

static struct {
  int fallback; /* the policy: 0 error, 1 fallback */
  _Atomic uint64_t fallbacks, fallback_bytes, refusals, refused_bytes;
  _Atomic int said;
} hm__full;

int _hm_pl_full_init(const char *policy, char *why, size_t len) {
  if (!policy || !*policy || !strcmp(policy, "error")) {
    hm__full.fallback = 0;
  } else if (!strcmp(policy, "fallback")) {
    hm__full.fallback = 1;
  } else {
    snprintf(why, len, "HETMEM_STORAGE_FULL must be error or fallback, not '%s'", policy);
    return -EINVAL;
  }
  return 0;
}

static int hm__is_tier_failure(int rc) {
  return rc == -ENOSPC || rc == -EDQUOT || rc == -EIO || rc == -EROFS || rc == -ENOENT;
}

static void hm__say_once(const char *dir, int rc, uint64_t bytes) {
  if (atomic_exchange(&hm__full.said, 1)) return;
  char line[HM_PATH_MAX + 256];
  uint64_t mib = (bytes + (1u << 20) - 1) >> 20;
  int n;
  if (rc == -ENOSPC || rc == -EDQUOT) {
    _hm_prim_fsinfo_t fs;
    uint64_t free_mib = _hm_prim_fs_info(dir, &fs) == 0 ? fs.free_bytes >> 20 : 0;
    n = hm__full.fallback
            ? snprintf(line, sizeof line,
                       "hetmem: warning: storage tier %s is full: cannot back %llu MiB (%llu MiB "
                       "free); large allocations now come from DRAM beyond the fast budget "
                       "(HETMEM_STORAGE_FULL=fallback)\n",
                       dir, (unsigned long long)mib, (unsigned long long)free_mib)
            : snprintf(line, sizeof line,
                       "hetmem: storage tier %s is full: cannot back %llu MiB (%llu MiB free); "
                       "free space or set HETMEM_STORAGE_FULL=fallback\n",
                       dir, (unsigned long long)mib, (unsigned long long)free_mib);
  } else {
    n = snprintf(line, sizeof line, "hetmem: %sstorage tier %s cannot back %llu MiB: %s%s\n",
                 hm__full.fallback ? "warning: " : "", dir, (unsigned long long)mib,
                 strerror(-rc),
                 hm__full.fallback ? "; large allocations now come from DRAM beyond the fast "
                                     "budget (HETMEM_STORAGE_FULL=fallback)"
                                   : "; the allocation fails (HETMEM_STORAGE_FULL=error)");
  }
  if (n > 0) {
    _hm_prim_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  }
}

int _hm_pl_full_note(int rc, const char *dir, uint64_t bytes) {
  if (!hm__is_tier_failure(rc)) return -1;
  hm__say_once(dir ? dir : "?", rc, bytes);
  if (hm__full.fallback) {
    atomic_fetch_add_explicit(&hm__full.fallbacks, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hm__full.fallback_bytes, bytes, memory_order_relaxed);
    return 0;
  }
  atomic_fetch_add_explicit(&hm__full.refusals, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hm__full.refused_bytes, bytes, memory_order_relaxed);
  return 1;
}

void _hm_pl_full_json(_hm_sb_t *sb) {
  _hm_sb_printf(sb,
                ",\"storage_full\":{\"policy\":\"%s\",\"fallbacks\":%llu,\"fallback_bytes\":%llu,"
                "\"refusals\":%llu,\"refused_bytes\":%llu}",
                hm__full.fallback ? "fallback" : "error",
                (unsigned long long)atomic_load(&hm__full.fallbacks),
                (unsigned long long)atomic_load(&hm__full.fallback_bytes),
                (unsigned long long)atomic_load(&hm__full.refusals),
                (unsigned long long)atomic_load(&hm__full.refused_bytes));
}
