/* SPDX-License-Identifier: BSD-3-Clause */
/* The large data symbols of a module's .bss, read from its ELF file: STREAM's
 * a, b and c, a Fortran COMMON block. A .bss segment holds all of a
 * program's zero-initialized arrays; placing the segment whole would send a
 * hot 64 MiB array and a cold 1 GiB one to the same tier. With the file's
 * symbol table each array large enough becomes a site of its own, named by
 * its symbol; a stripped file has none (.dynsym lists exported data only,
 * which is read too), and its segment stays one site.
 *
 * Runs once per large segment at start-up, before main, under the
 * recursion guard: the file is read through prim with pread into buffers on
 * the stack (no allocation), HM__SYM_BATCH symbols at a time. Cost: one read
 * of the symbol table, which is a few hundred KiB even for large programs. */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>

#include "preload.h"
#include "prim/prim.h"

#define HM__SYM_BATCH 256

typedef struct hm__symtab_s {
  uint64_t off, size, str_off, str_size;
} hm__symtab_t;

static int hm__pread(int fd, void *buf, size_t len, uint64_t off) {
  ssize_t n = _hm_prim_vm_pio(fd, 0, buf, len, off);
  return n == (ssize_t)len ? 0 : -EIO;
}

/* The section header at index i of the file (ELF64 of this machine). */
static int hm__shdr(int fd, const ElfW(Ehdr) *eh, unsigned i, ElfW(Shdr) *sh) {
  if (i >= eh->e_shnum || eh->e_shentsize != sizeof *sh) return -ENOEXEC;
  return hm__pread(fd, sh, sizeof *sh, eh->e_shoff + (uint64_t)i * sizeof *sh);
}

/* The symbol table of type want (SHT_SYMTAB or SHT_DYNSYM) and its strings;
 * -ENOENT when the file has none. */
static int hm__find_symtab(int fd, const ElfW(Ehdr) *eh, uint32_t want, hm__symtab_t *t) {
  for (unsigned i = 1; i < eh->e_shnum; i++) {
    ElfW(Shdr) sh, str;
    if (hm__shdr(fd, eh, i, &sh)) return -EIO;
    if (sh.sh_type != want || sh.sh_entsize != sizeof(ElfW(Sym))) continue;
    if (hm__shdr(fd, eh, sh.sh_link, &str)) return -EIO;
    t->off = sh.sh_offset, t->size = sh.sh_size;
    t->str_off = str.sh_offset, t->str_size = str.sh_size;
    return 0;
  }
  return -ENOENT;
}

static int hm__elf_header(int fd, ElfW(Ehdr) *eh) {
  if (hm__pread(fd, eh, sizeof *eh, 0)) return -ENOEXEC;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
    return -ENOEXEC;
  return 0;
}

/* A symbol's name into out (cut at cap - 1); "" when it cannot be read. */
static void hm__sym_name(int fd, const hm__symtab_t *t, uint32_t name, char *out, size_t cap) {
  out[0] = 0;
  if (name >= t->str_size) return;
  size_t n = t->str_size - name < cap - 1 ? (size_t)(t->str_size - name) : cap - 1;
  if (hm__pread(fd, out, n, t->str_off + name)) n = 0;
  out[n] = 0;
}

/* Calls cb for every object symbol of the table of at least thr bytes
 * whose [bias + value, + size) lies in [lo, hi); the number found. */
static int hm__scan(int fd, const hm__symtab_t *t, const _hm_pl_symscan_t *q) {
  ElfW(Sym) buf[HM__SYM_BATCH];
  uint64_t nsym = t->size / sizeof(ElfW(Sym)), found = 0;
  for (uint64_t i = 0; i < nsym; i += HM__SYM_BATCH) {
    size_t k = nsym - i < HM__SYM_BATCH ? (size_t)(nsym - i) : HM__SYM_BATCH;
    if (hm__pread(fd, buf, k * sizeof *buf, t->off + i * sizeof *buf)) return (int)found;
    for (size_t j = 0; j < k; j++) {
      const ElfW(Sym) *s = &buf[j];
      uintptr_t a = q->bias + s->st_value;
      if (ELF64_ST_TYPE(s->st_info) != STT_OBJECT || s->st_size < q->thr) continue;
      if (a < q->lo || a + s->st_size > q->hi) continue;
      char name[sizeof((_hm_pl_static_t *)0)->symbol];
      hm__sym_name(fd, t, s->st_name, name, sizeof name);
      q->cb(q->arg, a, a + s->st_size, name);
      found++;
    }
  }
  return (int)found;
}

int _hm_pl_statics_symbols(const char *path, const _hm_pl_symscan_t *q) {
  int fd = _hm_prim_open_read(path);
  if (fd < 0) return fd;
  ElfW(Ehdr) eh;
  hm__symtab_t t;
  int rc = hm__elf_header(fd, &eh);
  if (!rc) {
    rc = hm__find_symtab(fd, &eh, SHT_SYMTAB, &t);
    if (rc == -ENOENT) rc = hm__find_symtab(fd, &eh, SHT_DYNSYM, &t);
  }
  if (!rc) rc = hm__scan(fd, &t, q);
  (void)_hm_prim_close(fd);
  return rc;
}
