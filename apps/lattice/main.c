/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-lattice driver: input parsing, field generation, self-tests, solves and
 * versioned JSON output. Usage:
 *   hm-lattice [input-file] [--set 'key=value']... [--selftest NAME] [--json PATH]
 * Bad input (unknown key, indivisible dims, bad gauge file) ends every rank
 * with one line on stderr (rank 0) and exit code 2. */
#define _GNU_SOURCE
#include "lattice.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int hm__rank;

/* collective: every rank calls it with the same verdict */
static void die(const char *msg)
{
    if (hm__rank == 0)
        fprintf(stderr, "hm-lattice: error: %s\n", msg);
    fflush(stderr);
    MPI_Finalize();
    exit(2);
}

/* Whether path can be written: opened for append (truncating nothing) and,
 * when this made it, removed again. */
static int writable(const char *path)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode))
        return 0;
    FILE *f = fopen(path, "a");
    if (!f)
        return 0;
    fclose(f);
    if (!existed)
        remove(path);
    return 1;
}

static void fill_random(const geom_t *g, cplx *v, uint64_t seed, uint64_t stream)
{
    for (int e = 0; e < g->V; e++) {
        rng_t r;
        rng_seed(&r, seed, g->gidx[e], stream);
        for (int a = 0; a < 12; a++)
            v[12 * (size_t)e + a] = rng_gauss(&r) + I * rng_gauss(&r);
    }
}

static void make_rhs(const geom_t *g, const params_t *p, cplx *b, int k)
{
    long n = 12L * g->V;
    memset(b, 0, sizeof(cplx) * (size_t)n);
    if (!strcmp(p->rhs, "random"))
        fill_random(g, b, p->seed, 5000 + (uint64_t)k);
    else if (!strcmp(p->rhs, "ones"))
        for (long i = 0; i < n; i++)
            b[i] = 1;
    else
        for (int e = 0; e < g->V; e++)
            if (g->gidx[e] == 0)
                b[12 * (size_t)e + (k % 12)] = 1;
}

static void make_gauge(gauge_t *G, const geom_t *g, const params_t *p)
{
    char err[512];
    gauge_create(G, g);
    if (!strcmp(p->gauge, "unit")) {
        gauge_unit(G, g);
    } else if (!strcmp(p->gauge, "random")) {
        gauge_random(G, g, p->seed);
    } else if (!strcmp(p->gauge, "smeared")) {
        gauge_random(G, g, p->seed);
        gauge_smear(G, g, p->smear, p->smear_alpha);
    } else if (!strcmp(p->gauge, "heatbath")) {
        gauge_unit(G, g);
        gauge_heatbath(G, g, p->beta, p->sweeps, p->seed);
    } else {
        if (!p->gauge_file[0])
            die("gauge: file needs 'gauge file'");
        if (gauge_read(G, g, p->gauge_file, err, sizeof err))
            die(err);
    }
    if (p->gauge_write[0] && gauge_write(G, g, p->gauge_write, err, sizeof err))
        die(err);
}

/* ------------------------------------------------------------- self-tests */
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

/* Mean seconds per single-precision apply over reps (after one warm-up),
 * the fastest one in *best: the operator as it stands (single or half
 * storage) */
static double time_dirac_f(dirac_t *D, const geom_t *g, cplxf *af, cplxf *bf, int reps,
                           double *best)
{
    dirac_apply_f(D, bf, af);
    MPI_Barrier(g->comm);
    double t = wtime();
    for (int r = 0; r < reps; r++) {
        double t1 = wtime();
        dirac_apply_f(D, r % 2 ? af : bf, r % 2 ? bf : af);
        t1 = wtime() - t1;
        *best = t1 < *best ? t1 : *best;
    }
    MPI_Barrier(g->comm);
    return (wtime() - t) / reps;
}

static void test_free(const geom_t *g, params_t p)
{
    gauge_t G;
    p.m0 = 0.05;
    snprintf(p.gauge, sizeof p.gauge, "unit");
    make_gauge(&G, g, &p);
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
    make_gauge(&G, g, &p);
    long n = 12L * g->V;
    dirac_t D, D2;
    dirac_init(&D, g, &G, p.m0, p.csw);
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *y2 = lat_alloc_vectors(sizeof(cplx) * n);
    fill_random(g, b, p.seed, 77);
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
    make_gauge(&G, g, &p);
    dirac_t D;
    dirac_init(&D, g, &G, p.m0, p.csw);
    long n = 12L * g->V;
    cplx *x = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *t = lat_alloc_vectors(sizeof(cplx) * n);
    cplxf *xf = lat_alloc_vectors(sizeof(cplxf) * n), *tf = lat_alloc_vectors(sizeof(cplxf) * n);
    fill_random(g, x, p.seed, 11);
    fill_random(g, y, p.seed, 12);
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
    make_gauge(&G, g, p);
    R->plaq = gauge_plaquette(&G, g);
    dirac_t D;
    dirac_init(&D, g, &G, p->m0, p->csw);
    long n = 12L * g->V;
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *y = lat_alloc_vectors(sizeof(cplx) * n),
         *x = lat_alloc_vectors(sizeof(cplx) * n), *xa = lat_alloc_vectors(sizeof(cplx) * n);
    fill_random(g, b, p->seed, 3);
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
    make_gauge(&G, g, &p);
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
    fill_random(g, b, p.seed, 41);
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
    make_gauge(&G, g, &p);
    dirac_t D, Dh;
    dirac_init(&D, g, &G, p.m0, p.csw);
    dirac_init(&Dh, g, &G, p.m0, p.csw);
    if (dirac_set_half(&Dh))
        die("storage = half needs a compiler with _Float16 and a CPU with F16C, AVX2 and FMA");
    long n = 12L * g->V;
    cplx *x = lat_alloc_vectors(sizeof(cplx) * n);
    cplxf *xf = lat_alloc_vectors(sizeof(cplxf) * n), *y1 = lat_alloc_vectors(sizeof(cplxf) * n),
          *y2 = lat_alloc_vectors(sizeof(cplxf) * n);
    fill_random(g, x, p.seed, 13);
    for (long i = 0; i < n; i++)
        xf[i] = (cplxf)x[i];
    dirac_apply_f(&D, y1, xf);
    dirac_apply_f(&Dh, y2, xf);
    double rel = reldiff_f(g, y2, y1, NULL, n);
    check("half: D_half vs D_single (relative)", rel, 2e-3);
    check("half: D_half is quantised (1 / rel. difference)", 1 / rel, 1e6);
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x1 = lat_alloc_vectors(sizeof(cplx) * n),
         *x2 = lat_alloc_vectors(sizeof(cplx) * n);
    fill_random(g, b, p.seed, 43);
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
    make_gauge(&G, g, &p);
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
    fill_random(g, b, p.seed, 41);
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

/* Halo-exchange benchmark: every rank exchanges one message of each size with
 * its +mu and -mu neighbour in every split direction (as the Dirac halo
 * does), non-blocking; effective bandwidth = bytes sent + received per rank
 * per second. With one rank in a direction it still goes through MPI (self). */
static void halo_bench(const geom_t *g, const char *json)
{
    int dirs[4], nd = 0;
    for (int m = 0; m < 4; m++)
        if (g->grid[m] > 1)
            dirs[nd++] = m;
    int self = nd == 0;
    if (self)
        dirs[nd++] = 3;
    FILE *f = NULL;
    if (g->rank == 0) {
        f = json ? fopen(json, "w") : stdout;
        if (!f)
            f = stdout;
        fprintf(f, "{\n  \"schema_version\": %d,\n  \"app\": \"hm-lattice\",\n  \"bench\": \"halo\",\n"
                "  \"ranks\": %d,\n  \"process_grid\": [%d, %d, %d, %d],\n  \"directions\": %d,\n"
                "  \"points\": [\n", LAT_SCHEMA_VERSION, g->size, g->grid[0], g->grid[1], g->grid[2],
                g->grid[3], self ? 0 : nd);
    }
    size_t maxb = 4u << 20;
    char *sb = malloc(maxb * 2 * 4), *rb = malloc(maxb * 2 * 4);
    memset(sb, 1, maxb * 8);
    int first = 1;
    for (size_t bytes = 256; bytes <= maxb; bytes *= 4) {
        int reps = bytes < 65536 ? 200 : bytes < (1u << 20) ? 50 : 10;
        double best = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            MPI_Barrier(g->comm);
            double t = wtime();
            for (int r = 0; r < reps; r++) {
                MPI_Request req[16];
                int nr = 0;
                for (int k = 0; k < nd; k++) {
                    int m = dirs[k], up = self ? g->rank : g->nbr[m][0], dn = self ? g->rank : g->nbr[m][1];
                    MPI_Irecv(rb + (size_t)(2 * k) * maxb, (int)bytes, MPI_BYTE, up, 2 * k, g->comm, &req[nr++]);
                    MPI_Irecv(rb + (size_t)(2 * k + 1) * maxb, (int)bytes, MPI_BYTE, dn, 2 * k + 1, g->comm,
                              &req[nr++]);
                    MPI_Isend(sb + (size_t)(2 * k) * maxb, (int)bytes, MPI_BYTE, dn, 2 * k, g->comm, &req[nr++]);
                    MPI_Isend(sb + (size_t)(2 * k + 1) * maxb, (int)bytes, MPI_BYTE, up, 2 * k + 1, g->comm,
                              &req[nr++]);
                }
                MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
            }
            double dt = (wtime() - t) / reps;
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, g->comm);
            if (dt < best)
                best = dt;
        }
        double moved = 4.0 * nd * (double)bytes; /* sent + received per rank */
        if (g->rank == 0)
            fprintf(f, "%s    {\"message_bytes\": %zu, \"seconds\": %.6e, \"gbs_per_rank\": %.4f}",
                    first ? "" : ",\n", bytes, best, moved / best / 1e9);
        first = 0;
    }
    if (g->rank == 0) {
        fprintf(f, "\n  ]\n}\n");
        if (f != stdout)
            fclose(f);
    }
    free(sb);
    free(rb);
}

/* ------------------------------------------------------------------ main */
static void usage(void)
{
    printf("usage: hm-lattice [input-file] [--set 'key=value']... [--selftest free|gauge|g5|decomp|mg|half|levels]"
           " [--halo-bench] [--json PATH]\n");
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &hm__rank);
    params_t p;
    params_default(&p);
    const char *selftest = NULL, *json = NULL, *input = NULL;
    int do_halo = 0;
    char err[512];
    /* the input file first, then --set overrides in order */
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            input = argv[i];
            break;
        } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--selftest") ||
                   !strcmp(argv[i], "--json")) {
            i++;
        }
    if (input && params_read(&p, input, err, sizeof err))
        die(err);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (hm__rank == 0)
                usage();
            MPI_Finalize();
            return 0;
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            char kv[256];
            snprintf(kv, sizeof kv, "%s", argv[++i]);
            char *eq = strchr(kv, '=');
            if (!eq) {
                snprintf(err, sizeof err, "--set needs key=value, got '%s'", kv);
                die(err);
            }
            *eq = 0;
            if (params_set(&p, kv, eq + 1, err, sizeof err))
                die(err);
        } else if (!strcmp(argv[i], "--selftest") && i + 1 < argc) {
            selftest = argv[++i];
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(argv[i], "--halo-bench")) {
            do_halo = 1;
        } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--selftest") || !strcmp(argv[i], "--json")) {
            snprintf(err, sizeof err, "option %s needs a value", argv[i]);
            die(err);
        } else if (argv[i][0] == '-' || (argv[i] != input)) {
            snprintf(err, sizeof err, "unknown argument '%s'", argv[i]);
            die(err);
        }
    }
    /* output files are checked before any work: the result is written at
     * the end of the run, the gauge field after it is generated */
    int unwritable = 0;
    if (hm__rank == 0)
        unwritable = json && !writable(json) ? 1 : p.gauge_write[0] && !writable(p.gauge_write) ? 2 : 0;
    MPI_Bcast(&unwritable, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (unwritable) {
        snprintf(err, sizeof err, "cannot write the %s file '%s'", unwritable == 1 ? "--json" : "'gauge write'",
                 unwritable == 1 ? json : p.gauge_write);
        die(err);
    }
    char note[256];
    if (lat_alloc_policy(p.fast, p.fast_node, note, sizeof note))
        die(note);
    geom_t g;
    if (geom_init(&g, &p, MPI_COMM_WORLD, err, sizeof err))
        die(err);

    if (do_halo) {
        halo_bench(&g, json);
        geom_free(&g);
        MPI_Finalize();
        return 0;
    }
    if (selftest) {
        if (!strcmp(selftest, "free"))
            test_free(&g, p);
        else if (!strcmp(selftest, "gauge"))
            test_gauge(&g, p);
        else if (!strcmp(selftest, "g5"))
            test_g5(&g, p);
        else if (!strcmp(selftest, "decomp"))
            test_decomp(&g, p);
        else if (!strcmp(selftest, "mg"))
            test_mg(&g, p);
        else if (!strcmp(selftest, "half"))
            test_half(&g, p);
        else if (!strcmp(selftest, "levels"))
            test_levels(&g, p);
        else {
            snprintf(err, sizeof err, "unknown self-test '%s'", selftest);
            die(err);
        }
        geom_free(&g);
        MPI_Finalize();
        return hm__fail ? 1 : 0;
    }

    double t0 = wtime();
    gauge_t G;
    make_gauge(&G, &g, &p);
    double t_gauge = wtime() - t0, plaq = gauge_plaquette(&G, &g);
    dirac_t D;
    dirac_init(&D, &g, &G, p.m0, p.csw);
    gauge_free(&G); /* the operator keeps its own copies */
    long n = 12L * g.V;

    /* Dirac operator bandwidth, double and single */
    /* mean and best time per apply: the bound (the probe's STREAM triad)
     * is a best-of-repetitions figure, so the like-for-like comparison
     * uses the best apply; the mean is reported beside it */
    double tdd, tdf, bdd = 1e30, bdf = 1e30, tdh = 0, bdh = 1e30;
    {
        cplx *a = lat_alloc_vectors(sizeof(cplx) * n), *b = lat_alloc_vectors(sizeof(cplx) * n);
        cplxf *af = lat_alloc_vectors(sizeof(cplxf) * n), *bf = lat_alloc_vectors(sizeof(cplxf) * n);
        fill_random(&g, a, p.seed, 1);
        for (long i = 0; i < n; i++)
            af[i] = (cplxf)a[i];
        dirac_apply(&D, b, a);
        MPI_Barrier(g.comm);
        double t = wtime();
        for (int r = 0; r < p.dirac_reps; r++) {
            double t1 = wtime();
            dirac_apply(&D, r % 2 ? a : b, r % 2 ? b : a);
            t1 = wtime() - t1;
            bdd = t1 < bdd ? t1 : bdd;
        }
        MPI_Barrier(g.comm);
        tdd = (wtime() - t) / p.dirac_reps;
        tdf = time_dirac_f(&D, &g, af, bf, p.dirac_reps, &bdf);
        if (p.half) {
            if (dirac_set_half(&D))
                die("storage = half needs a compiler with _Float16 and a CPU with F16C, AVX2 and FMA");
            tdh = time_dirac_f(&D, &g, af, bf, p.dirac_reps, &bdh);
            MPI_Allreduce(MPI_IN_PLACE, &bdh, 1, MPI_DOUBLE, MPI_MAX, g.comm);
        }
        /* the slowest rank's best apply */
        double bb[2] = {bdd, bdf};
        MPI_Allreduce(MPI_IN_PLACE, bb, 2, MPI_DOUBLE, MPI_MAX, g.comm);
        bdd = bb[0];
        bdf = bb[1];
        lat_free(a), lat_free(b), lat_free(af), lat_free(bf);
    }

    /* solves */
    int do_cg = !strcmp(p.solver, "cgnr") || !strcmp(p.solver, "all");
    int do_bi = !strcmp(p.solver, "bicgstab") || !strcmp(p.solver, "all");
    int do_mg = !strcmp(p.solver, "amg") || !strcmp(p.solver, "all");
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x = lat_alloc_vectors(sizeof(cplx) * n);
    typedef struct { const char *name; int rhs; solve_info_t si; } rec_t;
    rec_t *recs = calloc((size_t)p.nrhs * 3, sizeof(rec_t));
    int nrec = 0;
    mg_t M;
    double t_setup = 0, t_solve[3] = {0}, t_coarse = 0;
    double t_amg[5] = {0}; /* smoother, restrict, prolong, coarse solve, outer */
    long coarse_its = 0;
    double tca = 0, bca = 0; /* coarse operator: seconds per apply, bytes per apply */
    if (do_mg) {
        mg_setup(&M, &D, &p);
        t_setup = M.t_setup;
        long ncv = (long)M.k * M.cg.V;
        cplxf *ca = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv), *cb = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv);
        for (long i = 0; i < ncv; i++)
            ca[i] = 1.0f / (float)(1 + i % 7);
        MPI_Barrier(g.comm);
        double t = wtime();
        for (int r = 0; r < p.dirac_reps; r++)
            mg_coarse_apply(&M, r % 2 ? ca : cb, r % 2 ? cb : ca);
        MPI_Barrier(g.comm);
        tca = (wtime() - t) / p.dirac_reps;
        /* 9 k x k blocks, in and out vectors, single precision, per coarse site */
        bca = (9.0 * M.k * M.k + 2.0 * M.k) * 8.0 * M.cg.V * g.size;
        lat_free(ca), lat_free(cb);
    }
    for (int k = 0; k < p.nrhs; k++) {
        make_rhs(&g, &p, b, k);
        if (do_cg) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "cgnr";
            recs[nrec].rhs = k;
            solve_cgnr(&D, x, b, p.tol, p.maxit, &recs[nrec].si);
            t_solve[0] += recs[nrec++].si.time;
        }
        if (do_bi) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "bicgstab";
            recs[nrec].rhs = k;
            solve_bicgstab(&D, x, b, p.tol, p.maxit, &recs[nrec].si);
            t_solve[1] += recs[nrec++].si.time;
        }
        if (do_mg) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "amg";
            recs[nrec].rhs = k;
            solve_fgmres_mg(&M, x, b, p.tol, p.maxit, p.restart, &recs[nrec].si);
            t_solve[2] += recs[nrec].si.time;
            t_coarse += recs[nrec].si.t_coarse;
            t_amg[0] += recs[nrec].si.t_smooth;
            t_amg[1] += recs[nrec].si.t_restrict;
            t_amg[2] += recs[nrec].si.t_prolong;
            t_amg[3] += recs[nrec].si.t_csolve;
            t_amg[4] += recs[nrec].si.t_outer;
            coarse_its += recs[nrec++].si.coarse_iters;
        }
    }
    /* bytes per tag, summed over ranks (peak per rank summed) */
    double tagb[NTAGS];
    for (int t = 0; t < NTAGS; t++)
        tagb[t] = (double)lat_tag_peak(t);
    MPI_Allreduce(MPI_IN_PLACE, tagb, NTAGS, MPI_DOUBLE, MPI_SUM, g.comm);
    double vol = (double)g.L[0] * g.L[1] * g.L[2] * g.L[3];

    if (hm__rank == 0) {
        FILE *f = json ? fopen(json, "w") : stdout;
        if (!f) {
            fprintf(stderr, "hm-lattice: error: cannot write '%s'\n", json);
            f = stdout;
        }
        fprintf(f, "{\n  \"schema_version\": %d,\n  \"app\": \"hm-lattice\",\n", LAT_SCHEMA_VERSION);
        fprintf(f, "  \"ranks\": %d,\n  \"threads\": %d,\n", g.size, omp_get_max_threads());
        fprintf(f, "  \"lattice\": [%d, %d, %d, %d],\n  \"process_grid\": [%d, %d, %d, %d],\n", g.L[0],
                g.L[1], g.L[2], g.L[3], g.grid[0], g.grid[1], g.grid[2], g.grid[3]);
        fprintf(f, "  \"mapping\": \"%s\",\n  \"block\": [%d, %d, %d, %d],\n", p.mapping, p.block[0],
                p.block[1], p.block[2], p.block[3]);
        fprintf(f, "  \"params\": {\"m0\": %.17g, \"csw\": %.17g, \"gauge\": \"%s\", \"beta\": %.17g, "
                "\"sweeps\": %d, \"seed\": %llu, \"tolerance\": %.3g, \"test_vectors\": %d, "
                "\"setup_iter\": %d, \"post_smooth\": %d, \"block_mr\": %d, \"nrhs\": %d, "
                "\"storage\": \"%s\", \"levels\": %d},\n",
                p.m0, p.csw, p.gauge, p.beta, p.sweeps, (unsigned long long)p.seed, p.tol, p.ntv,
                p.setup_iter, p.post_smooth, p.block_mr, p.nrhs, p.half ? "half" : "single", p.levels);
        fprintf(f, "  \"plaquette\": %.15f,\n", plaq);
        fprintf(f, "  \"kernels\": {\n");
        for (int s = 0; s < 2; s++) {
            double t = s ? tdf : tdd, tb = s ? bdf : bdd, bps = dirac_bytes_per_site(s);
            fprintf(f, "    \"dirac_%s\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                    "\"bytes_per_site\": %.0f, \"bytes_per_site_nocache\": %.0f, \"gbs\": %.4f, "
                    "\"gbs_best\": %.4f, \"gbs_nocache\": %.4f, \"gflops\": %.4f}%s\n",
                    s ? "single" : "double", t, tb, bps, (264.0 * (s ? 8 : 16)), bps * vol / t / 1e9,
                    bps * vol / tb / 1e9, 264.0 * (s ? 8 : 16) * vol / t / 1e9, 1872.0 * vol / t / 1e9,
                    s ? "" : ",");
        }
        if (p.half) {
            double bps = dirac_bytes_per_site_half();
            fprintf(f, "    ,\"dirac_half\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                    "\"bytes_per_site\": %.0f, \"gbs\": %.4f, \"gbs_best\": %.4f, \"gflops\": %.4f}\n",
                    tdh, bdh, bps, bps * vol / tdh / 1e9, bps * vol / bdh / 1e9, 1872.0 * vol / tdh / 1e9);
        }
        if (do_mg)
            fprintf(f, "    ,\"coarse_apply\": {\"seconds_per_apply\": %.6e, \"bytes_per_apply\": %.0f, "
                    "\"gbs\": %.4f}\n", tca, bca, bca / tca / 1e9);
        fprintf(f, "  },\n  \"phases\": {\"gauge_s\": %.6f, \"setup_s\": %.6f, \"solve_cgnr_s\": %.6f, "
                "\"solve_bicgstab_s\": %.6f, \"solve_amg_s\": %.6f, \"coarse_s\": %.6f, "
                "\"coarse_share\": %.4f, \"coarse_iterations\": %ld},\n",
                t_gauge, t_setup, t_solve[0], t_solve[1], t_solve[2], t_coarse,
                t_solve[2] > 0 ? t_coarse / t_solve[2] : 0.0, coarse_its);
        if (do_mg)
            fprintf(f, "  \"amg_phases\": {\"setup_initial_s\": %.6f, \"setup_bootstrap_s\": %.6f, "
                    "\"setup_orthonormalise_s\": %.6f, \"setup_assemble_s\": %.6f, \"solve_smoother_s\": %.6f, "
                    "\"solve_restrict_s\": %.6f, \"solve_prolong_s\": %.6f, \"solve_coarse_solve_s\": %.6f, "
                    "\"solve_outer_s\": %.6f, \"k\": %d},\n",
                    M.ts_init, M.ts_boot, M.ts_orth, M.ts_asm, t_amg[0], t_amg[1], t_amg[2], t_amg[3],
                    t_amg[4], M.k);
        fprintf(f, "  \"solves\": [\n");
        for (int i = 0; i < nrec; i++)
            fprintf(f, "    {\"solver\": \"%s\", \"rhs\": %d, \"iterations\": %d, \"relres\": %.3e, "
                    "\"true_relres\": %.3e, \"converged\": %s, \"time_s\": %.6f}%s\n",
                    recs[i].name, recs[i].rhs, recs[i].si.iters, recs[i].si.relres,
                    recs[i].si.true_relres, recs[i].si.converged ? "true" : "false", recs[i].si.time,
                    i + 1 < nrec ? "," : "");
        fprintf(f, "  ],\n  \"memory\": {\"placement\": \"%s\", \"fast\": \"%s\", \"tags\": {", note,
                p.fast);
        for (int t = 0; t < NTAGS; t++)
            fprintf(f, "%s\"%s\": {\"bytes\": %.0f, \"fast\": %s}", t ? ", " : "", lat_tag_names[t],
                    tagb[t], lat_tag_fast(t) ? "true" : "false");
        double fastb = 0, slowb = 0;
        for (int t = 0; t < NTAGS; t++)
            *(lat_tag_fast(t) ? &fastb : &slowb) += tagb[t];
        fprintf(f, "}, \"tiers\": {\"fast\": %.0f, \"slow\": %.0f}}\n}\n", fastb, slowb);
        if (f != stdout)
            fclose(f);
    }
    if (do_mg)
        mg_free(&M);
    free(recs);
    lat_free(b), lat_free(x);
    dirac_free(&D);
    geom_free(&g);
    MPI_Finalize();
    return 0;
}
