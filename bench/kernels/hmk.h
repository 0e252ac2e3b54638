/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared plumbing of the hm-kernel-* benchmark programs: argument parsing,
 * sizes, timing, deterministic data and the one-line JSON result.
 *
 * Contract of every kernel (docs/formats.md, "kernel result"):
 *   - data comes from plain malloc, so `hetmem run` decides where it lives;
 *   - first touch happens in parallel, in the OpenMP threads that compute;
 *   - stdout gets exactly one line of JSON (schema_version 1);
 *   - exit 0 only when the result was verified; exit 2 with one line on
 *     stderr for bad arguments, 3 when verification fails, 4 when memory or
 *     a library call fails.
 */
#ifndef HMK_H
#define HMK_H

#include <stddef.h>
#include <stdint.h>

#define HMK_SCHEMA_VERSION 1
#define HMK_EXIT_USAGE 2
#define HMK_EXIT_VERIFY 3
#define HMK_EXIT_RESOURCE 4

/* Hot loops are compiled for three ISA levels and chosen at load time, so
 * one installed binary gets FMA/AVX-512 where the CPU has them. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define HMK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HMK_CLONES
#endif

/* The sequential scans of hm-kernel-scan and of the UMap comparison
 * (hm-kernel-umapcmp): one loop, so both measure the same code. rmw adds
 * HMK_SCAN_INC to every word. */
#define HMK_SCAN_INC 3u
static HMK_CLONES __attribute__((unused)) uint64_t hmk_scan_read(const uint64_t *restrict x,
                                                                 size_t n) {
  uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

static HMK_CLONES __attribute__((unused)) void hmk_scan_rmw(uint64_t *restrict x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] += HMK_SCAN_INC;
}

typedef enum {
  HMK_OPT_SIZE,   /* uint64_t, accepts 4G, 512MiB, 1.5GB */
  HMK_OPT_COUNT,  /* uint64_t, accepts the same suffixes; min/max bound it */
  HMK_OPT_CHOICE, /* const char *, one of the '|'-separated choices */
  HMK_OPT_FLAG    /* int, set to 1 */
} hmk_opt_kind_t;

typedef struct {
  const char *name; /* "--degree" */
  hmk_opt_kind_t kind;
  void *dst;
  const char *choices; /* HMK_OPT_CHOICE: "a|b|c" */
  uint64_t min, max;   /* HMK_OPT_COUNT bounds (inclusive) */
  const char *help;
} hmk_opt_t;

typedef struct {
  const char *kernel;   /* "stream" */
  const char *variant;  /* chosen --variant (or the kernel's own selector) */
  const char *variants; /* "a|b" or NULL when the kernel has no --variant */
  uint64_t bytes;       /* --bytes: total data footprint */
  uint64_t min_bytes;   /* smallest footprint the kernel accepts */
  int threads;          /* --threads */
  int reps;             /* --reps; hmk_more raises it to the count that ran */
  int max_reps;         /* most repetitions the kernel's check allows (0: no cap) */
  double min_time;      /* --min-time: repeat until the timed reps sum to this */
  const char *stat;     /* --stat best|median: which time is time_s */
  int inject_error;     /* hidden --inject-error: corrupt the result */
  const char *summary;  /* one line for --help */
} hmk_args_t;

typedef struct {
  double *times;      /* one per rep, seconds */
  int n;              /* filled entries */
  double bytes_moved; /* per rep (McCalpin counting: no write-allocate) */
  double flops;       /* per rep */
  double init_s;      /* allocation + parallel first touch */
  double verify_s;
  char *extra; /* kernel-specific fields, already JSON ("k":v,...) */
  size_t extra_len, extra_cap;
} hmk_result_t;

/* Parses argv; exits 2 with a one-line message on anything wrong. The
 * caller fills kernel, summary, variants/variant (default), bytes (default),
 * min_bytes and reps (default) first. */
void hmk_parse(hmk_args_t *a, int argc, char **argv, const hmk_opt_t *opts, size_t nopts);

/* Loop condition of every kernel's timed loop:
 *   for (int rep = 0; hmk_more(&a, &r); rep++) { time one repetition into r }
 * True while fewer than --reps repetitions ran, then while the timed
 * repetitions sum to less than --min-time (STREAM's convention: short runs
 * are repeated until the clock and the machine's noise are small against
 * them, and the best repetition is reported). Past --reps it grows r->times
 * and sets a->reps to the number of repetitions that will have run, so
 * checks that depend on the count read a->reps after the loop. */
int hmk_more(hmk_args_t *a, hmk_result_t *r);

/* Parses "4G", "512MiB", "1.5GB", "4096": K/M/G/T and KiB.. are powers of
 * 1024, kB/MB/GB/TB of 1000 (same rules as hm_parse_size). 0 or -1. */
int hmk_parse_size(const char *text, uint64_t *out);

/* One-line message on stderr prefixed with hm-kernel-NAME, then exit. */
_Noreturn void hmk_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* malloc that fails the run (exit 4) instead of returning NULL. */
void *hmk_alloc(size_t bytes);

double hmk_now(void);

void hmk_result_init(hmk_result_t *r, const hmk_args_t *a);
void hmk_extra_num(hmk_result_t *r, const char *key, double v);
void hmk_extra_u64(hmk_result_t *r, const char *key, uint64_t v);
void hmk_extra_str(hmk_result_t *r, const char *key, const char *v);
/* Appends raw JSON: key then an already-formatted value. */
void hmk_extra_raw(hmk_result_t *r, const char *key, const char *json);

/* floor(sqrt(n)), exact where a double's square root is not: the side of
 * the largest square of at most n elements. */
size_t hmk_isqrt(size_t n);

/* The tile size a user of tiered memory would choose for an n x n matrix
 * when budget bytes of fast memory hold its working set: three nb x nb
 * tiles of doubles (the operands of one tile update) take at most 1/8 of
 * it, so that the panels being reused stay resident beside them. nb is a
 * multiple of 16 that divides the matrix into *nt tiles per side, as even
 * as the multiple allows; the matrix side becomes *nt x nb (at most
 * 16 x *nt smaller than n). */
size_t hmk_tile_for(uint64_t budget, size_t n, size_t *nt);

/* MADV_WILLNEED of the pages that hold [p, p + bytes): a tiered memory
 * reads them in the background; on anonymous DRAM it does nothing. The
 * out-of-core kernels give it a task ahead, as their users would. */
void hmk_will_need(const void *p, size_t bytes);
/* MADV_COLD on the whole pages of [p, p + bytes): done with for now, so
 * evicted first where memory is short (the kernel's LRU and hetmem's pager
 * both take it). */
void hmk_done_with(const void *p, size_t bytes);

/* Prints the JSON line (verified: true) and frees the result. Call only
 * after verification passed; a failed check calls hmk_fail(HMK_EXIT_VERIFY). */
void hmk_emit(const hmk_args_t *a, hmk_result_t *r);

/* Deterministic data, a pure function of the index, so checks regenerate
 * inputs instead of keeping a copy (the footprint stays the kernel's). */
static inline uint64_t hmk_mix(uint64_t x) {
  /* splitmix64 finalizer */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Uniform in [lo, hi) from an index and a seed. */
static inline double hmk_unit(uint64_t i, uint64_t seed, double lo, double hi) {
  return lo + (hi - lo) * ((double)(hmk_mix(i ^ (seed * 0xd1b54a32d192ed03ULL)) >> 11) * 0x1.0p-53);
}

#endif
