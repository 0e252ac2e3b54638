/* SPDX-License-Identifier: BSD-3-Clause */
/* Direct solve on a small coarsest level: D_L assembled as a dense matrix
 * (double), LU-factored by LAPACK on every rank, then each solve is one
 * gather of the right-hand side and two triangular solves.
 *
 * Why: with three levels on 16^4 (2^4 aggregates below 4^4 ones) the
 * coarsest level has 16 sites x 40 dof; its GMRES stopped at 60 iterations
 * in every call without reaching 5e-2 and took 4 ms of each 15 ms K-cycle
 * iteration of level 2. Its 640 x 640 LU costs about 0.7 GFLOP once per
 * setup pass and each solve n^2 = 0.4 M complex multiply-adds, and it is
 * exact. Above `coarse direct` dof (n^2 doubles per rank, n^3 to factor)
 * the GMRES of mg_coarse.c stays.
 *
 * The global order of the dof is rank-major: rank r's sites in its local
 * order, after those of ranks 0 .. r-1, k dof each. A neighbour on another
 * rank learns its global number through the level's own halo exchange. */
#include "lattice.h"

#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lvl_direct {
    int n, nloc, off;     /* global dof, this rank's dof, its first global dof */
    int *counts, *displs; /* per rank: dof and first dof (the right-hand side's gather) */
    cplx *lu;             /* D_L's rows, [n][n]: LU factors of D_L^T (column-major) */
    lapack_int *piv;
    cplxf *b;             /* [n] gathered right-hand side */
    cplx *x;
};

int lvl_direct_wanted(const mgl_t *L)
{
    long sites = (long)L->g->L[0] * L->g->L[1] * L->g->L[2] * L->g->L[3];
    return L->prm.coarse_direct > 0 && sites * L->k <= L->prm.coarse_direct;
}

/* the global site number of every site (entry 0 of a level vector, exact as
 * a float below 2^24 sites) and of every halo site, through lvl_halo */
static cplxf *global_sites(mgl_t *L, int first)
{
    int k = L->k, V = L->g->V;
    cplxf *ids = calloc((size_t)V * k, sizeof(cplxf));
    for (int x = 0; x < V; x++)
        ids[(size_t)x * k] = (float)(first + x);
    lvl_halo(L, ids);
    return ids;
}

static int neighbour_site(const mgl_t *L, const cplxf *ids, int x, int d)
{
    int y = L->g->nb[8 * x + d];
    if (y >= 0)
        return (int)crealf(ids[(size_t)y * L->k]);
    return (int)crealf(((const cplxf *)L->hc.recv[d])[(size_t)(-y - 1) * L->k]);
}

static cplx block_entry(const mgl_t *L, int x, int d, int a, int b)
{
    size_t kk = (size_t)L->k * L->k, i = ((size_t)x * 9 + (size_t)d) * kk + (size_t)a * L->k + (size_t)b;
#ifdef LAT_HAVE_HALF
    if (L->half)
        return (double)L->Dch[2 * i] + I * (double)L->Dch[2 * i + 1];
#endif
    return L->Dc[i];
}

/* this rank's rows of D_L: the self block on the diagonal, each neighbour
 * block added at the neighbour's columns (on a lattice 2 sites wide, +mu
 * and -mu are one site; 1 wide, the site itself) */
static void local_rows(mgl_t *L, cplx *rows, int n, int first)
{
    int k = L->k, V = L->g->V;
    cplxf *ids = global_sites(L, first);
    memset(rows, 0, sizeof(cplx) * (size_t)V * k * (size_t)n);
    for (int x = 0; x < V; x++)
        for (int d = 0; d < 9; d++) {
            int s = d ? neighbour_site(L, ids, x, d - 1) : first + x;
            for (int a = 0; a < k; a++) {
                cplx *row = rows + ((size_t)x * k + (size_t)a) * n + (size_t)s * k;
                for (int b = 0; b < k; b++)
                    row[b] += block_entry(L, x, d, a, b);
            }
        }
    free(ids);
}

static struct lvl_direct *direct_create(mgl_t *L)
{
    const geom_t *g = L->g;
    struct lvl_direct *S = calloc(1, sizeof *S);
    S->nloc = L->k * g->V;
    S->counts = malloc(sizeof(int) * (size_t)g->size);
    S->displs = malloc(sizeof(int) * (size_t)g->size);
    MPI_Allgather(&S->nloc, 1, MPI_INT, S->counts, 1, MPI_INT, g->comm);
    for (int r = 0; r < g->size; r++) {
        S->displs[r] = S->n;
        S->n += S->counts[r];
    }
    S->off = S->displs[g->rank];
    S->lu = lvl_alloc(L, TAG_COARSE, sizeof(cplx) * (size_t)S->n * S->n);
    S->piv = malloc(sizeof(lapack_int) * (size_t)S->n);
    S->b = malloc(sizeof(cplxf) * (size_t)S->n);
    S->x = malloc(sizeof(cplx) * (size_t)S->n);
    return S;
}

/* (re)factors D_L after each assembly; a singular D_L (never seen: the
 * clover mass keeps it regular) falls back to GMRES with a note */
void lvl_direct_factor(mgl_t *L)
{
    if (!L->direct)
        L->direct = direct_create(L);
    struct lvl_direct *S = L->direct;
    int n = S->n;
    double t0 = wtime();
    cplx *rows = malloc(sizeof(cplx) * (size_t)S->nloc * n);
    local_rows(L, rows, n, S->off / L->k);
    int *rc = malloc(sizeof(int) * (size_t)L->g->size), *rd = malloc(sizeof(int) * (size_t)L->g->size);
    for (int r = 0; r < L->g->size; r++) { /* rows are n doubles complex: n^2 <= coarse direct^2 fits */
        rc[r] = S->counts[r] * n;
        rd[r] = S->displs[r] * n;
    }
    MPI_Allgatherv(rows, S->nloc * n, MPI_C_DOUBLE_COMPLEX, S->lu, rc, rd, MPI_C_DOUBLE_COMPLEX, L->g->comm);
    free(rows), free(rc), free(rd);
    /* Rows of D_L laid out one after another are D_L^T column-major: LAPACK
     * factors that as it lies, and each solve asks for the transposed
     * system. LAPACKE's row-major calls instead copied the n x n matrix
     * transposed on every call, and its checks scanned it for NaNs: 3% of
     * a three-level run (16^4, 512 dof) went to that. */
    lapack_int info = LAPACKE_zgetrf_work(LAPACK_COL_MAJOR, n, n, (lapack_complex_double *)S->lu, n, S->piv);
    L->direct_ok = info == 0;
    if (getenv("HM_LATTICE_VERBOSE") && L->g->rank == 0)
        fprintf(stderr, "setup: level %d LU (%d dof) %.3f s\n", L->level, n, wtime() - t0);
    if (info && L->g->rank == 0)
        fprintf(stderr, "hm-lattice: note: level %d's LU failed (info %d): GMRES instead\n", L->level, (int)info);
}

/* x = D_L^-1 b: every rank solves the whole system (n^2 work, smaller than
 * one more message round) and keeps its part; returns 1 (one solve) */
int lvl_direct_solve(mgl_t *L, cplxf *x, const cplxf *b)
{
    struct lvl_direct *S = L->direct;
    MPI_Allgatherv(b, S->nloc, MPI_C_FLOAT_COMPLEX, S->b, S->counts, S->displs, MPI_C_FLOAT_COMPLEX, L->g->comm);
    for (int i = 0; i < S->n; i++)
        S->x[i] = S->b[i];
    /* two triangular solves with the factors as they lie: n^2 work */
    LAPACKE_zgetrs_work(LAPACK_COL_MAJOR, 'T', S->n, 1, (const lapack_complex_double *)S->lu, S->n, S->piv,
                        (lapack_complex_double *)S->x, S->n);
    for (int i = 0; i < S->nloc; i++)
        x[i] = (cplxf)S->x[S->off + i];
    return 1;
}

void lvl_direct_free(mgl_t *L)
{
    struct lvl_direct *S = L->direct;
    if (!S)
        return;
    lat_free(S->lu);
    free(S->counts), free(S->displs), free(S->piv), free(S->b), free(S->x);
    free(S);
    L->direct = NULL;
}
