/* SPDX-License-Identifier: BSD-3-Clause */
/* The tier inventory: NUMA nodes and storage directories, classified and
 * ranked fastest first.
 *
 * Facts come in layers (see ../shared/notes/anchors-tiers.md, section 1):
 * node sysfs (CPUs, capacity, SLIT distances), HMAT ratings, the kernel's
 * memory_tiering levels, DAX provenance, the NVIDIA driver's GPU memory
 * nodes, and hwloc on the live machine. Every read goes through prim under
 * ctx->fsroot, so recorded trees replay exactly. A missing or malformed file
 * makes the facts it carried unknown (with a warning on the tier); it never
 * fails discovery.
 *
 * Ranking never uses SLIT distances: on Xeon Max in flat mode the HBM node
 * is farther (13) than local DDR (10) yet has 2-4x its bandwidth. */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"
#include "tiers.h"

#define HM__NODE_DIR "/sys/devices/system/node"
#define HM__LIST_MAX (1 << 22) /* largest CPU or node number we accept */
#define HM__TEXT_MAX 16384

/* ------------------------------------------------------------------------
 * Small parsers
 * ------------------------------------------------------------------------ */

/* One "a" or "a-b" item of a list at *pp. */
static int hm__cpulist_item(const char **pp, unsigned long *a, unsigned long *b) {
  const char *p = *pp;
  if (!isdigit((unsigned char)*p)) return -EINVAL;
  char *end;
  *a = *b = strtoul(p, &end, 10);
  p = end;
  if (*p == '-') {
    p++;
    if (!isdigit((unsigned char)*p)) return -EINVAL;
    *b = strtoul(p, &end, 10);
    p = end;
  }
  *pp = p;
  if (*a > HM__LIST_MAX || *b > HM__LIST_MAX || *b < *a) return -EINVAL;
  return 0;
}

/* Appends a..b to the growing array v. */
static int hm__cpulist_push(int **v, size_t *cap, size_t *n, unsigned long a, unsigned long b) {
  for (unsigned long x = a; x <= b; x++) {
    if (*n == *cap) {
      size_t ncap = *cap ? *cap * 2 : 16;
      int *q = realloc(*v, ncap * sizeof *q);
      if (!q) return -ENOMEM;
      *v = q;
      *cap = ncap;
    }
    (*v)[(*n)++] = (int)x;
  }
  return 0;
}

/* What may follow an item: a comma and another item, or trailing blanks. */
static int hm__cpulist_sep(const char **pp) {
  const char *p = *pp;
  if (*p == ',') {
    p++;
    if (!*p) return -EINVAL;
  } else if (*p == '\n' || *p == ' ') {
    while (*p == ' ' || *p == '\n') p++;
    if (*p) return -EINVAL;
  } else if (*p) {
    return -EINVAL;
  }
  *pp = p;
  return 0;
}

int _hm_parse_cpulist(const char *text, int **out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cap = 0;
  int *v = NULL;
  const char *p = text;
  while (*p == ' ' || *p == '\t' || *p == '\n') p++;
  while (*p) {
    unsigned long a, b;
    if (hm__cpulist_item(&p, &a, &b)) goto bad;
    if (hm__cpulist_push(&v, &cap, n, a, b)) {
      free(v);
      return -ENOMEM;
    }
    if (hm__cpulist_sep(&p)) goto bad;
  }
  *out = v;
  return 0;
bad:
  free(v);
  *n = 0;
  return -EINVAL;
}

static bool hm__in_list(const int *v, size_t n, int x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

/* "  4940356 kB" (up to the end of the line) -> bytes. */
static int hm__meminfo_kb(const char *p, uint64_t *out) {
  while (*p == ' ' || *p == '\t') p++;
  if (!isdigit((unsigned char)*p)) return -EINVAL;
  char *end;
  errno = 0;
  unsigned long long kb = strtoull(p, &end, 10);
  if (errno) return -EINVAL;
  while (*end == ' ') end++;
  if (strncmp(end, "kB", 2) != 0 || (end[2] && end[2] != '\n')) return -EINVAL;
  if (kb > UINT64_MAX / 1024) return -ERANGE;
  *out = (uint64_t)kb * 1024;
  return 0;
}

/* "Node 0 MemTotal:  4940356 kB" (or /proc/meminfo's "MemAvailable: ...")
 * -> bytes. -EINVAL unless exactly that, -ENOENT without the field. */
int _hm_meminfo_field(const char *text, const char *field, uint64_t *out) {
  size_t flen = strlen(field);
  for (const char *line = text; line && *line;) {
    const char *nl = strchr(line, '\n');
    const char *f = strstr(line, field);
    if (f && (!nl || f < nl) && f[flen] == ':') return hm__meminfo_kb(f + flen + 1, out);
    line = nl ? nl + 1 : NULL;
  }
  return -ENOENT;
}

/* ------------------------------------------------------------------------
 * Tier bookkeeping
 * ------------------------------------------------------------------------ */

static void hm__tier_clear(_hm_tier_t *t) {
  free(t->path);
  free(t->cpus);
  free(t->dist_node);
  free(t->dist);
  free(t->initiators);
  for (size_t i = 0; i < t->nwarn; i++) free(t->warn[i]);
  memset(t, 0, sizeof *t);
}

void _hm_tiers_free(struct hm_tiers_s *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) hm__tier_clear(&t->v[i]);
  free(t->v);
  free(t);
}

static void hm__warn(_hm_tier_t *t, const char *fmt, ...) HM_PRINTF(2, 3);
static void hm__warn(_hm_tier_t *t, const char *fmt, ...) {
  if (t->nwarn >= HM_TIER_MAX_WARN) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char *s = strdup(buf);
  if (s) t->warn[t->nwarn++] = s;
}

static _hm_tier_t *hm__push(struct hm_tiers_s *T, size_t *cap) {
  if (T->n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 8;
    _hm_tier_t *v = realloc(T->v, ncap * sizeof *v);
    if (!v) return NULL;
    T->v = v;
    *cap = ncap;
  }
  _hm_tier_t *t = &T->v[T->n++];
  memset(t, 0, sizeof *t);
  t->pub.numa_node = -1;
  t->pub.memory_tier = -1;
  t->pub.o_direct = -1;
  return t;
}

static _hm_tier_t *hm__by_node(struct hm_tiers_s *T, long node) {
  for (size_t i = 0; i < T->n; i++)
    if (T->v[i].pub.kind != HM_TIER_STORAGE && T->v[i].pub.numa_node == node) return &T->v[i];
  return NULL;
}

/* Reads a node mask file such as has_cpu; -errno or -EINVAL. */
static int hm__read_list(const char *root, const char *path, int **v, size_t *n) {
  char buf[HM__TEXT_MAX];
  ssize_t r = _hm_prim_read_text(root, path, buf, sizeof buf);
  if (r < 0) {
    *v = NULL;
    *n = 0;
    return (int)r;
  }
  return _hm_parse_cpulist(buf, v, n);
}

/* ------------------------------------------------------------------------
 * NUMA nodes
 * ------------------------------------------------------------------------ */

typedef struct hm__masks_s {
  int *online, *has_cpu, *has_mem;
  size_t nonline, nhas_cpu, nhas_mem;
  bool has_cpu_ok, has_mem_ok;
} hm__masks_t;

static int hm__collect_node_dir(const char *name, void *arg) {
  hm__masks_t *m = arg;
  if (strncmp(name, "node", 4) != 0 || !isdigit((unsigned char)name[4])) return 0;
  char *end;
  long id = strtol(name + 4, &end, 10);
  if (*end || id < 0 || id > HM__LIST_MAX) return 0;
  int *v = realloc(m->online, (m->nonline + 1) * sizeof *v);
  if (!v) return -ENOMEM;
  m->online = v;
  m->online[m->nonline++] = (int)id;
  return 0;
}

static int hm__cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void hm__read_hmat(const char *root, _hm_tier_t *t) {
  static const char *const access[] = {"access1", "access0"};
  static const char *const files[] = {"read_bandwidth", "write_bandwidth", "read_latency",
                                      "write_latency"};
  int node = t->pub.numa_node;
  for (size_t a = 0; a < 2; a++) {
    char dir[256], path[320];
    snprintf(dir, sizeof dir, HM__NODE_DIR "/node%d/%s/initiators", node, access[a]);
    if (!_hm_prim_is_dir(root, dir)) continue;
    uint64_t val[4] = {0, 0, 0, 0};
    int good = 0;
    for (int f = 0; f < 4; f++) {
      snprintf(path, sizeof path, "%s/%s", dir, files[f]);
      int rc = _hm_prim_read_u64(root, path, &val[f]);
      if (rc == 0 && val[f] <= UINT32_MAX) {
        good++;
      } else {
        val[f] = 0;
        if (rc != -ENOENT) hm__warn(t, "node%d/%s/initiators/%s: unreadable or malformed", node,
                                    access[a], files[f]);
      }
    }
    if (!good) continue;
    snprintf(t->hmat_access, sizeof t->hmat_access, "%s", access[a]);
    t->pub.read_bandwidth_mibs = (uint32_t)val[0];
    t->pub.write_bandwidth_mibs = (uint32_t)val[1];
    t->pub.read_latency_ns = (uint32_t)val[2];
    t->pub.write_latency_ns = (uint32_t)val[3];
    t->pub.sources |= HM_TIER_SRC_HMAT;
    /* The initiators are the nodeX symlinks in the same folder. */
    hm__masks_t m;
    memset(&m, 0, sizeof m);
    if (_hm_prim_list_dir(root, dir, hm__collect_node_dir, &m) == 0) {
      t->initiators = m.online;
      t->ninitiators = m.nonline;
    } else {
      free(m.online);
    }
    return;
  }
}

static void hm__read_msc(const char *root, _hm_tier_t *t) {
  for (int i = 1; i <= HM_TIER_MAX_MSC; i++) {
    char path[256];
    uint64_t size;
    snprintf(path, sizeof path, HM__NODE_DIR "/node%d/memory_side_cache/index%d/size",
             t->pub.numa_node, i);
    if (_hm_prim_read_u64(root, path, &size) != 0) break;
    t->msc_size[t->msc_levels++] = size;
  }
}

/* node<N>/cpulist. */
static void hm__read_node_cpus(const char *root, _hm_tier_t *t, int node) {
  char path[256];
  snprintf(path, sizeof path, HM__NODE_DIR "/node%d/cpulist", node);
  if (hm__read_list(root, path, &t->cpus, &t->ncpus) == 0) {
    t->cpus_known = true;
  } else {
    hm__warn(t, "node%d/cpulist: unreadable or malformed", node);
    t->ncpus = 0;
  }
}

/* node<N>/meminfo: capacity and free memory. */
static void hm__read_node_meminfo(const char *root, _hm_tier_t *t, int node) {
  char path[256], buf[HM__TEXT_MAX];
  snprintf(path, sizeof path, HM__NODE_DIR "/node%d/meminfo", node);
  ssize_t r = _hm_prim_read_text(root, path, buf, sizeof buf);
  uint64_t v;
  if (r >= 0 && _hm_meminfo_field(buf, "MemTotal", &v) == 0) {
    t->pub.capacity_bytes = v;
    t->capacity_known = true;
  } else {
    hm__warn(t, "node%d/meminfo: MemTotal unreadable or malformed", node);
  }
  if (r >= 0 && _hm_meminfo_field(buf, "MemFree", &v) == 0) {
    t->pub.free_bytes = v;
    t->free_known = true;
  }
}

/* The values of a distance line into dn/dv (one per online node, in node
 * order); the count, or -1 if malformed. */
static long hm__parse_distances(char *p, const hm__masks_t *m, int *dn, int *dv) {
  size_t k = 0;
  for (;;) {
    while (*p == ' ') p++;
    if (!*p) break;
    if (!isdigit((unsigned char)*p) || k >= m->nonline) return -1;
    char *end;
    long d = strtol(p, &end, 10);
    if ((*end && *end != ' ') || d > 255) return -1;
    dn[k] = m->online[k];
    dv[k] = (int)d;
    k++;
    p = end;
  }
  return (long)k;
}

/* distance lists one value per online node, in node order. */
static void hm__read_node_distance(const char *root, const hm__masks_t *m, _hm_tier_t *t,
                                   int node) {
  char path[256], buf[HM__TEXT_MAX];
  snprintf(path, sizeof path, HM__NODE_DIR "/node%d/distance", node);
  if (_hm_prim_read_text(root, path, buf, sizeof buf) < 0) {
    hm__warn(t, "node%d/distance: unreadable", node);
    return;
  }
  int *dn = calloc(m->nonline ? m->nonline : 1, sizeof *dn);
  int *dv = calloc(m->nonline ? m->nonline : 1, sizeof *dv);
  long k = dn && dv ? hm__parse_distances(buf, m, dn, dv) : -1;
  if (k >= 0 && (size_t)k == m->nonline) {
    t->dist_node = dn;
    t->dist = dv;
    t->ndist = (size_t)k;
    t->dist_known = true;
  } else {
    free(dn);
    free(dv);
    hm__warn(t, "node%d/distance: malformed", node);
  }
}

static void hm__read_node(const char *root, const hm__masks_t *m, _hm_tier_t *t) {
  int node = t->pub.numa_node;
  snprintf(t->name, sizeof t->name, "node%d", node);
  t->pub.sources |= HM_TIER_SRC_SYSFS;
  hm__read_node_cpus(root, t, node);
  hm__read_node_meminfo(root, t, node);
  t->has_memory = m->has_mem_ok ? hm__in_list(m->has_mem, m->nhas_mem, node)
                                : (t->capacity_known && t->pub.capacity_bytes > 0);
  hm__read_node_distance(root, m, t, node);
  hm__read_hmat(root, t);
  hm__read_msc(root, t);
}

/* Without CONFIG_NUMA there is no node folder; the machine is one node. */
static int hm__no_numa_fallback(hm_ctx_t *ctx, struct hm_tiers_s *T, size_t *cap) {
  char buf[HM__TEXT_MAX];
  ssize_t r = _hm_prim_read_text(ctx->fsroot, "/proc/meminfo", buf, sizeof buf);
  if (r < 0)
    return _hm_error(ctx, -ENOENT,
                     "'%s' has no " HM__NODE_DIR " (nor /proc/meminfo): not a Linux "
                     "system root or recorded sysfs tree",
                     ctx->fsroot);
  _hm_tier_t *t = hm__push(T, cap);
  if (!t) return -ENOMEM;
  t->pub.numa_node = 0;
  snprintf(t->name, sizeof t->name, "node0");
  t->pub.sources |= HM_TIER_SRC_SYSFS;
  uint64_t v;
  if (_hm_meminfo_field(buf, "MemTotal", &v) == 0) {
    t->pub.capacity_bytes = v;
    t->capacity_known = t->has_memory = true;
  }
  if (_hm_meminfo_field(buf, "MemFree", &v) == 0) {
    t->pub.free_bytes = v;
    t->free_known = true;
  }
  if (hm__read_list(ctx->fsroot, "/sys/devices/system/cpu/online", &t->cpus, &t->ncpus) == 0)
    t->cpus_known = true;
  hm__warn(t, "no NUMA sysfs (kernel without CONFIG_NUMA?): one node from /proc/meminfo");
  return 0;
}

/* The online, has_cpu and has_memory lists (online falls back on the
 * nodeN folders that exist). */
static int hm__read_masks(const char *root, hm__masks_t *m) {
  int rc = hm__read_list(root, HM__NODE_DIR "/online", &m->online, &m->nonline);
  if (rc == -ENOMEM) return rc;
  if (rc || m->nonline == 0) {
    /* No usable "online": trust the nodeN folders that exist. */
    free(m->online);
    m->online = NULL;
    m->nonline = 0;
    rc = _hm_prim_list_dir(root, HM__NODE_DIR, hm__collect_node_dir, m);
    if (rc == -ENOMEM) return rc;
    qsort(m->online, m->nonline, sizeof *m->online, hm__cmp_int);
  }
  m->has_cpu_ok = hm__read_list(root, HM__NODE_DIR "/has_cpu", &m->has_cpu, &m->nhas_cpu) == 0;
  m->has_mem_ok =
      hm__read_list(root, HM__NODE_DIR "/has_memory", &m->has_mem, &m->nhas_mem) == 0;
  return 0;
}

/* The tier of one online node, unless it is a memoryless node with CPUs. */
static int hm__add_node(const char *root, const hm__masks_t *m, int node,
                        struct hm_tiers_s *T, size_t *cap) {
  char dir[128];
  snprintf(dir, sizeof dir, HM__NODE_DIR "/node%d", node);
  if (!_hm_prim_is_dir(root, dir)) return 0;
  _hm_tier_t *t = hm__push(T, cap);
  if (!t) return -ENOMEM;
  t->pub.numa_node = node;
  hm__read_node(root, m, t);
  bool cpus = t->cpus_known ? t->ncpus > 0
                            : (m->has_cpu_ok && hm__in_list(m->has_cpu, m->nhas_cpu, node));
  /* A memoryless node with CPUs offers no memory: not a tier. CPU-less
   * nodes stay even at zero capacity (CXL dynamic capacity, offline blocks)
   * so that the user sees them. */
  bool known_empty = t->capacity_known && t->pub.capacity_bytes == 0 && !t->has_memory;
  if (cpus && known_empty) {
    hm__tier_clear(t);
    T->n--;
  }
  return 0;
}

static int hm__discover_nodes(hm_ctx_t *ctx, struct hm_tiers_s *T, size_t *cap) {
  const char *root = ctx->fsroot;
  if (!_hm_prim_is_dir(root, HM__NODE_DIR)) return hm__no_numa_fallback(ctx, T, cap);
  hm__masks_t m;
  memset(&m, 0, sizeof m);
  int rc = hm__read_masks(root, &m);
  for (size_t i = 0; !rc && i < m.nonline; i++) rc = hm__add_node(root, &m, m.online[i], T, cap);
  if (!rc && T->n == 0)
    rc = _hm_error(ctx, -ENOENT, "'%s': no NUMA node with memory under " HM__NODE_DIR,
                   ctx->fsroot);
  free(m.online);
  free(m.has_cpu);
  free(m.has_mem);
  return rc;
}

/* ------------------------------------------------------------------------
 * memory_tiering, dax, NVIDIA GPU memory
 * ------------------------------------------------------------------------ */

typedef struct hm__scan_s {
  const char *root;
  struct hm_tiers_s *T;
} hm__scan_t;

static int hm__scan_memtier(const char *name, void *arg) {
  hm__scan_t *s = arg;
  if (strncmp(name, "memory_tier", 11) != 0 || !isdigit((unsigned char)name[11])) return 0;
  char *end;
  long level = strtol(name + 11, &end, 10);
  if (*end || level < 0 || level > 100000) return 0;
  char path[256];
  snprintf(path, sizeof path, "/sys/devices/virtual/memory_tiering/%s/nodelist", name);
  int *v;
  size_t n;
  if (hm__read_list(s->root, path, &v, &n) != 0) return 0;
  for (size_t i = 0; i < n; i++) {
    _hm_tier_t *t = hm__by_node(s->T, v[i]);
    if (t) {
      t->pub.memory_tier = (int32_t)level;
      t->pub.sources |= HM_TIER_SRC_MEMORY_TIERING;
    }
  }
  free(v);
  return 0;
}

/* CXL first: CXL persistent memory reaches dax through the CXL root's
 * nvdimm bridge (ACPI0017:00/root0/nvdimm-bridge0/ndbus0/...), an NVDIMM
 * bus of its own (found onlining QEMU's type-3 device in tests/vm). */
static const char *hm__dax_origin(const char *link) {
  if (strstr(link, "ACPI0017") || strstr(link, "/cxl")) return "cxl";
  if (strstr(link, "/ndbus")) return "nvdimm";
  if (strstr(link, "/hmem.")) return "soft-reserved";
  return "other";
}

static int hm__scan_dax(const char *name, void *arg) {
  hm__scan_t *s = arg;
  char path[256], link[512];
  uint64_t node;
  snprintf(path, sizeof path, "/sys/bus/dax/devices/%s/target_node", name);
  if (_hm_prim_read_u64(s->root, path, &node) != 0) return 0;
  _hm_tier_t *t = hm__by_node(s->T, (long)node);
  if (!t) return 0; /* devdax not onlined as memory: no node to describe */
  snprintf(path, sizeof path, "/sys/bus/dax/devices/%s", name);
  if (_hm_prim_readlink(s->root, path, link, sizeof link) < 0) {
    hm__warn(t, "dax device %s: link unreadable", name);
    return 0;
  }
  snprintf(path, sizeof path, "/sys/bus/dax/drivers/kmem/%s", name);
  char ignored[512];
  bool kmem = _hm_prim_readlink(s->root, path, ignored, sizeof ignored) >= 0;
  /* A devdax device whose target is a CPU node says nothing about that
   * node's own memory; only kmem-onlined or CPU-less targets are its. */
  if (!kmem && t->ncpus > 0) return 0;
  if (t->dax_dev[0]) return 0; /* keep the first (sorted) device */
  snprintf(t->dax_dev, sizeof t->dax_dev, "%s", name);
  snprintf(t->dax_link, sizeof t->dax_link, "%s", link);
  snprintf(t->dax_origin, sizeof t->dax_origin, "%s", hm__dax_origin(link));
  t->dax_kmem = kmem;
  t->pub.sources |= HM_TIER_SRC_DAX;
  return 0;
}

static int hm__scan_nvidia(const char *name, void *arg) {
  hm__scan_t *s = arg;
  char path[320], buf[1024];
  snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/numa_status", name);
  if (_hm_prim_read_text(s->root, path, buf, sizeof buf) < 0) return 0;
  const char *p = strstr(buf, "Node:");
  if (!p) return 0;
  p += 5;
  while (*p == ' ' || *p == '\t') p++;
  if (!isdigit((unsigned char)*p)) return 0; /* "-1": not in NUMA mode */
  _hm_tier_t *t = hm__by_node(s->T, strtol(p, NULL, 10));
  if (!t || t->gpu_bus_id[0]) return 0;
  snprintf(t->gpu_bus_id, sizeof t->gpu_bus_id, "%s", name);
  t->pub.sources |= HM_TIER_SRC_NVIDIA;
  return 0;
}

/* ------------------------------------------------------------------------
 * hwloc cross-check (live machine only: hwloc reads the real /sys)
 * ------------------------------------------------------------------------ */

static void hm__hwloc_crosscheck(struct hm_tiers_s *T) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return;
  }
  hwloc_obj_t obj = NULL;
  while ((obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj)) != NULL) {
    _hm_tier_t *t = hm__by_node(T, (long)obj->os_index);
    if (!t) continue;
    t->hw_seen = true;
    t->pub.sources |= HM_TIER_SRC_HWLOC;
    if (obj->subtype) snprintf(t->hw_subtype, sizeof t->hw_subtype, "%s", obj->subtype);
    hwloc_uint64_t v;
    if (hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_CAPACITY, obj, NULL, 0, &v) == 0)
      t->hw_capacity = v;
    struct hwloc_location loc;
    if (hwloc_memattr_get_best_initiator(topo, HWLOC_MEMATTR_ID_BANDWIDTH, obj, 0, &loc, &v) ==
        0)
      t->hw_bandwidth = v;
    if (hwloc_memattr_get_best_initiator(topo, HWLOC_MEMATTR_ID_LATENCY, obj, 0, &loc, &v) == 0)
      t->hw_latency = v;
    /* MemTotal moves a little with hot-plug and reservations; a large gap
     * means the two views disagree on what the node is. */
    if (t->capacity_known && t->hw_capacity) {
      uint64_t a = t->pub.capacity_bytes, b = t->hw_capacity;
      uint64_t d = a > b ? a - b : b - a;
      if (d > (a > b ? a : b) / 20)
        hm__warn(t, "hwloc reports %llu bytes, sysfs %llu", (unsigned long long)b,
                 (unsigned long long)a);
    }
  }
  hwloc_topology_destroy(topo);
}

/* ------------------------------------------------------------------------
 * Classification and ranking
 * ------------------------------------------------------------------------ */

/* DRAM baseline for the HBM test: the best HMAT bandwidth of CPU nodes. */
static uint32_t hm__dram_bw(const struct hm_tiers_s *T) {
  uint32_t dram_bw = 0;
  for (size_t i = 0; i < T->n; i++) {
    const _hm_tier_t *t = &T->v[i];
    if (t->pub.kind == HM_TIER_STORAGE) continue;
    if (t->ncpus > 0 && t->pub.read_bandwidth_mibs > dram_bw) dram_bw = t->pub.read_bandwidth_mibs;
  }
  return dram_bw;
}

/* The kind a node's device provenance names (GPU memory, NVDIMM, CXL), or
 * HM_TIER_UNKNOWN when it names none. */
static hm_tier_kind_t hm__device_kind(const _hm_tier_t *t) {
  const char *st = t->hw_subtype;
  if (t->gpu_bus_id[0] || !strcmp(st, "GPUMemory")) return HM_TIER_GPU;
  /* CXL persistent memory: hwloc names it NVM, the dax link says CXL */
  if (!strcmp(t->dax_origin, "cxl")) return HM_TIER_CXL;
  if (!strcmp(t->dax_origin, "nvdimm") || !strcmp(st, "NVM") || !strcmp(st, "CXL-NVM"))
    return !strcmp(st, "CXL-NVM") ? HM_TIER_CXL : HM_TIER_PMEM;
  if (!strcmp(t->dax_origin, "cxl") || !strcmp(st, "CXL-DRAM")) return HM_TIER_CXL;
  return HM_TIER_UNKNOWN;
}

static hm_tier_kind_t hm__kind_of(const _hm_tier_t *t, uint32_t dram_bw) {
  const char *st = t->hw_subtype;
  bool hbm_rated = t->pub.read_bandwidth_mibs && dram_bw &&
                   t->pub.read_bandwidth_mibs > 2 * (uint64_t)dram_bw;
  hm_tier_kind_t dev = hm__device_kind(t);
  if (dev != HM_TIER_UNKNOWN) return dev;
  if (t->ncpus > 0) return HM_TIER_DRAM;
  if (hbm_rated || !strcmp(st, "HBM")) return HM_TIER_HBM;
  if (t->cpus_known && !t->dax_origin[0] && !strcmp(st, "DRAM"))
    return HM_TIER_DRAM; /* hwloc vouches for a CPU-less DRAM node */
  /* Anything else (a CPU-less node without ratings or provenance, or one
   * whose files are unreadable) is honestly unknown. */
  return HM_TIER_UNKNOWN;
}

static void hm__classify(struct hm_tiers_s *T) {
  /* Like hwloc, call a CPU-less node HBM only at more than twice the DRAM
   * baseline. */
  uint32_t dram_bw = hm__dram_bw(T);
  for (size_t i = 0; i < T->n; i++) {
    _hm_tier_t *t = &T->v[i];
    if (t->pub.kind == HM_TIER_STORAGE) continue;
    t->pub.kind = hm__kind_of(t, dram_bw);
  }
}

static int hm__kind_order(hm_tier_kind_t k) {
  /* Fallback order for CPU initiators when nothing better is known: HBM
   * beats DRAM; GPU memory is reached over a link (NVLink-C2C); CXL and
   * PMem are the classic slow tiers; storage is last. */
  switch (k) {
  case HM_TIER_HBM: return 0;
  case HM_TIER_DRAM: return 1;
  case HM_TIER_GPU: return 2;
  case HM_TIER_UNKNOWN: return 3;
  case HM_TIER_CXL: return 4;
  case HM_TIER_PMEM: return 5;
  case HM_TIER_STORAGE: return 6;
  }
  return 3;
}

typedef enum { HM__BY_HMAT, HM__BY_TIER, HM__BY_KIND } hm__basis_t;

static bool hm__rankable(const _hm_tier_t *t) {
  return t->pub.kind != HM_TIER_STORAGE && !(t->capacity_known && t->pub.capacity_bytes == 0);
}

/* a against b on the ranking basis alone (0: the basis does not tell). */
static int hm__cmp_basis(const _hm_tier_t *a, const _hm_tier_t *b, hm__basis_t basis) {
  if (basis == HM__BY_HMAT) {
    uint32_t x = a->pub.read_bandwidth_mibs, y = b->pub.read_bandwidth_mibs;
    if (x != y) return x > y ? -1 : 1;
    uint32_t la = a->pub.read_latency_ns ? a->pub.read_latency_ns : UINT32_MAX;
    uint32_t lb = b->pub.read_latency_ns ? b->pub.read_latency_ns : UINT32_MAX;
    if (la != lb) return la < lb ? -1 : 1;
  } else if (basis == HM__BY_TIER) {
    if (a->pub.memory_tier != b->pub.memory_tier)
      return a->pub.memory_tier < b->pub.memory_tier ? -1 : 1;
  }
  return 0;
}

static int hm__cmp_tiers(const void *pa, const void *pb, void *arg) {
  const _hm_tier_t *a = pa, *b = pb;
  hm__basis_t basis = *(const hm__basis_t *)arg;
  bool sa = a->pub.kind == HM_TIER_STORAGE, sb = b->pub.kind == HM_TIER_STORAGE;
  if (sa != sb) return sa ? 1 : -1;
  if (sa) return (a->pub.rank > b->pub.rank) - (a->pub.rank < b->pub.rank); /* given order */
  bool ra = hm__rankable(a), rb = hm__rankable(b);
  if (ra != rb) return ra ? -1 : 1; /* empty nodes last */
  if (a->hbw_override != b->hbw_override) return a->hbw_override ? -1 : 1;
  int c = hm__cmp_basis(a, b, basis);
  if (c) return c;
  int ka = hm__kind_order(a->pub.kind), kb = hm__kind_order(b->pub.kind);
  if (ka != kb) return ka < kb ? -1 : 1;
  return (a->pub.numa_node > b->pub.numa_node) - (a->pub.numa_node < b->pub.numa_node);
}

/* Measured bandwidth (the probe, merged in Python) outranks all of this.
 * Without it: HMAT ratings when every memory tier has them, else the
 * kernel's memory tier levels when every tier has one, else kind alone. */
static void hm__rank(struct hm_tiers_s *T) {
  bool all_hmat = true, all_tier = true;
  size_t nmem = 0;
  for (size_t i = 0; i < T->n; i++) {
    const _hm_tier_t *t = &T->v[i];
    if (!hm__rankable(t)) continue;
    nmem++;
    if (!t->pub.read_bandwidth_mibs) all_hmat = false;
    if (t->pub.memory_tier < 0) all_tier = false;
  }
  hm__basis_t basis =
      (nmem && all_hmat) ? HM__BY_HMAT : (nmem && all_tier) ? HM__BY_TIER : HM__BY_KIND;
  T->ranking = basis == HM__BY_HMAT ? "hmat" : basis == HM__BY_TIER ? "memory_tier" : "kind";
  qsort_r(T->v, T->n, sizeof *T->v, hm__cmp_tiers, &basis);
  for (size_t i = 0; i < T->n; i++) {
    _hm_tier_t *t = &T->v[i];
    t->pub.rank = (uint32_t)i;
    t->ranked_by = t->pub.kind == HM_TIER_STORAGE ? "order"
                   : !hm__rankable(t)              ? "empty"
                   : t->hbw_override               ? "override"
                                                   : T->ranking;
  }
}

/* ------------------------------------------------------------------------
 * Storage tiers
 * ------------------------------------------------------------------------ */

static const char *hm__fs_name(uint64_t magic) {
  static const struct {
    uint64_t magic;
    const char *name;
  } fs[] = {
      {0xEF53, "ext4"},       {0x58465342, "xfs"},      {0x9123683E, "btrfs"},
      {0x01021994, "tmpfs"},  {0x858458F6, "ramfs"},    {0x6969, "nfs"},
      {0x794C7630, "overlay"}, {0x2FC12FC1, "zfs"},     {0xF2F52010, "f2fs"},
      {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},     {0x19830326, "beegfs"},
      {0xFF534D42, "cifs"},   {0xFE534D42, "smb2"},     {0x65735546, "fuse"},
      {0x4D44, "vfat"},       {0x00C36400, "ceph"},     {0x01021997, "9p"},
      {0x73717368, "squashfs"}, {0x2011BAB0, "exfat"}, {0x3434, "nilfs2"},
      {0x5346544E, "ntfs"},   {0x9FA0, "proc"},         {0x62656572, "sysfs"},
  };
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
    if (fs[i].magic == magic) return fs[i].name;
  return NULL;
}

/* dir must be a writable directory; its resolved path goes to real. */
static int hm__storage_real(hm_ctx_t *ctx, const char *dir, char *real, size_t len) {
  int rc = _hm_prim_check_writable_dir(dir);
  if (rc) {
    const char *why = rc == -ENOENT    ? "does not exist"
                      : rc == -ENOTDIR ? "is not a directory"
                      : rc == -EROFS   ? "is on a read-only filesystem"
                      : rc == -EACCES  ? "is not writable"
                                       : hm_strerror(rc);
    return _hm_error(ctx, rc, "storage directory '%s' %s", dir, why);
  }
  rc = _hm_prim_realpath(dir, real, len);
  if (rc) return _hm_error(ctx, rc, "storage directory '%s': %s", dir, hm_strerror(rc));
  return 0;
}

/* The facts of a storage tier at real (od: O_DIRECT works there). */
static void hm__storage_fill(_hm_tier_t *t, const char *real, const _hm_prim_fsinfo_t *fs,
                             int od, uint32_t order) {
  snprintf(t->name, sizeof t->name, "storage:%.86s", real);
  const char *fsn = hm__fs_name(fs->fs_magic);
  if (fsn)
    snprintf(t->fs_type, sizeof t->fs_type, "%s", fsn);
  else
    snprintf(t->fs_type, sizeof t->fs_type, "0x%llx", (unsigned long long)fs->fs_magic);
  t->pub.kind = HM_TIER_STORAGE;
  t->pub.numa_node = -1;
  t->pub.rank = order; /* sort key until ranking renumbers */
  t->pub.capacity_bytes = fs->total_bytes;
  t->pub.free_bytes = fs->free_bytes;
  t->capacity_known = t->free_known = true;
  t->pub.o_direct = od;
  t->pub.sources = HM_TIER_SRC_STATFS;
  if (!od) hm__warn(t, "filesystem %s refuses O_DIRECT: I/O will go through the page cache",
                    t->fs_type);
}

static int hm__add_storage(hm_ctx_t *ctx, struct hm_tiers_s *T, size_t *cap, const char *dir,
                           uint32_t order) {
  if (!dir || !*dir) return _hm_error(ctx, -EINVAL, "storage directory: empty path");
  char real[HM_PATH_MAX];
  int rc = hm__storage_real(ctx, dir, real, sizeof real);
  if (rc) return rc;
  for (size_t i = 0; i < T->n; i++)
    if (T->v[i].path && !strcmp(T->v[i].path, real)) return 0; /* given twice */
  _hm_prim_fsinfo_t fs;
  rc = _hm_prim_fs_info(real, &fs);
  if (rc) return _hm_error(ctx, rc, "storage directory '%s': %s", dir, hm_strerror(rc));
  int od = _hm_prim_odirect_supported(real);
  if (od < 0)
    return _hm_error(ctx, od, "storage directory '%s': cannot create a file: %s", dir,
                     hm_strerror(od));
  _hm_tier_t *t = hm__push(T, cap);
  if (!t) return -ENOMEM;
  if (!(t->path = strdup(real))) return -ENOMEM;
  hm__storage_fill(t, real, &fs, od, order);
  return 0;
}

static const char *hm__default_storage(const hm_ctx_t *ctx) {
  const char *s = _hm_opt_str(ctx, HM_OPT_STORAGE);
  if (s && *s) return s;
  /* Not an option default: TMPDIR is the user's own say on scratch space. */
  s = _hm_prim_getenv("TMPDIR");
  if (s && *s) return s;
  return "/var/tmp";
}

/* ------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------ */

const char *hm_tier_kind_name(hm_tier_kind_t kind) {
  switch (kind) {
  case HM_TIER_DRAM: return "dram";
  case HM_TIER_HBM: return "hbm";
  case HM_TIER_PMEM: return "pmem";
  case HM_TIER_CXL: return "cxl";
  case HM_TIER_GPU: return "gpu";
  case HM_TIER_STORAGE: return "storage";
  case HM_TIER_UNKNOWN: break;
  }
  return "unknown";
}

static bool hm__is_live(const hm_ctx_t *ctx) {
  const char *r = ctx->fsroot;
  while (*r == '/') r++;
  return *r == 0;
}

int hm_tiers_discover(hm_ctx_t *ctx, const char *const *storage_dirs, size_t n) {
  if (!ctx) return -EINVAL;
  if (n && !storage_dirs) return _hm_error(ctx, -EINVAL, "storage directories: NULL array");
  struct hm_tiers_s *T = calloc(1, sizeof *T);
  if (!T) return _hm_error(ctx, -ENOMEM, "out of memory");
  size_t cap = 0;
  int rc = hm__discover_nodes(ctx, T, &cap);
  if (rc) goto fail;
  hm__scan_t s = {ctx->fsroot, T};
  (void)_hm_prim_list_dir(ctx->fsroot, "/sys/devices/virtual/memory_tiering", hm__scan_memtier,
                          &s);
  (void)_hm_prim_list_dir(ctx->fsroot, "/sys/bus/dax/devices", hm__scan_dax, &s);
  (void)_hm_prim_list_dir(ctx->fsroot, "/proc/driver/nvidia/gpus", hm__scan_nvidia, &s);
  if (hm__is_live(ctx)) hm__hwloc_crosscheck(T);
  hm__classify(T);
  rc = _hm_tiers_override(ctx, T);
  if (rc) goto fail;
  if (!storage_dirs) {
    rc = hm__add_storage(ctx, T, &cap, hm__default_storage(ctx), 0);
  } else {
    for (size_t i = 0; i < n && !rc; i++)
      rc = hm__add_storage(ctx, T, &cap, storage_dirs[i], (uint32_t)i);
  }
  if (rc) goto fail;
  hm__rank(T);
  for (size_t i = 0; i < T->n; i++) {
    _hm_tier_t *t = &T->v[i];
    t->pub.size = sizeof t->pub;
    t->pub.version = HM_TIER_INFO_VERSION;
    t->pub.name = t->name;
    t->pub.ncpus = (uint32_t)t->ncpus;
    t->pub.path = t->path;
    t->pub.fs_type = t->path ? t->fs_type : NULL;
  }
  _hm_tiers_free(ctx->tiers);
  ctx->tiers = T;
  return 0;
fail:
  _hm_tiers_free(T);
  if (rc == -ENOMEM) return _hm_error(ctx, rc, "out of memory during tier discovery");
  return rc;
}

size_t hm_tier_count(const hm_ctx_t *ctx) { return ctx && ctx->tiers ? ctx->tiers->n : 0; }

int hm_tier_get(const hm_ctx_t *ctx, size_t i, hm_tier_t *out) {
  if (!out || out->size < 2 * sizeof(uint32_t)) return -EINVAL;
  if (i >= hm_tier_count(ctx)) return -ERANGE;
  size_t n = out->size < sizeof *out ? out->size : sizeof *out;
  uint32_t size = out->size;
  memcpy(out, &ctx->tiers->v[i].pub, n);
  out->size = size;
  return 0;
}

int hm_tier_cpus(const hm_ctx_t *ctx, size_t i, int *cpus, size_t len) {
  if (i >= hm_tier_count(ctx)) return -ERANGE;
  const _hm_tier_t *t = &ctx->tiers->v[i];
  for (size_t k = 0; k < len && k < t->ncpus; k++) cpus[k] = t->cpus[k];
  return (int)t->ncpus;
}
