/* SPDX-License-Identifier: BSD-3-Clause */
/* Growable strings for JSON output; never on a hot path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void _hm_sb_init(_hm_sb_t *sb) { memset(sb, 0, sizeof *sb); }

void _hm_sb_free(_hm_sb_t *sb) {
  free(sb->buf);
  _hm_sb_init(sb);
}

static int hm__sb_reserve(_hm_sb_t *sb, size_t extra) {
  if (sb->err) return sb->err;
  if (sb->len + extra + 1 <= sb->cap) return 0;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < sb->len + extra + 1) cap *= 2;
  char *p = realloc(sb->buf, cap);
  if (!p) return sb->err = -ENOMEM;
  sb->buf = p;
  sb->cap = cap;
  return 0;
}

void _hm_sb_puts(_hm_sb_t *sb, const char *s) {
  size_t n = strlen(s);
  if (hm__sb_reserve(sb, n)) return;
  memcpy(sb->buf + sb->len, s, n + 1);
  sb->len += n;
}

void _hm_sb_printf(_hm_sb_t *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || hm__sb_reserve(sb, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

void _hm_sb_json_str(_hm_sb_t *sb, const char *s) {
  _hm_sb_puts(sb, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': _hm_sb_puts(sb, "\\\""); break;
    case '\\': _hm_sb_puts(sb, "\\\\"); break;
    case '\n': _hm_sb_puts(sb, "\\n"); break;
    case '\t': _hm_sb_puts(sb, "\\t"); break;
    case '\r': _hm_sb_puts(sb, "\\r"); break;
    default:
      if (*p < 0x20) {
        _hm_sb_printf(sb, "\\u%04x", *p);
      } else {
        char c[2] = {(char)*p, 0};
        _hm_sb_puts(sb, c);
      }
    }
  }
  _hm_sb_puts(sb, "\"");
}

int _hm_sb_take(_hm_sb_t *sb, char **out) {
  if (!sb->err && !sb->buf) _hm_sb_puts(sb, "");
  if (sb->err) {
    int e = sb->err;
    _hm_sb_free(sb);
    return e;
  }
  *out = sb->buf;
  _hm_sb_init(sb);
  return 0;
}
