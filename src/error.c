/* SPDX-License-Identifier: BSD-3-Clause */
/* Error recording and the library's small public utilities. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *hm_version(void) { return "0.1.0"; }

const char *hm_strerror(int err) {
  /* strerror() is not thread-safe on every libc; strerrordesc_np is. */
  const char *s = strerrordesc_np(err < 0 ? -err : err);
  return s ? s : "unknown error";
}

void hm_free(void *p) { free(p); }

int _hm_error(hm_ctx_t *ctx, int err, const char *fmt, ...) {
  if (!ctx) return err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
  va_end(ap);
  if (ctx->err_fn) ctx->err_fn(err, ctx->errmsg, ctx->err_arg);
  return err;
}

const char *hm_ctx_last_error(const hm_ctx_t *ctx) { return ctx ? ctx->errmsg : ""; }

void hm_ctx_set_error_handler(hm_ctx_t *ctx, hm_error_fn *fn, void *arg) {
  if (!ctx) return;
  ctx->err_fn = fn;
  ctx->err_arg = arg;
}
