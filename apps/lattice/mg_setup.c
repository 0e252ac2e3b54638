/* SPDX-License-Identifier: BSD-3-Clause */
/* Aggregation multigrid (DD-alphaAMG class), fine level and setup:
 *  - red-black Schwarz (SAP) smoother on lattice blocks, MR(k) block solves;
 *  - aggregates = SAP blocks x {spins 0,1} / {spins 2,3} (Gamma5-compatible);
 *  - adaptive setup: SAP inverse iteration (1, 2, 3 sweeps) on random vectors,
 *    then bootstrap cycles v <- v + C (v - D v) with the current V-cycle C;
 *  - P: test vectors Gram-Schmidt-orthonormalised per aggregate (P^H P = I);
 *  - D_c = P^H D P assembled from self and neighbour couplings (9 k x k
 *    blocks per coarse site), applied with a coarse halo exchange;
 *  - V-cycle in single precision (restrict, coarse solve, prolong, SAP
 *    post-smoothing) preconditioning an outer FGMRES in double; the coarse
 *    solve is GMRES (LU when small, mg_direct.c) with two levels, else the
 *    K-cycle of mg_levels.c. */
#include "lattice.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void coarse_geom(mg_t *M, const params_t *p)
{
    params_t q = *p;
    for (int m = 0; m < 4; m++) {
        q.L[m] = p->L[m] / p->block[m];
        q.grid[m] = M->g->grid[m];
        q.block[m] = 1;
    }
    q.nocheck = 1;
    char err[256];
    if (geom_init(&M->cg, &q, M->g->comm, err, sizeof err)) {
        fprintf(stderr, "hm-lattice: coarse geometry: %s\n", err);
        MPI_Abort(M->g->comm, 2);
    }
}

void mg_vcycle(mg_t *M, cplxf *x, const cplxf *r)
{
    double t = wtime();
    mg_restrict(M, M->rc, r);
    double t1 = wtime();
    M->coarse_iters += lvl_solve(M->lv, M->ec, M->rc);
    double t2 = wtime();
    mg_prolong(M, x, M->ec);
    double t3 = wtime();
    M->t_coarse += t3 - t;
    M->t_restrict += t1 - t;
    M->t_csolve += t2 - t1;
    M->t_prolong += t3 - t2;
    sap(M, x, r, M->prm.post_smooth, 0);
    M->t_smooth += wtime() - t3;
    M->ncycles++;
}

/* P from the current test vectors, then D_c = P^H D P and the levels below
 * it, whose first test vectors are the restrictions of the fine ones (timed) */
static void setup_interp(mg_t *M)
{
    double t = wtime();
    mgl_t *L = M->lv;
    int ns = L->next ? (L->N < M->N ? L->N : M->N) : 0;
    mg_orthonormalise(M, L->next ? L->TV : NULL, ns); /* and the first ns restrictions */
    double t1 = wtime();
    mg_assemble(M);
    lvl_prepare(L);
    if (L->next)
        lvl_build(L, ns);
    M->ts_orth += t1 - t;
    M->ts_asm += wtime() - t1;
}

/* SAP blocks = aggregates: each fine site's block, the blocks' sites (even
 * ones first) and red/black colours */
static void mg_blocks(mg_t *M, const params_t *p)
{
    const geom_t *g = M->g;
    M->nblk = M->cg.V;
    M->bsites = p->block[0] * p->block[1] * p->block[2] * p->block[3];
    M->bsite = malloc(sizeof(int) * (size_t)M->nblk * M->bsites);
    M->blk = malloc(sizeof(int) * (size_t)g->V);
    M->bcolor = malloc(sizeof(int) * (size_t)M->nblk);
    int *fill = calloc((size_t)M->nblk, sizeof(int));
    for (int x = 0; x < g->V; x++) {
        int bc[4];
        for (int m = 0; m < 4; m++)
            bc[m] = g->lc[4 * x + m] / p->block[m];
        int c = M->cg.lex2eo[lex_local(&M->cg, bc)];
        M->blk[x] = c;
        M->bsite[(size_t)c * M->bsites + fill[c]++] = x;
        int par = 0;
        for (int m = 0; m < 4; m++)
            par += M->cg.origin[m] + bc[m];
        M->bcolor[c] = par & 1;
    }
    free(fill);
    for (int col = 0; col < 2; col++) {
        M->csite[col] = malloc(sizeof(int) * (size_t)g->V);
        M->ncsite[col] = 0;
    }
    for (int x = 0; x < g->V; x++) {
        int col = M->bcolor[M->blk[x]];
        M->csite[col][M->ncsite[col]++] = x;
    }
}

static void mg_alloc(mg_t *M, const params_t *p)
{
    const geom_t *g = M->g;
    size_t n = 12 * (size_t)g->V * sizeof(cplxf);
    long nc = (long)M->k * M->cg.V;
    M->TV = lat_alloc_testvec(n * (size_t)M->N);
    if (M->half)
        M->Wh = lat_alloc_testvec(n / 2 * (size_t)M->N);
    else
        M->W = lat_alloc_testvec(n * (size_t)M->N);
    M->r = lat_alloc_vectors(n);
    M->e = lat_alloc_vectors(n);
    M->q = lat_alloc_vectors(n);
    M->t = lat_alloc_vectors(n);
    if (p->block_oddeven) {
        M->q2 = lat_alloc_vectors(n);
        M->q3 = lat_alloc_vectors(n);
        M->bne = calloc((size_t)M->nblk, sizeof(int));
        for (int x = 0; x < g->Vh; x++) /* bsite lists each block's even sites first */
            M->bne[M->blk[x]]++;
    }
    M->rc = lat_alloc_vectors(sizeof(cplxf) * (size_t)nc);
    M->ec = lat_alloc_vectors(sizeof(cplxf) * (size_t)nc);
    halo_alloc(g, &M->hw, sizeof(cplxf) * 12 * (size_t)M->N);
    halo_alloc(&M->cg, &M->hb, sizeof(cplxf) * (size_t)M->k * M->k); /* half storage: half of it used */
    M->lv = lvl_create(&M->cg, p, 2, M->half);
}

/* initial phase: random vectors keyed by global site, SAP inverse iteration */
static void setup_initial(mg_t *M, const params_t *p)
{
    const geom_t *g = M->g;
    size_t V12 = 12 * (size_t)g->V;
    for (int j = 0; j < M->N; j++) {
        cplxf *w = M->TV + (size_t)j * V12;
        for (int e = 0; e < g->V; e++) {
            rng_t r;
            rng_seed(&r, p->seed, g->gidx[e], 7000 + (uint64_t)j);
            for (int a = 0; a < 12; a++)
                w[12 * (size_t)e + a] = (float)rng_gauss(&r) + I * (float)rng_gauss(&r);
        }
        for (int s = 1; s <= p->setup_sap; s++) {
            sap(M, M->t, w, s, 1);
            double nn = sqrt(vnorm2_f(g, M->t, (long)V12));
            for (size_t i = 0; i < V12; i++)
                w[i] = M->t[i] / (float)nn;
        }
    }
}

/* bootstrap: v <- v + C (v - D v) with the current cycle C */
static void setup_bootstrap(mg_t *M)
{
    const geom_t *g = M->g;
    size_t V12 = 12 * (size_t)g->V;
    cplxf *z = lat_alloc_vectors(V12 * sizeof(cplxf));
    for (int j = 0; j < M->N; j++) {
        cplxf *w = M->TV + (size_t)j * V12;
        dirac_apply_f(M->D, M->t, w);
        for (size_t i = 0; i < V12; i++)
            M->t[i] = w[i] - M->t[i];
        mg_vcycle(M, z, M->t);
        for (size_t i = 0; i < V12; i++)
            w[i] += z[i];
        double nn = sqrt(vnorm2_f(g, w, (long)V12));
        for (size_t i = 0; i < V12; i++)
            w[i] /= (float)nn;
    }
    lat_free(z);
}

int mg_setup(mg_t *M, dirac_t *D, const params_t *p)
{
    double t0 = wtime();
    memset(M, 0, sizeof *M);
    M->D = D;
    M->g = D->g;
    M->prm = *p;
    M->N = p->ntv;
    M->k = 2 * p->ntv;
    M->half = D->half;
    coarse_geom(M, p);
    mg_blocks(M, p);
    mg_alloc(M, p);
    int verbose = getenv("HM_LATTICE_VERBOSE") && M->g->rank == 0;
    double ts = wtime();
    setup_initial(M, p);
    M->ts_init = wtime() - ts;
    setup_interp(M);
    if (verbose)
        fprintf(stderr, "setup: initial phase done, %.2f s\n", wtime() - t0);
    for (int it = 0; it < p->setup_iter; it++) {
        ts = wtime();
        setup_bootstrap(M);
        M->ts_boot += wtime() - ts;
        setup_interp(M);
        if (verbose)
            fprintf(stderr, "setup: bootstrap %d done, %.2f s, %ld coarse iterations\n", it + 1,
                    wtime() - t0, M->coarse_iters);
    }
    M->t_coarse = M->t_smooth = M->t_restrict = M->t_prolong = M->t_csolve = 0;
    M->coarse_iters = 0;
    for (mgl_t *L = M->lv; L; L = L->next)
        L->iters = 0;
    M->t_setup = wtime() - t0;
    return 0;
}

void mg_free(mg_t *M)
{
    free(M->bsite);
    free(M->blk);
    free(M->bcolor);
    free(M->csite[0]);
    free(M->csite[1]);
    lat_free(M->W);
    lat_free(M->Wh);
    lat_free(M->TV);
    lat_free(M->r), lat_free(M->e), lat_free(M->q), lat_free(M->t);
    if (M->bne)
        lat_free(M->q2), lat_free(M->q3), free(M->bne);
    lat_free(M->rc), lat_free(M->ec);
    lvl_free(M->lv);
    halo_free(&M->hw);
    halo_free(&M->hb);
    geom_free(&M->cg);
}

void mg_coarse_apply(mg_t *M, cplxf *out, const cplxf *in) { lvl_apply(M->lv, out, in); }

/* FGMRES(m) workspace: the Krylov basis V (double), the V-cycle outputs Z
 * (single precision, exact, half the traffic of the final update), the
 * Hessenberg matrix H with its Givens rotations (cs, sn), the rotated
 * right-hand side gv and the solution y of the small system */
typedef struct {
    const geom_t *g;
    long n;
    int m;
    cplx *V, *w, *zd, *H, *gv, *cs, *sn, *y;
    cplxf *Z, *rf;
} fgmres_t;

static void fgmres_alloc(fgmres_t *F, const geom_t *g, int m)
{
    F->g = g;
    F->n = 12L * g->V;
    F->m = m;
    size_t sz = sizeof(cplx) * (size_t)F->n;
    F->V = lat_alloc_krylov(sz * (size_t)(m + 1));
    F->w = lat_alloc_krylov(sz);
    F->zd = lat_alloc_krylov(sz);
    F->Z = lat_alloc_krylov(sizeof(cplxf) * (size_t)F->n * (size_t)m);
    F->H = calloc((size_t)(m + 1) * m + 4 * (size_t)m + 4, sizeof(cplx));
    F->gv = F->H + (size_t)(m + 1) * m;
    F->cs = F->gv + m + 1;
    F->sn = F->cs + m;
    F->y = F->sn + m;
    F->rf = lat_alloc_vectors(sizeof(cplxf) * (size_t)F->n);
}

static void fgmres_free(fgmres_t *F)
{
    lat_free(F->V), lat_free(F->Z), lat_free(F->w), lat_free(F->zd), lat_free(F->rf);
    free(F->H);
}

/* Arnoldi step j: z_j = C v_j (the V-cycle), w = D z_j orthogonalised
 * against v_0..v_j (modified Gram-Schmidt) into column j of H, v_{j+1} */
static void fgmres_arnoldi(fgmres_t *F, mg_t *M, int j)
{
    long n = F->n;
    int m = F->m;
    cplx *vj = F->V + (size_t)j * n, *w = F->w, *zd = F->zd;
    cplxf *zj = F->Z + (size_t)j * n, *rf = F->rf;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        rf[i] = (cplxf)vj[i];
    mg_vcycle(M, zj, rf);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        zd[i] = zj[i];
    dirac_apply(M->D, w, zd);
    for (int i = 0; i <= j; i++) {
        cplx h = vdot(F->g, F->V + (size_t)i * n, w, n);
        F->H[(size_t)i * m + j] = h;
        const cplx *vi = F->V + (size_t)i * n;
#pragma omp parallel for schedule(static)
        for (long l = 0; l < n; l++)
            w[l] -= h * vi[l];
    }
    double hn = sqrt(vnorm2(F->g, w, n));
    F->H[(size_t)(j + 1) * m + j] = hn;
    cplx *vn = F->V + (size_t)(j + 1) * n;
#pragma omp parallel for schedule(static)
    for (long l = 0; l < n; l++)
        vn[l] = w[l] / hn;
}

/* x += Z y, y from the j x j triangular system H y = gv */
static void fgmres_update(fgmres_t *F, cplx *x, int j)
{
    int m = F->m;
    long n = F->n;
    for (int i = j - 1; i >= 0; i--) {
        cplx s = F->gv[i];
        for (int l = i + 1; l < j; l++)
            s -= F->H[(size_t)i * m + l] * F->y[l];
        F->y[i] = s / F->H[(size_t)i * m + i];
    }
    for (int i = 0; i < j; i++) {
        const cplxf *zi = F->Z + (size_t)i * n;
        cplx yi = F->y[i];
#pragma omp parallel for schedule(static)
        for (long l = 0; l < n; l++)
            x[l] += yi * zi[l];
    }
}

/* v_0 = (b - D x) / |b - D x|; returns |b - D x| */
static double fgmres_restart(fgmres_t *F, mg_t *M, cplx *x, const cplx *b)
{
    long n = F->n;
    cplx *V = F->V;
    dirac_apply(M->D, V, x);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        V[i] = b[i] - V[i];
    double beta = sqrt(vnorm2(F->g, V, n));
    if (beta > 0) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++)
            V[i] /= beta;
    }
    memset(F->gv, 0, sizeof(cplx) * (size_t)(F->m + 1));
    F->gv[0] = beta;
    return beta;
}

static void fgmres_info(solve_info_t *si, mg_t *M, const double *t0, long ci0, cplx *x, const cplx *b,
                        double tol)
{
    si->time = wtime() - t0[0];
    si->t_coarse = M->t_coarse - t0[1];
    si->coarse_iters = M->coarse_iters - ci0;
    si->t_smooth = M->t_smooth - t0[2];
    si->t_restrict = M->t_restrict - t0[3];
    si->t_prolong = M->t_prolong - t0[4];
    si->t_csolve = M->t_csolve - t0[5];
    si->t_outer = si->time - si->t_smooth - si->t_restrict - si->t_prolong - si->t_csolve;
    si->true_relres = true_residual(M->D, x, b);
    si->converged = si->true_relres <= tol * 10;
}

/* FGMRES(restart) in double, right-preconditioned by the single V-cycle */
void solve_fgmres_mg(mg_t *M, cplx *x, const cplx *b, double tol, int maxit, int restart,
                     solve_info_t *si)
{
    const geom_t *g = M->g;
    fgmres_t F;
    fgmres_alloc(&F, g, restart);
    double t0[6] = {wtime(), M->t_coarse, M->t_smooth, M->t_restrict, M->t_prolong, M->t_csolve};
    long ci0 = M->coarse_iters;
    memset(si, 0, sizeof *si);
    double bn = sqrt(vnorm2(g, b, F.n)), res = 0;
    int it = 0, verbose = getenv("HM_LATTICE_VERBOSE") != NULL;
    while (it < maxit) {
        res = fgmres_restart(&F, M, x, b);
        if (res <= tol * bn)
            break;
        int j;
        for (j = 0; j < F.m && it < maxit; j++) {
            fgmres_arnoldi(&F, M, j);
            res = lat_givens(F.H, F.m, j, F.cs, F.sn, F.gv);
            it++;
            if (verbose && g->rank == 0)
                fprintf(stderr, "fgmres %d: relres %.3e, coarse iterations so far %ld, %.2f s\n", it,
                        res / bn, M->coarse_iters - ci0, wtime() - t0[0]);
            if (res <= tol * bn) {
                j++;
                break;
            }
        }
        fgmres_update(&F, x, j);
        if (res <= tol * bn)
            break;
    }
    si->iters = it;
    si->relres = res / bn;
    fgmres_info(si, M, t0, ci0, x, b, tol);
    fgmres_free(&F);
}
