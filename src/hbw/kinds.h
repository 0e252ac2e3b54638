/* SPDX-License-Identifier: BSD-3-Clause */
/* The kinds of memory of memkind.h, each with its nodes on hetmem's tiers:
 * the one table behind memkind.h (memkind.c) and hbwmalloc.h (hbw.c), whose
 * policies are kinds too (PREFERRED: HBW_PREFERRED, BIND: HBW, BIND_ALL:
 * HBW_ALL, INTERLEAVE: HBW_INTERLEAVE). The tiers are discovered once, at
 * the first call (no storage tiers); the only lock is that pthread_once.
 * The codes are memkind.h's kind constants. */
#ifndef HM_HBW_KINDS_H
#define HM_HBW_KINDS_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"

enum {
  _HM_KIND_DEFAULT = 1,
  _HM_KIND_REGULAR,
  _HM_KIND_HBW,
  _HM_KIND_HBW_PREFERRED,
  _HM_KIND_HBW_INTERLEAVE,
  _HM_KIND_HBW_ALL,
  _HM_KIND_DAX_KMEM,
  _HM_KIND_DAX_KMEM_PREFERRED,
  _HM_KIND_DAX_KMEM_ALL,
  _HM_KIND_N
};

typedef struct _hm_kind_s {
  int available;  /* 0, or -1: the kind's memory is not on this machine */
  int heap;       /* served by malloc (its nodes are where memory comes from anyway) */
  int mode;       /* MPOL_* of the bound ones */
  uint64_t bytes; /* capacity of the nodes; BIND kinds refuse more */
  int unknown;    /* a node's capacity is unknown: refuse nothing */
  unsigned long mask[_HM_BLK_MASK_LONGS];
} _hm_kind_t;

/* The kind of code (1 .. _HM_KIND_N - 1); NULL for any other code. */
const _hm_kind_t *_hm_kind(int code);
/* A header-prefixed block (block.h) of size bytes of kind code, zeroed
 * when zero is set: from the heap or a bound mapping (which reads as
 * zeros); NULL when the kind is unavailable or, for a BIND kind, larger
 * than all its nodes. */
void *_hm_kind_alloc(int code, size_t alignment, size_t size, int zero);
/* ptr (a block, size > 0) resized: in place when it fits and is of kind
 * code already, else moved to a new block of kind code; NULL and errno
 * EINVAL (not a block) or ENOMEM, ptr untouched then. */
void *_hm_kind_realloc(int code, void *ptr, size_t size);
/* The lowest node of the kind (-1: none). */
int _hm_kind_first_node(const _hm_kind_t *k);

#endif
