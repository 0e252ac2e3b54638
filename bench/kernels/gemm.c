/* SPDX-License-Identifier: BSD-3-Clause */
/* C = A * B for square n x n doubles (footprint 3 n^2 * 8 bytes).
 *   blas:  OpenBLAS cblas_dgemm (blocked, compute bound);
 *   tiled: the segmented GEMM of the IMDT study: each matrix stored as
 *          contiguous nb x nb tiles, A's tiles by rows and B's by columns
 *          so that a row panel of A and a column panel of B are each one
 *          contiguous stream; C is computed one tile at a time (multithreaded
 *          dgemm per tile update), its rows of tiles in serpentine order so
 *          that the B panel a row ends on starts the next. With --tile-budget
 *          the tiles are sized from the fast memory (hmk_tile_for): the
 *          traffic is about (n / nb + 2) n^2 8 bytes for 2 n^3 flops, less
 *          where B fits beside a row: each finished C tile and A row panel
 *          is advised MADV_COLD, so that a cache that must evict takes
 *          those first and B stays, and the tiles of each step are advised
 *          MADV_WILLNEED one step ahead, so that a cache reads them while
 *          the step before computes (--no-hints: neither);
 *   naive: unblocked i-j-k triple loop, B walked down its columns (stride n):
 *          the poor-locality case.
 * Checked with a random vector v: C v against A (B v), element by element,
 * with a bound scaled by |A| (|B| |v|). flops = 2 n^3; bytes_moved is the
 * compulsory traffic (each matrix once). */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hmk.h"

typedef struct {
  double *A, *B, *C;
  size_t n, nb, nt;
  int hints; /* MADV_COLD on the tiles and panels the product is done with */
} tiled_t;

/* Tile (i, j) of each matrix: A by rows of tiles, B by columns, C by rows. */
static double *tile_a(const tiled_t *t, size_t i, size_t j) { return t->A + (i * t->nt + j) * t->nb * t->nb; }
static double *tile_b(const tiled_t *t, size_t i, size_t j) { return t->B + (j * t->nt + i) * t->nb * t->nb; }
static double *tile_c(const tiled_t *t, size_t i, size_t j) { return t->C + (i * t->nt + j) * t->nb * t->nb; }

/* Tile by tile, each written front to back: filled element by element in
 * row order, every row touches a page in each tile of its row panel of all
 * three matrices, and at 2x a 256 MiB budget the pager moved 238 GB for a
 * 512 MiB fill (400 s). */
static void tiled_fill(const tiled_t *t) {
  size_t n = t->n, nb = t->nb, nt = t->nt;
#pragma omp parallel for schedule(static)
  for (size_t x = 0; x < nt * nt; x++) {
    size_t ti = x / nt, tj = x % nt;
    double *a = tile_a(t, ti, tj), *b = tile_b(t, ti, tj), *c = tile_c(t, ti, tj);
    for (size_t cj = 0; cj < nb; cj++)
      for (size_t ri = 0; ri < nb; ri++) {
        size_t i = ti * nb + ri, j = tj * nb + cj, e = ri + cj * nb;
        a[e] = hmk_unit(i * n + j, 0xA, -1.0, 1.0);
        b[e] = hmk_unit(i * n + j, 0xB, -1.0, 1.0);
        c[e] = 0.0;
      }
  }
}

/* Tells the memory system that [p, p + bytes) is done with for now
 * (MADV_COLD, whole pages: evicted first where memory is short; the
 * kernel's LRU and hetmem's pager both take it). A user of tiered memory
 * says so: at 2x a 1 GiB budget, cache mode read 6.3 GB without it and
 * 4.9 GB with it (B stays while the rows of A and C pass). */
static void done_with(const tiled_t *t, void *p, size_t bytes) {
  if (t->hints) hmk_done_with(p, bytes);
}

/* Step x of the product: C tile (ti, tj) += A (ti, tk) B (tk, tj), C's
 * rows of tiles in serpentine order. */
static void step(const tiled_t *t, size_t x, size_t *ti, size_t *tj, size_t *tk) {
  size_t nt = t->nt, s = x / nt % nt;
  *ti = x / (nt * nt);
  *tj = *ti % 2 ? nt - 1 - s : s;
  *tk = x % nt;
}

/* Asks for the tiles of step x ahead of their use (MADV_WILLNEED): a
 * pager learns of a tile only from its first faults, and dgemm touches
 * every page of both tiles in its first block pass, so without this each
 * step waited for its tiles (at 4x a 1 GiB budget the cache-mode run sat
 * idle a third of its core time). Nothing for memory already resident. */
static void will_need(const tiled_t *t, size_t x) {
  size_t ti, tj, tk, tile = t->nb * t->nb * sizeof(double);
  if (!t->hints || x >= t->nt * t->nt * t->nt) return;
  step(t, x, &ti, &tj, &tk);
  hmk_will_need(tile_a(t, ti, tk), tile);
  hmk_will_need(tile_b(t, tk, tj), tile);
}

static void tiled_gemm(const tiled_t *t) {
  int b = (int)t->nb;
  size_t nt = t->nt, tile = t->nb * t->nb * sizeof(double);
  for (size_t x = 0; x < nt * nt * nt; x++) {
    size_t ti, tj, tk;
    step(t, x, &ti, &tj, &tk);
    will_need(t, x + 1);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, b, b, b, 1.0, tile_a(t, ti, tk), b,
                tile_b(t, tk, tj), b, tk ? 1.0 : 0.0, tile_c(t, ti, tj), b);
    if (tk + 1 < nt) continue;
    done_with(t, tile_c(t, ti, tj), tile);
    if (x / nt % nt + 1 == nt) done_with(t, tile_a(t, ti, 0), nt * tile); /* the row panel of A */
  }
}

/* y = M x (or |M| |x|) for M in tile layout (which is A, B or C), by rows
 * of tiles, each tile read front to back (a row-order walk touches every
 * page of a row panel per row). */
static void tiled_matvec(const tiled_t *t, char which, const double *restrict x, double *restrict y, int absolute) {
  size_t nb = t->nb;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t ti = 0; ti < t->nt; ti++) {
    long double *s = calloc(nb, sizeof(long double));
    if (!s) hmk_fail(HMK_EXIT_RESOURCE, "out of memory");
    for (size_t tj = 0; tj < t->nt; tj++) {
      const double *T = which == 'A' ? tile_a(t, ti, tj) : which == 'B' ? tile_b(t, ti, tj) : tile_c(t, ti, tj);
      for (size_t c = 0; c < nb; c++) {
        long double xc = x[tj * nb + c];
        for (size_t r = 0; r < nb; r++) {
          long double v = (long double)T[r + c * nb] * xc;
          s[r] += absolute ? fabsl(v) : v;
        }
      }
    }
    for (size_t r = 0; r < nb; r++) y[ti * nb + r] = (double)s[r];
    free(s);
  }
}

static void naive(const double *restrict A, const double *restrict B, double *restrict C, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0.0;
      for (size_t k = 0; k < n; k++) s += A[i * n + k] * B[k * n + j];
      C[i * n + j] = s;
    }
}

/* y = M x (or |M| |x| when absolute), row-major n x n */
static void matvec(const double *restrict M, const double *restrict x, double *restrict y, size_t n, int absolute) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    long double s = 0.0L;
    for (size_t k = 0; k < n; k++) s += absolute ? fabsl((long double)M[i * n + k] * x[k]) : (long double)M[i * n + k] * x[k];
    y[i] = (double)s;
  }
}

/* y = M x (or |M| |x|), M one of A, B, C in either layout. */
static void mv(const tiled_t *t, int tiled, char which, const double *x, double *y, int absolute) {
  if (tiled) {
    tiled_matvec(t, which, x, y, absolute);
    return;
  }
  const double *M = which == 'A' ? t->A : which == 'B' ? t->B : t->C;
  matvec(M, x, y, t->n, absolute);
}

static void fill_rowmajor(const tiled_t *t) {
  size_t n = t->n;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      t->A[i * n + j] = hmk_unit(i * n + j, 0xA, -1.0, 1.0);
      t->B[i * n + j] = hmk_unit(i * n + j, 0xB, -1.0, 1.0);
      t->C[i * n + j] = 0.0;
    }
}

/* The side n of the matrices and, tiled, the tile nb and count nt. */
static void choose_shape(const hmk_args_t *a, int tiled, uint64_t tile, uint64_t budget, tiled_t *t) {
  size_t n = hmk_isqrt((size_t)(a->bytes / 24)); /* three n x n doubles fit */
  t->n = n;
  if (!tiled) return;
  if (tile) {
    if (tile > n) hmk_fail(HMK_EXIT_USAGE, "--tile %zu is larger than the matrix (n = %zu)", (size_t)tile, n);
    t->nb = (size_t)tile;
    t->nt = n / t->nb;
  } else {
    /* Without a budget: as if 256 MiB of fast memory held the tiles. */
    t->nb = hmk_tile_for(budget ? budget : 256ull << 20, n, &t->nt);
  }
  t->n = t->nt * t->nb;
}

/* Checks C v against A (B v) element by element; fails the run if not. */
static void verify(const tiled_t *t, int tiled, hmk_result_t *r) {
  size_t n = t->n;
  double nd = (double)n;
  double *v = hmk_alloc(n * sizeof(double)), *w = hmk_alloc(n * sizeof(double));
  double *u = hmk_alloc(n * sizeof(double)), *z = hmk_alloc(n * sizeof(double));
  double *bound = hmk_alloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) v[i] = hmk_unit(i, 0xC, 0.5, 1.0);
  mv(t, tiled, 'C', v, z, 0); /* C v */
  mv(t, tiled, 'B', v, w, 0);
  mv(t, tiled, 'A', w, u, 0); /* A (B v) */
  mv(t, tiled, 'B', v, w, 1);
  mv(t, tiled, 'A', w, bound, 1); /* |A| (|B| |v|) */
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i++) {
    double ratio = fabs(z[i] - u[i]) / (4.0 * nd * DBL_EPSILON * bound[i] + DBL_MIN);
    if (!(ratio <= worst)) {
      worst = isnan(ratio) ? INFINITY : ratio;
      worst_i = i;
    }
  }
  if (!(worst <= 1.0))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: (C v)[%zu] = %.17g but A (B v) = %.17g (%.3g x the bound)",
             worst_i, z[worst_i], u[worst_i], worst);
  hmk_extra_num(r, "check_ratio", worst);
  free(v);
  free(w);
  free(u);
  free(z);
  free(bound);
}

int main(int argc, char **argv) {
  uint64_t tile = 0, budget = 0;
  int no_hints = 0;
  hmk_args_t a = {.kernel = "gemm",
                  .summary = "Dense matrix multiply C = A B: OpenBLAS dgemm, tiled (segmented) dgemm, or an "
                             "unblocked triple loop.",
                  .variants = "blas|tiled|naive",
                  .variant = "blas",
                  .bytes = 96ull << 20,
                  .min_bytes = 3 * 8 * 16 * 16,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--tile", HMK_OPT_COUNT, &tile, NULL, 16, 16384, "tile size nb of the tiled variant"},
      {"--tile-budget", HMK_OPT_SIZE, &budget, NULL, 0, 0,
       "tiled: size the tiles for this much fast memory (default 256MiB)"},
      {"--no-hints", HMK_OPT_FLAG, &no_hints, NULL, 0, 0,
       "tiled: no MADV_COLD on the C tiles and A row panels the product is done with, no "
       "MADV_WILLNEED on the next step's tiles"},
  };
  hmk_parse(&a, argc, argv, opts, 3);
  int blas = strcmp(a.variant, "blas") == 0, tiled = strcmp(a.variant, "tiled") == 0;
  /* options of the tiled variant only: given to BLAS or the naive loop
   * they changed nothing */
  if (!tiled && (tile || budget || no_hints))
    hmk_fail(HMK_EXIT_USAGE, "%s applies to --variant tiled only",
             tile ? "--tile" : budget ? "--tile-budget" : "--no-hints");
  tiled_t t = {0};
  choose_shape(&a, tiled, tile, budget, &t);
  t.hints = !no_hints;
  size_t n = t.n;
  openblas_set_num_threads(a.threads);

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  t.A = hmk_alloc(n * n * sizeof(double));
  t.B = hmk_alloc(n * n * sizeof(double));
  t.C = hmk_alloc(n * n * sizeof(double));
  if (tiled)
    tiled_fill(&t);
  else
    fill_rowmajor(&t);
  r.init_s = hmk_now() - t0;

  while (hmk_more(&a, &r)) {
    double s = hmk_now();
    if (tiled)
      tiled_gemm(&t);
    else if (blas)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, t.A, (int)n, t.B, (int)n,
                  0.0, t.C, (int)n);
    else
      naive(t.A, t.B, t.C, n);
    r.times[r.n++] = hmk_now() - s;
  }
  double nd = (double)n;
  r.flops = 2.0 * nd * nd * nd;
  r.bytes_moved = 3.0 * nd * nd * 8.0;

  if (a.inject_error) (tiled ? tile_c(&t, 0, 0) : t.C)[n / 2] += 1.0;
  double v0 = hmk_now();
  verify(&t, tiled, &r);
  r.verify_s = hmk_now() - v0;
  hmk_extra_u64(&r, "n", n);
  if (tiled) hmk_extra_u64(&r, "tile", t.nb);
  hmk_emit(&a, &r);
  free(t.A);
  free(t.B);
  free(t.C);
  return 0;
}
