/* SPDX-License-Identifier: BSD-3-Clause */
/* Which nodes count as high-bandwidth memory, when the firmware says it
 * wrong: the hbw_nodes option (HETMEM_HBW_NODES), else memkind's own
 * MEMKIND_HBW_NODES, so that a site's memkind setting carries over.
 *
 * The listed nodes become HBM and rank first among the memory tiers, in
 * every consumer of the inventory at once: `hetmem tiers`, the advisor's
 * tiers, and hbw_malloc's choice of node. Off the hot paths (discovery). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "prim/prim.h"
#include "tiers.h"

static _hm_tier_t *hm__node(struct hm_tiers_s *T, int node) {
  for (size_t i = 0; i < T->n; i++)
    if (T->v[i].pub.kind != HM_TIER_STORAGE && T->v[i].pub.numa_node == node) return &T->v[i];
  return NULL;
}

int _hm_tiers_override(hm_ctx_t *ctx, struct hm_tiers_s *T) {
  const char *from = "HETMEM_HBW_NODES";
  const char *text = _hm_opt_str(ctx, HM_OPT_HBW_NODES);
  if (!text || !*text) {
    from = "MEMKIND_HBW_NODES";
    text = _hm_prim_getenv(from);
  }
  if (!text || !*text) return 0;
  int *v = NULL;
  size_t n = 0;
  if (_hm_parse_cpulist(text, &v, &n) || n == 0) {
    free(v);
    return _hm_error(ctx, -EINVAL, "%s '%s': expected a node list such as 1 or 4-7", from,
                     text);
  }
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    _hm_tier_t *t = hm__node(T, v[i]);
    if (!t || !t->has_memory) {
      rc = _hm_error(ctx, -EINVAL, "%s '%s': node %d is not a memory node here", from, text,
                     v[i]);
      break;
    }
    t->pub.kind = HM_TIER_HBM;
    t->hbw_override = true;
    t->pub.sources |= HM_TIER_SRC_OVERRIDE;
  }
  free(v);
  return rc;
}
