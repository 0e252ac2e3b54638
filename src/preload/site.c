/* SPDX-License-Identifier: BSD-3-Clause */
/* Call sites for the interposer: which module each return address belongs
 * to, and the stack of an allocation.
 *
 * Modules live in a fixed array published by an atomic count: a reader
 * never waits. A rescan (start-up, or an address no known module holds,
 * i.e. a dlopen since) runs in one thread at a time, chosen by a CAS on a
 * flag; a thread that finds a rescan running treats the address as
 * unknown. dl_iterate_phdr is only reached from a large allocation (never
 * from the small path) and never while the recursion guard is held by the
 * loader's own allocations (they go straight to glibc).
 *
 * Stacks come from glibc's backtrace() (the DWARF unwinder of libgcc_s:
 * frame pointers are not needed). Its first call loads libgcc_s with
 * dlopen, which allocates: _hm_pl_sites_init makes that call at start-up
 * under the guard, so no later call can recurse. */
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "prim/prim.h"

typedef struct hm__mods_s {
  _hm_pl_module_t m[HM_PL_MAX_MODULES];
  _Atomic size_t n;
  _Atomic int scanning;
  _Atomic unsigned gen;
  unsigned long long adds, subs; /* dl_phdr_info counters at the last scan */
  uintptr_t self_lo, self_hi;    /* the interposer's own text */
} hm__mods_t;

static hm__mods_t hm__mods;

static void hm__hex(const unsigned char *p, size_t n, char *out, size_t cap) {
  static const char d[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; i < n && k + 2 < cap; i++) {
    out[k++] = d[p[i] >> 4];
    out[k++] = d[p[i] & 15];
  }
  out[k] = 0;
}

static void hm__build_id(struct dl_phdr_info *info, char *out, size_t cap) {
  out[0] = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
    const unsigned char *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      size_t name = (nh->n_namesz + 3u) & ~3u, desc = (nh->n_descsz + 3u) & ~3u;
      const unsigned char *nm = p + sizeof *nh;
      if (nm + name + desc > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(nm, "GNU", 4) == 0 &&
          nh->n_descsz <= 64) {
        hm__hex(nm + name, nh->n_descsz, out, cap);
        return;
      }
      p = nm + name + desc;
    }
  }
}

/* The lowest and highest address of a module's PT_LOADs (hi <= lo: none). */
static void hm__load_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < *lo) *lo = a;
    if (a + ph->p_memsz > *hi) *hi = a + ph->p_memsz;
  }
}

/* The module's path: the main program's executable, or the name the
 * loader was given, made absolute. */
static void hm__module_path(_hm_pl_module_t *m, const char *name, size_t n) {
  if (n == 0 || !name || !*name) {
    /* the main program (first, with an empty name) */
    if (_hm_prim_self_exe(m->path, sizeof m->path) < 0) m->path[0] = 0;
    m->is_main = (n == 0);
    if (!m->path[0]) snprintf(m->path, sizeof m->path, "%s", "[main]");
    return;
  }
  /* dlopen("./libx.so") is named as the loader was given it, relative to
   * the working directory of the moment: the profile outlives that */
  char abs[PATH_MAX];
  const char *use = name;
  if (name[0] != '/' && _hm_prim_realpath(name, abs, sizeof m->path) == 0) use = abs;
  size_t k = strnlen(use, sizeof m->path - 1);
  memcpy(m->path, use, k);
  m->path[k] = 0;
}

static int hm__scan_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  uintptr_t lo, hi;
  hm__load_range(info, &lo, &hi);
  if (hi <= lo) return 0;
  size_t n = atomic_load_explicit(&hm__mods.n, memory_order_relaxed);
  for (size_t i = 0; i < n; i++)
    if (hm__mods.m[i].lo == lo && hm__mods.m[i].bias == info->dlpi_addr) return 0;
  if (n >= HM_PL_MAX_MODULES) return 0;
  _hm_pl_module_t *m = &hm__mods.m[n];
  memset(m, 0, sizeof *m);
  m->bias = info->dlpi_addr;
  m->lo = lo;
  m->hi = hi;
  hm__module_path(m, info->dlpi_name, n);
  hm__build_id(info, m->build_id, sizeof m->build_id);
  atomic_store_explicit(&hm__mods.n, n + 1, memory_order_release);
  return 0;
}

static int hm__count_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  unsigned long long *c = data;
  c[0] = info->dlpi_adds;
  c[1] = info->dlpi_subs;
  return 1; /* the counters are the same in every entry */
}

static void hm__rescan(void) {
  int z = 0;
  if (!atomic_compare_exchange_strong(&hm__mods.scanning, &z, 1)) return;
  unsigned long long c[2] = {0, 0};
  dl_iterate_phdr(hm__count_cb, c);
  if (c[0] != hm__mods.adds || c[1] != hm__mods.subs || !atomic_load(&hm__mods.n)) {
    /* After a dlclose a range may hold another module: entries are never
     * rewritten in place (readers hold no lock), so stale ones stay and
     * new ones are appended and looked up newest first. */
    dl_iterate_phdr(hm__scan_cb, NULL);
    hm__mods.adds = c[0];
    hm__mods.subs = c[1];
    atomic_fetch_add(&hm__mods.gen, 1);
  }
  atomic_store(&hm__mods.scanning, 0);
}

static int hm__lookup(uintptr_t a) {
  size_t n = atomic_load_explicit(&hm__mods.n, memory_order_acquire);
  for (size_t i = n; i-- > 0;)
    if (a >= hm__mods.m[i].lo && a < hm__mods.m[i].hi) return (int)i;
  return -1;
}

int _hm_pl_frame(uintptr_t addr, uint64_t *off) {
  int i = hm__lookup(addr);
  if (i < 0) {
    hm__rescan();
    i = hm__lookup(addr);
  }
  if (i < 0) return -1;
  *off = addr - hm__mods.m[i].bias;
  return i;
}

size_t _hm_pl_module_count(void) { return atomic_load_explicit(&hm__mods.n, memory_order_acquire); }
const _hm_pl_module_t *_hm_pl_module(size_t i) { return &hm__mods.m[i]; }
unsigned _hm_pl_modules_gen(void) { return atomic_load_explicit(&hm__mods.gen, memory_order_relaxed); }

int _hm_pl_sites_init(void) {
  hm__rescan();
  int i = hm__lookup((uintptr_t)&_hm_pl_sites_init);
  if (i >= 0) {
    hm__mods.self_lo = hm__mods.m[i].lo;
    hm__mods.self_hi = hm__mods.m[i].hi;
  }
  void *buf[4];
  (void)backtrace(buf, 4); /* loads libgcc_s now, not inside a hook */
  return atomic_load(&hm__mods.n) ? 0 : -ENOENT;
}

/* The hash of st->a[0 .. st->n), never 0 or 1 (the site table's marks). */
void _hm_pl_stack_hash(_hm_pl_stack_t *st) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < st->n; i++) {
    h = (h ^ st->a[i]) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  st->hash = h < 2 ? h + 2 : h;
}

void _hm_pl_capture(_hm_pl_stack_t *st, int depth) {
  void *buf[HM_PL_MAX_DEPTH + 16];
  if (depth > HM_PL_MAX_DEPTH) depth = HM_PL_MAX_DEPTH;
  int want = depth + 16 > (int)(sizeof buf / sizeof buf[0]) ? (int)(sizeof buf / sizeof buf[0])
                                                             : depth + 16;
  int got = backtrace(buf, want);
  int i = 0;
  /* our own frames (this function, the hook and its helpers) come first */
  while (i < got && (uintptr_t)buf[i] >= hm__mods.self_lo && (uintptr_t)buf[i] < hm__mods.self_hi)
    i++;
  int n = 0;
  for (; i < got && n < depth; i++) st->a[n++] = (uintptr_t)buf[i];
  st->n = n;
  _hm_pl_stack_hash(st);
}
