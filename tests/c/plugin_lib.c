/* SPDX-License-Identifier: BSD-3-Clause */
/* A plugin that hm_dlopen_target dlopens, runs and dlcloses: its two
 * allocation sites (hot, cold) exist only while it is loaded. */
#include <stdlib.h>
#include <string.h>

__attribute__((visibility("default"))) double hm_plugin_run(int passes);

__attribute__((noinline)) static unsigned char *plugin_hot(size_t n) {
  unsigned char *p = malloc(n);
  if (p) memset(p, 1, n);
  return p;
}

__attribute__((noinline)) static unsigned char *plugin_cold(size_t n) {
  unsigned char *p = malloc(n);
  if (p) memset(p, 2, n);
  return p;
}

/* 16 MiB hot (read and written passes times), 64 MiB cold (read once);
 * the sum of what it read, or -1 */
double hm_plugin_run(int passes) {
  size_t n = (size_t)16 << 20;
  unsigned char *h = plugin_hot(n), *c = plugin_cold(4 * n);
  if (!h || !c) return -1;
  double s = 0;
  for (int k = 0; k < passes; k++)
    for (size_t i = 0; i < n; i += 64) s += h[i]++;
  for (size_t i = 0; i < 4 * n; i += 4096) s += c[i];
  free(h);
  free(c);
  return s;
}
