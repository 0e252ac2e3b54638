/* SPDX-License-Identifier: BSD-3-Clause */
/* memkind.h served by hetmem's tiers (see the header for the kinds; their
 * nodes come from kinds.c, shared with hbwmalloc.h). Every block carries
 * its kind in its header (block.h), so free, realloc and detect_kind need
 * no kind. Nothing here is on a hot path. */
#include <errno.h>
#include <stdio.h>

#include "block.h"
#include "kinds.h"
#include "hetmem.h"
#include "memkind.h"

static int hm__mk_code(memkind_t kind) {
  uintptr_t c = (uintptr_t)kind;
  return c >= 1 && c < _HM_KIND_N ? (int)c : 0;
}

static void *hm__mk_alloc(memkind_t kind, size_t alignment, size_t size) {
  void *p = _hm_kind_alloc(hm__mk_code(kind), alignment, size, 0);
  if (!p) errno = ENOMEM;
  return p;
}

void *memkind_malloc(memkind_t kind, size_t size) { return hm__mk_alloc(kind, 0, size); }

void *memkind_calloc(memkind_t kind, size_t num, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(num, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = _hm_kind_alloc(hm__mk_code(kind), 0, total, 1);
  if (!p) errno = ENOMEM;
  return p;
}

void memkind_free(memkind_t kind, void *ptr) {
  (void)kind; /* the block knows its own */
  _hm_blk_free(ptr);
}

void *memkind_realloc(memkind_t kind, void *ptr, size_t size) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  if (!kind) kind = h ? (memkind_t)(uintptr_t)h->kind : MEMKIND_DEFAULT;
  if (!ptr) return memkind_malloc(kind, size);
  if (size == 0) {
    memkind_free(kind, ptr);
    return NULL;
  }
  return _hm_kind_realloc(hm__mk_code(kind), ptr, size);
}

int memkind_posix_memalign(memkind_t kind, void **memptr, size_t alignment, size_t size) {
  if (!memptr || alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void *))
    return EINVAL;
  int saved = errno;
  void *p = hm__mk_alloc(kind, alignment, size);
  errno = saved;
  if (!p) return ENOMEM;
  *memptr = p;
  return 0;
}

size_t memkind_malloc_usable_size(memkind_t kind, void *ptr) {
  (void)kind;
  return _hm_blk_usable(ptr);
}

memkind_t memkind_detect_kind(void *ptr) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(ptr);
  return h ? (memkind_t)(uintptr_t)h->kind : NULL;
}

int memkind_check_available(memkind_t kind) {
  const _hm_kind_t *k = _hm_kind(hm__mk_code(kind));
  return !k ? MEMKIND_ERROR_INVALID : k->available ? MEMKIND_ERROR_UNAVAILABLE : 0;
}

void memkind_error_message(int err, char *msg, size_t size) {
  const char *text = err == MEMKIND_SUCCESS             ? "success"
                     : err == MEMKIND_ERROR_UNAVAILABLE ? "the kind's memory is not on this machine"
                     : err == MEMKIND_ERROR_MALLOC      ? "out of memory"
                     : err == MEMKIND_ERROR_INVALID     ? "not a kind"
                                                        : "unknown error";
  if (msg && size) snprintf(msg, size, "<memkind> %s", text);
}
