/* SPDX-License-Identifier: BSD-3-Clause */
/* The numactl surface of `hetmem run`: a NUMA policy for the whole command
 * (--membind, --interleave, --preferred, --preferred-many,
 * --weighted-interleave), with numactl's node syntax.
 *
 * The policy is set with set_mempolicy(2) in the child between fork and
 * exec: it is inherited across exec, so the command runs under it as under
 * numactl. Nodes are checked against the nodes this process may use
 * (Mems_allowed_list of /proc/self/status) that have memory
 * (/sys/devices/system/node/has_memory), both read under the context's
 * filesystem root so that tests replay recorded trees. Nothing here is on
 * a hot path. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "prim/prim.h"
#include "tiers.h"

#define HM__MAXNODE 1024
#define HM__WORDS (HM__MAXNODE / 64)

/* Kernel values (numaif.h may predate the last two). */
enum {
  HM__MPOL_PREFERRED = 1,
  HM__MPOL_BIND = 2,
  HM__MPOL_INTERLEAVE = 3,
  HM__MPOL_PREFERRED_MANY = 5,
  HM__MPOL_WEIGHTED_INTERLEAVE = 6
};

typedef struct {
  uint64_t w[HM__WORDS];
} hm__nodeset_t;

static const struct {
  const char *name;
  int mode;
  const char *since; /* the kernel that added it */
} hm__modes[] = {
    {"membind", HM__MPOL_BIND, "2.6.7"},
    {"interleave", HM__MPOL_INTERLEAVE, "2.6.7"},
    {"preferred", HM__MPOL_PREFERRED, "2.6.7"},
    {"preferred-many", HM__MPOL_PREFERRED_MANY, "5.15"},
    {"weighted-interleave", HM__MPOL_WEIGHTED_INTERLEAVE, "6.9"},
};

static void hm__set(hm__nodeset_t *s, int n) { s->w[n / 64] |= 1ull << (n % 64); }
static bool hm__has(const hm__nodeset_t *s, int n) { return s->w[n / 64] >> (n % 64) & 1; }

static int hm__count(const hm__nodeset_t *s) {
  int c = 0;
  for (int i = 0; i < HM__WORDS; i++) c += __builtin_popcountll(s->w[i]);
  return c;
}

/* A kernel list ("0-3,5", up to the end of its line) into s: tiers.c's
 * parser, bounded to the nodes a policy mask holds; -EINVAL otherwise. */
static int hm__parse_list(const char *text, hm__nodeset_t *s) {
  char line[1024];
  size_t len = strcspn(text, "\n");
  if (len >= sizeof line) return -EINVAL;
  memcpy(line, text, len);
  line[len] = 0;
  int *v = NULL;
  size_t n = 0;
  int rc = _hm_parse_cpulist(line, &v, &n);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    if (v[i] < 0 || v[i] >= HM__MAXNODE) rc = -EINVAL;
    else hm__set(s, v[i]);
  }
  free(v);
  return rc;
}

/* Nodes this process may use that have memory. */
static int hm__usable(hm_ctx_t *ctx, hm__nodeset_t *out) {
  char buf[8192], mem[1024];
  hm__nodeset_t allowed = {{0}}, has = {{0}};
  if (_hm_prim_read_text(ctx->fsroot, "/proc/self/status", buf, sizeof buf) < 0)
    return _hm_error(ctx, -EIO, "cannot read /proc/self/status for the allowed nodes");
  const char *line = strstr(buf, "Mems_allowed_list:");
  if (!line || hm__parse_list(line + 18, &allowed))
    return _hm_error(ctx, -EIO, "/proc/self/status has no readable Mems_allowed_list");
  ssize_t n = _hm_prim_read_text(ctx->fsroot, "/sys/devices/system/node/has_memory", mem,
                                 sizeof mem);
  if (n < 0 || hm__parse_list(mem, &has)) has = allowed; /* no sysfs: trust the cpuset */
  for (int i = 0; i < HM__WORDS; i++) out->w[i] = allowed.w[i] & has.w[i];
  return 0;
}

static void hm__list_text(const hm__nodeset_t *s, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (int n = 0; n < HM__MAXNODE && len + 16 < cap; n++) {
    if (!hm__has(s, n)) continue;
    int m = n;
    while (m + 1 < HM__MAXNODE && hm__has(s, m + 1)) m++;
    len += (size_t)snprintf(out + len, cap - len, m > n ? "%s%d-%d" : "%s%d", len ? "," : "",
                            n, m);
    n = m;
  }
}

/* The n-th usable node (numactl's "+" syntax: relative to the cpuset). */
static int hm__nth(const hm__nodeset_t *usable, long k) {
  for (int n = 0; n < HM__MAXNODE; n++)
    if (hm__has(usable, n) && k-- == 0) return n;
  return -1;
}

static int hm__bad_node(hm_ctx_t *ctx, const char *spec, long n, const hm__nodeset_t *usable) {
  char have[256];
  hm__list_text(usable, have, sizeof have);
  return _hm_error(ctx, -EINVAL, "nodes '%s': node %ld is not available here (nodes with memory: %s)",
                   spec, n, have);
}

/* numactl's node syntax: "0,2-3", "all", "!1" (all but), "+1" (relative to
 * the usable nodes), combined as numactl does ("!+0"). */
static int hm__parse_spec(hm_ctx_t *ctx, const char *spec, const hm__nodeset_t *usable,
                          hm__nodeset_t *out) {
  const char *p = spec;
  bool invert = false, relative = false;
  if (*p == '!') invert = true, p++;
  if (*p == '+') relative = true, p++;
  hm__nodeset_t got = {{0}};
  if (!strcmp(p, "all")) {
    got = *usable;
  } else {
    hm__nodeset_t raw = {{0}};
    if (!*p || hm__parse_list(p, &raw))
      return _hm_error(ctx, -EINVAL, "nodes '%s': expected N, N-M, lists of them, all, !NODES "
                       "or +NODES", spec);
    for (int n = 0; n < HM__MAXNODE; n++) {
      if (!hm__has(&raw, n)) continue;
      int node = relative ? hm__nth(usable, n) : n;
      if (node < 0 || !hm__has(usable, node)) return hm__bad_node(ctx, spec, n, usable);
      hm__set(&got, node);
    }
  }
  for (int i = 0; i < HM__WORDS; i++) out->w[i] = invert ? usable->w[i] & ~got.w[i] : got.w[i];
  if (!hm__count(out)) return _hm_error(ctx, -EINVAL, "nodes '%s': no node left", spec);
  return 0;
}

static int hm__mode(hm_ctx_t *ctx, const char *name) {
  for (size_t i = 0; i < sizeof hm__modes / sizeof hm__modes[0]; i++)
    if (name && !strcmp(name, hm__modes[i].name)) return (int)i;
  return _hm_error(ctx, -EINVAL, "NUMA policy '%s': expected membind, interleave, preferred, "
                   "preferred-many or weighted-interleave", name ? name : "(null)");
}

static int hm__resolve(hm_ctx_t *ctx, const char *mode, const char *nodes, int *mi,
                       hm__nodeset_t *set) {
  if (!ctx) return -EINVAL;
  if ((*mi = hm__mode(ctx, mode)) < 0) return *mi;
  if (!nodes) return _hm_error(ctx, -EINVAL, "--%s needs nodes", mode);
  hm__nodeset_t usable = {{0}};
  int rc = hm__usable(ctx, &usable);
  if (rc) return rc;
  if ((rc = hm__parse_spec(ctx, nodes, &usable, set))) return rc;
  if (hm__modes[*mi].mode == HM__MPOL_PREFERRED && hm__count(set) != 1)
    return _hm_error(ctx, -EINVAL, "--preferred takes one node, not '%s' (--preferred-many "
                     "takes several)", nodes);
  return 0;
}

/* The system-wide weight of node n for weighted interleave (root sets them
 * in sysfs; the kernel's default is 1): 0 when the kernel has none. */
static unsigned hm__weight(hm_ctx_t *ctx, int n) {
  char path[128];
  uint64_t w = 0;
  snprintf(path, sizeof path, "/sys/kernel/mm/mempolicy/weighted_interleave/node%d", n);
  return _hm_prim_read_u64(ctx->fsroot, path, &w) == 0 ? (unsigned)w : 0;
}

int hm_mempolicy_json(hm_ctx_t *ctx, const char *mode, const char *nodes, char **out) {
  if (!out) return -EINVAL;
  *out = NULL;
  int mi;
  hm__nodeset_t set = {{0}};
  int rc = hm__resolve(ctx, mode, nodes, &mi, &set);
  if (rc) return rc;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_printf(&sb, "{\"schema_version\":1,\"mode\":\"%s\",\"kernel_mode\":%d,\"nodes\":[",
                hm__modes[mi].name, hm__modes[mi].mode);
  bool weighted = hm__modes[mi].mode == HM__MPOL_WEIGHTED_INTERLEAVE;
  _hm_sb_t w;
  _hm_sb_init(&w);
  for (int n = 0, first = 1; n < HM__MAXNODE; n++) {
    if (!hm__has(&set, n)) continue;
    _hm_sb_printf(&sb, "%s%d", first ? "" : ",", n);
    if (weighted) _hm_sb_printf(&w, "%s\"%d\":%u", first ? "" : ",", n, hm__weight(ctx, n));
    first = 0;
  }
  _hm_sb_printf(&sb, "],\"since_linux\":\"%s\"", hm__modes[mi].since);
  if (weighted) _hm_sb_printf(&sb, ",\"weights\":{%s}", w.buf ? w.buf : "");
  _hm_sb_free(&w);
  _hm_sb_puts(&sb, "}");
  return _hm_sb_take(&sb, out);
}

int hm_mempolicy_apply(hm_ctx_t *ctx, const char *mode, const char *nodes) {
  int mi;
  hm__nodeset_t set = {{0}};
  int rc = hm__resolve(ctx, mode, nodes, &mi, &set);
  if (rc) return rc;
  unsigned long mask[HM__MAXNODE / (8 * sizeof(unsigned long))];
  memset(mask, 0, sizeof mask);
  const unsigned bits = 8 * sizeof(unsigned long);
  for (int n = 0; n < HM__MAXNODE; n++)
    if (hm__has(&set, n)) mask[(unsigned)n / bits] |= 1ul << ((unsigned)n % bits);
  rc = _hm_prim_sys_set_mempolicy(hm__modes[mi].mode, mask, HM__MAXNODE + 1);
  if (rc == -EINVAL && hm__modes[mi].mode >= HM__MPOL_PREFERRED_MANY)
    return _hm_error(ctx, -EOPNOTSUPP, "--%s: this kernel has no such policy (Linux %s or "
                     "later)", hm__modes[mi].name, hm__modes[mi].since);
  if (rc) return _hm_error(ctx, rc, "--%s %s: set_mempolicy: %s", mode, nodes, strerror(-rc));
  return 0;
}
