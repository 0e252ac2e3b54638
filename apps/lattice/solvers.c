/* SPDX-License-Identifier: BSD-3-Clause */
/* Krylov baselines in double: CGNR (CG on D^H D, D^H = g5 D g5) and BiCGStab. */
#include "lattice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

cplx vdot(const geom_t *g, const cplx *a, const cplx *b, long n)
{
    double re = 0, im = 0;
    const double *pa = (const double *)a, *pb = (const double *)b;
#pragma omp parallel for simd reduction(+ : re, im) schedule(static)
    for (long i = 0; i < n; i++) {
        re += pa[2 * i] * pb[2 * i] + pa[2 * i + 1] * pb[2 * i + 1];
        im += pa[2 * i] * pb[2 * i + 1] - pa[2 * i + 1] * pb[2 * i];
    }
    double s[2] = {re, im}, r[2];
    MPI_Allreduce(s, r, 2, MPI_DOUBLE, MPI_SUM, g->comm);
    return r[0] + I * r[1];
}

double vnorm2(const geom_t *g, const cplx *a, long n) { return creal(vdot(g, a, a, n)); }

cplx vdot_f(const geom_t *g, const cplxf *a, const cplxf *b, long n)
{
    double re = 0, im = 0;
    const float *pa = (const float *)a, *pb = (const float *)b;
#pragma omp parallel for simd reduction(+ : re, im) schedule(static)
    for (long i = 0; i < n; i++) {
        re += (double)(pa[2 * i] * pb[2 * i] + pa[2 * i + 1] * pb[2 * i + 1]);
        im += (double)(pa[2 * i] * pb[2 * i + 1] - pa[2 * i + 1] * pb[2 * i]);
    }
    double s[2] = {re, im}, r[2];
    MPI_Allreduce(s, r, 2, MPI_DOUBLE, MPI_SUM, g->comm);
    return r[0] + I * r[1];
}

double vnorm2_f(const geom_t *g, const cplxf *a, long n) { return creal(vdot_f(g, a, a, n)); }

static void dag(dirac_t *D, cplx *out, cplx *in) /* out = D^H in, in restored */
{
    gamma5(D->g, in);
    dirac_apply(D, out, in);
    gamma5(D->g, in);
    gamma5(D->g, out);
}

double true_residual(dirac_t *D, const cplx *x, const cplx *b)
{
    long n = 12L * D->g->V;
    cplx *r = lat_alloc_vectors(sizeof(cplx) * (size_t)n);
    dirac_apply(D, r, x);
    for (long i = 0; i < n; i++)
        r[i] = b[i] - r[i];
    double res = sqrt(vnorm2(D->g, r, n) / vnorm2(D->g, b, n));
    lat_free(r);
    return res;
}

void solve_cgnr(dirac_t *D, cplx *x, const cplx *b, double tol, int maxit, solve_info_t *si)
{
    const geom_t *g = D->g;
    long n = 12L * g->V;
    size_t sz = sizeof(cplx) * (size_t)n;
    cplx *r = lat_alloc_krylov(sz), *z = lat_alloc_krylov(sz), *p = lat_alloc_krylov(sz),
         *w = lat_alloc_krylov(sz);
    double t0 = wtime();
    memset(si, 0, sizeof *si);
    dirac_apply(D, r, x);
    for (long i = 0; i < n; i++)
        r[i] = b[i] - r[i];
    double bn = sqrt(vnorm2(g, b, n)), rn = sqrt(vnorm2(g, r, n));
    dag(D, z, r);
    memcpy(p, z, sz);
    double zz = vnorm2(g, z, n);
    int it = 0;
    while (rn > tol * bn && it < maxit) {
        dirac_apply(D, w, p);
        double alpha = zz / vnorm2(g, w, n);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) {
            x[i] += alpha * p[i];
            r[i] -= alpha * w[i];
        }
        dag(D, z, r);
        double zz2 = vnorm2(g, z, n), beta = zz2 / zz;
        zz = zz2;
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++)
            p[i] = z[i] + beta * p[i];
        rn = sqrt(vnorm2(g, r, n));
        it++;
    }
    si->iters = it;
    si->relres = rn / bn;
    si->time = wtime() - t0;
    si->true_relres = true_residual(D, x, b);
    si->converged = si->true_relres <= tol * 10;
    lat_free(r);
    lat_free(z);
    lat_free(p);
    lat_free(w);
}

void solve_bicgstab(dirac_t *D, cplx *x, const cplx *b, double tol, int maxit, solve_info_t *si)
{
    const geom_t *g = D->g;
    long n = 12L * g->V;
    size_t sz = sizeof(cplx) * (size_t)n;
    cplx *r = lat_alloc_krylov(sz), *r0 = lat_alloc_krylov(sz), *p = lat_alloc_krylov(sz),
         *v = lat_alloc_krylov(sz), *s = lat_alloc_krylov(sz), *t = lat_alloc_krylov(sz);
    double t0 = wtime();
    memset(si, 0, sizeof *si);
    int it = 0;
    double bn = sqrt(vnorm2(g, b, n)), rn;
    for (int restart = 0; restart < 50; restart++) {
        dirac_apply(D, r, x);
        for (long i = 0; i < n; i++)
            r[i] = b[i] - r[i];
        memcpy(r0, r, sz);
        memset(p, 0, sz);
        memset(v, 0, sz);
        cplx rho = 1, alpha = 1, omega = 1;
        rn = sqrt(vnorm2(g, r, n));
        int breakdown = 0;
        while (rn > tol * bn && it < maxit) {
            cplx rho1 = vdot(g, r0, r, n);
            if (cabs(rho1) < 1e-300 || cabs(omega) < 1e-300) {
                breakdown = 1;
                break;
            }
            cplx beta = (rho1 / rho) * (alpha / omega);
            rho = rho1;
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++)
                p[i] = r[i] + beta * (p[i] - omega * v[i]);
            dirac_apply(D, v, p);
            alpha = rho / vdot(g, r0, v, n);
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++)
                s[i] = r[i] - alpha * v[i];
            dirac_apply(D, t, s);
            omega = vdot(g, t, s, n) / vnorm2(g, t, n);
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++) {
                x[i] += alpha * p[i] + omega * s[i];
                r[i] = s[i] - omega * t[i];
            }
            rn = sqrt(vnorm2(g, r, n));
            it++;
        }
        if (!breakdown)
            break;
    }
    si->iters = it;
    si->relres = rn / bn;
    si->time = wtime() - t0;
    si->true_relres = true_residual(D, x, b);
    si->converged = si->true_relres <= tol * 10;
    lat_free(r);
    lat_free(r0);
    lat_free(p);
    lat_free(v);
    lat_free(s);
    lat_free(t);
}
