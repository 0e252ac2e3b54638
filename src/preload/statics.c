/* SPDX-License-Identifier: BSD-3-Clause */
/* Large static data of the program and its libraries: zero-initialized
 * arrays (.bss: STREAM's a, b and c, a Fortran COMMON block) and
 * initialized ones (.data). Large requests never see them, so without this
 * a program whose arrays are static ran in cache mode with all of them in
 * plain memory, over the budget and without a word.
 *
 * At start-up (before main: from the interposer's constructor, or from the
 * first large request of a library constructor that ran earlier) every
 * loaded module's writable PT_LOAD segments are listed: the part past the
 * file is .bss, the rest .data. In cache mode each .bss segment of at
 * least the allocation threshold is put behind the pager where it stands:
 * the longest run of its pages that nothing has touched yet (mincore; the
 * loader's copy relocations, stdout and environ among them, and whatever
 * constructors wrote are left where they are, so no pager thread can ever
 * fault on them) becomes a pager region at the same address
 * (hm_pager_map_at; its zeros are the pager's zero fill). .data, and .bss
 * in the other modes, stay in plain memory; the statistics list each with
 * why, and `hetmem run` says so once.
 *
 * Costs: one dl_iterate_phdr and a mincore per large segment, once. Like
 * the pager's blocks, the regions do not exist in a child forked without
 * exec: its access ends it with a message (init.c). */
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

#define HM__MINCORE_PAGES 4096u /* pages per mincore call (16 MiB) */

static void hm__add(uintptr_t lo, uintptr_t hi, int data, const char *module) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  if (c->nstatics >= HM_PL_MAX_STATICS) return;
  _hm_pl_static_t *s = &c->statics[c->nstatics++];
  memset(s, 0, sizeof *s);
  s->lo = lo, s->hi = hi, s->data = data;
  snprintf(s->module, sizeof s->module, "%s", module);
  s->why = data ? "initialized data (.data) stays in plain memory" : NULL;
}

static int hm__segments_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  size_t thr = *(const size_t *)arg, pg = _hm_pl_ctx.page;
  char exe[256];
  const char *name = info->dlpi_name;
  if (!name || !*name) { /* the program itself */
    ssize_t n = _hm_prim_self_exe(exe, sizeof exe);
    name = n > 0 ? exe : "(program)";
  }
  if (strstr(name, "libhetmem")) return 0; /* ours */
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    uintptr_t file_end = start + ph->p_filesz, end = start + ph->p_memsz;
    if (ph->p_filesz >= thr) hm__add(start, file_end, 1, name);
    uintptr_t lo = (file_end + pg - 1) & ~(uintptr_t)(pg - 1), hi = end & ~(uintptr_t)(pg - 1);
    if (hi > lo && hi - lo >= thr) hm__add(lo, hi, 0, name);
  }
  return 0;
}

void _hm_pl_statics_find(size_t thr) {
  _hm_pl_ctx.nstatics = 0;
  dl_iterate_phdr(hm__segments_cb, &thr);
}

/* The longest run of pages of [lo, hi) that are not resident, into
 * [*a, *b); 0 when mincore cannot say. */
static int hm__untouched(uintptr_t lo, uintptr_t hi, uintptr_t *a, uintptr_t *b) {
  unsigned char vec[HM__MINCORE_PAGES];
  size_t pg = _hm_pl_ctx.page;
  uintptr_t run = lo, best_a = lo, best_b = lo;
  for (uintptr_t p = lo; p < hi;) {
    size_t n = (hi - p) / pg < HM__MINCORE_PAGES ? (hi - p) / pg : HM__MINCORE_PAGES;
    if (_hm_prim_sys_mincore((void *)p, n * pg, vec)) return 0;
    for (size_t i = 0; i < n; i++, p += pg) {
      if (!(vec[i] & 1)) continue;
      if (p - run > best_b - best_a) best_a = run, best_b = p;
      run = p + pg;
    }
  }
  if (hi - run > best_b - best_a) best_a = run, best_b = hi;
  *a = best_a, *b = best_b;
  return 1;
}

/* Puts the untouched part of .bss segment s behind the pager. */
static void hm__manage(_hm_pl_static_t *s, size_t thr) {
  uintptr_t a = 0, b = 0;
  if (!hm__untouched(s->lo, s->hi, &a, &b)) {
    s->why = "mincore could not tell which pages were touched";
    return;
  }
  size_t unit = (size_t)_hm_pl_ctx.fetch_unit, len = (b - a) / unit * unit;
  if (len < thr || len == 0) {
    s->why = "most of it was written before main";
    return;
  }
  if (_hm_pl_open_pager() != 0 || !hm_pager_map_at) {
    s->why = "the pager could not be opened";
    return;
  }
  if (hm_pager_map_at(_hm_pl_ctx.pager, (void *)a, len) != 0) {
    /* its mapping there is gone: zeros again, as they were */
    void *got = NULL;
    (void)_hm_prim_sys_mmap((void *)a, len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0, &got);
    s->why = "the pager refused it (storage tier full?)";
    return;
  }
  s->at = a;
  s->managed = len;
  /* in the table as a pager block: a forked child is told, not crashed */
  (void)_hm_pl_table_insert(&_hm_pl_ctx.table, a, 0, len, len, HM_PL_PAGER, HM_PL_STATIC);
  _hm_pl_ctx.statics_managed++;
  if (s->lo + len < s->hi - unit) s->why = "partly: pages written before main stay";
}

void _hm_pl_statics_prepare(size_t thr) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  uint64_t on = 1;
  if (hm_option_get_u64(c->ctx, "statics", &on)) on = 1;
  for (int i = 0; i < c->nstatics; i++) {
    _hm_pl_static_t *s = &c->statics[i];
    if (s->data) continue;
    if (c->mode != HM_PL_M_CACHE)
      s->why = "static data is managed in cache mode only";
    else if (!on)
      s->why = "HETMEM_STATICS=0";
    else
      hm__manage(s, thr);
  }
}

void _hm_pl_statics_json(_hm_sb_t *sb) {
  _hm_sb_puts(sb, ",\"statics\":[");
  for (int i = 0; i < _hm_pl_ctx.nstatics; i++) {
    const _hm_pl_static_t *s = &_hm_pl_ctx.statics[i];
    _hm_sb_printf(sb, "%s{\"module\":", i ? "," : "");
    _hm_sb_json_str(sb, s->module);
    _hm_sb_printf(sb, ",\"segment\":\"%s\",\"bytes\":%llu,\"managed_bytes\":%llu,\"why\":",
                  s->data ? "data" : "bss", (unsigned long long)(s->hi - s->lo),
                  (unsigned long long)s->managed);
    if (s->why) _hm_sb_json_str(sb, s->why);
    else _hm_sb_puts(sb, "null");
    _hm_sb_puts(sb, "}");
  }
  _hm_sb_puts(sb, "]");
}
