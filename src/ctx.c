/* SPDX-License-Identifier: BSD-3-Clause */
/* Context life cycle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "prim/prim.h"
#include "tiers.h"

int hm_ctx_new(hm_ctx_t **out, const char *fsroot) {
  if (!out) return -EINVAL;
  *out = NULL;
  hm_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return -ENOMEM;
  int rc = _hm_options_init(ctx, &ctx->opts);
  if (rc) {
    /* A bad HETMEM_* value is the user's to fix: fail loudly, with the
     * message, rather than run with a setting they did not ask for. */
    *out = ctx;
    return rc;
  }
  const char *root = fsroot ? fsroot : _hm_opt_str(ctx, HM_OPT_FSROOT);
  if (strlen(root) >= sizeof ctx->fsroot) {
    rc = _hm_error(ctx, -ENAMETOOLONG, "filesystem root is too long");
    *out = ctx;
    return rc;
  }
  snprintf(ctx->fsroot, sizeof ctx->fsroot, "%s", root);
  rc = _hm_prim_check_dir(ctx->fsroot);
  if (rc) {
    rc = _hm_error(ctx, rc, "filesystem root '%s': %s", ctx->fsroot, hm_strerror(rc));
    *out = ctx;
    return rc;
  }
  *out = ctx;
  return 0;
}

void hm_ctx_free(hm_ctx_t *ctx) {
  if (!ctx) return;
  _hm_tiers_free(ctx->tiers);
  free(ctx);
}

const char *hm_ctx_fsroot(const hm_ctx_t *ctx) { return ctx ? ctx->fsroot : "/"; }
