/* SPDX-License-Identifier: BSD-3-Clause */
/* Runs under `hetmem profile` / `hetmem run` in tests/integration/test_preload_loading.py:
 * dlopens PLUGIN (plugin_lib.c) after PAD KiB of other allocation (so its
 * load address and the heap differ from run to run), runs it, dlcloses it.
 * Prints the plugin's sum; exit 0 when it is the expected one. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN PAD_KIB\n", argv[0]);
    return 2;
  }
  void *pad = malloc((size_t)atoi(argv[2]) << 10);
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  double (*run)(int);
  *(void **)&run = dlsym(h, "hm_plugin_run");
  double s = run ? run(20) : -1;
  dlclose(h);
  free(pad);
  /* hot: passes x (1 + 2 + ... ) per line; cold: 2 per page */
  double want = 0;
  for (int k = 0; k < 20; k++) want += (double)(1 + k) * ((16 << 20) / 64);
  want += 2.0 * ((64 << 20) / 4096);
  printf("plugin sum %.0f\n", s);
  return s == want ? 0 : 1;
}
