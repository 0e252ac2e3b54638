/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-placement: the built-in workloads of `hetmem bench placement`.
 *
 * Several arrays, each allocated by its own non-inlined function (so each
 * is its own allocation site), accessed with skewed frequency:
 *   hot_a, hot_b   20% of the footprint, updated --hot-passes times per
 *                  iteration (the data a fast tier should hold);
 *   cold_x/y/z     80% of the footprint, per iteration either swept once
 *                  (--variant sweep: more bytes than a 25% budget) or
 *                  touched sparsely (--variant sparse: one cache line in
 *                  every --stride pages, default 2048: 8 MiB, so that most
 *                  fetch units of a pager are not touched either).
 * --variant even: no hot or cold arrays: cold_x/y/z hold the whole footprint
 *                  (a third each) and every iteration updates each of them
 *                  --hot-passes times, front to back (three equally hot
 *                  arrays: for split placement, when together they need
 *                  more than the fast tier has and each alone too);
 * --variant mixed: the same arrays, each pass updating all three in one
 *                  loop (x[i], y[i] and z[i] together, as STREAM's triad).
 * --variant alloc: the allocation-heavy benchmark: --threads threads make
 * --pairs malloc/free pairs in all of mixed sizes (16 B .. 64 KiB, skewed
 * small, a window of live blocks per thread); with --ab SLICES, in as many
 * slices alternating the program's malloc/free with glibc's own (each kind
 * making --pairs pairs), each slice timed (see ab_worker).
 *
 * Prints one JSON line: variant, seconds (the timed iterations or the
 * allocation loop), hot_seconds (of which in the hot passes), bytes, cold
 * bytes touched per iteration, a checksum.
 * With --numa-policies, also each array's NUMA policy from numa_maps and
 * its pages per node (numa_pages, from move_pages(2)); with
 * --huge-pages, the KiB of each array that transparent huge pages back.
 * With --scratch-b (sweep and sparse), hot_b is a scratch array: made for
 * each iteration's hot passes and freed before the cold arrays are touched
 * (its site's peak is then more than what is live during the sweeps, as
 * with a program's temporaries).
 * With --small BYTES, that much memory in 64 KiB blocks (below any
 * allocation threshold, so no site's) is made and written first and kept
 * to the end: the rest of a program's memory, which shares a fast budget
 * that bounds the whole process with its sites and the pager's cache.
 * Exit status 0, or 3 with --exit3 (tests check that it passes through). */
#define _GNU_SOURCE
#define SMALL_BLOCK ((size_t)64 << 10)
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../numa_pages.h"
#include "size.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double *fill(double *p, size_t n, double v) {
  if (!p) {
    fprintf(stderr, "hm-placement: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = v + (double)(i & 7);
  return p;
}

/* One site per array: distinct functions the compiler must not merge. */
__attribute__((noinline)) static double *alloc_hot_a(size_t n) {
  return fill(malloc(n * sizeof(double)), n, 1.0);
}
__attribute__((noinline)) static double *alloc_hot_b(size_t n) {
  return fill(malloc(n * sizeof(double)), n, 2.0);
}
__attribute__((noinline)) static double *alloc_cold_x(size_t n) {
  return fill(malloc(n * sizeof(double)), n, 3.0);
}
__attribute__((noinline)) static double *alloc_cold_y(size_t n) {
  return fill(calloc(n, sizeof(double)), n, 4.0);
}
__attribute__((noinline)) static double *alloc_cold_z(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n * sizeof(double))) p = NULL;
  return fill(p, n, 5.0);
}

/* The NUMA policy of the mapping that holds p, as /proc/self/numa_maps
 * words it ("default", "bind:1", ...): the line of the highest start
 * address at or below p. For --numa-policies, which tests use to see a
 * placement's NUMA tier bound for real (mbind), not only counted. */
static void numa_policy(const void *p, char *out, size_t cap) {
  snprintf(out, cap, "unknown");
  FILE *f = fopen("/proc/self/numa_maps", "r");
  if (!f) return;
  char line[512];
  unsigned long long best = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long start;
    int at = 0;
    if (sscanf(line, "%llx %n", &start, &at) != 1 || !at) continue;
    if (start > (unsigned long long)(uintptr_t)p || start < best) continue;
    best = start;
    /* the policy may hold a space ("prefer (many):1"): it ends before the
     * first key=value word or a heap/stack tag */
    char *pol = line + at, *end = strchr(pol, '=');
    if (!end) end = pol + strcspn(pol, "\n");
    else while (end > pol && end[-1] != ' ') end--;
    char *tag = strstr(pol, " heap");
    if (!tag) tag = strstr(pol, " stack");
    if (tag && tag < end) end = tag + 1;
    while (end > pol && (end[-1] == ' ' || end[-1] == '\n')) end--;
    snprintf(out, cap, "%.*s", (int)(end - pol), pol);
  }
  fclose(f);
}

static void print_node_pages(const char *name, const void *p, size_t bytes, int last) {
  hm_bench_print_node_pages(name, p, bytes);
  printf("%s", last ? "" : ",");
}

/* For --numa-maps FILE: /proc/self/numa_maps while the arrays live, each
 * array's start address first ("hot_a 0x...") so a reader finds its line. */
static void copy_numa_maps(const char *path, const double *const arrays[5]) {
  static const char *names[5] = {"hot_a", "hot_b", "cold_x", "cold_y", "cold_z"};
  FILE *in = fopen("/proc/self/numa_maps", "r"), *out = fopen(path, "w");
  if (in && out) {
    for (int k = 0; k < 5; k++) fprintf(out, "# %s %p\n", names[k], (const void *)arrays[k]);
    char line[1024];
    while (fgets(line, sizeof line, in)) fputs(line, out);
  }
  if (in) fclose(in);
  if (out) fclose(out);
}

/* KiB of [p, p + bytes) on transparent huge pages: the AnonHugePages of
 * the mappings in /proc/self/smaps that overlap it. A mapping that also
 * holds other data counts whole (the kernel merges adjacent anonymous
 * mappings alike), so a figure may include a neighbour's. For --huge-pages,
 * which tests use to see a placement's huge-page advice take effect. */
static unsigned long long huge_kib(const void *p, size_t bytes) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  char line[512];
  unsigned long long total = 0, kib;
  int inside = 0;
  uintptr_t a = (uintptr_t)p, e = a + bytes;
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi;
    if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      inside = lo < e && hi > a;
    else if (inside && sscanf(line, "AnonHugePages: %llu kB", &kib) == 1)
      total += kib;
  }
  fclose(f);
  return total;
}

static double sweep(const double *a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i];
  return s;
}

static double sparse(const double *a, size_t n, size_t stride_elems, size_t phase) {
  double s = 0;
  for (size_t i = phase % stride_elems; i < n; i += stride_elems) s += a[i];
  return s;
}

/* glibc's own entry points, which an interposer's malloc also ends in:
 * --ab calls them directly for its reference slices. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

typedef struct {
  void *(*alloc)(size_t);
  void (*release)(void *);
} alloc_api_t;

enum { ALLOC_WINDOW = 64 }; /* live blocks per thread */

typedef struct {
  uint64_t pairs, x, sum;
  void *live[ALLOC_WINDOW];
} alloc_state_t;

/* pairs malloc/free pairs through api, over a window of live blocks */
static void alloc_loop(alloc_state_t *st, const alloc_api_t *api, uint64_t pairs) {
  uint64_t x = st->x;
  for (uint64_t i = 0; i < pairs; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    /* sizes: 16 B .. 64 KiB, log-uniform (skewed small) */
    size_t sz = (size_t)16 << (x % 13);
    sz += (x >> 8) % sz;
    unsigned k = (unsigned)((x >> 32) % ALLOC_WINDOW);
    api->release(st->live[k]);
    char *q = api->alloc(sz);
    if (!q) {
      fprintf(stderr, "hm-placement: out of memory\n");
      exit(1);
    }
    q[0] = (char)i;
    st->sum += (uint64_t)(unsigned char)q[0];
    st->live[k] = q;
  }
  st->x = x;
}

static void alloc_drain(alloc_state_t *st, const alloc_api_t *api) {
  for (unsigned k = 0; k < ALLOC_WINDOW; k++) {
    api->release(st->live[k]);
    st->live[k] = NULL;
  }
}

/* --ab: the same loop in slices that alternate between the program's
 * malloc/free (an interposer's, when one is preloaded) and glibc's own,
 * in the order ABBA ABBA ... so that a linear drift of the machine's speed
 * weighs on both alike; all threads run the same kind of slice at a time
 * (a barrier between slices) and thread 0 times each one. A slice is tens
 * of milliseconds, so both kinds see the same state of a shared machine:
 * the ratio of the two is the interposer's cost per call, with the noise
 * of whole runs (tens of percent here) gone. */
typedef struct {
  alloc_state_t st;
  int id, slices;
  uint64_t per_slice;
  pthread_barrier_t *bar;
  double *slice_s;
} ab_arg_t;

static void *ab_worker(void *p) {
  ab_arg_t *a = p;
  const alloc_api_t apis[2] = {{malloc, free}, {__libc_malloc, __libc_free}};
  for (int s = 0; s < a->slices; s++) {
    const alloc_api_t *api = &apis[(s ^ (s >> 1)) & 1];
    pthread_barrier_wait(a->bar);
    double t0 = now_s();
    alloc_loop(&a->st, api, a->per_slice);
    alloc_drain(&a->st, api);
    pthread_barrier_wait(a->bar);
    if (a->id == 0) a->slice_s[s] = now_s() - t0;
  }
  return NULL;
}

static void *alloc_worker(void *p) {
  alloc_state_t *st = p;
  const alloc_api_t api = {malloc, free};
  alloc_loop(st, &api, st->pairs);
  alloc_drain(st, &api);
  return NULL;
}

static int run_alloc(uint64_t pairs, int threads, int ab_slices) {
  pthread_t th[64];
  static alloc_state_t st[64];
  static ab_arg_t ab[64];
  pthread_barrier_t bar;
  double *slice_s = NULL;
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  if (ab_slices) {
    ab_slices = (ab_slices + 3) / 4 * 4; /* whole ABBA groups */
    slice_s = calloc((size_t)ab_slices, sizeof *slice_s);
    if (!slice_s || pthread_barrier_init(&bar, NULL, (unsigned)threads)) return 1;
  }
  double t0 = now_s();
  for (int i = 0; i < threads; i++) {
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) | 1;
    if (ab_slices) {
      /* each kind makes `pairs` pairs in all */
      ab[i] = (ab_arg_t){.st = {.x = seed}, .id = i, .slices = ab_slices, .bar = &bar,
                         .slice_s = slice_s,
                         .per_slice = pairs * 2 / (uint64_t)ab_slices / (uint64_t)threads};
      pthread_create(&th[i], NULL, ab_worker, &ab[i]);
    } else {
      st[i] = (alloc_state_t){.pairs = pairs / (uint64_t)threads, .x = seed};
      pthread_create(&th[i], NULL, alloc_worker, &st[i]);
    }
  }
  uint64_t sum = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    sum += ab_slices ? ab[i].st.sum : st[i].sum;
  }
  double t = now_s() - t0;
  printf("{\"variant\":\"alloc\",\"seconds\":%.6f,\"pairs\":%llu,\"threads\":%d,"
         "\"checksum\":%llu",
         t, (unsigned long long)pairs, threads, (unsigned long long)sum);
  if (ab_slices) {
    /* slice s ran the program's malloc when (s ^ s >> 1) & 1 == 0 */
    printf(",\"ab\":{\"pairs_per_slice\":%llu,\"slice_kind\":\"ABBA: A = malloc/free, "
           "B = __libc_malloc/__libc_free\",\"slice_seconds\":[",
           (unsigned long long)(ab[0].per_slice * (uint64_t)threads));
    for (int s = 0; s < ab_slices; s++) printf("%s%.6f", s ? "," : "", slice_s[s]);
    printf("]}");
    pthread_barrier_destroy(&bar);
  }
  printf("}\n");
  free(slice_s);
  return 0;
}

/* --variant even: three arrays of a third of the footprint, each updated
 * passes times per iteration. */
static int run_even(size_t footprint, int iters, int passes, int mixed) {
  size_t n = footprint / sizeof(double) / 3;
  double *x = alloc_cold_x(n), *y = alloc_cold_y(n), *z = alloc_cold_z(n);
  double *a[3] = {x, y, z}, check = 0, t0 = now_s();
  for (int it = 0; it < iters; it++)
    for (int k = 0; k < (mixed ? 1 : 3); k++)
      for (int p = 0; p < passes; p++)
        for (size_t i = 0; mixed && i < n; i++) {
          x[i] = 0.5 * x[i] + 1.0;
          y[i] = 0.5 * y[i] + x[i];
          z[i] = 0.5 * z[i] + y[i];
        }
  for (int it = 0; !mixed && it < iters; it++)
    for (int k = 0; k < 3; k++)
      for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++) a[k][i] = 0.5 * a[k][i] + 1.0;
  double t = now_s() - t0;
  for (int k = 0; k < 3; k++) check += sweep(a[k], n);
  printf("{\"variant\":\"%s\",\"seconds\":%.6f,\"footprint\":%zu,\"array_bytes\":%zu,"
         "\"iters\":%d,\"passes\":%d,\"checksum\":%.6e}\n",
         mixed ? "mixed" : "even", t, footprint, n * sizeof(double), iters, passes, check);
  free(x);
  free(y);
  free(z);
  return 0;
}

/* --small: bytes in 64 KiB blocks, written; NULL for none (or no memory). */
static void **small_make(size_t bytes) {
  size_t nb = bytes / SMALL_BLOCK;
  void **b = nb ? calloc(nb, sizeof *b) : NULL;
  for (size_t i = 0; b && i < nb; i++)
    if ((b[i] = malloc(SMALL_BLOCK))) memset(b[i], (int)(i & 0xff), SMALL_BLOCK);
  return b;
}

static void small_free(void **b, size_t bytes) {
  for (size_t i = 0; b && i < bytes / SMALL_BLOCK; i++) free(b[i]);
  free(b);
}

/* Command-line settings; defaults as set in main. */
typedef struct {
  const char *variant, *maps_to;
  size_t footprint, small, stride_pages;
  uint64_t pairs;
  int iters, hot_passes, threads, exit3, policies, huge, ab_slices, scratch;
} popts_t;

/* A whole number in [lo, hi], with a size suffix if wanted, or a one-line
 * error: garbage read as 0 would quietly test nothing. */
static int num_arg(const char *flag, const char *what, const char *text, unsigned long long lo,
                   unsigned long long hi, unsigned long long *out) {
  uint64_t v = 0; /* hetmem's own reader: 4096, 64K, 256MiB, 1.5G alike */
  if (_hm_parse_size(text, &v) != 0 || v < lo || v > hi) {
    fprintf(stderr, "hm-placement: %s takes %s (%llu..%llu), not '%s'\n", flag, what, lo, hi, text);
    return -1;
  }
  *out = v;
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: hm-placement [--variant sweep|sparse|even|mixed|alloc] [--footprint BYTES] "
                  "[--iters N] [--hot-passes N] [--stride PAGES] [--pairs N] [--threads N] "
                  "[--ab SLICES] [--exit3] [--numa-policies] [--numa-maps FILE] [--huge-pages] "
                  "[--scratch-b] [--small BYTES]\n");
  return 2;
}

/* An option with a numeric value: its bounds and where it goes (int or
 * size_t/uint64_t field). */
typedef struct {
  const char *flag, *what;
  unsigned long long lo, hi;
  int *as_int;
  size_t *as_size;
  uint64_t *as_u64;
} pnum_t;

/* Fills o from argv; 0, or 2 after a one-line message. */
static int parse_args(int argc, char **argv, popts_t *o) {
  const pnum_t nums[] = {
      {"--footprint", "a byte count", 4096, (size_t)1 << 44, NULL, &o->footprint, NULL},
      {"--iters", "a number of iterations", 1, 1000000, &o->iters, NULL, NULL},
      {"--hot-passes", "a number of passes", 0, 1000000, &o->hot_passes, NULL, NULL},
      {"--stride", "a number of pages", 1, (size_t)1 << 32, NULL, &o->stride_pages, NULL},
      {"--pairs", "a number of pairs", 1, UINT64_MAX, NULL, NULL, &o->pairs},
      {"--threads", "a number of threads", 1, 1024, &o->threads, NULL, NULL},
      {"--ab", "a number of slices", 1, 1000000, &o->ab_slices, NULL, NULL},
      {"--small", "a byte count", 0, (size_t)1 << 40, NULL, &o->small, NULL},
  };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const pnum_t *num = NULL;
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++)
      if (!strcmp(a, nums[k].flag)) num = &nums[k];
    unsigned long long x;
    if (num && v) {
      if (num_arg(a, num->what, argv[++i], num->lo, num->hi, &x)) return 2;
      if (num->as_int) *num->as_int = (int)x;
      if (num->as_size) *num->as_size = (size_t)x;
      if (num->as_u64) *num->as_u64 = (uint64_t)x;
    } else if (!strcmp(a, "--variant") && v) o->variant = argv[++i];
    else if (!strcmp(a, "--numa-maps") && v) o->maps_to = argv[++i];
    else if (!strcmp(a, "--exit3")) o->exit3 = 1;
    else if (!strcmp(a, "--numa-policies")) o->policies = 1;
    else if (!strcmp(a, "--huge-pages")) o->huge = 1;
    else if (!strcmp(a, "--scratch-b")) o->scratch = 1;
    else return usage();
  }
  return 0;
}

/* The hot and cold arrays of sweep and sparse, as the tail of the JSON
 * line: NUMA policies and pages per node (--numa-policies), huge-page KiB
 * (--huge-pages). */
static void print_arrays(const popts_t *o, double *const arrays[5], size_t nh, size_t nc) {
  static const char *const names[5] = {"hot_a", "hot_b", "cold_x", "cold_y", "cold_z"};
  size_t len[5] = {nh, nh, nc, nc, nc};
  if (o->policies) {
    char pol[5][64] = {{0}};
    for (int k = 0; k < 5; k++)
      if (arrays[k]) numa_policy(arrays[k], pol[k], sizeof pol[k]); /* hot_b: NULL, --scratch-b */
    printf(",\"numa_policies\":{");
    for (int k = 0; k < 5; k++) printf("%s\"%s\":\"%s\"", k ? "," : "", names[k], pol[k]);
    printf("},\"numa_pages\":{");
    for (int k = 0; k < 5; k++) print_node_pages(names[k], arrays[k], len[k] * sizeof(double), k == 4);
    printf("}");
  }
  if (o->huge) {
    printf(",\"huge_kib\":{");
    for (int k = 0; k < 5; k++)
      printf("%s\"%s\":%llu", k ? "," : "", names[k], huge_kib(arrays[k], len[k] * sizeof(double)));
    printf("}");
  }
}

/* sweep and sparse: the hot passes over hot_a and hot_b, then the cold
 * arrays swept or touched sparsely, --iters times. */
static int run_hot_cold(const popts_t *o) {
  void **blocks = small_make(o->small);
  size_t n = o->footprint / sizeof(double);
  size_t nh = n / 10, nc = (n - 2 * nh) / 3; /* hot 2 x 10%, cold 3 x ~26.7% */
  double *ha = alloc_hot_a(nh), *hb = o->scratch ? NULL : alloc_hot_b(nh);
  double *cx = alloc_cold_x(nc), *cy = alloc_cold_y(nc), *cz = alloc_cold_z(nc);
  int sw = !strcmp(o->variant, "sweep");
  size_t stride = o->stride_pages * 4096 / sizeof(double);
  double check = 0, t0 = now_s(), hot_s = 0;
  for (int it = 0; it < o->iters; it++) {
    double th = now_s();
    if (o->scratch) hb = alloc_hot_b(nh); /* one site, made here each time */
    for (int p = 0; p < o->hot_passes; p++)
      for (size_t i = 0; i < nh; i++) ha[i] = 0.5 * ha[i] + 0.25 * hb[i] + 1.0;
    if (o->scratch) {
      free(hb);
      hb = NULL;
    }
    hot_s += now_s() - th;
    if (sw) check += sweep(cx, nc) + sweep(cy, nc) + sweep(cz, nc);
    else
      check += sparse(cx, nc, stride, (size_t)it * 97) + sparse(cy, nc, stride, (size_t)it * 89) +
               sparse(cz, nc, stride, (size_t)it * 83);
  }
  double t = now_s() - t0;
  check += sweep(ha, nh);
  size_t cold_touched = sw ? 3 * nc * sizeof(double) : 3 * (nc / stride + 1) * 4096;
  double *arrays[5] = {ha, hb, cx, cy, cz};
  if (o->maps_to) copy_numa_maps(o->maps_to, (const double *const *)arrays);
  printf("{\"variant\":\"%s\",\"seconds\":%.6f,\"hot_seconds\":%.6f,\"footprint\":%zu,"
         "\"hot_bytes\":%zu,\"cold_bytes\":%zu,\"cold_touched_per_iter\":%zu,\"iters\":%d,"
         "\"checksum\":%.6e",
         o->variant, t, hot_s, o->footprint, 2 * nh * sizeof(double), 3 * nc * sizeof(double), cold_touched,
         o->iters, check);
  print_arrays(o, arrays, nh, nc);
  printf("}\n");
  for (int k = 0; k < 5; k++) free(arrays[k]);
  small_free(blocks, o->small);
  return o->exit3 ? 3 : 0;
}

int main(int argc, char **argv) {
  popts_t o = {.variant = "sparse",
               .footprint = (size_t)256 << 20,
               .iters = 4,
               .hot_passes = 8,
               .threads = 2,
               .stride_pages = 2048,
               .pairs = 10000000};
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  if (!strcmp(o.variant, "alloc")) {
    rc = run_alloc(o.pairs, o.threads, o.ab_slices);
    return rc ? rc : o.exit3 ? 3 : 0;
  }
  if (!strcmp(o.variant, "even") || !strcmp(o.variant, "mixed"))
    return run_even(o.footprint, o.iters, o.hot_passes, !strcmp(o.variant, "mixed"));
  if (strcmp(o.variant, "sweep") && strcmp(o.variant, "sparse")) {
    fprintf(stderr, "hm-placement: unknown variant '%s'\n", o.variant);
    return 2;
  }
  return run_hot_cold(&o);
}
