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

static _hm_pl_static_t *hm__add(uintptr_t lo, uintptr_t hi, int data, const char *module) {
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  if (c->nstatics >= HM_PL_MAX_STATICS) return NULL;
  _hm_pl_static_t *s = &c->statics[c->nstatics++];
  memset(s, 0, sizeof *s);
  s->lo = lo, s->hi = hi, s->sym = lo, s->data = data, s->tier = -1;
  snprintf(s->module, sizeof s->module, "%s", module);
  s->why = data ? "initialized data (.data) stays in plain memory" : NULL;
  return s;
}

typedef struct hm__syms_s {
  const char *module;
  int first, n; /* the module's symbol entries: statics[first .. first + n) */
} hm__syms_t;

/* One large data symbol of a .bss: an entry of its own over its whole
 * pages (the pages it shares with its neighbours stay as they are); an
 * alias of one already listed is skipped. */
static void hm__add_symbol(void *arg, uintptr_t lo, uintptr_t hi, const char *name) {
  hm__syms_t *q = arg;
  size_t pg = _hm_pl_ctx.page;
  uintptr_t a = (lo + pg - 1) & ~(uintptr_t)(pg - 1), b = hi & ~(uintptr_t)(pg - 1);
  if (b <= a) return;
  for (int i = q->first; i < q->first + q->n; i++)
    if (_hm_pl_ctx.statics[i].lo < b && a < _hm_pl_ctx.statics[i].hi) return;
  _hm_pl_static_t *s = hm__add(a, b, 0, q->module);
  if (!s) return;
  s->sym = lo;
  snprintf(s->symbol, sizeof s->symbol, "%s", name);
  q->n++;
}

/* A large .bss, [start, end) (its pages partly shared with .data and
 * what follows): one entry per large data symbol in it when the file names
 * them (statics_syms.c), else one for its whole pages. */
static void hm__add_bss(const struct dl_phdr_info *info, const char *path, uintptr_t start,
                        uintptr_t end, size_t thr) {
  size_t pg = _hm_pl_ctx.page;
  hm__syms_t q = {path, _hm_pl_ctx.nstatics, 0};
  _hm_pl_symscan_t scan = {info->dlpi_addr, start, end, thr, hm__add_symbol, &q};
  (void)_hm_pl_statics_symbols(path, &scan);
  if (q.n == 0)
    (void)hm__add((start + pg - 1) & ~(uintptr_t)(pg - 1), end & ~(uintptr_t)(pg - 1), 0, path);
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
    if (ph->p_filesz >= thr) (void)hm__add(start, file_end, 1, name);
    uintptr_t lo = (file_end + pg - 1) & ~(uintptr_t)(pg - 1), hi = end & ~(uintptr_t)(pg - 1);
    if (hi > lo && hi - lo >= thr) hm__add_bss(info, name, file_end, end, thr);
  }
  return 0;
}

void _hm_pl_statics_find(size_t thr) {
  _hm_pl_ctx.nstatics = 0;
  dl_iterate_phdr(hm__segments_cb, &thr);
}

/* Not resident is untouched: .bss pages are the zero page's until written
 * (a read maps the shared zero page, which mincore does not count). */
int _hm_pl_statics_untouched(uintptr_t lo, uintptr_t hi, uintptr_t *a, uintptr_t *b) {
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
  if (!_hm_pl_statics_untouched(s->lo, s->hi, &a, &b)) {
    s->why = "mincore could not tell which pages were touched";
    return;
  }
  size_t unit = (size_t)_hm_pl_ctx.fetch_unit, len = (b - a) / unit * unit;
  if (len == 0 || (len < thr && 2 * len < s->hi - s->lo)) {
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
    if (!on)
      s->why = "HETMEM_STATICS=0";
    else if (c->mode == HM_PL_M_PROFILE)
      _hm_pl_statics_profile(s);
    else if (c->mode == HM_PL_M_PLACE)
      _hm_pl_statics_place(s);
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
    _hm_sb_puts(sb, ",\"symbol\":");
    if (s->symbol[0]) _hm_sb_json_str(sb, s->symbol);
    else _hm_sb_puts(sb, "null");
    _hm_sb_printf(sb,
                  ",\"segment\":\"%s\",\"bytes\":%llu,\"managed_bytes\":%llu,"
                  "\"fast_bytes\":%llu,\"tier\":%d,\"why\":",
                  s->data ? "data" : "bss", (unsigned long long)(s->hi - s->lo),
                  (unsigned long long)s->managed, (unsigned long long)s->fast, s->tier);
    if (s->why) _hm_sb_json_str(sb, s->why);
    else _hm_sb_puts(sb, "null");
    _hm_sb_puts(sb, "}");
  }
  _hm_sb_puts(sb, "]");
}
