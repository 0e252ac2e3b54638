/* SPDX-License-Identifier: BSD-3-Clause */
/* Sizes as users write them ("4096", "64K", "512MiB", "4G", "1.5GB"):
 * libhetmem's options and hm_parse_size, and the benchmark kernels, which
 * compile this file into their own static library because they are plain
 * programs that must not link libhetmem (see bench/kernels/kernels.cmake). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "size.h"

/* The multiplier of a size suffix ("" is bytes); -EINVAL if unknown. */
static int hm__size_mult(const char *sfx, double *mult) {
  /* Suffixes: binary for K/M/G/T and KiB..TiB (what numactl and Slurm
   * users write), decimal for kB/MB/GB/TB. */
  static const struct { const char *sfx; double mult; } tab[] = {
      {"", 1.0},
      {"B", 1.0},
      {"K", 1024.0},
      {"KiB", 1024.0},
      {"M", 1048576.0},
      {"MiB", 1048576.0},
      {"G", 1073741824.0},
      {"GiB", 1073741824.0},
      {"T", 1099511627776.0},
      {"TiB", 1099511627776.0},
      {"kB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
  };
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    if (strcasecmp(sfx, tab[i].sfx) == 0) {
      *mult = tab[i].mult;
      return 0;
    }
  }
  return -EINVAL;
}

int _hm_parse_size(const char *text, uint64_t *out) {
  if (!text) return -EINVAL;
  while (isspace((unsigned char)*text)) text++;
  if (!*text || *text == '-' || *text == '+') return -EINVAL;
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno == ERANGE || !isfinite(v) || v < 0) return errno ? -ERANGE : -EINVAL;
  while (isspace((unsigned char)*end)) end++;
  double mult;
  if (hm__size_mult(end, &mult)) return -EINVAL;
  double bytes = v * mult;
  if (bytes >= 18446744073709551615.0) return -ERANGE;
  if (bytes != floor(bytes)) return -EINVAL; /* fractional bytes */
  *out = (uint64_t)bytes;
  return 0;
}

void _hm_format_size(uint64_t bytes, char *out, size_t len) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(out, len, "%llu bytes", (unsigned long long)bytes);
    return;
  }
  double v = (double)bytes / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  snprintf(out, len, "%.1f %s", v, units[u]);
}
