/* SPDX-License-Identifier: BSD-3-Clause */
/* LU factorization of an n x n matrix (footprint n^2 * 8 bytes).
 *   lapack: LAPACK (OpenBLAS) dgetrf, partial pivoting, on the usual
 *           column-major array;
 *   tiled:  right-looking tile LU without pivoting, the matrix stored as
 *           contiguous nb x nb tiles (the layout of the hetero-streams code the
 *           IMDT study used: it found tiling decisive on tiered memory). Panel
 *           solves and trailing updates are single-threaded BLAS calls on
 *           tiles spread over the OpenMP threads. --tile-budget sizes the
 *           tiles for that much fast memory (hmk_tile_for): the trailing
 *           updates then move about 16 n^2 (n / nb) / 3 bytes for the
 *           2/3 n^3 flops, nb / 8 flops per byte. Each task advises the
 *           tiles of the task one per thread ahead MADV_WILLNEED
 *           (--no-hints: not); each step updates the next step's panel
 *           last (trail_tile). --order left: the left-looking order
 *           (tiled_lu_left), the same reads with each tile written about
 *           once (8 n^2 bytes) instead of once a step.
 * The matrix is random in [-1, 1] plus n on the diagonal (diagonally
 * dominant, so LU without pivoting is stable) and a pure function of (i, j),
 * so the check regenerates it: solve A x = b with the factors and require
 * the HPL scaled residual ||A x - b|| / (eps (||A|| ||x|| + ||b||) n) < 16.
 * flops = 2/3 n^3. */
#include <cblas.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

static inline double aij(size_t i, size_t j, size_t n) {
  return hmk_unit(i * n + j, 0x4c55, -1.0, 1.0) + (i == j ? (double)n : 0.0);
}

typedef struct {
  double *a;
  size_t n, nb, nt;
  int tiled, threads;
  int hints; /* tiled: MADV_WILLNEED on the tiles of the next tasks */
  int left;  /* tiled: the left-looking order (tiled_lu_left) */
} mat_t;

/* address of element (i, j) in either layout */
static inline double *at(const mat_t *m, size_t i, size_t j) {
  if (!m->tiled) return m->a + i + j * m->n;
  size_t ti = i / m->nb, tj = j / m->nb;
  return m->a + (tj * m->nt + ti) * m->nb * m->nb + (i % m->nb) + (j % m->nb) * m->nb;
}

static inline double *tile(const mat_t *m, size_t ti, size_t tj) {
  return m->a + (tj * m->nt + ti) * m->nb * m->nb;
}

static void fill(const mat_t *m) {
  size_t n = m->n, nb = m->nb, nt = m->nt;
  if (m->tiled) {
    /* tile by tile, front to back: by matrix columns, two threads would
     * each touch a whole column panel of tiles at once, more than a
     * tiered budget may hold */
#pragma omp parallel for schedule(static)
    for (size_t x = 0; x < nt * nt; x++) {
      double *t = tile(m, x % nt, x / nt);
      for (size_t c = 0; c < nb; c++)
        for (size_t r = 0; r < nb; r++) t[r + c * nb] = aij(x % nt * nb + r, x / nt * nb + c, n);
    }
    return;
  }
  /* by columns, so each thread first-touches what it writes contiguously */
#pragma omp parallel for schedule(static)
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < n; i++) *at(m, i, j) = aij(i, j, n);
}

/* Unblocked LU without pivoting of the m x w panel at p (leading
 * dimension ld): the columns of one block of a tile. */
static void panel_nopiv(double *p, size_t m, size_t w, size_t ld) {
  for (size_t k = 0; k < w; k++) {
    double inv = 1.0 / p[k + k * ld];
    for (size_t i = k + 1; i < m; i++) p[i + k * ld] *= inv;
    for (size_t j = k + 1; j < w; j++) {
      double akj = p[k + j * ld];
      for (size_t i = k + 1; i < m; i++) p[i + j * ld] -= p[i + k * ld] * akj;
    }
  }
}

/* LU without pivoting of one column-major nb x nb tile, blocked by 64
 * columns so that the bulk is BLAS 3 (with tiles sized from a budget a tile
 * is thousands wide, and the unblocked loop would dominate the run). */
static void getrf_nopiv(double *t, size_t nb) {
  const size_t w = 64;
  int ld = (int)nb;
  for (size_t k = 0; k < nb; k += w) {
    size_t kw = nb - k < w ? nb - k : w, rest = nb - k - kw;
    double *akk = t + k + k * nb;
    panel_nopiv(akk, nb - k, kw, nb);
    if (!rest) break;
    /* U12 <- L11^-1 A12, then A22 -= L21 U12 */
    cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, (int)kw, (int)rest, 1.0, akk, ld,
                akk + kw * nb, ld);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)rest, (int)rest, (int)kw, -1.0, akk + kw, ld,
                akk + kw * nb, ld, 1.0, akk + kw + kw * nb, ld);
  }
}

static void ask(const mat_t *m, size_t i, size_t j) {
  hmk_will_need(tile(m, i, j), m->nb * m->nb * sizeof(double));
}

/* Trailing update x of step k: tile (i, j), last columns first and, in a
 * column, last rows first. The step's last updates are then column k+1,
 * ending with tile (k+1, k+1): the next step's panel and diagonal tile,
 * still in fast memory when its serial factorization and panel solves
 * begin (in the natural order they were updated first and, in a tiered
 * memory, evicted by the rest of the step before being read again). */
static void trail_tile(const mat_t *m, size_t k, size_t x, size_t *i, size_t *j) {
  size_t rest = m->nt - k - 1, y = rest * rest - 1 - x;
  *i = k + 1 + y % rest;
  *j = k + 1 + y / rest;
}

/* The tiles of task x of step k asked for ahead (--no-hints: not): tasks
 * x < 2 rest are the panel solves (tile (k+1+x, k), then (k, k+1+x-rest)),
 * the rest the trailing updates (i, j), which also read (i, k) and (k, j).
 * A tile's first BLAS block pass touches all its pages at a stride, which
 * a tiered memory that learns of a tile from its faults serves in small
 * pieces, each waited for. */
static void ask_task(const mat_t *m, size_t k, size_t x) {
  size_t rest = m->nt - k - 1;
  if (!m->hints || x >= 2 * rest + rest * rest) return;
  if (x < rest) {
    ask(m, k + 1 + x, k);
  } else if (x < 2 * rest) {
    ask(m, k, k + 1 + x - rest);
  } else {
    size_t i, j;
    trail_tile(m, k, x - 2 * rest, &i, &j);
    ask(m, i, j);
    ask(m, i, k);
    ask(m, k, j);
  }
}

static void tiled_lu(const mat_t *m) {
  size_t nt = m->nt, nb = m->nb;
  int b = (int)nb;
  for (size_t k = 0; k < nt; k++) {
    double *akk = tile(m, k, k);
    /* The diagonal tile is one thread's work unless BLAS may use them all. */
    openblas_set_num_threads(m->threads);
    getrf_nopiv(akk, nb);
    openblas_set_num_threads(1);
    size_t rest = nt - k - 1, ahead = (size_t)m->threads;
    for (size_t x = 0; x < ahead; x++) ask_task(m, k, x);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t x = 0; x < 2 * rest; x++) {
      ask_task(m, k, x + ahead); /* the task taken when each thread has one more */
      if (x < rest) /* A_ik <- A_ik U_kk^-1 */
        cblas_dtrsm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, b, b, 1.0, akk, b,
                    tile(m, k + 1 + x, k), b);
      else /* A_kj <- L_kk^-1 A_kj */
        cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, b, b, 1.0, akk, b,
                    tile(m, k, k + 1 + x - rest), b);
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t x = 0; x < rest * rest; x++) {
      size_t i, j;
      trail_tile(m, k, x, &i, &j);
      ask_task(m, k, 2 * rest + x + ahead);
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, b, b, b, -1.0, tile(m, i, k), b, tile(m, k, j), b, 1.0,
                  tile(m, i, j), b);
    }
  }
}

/* The L tile that task (k, i) of column j's left-looking update reads,
 * `ahead` tasks on: tile (i, k), with i = k for the trsm of U_kj and
 * i > k for the updates of tile (i, j); NULL past the column's last. */
static double *left_ahead(const mat_t *m, size_t j, size_t k, size_t i, size_t ahead) {
  size_t nt = m->nt;
  for (i += ahead; k < j && i >= nt; k++) i = i - nt + k + 1;
  return k < j ? tile(m, i, k) : NULL;
}

static void left_ask(const mat_t *m, size_t j, size_t k, size_t i) {
  double *t = m->hints ? left_ahead(m, j, k, i, (size_t)m->threads) : NULL;
  if (t) hmk_will_need(t, m->nb * m->nb * sizeof(double));
}

/* An L tile this column is done with: the next column reads it again,
 * after every other L tile, so the cache should keep the column instead. */
static void left_done(const mat_t *m, double *t) {
  if (m->hints) hmk_done_with(t, m->nb * m->nb * sizeof(double));
}

/* U_kj <- L_kk^-1 A_kj: tile (k, j) once every update from the columns
 * before k is in. */
static void left_solve_u(const mat_t *m, size_t j, size_t k) {
  int b = (int)m->nb;
  double *lkk = tile(m, k, k);
  left_ask(m, j, k, k);
  cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, b, b, 1.0, lkk, b, tile(m, k, j), b);
  left_done(m, lkk);
}

/* Column j brought up to date by columns 0..j-1, as tasks ordered by tile:
 * A_ij -= L_ik U_kj for i > k. The update that completes tile (k+1, j)
 * also solves it for U_(k+1)j, so the next round's updates are ready at
 * once and both threads stay busy across rounds. The column stays in fast
 * memory while the L tiles stream past it in column order. */
static void left_update(const mat_t *m, size_t j) {
  size_t nt = m->nt;
  int b = (int)m->nb;
  if (j > 0) left_solve_u(m, j, 0);
#pragma omp parallel
#pragma omp single
  for (size_t k = 0; k < j; k++) {
    double *akj = tile(m, k, j);
    for (size_t i = k + 1; i < nt; i++) {
      double *a = tile(m, i, j), *lik = tile(m, i, k);
#pragma omp task depend(in : akj[0]) depend(inout : a[0])
      {
        left_ask(m, j, k, i);
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, b, b, b, -1.0, lik, b, akj, b, 1.0, a, b);
        left_done(m, lik);
        if (i == k + 1 && i < j) left_solve_u(m, j, i);
      }
    }
  }
}

/* Left-looking tile LU (--order left): column by column, each first
 * updated by all the columns before it (left_update), then its diagonal
 * tile factored and the tiles below it solved. The same flops and the
 * same update order per tile as the right-looking order (the factors agree
 * to the bit), about the same tile reads when the matrix is larger than
 * fast memory (1/3 nt^3), but each tile is written about once instead of
 * once a step, and the L tiles read are advised cold once used so that the
 * column stays. At 4x a 1 GiB budget (4 GiB, 2304-wide tiles): 8.8 GB
 * written back instead of 19 GB, 21 GB read either way. */
static void tiled_lu_left(const mat_t *m) {
  size_t nt = m->nt, nb = m->nb;
  int b = (int)nb;
  for (size_t j = 0; j < nt; j++) {
    if (m->hints)
      for (size_t i = 0; i < nt; i++) ask(m, i, j);
    left_update(m, j);
    double *ajj = tile(m, j, j);
    openblas_set_num_threads(m->threads);
    getrf_nopiv(ajj, nb);
    openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = j + 1; i < nt; i++) /* L_ij <- A_ij U_jj^-1 */
      cblas_dtrsm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, b, b, 1.0, ajj, b,
                  tile(m, i, j), b);
  }
}

/* x <- U^-1 L^-1 x for the tiled (unpivoted) factors */
static void tiled_solve(const mat_t *m, double *x) {
  size_t n = m->n;
  for (size_t j = 0; j < n; j++) /* L y = b, unit diagonal, by columns */
    for (size_t i = j + 1; i < n; i++) x[i] -= *at(m, i, j) * x[j];
  for (size_t j = n; j-- > 0;) { /* U x = y */
    x[j] /= *at(m, j, j);
    for (size_t i = 0; i < j; i++) x[i] -= *at(m, i, j) * x[j];
  }
}

/* The tile size and count (tiled variant) and the matrix order n, a
 * whole number of tiles. */
static void choose_layout(mat_t *m, const hmk_args_t *a, uint64_t tile_opt, uint64_t budget) {
  size_t n = hmk_isqrt((size_t)(a->bytes / 8));
  if (m->tiled && budget && !tile_opt) {
    m->nb = hmk_tile_for(budget, n, &m->nt);
    n = m->nt * m->nb;
  } else if (m->tiled) {
    size_t nb = tile_opt ? (size_t)tile_opt : 256;
    if (!tile_opt && n < 4 * nb) nb = n / 4 / 8 * 8 < 8 ? 8 : n / 4 / 8 * 8;
    if (nb > n) hmk_fail(HMK_EXIT_USAGE, "--tile %zu is larger than the matrix (n = %zu)", nb, n);
    m->nb = nb;
    m->nt = n / nb;
    n = m->nt * nb;
  }
  /* the tiled variant is parallel over tiles, each GEMM on one thread */
  openblas_set_num_threads(m->tiled ? 1 : a->threads);
  m->n = n;
}

/* One factorization, in place. */
static void factor(mat_t *m, lapack_int *ipiv) {
  if (m->tiled) {
    if (m->left)
      tiled_lu_left(m);
    else
      tiled_lu(m);
    return;
  }
  lapack_int n = (lapack_int)m->n;
  lapack_int info = LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, m->a, n, ipiv);
  if (info != 0) hmk_fail(HMK_EXIT_VERIFY, "verification failed: dgetrf returned info=%d", (int)info);
}

/* b = A * 1 (row sums, so the solution is near all ones); returns ||A||_inf. */
static double row_sums(size_t n, double *b) {
  double norm_a = 0.0;
#pragma omp parallel for schedule(static) reduction(max : norm_a)
  for (size_t i = 0; i < n; i++) {
    long double s = 0.0L, abs_s = 0.0L;
    for (size_t j = 0; j < n; j++) {
      double v = aij(i, j, n);
      s += v;
      abs_s += fabs(v);
    }
    b[i] = (double)s;
    if ((double)abs_s > norm_a) norm_a = (double)abs_s;
  }
  return norm_a;
}

/* x <- A^-1 x with the factors. */
static void solve(const mat_t *m, const lapack_int *ipiv, double *x) {
  if (m->tiled) {
    tiled_solve(m, x);
    return;
  }
  lapack_int n = (lapack_int)m->n;
  lapack_int info = LAPACKE_dgetrs(LAPACK_COL_MAJOR, 'N', n, 1, m->a, n, ipiv, x, n);
  if (info != 0) hmk_fail(HMK_EXIT_VERIFY, "verification failed: dgetrs returned info=%d", (int)info);
}

/* HPL's scaled residual ||Ax-b|| / (eps (||A|| ||x|| + ||b||) n), A
 * regenerated (not the factored copy); NaN counts as infinitely large. */
static double scaled_residual(size_t n, const double *x, const double *b, double norm_a, double *norm_r_out) {
  double norm_r = 0.0, norm_x = 0.0, norm_b = 0.0;
#pragma omp parallel for schedule(static) reduction(max : norm_r, norm_x, norm_b)
  for (size_t i = 0; i < n; i++) {
    long double s = -(long double)b[i];
    for (size_t j = 0; j < n; j++) s += (long double)aij(i, j, n) * x[j];
    double e = fabs((double)s);
    if (!(e <= norm_r)) norm_r = isnan(e) ? INFINITY : e;
    if (fabs(x[i]) > norm_x || isnan(x[i])) norm_x = isnan(x[i]) ? INFINITY : fabs(x[i]);
    if (fabs(b[i]) > norm_b) norm_b = fabs(b[i]);
  }
  *norm_r_out = norm_r;
  return norm_r / (DBL_EPSILON * (norm_a * norm_x + norm_b) * (double)n);
}

/* Solve A x = A 1 with the factors and check the residual. */
static void verify(const mat_t *m, const lapack_int *ipiv, hmk_result_t *r) {
  size_t n = m->n;
  double v0 = hmk_now();
  double *x = hmk_alloc(n * sizeof(double)), *b = hmk_alloc(n * sizeof(double));
  double norm_a = row_sums(n, b), norm_r;
  memcpy(x, b, n * sizeof(double));
  solve(m, ipiv, x);
  double scaled = scaled_residual(n, x, b, norm_a, &norm_r);
  r->verify_s = hmk_now() - v0;
  if (!(scaled < 16.0))
    hmk_fail(HMK_EXIT_VERIFY, "verification failed: scaled residual %.3g (limit 16, ||Ax-b|| = %.3g)", scaled,
             norm_r);
  hmk_extra_num(r, "scaled_residual", scaled);
  hmk_extra_num(r, "residual_inf", norm_r);
  free(x);
  free(b);
}

int main(int argc, char **argv) {
  uint64_t tile_opt = 0, budget = 0;
  int no_hints = 0;
  const char *order = NULL;
  hmk_args_t a = {.kernel = "lu",
                  .summary = "LU factorization: LAPACK dgetrf, or a tiled right-looking LU (tile layout).",
                  .variants = "lapack|tiled",
                  .variant = "lapack",
                  .bytes = 128ull << 20,
                  .min_bytes = 8 * 32 * 32,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--tile", HMK_OPT_COUNT, &tile_opt, NULL, 8, 4096,
       "tile size nb of the tiled variant (default 256, smaller for small matrices)"},
      {"--tile-budget", HMK_OPT_SIZE, &budget, NULL, 0, 0, "tiled: size the tiles for this much fast memory"},
      {"--no-hints", HMK_OPT_FLAG, &no_hints, NULL, 0, 0, "tiled: no MADV_WILLNEED on the next tasks' tiles"},
      {"--order", HMK_OPT_CHOICE, &order, "right|left", 0, 0,
       "tiled: right-looking (each step updates the trailing matrix; default) or left-looking (each column "
       "updated by those before it: each tile written about once)"},
  };
  hmk_parse(&a, argc, argv, opts, 4);
  mat_t m = {0};
  m.tiled = strcmp(a.variant, "tiled") == 0;
  /* options of the tiled variant only: given to dgetrf they changed nothing */
  if (!m.tiled && (tile_opt || budget || no_hints || order))
    hmk_fail(HMK_EXIT_USAGE, "%s applies to --variant tiled only",
             tile_opt ? "--tile" : budget ? "--tile-budget" : no_hints ? "--no-hints" : "--order");
  m.left = order && strcmp(order, "left") == 0;
  m.threads = a.threads;
  m.hints = !no_hints;
  choose_layout(&m, &a, tile_opt, budget);
  size_t n = m.n;

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  m.a = hmk_alloc(n * n * sizeof(double));
  lapack_int *ipiv = hmk_alloc(n * sizeof(lapack_int));
  fill(&m);
  r.init_s = hmk_now() - t0;
  for (int rep = 0; hmk_more(&a, &r); rep++) {
    if (rep > 0) fill(&m); /* factorization is in place: start again, untimed */
    double s = hmk_now();
    factor(&m, ipiv);
    r.times[r.n++] = hmk_now() - s;
  }
  double nd = (double)n;
  r.flops = 2.0 / 3.0 * nd * nd * nd;
  r.bytes_moved = nd * nd * 8.0; /* compulsory: the matrix once */
  if (a.inject_error) *at(&m, n / 2, n / 3) += 1.0;
  hmk_extra_u64(&r, "n", n);
  if (m.tiled) {
    hmk_extra_u64(&r, "tile", m.nb);
    hmk_extra_str(&r, "order", m.left ? "left" : "right");
  }
  verify(&m, ipiv, &r);
  hmk_emit(&a, &r);
  free(m.a);
  free(ipiv);
  return 0;
}
