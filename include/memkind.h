/* SPDX-License-Identifier: BSD-3-Clause */
/* memkind.h: the most used part of memkind's kind API, served by hetmem's
 * tiers, so programs written for memkind (discontinued) build and run
 * unchanged against libhetmem:
 *   cc app.c $(hetmem-config --cflags --libs)
 *
 *   MEMKIND_DEFAULT, MEMKIND_REGULAR   ordinary memory (the nodes with CPUs)
 *   MEMKIND_HBW[_PREFERRED|_INTERLEAVE|_ALL]
 *                                      the fastest tier, as hbwmalloc.h's
 *                                      BIND, PREFERRED, INTERLEAVE, BIND_ALL
 *   MEMKIND_DAX_KMEM[_PREFERRED|_ALL]  the nearest memory onlined from a dax
 *                                      device by kmem (Optane PMem, CXL)
 *
 * Kinds are small constants, not objects: memkind_create_kind, PMEM file
 * kinds and arenas are not provided. Every block carries a 64-byte header,
 * so memkind_free(NULL, p) finds its kind. Errors as memkind reports them:
 * NULL (errno ENOMEM) from the allocators, memkind_check_available() 0 or
 * MEMKIND_ERROR_UNAVAILABLE. */
#ifndef HETMEM_MEMKIND_H
#define HETMEM_MEMKIND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HM_MEMKIND_API __attribute__((visibility("default")))
#else
#define HM_MEMKIND_API
#endif

typedef struct memkind *memkind_t;

#define MEMKIND_DEFAULT ((memkind_t)(uintptr_t)1)
#define MEMKIND_REGULAR ((memkind_t)(uintptr_t)2)
#define MEMKIND_HBW ((memkind_t)(uintptr_t)3)
#define MEMKIND_HBW_PREFERRED ((memkind_t)(uintptr_t)4)
#define MEMKIND_HBW_INTERLEAVE ((memkind_t)(uintptr_t)5)
#define MEMKIND_HBW_ALL ((memkind_t)(uintptr_t)6)
#define MEMKIND_DAX_KMEM ((memkind_t)(uintptr_t)7)
#define MEMKIND_DAX_KMEM_PREFERRED ((memkind_t)(uintptr_t)8)
#define MEMKIND_DAX_KMEM_ALL ((memkind_t)(uintptr_t)9)

enum memkind_error {
  MEMKIND_SUCCESS = 0,
  MEMKIND_ERROR_UNAVAILABLE = -1, /* the kind's memory is not on this machine */
  MEMKIND_ERROR_MALLOC = -6,
  MEMKIND_ERROR_INVALID = -13, /* not a kind */
};
#define MEMKIND_ERROR_MESSAGE_SIZE 128

HM_MEMKIND_API void *memkind_malloc(memkind_t kind, size_t size);
HM_MEMKIND_API void *memkind_calloc(memkind_t kind, size_t num, size_t size);
/* kind NULL: the kind ptr was allocated with */
HM_MEMKIND_API void *memkind_realloc(memkind_t kind, void *ptr, size_t size);
/* 0, EINVAL (alignment not a power of two times sizeof(void *)) or ENOMEM */
HM_MEMKIND_API int memkind_posix_memalign(memkind_t kind, void **memptr, size_t alignment,
                                          size_t size);
/* kind may be NULL: the block knows its own */
HM_MEMKIND_API void memkind_free(memkind_t kind, void *ptr);
HM_MEMKIND_API size_t memkind_malloc_usable_size(memkind_t kind, void *ptr);
/* The kind of a block from memkind_* (ptr must come from them) */
HM_MEMKIND_API memkind_t memkind_detect_kind(void *ptr);
HM_MEMKIND_API int memkind_check_available(memkind_t kind);
HM_MEMKIND_API void memkind_error_message(int err, char *msg, size_t size);

#ifdef __cplusplus
}
#endif

#endif
