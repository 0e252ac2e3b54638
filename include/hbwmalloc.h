/* SPDX-License-Identifier: BSD-3-Clause */
/* hbwmalloc.h: the high-bandwidth-memory API of memkind (discontinued),
 * served by libhetmem. Codes written for memkind's hbwmalloc build
 * unchanged against this header and run when linked with -lhetmem.
 *
 * "High bandwidth" means hetmem's fastest memory tier (hm_tier_get(ctx, 0)
 * after discovery): an HBM node on a Xeon Max in flat mode, a GPU-attached
 * node, or plain DRAM on a machine with one kind of memory. Memory on a
 * NUMA node that is not the default of the calling thread is mapped and
 * bound with mbind according to the policy; when the fastest tier is the
 * node the program allocates from anyway, the C library's allocator serves
 * (no binding is needed). */
#ifndef HETMEM_HBWMALLOC_H
#define HETMEM_HBWMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HBW_API __attribute__((visibility("default")))
#else
#define HBW_API
#endif

/* The policies of memkind's hbw_set_policy, with memkind's values. */
typedef enum {
  HBW_POLICY_BIND = 1,      /* only the fastest node; NULL (ENOMEM) when larger than it */
  HBW_POLICY_PREFERRED = 2, /* the fastest tier, else other memory (the default) */
  HBW_POLICY_INTERLEAVE = 3, /* interleaved over every node of the fastest kind */
  HBW_POLICY_BIND_ALL = 4   /* as BIND, over every node of the fastest kind (all HBM) */
} hbw_policy_t;

/* Page sizes of hbw_posix_memalign_psize. */
typedef enum {
  HBW_PAGESIZE_4KB = 1,
  HBW_PAGESIZE_2MB = 2,
  HBW_PAGESIZE_FIXED_2MB = 3,
  HBW_PAGESIZE_1GB = 4,
  HBW_PAGESIZE_1GB_STRICT = 5
} hbw_pagesize_t;

/** 0 when the fastest tier can be allocated from, ENODEV otherwise. */
HBW_API int hbw_check_available(void);
/** Sets the policy, once, before the first allocation: 0, EINVAL for an
 *  unknown policy, EPERM when called after the first allocation or twice. */
HBW_API int hbw_set_policy(hbw_policy_t mode);
/** The policy in force (HBW_POLICY_PREFERRED unless set). */
HBW_API hbw_policy_t hbw_get_policy(void);
/* Flag of hbw_verify_memory_region: write-touch every page first (so that
 * pages never touched are allocated, and then checked). */
#define HBW_TOUCH_PAGES 1
/** 0 when every page of [addr, addr+size) is on the fastest tier's nodes,
 *  -1 when one is not (or was never touched and flags lacks
 *  HBW_TOUCH_PAGES); EINVAL for a NULL or empty range. */
HBW_API int hbw_verify_memory_region(void *addr, size_t size, int flags);

HBW_API void *hbw_malloc(size_t size);
HBW_API void *hbw_calloc(size_t nmemb, size_t size);
HBW_API void *hbw_realloc(void *ptr, size_t size);
HBW_API void hbw_free(void *ptr);
HBW_API int hbw_posix_memalign(void **memptr, size_t alignment, size_t size);
HBW_API int hbw_posix_memalign_psize(void **memptr, size_t alignment, size_t size,
                                     hbw_pagesize_t pagesize);
HBW_API size_t hbw_malloc_usable_size(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* HETMEM_HBWMALLOC_H */
