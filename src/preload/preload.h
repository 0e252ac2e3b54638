/* The LD_PRELOAD interposer: internals shared by the files of src/preload/.
 *
 * Shape (kept so that placement can extend it with allocation sites and
 * more tiers):
 *   hook (malloc, mmap, ...)  ->  size filter  ->  route()  ->  backend
 * Small requests never leave the hook: they go straight to glibc's own
 * allocator (__libc_malloc & co.). Large ones are routed to a backend (today
 * the pager; later a NUMA tier chosen per allocation site) and recorded in
 * the block table, which free/realloc/malloc_usable_size/munmap consult to
 * find who owns a pointer without any lock.
 */
#ifndef HM_PRELOAD_H
#define HM_PRELOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Every symbol the interposer defines, listed once:
 * X(return type, name, (parameters)). preload.map exports exactly these
 * names (tests/test_run.py checks both agree); preload.c declares each one
 * with default visibility from this list, so a prototype that drifts from
 * glibc's fails to compile. pthread_create is hooked so that threads the
 * runtime starts (the pager's fault handlers) inherit the recursion guard. */
#define HM_PL_HOOKS(X)                                                                   \
  X(void *, malloc, (size_t size))                                                       \
  X(void, free, (void *ptr))                                                             \
  X(void *, calloc, (size_t nmemb, size_t size))                                         \
  X(void *, realloc, (void *ptr, size_t size))                                           \
  X(void *, reallocarray, (void *ptr, size_t nmemb, size_t size))                        \
  X(void *, memalign, (size_t alignment, size_t size))                                   \
  X(int, posix_memalign, (void **memptr, size_t alignment, size_t size))                 \
  X(void *, aligned_alloc, (size_t alignment, size_t size))                              \
  X(void *, valloc, (size_t size))                                                       \
  X(void *, pvalloc, (size_t size))                                                      \
  X(size_t, malloc_usable_size, (void *ptr))                                             \
  X(void *, mmap, (void *addr, size_t length, int prot, int flags, int fd, off_t offset)) \
  X(void *, mmap64, (void *addr, size_t length, int prot, int flags, int fd, off_t offset)) \
  X(int, munmap, (void *addr, size_t length))                                            \
  X(int, madvise, (void *addr, size_t length, int advice))                               \
  X(void *, mremap, (void *old_address, size_t old_size, size_t new_size, int flags, ...)) \
  X(int, pthread_create,                                                                 \
    (pthread_t * thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg))

/* Backends that can own a large block. Index 0 is glibc (never in the
 * table). Placement adds tiers here (a NUMA node bound with mbind, ...). */
typedef enum _hm_pl_backend_e {
  HM_PL_LIBC = 0,
  HM_PL_PAGER = 1,
  HM_PL__BACKENDS
} _hm_pl_backend_t;

/* Block flags. */
#define HM_PL_FROM_MMAP 1u /* made by the mmap hook: munmap/mremap may end it */

/* One live large block. key is the address handed to the application (0:
 * never used, 1: deleted, 2: being filled in); the block's mapping starts
 * off bytes below it. The fields are written before key is published and
 * read with relaxed atomics, so a scan racing with an insert never sees a
 * half-made block. */
typedef struct _hm_pl_block_s {
  _Atomic uintptr_t key;
  _Atomic size_t maplen;   /* bytes the backend mapped */
  _Atomic size_t req;      /* bytes the application asked for */
  _Atomic uint32_t off;    /* key - mapping start (alignment padding) */
  uint16_t backend;        /* _hm_pl_backend_t */
  uint16_t flags;
} _hm_pl_block_t;

#define HM_PL_KEY_EMPTY ((uintptr_t)0)
#define HM_PL_KEY_DELETED ((uintptr_t)1)
#define HM_PL_KEY_BUSY ((uintptr_t)2)

/* The block table (table.c): open addressing over a fixed array, claimed
 * and released with compare-and-swap, plus a per-2-MiB-granule count of
 * blocks that lets free() reject almost every small pointer with a single
 * load. All functions are lock-free and async-signal-safe. The table is a
 * member of the interposer's context; nothing here is a global. */
#define HM_PL_GRANULE_SHIFT 21 /* 2 MiB */
#define HM_PL_VA_BITS 47       /* user space with 4-level page tables */
#define HM_PL_GRANULES ((uintptr_t)1 << (HM_PL_VA_BITS - HM_PL_GRANULE_SHIFT))

typedef struct _hm_pl_table_s {
  _hm_pl_block_t *_Atomic slots;
  /* Per granule: blocks overlapping it (saturates at 255, then stays). A
   * 64 MiB reservation of which only the pages covering used address
   * ranges are ever touched. */
  _Atomic uint8_t *_Atomic granules;
} _hm_pl_table_t;

int _hm_pl_table_init(_hm_pl_table_t *t);

/* 0 when p cannot be a block (the common case: every small pointer). Cost:
 * one load of the map pointer, one shift, one load, one branch. Addresses
 * above 2^47 (5-level tables with a high hint) always go to the table. */
static inline int _hm_pl_table_maybe(const _hm_pl_table_t *t, const void *p) {
  _Atomic uint8_t *g = atomic_load_explicit(&t->granules, memory_order_acquire);
  uintptr_t i = (uintptr_t)p >> HM_PL_GRANULE_SHIFT;
  if (__builtin_expect(g == NULL, 0)) return 0; /* before start-up nothing is ours */
  return i >= HM_PL_GRANULES || atomic_load_explicit(&g[i], memory_order_acquire) != 0;
}

/* Records a block (its mapping starts off bytes below key); NULL when the
 * table is full (the caller then serves the request from glibc). */
_hm_pl_block_t *_hm_pl_table_insert(_hm_pl_table_t *t, uintptr_t key, uint32_t off,
                                    size_t maplen, size_t req, uint16_t backend, uint16_t flags);
/* The block whose key is exactly p, or NULL (call after _hm_pl_table_maybe). */
_hm_pl_block_t *_hm_pl_table_find(_hm_pl_table_t *t, const void *p);
/* The block whose mapping contains p (a linear scan: munmap only). */
_hm_pl_block_t *_hm_pl_table_find_containing(_hm_pl_table_t *t, const void *p);
/* Releases the slot; the block's granules lose one count. */
void _hm_pl_table_remove(_hm_pl_table_t *t, _hm_pl_block_t *b);
/* Forgets every block (a forked child, single-threaded: the pager's
 * regions are not inherited, so their addresses may be reused there). */
void _hm_pl_table_clear(_hm_pl_table_t *t);
/* Slots in the table. */
size_t _hm_pl_table_capacity(void);

#endif
