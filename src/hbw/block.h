/* SPDX-License-Identifier: BSD-3-Clause */
/* Blocks with a header in front, so that free, realloc and usable_size
 * work from the pointer alone: node-bound blocks (each its own anonymous
 * mapping, mbind'ed before first touch) of hbwmalloc.h and memkind.h, and
 * memkind's heap blocks (malloc'ed, for its regular kinds). Not a hot
 * path: one mmap and one mbind per bound block, as memkind's per-kind
 * arenas are not; large HPC arrays are what these APIs serve. */
#ifndef HM_HBW_BLOCK_H
#define HM_HBW_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#define _HM_BLK_HDR 64u /* bytes reserved in front of every block */
#define _HM_BLK_MASK_LONGS 16

typedef struct _hm_blk_hdr_s {
  uint64_t magic;
  uint64_t base;   /* the mapping's or malloc's start */
  uint64_t maplen; /* bytes from base (mapping) or 0 (heap) */
  uint64_t size;   /* requested */
  uint32_t kind;   /* the caller's tag (memkind's kind) */
  uint32_t heap;   /* 1: malloc'ed, 0: mapped */
} _hm_blk_hdr_t;

/* A mapping of size bytes (aligned to alignment, a power of two) bound
 * with mbind(mode, mask) before first touch; with MPOL_PREFERRED a failed
 * mbind still serves the block. NULL when it cannot be made. */
void *_hm_blk_map(int mode, const unsigned long mask[_HM_BLK_MASK_LONGS], size_t alignment,
                  size_t size, uint32_t kind);
/* The same from malloc (the default NUMA policy). */
void *_hm_blk_heap(size_t alignment, size_t size, uint32_t kind);
/* The header of a block made here, NULL for any other pointer. */
_hm_blk_hdr_t *_hm_blk_hdr(void *p);
void _hm_blk_free(void *p);
/* Bytes usable from p to the end of its block (0: not a block). */
size_t _hm_blk_usable(void *p);

#endif
