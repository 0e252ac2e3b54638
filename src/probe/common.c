/* SPDX-License-Identifier: BSD-3-Clause */
/* Live-machine facts the measurements need: cache size, CPUs, nodes. These
 * read the real /sys, not ctx->fsroot: a measurement only means anything on
 * the machine it runs on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"
#include "probe/probe.h"

static uint64_t hm__parse_cache_size(const char *s) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K') v <<= 10;
  else if (*end == 'M') v <<= 20;
  else if (*end == 'G') v <<= 30;
  return v;
}

uint64_t _hm_probe_llc_bytes(void) {
  uint64_t best = 0;
  unsigned best_level = 0;
  for (int i = 0; i < 16; i++) {
    char path[128], buf[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (_hm_prim_read_text("/", path, buf, sizeof buf) < 0) break;
    if (strcmp(buf, "Instruction") == 0) continue;
    uint64_t level = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    if (_hm_prim_read_u64("/", path, &level)) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (_hm_prim_read_text("/", path, buf, sizeof buf) < 0) continue;
    uint64_t size = hm__parse_cache_size(buf);
    if (level > best_level || (level == best_level && size > best)) {
      best_level = (unsigned)level;
      best = size;
    }
  }
  return best;
}

int _hm_probe_parse_cpulist(const char *text, int *cpus, int max) {
  int n = 0;
  const char *p = text;
  while (*p && n < max) {
    char *end;
    long a = strtol(p, &end, 10);
    if (end == p || a < 0) return -EINVAL;
    long b = a;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1 || b < a) return -EINVAL;
      p = end;
    }
    for (long c = a; c <= b && n < max; c++) cpus[n++] = (int)c;
    if (*p == ',') p++;
    else if (*p && *p != '\n') return -EINVAL;
    else break;
  }
  return n;
}

static int hm__node_has_cpus(const char *root, int node, char *buf, size_t len) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
  return _hm_prim_read_text(root, path, buf, len) > 0;
}

int _hm_probe_nearest_cpu_node(const char *root, int node) {
  char buf[4096];
  size_t len = sizeof buf;
  if (hm__node_has_cpus(root, node, buf, len)) return node;
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/node/node%d/distance", node);
  if (_hm_prim_read_text(root, path, buf, len) <= 0) return node;
  /* The row lists distances in the order of the online node ids, which are
   * not always 0..n-1: pair it with the online list. */
  char *row = strdup(buf);
  if (!row) return node;
  int ids[1024], nid = 0;
  if (_hm_prim_read_text(root, "/sys/devices/system/node/online", buf, len) > 0)
    nid = _hm_probe_parse_cpulist(buf, ids, 1024);
  int best = node;
  long bestd = -1;
  char *save = NULL;
  int i = 0;
  for (char *tok = strtok_r(row, " ", &save); tok && i < nid;
       tok = strtok_r(NULL, " ", &save), i++) {
    long d = strtol(tok, NULL, 10);
    if (ids[i] == node || (bestd >= 0 && d >= bestd)) continue;
    if (hm__node_has_cpus(root, ids[i], buf, len)) {
      best = ids[i];
      bestd = d;
    }
  }
  free(row);
  return best;
}

int _hm_probe_cpus_for_node(int node, int *cpus, int max) {
  static const int cap = HM_PROBE_MAX_CPUS;
  int *allowed = malloc(sizeof(int) * (size_t)cap);
  if (!allowed) return -ENOMEM;
  int na = _hm_prim_allowed_cpus(allowed, cap);
  if (na < 0) {
    free(allowed);
    return na;
  }
  int n = 0;
  if (node >= 0) {
    char path[96], *buf = malloc(65536);
    int *local = malloc(sizeof(int) * (size_t)cap);
    /* A CPU-less node (CXL, PMem, HBM in flat mode) is measured from the
     * nearest node that has CPUs, as an application there would use it. */
    int from = _hm_probe_nearest_cpu_node("/", node);
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", from);
    if (buf && local && _hm_prim_read_text("/", path, buf, 65536) > 0) {
      int nl = _hm_probe_parse_cpulist(buf, local, cap);
      for (int i = 0; i < nl && n < max; i++)
        for (int j = 0; j < na; j++)
          if (allowed[j] == local[i]) {
            cpus[n++] = local[i];
            allowed[j] = -1; /* taken */
            break;
          }
    }
    free(buf);
    free(local);
  }
  for (int j = 0; j < na && n < max; j++)
    if (allowed[j] >= 0) cpus[n++] = allowed[j];
  free(allowed);
  return n;
}

int _hm_probe_check_node(hm_ctx_t *ctx, int node) {
  if (node < 0) return 0;
  char buf[4096];
  int nodes[1024];
  ssize_t len = _hm_prim_read_text("/", "/sys/devices/system/node/has_memory", buf, sizeof buf);
  if (len < 0) {
    /* Kernels without NUMA support: only node 0 exists. */
    if (node == 0) return 0;
    return _hm_error(ctx, -EINVAL, "NUMA node %d: this kernel reports no NUMA nodes", node);
  }
  int n = _hm_probe_parse_cpulist(buf, nodes, 1024);
  for (int i = 0; i < n; i++)
    if (nodes[i] == node) return 0;
  return _hm_error(ctx, -EINVAL, "NUMA node %d has no memory (nodes with memory: %s)", node,
                   buf);
}
