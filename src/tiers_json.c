/* SPDX-License-Identifier: BSD-3-Clause */
/* The tier inventory as JSON (hm_tiers_json): the schema of `hetmem tiers
 * --json`, one object per tier, null for every fact that is unknown. The
 * discovery itself is in tiers.c. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "tiers.h"

static void hm__json_u64_or_null(_hm_sb_t *sb, bool known, uint64_t v) {
  if (known)
    _hm_sb_printf(sb, "%llu", (unsigned long long)v);
  else
    _hm_sb_puts(sb, "null");
}

static void hm__json_ints(_hm_sb_t *sb, const int *v, size_t n) {
  _hm_sb_puts(sb, "[");
  for (size_t i = 0; i < n; i++) _hm_sb_printf(sb, "%s%d", i ? ", " : "", v[i]);
  _hm_sb_puts(sb, "]");
}

static void hm__json_sources(_hm_sb_t *sb, uint32_t src) {
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {{HM_TIER_SRC_SYSFS, "sysfs"},   {HM_TIER_SRC_HMAT, "hmat"},
               {HM_TIER_SRC_MEMORY_TIERING, "memory_tiering"},
               {HM_TIER_SRC_DAX, "dax"},       {HM_TIER_SRC_NVIDIA, "nvidia"},
               {HM_TIER_SRC_OVERRIDE, "override"},
               {HM_TIER_SRC_HWLOC, "hwloc"},   {HM_TIER_SRC_STATFS, "statfs"}};
  _hm_sb_puts(sb, "[");
  bool first = true;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(src & names[i].bit)) continue;
    _hm_sb_printf(sb, "%s\"%s\"", first ? "" : ", ", names[i].name);
    first = false;
  }
  _hm_sb_puts(sb, "]");
}

static void hm__json_u32_field(_hm_sb_t *sb, const char *key, uint32_t v, bool last) {
  _hm_sb_printf(sb, "\"%s\": ", key);
  hm__json_u64_or_null(sb, v != 0, v);
  if (!last) _hm_sb_puts(sb, ", ");
}

static void hm__json_storage(_hm_sb_t *sb, const _hm_tier_t *t) {
  _hm_sb_puts(sb, ", \"path\": ");
  _hm_sb_json_str(sb, t->path);
  _hm_sb_puts(sb, ", \"fs_type\": ");
  _hm_sb_json_str(sb, t->fs_type);
  _hm_sb_printf(sb, ", \"o_direct\": %s", t->pub.o_direct ? "true" : "false");
}

static void hm__json_distances(_hm_sb_t *sb, const _hm_tier_t *t) {
  _hm_sb_puts(sb, ", \"distances\": ");
  if (!t->dist_known) {
    _hm_sb_puts(sb, "null");
    return;
  }
  _hm_sb_puts(sb, "{");
  for (size_t i = 0; i < t->ndist; i++)
    _hm_sb_printf(sb, "%s\"%d\": %d", i ? ", " : "", t->dist_node[i], t->dist[i]);
  _hm_sb_puts(sb, "}");
}

static void hm__json_hmat(_hm_sb_t *sb, const _hm_tier_t *t) {
  const hm_tier_t *p = &t->pub;
  _hm_sb_puts(sb, ", \"hmat\": ");
  if (!t->hmat_access[0]) {
    _hm_sb_puts(sb, "null");
    return;
  }
  _hm_sb_printf(sb, "{\"access\": \"%s\", ", t->hmat_access);
  hm__json_u32_field(sb, "read_bandwidth_mibs", p->read_bandwidth_mibs, false);
  hm__json_u32_field(sb, "write_bandwidth_mibs", p->write_bandwidth_mibs, false);
  hm__json_u32_field(sb, "read_latency_ns", p->read_latency_ns, false);
  hm__json_u32_field(sb, "write_latency_ns", p->write_latency_ns, false);
  _hm_sb_puts(sb, "\"initiators\": ");
  hm__json_ints(sb, t->initiators, t->ninitiators);
  _hm_sb_puts(sb, "}");
}

static void hm__json_msc(_hm_sb_t *sb, const _hm_tier_t *t) {
  if (!t->msc_levels) return;
  _hm_sb_puts(sb, ", \"memory_side_cache\": [");
  for (int i = 0; i < t->msc_levels; i++)
    _hm_sb_printf(sb, "%s{\"level\": %d, \"size_bytes\": %llu}", i ? ", " : "", i + 1,
                  (unsigned long long)t->msc_size[i]);
  _hm_sb_puts(sb, "]");
}

static void hm__json_provenance(_hm_sb_t *sb, const _hm_tier_t *t) {
  _hm_sb_puts(sb, ", \"provenance\": ");
  if (t->dax_dev[0]) {
    _hm_sb_printf(sb, "{\"dax_device\": \"%s\", \"origin\": \"%s\", \"kmem\": %s, \"link\": ",
                  t->dax_dev, t->dax_origin, t->dax_kmem ? "true" : "false");
    _hm_sb_json_str(sb, t->dax_link);
    _hm_sb_puts(sb, "}");
  } else if (t->gpu_bus_id[0]) {
    _hm_sb_puts(sb, "{\"origin\": \"nvidia-gpu\", \"pci_bus_id\": ");
    _hm_sb_json_str(sb, t->gpu_bus_id);
    _hm_sb_puts(sb, "}");
  } else {
    _hm_sb_puts(sb, "null");
  }
}

static void hm__json_hwloc(_hm_sb_t *sb, const _hm_tier_t *t) {
  if (!t->hw_seen) return;
  _hm_sb_puts(sb, ", \"hwloc\": {\"subtype\": ");
  if (t->hw_subtype[0])
    _hm_sb_json_str(sb, t->hw_subtype);
  else
    _hm_sb_puts(sb, "null");
  _hm_sb_puts(sb, ", \"capacity_bytes\": ");
  hm__json_u64_or_null(sb, t->hw_capacity != 0, t->hw_capacity);
  _hm_sb_puts(sb, ", \"bandwidth_mibs\": ");
  hm__json_u64_or_null(sb, t->hw_bandwidth != 0, t->hw_bandwidth);
  _hm_sb_puts(sb, ", \"latency_ns\": ");
  hm__json_u64_or_null(sb, t->hw_latency != 0, t->hw_latency);
  _hm_sb_puts(sb, "}");
}

/* The facts only a NUMA node has. */
static void hm__json_node(_hm_sb_t *sb, const _hm_tier_t *t) {
  _hm_sb_puts(sb, ", \"cpus_known\": ");
  _hm_sb_puts(sb, t->cpus_known ? "true" : "false");
  _hm_sb_puts(sb, ", \"memory_tier\": ");
  if (t->pub.memory_tier >= 0)
    _hm_sb_printf(sb, "%d", t->pub.memory_tier);
  else
    _hm_sb_puts(sb, "null");
  hm__json_distances(sb, t);
  hm__json_hmat(sb, t);
  hm__json_msc(sb, t);
  hm__json_provenance(sb, t);
  hm__json_hwloc(sb, t);
}

static void hm__json_tier(_hm_sb_t *sb, const _hm_tier_t *t) {
  const hm_tier_t *p = &t->pub;
  bool storage = p->kind == HM_TIER_STORAGE;
  _hm_sb_puts(sb, "{\"name\": ");
  _hm_sb_json_str(sb, t->name);
  _hm_sb_printf(sb, ", \"kind\": \"%s\", \"numa_node\": ", hm_tier_kind_name(p->kind));
  if (storage)
    _hm_sb_puts(sb, "null");
  else
    _hm_sb_printf(sb, "%d", p->numa_node);
  _hm_sb_puts(sb, ", \"capacity_bytes\": ");
  hm__json_u64_or_null(sb, t->capacity_known, p->capacity_bytes);
  _hm_sb_puts(sb, ", \"free_bytes\": ");
  hm__json_u64_or_null(sb, t->free_known, p->free_bytes);
  _hm_sb_puts(sb, ", \"cpus\": ");
  hm__json_ints(sb, t->cpus, t->ncpus);
  _hm_sb_printf(sb, ", \"rank\": %u, \"ranked_by\": \"%s\", \"source\": ", p->rank, t->ranked_by);
  hm__json_sources(sb, p->sources);
  if (storage)
    hm__json_storage(sb, t);
  else
    hm__json_node(sb, t);
  _hm_sb_puts(sb, ", \"warnings\": [");
  for (size_t i = 0; i < t->nwarn; i++) {
    if (i) _hm_sb_puts(sb, ", ");
    _hm_sb_json_str(sb, t->warn[i]);
  }
  _hm_sb_puts(sb, "]}");
}

int hm_tiers_json(hm_ctx_t *ctx, const char **storage_dirs, size_t n, char **out) {
  if (!ctx || !out) return -EINVAL;
  *out = NULL;
  int rc = hm_tiers_discover(ctx, (const char *const *)storage_dirs, n);
  if (rc) return rc;
  const struct hm_tiers_s *T = ctx->tiers;
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_puts(&sb, "{\"schema_version\": 1, \"fsroot\": ");
  _hm_sb_json_str(&sb, ctx->fsroot);
  _hm_sb_printf(&sb, ", \"ranking\": \"%s\", \"tiers\": [", T->ranking);
  for (size_t i = 0; i < T->n; i++) {
    if (i) _hm_sb_puts(&sb, ", ");
    hm__json_tier(&sb, &T->v[i]);
  }
  _hm_sb_puts(&sb, "]}\n");
  rc = _hm_sb_take(&sb, out);
  if (rc) return _hm_error(ctx, rc, "out of memory building the tier JSON");
  return 0;
}
