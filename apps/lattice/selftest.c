/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-lattice's self-tests (--selftest NAME): checks that cannot be faked,
 * each printing its error against a tolerance on rank 0: the free field
 * against its momentum-space solution, gauge covariance, gamma5
 * hermiticity and single against double precision, results independent of
 * the rank decomposition, AMG against CGNR with two and more levels and
 * with half storage, and the coarse levels' Galerkin identities. */
#define _GNU_SOURCE
#include "lattice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hm__rank; /* of the run: only rank 0 prints */
static int hm__fail;
static void check(const char *what, double err, double tol)
{
    int bad = !(err <= tol);
    if (hm__rank == 0)
        printf("%-40s %.3e (tol %.1e) %s\n", what, err, tol, bad ? "FAIL" : "ok");
    hm__fail |= bad;
}

/* sqrt(sum of d / sum of s) over the ranks */
static double rel_norm(const geom_t *g, double d, double s)
{
    double in[2] = {d, s}, out[2];
    MPI_Allreduce(in, out, 2, MPI_DOUBLE, MPI_SUM, g->comm);
    return sqrt(out[0] / out[1]);
}

/* |a - b| / |b| over all ranks */
static double reldiff(const geom_t *g, const cplx *a, const cplx *b, long n)
{
    double d = 0, s = 0;
    for (long i = 0; i < n; i++) {
        d += creal((a[i] - b[i]) * conj(a[i] - b[i]));
        s += creal(b[i] * conj(b[i]));
    }
    return rel_norm(g, d, s);
}

/* the same for a single-precision a against a single or double b (one of
 * bf, bd given) */
static double reldiff_f(const geom_t *g, const cplxf *a, const cplxf *bf, const cplx *bd, long n)
{
    double d = 0, s = 0;
    for (long i = 0; i < n; i++) {
        cplx b = bf ? (cplx)bf[i] : bd[i], e = (cplx)a[i] - b;
        d += creal(e * conj(e));
        s += creal(b * conj(b));
    }
    return rel_norm(g, d, s);
}

static void test_free(const geom_t *g, params_t p)
{
    gauge_t G;
    p.m0 = 0.05;
    snprintf(p.gauge, sizeof p.gauge, "unit");
    lat_make_gauge(&G, g, &p);
    dirac_t D;
    dirac_init(&D, g, &G, p.m0, p.csw);
    long n = 12L * g->V;
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *xe = lat_alloc_vectors(sizeof(cplx) * n),
         *x = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n);
    static const int mom[3][4] = {{1, 0, 2, 0}, {0, 1, 1, 1}, {2, 3, 0, 2}};
    for (int q = 0; q < 3; q++) {
        double pk[4], M = p.m0, s2 = 0;
        for (int m = 0; m < 4; m++) {
            pk[m] = (m == 3 ? (2 * mom[q][m] + 1) * M_PI : 2 * mom[q][m] * M_PI) / g->L[m];
            M += 1 - cos(pk[m]);
            s2 += sin(pk[m]) * sin(pk[m]);
        }
        /* u: a fixed spin-colour vector; w = D(p)^-1 u = (M - i sum g sin) u / (M^2 + sum sin^2) */
        cplx u[12], w[12];
        for (int a = 0; a < 12; a++)
            u[a] = cos(1.0 + a + q) + I * sin(0.3 * a - q);
        for (int s = 0; s < 4; s++)
            for (int c = 0; c < 3; c++) {
                cplx acc = M * u[3 * s + c];
                for (int m = 0; m < 4; m++)
                    for (int t = 0; t < 4; t++)
                        acc -= I * sin(pk[m]) * lat_gamma[m][s][t] * u[3 * t + c];
                w[3 * s + c] = acc / (M * M + s2);
            }
        for (int e = 0; e < g->V; e++) {
            double ph = 0;
            for (int m = 0; m < 4; m++)
                ph += pk[m] * (g->origin[m] + g->lc[4 * e + m]);
            cplx z = cexp(I * ph);
            for (int a = 0; a < 12; a++) {
                b[12 * (size_t)e + a] = z * u[a];
                xe[12 * (size_t)e + a] = z * w[a];
            }
        }
        char name[64];
        dirac_apply(&D, y, xe);
        snprintf(name, sizeof name, "free field: D x_exact = b (p%d)", q);
        check(name, reldiff(g, y, b, n), 1e-13);
        solve_info_t si;
        memset(x, 0, sizeof(cplx) * n);
        solve_bicgstab(&D, x, b, 1e-13, 5000, &si);
        snprintf(name, sizeof name, "free field: BiCGStab vs exact (p%d)", q);
        check(name, reldiff(g, x, xe, n), 1e-10);
        memset(x, 0, sizeof(cplx) * n);
        solve_cgnr(&D, x, b, 1e-13, 20000, &si);
        snprintf(name, sizeof name, "free field: CGNR vs exact (p%d)", q);
        check(name, reldiff(g, x, xe, n), 1e-10);
    }
    lat_free(b), lat_free(xe), lat_free(x), lat_free(y);
    dirac_free(&D);
    gauge_free(&G);
}

static void su3_vec(const su3 *o, cplx *v) /* v <- (1 x o) v, all 4 spins */
{
    for (int s = 0; s < 4; s++) {
        cplx t[3];
        for (int i = 0; i < 3; i++)
            t[i] = o->m[3 * i] * v[3 * s] + o->m[3 * i + 1] * v[3 * s + 1] + o->m[3 * i + 2] * v[3 * s + 2];
        memcpy(v + 3 * s, t, sizeof t);
    }
}

static void test_gauge(const geom_t *g, params_t p)
{
    gauge_t G;
    if (!strcmp(p.gauge, "unit"))
        snprintf(p.gauge, sizeof p.gauge, "random");
    lat_make_gauge(&G, g, &p);
    long n = 12L * g->V;
    dirac_t D, D2;
    dirac_init(&D, g, &G, p.m0, p.csw);
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *y2 = lat_alloc_vectors(sizeof(cplx) * n);
    lat_fill_random(g, b, p.seed, 77);
    solve_info_t si;
    solve_bicgstab(&D, x, b, 1e-12, 20000, &si);
    dirac_apply(&D, y, b);
    su3 *om = malloc(sizeof(su3) * (size_t)g->V);
    for (int e = 0; e < g->V; e++) {
        rng_t r;
        rng_seed(&r, p.seed, g->gidx[e], 99);
        random_su3(&r, &om[e]);
    }
    double pl = gauge_plaquette(&G, g);
    gauge_transform(&G, g, om);
    check("gauge: plaquette invariant", fabs(gauge_plaquette(&G, g) - pl), 1e-12);
    dirac_init(&D2, g, &G, p.m0, p.csw);
    for (int e = 0; e < g->V; e++) {
        su3_vec(&om[e], b + 12 * (size_t)e);
        su3_vec(&om[e], x + 12 * (size_t)e);
        su3_vec(&om[e], y + 12 * (size_t)e);
    }
    dirac_apply(&D2, y2, b);
    check("gauge: D' (W b) = W (D b)", reldiff(g, y2, y, n), 1e-13);
    solve_bicgstab(&D2, x2, b, 1e-12, 20000, &si);
    check("gauge: solution x' = W x", reldiff(g, x2, x, n), 1e-9);
    free(om);
    lat_free(b), lat_free(x), lat_free(x2), lat_free(y), lat_free(y2);
    dirac_free(&D);
    dirac_free(&D2);
    gauge_free(&G);
}

static void test_g5(const geom_t *g, params_t p)
{
    gauge_t G;
    lat_make_gauge(&G, g, &p);
    dirac_t D;
    dirac_init(&D, g, &G, p.m0, p.csw);
    long n = 12L * g->V;
    cplx *x = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *t = lat_alloc_vectors(sizeof(cplx) * n);
    cplxf *xf = lat_alloc_vectors(sizeof(cplxf) * n), *tf = lat_alloc_vectors(sizeof(cplxf) * n);
    lat_fill_random(g, x, p.seed, 11);
    lat_fill_random(g, y, p.seed, 12);
    dirac_apply(&D, t, x);
    cplx l = vdot(g, y, t, n);
    gamma5(g, y);
    dirac_apply(&D, t, y);
    gamma5(g, t);
    cplx r = vdot(g, t, x, n);
    check("gamma5-hermiticity <y,Dx> = <g5Dg5 y,x> dp", cabs(l - r) / cabs(l), 1e-13);
    for (long i = 0; i < n; i++)
        xf[i] = (cplxf)x[i];
    dirac_apply_f(&D, tf, xf);
    dirac_apply(&D, t, x);
    check("single vs double D", reldiff_f(g, tf, NULL, t, n), 1e-6);
    /* not a symmetric operator: <y,Dx> != <Dy,x> unless something is wrong */
    gamma5(g, y);
    dirac_apply(&D, t, x);
    l = vdot(g, y, t, n);
    dirac_apply(&D, t, y);
    r = vdot(g, t, x, n);
    check("D is not hermitian (sanity)", 1 / (cabs(l - r) / cabs(l)), 1e6);
    lat_free(x), lat_free(y), lat_free(t), lat_free(xf), lat_free(tf);
    dirac_free(&D);
    gauge_free(&G);
}

/* gather a distributed vector (ncomp complex per site) into global order on rank 0 */
static cplx *gather(const geom_t *g, const cplx *v, int nc)
{
    int V = g->V;
    cplx *buf = NULL;
    int64_t *gi = NULL;
    if (g->rank == 0) {
        buf = malloc(sizeof(cplx) * (size_t)nc * V * g->size);
        gi = malloc(sizeof(int64_t) * (size_t)V * g->size);
    }
    MPI_Gather(g->gidx, V, MPI_INT64_T, gi, V, MPI_INT64_T, 0, g->comm);
    MPI_Gather(v, 2 * nc * V, MPI_DOUBLE, buf, 2 * nc * V, MPI_DOUBLE, 0, g->comm);
    cplx *out = NULL;
    if (g->rank == 0) {
        out = malloc(sizeof(cplx) * (size_t)nc * V * g->size);
        for (long k = 0; k < (long)V * g->size; k++)
            memcpy(out + (size_t)gi[k] * nc, buf + (size_t)k * nc, sizeof(cplx) * nc);
        free(buf);
        free(gi);
    }
    return out;
}

typedef struct {
    double plaq;
    cplx *y, *x, *xa;
    int it_cg, it_amg;
} decomp_res;

static void decomp_run(const geom_t *g, const params_t *p, decomp_res *R, int with_amg)
{
    gauge_t G;
    lat_make_gauge(&G, g, p);
    R->plaq = gauge_plaquette(&G, g);
    dirac_t D;
    dirac_init(&D, g, &G, p->m0, p->csw);
    long n = 12L * g->V;
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *x = lat_alloc_vectors(sizeof(cplx) * n), *xa = lat_alloc_vectors(sizeof(cplx) * n);
    lat_fill_random(g, b, p->seed, 3);
    dirac_apply(&D, y, b);
    solve_info_t si;
    solve_cgnr(&D, x, b, 1e-11, 20000, &si);
    R->it_cg = si.iters;
    R->it_amg = 0;
    if (with_amg) {
        mg_t M;
        mg_setup(&M, &D, p);
        solve_fgmres_mg(&M, xa, b, 1e-11, 500, p->restart, &si);
        R->it_amg = si.iters;
        mg_free(&M);
    }
    R->y = gather(g, y, 12);
    R->x = gather(g, x, 12);
    R->xa = gather(g, xa, 12);
    lat_free(b), lat_free(y), lat_free(x), lat_free(xa);
    dirac_free(&D);
    gauge_free(&G);
}

static double rd(const cplx *a, const cplx *b, long n)
{
    double d = 0, s = 0;
    for (long i = 0; i < n; i++) {
        d += creal((a[i] - b[i]) * conj(a[i] - b[i]));
        s += creal(b[i] * conj(b[i]));
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static void test_decomp(const geom_t *g, params_t p)
{
    decomp_res A, B;
    decomp_run(g, &p, &A, 1);
    double res[5] = {0};
    if (g->rank == 0) {
        geom_t g1;
        params_t q = p;
        for (int m = 0; m < 4; m++)
            q.grid[m] = 1;
        snprintf(q.mapping, sizeof q.mapping, "lexicographic");
        char err[256];
        if (geom_init(&g1, &q, MPI_COMM_SELF, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        decomp_run(&g1, &q, &B, 1);
        long n = 12L * g1.V;
        res[0] = fabs(A.plaq - B.plaq);
        res[1] = rd(A.y, B.y, n);
        res[2] = rd(A.x, B.x, n);
        res[3] = rd(A.xa, B.xa, n);
        res[4] = rd(A.xa, A.x, n);
        printf("decomp: %d ranks grid %dx%dx%dx%d: CGNR iterations %d vs %d on 1 rank; AMG %d vs %d\n",
               g->size, g->grid[0], g->grid[1], g->grid[2], g->grid[3], A.it_cg, B.it_cg, A.it_amg,
               B.it_amg);
        free(B.y), free(B.x), free(B.xa);
        geom_free(&g1);
        free(A.y), free(A.x), free(A.xa);
    }
    MPI_Bcast(res, 5, MPI_DOUBLE, 0, g->comm);
    check("decomp: plaquette vs 1 rank", res[0], 1e-12);
    check("decomp: D b vs 1 rank", res[1], 1e-14);
    check("decomp: CGNR solution vs 1 rank", res[2], 1e-9);
    check("decomp: AMG solution vs 1 rank", res[3], 1e-9);
    check("decomp: AMG vs CGNR", res[4], 1e-8);
}

static void fill_level(const mgl_t *L, cplxf *v, uint64_t seed, uint64_t stream)
{
    for (int e = 0; e < L->g->V; e++) {
        rng_t r;
        rng_seed(&r, seed, L->g->gidx[e], stream);
        for (int a = 0; a < L->k; a++)
            v[(size_t)e * L->k + a] = (float)rng_gauss(&r) + I * (float)rng_gauss(&r);
    }
}

/* the coarsest solve against D_c itself: the LU's residual is single
 * precision rounding; GMRES (coarse direct = 0, or a level too large) only
 * has to reduce it. Also checks that the LU is used exactly when wanted. */
static void test_coarsest(mgl_t *C, const params_t *p)
{
    long nc = (long)C->k * C->g->V;
    cplxf *b = malloc(sizeof(cplxf) * nc), *x = malloc(sizeof(cplxf) * nc), *r = malloc(sizeof(cplxf) * nc);
    fill_level(C, b, p->seed, 53);
    lvl_coarsest_solve(C, x, b);
    lvl_apply(C, r, x);
    double d = 0, s = 0;
    for (long i = 0; i < nc; i++) {
        d += cabsf(r[i] - b[i]) * cabsf(r[i] - b[i]);
        s += cabsf(b[i]) * cabsf(b[i]);
    }
    int direct = C->direct && C->direct_ok;
    char what[64];
    snprintf(what, sizeof what, "coarsest D_%d x = b by %s", C->level, direct ? "LU" : "GMRES");
    check(what, rel_norm(C->g, d, s), direct ? 1e-4 : 0.9);
    check("coarsest: LU iff within 'coarse direct'", direct != lvl_direct_wanted(C), 0);
    free(b), free(x), free(r);
}

static void test_mg(const geom_t *g, params_t p)
{
    gauge_t G;
    lat_make_gauge(&G, g, &p);
    dirac_t D;
    dirac_init(&D, g, &G, p.m0, p.csw);
    mg_t M;
    mg_setup(&M, &D, &p);
    long nc = (long)M.k * M.cg.V, n = 12L * g->V;
    cplxf *vc = lat_alloc_vectors(sizeof(cplxf) * nc), *wc = lat_alloc_vectors(sizeof(cplxf) * nc),
          *zc = lat_alloc_vectors(sizeof(cplxf) * nc), *f = lat_alloc_vectors(sizeof(cplxf) * n),
          *f2 = lat_alloc_vectors(sizeof(cplxf) * n);
    for (int e = 0; e < M.cg.V; e++) {
        rng_t r;
        rng_seed(&r, p.seed, M.cg.gidx[e], 31);
        for (int a = 0; a < M.k; a++)
            vc[(size_t)e * M.k + a] = (float)rng_gauss(&r) + I * (float)rng_gauss(&r);
    }
    mg_prolong(&M, f, vc);
    mg_restrict(&M, wc, f);
    double d = 0;
    for (long i = 0; i < nc; i++)
        d += cabsf(wc[i] - vc[i]) * cabsf(wc[i] - vc[i]);
    MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, g->comm);
    check("mg: P^H P = I", sqrt(d / vnorm2_f(&M.cg, vc, nc)), 1e-5);
    dirac_apply_f(&D, f2, f);
    mg_restrict(&M, wc, f2);
    mg_coarse_apply(&M, zc, vc);
    d = 0;
    for (long i = 0; i < nc; i++)
        d += cabsf(wc[i] - zc[i]) * cabsf(wc[i] - zc[i]);
    MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, g->comm);
    check("mg: P^H D P v = D_c v", sqrt(d / vnorm2_f(&M.cg, zc, nc)), 1e-5);
    /* Gamma5_c = +1 on the first N coarse dof, -1 on the rest */
    for (int e = 0; e < M.cg.V; e++) {
        rng_t r;
        rng_seed(&r, p.seed, M.cg.gidx[e], 32);
        for (int a = 0; a < M.k; a++)
            wc[(size_t)e * M.k + a] = (float)rng_gauss(&r) + I * (float)rng_gauss(&r);
    }
    mg_coarse_apply(&M, zc, vc);
    cplx l = vdot_f(&M.cg, wc, zc, nc);
    for (int e = 0; e < M.cg.V; e++)
        for (int a = M.N; a < M.k; a++)
            wc[(size_t)e * M.k + a] = -wc[(size_t)e * M.k + a];
    mg_coarse_apply(&M, zc, wc);
    for (int e = 0; e < M.cg.V; e++)
        for (int a = M.N; a < M.k; a++)
            zc[(size_t)e * M.k + a] = -zc[(size_t)e * M.k + a];
    cplx r = vdot_f(&M.cg, zc, vc, nc);
    check("mg: coarse Gamma5-hermiticity", cabs(l - r) / cabs(l), 1e-5);
    test_coarsest(M.lv, &p);
    /* the odd-even reduced block solve converges to the block system's
     * solution (Schur complement + back-substitution = full block solve) */
    if (p.block_oddeven) {
        check("mg: odd-even block solve, 4 MR steps (< 1)", mg_block_solve_residual(&M, 0, 4), 0.9);
        check("mg: odd-even block solve, 60 MR steps", mg_block_solve_residual(&M, 0, 60), 1e-4);
    }
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x1 = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n);
    lat_fill_random(g, b, p.seed, 41);
    solve_info_t s1, s2;
    solve_cgnr(&D, x1, b, 1e-11, 50000, &s1);
    solve_fgmres_mg(&M, x2, b, 1e-11, 1000, p.restart, &s2);
    if (hm__rank == 0)
        printf("mg: CGNR %d iterations, AMG %d iterations (%ld coarse)\n", s1.iters, s2.iters,
               s2.coarse_iters);
    check("mg: AMG true residual (recomputed in dp)", s2.true_relres, 1e-10);
    check("mg: AMG vs CGNR solution", reldiff(g, x2, x1, n), 1e-7);
    check("mg: AMG needs fewer iterations (ratio)", (double)s2.iters / s1.iters, 0.5);
    lat_free(vc), lat_free(wc), lat_free(zc), lat_free(f), lat_free(f2);
    lat_free(b), lat_free(x1), lat_free(x2);
    mg_free(&M);
    dirac_free(&D);
    gauge_free(&G);
}

/* half-precision storage: the 16-bit operator against the single one
 * (relative error ~1e-3, and nonzero: it really is quantised), and an AMG
 * solve with half-stored links, clover, P and D_c reaching the tolerance in
 * double and agreeing with the single-storage AMG solution */
static void test_half(const geom_t *g, params_t p)
{
    gauge_t G;
    lat_make_gauge(&G, g, &p);
    dirac_t D, Dh;
    dirac_init(&D, g, &G, p.m0, p.csw);
    dirac_init(&Dh, g, &G, p.m0, p.csw);
    if (dirac_set_half(&Dh))
        lat_die("storage = half needs a compiler with _Float16 and a CPU with F16C, AVX2 and FMA");
    long n = 12L * g->V;
    cplx *x = lat_alloc_vectors(sizeof(cplx) * n);
    cplxf *xf = lat_alloc_vectors(sizeof(cplxf) * n), *y1 = lat_alloc_vectors(sizeof(cplxf) * n),
          *y2 = lat_alloc_vectors(sizeof(cplxf) * n);
    lat_fill_random(g, x, p.seed, 13);
    for (long i = 0; i < n; i++)
        xf[i] = (cplxf)x[i];
    dirac_apply_f(&D, y1, xf);
    dirac_apply_f(&Dh, y2, xf);
    double rel = reldiff_f(g, y2, y1, NULL, n);
    check("half: D_half vs D_single (relative)", rel, 2e-3);
    check("half: D_half is quantised (1 / rel. difference)", 1 / rel, 1e6);
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x1 = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n);
    lat_fill_random(g, b, p.seed, 43);
    mg_t M1, M2;
    mg_setup(&M1, &D, &p);
    mg_setup(&M2, &Dh, &p);
    solve_info_t s1, s2;
    solve_fgmres_mg(&M1, x1, b, 1e-11, 1000, p.restart, &s1);
    solve_fgmres_mg(&M2, x2, b, 1e-11, 1000, p.restart, &s2);
    if (hm__rank == 0)
        printf("half: AMG iterations single storage %d, half storage %d\n", s1.iters, s2.iters);
    check("half: AMG true residual, half storage (dp)", s2.true_relres, 1e-10);
    check("half: half vs single storage AMG solution", reldiff(g, x2, x1, n), 1e-8);
    check("half: P and D_c stored in 16 bit (1 = yes)", M2.half && M2.Wh && M2.lv->Dch && !M2.W ? 0 : 1, 0.5);
    mg_free(&M1);
    mg_free(&M2);
    lat_free(x), lat_free(xf), lat_free(y1), lat_free(y2), lat_free(b), lat_free(x1), lat_free(x2);
    dirac_free(&D);
    dirac_free(&Dh);
    gauge_free(&G);
}

/* random level vector keyed by global site (the same on any decomposition) */
/* level 2's first test vectors are P^H of the fine raw ones, taken from the
 * Gram-Schmidt coefficients (mg_orthonormalise): against mg_restrict */
static void test_restricted_tv(mg_t *M, const params_t *p)
{
    mgl_t *L = M->lv;
    if (!L->next || p->coarse_setup || M->half) /* inverse iteration or 16-bit P change them */
        return;
    int ns = L->N < M->N ? L->N : M->N;
    long nc = (long)L->k * L->g->V;
    cplxf *r = malloc(sizeof(cplxf) * nc);
    double d = 0, s = 0;
    for (int j = 0; j < ns; j++) {
        mg_restrict(M, r, M->TV + (size_t)j * 12 * M->g->V);
        for (long i = 0; i < nc; i++) {
            cplxf t = L->TV[(size_t)j * nc + i];
            d += cabsf(r[i] - t) * cabsf(r[i] - t);
            s += cabsf(r[i]) * cabsf(r[i]);
        }
    }
    check("levels: level-2 test vectors = P^H TV", rel_norm(M->g, d, s), 1e-5);
    free(r);
}

/* every level of the multigrid: P^H P = I and the Galerkin identity
 * <P v, D_l P w> = <v, D_{l+1} w> for random v, w (the fine D in single for
 * l = 1), then a solve against CGNR */
static void test_levels(const geom_t *g, params_t p)
{
    gauge_t G;
    lat_make_gauge(&G, g, &p);
    dirac_t D;
    dirac_init(&D, g, &G, p.m0, p.csw);
    mg_t M;
    mg_setup(&M, &D, &p);
    test_restricted_tv(&M, &p);
    for (mgl_t *C = M.lv, *L = NULL; C; L = C, C = C->next) {
        const geom_t *fg = L ? L->g : g;
        long nf = L ? (long)L->k * fg->V : 12L * fg->V, nc = (long)C->k * C->g->V;
        cplxf *v = malloc(sizeof(cplxf) * nc), *w = malloc(sizeof(cplxf) * nc), *z = malloc(sizeof(cplxf) * nc),
              *pv = malloc(sizeof(cplxf) * nf), *pw = malloc(sizeof(cplxf) * nf), *dpw = malloc(sizeof(cplxf) * nf);
        fill_level(C, v, p.seed, 51);
        fill_level(C, w, p.seed, 52);
        L ? lvl_prolong(L, pv, v) : mg_prolong(&M, pv, v);
        L ? lvl_prolong(L, pw, w) : mg_prolong(&M, pw, w);
        L ? lvl_restrict(L, z, pv) : mg_restrict(&M, z, pv);
        L ? lvl_apply(L, dpw, pw) : dirac_apply_f(&D, dpw, pw);
        double d = 0;
        for (long i = 0; i < nc; i++)
            d += cabsf(z[i] - v[i]) * cabsf(z[i] - v[i]);
        MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, g->comm);
        char what[64];
        snprintf(what, sizeof what, "levels: P^H P = I, level %d", C->level - 1);
        check(what, sqrt(d / vnorm2_f(C->g, v, nc)), 1e-5);
        lvl_apply(C, z, w);
        cplx a = vdot_f(fg, pv, dpw, nf), b = vdot_f(C->g, v, z, nc);
        snprintf(what, sizeof what, "levels: Galerkin D_%d = P^H D_%d P", C->level, C->level - 1);
        check(what, cabs(a - b) / sqrt(vnorm2_f(fg, pv, nf) * vnorm2_f(fg, dpw, nf)), 1e-5);
        free(v), free(w), free(z), free(pv), free(pw), free(dpw);
        if (!C->next)
            test_coarsest(C, &p);
    }
    long n = 12L * g->V;
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x1 = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n);
    lat_fill_random(g, b, p.seed, 41);
    solve_info_t s1, s2;
    solve_cgnr(&D, x1, b, 1e-11, 50000, &s1);
    solve_fgmres_mg(&M, x2, b, 1e-11, 1000, p.restart, &s2);
    if (hm__rank == 0)
        printf("levels: %d levels, CGNR %d iterations, AMG %d iterations (%ld on level 2)\n", p.levels, s1.iters,
               s2.iters, s2.coarse_iters);
    check("levels: AMG true residual (recomputed in dp)", s2.true_relres, 1e-10);
    check("levels: AMG vs CGNR solution", reldiff(g, x2, x1, n), 1e-7);
    lat_free(b), lat_free(x1), lat_free(x2);
    mg_free(&M);
    dirac_free(&D);
    gauge_free(&G);
}

/* Runs self-test `name`: 0 when every check passed, 1 when one failed, -1
 * for an unknown name (nothing run). Collective. */
int lat_selftest(const geom_t *g, const params_t *p, const char *name)
{
    static const struct {
        const char *name;
        void (*run)(const geom_t *, params_t);
    } all[] = {{"free", test_free},     {"gauge", test_gauge}, {"g5", test_g5},        {"decomp", test_decomp},
               {"mg", test_mg},         {"half", test_half},   {"levels", test_levels}};
    hm__rank = g->rank;
    hm__fail = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, all[i].name)) {
            all[i].run(g, *p);
            return hm__fail ? 1 : 0;
        }
    return -1;
}
