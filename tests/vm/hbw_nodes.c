/* SPDX-License-Identifier: BSD-3-Clause */
/* Built by tests/vm/test_vm.py against include/hbwmalloc.h and -lhetmem,
 * run in a guest: sets the policy named by argv[1] (none, bind, preferred,
 * interleave, bind_all), hbw_malloc's argv[2] MiB (or, for argv[1]
 * mk:KIND, memkind_malloc's them of MEMKIND_KIND), touches them and prints
 * where the kernel put the pages (move_pages(2) queries), as one JSON line:
 * {"available": A, "set": RC, "ptr": 0|1, "errno": E (0 unless no ptr),
 *  "nodes": {"N": pages, ...}}. */
#define _GNU_SOURCE
#include <errno.h>
#include <hbwmalloc.h>
#include <memkind.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numa_pages.h" /* bench/, on the include path */

int main(int argc, char **argv) {
  const char *pol = argc > 1 ? argv[1] : "none";
  size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 32;
  int set = 0;
  if (!strcmp(pol, "bind")) set = hbw_set_policy(HBW_POLICY_BIND);
  else if (!strcmp(pol, "preferred")) set = hbw_set_policy(HBW_POLICY_PREFERRED);
  else if (!strcmp(pol, "interleave")) set = hbw_set_policy(HBW_POLICY_INTERLEAVE);
  else if (!strcmp(pol, "bind_all")) set = hbw_set_policy(HBW_POLICY_BIND_ALL);
  int avail = hbw_check_available();
  size_t bytes = mib << 20;
  memkind_t kind = NULL;
  if (!strcmp(pol, "mk:hbw")) kind = MEMKIND_HBW;
  else if (!strcmp(pol, "mk:hbw_all")) kind = MEMKIND_HBW_ALL;
  else if (!strcmp(pol, "mk:dax_kmem")) kind = MEMKIND_DAX_KMEM;
  else if (!strcmp(pol, "mk:regular")) kind = MEMKIND_REGULAR;
  if (kind) avail = memkind_check_available(kind);
  errno = 0;
  char *p = kind ? memkind_malloc(kind, bytes) : hbw_malloc(bytes);
  int err = errno;
  if (p) memset(p, 1, bytes);
  printf("{\"available\":%d,\"set\":%d,\"ptr\":%d,\"errno\":%d,", avail, set, p != NULL,
         p ? 0 : err);
  if (p) hm_bench_print_node_pages("nodes", p, bytes);
  else printf("\"nodes\":{}");
  printf("}\n");
  if (kind) memkind_free(NULL, p);
  else hbw_free(p);
  return 0;
}
