/* SPDX-License-Identifier: BSD-3-Clause */
/* A program for tests/integration/test_small_blocks.py to run under
 * libhetmem_preload.so with small_blocks on (and without it): many threads
 * allocate small blocks through every hooked entry point, fill them, hand
 * some to another thread to free, resize them, and check every byte,
 * alignment and usable size, while the blocks alive at once add up to more
 * than the budget. Exit status 0 when all checks pass, 1 otherwise.
 *
 * usage: hm_small_target mix MIB THREADS ROUNDS   MIB: small blocks alive at once
 *        hm_small_target forkstress N              forks N times while two threads
 *                                                  churn small and large blocks
 *        hm_small_target dlopen                    loads libz; says whether its link
 *                                                  map shares a mapping with a small block
 *        hm_small_target fork 0|1                  forks; the child reads (1) or not
 *                                                  (0) a small block of the parent's:
 *                                                  exit status 3 when it differs
 */
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static long failures;

static void check(int ok, const char *what, size_t a) {
  if (ok) return;
  if (__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED) < 20)
    fprintf(stderr, "FAIL %s (%zu)\n", what, a);
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

/* Byte i of a block of seed s: every byte depends on s and its index. */
static unsigned char byte_at(uint64_t s, size_t i) {
  return (unsigned char)(mix64(s + i / 8) >> (8 * (i % 8)));
}

static void fill(unsigned char *p, size_t n, uint64_t s) {
  for (size_t i = 0; i < n; i++) p[i] = byte_at(s, i);
}

static int intact(const unsigned char *p, size_t n, uint64_t s) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != byte_at(s, i)) return 0;
  return 1;
}

static int zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

typedef struct {
  unsigned char *p;
  size_t n;
  uint64_t seed;
} slot_t;

/* Blocks handed from one thread to the next, which frees them. */
typedef struct {
  pthread_mutex_t lk;
  slot_t s[256];
  int n;
} hand_t;

typedef struct {
  int id, nthreads, rounds;
  size_t slots;
  hand_t *hands;
} arg_t;

/* Sizes as a program's: mostly below 1 KiB, some to 16 KiB, a few up to
 * 320 KiB.
 * Mean about 4.5 KiB. */
static size_t pick_size(uint64_t r) {
  unsigned k = r % 1000;
  if (k < 700) return 1 + (r >> 10) % 1024;
  if (k < 990) return 1024 + (r >> 10) % (15 << 10);
  return (16 << 10) + (r >> 10) % (304 << 10);
}

/* A block through one of the entry points; alignment and zeroing checked. */
static unsigned char *get(size_t n, uint64_t r) {
  void *p = NULL;
  switch ((r >> 40) % 5) {
  case 0: p = malloc(n); break;
  case 1:
    p = calloc(1, n);
    if (p) check(zero(p, n), "calloc zero", n);
    break;
  case 2:
    if (posix_memalign(&p, 64, n)) p = NULL;
    check(((uintptr_t)p & 63) == 0, "posix_memalign 64", n);
    break;
  case 3:
    p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    check(((uintptr_t)p & 4095) == 0, "aligned_alloc 4096", n);
    break;
  default: p = realloc(NULL, n); break;
  }
  check(p != NULL, "allocation", n);
  check(((uintptr_t)p & 15) == 0, "16-byte alignment", n);
  if (p) check(malloc_usable_size(p) >= n, "usable size", n);
  return p;
}

/* Frees (or resizes, then frees) a block after checking it. */
static void put(slot_t *s, uint64_t r) {
  check(intact(s->p, s->n, s->seed), "contents", s->n);
  if (r % 4 == 0) { /* resize: the common part survives */
    size_t m = pick_size(r >> 3);
    unsigned char *q = realloc(s->p, m);
    check(q != NULL, "realloc", m);
    if (!q) return;
    check(intact(q, m < s->n ? m : s->n, s->seed), "realloc contents", m);
    s->p = q;
  }
  free(s->p);
  s->p = NULL;
}

static void hand_over(hand_t *h, slot_t *s) {
  pthread_mutex_lock(&h->lk);
  if (h->n < 256) {
    h->s[h->n++] = *s;
    s->p = NULL;
  }
  pthread_mutex_unlock(&h->lk);
}

static void drain(hand_t *h, uint64_t r) {
  pthread_mutex_lock(&h->lk);
  for (int i = 0; i < h->n; i++) put(&h->s[i], r + (uint64_t)i);
  h->n = 0;
  pthread_mutex_unlock(&h->lk);
}

static void *worker(void *v) {
  arg_t *a = v;
  slot_t *slots = calloc(a->slots, sizeof *slots);
  if (!slots) return (void *)1;
  uint64_t r = mix64((uint64_t)a->id + 1);
  hand_t *next = &a->hands[(a->id + 1) % a->nthreads], *mine = &a->hands[a->id];
  for (int round = 0; round < a->rounds; round++) {
    for (size_t i = 0; i < a->slots; i++) {
      r = mix64(r + i);
      slot_t *s = &slots[i];
      if (s->p) {
        if (r % 8 == 0) hand_over(next, s);
        else put(s, r);
      }
      if (s->p) continue;
      s->n = pick_size(r);
      s->seed = r;
      if ((s->p = get(s->n, r))) fill(s->p, s->n, s->seed);
    }
    drain(mine, r);
  }
  for (size_t i = 0; i < a->slots; i++)
    if (slots[i].p) put(&slots[i], 1);
  free(slots);
  return NULL;
}

static int mix(size_t mib, int nthreads, int rounds) {
  pthread_t t[64];
  arg_t a[64];
  hand_t *hands = calloc((size_t)nthreads, sizeof *hands);
  if (!hands || nthreads < 1 || nthreads > 64) return 1;
  /* mean block about 4.5 KiB (pick_size): slots per thread for mib alive */
  size_t slots = mib * MIB / 4608 / (size_t)nthreads + 1;
  for (int i = 0; i < nthreads; i++) {
    pthread_mutex_init(&hands[i].lk, NULL);
    a[i] = (arg_t){i, nthreads, rounds, slots, hands};
    if (pthread_create(&t[i], NULL, worker, &a[i])) return 1;
  }
  for (int i = 0; i < nthreads; i++) {
    void *rv = NULL;
    pthread_join(t[i], &rv);
    check(rv == NULL, "thread", (size_t)i);
  }
  for (int i = 0; i < nthreads; i++) drain(&hands[i], 7);
  free(hands);
  if (failures) return 1;
  printf("mix ok\n");
  return 0;
}

static int forked(int touch) {
  unsigned char *p = malloc(1000);
  if (!p) return 1;
  fill(p, 1000, 5);
  fflush(stdout);
  pid_t pid = fork();
  /* the child reads the block and allocates and frees in the heap */
  if (pid == 0) {
    if (!touch) _exit(0);
    unsigned char *q = malloc(100);
    if (q) fill(q, 100, 6);
    int ok = q && intact(p, 1000, 5) && intact(q, 100, 6);
    free(q);
    free(p);
    _exit(ok ? 0 : 3);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  if (WIFSIGNALED(st)) printf("signal %d\n", WTERMSIG(st));
  else printf("exit %d\n", WEXITSTATUS(st));
  int bad = !intact(p, 1000, 5);
  free(p);
  return bad;
}

/* Threads that keep allocating, filling, checking and freeing small and
 * large (2 MiB) blocks while the main thread forks: each child checks the
 * blocks the main thread holds, and allocates and frees itself. A fork
 * that copied a block while another thread freed it, or a child that
 * inherited a held lock, fails or hangs here. */
static volatile int churn_stop;

static void *churner(void *v) {
  uint64_t r = mix64((uint64_t)(uintptr_t)v + 11);
  while (!churn_stop) {
    r = mix64(r);
    size_t n = r % 3 ? 1 + r % 5000 : 2 * MIB;
    unsigned char *p = malloc(n);
    if (!p) continue;
    fill(p, n, r);
    check(intact(p, n, r), "churned block", n);
    free(p);
  }
  return NULL;
}

static int forkstress(int forks) {
  enum { HELD = 64 };
  unsigned char *held[HELD];
  size_t len[HELD];
  for (int i = 0; i < HELD; i++) {
    len[i] = i % 8 ? 100 + (size_t)i * 37 : (size_t)(i / 8 + 1) * MIB;
    if (!(held[i] = malloc(len[i]))) return 1;
    fill(held[i], len[i], 1000 + (uint64_t)i);
  }
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)i)) return 1;
  int bad = 0;
  for (int k = 0; k < forks && !bad; k++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      int ok = 1;
      for (int i = 0; i < HELD; i++) ok &= intact(held[i], len[i], 1000 + (uint64_t)i);
      unsigned char *q = malloc(3 * MIB), *s = malloc(50);
      ok &= q && s;
      if (q) fill(q, 3 * MIB, 7), ok &= intact(q, 3 * MIB, 7);
      free(q);
      free(s);
      free(held[0]);
      _exit(ok ? 0 : 3);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "FAIL fork %d: status %d\n", k, st);
      bad = 1;
    }
  }
  churn_stop = 1;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < HELD; i++) {
    bad |= !intact(held[i], len[i], 1000 + (uint64_t)i);
    free(held[i]);
  }
  if (bad || failures) return 1;
  printf("forkstress ok\n");
  return 0;
}

/* Blocks of 896 KiB (small: below the 1 MiB threshold), mib MiB of them,
 * written and freed; then a large array of big MiB written and freed; then
 * the blocks again, written and checked. What the freed blocks held is
 * dead: room for the array must not be made by writing it to the storage
 * tier (the test reads the pager's counters). */
static int freed(size_t mib, size_t bigmib) {
  const size_t bs = 896 << 10, n = (mib << 20) / bs;
  unsigned char **b = calloc(n, sizeof *b);
  if (!b) return 1;
  int bad = 0;
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < n; i++) {
      b[i] = malloc(bs);
      if (!b[i]) return 1;
      fill(b[i], bs, (uint64_t)(round * n + i));
    }
    for (size_t i = 0; i < n; i++) {
      bad |= !intact(b[i], bs, (uint64_t)(round * n + i));
      free(b[i]);
    }
    if (round) break;
    unsigned char *big = malloc(bigmib << 20);
    if (!big) return 1;
    fill(big, bigmib << 20, 7);
    bad |= !intact(big, bigmib << 20, 7);
    free(big);
  }
  free(b);
  if (bad) return 1;
  printf("freed ok\n");
  return 0;
}

/* The mapping of /proc/self/maps that holds a, into [lo, hi); 0 if found. */
static int mapping_of(uintptr_t a, uintptr_t *lo, uintptr_t *hi) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  unsigned long l, h;
  int rc = -1;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%lx-%lx", &l, &h) == 2 && a >= l && a < h) {
      *lo = l, *hi = h, rc = 0;
      break;
    }
  fclose(f);
  return rc;
}

/* A library loaded now: the loader's record of it (its link map, which the
 * loader reads holding its lock) must not share a mapping with the
 * program's small blocks. */
static int dlopened(void) {
  unsigned char *p = malloc(64);
  void *lib = dlopen("libz.so.1", RTLD_NOW);
  struct link_map *lm = NULL;
  if (!p || !lib || dlinfo(lib, RTLD_DI_LINKMAP, &lm) || !lm) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  uintptr_t lo = 0, hi = 0, llo = 0, lhi = 0;
  if (mapping_of((uintptr_t)p, &lo, &hi) || mapping_of((uintptr_t)lm, &llo, &lhi)) return 1;
  printf("%s\n", lo == llo ? "link map beside the program's blocks" : "link map apart");
  dlclose(lib);
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "mix") == 0)
    return mix(strtoul(argv[2], NULL, 10), atoi(argv[3]), atoi(argv[4]));
  if (argc >= 3 && strcmp(argv[1], "fork") == 0) return forked(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "forkstress") == 0) return forkstress(atoi(argv[2]));
  if (argc >= 2 && strcmp(argv[1], "dlopen") == 0) return dlopened();
  if (argc >= 4 && strcmp(argv[1], "freed") == 0)
    return freed(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
  fprintf(stderr, "usage: hm_small_target mix MIB THREADS ROUNDS | fork 0|1 | freed MIB BIGMIB\n");
  return 2;
}
