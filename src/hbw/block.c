/* SPDX-License-Identifier: BSD-3-Clause */
/* Header-prefixed blocks of hbwmalloc.h and memkind.h (block.h). */
#include "block.h"

#include <numaif.h>
#include <stdlib.h>

#include "prim/prim.h"

#define HM__BLK_MAGIC 0x68626d77686d6b31ull /* "1kmhwmbh" */

static void *hm__blk_place(uintptr_t base, uint64_t len, size_t alignment, size_t size,
                           uint32_t kind, uint32_t heap) {
  uintptr_t user = (base + _HM_BLK_HDR + alignment - 1) & ~(uintptr_t)(alignment - 1);
  _hm_blk_hdr_t *h = (_hm_blk_hdr_t *)(user - sizeof *h);
  *h = (_hm_blk_hdr_t){.magic = HM__BLK_MAGIC, .base = base, .maplen = len, .size = size,
                       .kind = kind, .heap = heap};
  return (void *)user;
}

void *_hm_blk_map(int mode, const unsigned long mask[_HM_BLK_MASK_LONGS], size_t alignment,
                  size_t size, uint32_t kind) {
  size_t pg = _hm_prim_page_size();
  if (alignment < _HM_BLK_HDR) alignment = _HM_BLK_HDR;
  if (size > SIZE_MAX - alignment - _HM_BLK_HDR - pg) return NULL;
  size_t maplen = (size + alignment + _HM_BLK_HDR + pg - 1) / pg * pg;
  void *base = NULL;
  if (_hm_prim_map_anon(maplen, &base) != 0) return NULL;
  if (_hm_prim_sys_mbind(base, maplen, mode, mask, 8 * sizeof(unsigned long) * _HM_BLK_MASK_LONGS,
                         0) != 0 &&
      mode != MPOL_PREFERRED) {
    _hm_prim_sys_munmap(base, maplen);
    return NULL;
  }
  return hm__blk_place((uintptr_t)base, maplen, alignment, size, kind, 0);
}

void *_hm_blk_heap(size_t alignment, size_t size, uint32_t kind) {
  if (alignment < _HM_BLK_HDR) alignment = _HM_BLK_HDR;
  if (size > SIZE_MAX - alignment - _HM_BLK_HDR) return NULL;
  void *base = malloc(size + alignment + _HM_BLK_HDR);
  if (!base) return NULL;
  return hm__blk_place((uintptr_t)base, 0, alignment, size, kind, 1);
}

_hm_blk_hdr_t *_hm_blk_hdr(void *p) {
  if (!p) return NULL;
  _hm_blk_hdr_t *h = (_hm_blk_hdr_t *)((uintptr_t)p - sizeof *h);
  return h->magic == HM__BLK_MAGIC ? h : NULL;
}

void _hm_blk_free(void *p) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(p);
  if (!h) return;
  h->magic = 0;
  if (h->heap) free((void *)(uintptr_t)h->base);
  else _hm_prim_sys_munmap((void *)(uintptr_t)h->base, h->maplen);
}

size_t _hm_blk_usable(void *p) {
  _hm_blk_hdr_t *h = _hm_blk_hdr(p);
  if (!h) return 0;
  if (h->heap) return h->size; /* malloc's slack is not promised */
  return (size_t)(h->base + h->maplen - (uintptr_t)p);
}
