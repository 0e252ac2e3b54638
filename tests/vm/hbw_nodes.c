/* Built by tests/vm/test_vm.py against include/hbwmalloc.h and -lhetmem,
 * run in a guest: sets the policy named by argv[1] (none, bind, preferred,
 * interleave, bind_all), hbw_malloc's argv[2] MiB, touches them and prints
 * where the kernel put the pages (move_pages(2) queries), as one JSON line:
 * {"available": A, "set": RC, "ptr": 0|1, "nodes": {"N": pages, ...}}. */
#define _GNU_SOURCE
#include <hbwmalloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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
  char *p = hbw_malloc(bytes);
  unsigned long cnt[8] = {0};
  if (p) {
    memset(p, 1, bytes);
    enum { B = 512 };
    void *pages[B];
    int st[B];
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, e = (uintptr_t)p + bytes;
    while (a + 4096 <= e) {
      unsigned long n = 0;
      for (; n < B && a + 4096 <= e; n++, a += 4096) pages[n] = (void *)a;
      if (syscall(SYS_move_pages, 0, n, pages, NULL, st, 0) != 0) break;
      for (unsigned long i = 0; i < n; i++)
        if (st[i] >= 0 && st[i] < 8) cnt[st[i]]++;
    }
  }
  printf("{\"available\":%d,\"set\":%d,\"ptr\":%d,\"nodes\":{", avail, set, p != NULL);
  for (int k = 0, first = 1; k < 8; k++)
    if (cnt[k]) {
      printf("%s\"%d\":%lu", first ? "" : ",", k, cnt[k]);
      first = 0;
    }
  printf("}}\n");
  hbw_free(p);
  return 0;
}
