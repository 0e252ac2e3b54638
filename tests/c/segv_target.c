/* SPDX-License-Identifier: BSD-3-Clause */
/* A program with its own SIGSEGV handler, as gfortran's runtime and many
 * HPC codes have, for tests/integration/test_profile_samplers.py to run under `hetmem
 * profile` (whose portable sampler takes SIGSEGVs of its own): it installs
 * the handler with sigaction or signal, works on a 16 MiB block for WORK_MS
 * (the sampler's faults must never reach it), checks that sigaction reads
 * its handler back, then faults on a PROT_NONE page of its own, which its
 * handler must see: it jumps back out and the program exits normally.
 * Prints "handler calls N, own handler read back R, caught C".
 *
 * usage: hm_segv_target sigaction|signal WORK_MS */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static sigjmp_buf hm__jump;
static volatile sig_atomic_t hm__calls;

static void on_segv_plain(int sig) {
  (void)sig;
  hm__calls++;
  siglongjmp(hm__jump, 1);
}

static void on_segv_info(int sig, siginfo_t *si, void *uc) {
  (void)si;
  (void)uc;
  on_segv_plain(sig);
}

__attribute__((noinline)) static double *alloc_work(size_t n) { return malloc(n * sizeof(double)); }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s sigaction|signal WORK_MS\n", argv[0]);
    return 2;
  }
  int use_signal = strcmp(argv[1], "signal") == 0;
  if (use_signal) {
    if (signal(SIGSEGV, on_segv_plain) == SIG_ERR) return 1;
  } else {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv_info;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL)) return 1;
  }
  size_t n = (size_t)2 << 20;
  double *w = alloc_work(n);
  if (!w) return 1;
  for (size_t i = 0; i < n; i++) w[i] = (double)i;
  double s = 0, end = now_ms() + atof(argv[2]);
  while (now_ms() < end)
    for (size_t i = 0; i < n; i += 512) s += w[i]++;
  long during = hm__calls;
  struct sigaction cur;
  sigaction(SIGSEGV, NULL, &cur);
  int mine = use_signal ? cur.sa_handler == on_segv_plain : cur.sa_sigaction == on_segv_info;
  char *guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (guard == MAP_FAILED) return 1;
  int caught = 0;
  if (sigsetjmp(hm__jump, 1) == 0)
    guard[0] = 1;
  else
    caught = 1;
  printf("handler calls %ld, own handler read back %d, caught %d\n", during, mine, caught);
  free(w);
  return s < 0;
}
