/* SPDX-License-Identifier: BSD-3-Clause */
/* Gauge fields: counter-keyed random numbers, SU(3) helpers, quenched
 * Cabibbo-Marinari heatbath (Kennedy-Pendleton SU(2) subgroups), APE-style
 * smoothing, gauge transformations, plaquette and file I/O.
 *
 * File format (the DD-alphaAMG configuration format, native byte order):
 *   int32 T, Z, Y, X; double plaquette (mean Re tr U_p, 3 for unit links);
 *   then for t, z, y, x (x fastest), for mu in T, Z, Y, X: 18 doubles, the
 *   3x3 link row-major as (re, im) pairs. Size: 24 + 576 * volume bytes. */
#define _GNU_SOURCE
#include "lattice.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t hm__mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed, int64_t site, uint64_t stream)
{
    r->s = hm__mix(hm__mix(seed * 0x2545F4914F6CDD1DULL + stream) ^ (uint64_t)site);
}

double rng_uniform(rng_t *r)
{
    r->s += 0x9E3779B97F4A7C15ULL;
    uint64_t z = hm__mix(r->s);
    return ((double)(z >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

double rng_gauss(rng_t *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* ---- SU(3) ---- */
static void mul(su3 *c, const su3 *a, const su3 *b)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            c->m[3 * i + j] = a->m[3 * i] * b->m[j] + a->m[3 * i + 1] * b->m[3 + j] +
                              a->m[3 * i + 2] * b->m[6 + j];
}
static void mul_ad(su3 *c, const su3 *a, const su3 *b) /* a b^H */
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            c->m[3 * i + j] = a->m[3 * i] * conj(b->m[3 * j]) + a->m[3 * i + 1] * conj(b->m[3 * j + 1]) +
                              a->m[3 * i + 2] * conj(b->m[3 * j + 2]);
}
static void mul_da(su3 *c, const su3 *a, const su3 *b) /* a^H b */
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            c->m[3 * i + j] = conj(a->m[i]) * b->m[j] + conj(a->m[3 + i]) * b->m[3 + j] +
                              conj(a->m[6 + i]) * b->m[6 + j];
}
static double retr(const su3 *a) { return creal(a->m[0] + a->m[4] + a->m[8]); }

static void reunit(su3 *u)
{
    cplx *a = u->m, *b = u->m + 3, *c = u->m + 6;
    double n = 0;
    for (int i = 0; i < 3; i++)
        n += creal(a[i] * conj(a[i]));
    n = 1 / sqrt(n);
    for (int i = 0; i < 3; i++)
        a[i] *= n;
    cplx d = 0;
    for (int i = 0; i < 3; i++)
        d += conj(a[i]) * b[i];
    for (int i = 0; i < 3; i++)
        b[i] -= d * a[i];
    n = 0;
    for (int i = 0; i < 3; i++)
        n += creal(b[i] * conj(b[i]));
    n = 1 / sqrt(n);
    for (int i = 0; i < 3; i++)
        b[i] *= n;
    c[0] = conj(a[1] * b[2] - a[2] * b[1]);
    c[1] = conj(a[2] * b[0] - a[0] * b[2]);
    c[2] = conj(a[0] * b[1] - a[1] * b[0]);
}

void random_su3(rng_t *r, su3 *o)
{
    for (int i = 0; i < 9; i++)
        o->m[i] = rng_gauss(r) + I * rng_gauss(r);
    reunit(o);
}

int gauge_create(gauge_t *G, const geom_t *g)
{
    G->u = lat_alloc_gauge(sizeof(double) * 72 * (size_t)g->Ve);
    return 0;
}
void gauge_free(gauge_t *G)
{
    lat_free(G->u);
    G->u = NULL;
}
su3 *gauge_link(const gauge_t *G, const geom_t *g, int ext, int mu)
{
    (void)g;
    return (su3 *)(G->u + ((size_t)ext * 4 + (size_t)mu) * 18);
}

void gauge_unit(gauge_t *G, const geom_t *g)
{
    for (int x = 0; x < g->Ve; x++)
        for (int m = 0; m < 4; m++) {
            su3 *u = gauge_link(G, g, x, m);
            memset(u, 0, sizeof *u);
            u->m[0] = u->m[4] = u->m[8] = 1;
        }
}

void gauge_random(gauge_t *G, const geom_t *g, uint64_t seed)
{
    for (int e = 0; e < g->V; e++)
        for (int m = 0; m < 4; m++) {
            rng_t r;
            rng_seed(&r, seed, g->gidx[e], 1000 + (uint64_t)m);
            random_su3(&r, gauge_link(G, g, g->eo2ext[e], m));
        }
    ext_exchange(g, G->u, 72);
}

static void staple(const gauge_t *G, const geom_t *g, int x, int mu, su3 *A)
{
    memset(A, 0, sizeof *A);
    int st[4] = {1, g->e[0], g->e[0] * g->e[1], g->e[0] * g->e[1] * g->e[2]};
    for (int nu = 0; nu < 4; nu++) {
        if (nu == mu)
            continue;
        su3 t, s;
        int xm = x + st[mu], xn = x + st[nu], xmn = x + st[mu] - st[nu], xd = x - st[nu];
        mul_ad(&t, gauge_link(G, g, xm, nu), gauge_link(G, g, xn, mu));
        mul_ad(&s, &t, gauge_link(G, g, x, nu));
        for (int i = 0; i < 9; i++)
            A->m[i] += s.m[i];
        /* U_nu(x+mu-nu)^H U_mu(x-nu)^H U_nu(x-nu) = (U_mu(x-nu) U_nu(x+mu-nu))^H U_nu(x-nu) */
        mul(&t, gauge_link(G, g, xd, mu), gauge_link(G, g, xmn, nu));
        mul_da(&s, &t, gauge_link(G, g, xd, nu));
        for (int i = 0; i < 9; i++)
            A->m[i] += s.m[i];
    }
}

static void su2_from_quat(const double a[4], cplx R[4])
{
    R[0] = a[0] + I * a[3];
    R[1] = a[2] + I * a[1];
    R[2] = -a[2] + I * a[1];
    R[3] = a[0] - I * a[3];
}

static void heatbath_link(su3 *U, const su3 *A, double beta, rng_t *r)
{
    static const int sub[3][2] = {{0, 1}, {1, 2}, {0, 2}};
    for (int s = 0; s < 3; s++) {
        int i = sub[s][0], j = sub[s][1];
        su3 W;
        mul(&W, U, A);
        cplx w00 = W.m[3 * i + i], w01 = W.m[3 * i + j], w10 = W.m[3 * j + i], w11 = W.m[3 * j + j];
        double a[4] = {creal(w00 + w11) / 2, cimag(w01 + w10) / 2, creal(w01 - w10) / 2,
                       cimag(w00 - w11) / 2};
        double k = sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2] + a[3] * a[3]);
        if (k < 1e-12)
            continue;
        double alpha = 2 * beta * k / 3, x[4];
        for (int tries = 0;; tries++) {
            double r1 = rng_uniform(r), r2 = rng_uniform(r), r3 = rng_uniform(r);
            double c = cos(2 * M_PI * r2);
            double l2 = -(log(r1) + c * c * log(r3)) / (2 * alpha);
            double r4 = rng_uniform(r);
            if (r4 * r4 <= 1 - l2 || tries > 1000) {
                x[0] = 1 - 2 * l2;
                if (x[0] < -1)
                    x[0] = -1;
                break;
            }
        }
        double rad = sqrt(fmax(0, 1 - x[0] * x[0]));
        double ct = 2 * rng_uniform(r) - 1, ph = 2 * M_PI * rng_uniform(r), stt = sqrt(1 - ct * ct);
        x[1] = rad * stt * cos(ph);
        x[2] = rad * stt * sin(ph);
        x[3] = rad * ct;
        double v[4] = {a[0] / k, a[1] / k, a[2] / k, a[3] / k};
        cplx X[4], Vm[4], R[4];
        su2_from_quat(x, X);
        su2_from_quat(v, Vm);
        /* R = X V^H */
        R[0] = X[0] * conj(Vm[0]) + X[1] * conj(Vm[1]);
        R[1] = X[0] * conj(Vm[2]) + X[1] * conj(Vm[3]);
        R[2] = X[2] * conj(Vm[0]) + X[3] * conj(Vm[1]);
        R[3] = X[2] * conj(Vm[2]) + X[3] * conj(Vm[3]);
        for (int c = 0; c < 3; c++) {
            cplx ui = U->m[3 * i + c], uj = U->m[3 * j + c];
            U->m[3 * i + c] = R[0] * ui + R[1] * uj;
            U->m[3 * j + c] = R[2] * ui + R[3] * uj;
        }
    }
    reunit(U);
}

void gauge_heatbath(gauge_t *G, const geom_t *g, double beta, int sweeps, uint64_t seed)
{
    for (int sw = 0; sw < sweeps; sw++)
        for (int mu = 0; mu < 4; mu++)
            for (int par = 0; par < 2; par++) {
#pragma omp parallel for schedule(static)
                for (int e = par * g->Vh; e < (par + 1) * g->Vh; e++) {
                    rng_t r;
                    rng_seed(&r, seed, g->gidx[e], 16 + (uint64_t)(sw * 4 + mu));
                    su3 A;
                    int x = g->eo2ext[e];
                    staple(G, g, x, mu, &A);
                    heatbath_link(gauge_link(G, g, x, mu), &A, beta, &r);
                }
                ext_exchange(g, G->u, 72);
            }
}

/* APE-style smoothing: U <- Proj_SU3((1-alpha) U + alpha/6 * staples^H),
 * all links at once (Jacobi), Proj by Gram-Schmidt reunitarisation. */
void gauge_smear(gauge_t *G, const geom_t *g, int steps, double alpha)
{
    su3 *nu = malloc(sizeof(su3) * 4 * (size_t)g->V);
    for (int s = 0; s < steps; s++) {
#pragma omp parallel for schedule(static)
        for (int e = 0; e < g->V; e++)
            for (int mu = 0; mu < 4; mu++) {
                su3 A, *u = gauge_link(G, g, g->eo2ext[e], mu), *o = &nu[4 * e + mu];
                staple(G, g, g->eo2ext[e], mu, &A);
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 3; j++)
                        o->m[3 * i + j] = (1 - alpha) * u->m[3 * i + j] + alpha / 6 * conj(A.m[3 * j + i]);
                reunit(o);
            }
        for (int e = 0; e < g->V; e++)
            for (int mu = 0; mu < 4; mu++)
                *gauge_link(G, g, g->eo2ext[e], mu) = nu[4 * e + mu];
        ext_exchange(g, G->u, 72);
    }
    free(nu);
}

void gauge_transform(gauge_t *G, const geom_t *g, const su3 *omega)
{
    double *om = calloc((size_t)g->Ve, sizeof(double) * 18);
    for (int e = 0; e < g->V; e++)
        memcpy(om + (size_t)g->eo2ext[e] * 18, &omega[e], sizeof(su3));
    ext_exchange(g, om, 18);
    int st[4] = {1, g->e[0], g->e[0] * g->e[1], g->e[0] * g->e[1] * g->e[2]};
    for (int e = 0; e < g->V; e++) {
        int x = g->eo2ext[e];
        for (int mu = 0; mu < 4; mu++) {
            su3 t, *u = gauge_link(G, g, x, mu);
            mul(&t, (su3 *)(om + (size_t)x * 18), u);
            mul_ad(u, &t, (su3 *)(om + (size_t)(x + st[mu]) * 18));
        }
    }
    free(om);
    ext_exchange(g, G->u, 72);
}

double gauge_plaquette(const gauge_t *G, const geom_t *g)
{
    int st[4] = {1, g->e[0], g->e[0] * g->e[1], g->e[0] * g->e[1] * g->e[2]};
    double sum = 0;
#pragma omp parallel for reduction(+ : sum)
    for (int e = 0; e < g->V; e++) {
        int x = g->eo2ext[e];
        for (int mu = 0; mu < 4; mu++)
            for (int nu = mu + 1; nu < 4; nu++) {
                su3 a, b, c;
                mul(&a, gauge_link(G, g, x, mu), gauge_link(G, g, x + st[mu], nu));
                mul(&b, gauge_link(G, g, x, nu), gauge_link(G, g, x + st[nu], mu));
                mul_ad(&c, &a, &b);
                sum += retr(&c);
            }
    }
    double tot;
    MPI_Allreduce(&sum, &tot, 1, MPI_DOUBLE, MPI_SUM, g->comm);
    double vol = (double)g->L[0] * g->L[1] * g->L[2] * g->L[3];
    return tot / (6 * vol);
}

static int hm__any(const geom_t *g, int bad)
{
    int all;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, g->comm);
    return all;
}

int gauge_read(gauge_t *G, const geom_t *g, const char *path, char *err, size_t n)
{
    double vol = (double)g->L[0] * g->L[1] * g->L[2] * g->L[3];
    off_t want = 24 + (off_t)(576 * vol);
    int fd = open(path, O_RDONLY), bad = 0;
    struct stat sb;
    int hdr[4] = {0};
    double plaq = 0;
    if (fd < 0) {
        snprintf(err, n, "cannot open gauge file '%s'", path);
        bad = 1;
    } else if (fstat(fd, &sb) || sb.st_size != want) {
        snprintf(err, n, "gauge file '%s' has %lld bytes, expected %lld for %dx%dx%dx%d", path,
                 (long long)sb.st_size, (long long)want, g->L[0], g->L[1], g->L[2], g->L[3]);
        bad = 1;
    } else if (pread(fd, hdr, 16, 0) != 16 || pread(fd, &plaq, 8, 16) != 8) {
        snprintf(err, n, "cannot read header of gauge file '%s'", path);
        bad = 1;
    } else if (hdr[0] != g->L[3] || hdr[1] != g->L[2] || hdr[2] != g->L[1] || hdr[3] != g->L[0]) {
        snprintf(err, n, "gauge file '%s' is %dx%dx%dx%d (TZYX), lattice is %dx%dx%dx%d", path,
                 hdr[0], hdr[1], hdr[2], hdr[3], g->L[3], g->L[2], g->L[1], g->L[0]);
        bad = 1;
    }
    if (hm__any(g, bad)) {
        if (fd >= 0)
            close(fd);
        if (!bad)
            snprintf(err, n, "gauge file '%s' unreadable on another rank", path);
        return -1;
    }
    double buf[72];
    for (int e = 0; e < g->V && !bad; e++) {
        if (pread(fd, buf, sizeof buf, 24 + (off_t)g->gidx[e] * 576) != (ssize_t)sizeof buf) {
            snprintf(err, n, "short read in gauge file '%s'", path);
            bad = 1;
            break;
        }
        for (int f = 0; f < 4; f++)
            memcpy(gauge_link(G, g, g->eo2ext[e], 3 - f), buf + 18 * f, 144);
    }
    close(fd);
    if (hm__any(g, bad))
        return -1;
    ext_exchange(g, G->u, 72);
    double p = gauge_plaquette(G, g);
    if (fabs(p - plaq) > 1e-10 * fmax(1, fabs(plaq))) {
        snprintf(err, n, "gauge file '%s': plaquette %.12f does not match header %.12f", path, p, plaq);
        return -1;
    }
    return 0;
}

int gauge_write(const gauge_t *G, const geom_t *g, const char *path, char *err, size_t n)
{
    double plaq = gauge_plaquette(G, g);
    double vol = (double)g->L[0] * g->L[1] * g->L[2] * g->L[3];
    int bad = 0;
    if (g->rank == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int hdr[4] = {g->L[3], g->L[2], g->L[1], g->L[0]};
        if (fd < 0 || write(fd, hdr, 16) != 16 || write(fd, &plaq, 8) != 8 ||
            ftruncate(fd, 24 + (off_t)(576 * vol))) {
            snprintf(err, n, "cannot write gauge file '%s'", path);
            bad = 1;
        }
        if (fd >= 0)
            close(fd);
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, g->comm);
    if (bad) {
        if (g->rank)
            snprintf(err, n, "cannot write gauge file '%s'", path);
        return -1;
    }
    int fd = open(path, O_WRONLY);
    double buf[72];
    bad = fd < 0;
    for (int e = 0; e < g->V && !bad; e++) {
        for (int f = 0; f < 4; f++)
            memcpy(buf + 18 * f, gauge_link(G, g, g->eo2ext[e], 3 - f), 144);
        if (pwrite(fd, buf, sizeof buf, 24 + (off_t)g->gidx[e] * 576) != (ssize_t)sizeof buf)
            bad = 1;
    }
    if (fd >= 0)
        close(fd);
    if (hm__any(g, bad)) {
        snprintf(err, n, "cannot write gauge file '%s'", path);
        return -1;
    }
    return 0;
}
