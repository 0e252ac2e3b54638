/* SPDX-License-Identifier: BSD-3-Clause */
/* The hooks of the interposer (preload.h's HM_PL_HOOKS): the malloc
 * family, the mmap family, pthread_create and the signal dispositions.
 * Small requests never leave the hook; large ones go to route.c.
 *
 * Costs on the hot paths (no lock anywhere on them):
 *  - small malloc/calloc/memalign: one relaxed load of the threshold, one
 *    compare, one increment of a thread-local counter, a tail call into
 *    glibc;
 *  - free/realloc/malloc_usable_size of a small pointer: one call, one shift,
 *    one load from the granule map, one branch, then glibc;
 *  - large blocks: a hash probe in the lock-free block table plus the
 *    pager's own map/unmap cost.
 * What the hot paths need is static inline here or in preload.h, and the
 * context they read has hidden visibility (no GOT load).
 *
 * The pass-through to the kernel is prim's raw syscalls with libc's
 * conventions (errno, MAP_FAILED / -1): never a call back into these hooks. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

#define HM__EXPORT __attribute__((visibility("default")))
#define HM__DECLARE(ret, name, params) HM__EXPORT ret name params;
HM_PL_HOOKS(HM__DECLARE)
#undef HM__DECLARE

/* dlsym may allocate: the guard sends that to glibc. */
void _hm_pl_resolve_libc_usable(void) {
  _hm_pl_tls.guard++;
  void *sym = dlsym(RTLD_NEXT, "malloc_usable_size");
  _hm_pl_tls.guard--;
  if (sym) memcpy(&_hm_pl_ctx.libc_usable, &sym, sizeof sym); /* object -> function pointer */
}

static size_t hm__libc_usable(void *p) {
  if (hm_likely(_hm_pl_ctx.libc_usable != NULL)) return _hm_pl_ctx.libc_usable(p);
  return 0; /* only before start-up: callers then keep the block in glibc */
}

/* The kernel's answer with libc's conventions (the hooks' pass-through). */
static int hm__kernel_rc(int rc) {
  if (rc == 0) return 0;
  errno = -rc;
  return -1;
}

static void *hm__kernel_map(int rc, void *p) {
  if (rc == 0) return p;
  errno = -rc;
  return MAP_FAILED;
}

static void *hm__kernel_mmap(void *addr, size_t length, int prot, int flags, int fd,
                             off_t offset) {
  void *p = NULL;
  int rc = _hm_prim_sys_mmap(addr, length, prot, flags, fd, offset, &p);
  return hm__kernel_map(rc, p);
}

/* A small-block heap pointer: the granule map first, so that a glibc
 * pointer costs what it did without the heap. */
static inline int hm__in_heap(const void *p) {
  return _hm_pl_table_maybe(&_hm_pl_ctx.table, p) && _hm_pl_heap_has(p);
}

static inline _hm_pl_block_t *hm__find(const void *p) {
  if (hm_likely(!_hm_pl_table_maybe(&_hm_pl_ctx.table, p))) return NULL;
  return _hm_pl_table_find(&_hm_pl_ctx.table, p);
}

__attribute__((noinline, cold)) void _hm_pl_register_thread(void) {
  /* First small allocation of this thread: have its count flushed when it
   * exits (keys below 32 need no allocation in glibc). */
  if (_hm_pl_ctx.have_key && !_hm_pl_tls.registered) {
    _hm_pl_tls.registered = 1;
    pthread_setspecific(_hm_pl_ctx.thread_key, (void *)1);
    /* the main thread is counted at start-up */
    if (atomic_load_explicit(&_hm_pl_profiling, memory_order_relaxed) && _hm_prim_pid() != _hm_prim_tid() &&
        !_hm_pl_tls.guard) {
      _hm_pl_tls.counted = 1;
      _hm_pl_prof_thread(+1);
    }
  }
}

/* The rare part of counting a small allocation: a thread's first one, or
 * profiling. Out of line, so that the common case stays a few instructions
 * (malloc saves one register and ends in a jump to glibc). */
__attribute__((noinline)) static void hm__count_small_slow(void *ra, size_t size, int first) {
  if (first) _hm_pl_register_thread();
  if (atomic_load_explicit(&_hm_pl_profiling, memory_order_relaxed) && !_hm_pl_tls.guard)
    _hm_pl_prof_small((uintptr_t)ra, size);
}

/* Cost: a TLS increment, one relaxed load and a branch; while profiling,
 * also a probe of this thread's caller table (prof.c). */
static inline void hm__count_small(void *ra, size_t size) {
  int first = _hm_pl_tls.small++ == 0;
  if (hm_unlikely(first | atomic_load_explicit(&_hm_pl_profiling, memory_order_relaxed)))
    hm__count_small_slow(ra, size, first);
}

/* Kept out of line so that the small path of malloc needs no stack frame. */
__attribute__((noinline)) static void *hm__malloc_large(size_t size) {
  _hm_pl_req_t r = {size, 0, 0};
  void *p = _hm_pl_large_alloc(&r);
  return p || _hm_pl_refused() ? p : __libc_malloc(size);
}

/* A small request with the small-block heap on (out of line: off by
 * default, and the common path stays a tail call). */
__attribute__((noinline)) static void *hm__heap_or_libc(size_t size, void *ra) {
  void *p = _hm_pl_heap_malloc(size, ra);
  return p ? p : __libc_malloc(size);
}

/* Cost of a small malloc: a compare with the threshold, hm__count_small,
 * the heap's flag, and a tail call to glibc (or the heap's thread list). */
void *malloc(size_t size) {
  if (hm_likely(size < _hm_pl_thr())) {
    hm__count_small(__builtin_return_address(0), size);
    if (hm_unlikely(_hm_pl_heap_on())) return hm__heap_or_libc(size, __builtin_return_address(0));
    return __libc_malloc(size);
  }
  return hm__malloc_large(size);
}

__attribute__((noinline)) static void hm__free_maybe_ours(void *ptr) {
  if (_hm_pl_heap_has(ptr)) {
    _hm_pl_heap_free(ptr);
    return;
  }
  _hm_pl_block_t *b = _hm_pl_table_find(&_hm_pl_ctx.table, ptr);
  if (b) _hm_pl_large_free(b);
  else __libc_free(ptr);
}

/* Cost of freeing a glibc block: one byte of the table's 2 MiB-granule map
 * (which marks the small-block heap's chunks too) and a tail call to glibc
 * (no stack frame). */
void free(void *ptr) {
  if (hm_likely(!_hm_pl_table_maybe(&_hm_pl_ctx.table, ptr))) {
    __libc_free(ptr);
    return;
  }
  hm__free_maybe_ours(ptr);
}

void *calloc(size_t nmemb, size_t size) {
  size_t total;
  if (hm_unlikely(__builtin_mul_overflow(nmemb, size, &total))) {
    errno = ENOMEM;
    return NULL;
  }
  if (hm_likely(total < _hm_pl_thr())) {
    hm__count_small(__builtin_return_address(0), total);
    void *h = hm_unlikely(_hm_pl_heap_on())
                  ? _hm_pl_heap_malloc(total, __builtin_return_address(0))
                  : NULL;
    if (h) return memset(h, 0, total); /* a recycled block holds old data */
    return __libc_calloc(nmemb, size);
  }
  _hm_pl_req_t r = {total, 0, 0};
  void *p = _hm_pl_large_alloc_z(&r, 1); /* pager and NUMA regions start zero-filled */
  return p || _hm_pl_refused() ? p : __libc_calloc(nmemb, size);
}

/* Whether a large block being resized may keep its tier. */
static int hm__realloc_stays(const _hm_pl_block_t *b, size_t size) {
  if (_hm_pl_ctx.mode == HM_PL_M_PROFILE)
    return 0; /* recorded as a release and an allocation at the caller's site */
  if (_hm_pl_ctx.mode != HM_PL_M_PLACE || size < _hm_pl_thr()) return 1;
  /* the caller's site decides the tier: a block whose site now lives
   * elsewhere moves */
  _hm_pl_tls.guard++;
  _hm_pl_stack_t st;
  _hm_pl_capture(&st, _hm_pl_ctx.depth);
  int want = _hm_pl_place_want(_hm_pl_place_match(&st), size);
  _hm_pl_tls.guard--;
  return want == (int)b->tier;
}

/* The block's mapping holds the new size: only its accounting changes. */
static void hm__realloc_in_place(_hm_pl_block_t *b, size_t size) {
  if (_hm_pl_ctx.mode == HM_PL_M_PLACE) {
    if (size > b->req) _hm_pl_tier_account(b->tier, size - b->req, +1);
    else _hm_pl_tier_account(b->tier, b->req - size, -1);
  }
  atomic_fetch_add_explicit(&_hm_pl_ctx.live_bytes, size - b->req, memory_order_relaxed);
  b->req = size;
}

static void *hm__realloc_large(_hm_pl_block_t *b, void *ptr, size_t size) {
  size_t usable = b->maplen - b->off;
  if (size == 0) {
    _hm_pl_large_free(b);
    return NULL;
  }
  int stays = hm__realloc_stays(b, size) && size >= _hm_pl_thr();
  if (stays && size <= usable) {
    hm__realloc_in_place(b, size);
    return ptr;
  }
  /* glibc's tier (placement only: profiling never stays): glibc resizes
   * it, with mremap, no copy */
  void *g = NULL;
  if (stays && b->backend == HM_PL_FAST && _hm_pl_realloc_glibc(b, ptr, size, &g)) return g;
  void *n = NULL;
  int retired = _hm_pl_realloc_retire(b, -1);
  if (size >= _hm_pl_thr()) {
    _hm_pl_req_t r = {size, 0, 0};
    n = _hm_pl_large_alloc(&r);
  }
  if (!n && !_hm_pl_refused()) n = __libc_malloc(size);
  if (!n) { /* errno is ENOMEM; the old block is untouched */
    if (retired) (void)_hm_pl_realloc_retire(b, +1);
    return NULL;
  }
  memcpy(n, ptr, size < usable ? size : usable);
  atomic_fetch_add_explicit(&_hm_pl_ctx.realloc_moves, 1, memory_order_relaxed);
  _hm_pl_large_free_moved(b, retired);
  return n;
}

void *realloc(void *ptr, size_t size) {
  if (!ptr) return malloc(size);
  if (hm_unlikely(hm__in_heap(ptr))) return _hm_pl_heap_realloc(ptr, size);
  _hm_pl_block_t *b = hm__find(ptr);
  if (hm_likely(b == NULL)) {
    if (hm_likely(size < _hm_pl_thr()) || _hm_pl_tls.guard) return __libc_realloc(ptr, size);
    /* A glibc block grows past the threshold: move it to the tier. */
    size_t old = hm__libc_usable(ptr);
    _hm_pl_req_t r = {size, 0, 0};
    void *n = old ? _hm_pl_large_alloc(&r) : NULL;
    if (!n) return _hm_pl_refused() ? NULL : __libc_realloc(ptr, size);
    memcpy(n, ptr, old < size ? old : size);
    atomic_fetch_add_explicit(&_hm_pl_ctx.realloc_moves, 1, memory_order_relaxed);
    __libc_free(ptr);
    return n;
  }
  return hm__realloc_large(b, ptr, size);
}

void *reallocarray(void *ptr, size_t nmemb, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(ptr, total);
}

static inline int hm__pow2(size_t a) { return a && !(a & (a - 1)); }

static void *hm__aligned(size_t alignment, size_t size, void *ra) {
  if (hm_likely(size < _hm_pl_thr()) || !hm__pow2(alignment) || alignment > (1u << 30)) {
    hm__count_small(ra, size);
    void *h = hm_unlikely(_hm_pl_heap_on()) && hm__pow2(alignment)
                  ? _hm_pl_heap_memalign(alignment, size, ra)
                  : NULL;
    return h ? h : __libc_memalign(alignment, size);
  }
  _hm_pl_req_t r = {size, alignment, 0};
  void *p = _hm_pl_large_alloc(&r);
  return p || _hm_pl_refused() ? p : __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
  return hm__aligned(alignment, size, __builtin_return_address(0));
}

int posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (!hm__pow2(alignment) || alignment % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = hm__aligned(alignment, size, __builtin_return_address(0));
  errno = saved; /* posix_memalign reports through its result only */
  if (!p) return ENOMEM;
  *memptr = p;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
  return hm__aligned(alignment, size, __builtin_return_address(0));
}

void *valloc(size_t size) {
  if (hm_likely(size < _hm_pl_thr())) {
    hm__count_small(__builtin_return_address(0), size);
    return __libc_valloc(size);
  }
  return hm__aligned(_hm_pl_ctx.page, size, __builtin_return_address(0));
}

void *pvalloc(size_t size) {
  size_t pg = _hm_pl_ctx.page;
  if (size > SIZE_MAX - pg) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = size ? (size + pg - 1) / pg * pg : pg;
  if (hm_likely(rounded < _hm_pl_thr())) {
    hm__count_small(__builtin_return_address(0), size);
    return __libc_pvalloc(size);
  }
  return hm__aligned(pg, rounded, __builtin_return_address(0));
}

size_t malloc_usable_size(void *ptr) {
  if (!ptr) return 0;
  if (hm_unlikely(hm__in_heap(ptr))) return _hm_pl_heap_usable(ptr);
  _hm_pl_block_t *b = hm__find(ptr);
  if (hm_likely(b == NULL)) {
    if (hm_unlikely(!_hm_pl_ctx.libc_usable)) _hm_pl_resolve_libc_usable();
    return hm__libc_usable(ptr);
  }
  return b->maplen - b->off;
}

/* Only plain private anonymous read-write mappings at a place of the
 * kernel's choosing are ours: anything fixed, shared, huge-page, stack-like
 * or reserved without access stays with the kernel. */
static int hm__mmap_is_ours(void *addr, size_t length, int prot, int flags) {
  const int refuse = MAP_FIXED | MAP_HUGETLB | MAP_GROWSDOWN | MAP_STACK
#ifdef MAP_FIXED_NOREPLACE
                     | MAP_FIXED_NOREPLACE
#endif
      ;
  if (!(addr == NULL && length >= _hm_pl_thr() && (flags & MAP_TYPE) == MAP_PRIVATE &&
        (flags & MAP_ANONYMOUS) && !(flags & refuse) && prot == (PROT_READ | PROT_WRITE) &&
        !_hm_pl_tls.guard))
    return 0;
  _hm_pl_ensure_prepared(); /* the mode is unset before hm__ctor */
  /* profiling and flat placement leave mmap to the kernel (route.c) */
  return _hm_pl_mmap_paged() && length >= _hm_pl_thr();
}

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (hm_unlikely(hm__mmap_is_ours(addr, length, prot, flags))) {
    _hm_pl_req_t r = {length, 0, HM_PL_FROM_MMAP};
    void *p = _hm_pl_large_alloc(&r);
    if (p) return p;
    if (_hm_pl_refused()) return MAP_FAILED;
  }
  return hm__kernel_mmap(addr, length, prot, flags, fd, offset);
}

extern __typeof(mmap) mmap64 __attribute__((alias("mmap")));

int munmap(void *addr, size_t length) {
  if (hm_likely(_hm_pl_tls.guard)) return hm__kernel_rc(_hm_prim_sys_munmap(addr, length)); /* the pager's own */
  _hm_pl_block_t *b = _hm_pl_table_find_containing(&_hm_pl_ctx.table, addr);
  if (hm_likely(b == NULL) || atomic_load(&_hm_pl_ctx.state) != HM_PL_READY)
    return hm__kernel_rc(_hm_prim_sys_munmap(addr, length));
  uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
  uintptr_t start = key - b->off, end = start + b->maplen;
  uintptr_t a = (uintptr_t)addr;
  size_t pg = _hm_pl_ctx.page;
  uintptr_t e = a + (length + pg - 1) / pg * pg;
  int rc = 0;
  if (e > end) rc = hm__kernel_rc(_hm_prim_sys_munmap((void *)end, e - end)); /* beyond the block: the kernel's */
  if (a <= key && e >= key + (b->req + pg - 1) / pg * pg) {
    _hm_pl_large_free(b);
    return rc;
  }
  /* A partial unmap (allocators trimming an over-sized mapping): the range
   * stops holding data; the block is released when a later munmap covers
   * what the application asked for. Reading the range afterwards returns
   * zeros rather than SIGSEGV. */
  if (hm_pager_advise) {
    _hm_pl_tls.guard++;
    (void)hm_pager_advise(_hm_pl_ctx.pager, addr, (size_t)((e < end ? e : end) - a),
                          HM_ADVICE_DONTNEED);
    _hm_pl_tls.guard--;
  }
  return rc;
}

enum { HM__PAGER, HM__KERNEL, HM__NOTHING };

/* Who takes advice on a pager block, and the pager's hint for it. */
static int hm__pager_hint(int advice, hm_advice_t *hint) {
  switch (advice) {
  case MADV_NORMAL: *hint = HM_ADVICE_NORMAL; return HM__PAGER;
  case MADV_WILLNEED: *hint = HM_ADVICE_WILLNEED; return HM__PAGER;
  case MADV_SEQUENTIAL: *hint = HM_ADVICE_SEQUENTIAL; return HM__PAGER;
  case MADV_RANDOM: *hint = HM_ADVICE_RANDOM; return HM__PAGER;
  case MADV_DONTNEED:
#ifdef MADV_FREE
  case MADV_FREE:
#endif
    *hint = HM_ADVICE_DONTNEED;
    return HM__PAGER;
  case MADV_COLD:
  case MADV_PAGEOUT:
    /* Both become the pager's "evict first when room is needed" (dirty
     * units written back then). PAGEOUT's "reclaim now" frees memory for
     * other processes; a pager block's memory is the budget's, which only
     * the pager's own fills take, so evicting now would only move the
     * write-backs earlier. */
    *hint = HM_ADVICE_COLD;
    return HM__PAGER;
  case MADV_HUGEPAGE:
  case MADV_NOHUGEPAGE: return HM__KERNEL;
  default: return HM__NOTHING;
  }
}

/* Advice on a pager block goes to the pager (its prefetcher takes the
 * application's hints); huge-page advice goes to the kernel (the pager
 * copes with THP on its regions: tests/c/test_sdm_thp.c); advice that would
 * change fork inheritance or remove the range is the pager's to decide and
 * is accepted without effect. Other ranges go to the kernel. */
int madvise(void *addr, size_t length, int advice) {
  if (hm_likely(_hm_pl_tls.guard || !_hm_pl_table_maybe(&_hm_pl_ctx.table, addr)))
    return hm__kernel_rc(_hm_prim_sys_madvise(addr, length, advice));
  _hm_pl_block_t *b = _hm_pl_table_find_containing(&_hm_pl_ctx.table, addr);
  if (!b || atomic_load(&_hm_pl_ctx.state) != HM_PL_READY || !hm_pager_advise)
    return hm__kernel_rc(_hm_prim_sys_madvise(addr, length, advice));
  uintptr_t start = atomic_load_explicit(&b->key, memory_order_relaxed) - b->off;
  uintptr_t a = (uintptr_t)addr;
  size_t len = a + length > start + b->maplen ? (size_t)(start + b->maplen - a) : length;
  hm_advice_t hint;
  int to = hm__pager_hint(advice, &hint);
  if (to == HM__KERNEL) return hm__kernel_rc(_hm_prim_sys_madvise(addr, len, advice));
  if (to == HM__NOTHING) return 0;
  _hm_pl_tls.guard++;
  (void)hm_pager_advise(_hm_pl_ctx.pager, addr, len, hint);
  _hm_pl_tls.guard--;
  return 0;
}

void *mremap(void *old_address, size_t old_size, size_t new_size, int flags, ...) {
  void *new_address = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_address = va_arg(ap, void *);
    va_end(ap);
  }
  _hm_pl_block_t *b = hm__find(old_address);
  if (hm_likely(b == NULL)) {
    void *p = NULL;
    int rc = _hm_prim_sys_mremap(old_address, old_size, new_size, flags, new_address, &p);
    return hm__kernel_map(rc, p);
  }
  size_t usable = b->maplen - b->off;
  if (new_size == 0 || (flags & MREMAP_FIXED)
#ifdef MREMAP_DONTUNMAP
      || (flags & MREMAP_DONTUNMAP)
#endif
  ) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  if (new_size <= usable) {
    atomic_fetch_add_explicit(&_hm_pl_ctx.live_bytes, new_size - b->req, memory_order_relaxed);
    b->req = new_size;
    return old_address;
  }
  if (!(flags & MREMAP_MAYMOVE)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  _hm_pl_req_t r = {new_size, 0, HM_PL_FROM_MMAP};
  int retired = _hm_pl_realloc_retire(b, -1);
  void *n = _hm_pl_large_alloc(&r);
  if (!n) {
    n = hm__kernel_mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                        0);
    if (n == MAP_FAILED) {
      if (retired) (void)_hm_pl_realloc_retire(b, +1);
      return MAP_FAILED;
    }
  }
  memcpy(n, old_address, old_size < usable ? old_size : usable);
  atomic_fetch_add_explicit(&_hm_pl_ctx.realloc_moves, 1, memory_order_relaxed);
  _hm_pl_large_free_moved(b, retired);
  return n;
}

/* Threads started from inside hetmem (the pager's fault handlers) run with
 * the guard set for their whole life, so whatever they allocate comes from
 * glibc and can never recurse into the pager. */
typedef struct hm__tramp_s {
  void *(*start)(void *);
  void *arg;
} hm__tramp_t;

static void *hm__tramp(void *p) {
  hm__tramp_t t = *(hm__tramp_t *)p;
  __libc_free(p);
  _hm_pl_tls.guard = 1;
  return t.start(t.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                   void *arg) {
  if (hm_unlikely(!_hm_pl_ctx.real_pthread_create)) {
    /* First call (never on an allocation path): dlsym may allocate. */
    _hm_pl_tls.guard++;
    void *sym = dlsym(RTLD_NEXT, "pthread_create");
    _hm_pl_tls.guard--;
    if (!sym) return EAGAIN;
    memcpy(&_hm_pl_ctx.real_pthread_create, &sym, sizeof sym);
  }
  if (hm_likely(!_hm_pl_tls.guard)) return _hm_pl_ctx.real_pthread_create(thread, attr, start, arg);
  hm__tramp_t *t = __libc_malloc(sizeof *t);
  if (!t) return EAGAIN;
  t->start = start;
  t->arg = arg;
  int rc = _hm_pl_ctx.real_pthread_create(thread, attr, hm__tramp, t);
  if (rc) __libc_free(t);
  return rc;
}

/* Signal dispositions. While the portable access sampler runs (profile
 * mode) its SIGSEGV handler must stay installed: a program that sets its
 * own (gfortran's runtime does, for its backtraces) has it kept aside and
 * called for every fault that is not the sampler's, and reads it back as
 * its own. SIGINT, SIGTERM and SIGHUP at their default are term.c's.
 * Everything else goes to glibc. The real sigaction is looked up once at
 * start-up (hm__prepare_common), or here on a call before it. */
static int (*hm__real_sigaction)(int, const struct sigaction *, struct sigaction *);

/* dlsym may allocate: the guard sends that to glibc. */
void _hm_pl_resolve_signals(void) {
  _hm_pl_tls.guard++;
  void *a = dlsym(RTLD_NEXT, "sigaction");
  _hm_pl_tls.guard--;
  if (a) memcpy(&hm__real_sigaction, &a, sizeof a);
}

int _hm_pl_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (hm_unlikely(!hm__real_sigaction)) _hm_pl_resolve_signals();
  if (!hm__real_sigaction) {
    errno = ENOSYS;
    return -1;
  }
  return hm__real_sigaction(sig, act, old);
}

void _hm_pl_set_default(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  (void)_hm_pl_real_sigaction(sig, &dfl, NULL);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (sig == SIGSEGV && _hm_pl_prof_segv_action(act, old)) return 0;
  int rc;
  if (_hm_pl_term_action(sig, act, old, &rc)) return rc;
  return _hm_pl_real_sigaction(sig, act, old);
}

__sighandler_t signal(int sig, __sighandler_t handler) {
  /* glibc's signal() is sigaction with BSD semantics: the hook above
   * decides for both */
  struct sigaction sa, was;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, sig);
  return sigaction(sig, &sa, &was) ? SIG_ERR : was.sa_handler;
}

