/* SPDX-License-Identifier: BSD-3-Clause */
/* Tier inventory internals (tiers.c). */
#ifndef HM_TIERS_H
#define HM_TIERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define HM_TIER_MAX_MSC 4   /* memory-side cache levels kept per node */
#define HM_TIER_MAX_WARN 8  /* problems kept per tier */

typedef struct _hm_tier_s {
  hm_tier_t pub; /* the public view; its strings point into this struct */
  char name[96];
  char *path; /* storage: resolved directory */
  char fs_type[32];
  /* NUMA facts */
  int *cpus;
  size_t ncpus;
  bool cpus_known;
  bool has_memory;
  bool capacity_known, free_known;
  int *dist_node; /* distances: to node dist_node[i] is dist[i] */
  int *dist;
  size_t ndist;
  bool dist_known;
  /* HMAT */
  char hmat_access[16]; /* "access1", "access0" or "" */
  int *initiators;
  size_t ninitiators;
  uint64_t msc_size[HM_TIER_MAX_MSC];
  int msc_levels;
  /* provenance */
  char dax_dev[64];
  char dax_origin[32]; /* "nvdimm", "cxl", "soft-reserved", "other" */
  char dax_link[512];
  bool dax_kmem;
  char gpu_bus_id[64];
  /* hwloc (live machine only) */
  bool hw_seen;
  char hw_subtype[32];
  uint64_t hw_capacity, hw_bandwidth, hw_latency;
  bool hbw_override; /* named by HETMEM_HBW_NODES / MEMKIND_HBW_NODES */
  /* ranking */
  const char *ranked_by; /* "hmat", "memory_tier", "kind", "order" */
  char *warn[HM_TIER_MAX_WARN];
  size_t nwarn;
} _hm_tier_t;

struct hm_tiers_s {
  _hm_tier_t *v;
  size_t n;
  const char *ranking; /* how memory tiers were ranked */
};

void _hm_tiers_free(struct hm_tiers_s *t);

/* FIELD's value in a meminfo text ("Node 0 MemTotal:  4940356 kB" or
 * /proc/meminfo's "MemAvailable: ... kB"), in bytes; -ENOENT without it,
 * -EINVAL when malformed. */
int _hm_meminfo_field(const char *text, const char *field, uint64_t *out);

/* Parses a kernel list such as "0-13,112-125" ("" is the empty list).
 * -EINVAL for anything else (or a value above 1<<22). *out is malloc'ed. */
int _hm_parse_cpulist(const char *text, int **out, size_t *n);

/* Applies the high-bandwidth node override (tiers_override.c), after the
 * classification: listed nodes become HBM and rank first. -EINVAL with a
 * message for a bad list or a node without memory. */
int _hm_tiers_override(hm_ctx_t *ctx, struct hm_tiers_s *T);

#endif
