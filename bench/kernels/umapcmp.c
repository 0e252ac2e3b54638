/* SPDX-License-Identifier: BSD-3-Clause */
/* The four patterns of the UMap comparison (issue 21, target 4) on memory of
 * either backend, so that both run the same code on the same data:
 *   malloc: plain malloc, as every hm-kernel (run it under `hetmem run
 *           --mode cache` to put hetmem's pager behind it);
 *   umap:   one LLNL UMap mapping of a file per array. libumap is loaded at
 *           run time (--umap-lib), so hetmem never builds or links against
 *           it. Its tunables come from the environment (UMAP_PAGESIZE,
 *           UMAP_BUFSIZE, ...), as UMap reads them.
 * Patterns (--variant):
 *   read:   sum of 64-bit words x[i] = i, checked against n(n-1)/2 each rep;
 *   rmw:    x[i] += 3, checked word by word after the run;
 *   triad:  a = b + 3c over three arrays (b = 2, c = 1), a checked == 5;
 *   read4k: random 4 KiB blocks summed (words hold their index), each
 *           thread's sum checked against the closed form of its blocks.
 * The fill (untimed) is the same parallel loop for both backends. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hmk.h"

#define BLOCK_WORDS 512 /* 4 KiB */
#define MAX_REGIONS 3

typedef void *(*umap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*uunmap_fn)(void *, size_t);
typedef uint64_t (*cfg_fn)(void);

/* What the backend needs: one process, one configuration. */
static struct {
  int umap;
  const char *lib, *dir;
  int buffered;
  umap_fn map;
  uunmap_fn unmap;
  cfg_fn page_size, buf_pages, fillers, evictors;
} B = {.dir = NULL};

typedef struct {
  void *p;
  size_t len;
  int fd;
} region_t;

static region_t regions[MAX_REGIONS];
static int nregions;
/* UMap logs to std::cout; stdout is the kernel's one JSON line. While
 * UMap is loaded, fd 1 is stderr and the JSON goes to this copy of it. */
static int json_fd = -1;

/* Loads libumap; a missing library or symbol is bad input (exit 2), so that
 * the suite can tell the user in one line before anything runs. */
static void load_umap(void) {
  fflush(stdout);
  json_fd = dup(STDOUT_FILENO);
  if (json_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    hmk_fail(HMK_EXIT_RESOURCE, "cannot redirect UMap's log: %s", strerror(errno));
  void *h = dlopen(B.lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) hmk_fail(HMK_EXIT_USAGE, "--umap-lib %s: cannot load: %s", B.lib, dlerror());
  *(void **)&B.map = dlsym(h, "umap");
  *(void **)&B.unmap = dlsym(h, "uunmap");
  if (!B.map || !B.unmap) hmk_fail(HMK_EXIT_USAGE, "--umap-lib %s: no umap/uunmap symbols: not libumap", B.lib);
  /* Optional: the values UMap settled on, for the result line. */
  *(void **)&B.page_size = dlsym(h, "umapcfg_get_umap_page_size");
  *(void **)&B.buf_pages = dlsym(h, "umapcfg_get_max_pages_in_buffer");
  *(void **)&B.fillers = dlsym(h, "umapcfg_get_num_fillers");
  *(void **)&B.evictors = dlsym(h, "umapcfg_get_num_evictors");
}

static uint64_t umap_page(void) {
  uint64_t ps = B.page_size ? B.page_size() : (uint64_t)sysconf(_SC_PAGESIZE);
  return ps ? ps : 4096;
}

/* A new file only this user can read, never one that was there (O_EXCL,
 * O_NOFOLLOW), unlinked at once: nothing is left behind, whatever happens. */
static int backing_file(size_t len) {
  int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (B.buffered ? 0 : O_DIRECT);
  char path[4096];
  for (int attempt = 0; attempt < 64; attempt++) {
    uint64_t tag = hmk_mix((uint64_t)getpid() ^ ((uint64_t)attempt << 32) ^ (uint64_t)time(NULL));
    snprintf(path, sizeof path, "%s/hm-umapcmp-%016llx", B.dir, (unsigned long long)tag);
    int fd = open(path, flags, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0)
      hmk_fail(HMK_EXIT_RESOURCE, "cannot create %s: %s%s", path, strerror(errno),
               errno == EINVAL ? " (no O_DIRECT here: try --umap-buffered)" : "");
    unlink(path);
    if (ftruncate(fd, (off_t)len) != 0) hmk_fail(HMK_EXIT_RESOURCE, "cannot size %s: %s", path, strerror(errno));
    return fd;
  }
  hmk_fail(HMK_EXIT_RESOURCE, "cannot create a new file in %s", B.dir);
}

/* Memory for one array: malloc, or a UMap region over its own file. */
static void *cmp_alloc(size_t bytes) {
  if (nregions >= MAX_REGIONS) hmk_fail(HMK_EXIT_RESOURCE, "too many arrays");
  region_t *r = &regions[nregions++];
  if (!B.umap) {
    r->p = hmk_alloc(bytes);
    r->len = bytes;
    return r->p;
  }
  uint64_t ps = umap_page();
  r->len = (bytes + ps - 1) / ps * ps; /* UMap maps whole UMap pages */
  r->fd = backing_file(r->len);
  r->p = B.map(NULL, r->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, r->fd, 0);
  if (r->p == MAP_FAILED || !r->p) hmk_fail(HMK_EXIT_RESOURCE, "umap of %zu bytes failed", r->len);
  return r->p;
}

static void cmp_free_all(void) {
  for (int i = 0; i < nregions; i++) {
    if (!B.umap) {
      free(regions[i].p);
    } else {
      B.unmap(regions[i].p, regions[i].len);
      close(regions[i].fd);
    }
  }
  nregions = 0;
}


static HMK_CLONES void triad(double *restrict a, const double *restrict b, const double *restrict c, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
}

static void fill_index(uint64_t *x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = i;
}

/* k-th random block of thread t in repetition rep (as hm-kernel-gups). */
static inline uint64_t pick(int rep, int t, uint64_t k, uint64_t nblk) {
  return hmk_mix(((uint64_t)rep << 48) ^ ((uint64_t)t << 40) ^ k ^ 0x756d6170ULL) % nblk;
}

static inline uint64_t block_sum(uint64_t b) {
  return (uint64_t)BLOCK_WORDS * BLOCK_WORDS * b + (uint64_t)BLOCK_WORDS * (BLOCK_WORDS - 1) / 2;
}

static void read4k_pass(const uint64_t *x, uint64_t nblk, uint64_t per_thread, int rep, uint64_t *sums) {
#pragma omp parallel
  {
    int t = omp_get_thread_num();
    uint64_t s = 0;
    for (uint64_t k = 0; k < per_thread; k++) {
      const uint64_t *blk = x + pick(rep, t, k, nblk) * BLOCK_WORDS;
      for (int w = 0; w < BLOCK_WORDS; w++) s += blk[w];
    }
    sums[t] = s;
  }
}

/* read and rmw: one array of words holding their index. */
static void run_scan(hmk_args_t *a, hmk_result_t *r, int rmw) {
  size_t n = (size_t)(a->bytes / 8);
  double t0 = hmk_now();
  uint64_t *x = cmp_alloc(n * 8);
  fill_index(x, n);
  r->init_s = hmk_now() - t0;
  uint64_t nn = n, expect = (nn % 2 == 0) ? (nn / 2) * (nn - 1) : nn * ((nn - 1) / 2);
  for (int rep = 0; hmk_more(a, r); rep++) {
    if (!rmw && a->inject_error && rep == a->reps - 1) x[n / 2] += 1;
    double s = hmk_now();
    uint64_t sum = rmw ? (hmk_scan_rmw(x, n), expect) : hmk_scan_read(x, n);
    r->times[r->n++] = hmk_now() - s;
    if (sum != expect)
      hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetition %d summed to %llu, expected %llu", rep,
               (unsigned long long)sum, (unsigned long long)expect);
  }
  double v0 = hmk_now();
  if (rmw) {
    if (a->inject_error) x[n / 2] ^= 1;
    uint64_t add = (uint64_t)a->reps * HMK_SCAN_INC, wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
    for (size_t i = 0; i < n; i++) wrong += x[i] != (uint64_t)i + add;
    if (wrong) hmk_fail(HMK_EXIT_VERIFY, "verification failed: %llu words wrong after the scans", (unsigned long long)wrong);
  }
  r->verify_s = hmk_now() - v0;
  r->bytes_moved = (rmw ? 16.0 : 8.0) * (double)n;
  r->flops = (double)n;
  hmk_extra_u64(r, "elements", n);
}

static void run_triad(hmk_args_t *a, hmk_result_t *r) {
  size_t n = (size_t)(a->bytes / 24);
  double t0 = hmk_now();
  double *A = cmp_alloc(n * 8), *Bv = cmp_alloc(n * 8), *C = cmp_alloc(n * 8);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    A[i] = 0.0;
    Bv[i] = 2.0;
    C[i] = 1.0;
  }
  r->init_s = hmk_now() - t0;
  for (int rep = 0; hmk_more(a, r); rep++) {
    double s = hmk_now();
    triad(A, Bv, C, n);
    r->times[r->n++] = hmk_now() - s;
  }
  if (a->inject_error) A[n / 2] += 1.0;
  double v0 = hmk_now();
  uint64_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
  for (size_t i = 0; i < n; i++) wrong += A[i] != 5.0 || Bv[i] != 2.0 || C[i] != 1.0;
  r->verify_s = hmk_now() - v0;
  if (wrong) hmk_fail(HMK_EXIT_VERIFY, "verification failed: %llu elements wrong after triad", (unsigned long long)wrong);
  r->bytes_moved = 24.0 * (double)n;
  r->flops = 2.0 * (double)n;
  hmk_extra_u64(r, "elements", n);
}

static void run_read4k(hmk_args_t *a, hmk_result_t *r, uint64_t reads) {
  int T = a->threads;
  uint64_t nblk = a->bytes / (BLOCK_WORDS * 8);
  if (!reads) reads = nblk;
  uint64_t per_thread = (reads + (uint64_t)T - 1) / (uint64_t)T;
  reads = per_thread * (uint64_t)T;
  double t0 = hmk_now();
  uint64_t *x = cmp_alloc(nblk * BLOCK_WORDS * 8);
  fill_index(x, nblk * BLOCK_WORDS);
  r->init_s = hmk_now() - t0;
  uint64_t *sums = hmk_alloc(sizeof(uint64_t) * (size_t)T);
  for (int rep = 0; hmk_more(a, r); rep++) {
    if (a->inject_error && rep == a->reps - 1) x[pick(rep, 0, 0, nblk) * BLOCK_WORDS] += 1;
    double s = hmk_now();
    read4k_pass(x, nblk, per_thread, rep, sums);
    r->times[r->n++] = hmk_now() - s;
    /* Checked at once: the sums of every repetition need no keeping. */
    for (int t = 0; t < T; t++) {
      uint64_t expect = 0;
      for (uint64_t k = 0; k < per_thread; k++) expect += block_sum(pick(rep, t, k, nblk));
      if (sums[t] != expect)
        hmk_fail(HMK_EXIT_VERIFY, "verification failed: repetition %d thread %d read sum %llu, expected %llu", rep, t,
                 (unsigned long long)sums[t], (unsigned long long)expect);
    }
  }
  free(sums);
  r->bytes_moved = 4096.0 * (double)reads;
  double best = r->times[0];
  for (int i = 1; i < r->n; i++) best = r->times[i] < best ? r->times[i] : best;
  hmk_extra_u64(r, "blocks", nblk);
  hmk_extra_u64(r, "accesses", reads);
  hmk_extra_num(r, "iops", (double)reads / best);
}

/* Takes this kernel's string options out of argv (hmk_parse knows sizes,
 * counts and choices only); returns the new argc. */
static int take_strings(int argc, char **argv) {
  int out = 1;
  for (int i = 1; i < argc; i++) {
    const char *names[] = {"--umap-lib", "--storage"};
    const char **dst[] = {&B.lib, &B.dir};
    int taken = 0;
    for (int k = 0; k < 2 && !taken; k++) {
      size_t len = strlen(names[k]);
      if (strncmp(argv[i], names[k], len) != 0) continue;
      if (argv[i][len] == '=') {
        *dst[k] = argv[i] + len + 1;
        taken = 1;
      } else if (argv[i][len] == '\0') {
        if (i + 1 >= argc) hmk_fail(HMK_EXIT_USAGE, "%s needs a value", names[k]);
        *dst[k] = argv[++i];
        taken = 1;
      }
    }
    if (!taken) argv[out++] = argv[i];
  }
  argv[out] = NULL;
  return out;
}

static void emit_backend(hmk_result_t *r) {
  hmk_extra_str(r, "backend", B.umap ? "umap" : "malloc");
  if (!B.umap) return;
  hmk_extra_u64(r, "umap_pagesize", umap_page());
  if (B.buf_pages) hmk_extra_u64(r, "umap_bufsize_pages", B.buf_pages());
  if (B.fillers) hmk_extra_u64(r, "umap_fillers", B.fillers());
  if (B.evictors) hmk_extra_u64(r, "umap_evictors", B.evictors());
  hmk_extra_str(r, "umap_io", B.buffered ? "buffered" : "direct");
}

int main(int argc, char **argv) {
  const char *backend = "malloc";
  uint64_t reads = 0;
  int lib_check = 0, dummy = 0;
  hmk_args_t a = {.kernel = "umapcmp",
                  .summary = "Sequential read, read-modify-write, STREAM triad and random 4 KiB reads on malloc'd "
                             "memory or an LLNL UMap mapping (the UMap comparison).",
                  .variants = "read|rmw|triad|read4k",
                  .variant = "read",
                  .bytes = 256ull << 20,
                  .min_bytes = 64 * 1024,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--backend", HMK_OPT_CHOICE, &backend, "malloc|umap", 0, 0,
       "malloc|umap: plain malloc (default), or UMap regions over files"},
      {"--reads", HMK_OPT_COUNT, &reads, NULL, 1, UINT64_MAX,
       "read4k: 4 KiB reads per repetition, all threads (default one per block)"},
      {"--umap-buffered", HMK_OPT_FLAG, &B.buffered, NULL, 0, 0,
       "UMap's files through the page cache (default O_DIRECT, as UMap's own examples)"},
      {"--lib-check", HMK_OPT_FLAG, &lib_check, NULL, 0, 0, "load --umap-lib, print nothing, exit 0 (or 2)"},
      /* Help lines only: take_strings() consumes these before hmk_parse. */
      {"--umap-lib PATH", HMK_OPT_FLAG, &dummy, NULL, 0, 0, "libumap.so to load (with --backend umap)"},
      {"--storage DIR", HMK_OPT_FLAG, &dummy, NULL, 0, 0,
       "folder of UMap's files ($TMPDIR, else /var/tmp); they are unlinked at once"},
  };
  argc = take_strings(argc, argv);
  hmk_parse(&a, argc, argv, opts, sizeof opts / sizeof opts[0]);
  B.umap = strcmp(backend, "umap") == 0;
  if (B.umap != (B.lib != NULL)) hmk_fail(HMK_EXIT_USAGE, "--backend umap and --umap-lib PATH go together");
  if (!B.dir) B.dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
  if (B.umap) load_umap();
  if (lib_check) return 0;

  hmk_result_t r;
  hmk_result_init(&r, &a);
  if (!strcmp(a.variant, "triad"))
    run_triad(&a, &r);
  else if (!strcmp(a.variant, "read4k"))
    run_read4k(&a, &r, reads);
  else
    run_scan(&a, &r, !strcmp(a.variant, "rmw"));
  emit_backend(&r);
  if (json_fd >= 0) dup2(json_fd, STDOUT_FILENO);
  hmk_emit(&a, &r); /* flushes stdout */
  if (json_fd >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
  cmp_free_all();
  return 0;
}
