/* SPDX-License-Identifier: BSD-3-Clause */
/* Cross-file internals of libhetmem (names start with _hm_). */
#ifndef HM_INTERNAL_H
#define HM_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hetmem.h"
#include "options.h"

#define HM_ERRMSG_MAX 512
#define HM_PATH_MAX 4096

#if defined(__GNUC__)
#define hm_likely(x) __builtin_expect(!!(x), 1)
#define hm_unlikely(x) __builtin_expect(!!(x), 0)
#define HM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define hm_likely(x) (x)
#define hm_unlikely(x) (x)
#define HM_PRINTF(a, b)
#endif

struct hm_tiers_s; /* tiers.c */

struct hm_ctx_s {
  char fsroot[HM_PATH_MAX];
  char errmsg[HM_ERRMSG_MAX];
  hm_error_fn *err_fn;
  void *err_arg;
  _hm_options_t opts;
  struct hm_tiers_s *tiers; /* owned; NULL until discovered */
};

/* Records a failure on ctx (message formatted like printf) and returns err,
 * so that error paths read `return _hm_error(ctx, -EINVAL, "...", ...);`.
 * ctx may be NULL (the message is then dropped). err must be negative. */
int _hm_error(hm_ctx_t *ctx, int err, const char *fmt, ...) HM_PRINTF(3, 4);

/* Growable string used to build JSON and messages off the hot paths. */
typedef struct _hm_sb_s {
  char *buf;
  size_t len;
  size_t cap;
  int err; /* sticky -ENOMEM */
} _hm_sb_t;

void _hm_sb_init(_hm_sb_t *sb);
void _hm_sb_free(_hm_sb_t *sb);
void _hm_sb_puts(_hm_sb_t *sb, const char *s);
void _hm_sb_printf(_hm_sb_t *sb, const char *fmt, ...) HM_PRINTF(2, 3);
/* Appends s as a JSON string literal, quotes included. */
void _hm_sb_json_str(_hm_sb_t *sb, const char *s);
/* Hands the buffer to the caller (to be released with hm_free) or returns
 * the sticky error. */
int _hm_sb_take(_hm_sb_t *sb, char **out);

/* Size parsing shared by options, the public hm_parse_size and the
 * benchmark kernels. */
#include "size.h"

#endif
