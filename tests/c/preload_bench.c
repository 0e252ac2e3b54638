/* SPDX-License-Identifier: BSD-3-Clause */
/* Allocation-heavy microbenchmark for the interposer's small-allocation
 * cost: 2 threads each make PAIRS malloc/free pairs of mixed small sizes
 * (16 B .. 4 KiB, a window of 64 live blocks per thread).
 *
 * usage: hm_preload_bench run [PAIRS]
 *          one measurement; prints "ns_per_pair=<cpu ns> wall_ns_per_pair=<x>"
 *        hm_preload_bench compare PRELOAD_SO [PAIRS] [ROUNDS]
 *          runs `run` in child processes without and with LD_PRELOAD,
 *          alternating, ROUNDS times each, and prints the median of each
 *          and their ratio (preload / none). Side by side in one run: the
 *          machine is shared and noisy.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 2
#define WINDOW 64

static long g_pairs;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_cpu[THREADS];

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  double c0 = thread_cpu();
  uint64_t x = 88172645463325252ull + (uint64_t)(uintptr_t)arg;
  void *live[WINDOW] = {0};
  for (long i = 0; i < g_pairs; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t size = 16u << (x % 9); /* 16 .. 4096 */
    size += x % 61;
    unsigned slot = (unsigned)(x >> 40) % WINDOW;
    free(live[slot]);
    live[slot] = malloc(size);
    ((volatile char *)live[slot])[0] = (char)i;
  }
  for (int i = 0; i < WINDOW; i++) free(live[i]);
  g_cpu[(uintptr_t)arg] = thread_cpu() - c0;
  return NULL;
}

/* CPU time per pair (summed over the threads): less sensitive than wall
 * time to other work descheduling us on a shared machine. */
static double run_once(long pairs, double *wall_ns) {
  pthread_t th[THREADS];
  g_pairs = pairs / THREADS;
  double t0 = now();
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  if (wall_ns) *wall_ns = (now() - t0) * 1e9 / (double)pairs;
  double cpu = 0;
  for (int i = 0; i < THREADS; i++) cpu += g_cpu[i];
  return cpu * 1e9 / (double)pairs;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Runs `self run pairs` (with preload_so in LD_PRELOAD when not NULL) and
 * returns its ns per pair, or -1. */
static double child(const char *self, const char *preload_so, long pairs) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (preload_so) {
      setenv("LD_PRELOAD", preload_so, 1);
      if (!getenv("HETMEM_FAST_BUDGET")) setenv("HETMEM_FAST_BUDGET", "64MiB", 1);
    } else {
      unsetenv("LD_PRELOAD");
    }
    char arg[32];
    snprintf(arg, sizeof arg, "%ld", pairs);
    execl(self, self, "run", arg, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char buf[128] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  double v = -1;
  if (n > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) sscanf(buf, "ns_per_pair=%lf", &v);
  return v;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "run") == 0) {
    long pairs = argc >= 3 ? atol(argv[2]) : 10000000L;
    run_once(pairs / 10, NULL); /* warm the arenas */
    double wall = 0;
    double cpu = run_once(pairs, &wall);
    printf("ns_per_pair=%.3f wall_ns_per_pair=%.3f\n", cpu, wall);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "compare") == 0) {
    long pairs = argc >= 4 ? atol(argv[3]) : 10000000L;
    int rounds = argc >= 5 ? atoi(argv[4]) : 5;
    if (rounds < 1 || rounds > 64 || pairs < THREADS) {
      fprintf(stderr, "bad PAIRS or ROUNDS\n");
      return 2;
    }
    double none[64], pre[64];
    for (int r = 0; r < rounds; r++) {
      none[r] = child(argv[0], NULL, pairs);
      pre[r] = child(argv[0], argv[2], pairs);
      if (none[r] < 0 || pre[r] < 0) {
        fprintf(stderr, "a benchmark run failed\n");
        return 1;
      }
    }
    qsort(none, (size_t)rounds, sizeof none[0], cmp_double);
    qsort(pre, (size_t)rounds, sizeof pre[0], cmp_double);
    double a = none[rounds / 2], b = pre[rounds / 2];
    printf("malloc/free pairs: %ld on %d threads, %d rounds each, medians\n", pairs, THREADS,
           rounds);
    printf("no preload: %.2f CPU ns/pair\npreload:    %.2f CPU ns/pair\nratio:      %.3f\n", a,
           b, b / a);
    return 0;
  }
  fprintf(stderr, "usage: %s run [PAIRS] | compare PRELOAD_SO [PAIRS] [ROUNDS]\n", argv[0]);
  return 2;
}
