/* SPDX-License-Identifier: BSD-3-Clause */
/* Offline symbolization of allocation-site frames with elfutils libdw.
 *
 * Profiles name a frame by (module, offset): the module's GNU build-id and
 * path, and the return address minus the module's load bias (that is, the
 * link-time virtual address). Here a module is located by its build-id
 * (the recorded path when its build-id matches, else the system's
 * /usr/lib/debug/.build-id tree) and each offset is turned into function,
 * file, line and column. Never on a hot path: this runs in `hetmem profile
 * show` and `hetmem advise`, long after the application exited. libdw is
 * linked into libhetmem only, never into the preload interposer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>

#include "internal.h"
#include "prim/prim.h"

#define HM_SYM_DEBUG_ROOT "/usr/lib/debug/.build-id"
#define HM_SYM_MAX_BUILD_ID 64

static char *hm__debuginfo_path = NULL; /* libdw's default search path */

static const Dwfl_Callbacks hm__offline_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &hm__debuginfo_path,
};

static void hm__hex(const unsigned char *bits, size_t len, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[bits[i] >> 4];
    out[2 * i + 1] = digits[bits[i] & 15];
  }
  out[2 * len] = '\0';
}

/* The GNU build-id of the ELF file at path as lower-case hex ("" when it
 * has none). 0, or a negative errno with a message on ctx. */
static int hm__file_build_id(hm_ctx_t *ctx, const char *path, char *hex, size_t hexlen) {
  int fd = _hm_prim_open_read(path);
  if (fd < 0) {
    int e = fd;
    return _hm_error(ctx, e, "%s: %s", path, strerror(-e));
  }
  elf_version(EV_CURRENT);
  Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (!elf || elf_kind(elf) != ELF_K_ELF) {
    if (elf) elf_end(elf);
    _hm_prim_close(fd);
    return _hm_error(ctx, -ENOEXEC, "%s: not an ELF file", path);
  }
  const void *bits = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &bits);
  int rc = 0;
  hex[0] = '\0';
  if (n > 0) {
    if ((size_t)n > HM_SYM_MAX_BUILD_ID || (size_t)n * 2 + 1 > hexlen) {
      rc = _hm_error(ctx, -ENOEXEC, "%s: build-id note of %zd bytes is too long", path, n);
    } else {
      hm__hex(bits, (size_t)n, hex);
    }
  } else if (n < 0) {
    rc = _hm_error(ctx, -ENOEXEC, "%s: unreadable build-id note: %s", path, elf_errmsg(-1));
  }
  elf_end(elf);
  _hm_prim_close(fd);
  return rc;
}

int hm_module_build_id(hm_ctx_t *ctx, const char *path, char **hex_out) {
  if (!path || !hex_out) return _hm_error(ctx, -EINVAL, "hm_module_build_id: NULL argument");
  char hex[2 * HM_SYM_MAX_BUILD_ID + 1];
  int rc = hm__file_build_id(ctx, path, hex, sizeof hex);
  if (rc) return rc;
  char *s = strdup(hex);
  if (!s) return _hm_error(ctx, -ENOMEM, "out of memory");
  *hex_out = s;
  return 0;
}

static int hm__valid_hex(const char *s) {
  size_t n = strlen(s);
  if (n % 2 || n > 2 * HM_SYM_MAX_BUILD_ID) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return 1;
}

/* Picks the file to read for a module: the recorded path if its build-id
 * matches (or none was recorded), else the debug file named by the
 * build-id. *verified says whether a build-id was checked. */
static int hm__locate(hm_ctx_t *ctx, const char *path, const char *build_id, char *found,
                      size_t foundlen, int *verified) {
  char have[2 * HM_SYM_MAX_BUILD_ID + 1];
  *verified = 0;
  int path_rc = -ENOENT;
  if (path && *path) {
    path_rc = hm__file_build_id(ctx, path, have, sizeof have);
    if (path_rc == 0 && (!*build_id || strcmp(have, build_id) == 0)) {
      snprintf(found, foundlen, "%s", path);
      *verified = *build_id != '\0';
      return 0;
    }
  }
  if (*build_id && strlen(build_id) > 2) {
    char dbg[HM_PATH_MAX];
    snprintf(dbg, sizeof dbg, "%s/%.2s/%s.debug", HM_SYM_DEBUG_ROOT, build_id, build_id + 2);
    if (hm__file_build_id(ctx, dbg, have, sizeof have) == 0 && strcmp(have, build_id) == 0) {
      snprintf(found, foundlen, "%s", dbg);
      *verified = 1;
      return 0;
    }
  }
  if (path_rc == 0)
    return _hm_error(ctx, -ESTALE,
                     "%s: build-id %s differs from the profiled %s (rebuilt since?), and no "
                     "debug file for it under " HM_SYM_DEBUG_ROOT,
                     path, *have ? have : "(none)", build_id);
  return _hm_error(ctx, -ENOENT, "%s: not found (build-id %s), nor under " HM_SYM_DEBUG_ROOT,
                   path && *path ? path : "(no path)", *build_id ? build_id : "(none)");
}

/* The outermost inlined subroutine under parent (through lexical blocks)
 * whose code holds pc. */
static int hm__find_inline(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *out) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return 0;
  do {
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_inlined_subroutine && dwarf_haspc(&child, pc) == 1) {
      *out = child;
      return 1;
    }
    if (tag == DW_TAG_lexical_block && dwarf_haspc(&child, pc) == 1 &&
        hm__find_inline(&child, pc, out))
      return 1;
  } while (dwarf_siblingof(&child, &child) == 0);
  return 0;
}

typedef struct {
  Dwarf_Addr pc;
  Dwarf_Die fn;
  int found;
} hm__fn_search_t;

static int hm__fn_cb(Dwarf_Die *die, void *arg) {
  hm__fn_search_t *q = arg;
  if (dwarf_haspc(die, q->pc) != 1) return DWARF_CB_OK; /* abstract, or elsewhere */
  q->fn = *die;
  q->found = 1;
  return DWARF_CB_ABORT;
}

#define HM__MAX_INLINE 32

/* The inlined scopes holding a pc, outermost first: in[0] was inlined into
 * the function itself, in[k + 1] into in[k]. (dwarf_getscopes cannot give
 * this: past an inlined instance it follows the abstract origin's scopes,
 * not the caller's.) */
typedef struct {
  Dwarf_Die cu;
  Dwarf_Die in[HM__MAX_INLINE];
  int n;
} hm__nest_t;

static int hm__nest(Dwfl_Module *mod, Dwarf_Addr addr, hm__nest_t *nest) {
  Dwarf_Addr cubias = 0;
  Dwarf_Die *cu = dwfl_module_addrdie(mod, addr, &cubias);
  nest->n = 0;
  if (!cu) return 0;
  nest->cu = *cu;
  hm__fn_search_t q = {.pc = addr - cubias, .found = 0};
  if (dwarf_getfuncs(cu, hm__fn_cb, &q, 0) < 0 || !q.found) return 0;
  Dwarf_Die *parent = &q.fn;
  while (nest->n < HM__MAX_INLINE && hm__find_inline(parent, q.pc, &nest->in[nest->n]))
    parent = &nest->in[nest->n++];
  return nest->n;
}

/* Where the code that in stands for was called from: its
 * DW_AT_call_file:call_line:call_column. */
static int hm__call_site(hm__nest_t *nest, Dwarf_Die *in, const char **file, int *line,
                         int *col) {
  Dwarf_Attribute a;
  Dwarf_Word fidx = 0, ln = 0, cn = 0;
  Dwarf_Files *files = NULL;
  size_t nf = 0;
  if (dwarf_formudata(dwarf_attr(in, DW_AT_call_file, &a), &fidx) != 0 ||
      dwarf_formudata(dwarf_attr(in, DW_AT_call_line, &a), &ln) != 0 ||
      dwarf_getsrcfiles(&nest->cu, &files, &nf) != 0 || fidx >= nf)
    return 0;
  const char *f = dwarf_filesrc(files, fidx, NULL, NULL);
  if (!f) return 0;
  if (dwarf_formudata(dwarf_attr(in, DW_AT_call_column, &a), &cn) != 0) cn = 0;
  *file = f;
  *line = (int)ln;
  *col = (int)cn;
  return 1;
}

/* An inlined subroutine's name through its abstract origin: the linkage
 * name where there is one (C++: demangled later, with its class and
 * template arguments), else DW_AT_name. */
static const char *hm__inline_name(Dwarf_Die *in) {
  Dwarf_Attribute a;
  const char *n = dwarf_formstring(dwarf_attr_integrate(in, DW_AT_linkage_name, &a));
  if (!n) n = dwarf_formstring(dwarf_attr_integrate(in, DW_AT_MIPS_linkage_name, &a));
  return n ? n : dwarf_formstring(dwarf_attr_integrate(in, DW_AT_name, &a));
}

static void hm__loc_json(_hm_sb_t *sb, const char *fn, const char *file, int line) {
  _hm_sb_puts(sb, "{\"function\":");
  if (fn) _hm_sb_json_str(sb, fn);
  else _hm_sb_puts(sb, "null");
  _hm_sb_puts(sb, ",\"file\":");
  if (file) _hm_sb_json_str(sb, file);
  else _hm_sb_puts(sb, "null");
  _hm_sb_printf(sb, ",\"line\":%d}", line);
}

/* ,"inlined":[...]: the functions inlined at this frame, innermost first,
 * each with the place in it of the call below it (the innermost: the
 * frame's own line-table place). */
static void hm__inlined_json(_hm_sb_t *sb, hm__nest_t *nest, const char *src, int lineno) {
  _hm_sb_puts(sb, ",\"inlined\":[");
  for (int j = nest->n - 1; j >= 0; j--) {
    const char *file = src;
    int line = lineno, col = 0;
    if (j + 1 < nest->n && !hm__call_site(nest, &nest->in[j + 1], &file, &line, &col))
      file = NULL, line = 0;
    if (j != nest->n - 1) _hm_sb_puts(sb, ",");
    hm__loc_json(sb, hm__inline_name(&nest->in[j]), file, line);
  }
  _hm_sb_puts(sb, "]");
}

static void hm__frame_json(_hm_sb_t *sb, Dwfl_Module *mod, Dwarf_Addr bias, uint64_t offset) {
  Dwarf_Addr addr = (Dwarf_Addr)offset + bias;
  _hm_sb_printf(sb, "{\"offset\":%llu", (unsigned long long)offset);
  GElf_Off symoff = 0;
  GElf_Sym sym;
  const char *fn = mod ? dwfl_module_addrinfo(mod, addr, &symoff, &sym, NULL, NULL, NULL) : NULL;
  _hm_sb_puts(sb, ",\"function\":");
  if (fn) {
    _hm_sb_json_str(sb, fn);
    _hm_sb_printf(sb, ",\"function_offset\":%llu", (unsigned long long)symoff);
  } else {
    _hm_sb_puts(sb, "null");
  }
  Dwfl_Line *line = mod ? dwfl_module_getsrc(mod, addr) : NULL;
  int lineno = 0, col = 0;
  const char *src = line ? dwfl_lineinfo(line, NULL, &lineno, &col, NULL, NULL) : NULL;
  const char *call = NULL;
  int cline = 0, ccol = 0;
  hm__nest_t nest; /* about 1 KiB */
  if (mod && hm__nest(mod, addr, &nest) && hm__call_site(&nest, &nest.in[0], &call, &cline, &ccol)) {
    /* the line table's place is inside the inlined code: kept beside, and
     * the whole chain of inlined functions */
    _hm_sb_puts(sb, ",\"file\":");
    _hm_sb_json_str(sb, call);
    _hm_sb_printf(sb, ",\"line\":%d,\"column\":%d", cline, ccol);
    if (src) {
      _hm_sb_puts(sb, ",\"inlined_file\":");
      _hm_sb_json_str(sb, src);
      _hm_sb_printf(sb, ",\"inlined_line\":%d", lineno);
    }
    hm__inlined_json(sb, &nest, src, lineno);
    _hm_sb_puts(sb, "}");
    return;
  }
  _hm_sb_puts(sb, ",\"file\":");
  if (src) {
    _hm_sb_json_str(sb, src);
    _hm_sb_printf(sb, ",\"line\":%d,\"column\":%d", lineno, col);
  } else {
    _hm_sb_puts(sb, "null");
  }
  _hm_sb_puts(sb, "}");
}

/* Reports the ELF file at found to a new offline libdw session; *mod and
 * *bias on success. */
static int hm__open_module(hm_ctx_t *ctx, const char *found, Dwfl **out, Dwfl_Module **mod,
                           Dwarf_Addr *bias) {
  int fd = _hm_prim_open_read(found);
  if (fd < 0) {
    int e = fd;
    return _hm_error(ctx, e, "%s: %s", found, strerror(-e));
  }
  Dwfl *dwfl = dwfl_begin(&hm__offline_callbacks);
  if (!dwfl) {
    _hm_prim_close(fd);
    return _hm_error(ctx, -ENOMEM, "libdw: %s", dwfl_errmsg(-1));
  }
  /* ET_DYN placed at 0 without adding p_vaddr: link-time addresses then
   * equal offsets plus the bias libdw reports (0 unless prelinked). fd is
   * the library's from here on. */
  *mod = dwfl_report_elf(dwfl, found, found, fd, 0, false);
  if (*mod) {
    dwfl_report_end(dwfl, NULL, NULL);
    if (dwfl_module_getelf(*mod, bias)) {
      *out = dwfl;
      return 0;
    }
  }
  int rc = _hm_error(ctx, -ENOEXEC, "%s: libdw cannot read it: %s", found, dwfl_errmsg(-1));
  dwfl_end(dwfl);
  return rc;
}

/* hm_symbolize's arguments, checked; a NULL *build_id becomes "". */
static int hm__symbolize_args(hm_ctx_t *ctx, const char *module_path, const char **build_id,
                              const uint64_t *offsets, size_t n, char **json_out) {
  if (!json_out || (n && !offsets))
    return _hm_error(ctx, -EINVAL, "hm_symbolize: NULL argument");
  if (!*build_id) *build_id = "";
  if (!hm__valid_hex(*build_id))
    return _hm_error(ctx, -EINVAL, "hm_symbolize: build-id '%s' is not lower-case hex",
                     *build_id);
  if ((!module_path || !*module_path) && !**build_id)
    return _hm_error(ctx, -EINVAL, "hm_symbolize: neither a path nor a build-id");
  return 0;
}

int hm_symbolize(hm_ctx_t *ctx, const char *module_path, const char *build_id,
                 const uint64_t *offsets, size_t n, char **json_out) {
  int rc = hm__symbolize_args(ctx, module_path, &build_id, offsets, n, json_out);
  if (rc) return rc;
  char found[HM_PATH_MAX];
  int verified = 0;
  rc = hm__locate(ctx, module_path, build_id, found, sizeof found, &verified);
  if (rc) return rc;
  Dwfl *dwfl = NULL;
  Dwfl_Module *mod = NULL;
  Dwarf_Addr bias = 0;
  if ((rc = hm__open_module(ctx, found, &dwfl, &mod, &bias))) return rc;
  Dwarf_Addr dwbias = 0;
  int has_dwarf = dwfl_module_getdwarf(mod, &dwbias) != NULL;

  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_puts(&sb, "{\"path\":");
  _hm_sb_json_str(&sb, found);
  _hm_sb_puts(&sb, ",\"build_id\":");
  _hm_sb_json_str(&sb, build_id);
  _hm_sb_printf(&sb, ",\"verified\":%s,\"dwarf\":%s,\"frames\":[", verified ? "true" : "false",
                has_dwarf ? "true" : "false");
  for (size_t i = 0; i < n; i++) {
    if (i) _hm_sb_puts(&sb, ",");
    hm__frame_json(&sb, mod, bias, offsets[i]);
  }
  _hm_sb_puts(&sb, "]}");
  dwfl_end(dwfl);
  rc = _hm_sb_take(&sb, json_out);
  if (rc) return _hm_error(ctx, rc, "out of memory");
  return 0;
}
