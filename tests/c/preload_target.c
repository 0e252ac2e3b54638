/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_run.py to run under libhetmem_preload.so (and
 * without it): it allocates through every hooked entry point, writes
 * patterns into large blocks whose total exceeds the fast budget, reads
 * them back, reallocs across the threshold, runs threads and fork+exec, and
 * checks every byte. Exit status 0 when all checks pass, 1 otherwise.
 *
 * usage: hm_preload_target check TOTAL_MIB   full check (TOTAL: MiB of large data)
 *        hm_preload_target exit N            prints to stdout and stderr, exits N
 *        hm_preload_target child             what the fork+exec child runs
 *        hm_preload_target forktouch 0|1     forks; the child reads (1) or not (0)
 *                                            a large block of the parent's: exit
 *                                            status 3 when it differs
 *        hm_preload_target hold MIB MARKER   fills MIB of large blocks, creates
 *                                            MARKER, then keeps touching them
 *                                            until killed (at most 120 s)
 *        hm_preload_target layout            prints where fresh large blocks
 *                                            start within their page
 */
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
static long checks;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

#define MIB ((size_t)1 << 20)

static void fail(const char *what, size_t a, size_t b) {
  pthread_mutex_lock(&report_lock);
  failures++;
  if (failures < 20) fprintf(stderr, "FAIL %s (%zu, %zu)\n", what, a, b);
  pthread_mutex_unlock(&report_lock);
}

static void check(int ok, const char *what, size_t a, size_t b) {
  __atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);
  if (!ok) fail(what, a, b);
}

static uint64_t word(uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i + 1;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

static void fill(void *p, size_t bytes, uint64_t seed) {
  uint64_t *w = p;
  for (size_t i = 0; i < bytes / 8; i++) w[i] = word(seed, i);
}

/* Number of words (of the first `bytes`) that differ from the pattern. */
static size_t verify(const void *p, size_t bytes, uint64_t seed) {
  const uint64_t *w = p;
  size_t bad = 0;
  for (size_t i = 0; i < bytes / 8; i++) bad += w[i] != word(seed, i);
  return bad;
}

static int all_zero(const void *p, size_t bytes) {
  const unsigned char *c = p;
  for (size_t i = 0; i < bytes; i += 4093) /* sampled: calloc'd memory */
    if (c[i]) return 0;
  return c[bytes - 1] == 0;
}

typedef struct block_s {
  void *p;
  size_t n;
  int kind; /* 0 malloc-family (free), 1 mmap (munmap) */
} block_t;

/* One large block from entry point k (of 9), filled with seed's pattern. */
static block_t alloc_kind(int k, size_t n, uint64_t seed) {
  block_t b = {NULL, n, 0};
  void *p = NULL;
  switch (k % 9) {
  case 0: p = malloc(n); break;
  case 1:
    p = calloc(n / 64, 64);
    check(p && all_zero(p, n), "calloc zeroed", n, 0);
    break;
  case 2: p = memalign(1 << 16, n); check(((uintptr_t)p & 0xffff) == 0, "memalign", n, 0); break;
  case 3: {
    int rc = posix_memalign(&p, 1 << 21, n);
    check(rc == 0 && ((uintptr_t)p & ((1 << 21) - 1)) == 0, "posix_memalign", n, (size_t)rc);
    break;
  }
  case 4: p = aligned_alloc(4096, n); check(((uintptr_t)p & 4095) == 0, "aligned_alloc", n, 0); break;
  case 5: p = valloc(n); check(((uintptr_t)p & 4095) == 0, "valloc", n, 0); break;
  case 6: p = pvalloc(n); check(((uintptr_t)p & 4095) == 0, "pvalloc", n, 0); break;
  case 7: p = reallocarray(NULL, n / 16, 16); break;
  case 8:
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
    b.kind = 1;
    check(p && all_zero(p, n), "mmap zeroed", n, 0);
    break;
  }
  check(p != NULL, "allocation", (size_t)k, n);
  if (!p) return b;
  if (b.kind == 0) check(malloc_usable_size(p) >= n, "usable size", malloc_usable_size(p), n);
  /* what numpy does to large arrays, and an access-pattern hint */
  {
    uintptr_t a0 = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    size_t an = ((uintptr_t)p + n - a0) & ~(size_t)4095;
    check(madvise((void *)a0, an, MADV_HUGEPAGE) == 0, "madvise hugepage", n, (size_t)errno);
    check(madvise((void *)a0, an, MADV_SEQUENTIAL) == 0, "madvise sequential", n, (size_t)errno);
  }
  b.p = p;
  fill(p, n, seed);
  return b;
}

static void release(block_t *b) {
  if (!b->p) return;
  if (b->kind) check(munmap(b->p, b->n) == 0, "munmap", b->n, 0);
  else free(b->p);
  b->p = NULL;
}

/* Large blocks of total_mib MiB in all, every entry point, then verified. */
static void large_blocks(size_t total_mib, uint64_t seed0) {
  size_t nblocks = 0, cap = 256;
  block_t *bs = calloc(cap, sizeof *bs);
  size_t done = 0;
  for (int k = 0; done < total_mib * MIB && nblocks < cap; k++) {
    size_t n = (size_t)(1 + k % 4) * MIB + (size_t)(k % 3) * 4096;
    bs[nblocks] = alloc_kind(k, n, seed0 + (uint64_t)nblocks);
    done += n;
    nblocks++;
  }
  for (size_t i = 0; i < nblocks; i++)
    if (bs[i].p) {
      size_t bad = verify(bs[i].p, bs[i].n, seed0 + i);
      check(bad == 0, "pattern read back", i, bad);
    }
  for (size_t i = 0; i < nblocks; i++) release(&bs[i]);
  free(bs);
}

static void reallocs(void) {
  /* small -> large -> larger -> small, data kept at each step */
  size_t n = 1000;
  char *p = malloc(n);
  fill(p, n, 7);
  char *q = realloc(p, 3 * MIB);
  check(q && verify(q, n, 7) == 0, "realloc small->large", n, 0);
  fill(q, 3 * MIB, 8);
  char *r = realloc(q, 9 * MIB + 123);
  check(r && verify(r, 3 * MIB, 8) == 0, "realloc large->larger", 3 * MIB, 0);
  fill(r, 9 * MIB, 9);
  char *s = realloc(r, 2 * MIB); /* shrink, stays large */
  check(s && verify(s, 2 * MIB, 9) == 0, "realloc large->smaller", 2 * MIB, 0);
  char *t = realloc(s, 4000);
  check(t && verify(t, 4000, 9) == 0, "realloc large->small", 4000, 0);
  free(t);
  check(realloc(malloc(2 * MIB), 0) == NULL, "realloc(p, 0)", 0, 0);
  /* mremap of an anonymous mapping, grown with a move */
  void *m = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(m != MAP_FAILED, "mmap for mremap", 0, 0);
  fill(m, 2 * MIB, 10);
  void *m2 = mremap(m, 2 * MIB, 6 * MIB, MREMAP_MAYMOVE);
  check(m2 != MAP_FAILED && verify(m2, 2 * MIB, 10) == 0, "mremap grow", 0, 0);
  if (m2 != MAP_FAILED) check(munmap(m2, 6 * MIB) == 0, "munmap after mremap", 0, 0);
  /* trimming the tail of a mapping keeps the head's data */
  char *tm = mmap(NULL, 4 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(tm != MAP_FAILED, "mmap for trim", 0, 0);
  if (tm != MAP_FAILED) {
    fill(tm, 4 * MIB, 11);
    check(munmap(tm + 3 * MIB, MIB) == 0, "munmap tail", 0, 0);
    check(verify(tm, 3 * MIB, 11) == 0, "head after trim", 0, 0);
    check(munmap(tm, 4 * MIB) == 0, "munmap trimmed mapping", 0, 0);
  }
  /* many small ones, mixed sizes, freed in another order */
  void *ps[1000];
  for (int i = 0; i < 1000; i++) {
    ps[i] = malloc((size_t)(i * 37) % 5000 + 1);
    memset(ps[i], i & 0xff, (size_t)(i * 37) % 5000 + 1);
  }
  for (int i = 999; i >= 0; i -= 2) free(ps[i]);
  for (int i = 0; i < 1000; i += 2) {
    check(((unsigned char *)ps[i])[0] == (i & 0xff), "small block", (size_t)i, 0);
    free(ps[i]);
  }
  free(NULL);
  check(malloc_usable_size(NULL) == 0, "usable(NULL)", 0, 0);
}

static size_t g_thread_mib;

static void *thread_main(void *arg) {
  uint64_t seed = 1000 + (uint64_t)(uintptr_t)arg * 100;
  large_blocks(g_thread_mib, seed);
  for (int i = 0; i < 20000; i++) { /* small churn alongside */
    char *volatile p = malloc((size_t)(i % 512) + 8);
    p[0] = (char)i;
    free(p);
  }
  return NULL;
}

static void threads(size_t per_thread_mib) {
  enum { N = 4 };
  pthread_t th[N];
  g_thread_mib = per_thread_mib;
  for (int i = 0; i < N; i++)
    check(pthread_create(&th[i], NULL, thread_main, (void *)(uintptr_t)i) == 0, "thread", 0, 0);
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
}

static void fork_exec(const char *self) {
  /* data made before the fork must still be right in the parent after it */
  char *big = malloc(3 * MIB);
  fill(big, 3 * MIB, 77);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "child", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  check(pid > 0 && waitpid(pid, &st, 0) == pid, "fork", 0, 0);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exit status", (size_t)WEXITSTATUS(st), 0);
  check(verify(big, 3 * MIB, 77) == 0, "parent data after fork", 0, 0);
  /* fork without exec: the child makes and checks large blocks of its own
   * (the parent's pager regions are not inherited) */
  pid = fork();
  if (pid == 0) {
    large_blocks(8, 555);
    reallocs();
    _exit(failures ? 1 : 0);
  }
  check(pid > 0 && waitpid(pid, &st, 0) == pid, "fork", 0, 0);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child", (size_t)WEXITSTATUS(st), 0);
  check(verify(big, 3 * MIB, 77) == 0, "parent data after second fork", 0, 0);
  free(big);
}

/* fork without exec, then the child touches a large block its parent made
 * (touch = 1) or does not (touch = 0). Prints the child's end ("exit N" or
 * "signal N"); exit 0 when the parent's data is intact. */
static int forktouch(int touch) {
  char *big = malloc(8 * MIB);
  if (!big) return 1;
  fill(big, 8 * MIB, 91);
  fflush(stdout);
  pid_t pid = fork();
  /* the child reads the whole block: its copy must be the parent's data */
  if (pid == 0) _exit(touch ? (verify(big, 8 * MIB, 91) != 0 ? 3 : 0) : 0);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  if (WIFSIGNALED(st)) printf("signal %d\n", WTERMSIG(st));
  else printf("exit %d\n", WEXITSTATUS(st));
  int bad = verify(big, 8 * MIB, 91) != 0;
  free(big);
  return bad;
}

/* For the kill tests: a test must kill the process while its pager regions
 * are live, whatever the speed of the machine, so the marker says when the
 * data is in place and the loop keeps faulting until the signal comes. The
 * time limit keeps a broken test from leaving a process behind for long. */
static int hold(const char *mib_arg, const char *marker) {
  size_t mib = (size_t)strtoul(mib_arg, NULL, 10);
  size_t n = mib / 4 + 1;
  char **blocks = calloc(n, sizeof *blocks);
  if (!blocks) return 1;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(4 * MIB);
    if (!blocks[i]) return 1;
    fill(blocks[i], 4 * MIB, 300 + i);
  }
  int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return 1;
  close(fd);
  time_t end = time(NULL) + 120;
  for (size_t i = 0; time(NULL) < end; i = (i + 1) % n)
    if (verify(blocks[i], 4 * MIB, 300 + i) != 0) return 1;
  return 3;
}

/* The budget bounds the process: small_mib in 64 KiB blocks (below the
 * threshold: plain memory), held while big_mib in one large block is
 * written and read twice (through the pager). Waits 1 s in between so
 * that the pager has measured the small blocks (every 100 ms). Prints "outside ok". */
static int outside(const char *small_arg, const char *big_arg) {
  size_t small = (size_t)strtoul(small_arg, NULL, 10) * 16, big = strtoul(big_arg, NULL, 10) * MIB;
  char **blocks = calloc(small, sizeof *blocks);
  char *b = NULL;
  if (!blocks) return 1;
  for (size_t i = 0; i < small; i++) {
    if (!(blocks[i] = malloc(64 << 10))) return 1;
    fill(blocks[i], 64 << 10, 500 + i);
  }
  struct timespec ts = {1, 0}; /* 10 of the pager's measures: margin for a busy machine */
  nanosleep(&ts, NULL);
  if (!(b = malloc(big))) return 1;
  fill(b, big, 77);
  int bad = verify(b, big, 77) != 0 || verify(b, big, 77) != 0;
  for (size_t i = 0; i < small; i++) {
    bad |= verify(blocks[i], 64 << 10, 500 + i) != 0;
    free(blocks[i]);
  }
  free(blocks);
  free(b);
  if (!bad) printf("outside ok\n");
  return bad;
}

/* Where each kind of large block starts within its page, for blocks of
 * sizes not freed before (glibc serves them with mmap). Without an
 * interposer this is glibc's placement, which hetmem must keep. */
static int layout(void) {
  void *m = malloc(8 * MIB), *c = calloc(1, 9 * MIB), *r = realloc(NULL, 10 * MIB);
  void *a = NULL;
  if (posix_memalign(&a, 64, 11 * MIB)) a = NULL;
  void *p = aligned_alloc(4096, 12 * MIB);
  void *q = mmap(NULL, 13 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!m || !c || !r || !a || !p || q == MAP_FAILED) return 1;
  printf("malloc %lu calloc %lu realloc %lu posix_memalign64 %lu aligned_alloc4096 %lu mmap %lu\n",
         (unsigned long)((uintptr_t)m % 4096), (unsigned long)((uintptr_t)c % 4096),
         (unsigned long)((uintptr_t)r % 4096), (unsigned long)((uintptr_t)a % 64),
         (unsigned long)((uintptr_t)p % 4096), (unsigned long)((uintptr_t)q % 4096));
  free(m);
  free(c);
  free(r);
  free(a);
  free(p);
  return munmap(q, 13 * MIB) ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "layout") == 0) return layout();
  if (argc >= 3 && strcmp(argv[1], "exit") == 0) {
    printf("to stdout\n");
    fprintf(stderr, "to stderr\n");
    return atoi(argv[2]);
  }
  if (argc >= 2 && strcmp(argv[1], "child") == 0) {
    large_blocks(12, 4242);
    reallocs();
    if (failures) fprintf(stderr, "child: %d failures\n", failures);
    return failures ? 1 : 0;
  }
  if (argc >= 4 && strcmp(argv[1], "hold") == 0) return hold(argv[2], argv[3]);
  if (argc >= 4 && strcmp(argv[1], "outside") == 0) return outside(argv[2], argv[3]);
  if (argc >= 3 && strcmp(argv[1], "forktouch") == 0) return forktouch(atoi(argv[2]));
  if (argc < 3 || strcmp(argv[1], "check") != 0) {
    fprintf(stderr, "usage: %s check TOTAL_MIB | exit N | child | hold MIB MARKER | forktouch 0|1 | layout\n", argv[0]);
    return 2;
  }
  size_t total = (size_t)strtoul(argv[2], NULL, 10);
  large_blocks(total, 1);
  reallocs();
  threads(total / 4 + 1);
  fork_exec(argv[0]);
  printf("checks=%ld failures=%d\n", checks, failures);
  return failures ? 1 : 0;
}
