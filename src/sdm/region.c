/* SPDX-License-Identifier: BSD-3-Clause */
/* Regions: hm_pager_map (backing file, unit table, the views, registration
 * with the userfaultfd, the sorted region table), hm_pager_unmap,
 * hm_pager_advise and hm_pager_flush. Called by the application (or from
 * inside malloc, by the preload interposer): nothing here allocates with
 * the pager lock held (see "Re-entrancy" in pager.c). */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "sdm/pager_int.h"

static void hm__region_free(hm_pager_t *p, _hm_sdm_region_t *r) {
  if (r->base) {
    (void)_hm_prim_uffd_unregister(p->uffd, r->base, r->len);
    (void)_hm_prim_vm_unmap(r->base, r->len);
  }
  if (r->alias) (void)_hm_prim_vm_unmap(r->alias, r->len);
  if (r->memfd >= 0) (void)_hm_prim_close(r->memfd);
  if (r->file >= 0) (void)_hm_prim_close(r->file);
  if (r->units) (void)_hm_prim_vm_unmap(r->units, r->units_bytes);
  free(r);
}

/* ------------------------------------------------------------------------
 * Map
 * ------------------------------------------------------------------------ */

/* A new region of length bytes, not yet backed; an error message set. */
static int hm__region_new(hm_pager_t *p, size_t length, _hm_sdm_region_t **out) {
  hm_ctx_t *ctx = p->ctx;
  if (_hm_prim_pid() != p->pid)
    /* The userfaultfd and the handler threads belong to the parent. */
    return _hm_error(ctx, -ECHILD,
                     "this pager belongs to process %d: a forked child must open its own",
                     p->pid);
  size_t len = (length + p->unit - 1) & ~(size_t)(p->unit - 1);
  if (len < length || len / p->unit > UINT32_MAX)
    return _hm_error(ctx, -EINVAL, "region of %zu bytes is too large", length);
  _hm_sdm_region_t *r = calloc(1, sizeof *r);
  if (!r) return _hm_error(ctx, -ENOMEM, "out of memory for a pager region");
  r->memfd = r->file = -1;
  r->len = len;
  r->nunits = (uint32_t)(len / p->unit);
  r->rnd_npg = 1; /* pf_limit: set under the lock (hm__regs_insert) */
  *out = r;
  return 0;
}

/* The backing file, its space reserved; an error message set. */
static int hm__region_backing(hm_pager_t *p, _hm_sdm_region_t *r) {
  hm_ctx_t *ctx = p->ctx;
  size_t len = r->len;
  int rc = _hm_prim_vm_backing_file(p->dir, 1);
  if (rc < 0)
    return _hm_error(ctx, rc, "cannot create a backing file in '%s': %s", p->dir,
                     hm_strerror(rc));
  r->file = rc;
  rc = _hm_prim_vm_fallocate(r->file, 0, 0, len);
  if (rc == -ENOSPC)
    return _hm_error(ctx, rc,
                     "no space in '%s' for a %zu-byte pager region (the backing store is "
                     "reserved when a region is mapped)",
                     p->dir, len);
  if (rc)
    return _hm_error(ctx, rc, "cannot reserve %zu bytes in '%s': %s", len, p->dir,
                     hm_strerror(rc));
  return 0;
}

/* The region's view of the program at at (NULL: anywhere) into r->base. */
static int hm__region_base(int fd, size_t len, void *at, _hm_sdm_region_t *r) {
  void *mem = NULL;
  int rc = at ? _hm_prim_vm_map_at(fd, len, at) : _hm_prim_vm_map(fd, len, &mem);
  if (!rc) r->base = at ? at : mem;
  return rc;
}

/* The unit table and the views of r (the program's at at, unless NULL),
 * registered with the userfaultfd. */
static int hm__region_views(hm_pager_t *p, _hm_sdm_region_t *r, void *at) {
  size_t len = r->len;
  r->units_bytes = ((size_t)r->nunits * sizeof(_hm_sdm_unit_t) + HM_SDM_PAGE - 1) &
                   ~(size_t)(HM_SDM_PAGE - 1);
  void *mem = NULL;
  int rc = _hm_prim_vm_map(-1, r->units_bytes, &mem);
  if (rc) return rc;
  r->units = mem;
  for (uint32_t u = 0; u < r->nunits; u++) r->units[u].slot = -1;
  if (p->memfd_mode) {
    rc = _hm_prim_vm_memfd("hetmem-sdm", len);
    if (rc < 0) return rc;
    r->memfd = rc;
    rc = hm__region_base(r->memfd, len, at, r);
    if (rc) return rc;
    rc = _hm_prim_vm_map(r->memfd, len, &mem);
    if (rc) return rc;
    r->alias = mem;
    (void)_hm_prim_vm_madvise(r->alias, len, MADV_DONTFORK);
  } else {
    rc = hm__region_base(-1, len, at, r);
    if (rc) return rc;
  }
  /* The child of a fork never sees a region (see hetmem.h). */
  rc = _hm_prim_vm_madvise(r->base, len, MADV_DONTFORK);
  if (rc) return rc;
  uint64_t mode = UFFDIO_REGISTER_MODE_MISSING;
  if (p->memfd_mode) mode |= UFFDIO_REGISTER_MODE_MINOR;
  if (p->dirty_mode != HM_SDM_DIRTY_ALL) mode |= UFFDIO_REGISTER_MODE_WP;
  rc = _hm_prim_uffd_register(p->uffd, r->base, len, mode, NULL);
  if (rc) {
    (void)_hm_prim_vm_unmap(r->base, len);
    r->base = NULL;
  }
  return rc;
}

/* Makes room for one more region in the table (pager lock held, and held
 * again on success; released on failure, with an error message set).
 * realloc under the lock could re-enter an interposed malloc: the table
 * grows outside it. */
static int hm__regs_grow(hm_pager_t *p) {
  if (p->nregs < p->capregs) return 0;
  size_t cap = p->capregs ? p->capregs * 2 : 16;
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_region_t **n = malloc(cap * sizeof *n);
  if (!n) return _hm_error(p->ctx, -ENOMEM, "out of memory for the region table");
  pthread_mutex_lock(&p->lk);
  if (cap > p->capregs) {
    if (p->nregs) memcpy(n, p->regs, p->nregs * sizeof *n);
    _hm_sdm_region_t **old = p->regs;
    p->regs = n;
    p->capregs = cap;
    n = old;
  }
  pthread_mutex_unlock(&p->lk);
  free(n);
  pthread_mutex_lock(&p->lk);
  if (p->nregs == p->capregs) { /* lost a race with another map; rare */
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EAGAIN, "region table busy, try again");
  }
  return 0;
}

/* Enters r in the table, sorted by address, and charges its unit table
 * (pager lock held). */
static void hm__regs_insert(hm_pager_t *p, _hm_sdm_region_t *r) {
  size_t i = p->nregs;
  while (i > 0 && p->regs[i - 1]->base > r->base) {
    p->regs[i] = p->regs[i - 1];
    i--;
  }
  p->regs[i] = r;
  p->nregs++;
  /* The unit table is charged to the budget from now on. Units filled
   * before stay until the next fill evicts: a region mapped while the cache
   * is full overshoots the budget by its table (a page per 512 units: per
   * 32 MiB at 64 KiB units) for that long. */
  p->own += r->units_bytes;
  _hm_sdm_cap_update(p); /* sets r->pf_limit, under the lock (budget.c) */
}

/* Publishes r: the budget must hold its unit table; an error message set. */
static int hm__region_publish(hm_pager_t *p, _hm_sdm_region_t *r) {
  pthread_mutex_lock(&p->lk);
  if (p->own + r->units_bytes + p->unit > p->cfg.dram_budget) {
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -ENOMEM,
                     "the unit table of a %zu-byte region (%zu bytes) does not fit in the "
                     "budget %llu; use a larger fetch unit or budget",
                     r->len, r->units_bytes, (unsigned long long)p->cfg.dram_budget);
  }
  int rc = hm__regs_grow(p);
  if (rc) return rc;
  hm__regs_insert(p, r);
  pthread_mutex_unlock(&p->lk);
  return 0;
}

/* Maps a region at at (NULL: where the kernel puts it) into *addr. */
static int hm__map(hm_pager_t *p, size_t length, void *at, void **addr) {
  _hm_sdm_region_t *r = NULL;
  int rc = hm__region_new(p, length, &r);
  if (rc) return rc;
  rc = hm__region_backing(p, r);
  if (rc) {
    hm__region_free(p, r);
    return rc;
  }
  rc = hm__region_views(p, r, at);
  if (rc) {
    size_t len = r->len;
    hm__region_free(p, r);
    return _hm_error(p->ctx, rc, "cannot map a %zu-byte pager region: %s", len,
                     hm_strerror(rc));
  }
  rc = hm__region_publish(p, r);
  if (rc) {
    hm__region_free(p, r);
    return rc;
  }
  *addr = r->base;
  return 0;
}

int hm_pager_map(hm_pager_t *p, size_t length, void **addr) {
  if (!p || !addr || length == 0) return -EINVAL;
  *addr = NULL;
  return hm__map(p, length, NULL, addr);
}

int hm_pager_map_at(hm_pager_t *p, void *addr, size_t length) {
  if (!p || !addr || length == 0) return -EINVAL;
  if ((uintptr_t)addr % HM_SDM_PAGE || length % p->unit)
    return _hm_error(p->ctx, -EINVAL,
                     "hm_pager_map_at: %p and %zu bytes must be page- and fetch-unit-aligned",
                     addr, length);
  void *got = NULL;
  return hm__map(p, length, addr, &got);
}

/* ------------------------------------------------------------------------
 * Unmap
 * ------------------------------------------------------------------------ */

/* The region based at addr and its index in the table (pager lock held). */
static _hm_sdm_region_t *hm__region_at(hm_pager_t *p, const void *addr, size_t *idx) {
  for (size_t i = 0; i < p->nregs; i++)
    if (p->regs[i]->base == addr) {
      *idx = i;
      return p->regs[i];
    }
  return NULL;
}

/* Takes r out of the table and the WILLNEED queue, waits until nothing
 * works on it, and gives back its slots and unit table (pager lock held).
 * Returns the bytes it had resident, its unit table's included. */
static uint64_t hm__region_retire(hm_pager_t *p, _hm_sdm_region_t *r, size_t idx) {
  r->dead = 1;
  memmove(&p->regs[idx], &p->regs[idx + 1], (p->nregs - idx - 1) * sizeof *p->regs);
  p->nregs--;
  for (unsigned i = 0; i < p->nwq;)
    if (p->wq[i].reg == r)
      p->wq[i] = p->wq[--p->nwq];
    else
      i++;
  while (r->busy) pthread_cond_wait(&p->cv, &p->lk);
  uint64_t held = 0;
  for (uint32_t u = 0; u < r->nunits; u++) {
    int32_t s = r->units[u].slot;
    if (s < 0) continue;
    held += (uint64_t)p->slots[s].nfilled * HM_SDM_PAGE;
    _hm_sdm_drop_slot(p, s);
    r->units[u].slot = -1;
  }
  _hm_sdm_pf_forget(&p->pf, r);
  _hm_sdm_rsize_add(p->rsizes, HM_SDM_READ_SIZES, r->len, 1, r->bytes_read);
  p->seen_live -= (uint64_t)r->seen_units * p->unit;
  p->own -= r->units_bytes;
  _hm_sdm_cap_update(p);
  return held + r->units_bytes; /* the unit table: unmapped with the region */
}

int hm_pager_unmap(hm_pager_t *p, void *addr, size_t length) {
  if (!p || !addr) return -EINVAL;
  pthread_mutex_lock(&p->lk);
  size_t idx = 0;
  _hm_sdm_region_t *r = hm__region_at(p, addr, &idx);
  size_t len = (length + p->unit - 1) & ~(size_t)(p->unit - 1);
  if (!r || (length && len != r->len)) {
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EINVAL, "hm_pager_unmap: %p (%zu bytes) is not a pager region",
                     addr, length);
  }
  /* Its pages stay in the process's RSS until the unmap has freed them
   * (about 0.1 s for a GiB of 4 KiB pages): left out of the process
   * budget's measure until then. Counted as the rest of the process, they
   * squeezed the cache of the other regions out (a tiled LU's cache fell
   * from 1 GiB to 53 MiB as its matrix was freed, and the end of the run
   * blamed 970 MiB on the program's own memory). */
  uint64_t held = hm__region_retire(p, r, idx);
  atomic_fetch_add_explicit(&p->excluded, (int64_t)held, memory_order_relaxed);
  pthread_mutex_unlock(&p->lk);
  hm__region_free(p, r);
  atomic_fetch_sub_explicit(&p->excluded, (int64_t)held, memory_order_relaxed);
  return 0;
}

/* ------------------------------------------------------------------------
 * Advice
 * ------------------------------------------------------------------------ */

/* Region and unit range of [addr, addr+length) (pager lock held). */
static _hm_sdm_region_t *hm__range(hm_pager_t *p, void *addr, size_t length, uint64_t *off) {
  _hm_sdm_region_t *r = _hm_sdm_find(p, (uint64_t)(uintptr_t)addr);
  if (!r) return NULL;
  *off = (uint64_t)((char *)addr - r->base);
  if (length > r->len - *off) return NULL;
  return r;
}

/* Discards unit u of r (DONTNEED) once nothing works on it. */
static void hm__discard_unit(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u) {
  pthread_mutex_lock(&p->lk);
  _hm_sdm_unit_t *U = &r->units[u];
  _hm_sdm_wait_unit(p, U);
  U->flags &= (uint8_t)~HM_UF_ONDISK;
  U->wrote = 0; /* the memory's next use has a history of its own */
  if (U->state != HM_U_RES) {
    pthread_mutex_unlock(&p->lk);
    return;
  }
  U->state = HM_U_BUSY;
  r->busy++;
  pthread_mutex_unlock(&p->lk);
  char *ub = _hm_sdm_ubase(r, p, u);
  if (p->memfd_mode)
    (void)_hm_prim_vm_punch(r->memfd, (uint64_t)u * p->unit, p->unit);
  else
    (void)_hm_prim_vm_madvise(ub, p->unit, MADV_DONTNEED);
  pthread_mutex_lock(&p->lk);
  _hm_sdm_drop_slot(p, U->slot);
  U->slot = -1;
  U->state = HM_U_NONE;
  r->busy--;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lk);
  _hm_sdm_wake(p, ub, p->unit);
}

/* NORMAL, SEQUENTIAL, RANDOM: the prefetch hints of units [u0, u1]. */
static void hm__advise_flags(_hm_sdm_region_t *r, uint32_t u0, uint32_t u1, hm_advice_t advice) {
  for (uint32_t u = u0; u <= u1; u++) {
    uint8_t f = r->units[u].flags & (uint8_t)~(HM_UF_RANDOM | HM_UF_SEQ);
    if (advice == HM_ADVICE_SEQUENTIAL) f |= HM_UF_SEQ;
    if (advice == HM_ADVICE_RANDOM) f |= HM_UF_RANDOM;
    r->units[u].flags = f;
  }
}

/* WILLNEED: queued for the handlers (pager lock held, released here).
 * Resident units of the range are marked referenced: the program says it
 * will use them soon, which CLOCK would otherwise learn only from a fault,
 * and units already mapped never fault. A tiled LU asks for its panel
 * tile before each update that reads it; without the mark, CLOCK took the
 * panel as it took the tiles streaming past and it was read again for
 * every column of tiles. Cost: O(units of the range, or resident units
 * where they are fewer), once per advice, under the pager lock. */
void _hm_sdm_mark_willneed(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1) {
  if ((uint64_t)u1 - u0 + 1 <= p->nact) {
    for (uint32_t u = u0; u <= u1; u++)
      if (r->units[u].state == HM_U_RES) p->slots[r->units[u].slot].ref = 1;
    return;
  }
  /* a range larger than what is resident: its resident units are found
   * among the slots in use */
  for (uint32_t k = 0; k < p->nact; k++) {
    _hm_sdm_slot_t *S = &p->slots[p->act[k]];
    if (S->used && S->reg == r && S->unit >= u0 && S->unit <= u1 &&
        r->units[S->unit].state == HM_U_RES)
      S->ref = 1;
  }
}

static int hm__advise_willneed(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1) {
  _hm_sdm_mark_willneed(p, r, u0, u1);
  if (p->nwq < HM_SDM_WQ) p->wq[p->nwq++] = (_hm_sdm_wq_t){r, u0, u1 + 1};
  pthread_mutex_unlock(&p->lk);
  uint64_t one = 1;
  ssize_t w = _hm_prim_write(p->evfd, &one, sizeof one);
  return w < 0 ? (int)w : 0;
}

/* COLD (madvise's MADV_COLD and MADV_PAGEOUT through the interposer):
 * each resident unit wholly inside [off, off + length) is queued for
 * eviction first, last unit first, so that eviction takes the range from
 * its start (a stream's data goes in the order it came); units that are
 * pinned, in transition or queued already are left as they are, and so are
 * the partial units at the edges (the program may still use the rest of
 * them). Eviction writes dirty ones back as always; nothing is evicted
 * before room is needed, and a fault on a queued unit first makes it
 * CLOCK's again. Pager lock held, released here; cost O(units). */
static void hm__advise_cold(hm_pager_t *p, _hm_sdm_region_t *r, uint64_t off, size_t length) {
  uint64_t fa = (off + p->unit - 1) / p->unit, fb = (off + length) / p->unit;
  for (uint64_t u = fb; u > fa && p->coldq.e; u--) {
    _hm_sdm_unit_t *V = &r->units[u - 1];
    if (V->state != HM_U_RES) continue;
    _hm_sdm_slot_t *S = &p->slots[V->slot];
    if (S->pin || S->demoted) continue;
    _hm_sdm_demote(p, &p->coldq, V, S);
  }
  pthread_mutex_unlock(&p->lk);
}

/* DONTNEED of [off, off + length) of r: whole units are dropped; partial
 * ones at the edges are zeroed (pager lock held, released here). */
static void hm__advise_dontneed(hm_pager_t *p, _hm_sdm_region_t *r, uint64_t off,
                                size_t length) {
  uint64_t a = off, b = off + length;
  uint64_t fa = (a + p->unit - 1) / p->unit, fb = b / p->unit;
  r->busy++;
  pthread_mutex_unlock(&p->lk);
  if (fa < fb) {
    for (uint64_t u = fa; u < fb; u++) hm__discard_unit(p, r, (uint32_t)u);
    if (a < fa * p->unit) memset(r->base + a, 0, fa * p->unit - a);
    if (fb * p->unit < b) memset(r->base + fb * p->unit, 0, b - fb * p->unit);
  } else {
    memset(r->base + a, 0, length);
  }
  _hm_sdm_release(p, r);
}

int hm_pager_advise(hm_pager_t *p, void *addr, size_t length, hm_advice_t advice) {
  if (!p || !addr) return -EINVAL;
  if (length == 0) return 0;
  pthread_mutex_lock(&p->lk);
  uint64_t off;
  _hm_sdm_region_t *r = hm__range(p, addr, length, &off);
  if (!r) {
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EINVAL, "hm_pager_advise: range is not inside one pager region");
  }
  uint32_t ufirst = (uint32_t)(off / p->unit);
  uint32_t ulast = (uint32_t)((off + length - 1) / p->unit);
  switch (advice) {
  case HM_ADVICE_NORMAL:
  case HM_ADVICE_SEQUENTIAL:
  case HM_ADVICE_RANDOM:
    hm__advise_flags(r, ufirst, ulast, advice);
    pthread_mutex_unlock(&p->lk);
    return 0;
  case HM_ADVICE_WILLNEED:
    return hm__advise_willneed(p, r, ufirst, ulast);
  case HM_ADVICE_DONTNEED:
    hm__advise_dontneed(p, r, off, length);
    return 0;
  case HM_ADVICE_COLD:
    hm__advise_cold(p, r, off, length);
    return 0;
  default:
    pthread_mutex_unlock(&p->lk);
    return _hm_error(p->ctx, -EINVAL, "hm_pager_advise: unknown advice %d", (int)advice);
  }
}

/* ------------------------------------------------------------------------
 * Flush
 * ------------------------------------------------------------------------ */

/* Writes back units u0..u1 of r, which the caller holds busy, then lets
 * it go; the first error stays in *rc. */
static void hm__flush_range(hm_pager_t *p, _hm_sdm_region_t *r, uint32_t u0, uint32_t u1,
                            _hm_prim_page_region_t *vec, int *rc) {
  for (uint32_t u = u0; u <= u1; u++) {
    int e = _hm_sdm_flush_unit(p, r, u, vec);
    if (e && !*rc) *rc = e;
  }
  _hm_sdm_release(p, r);
}

/* Flushes [addr, addr + length) (length 0: its page); an error message set. */
static int hm__flush_addr(hm_pager_t *p, void *addr, size_t length,
                          _hm_prim_page_region_t *vec, int *rc) {
  size_t len = length ? length : 1;
  pthread_mutex_lock(&p->lk);
  uint64_t off;
  _hm_sdm_region_t *r = hm__range(p, addr, len, &off);
  if (r) r->busy++;
  pthread_mutex_unlock(&p->lk);
  if (!r) return _hm_error(p->ctx, -EINVAL, "hm_pager_flush: range is not inside one pager region");
  uint32_t u1 = (uint32_t)((off + len - 1) / p->unit);
  hm__flush_range(p, r, (uint32_t)(off / p->unit), u1, vec, rc);
  return 0;
}

/* Flushes every region, one after the other. */
static void hm__flush_all(hm_pager_t *p, _hm_prim_page_region_t *vec, int *rc) {
  for (size_t i = 0;; i++) {
    pthread_mutex_lock(&p->lk);
    _hm_sdm_region_t *r = i < p->nregs ? p->regs[i] : NULL;
    if (r) r->busy++;
    pthread_mutex_unlock(&p->lk);
    if (!r) break;
    hm__flush_range(p, r, 0, r->nunits - 1, vec, rc);
  }
}

int hm_pager_flush(hm_pager_t *p, void *addr, size_t length) {
  if (!p) return -EINVAL;
  _hm_prim_page_region_t *vec = calloc(HM_SDM_MAX_UNIT_PAGES, sizeof *vec);
  if (!vec) return -ENOMEM;
  int rc = 0;
  if (addr) {
    int e = hm__flush_addr(p, addr, length, vec, &rc);
    if (e) {
      free(vec);
      return e;
    }
  } else {
    hm__flush_all(p, vec, &rc);
  }
  free(vec);
  if (rc) return _hm_error(p->ctx, rc, "hm_pager_flush: write-back failed: %s", hm_strerror(rc));
  return 0;
}
