/* SPDX-License-Identifier: BSD-3-Clause */
/* Process-level behaviour of the pager: fork (the child never reads zeros
 * where data was: regions are not inherited and touching one is SIGSEGV),
 * signals delivered to faulting threads, and a SIGKILLed process leaves no
 * backing file behind. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)

static atomic_ulong signals_seen;
static void on_signal(int sig) {
  (void)sig;
  atomic_fetch_add(&signals_seen, 1);
}

static void on_segv(int sig) {
  (void)sig;
  _exit(77);
}

typedef struct {
  pthread_t target;
  atomic_int stop;
} pester_t;

static void *pester(void *arg) {
  pester_t *ps = arg;
  struct timespec ts = {0, 20000};
  while (!atomic_load(&ps->stop)) {
    pthread_kill(ps->target, SIGUSR1);
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static hm_pager_t *open_pager(hm_ctx_t *ctx, const char *dir) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = 4 * MiB;
  cfg.backing_dir = dir;
  cfg.fetch_unit = 128 * 1024;
  hm_pager_t *p = NULL;
  if (hm_pager_open(ctx, &cfg, &p)) {
    fprintf(stderr, "open: %s\n", hm_ctx_last_error(ctx));
    return NULL;
  }
  return p;
}

int main(void) {
  const char *dir = hm_sdm_scratch();
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = open_pager(ctx, dir);
  CHECK(p != NULL);
  if (!p) return hm_test_done("test_sdm_process");
  size_t len = 32 * MiB, n = len / 8;
  uint64_t *a = NULL;
  CHECK_EQ_INT(hm_pager_map(p, len, (void **)&a), 0);
  if (!a) return hm_test_done("test_sdm_process");

  /* Signals: a thread hammered with SIGUSR1 (no SA_RESTART) while it faults. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, NULL);
  pester_t ps = {.target = pthread_self()};
  pthread_t pt;
  CHECK_EQ_INT(pthread_create(&pt, NULL, pester, &ps), 0);
  for (size_t i = 0; i < n; i++) a[i] = hm_sdm_mix(i);
  uint64_t bad = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < n; i++) bad += a[i] != hm_sdm_mix(i);
  atomic_store(&ps.stop, 1);
  pthread_join(pt, NULL);
  printf("signals delivered during faults: %lu\n", (unsigned long)atomic_load(&signals_seen));
  CHECK(atomic_load(&signals_seen) > 0);
  CHECK_EQ_INT(bad, 0);

  /* Fork: the child does not have the region; touching it is SIGSEGV, never
   * zeros. Other memory works in the child, and the parent keeps its data. */
  static uint64_t ordinary = 42;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* Report the SIGSEGV by exit code: sanitizers would otherwise turn it
     * into their own exit status. */
    struct sigaction sv;
    memset(&sv, 0, sizeof sv);
    sv.sa_handler = on_segv;
    sigaction(SIGSEGV, &sv, NULL);
    if (ordinary != 42) _exit(3);
    volatile uint64_t v = a[12345]; /* SIGSEGV expected here */
    _exit(v == hm_sdm_mix(12345) ? 4 : 5);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 77);
  bad = 0;
  for (size_t i = 0; i < n; i += 61) bad += a[i] != hm_sdm_mix(i);
  CHECK_EQ_INT(bad, 0);
  /* A child that never touches the region exits normally; the parent's
   * pager refuses to map in it (it must open its own). */
  pid = fork();
  if (pid == 0) {
    void *c = NULL;
    if (hm_pager_map(p, MiB, &c) != -ECHILD || c != NULL) _exit(2);
    _exit(ordinary == 42 ? 0 : 1);
  }
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK_EQ_INT(hm_pager_unmap(p, a, len), 0);
  CHECK_EQ_INT(hm_pager_close(p), 0);

  /* SIGKILL: a process that mapped and wrote, killed mid-run, leaves the
   * directory as it found it. */
  char sub[700];
  snprintf(sub, sizeof sub, "%s/kill", dir);
  CHECK_EQ_INT(mkdir(sub, 0700), 0);
  int before = hm_sdm_count_files(sub);
  int fds[2];
  CHECK_EQ_INT(pipe(fds), 0);
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    close(fds[0]);
    hm_ctx_t *c2 = NULL;
    if (hm_ctx_new(&c2, NULL)) _exit(2);
    hm_pager_t *p2 = open_pager(c2, sub);
    uint64_t *b = NULL;
    if (!p2 || hm_pager_map(p2, 16 * MiB, (void **)&b)) _exit(3);
    for (size_t i = 0; i < 16 * MiB / 8; i++) b[i] = i;
    if (write(fds[1], "x", 1) != 1) _exit(4);
    for (;;) /* keep faulting until killed */
      for (size_t i = 0; i < 16 * MiB / 8; i += 512) b[i]++;
  }
  close(fds[1]);
  char c = 0;
  CHECK_EQ_INT(read(fds[0], &c, 1), 1);
  close(fds[0]);
  kill(pid, SIGKILL);
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  int after = hm_sdm_count_files(sub);
  printf("files before=%d after=%d\n", before, after);
  CHECK_EQ_INT(before, 0);
  CHECK_EQ_INT(after, 0);
  rmdir(sub);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_process");
}
