/* SPDX-License-Identifier: BSD-3-Clause */
/* Wilson-clover Dirac operator
 *   D psi(x) = A(x) psi(x) - 1/2 sum_mu [(1-g_mu) U_mu(x) psi(x+mu) + (1+g_mu) U_mu(x-mu)^H psi(x-mu)]
 *   A(x) = (m0+4) - (csw/16) sum_{mu<nu} g_mu g_nu (x) (Q_munu - Q_munu^H)
 * Chiral basis: g_mu = [[0, A_mu], [A_mu^H, 0]], A_k = -i sigma_k, A_t = 1,
 * so gamma5 = g_x g_y g_z g_t = diag(1,1,-1,-1) and A(x) is two 6x6 blocks.
 * Halos carry spin-projected half-spinors (6 complex per face site). */
#include "lattice.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Spin projection: one nonzero per row of A_mu, (1 + s g_mu) upper = psi_a +
 * s pha[mu][a] psi_{2+cola[mu][a]} with cola = {1,0},{1,0},{0,1},{0,1} and
 * pha = {-i,-i}, {-1,1}, {-i,i}, {1,1}; the lower half is rebuilt with
 * B_mu = A_mu^H (phb = conj(pha)). dirac_kern.h hard-codes these per mu. */

const cplx lat_gamma[4][4][4] = {
    {{0, 0, 0, -I}, {0, 0, -I, 0}, {0, I, 0, 0}, {I, 0, 0, 0}},
    {{0, 0, 0, -1}, {0, 0, 1, 0}, {0, 1, 0, 0}, {-1, 0, 0, 0}},
    {{0, 0, -I, 0}, {0, 0, 0, I}, {I, 0, 0, 0}, {0, -I, 0, 0}},
    {{0, 0, 1, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}, {0, 1, 0, 0}},
};

/* GNU vector extensions (GCC, Clang): two complex numbers per vector. The
 * kernels get an AVX2+FMA clone next to the baseline one on x86-64, picked
 * at load time (ifunc), so the binary stays portable. An AVX-512 clone
 * (x86-64-v4: embedded broadcasts, 32 registers) was 2-3% faster on the
 * full operator but made the AMG smoother's block solves 10% slower (quiet
 * machine, `hetmem bench lattice --parts solve,dirac`: smoother 1.100 ->
 * 1.215 s per rhs, AMG speed-up over CGNR 5.07x -> 4.76x), so there is none. */
typedef double v4d __attribute__((vector_size(32), aligned(8)));
typedef float v4f __attribute__((vector_size(16), aligned(4)));
typedef long long v4dm __attribute__((vector_size(32)));
typedef int v4fm __attribute__((vector_size(16)));
#define HM_AI __attribute__((always_inline))
#define HM_IMPL
#if defined(__GNUC__) && !defined(__clang__)
/* the vector helpers are always inlined: no call passes a vector by value */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define HM_FAST __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HM_FAST
#endif

#define REAL double
#define CPLX cplx
#define V4 v4d
#ifdef __clang__
#define SHUF(v, a, b, c, d) __builtin_shufflevector(v, v, a, b, c, d)
#else
#define SHUF(v, a, b, c, d) __builtin_shuffle(v, (v4dm){a, b, c, d})
#endif
#define SFX(n) n##_d
#define FIELD_U U
#define FIELD_A A
#define HALO hd
#define FREAL double
#define LDV(p) (*(const V4 *)(const void *)(p))
#include "dirac_kern.h"
#undef REAL
#undef CPLX
#undef V4
#undef SHUF
#undef SFX
#undef FIELD_U
#undef FIELD_A
#undef HALO
#undef FREAL
#define REAL float
#define CPLX cplxf
#define V4 v4f
#ifdef __clang__
#define SHUF(v, a, b, c, d) __builtin_shufflevector(v, v, a, b, c, d)
#else
#define SHUF(v, a, b, c, d) __builtin_shuffle(v, (v4fm){a, b, c, d})
#endif
#define SFX(n) n##_f
#define FIELD_U Uf
#define FIELD_A Af
#define HALO hf
#define FREAL float
#include "dirac_kern.h"
#ifdef LAT_HAVE_HALF
/* single arithmetic on half-precision links and clover */
#undef SFX
#undef FIELD_U
#undef FIELD_A
#undef FREAL
#undef LDV
#define SFX(n) n##_h
#define FIELD_U Uh
#define FIELD_A Ah
#define FREAL lat_half
#define FREAL_HALF
#define LDV(p) (*(const V4 *)(const void *)(p)) /* on the converted copy */
#undef HM_FAST
#define HM_FAST LAT_HALF_FAST
#undef HM_AI
#define HM_AI __attribute__((always_inline)) LAT_HALF_FAST
#undef HM_IMPL
#define HM_IMPL LAT_HALF_FAST
#include "dirac_kern.h"
#endif

static void m3mul(cplx *c, const cplx *a, const cplx *b, int da, int db)
{
    /* c = op(a) op(b), op = dagger when d* set */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            cplx s = 0;
            for (int k = 0; k < 3; k++)
                s += (da ? conj(a[3 * k + i]) : a[3 * i + k]) * (db ? conj(b[3 * j + k]) : b[3 * k + j]);
            c[3 * i + j] = s;
        }
}

/* product of a path of 4 links: each (pointer, dagger) */
static void path4(cplx *out, const cplx *l[4], const int d[4])
{
    cplx t[9], t2[9];
    m3mul(t, l[0], l[1], d[0], d[1]);
    m3mul(t2, t, l[2], 0, d[2]);
    m3mul(out, t2, l[3], 0, d[3]);
}

static void clover_site(const gauge_t *G, const geom_t *g, int x, double m0, double csw, cplx *A)
{
    int st[4] = {1, g->e[0], g->e[0] * g->e[1], g->e[0] * g->e[1] * g->e[2]};
    cplx M[12][12];
    memset(M, 0, sizeof M);
    for (int i = 0; i < 12; i++)
        M[i][i] = m0 + 4;
    if (csw != 0) {
        for (int mu = 0; mu < 4; mu++)
            for (int nu = mu + 1; nu < 4; nu++) {
                int a = st[mu], b = st[nu];
#define LK(p, m) ((const cplx *)gauge_link(G, g, (p), (m)))
                const cplx *p1[4] = {LK(x, mu), LK(x + a, nu), LK(x + b, mu), LK(x, nu)};
                const cplx *p2[4] = {LK(x, nu), LK(x - a + b, mu), LK(x - a, nu), LK(x - a, mu)};
                const cplx *p3[4] = {LK(x - a, mu), LK(x - a - b, nu), LK(x - a - b, mu), LK(x - b, nu)};
                const cplx *p4[4] = {LK(x - b, nu), LK(x - b, mu), LK(x + a - b, nu), LK(x, mu)};
#undef LK
                static const int d1[4] = {0, 0, 1, 1}, d2[4] = {0, 1, 1, 0}, d3[4] = {1, 1, 0, 0},
                                 d4[4] = {1, 0, 0, 1};
                cplx Q[9] = {0}, t[9], F[9];
                path4(t, p1, d1);
                for (int i = 0; i < 9; i++)
                    Q[i] += t[i];
                path4(t, p2, d2);
                for (int i = 0; i < 9; i++)
                    Q[i] += t[i];
                path4(t, p3, d3);
                for (int i = 0; i < 9; i++)
                    Q[i] += t[i];
                path4(t, p4, d4);
                for (int i = 0; i < 9; i++)
                    Q[i] += t[i];
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 3; j++)
                        F[3 * i + j] = Q[3 * i + j] - conj(Q[3 * j + i]);
                cplx gg[4][4];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        cplx s = 0;
                        for (int k = 0; k < 4; k++)
                            s += lat_gamma[mu][i][k] * lat_gamma[nu][k][j];
                        gg[i][j] = s;
                    }
                for (int s1 = 0; s1 < 4; s1++)
                    for (int s2 = 0; s2 < 4; s2++)
                        if (gg[s1][s2] != 0)
                            for (int c1 = 0; c1 < 3; c1++)
                                for (int c2 = 0; c2 < 3; c2++)
                                    M[3 * s1 + c1][3 * s2 + c2] -= csw / 16 * gg[s1][s2] * F[3 * c1 + c2];
            }
    }
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++)
                A[CLOVER_IDX(b, i, j)] = M[6 * b + i][6 * b + j];
}

/* inverse of the two 6x6 chiral blocks of one site (Gauss-Jordan with
 * partial pivoting, double), same layout */
static void clover_invert(const cplx *A, cplx *Ai)
{
    for (int b = 0; b < 2; b++) {
        cplx a[6][12];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) {
                a[i][j] = A[CLOVER_IDX(b, i, j)];
                a[i][6 + j] = i == j;
            }
        for (int col = 0; col < 6; col++) {
            int piv = col;
            for (int r = col + 1; r < 6; r++)
                if (cabs(a[r][col]) > cabs(a[piv][col]))
                    piv = r;
            for (int j = 0; j < 12; j++) {
                cplx t = a[piv][j];
                a[piv][j] = a[col][j];
                a[col][j] = t;
            }
            cplx inv = 1 / a[col][col];
            for (int j = 0; j < 12; j++)
                a[col][j] *= inv;
            for (int r = 0; r < 6; r++)
                if (r != col) {
                    cplx f = a[r][col];
                    for (int j = 0; j < 12; j++)
                        a[r][j] -= f * a[col][j];
                }
        }
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++)
                Ai[CLOVER_IDX(b, i, j)] = a[i][6 + j];
    }
}

int dirac_init(dirac_t *D, const geom_t *g, const gauge_t *G, double m0, double csw)
{
    memset(D, 0, sizeof *D);
    D->g = g;
    D->m0 = m0;
    D->csw = csw;
    size_t V = (size_t)g->V;
    D->U = lat_alloc_gauge(sizeof(cplx) * 36 * V);
    D->Uf = lat_alloc_gauge(sizeof(cplxf) * 36 * V);
    D->A = lat_alloc_clover(sizeof(cplx) * 72 * V);
    D->Af = lat_alloc_clover(sizeof(cplxf) * 72 * V);
    D->Aif = lat_alloc_clover(sizeof(cplxf) * 72 * V);
#pragma omp parallel for schedule(static)
    for (int e = 0; e < g->V; e++) {
        int x = g->eo2ext[e];
        /* antiperiodic time: negate t-links on the last global time slice */
        int last = g->origin[3] + g->lc[4 * e + 3] == g->L[3] - 1;
        for (int mu = 0; mu < 4; mu++) {
            const cplx *u = (const cplx *)gauge_link(G, g, x, mu);
            for (int i = 0; i < 9; i++) {
                cplx v = (mu == 3 && last) ? -u[i] : u[i];
                D->U[36 * (size_t)e + 9 * mu + i] = v;
                D->Uf[36 * (size_t)e + 9 * mu + i] = (cplxf)v;
            }
        }
        clover_site(G, g, x, m0, csw, D->A + 72 * (size_t)e);
        cplx Ai[72];
        clover_invert(D->A + 72 * (size_t)e, Ai);
        for (int i = 0; i < 72; i++) {
            D->Af[72 * (size_t)e + i] = (cplxf)D->A[72 * (size_t)e + i];
            D->Aif[72 * (size_t)e + i] = (cplxf)Ai[i];
        }
    }
    halo_alloc(g, &D->hd, 6 * sizeof(cplx));
    halo_alloc(g, &D->hf, 6 * sizeof(cplxf));
    return 0;
}

void dirac_free(dirac_t *D)
{
    lat_free(D->U);
    lat_free(D->Uf);
    lat_free(D->A);
    lat_free(D->Af);
    lat_free(D->Aif);
    if (D->half)
        lat_free(D->Uh), lat_free(D->Ah), lat_free(D->Aih);
    halo_free(&D->hd);
    halo_free(&D->hf);
}

void dirac_apply(dirac_t *D, cplx *out, const cplx *in)
{
    double t = wtime();
    apply_impl_d(D, out, in, NULL, 0);
    D->tapply += wtime() - t;
    D->napply++;
}

void dirac_apply_f(dirac_t *D, cplxf *out, const cplxf *in)
{
    double t = wtime();
#ifdef LAT_HAVE_HALF
    if (D->half)
        apply_impl_h(D, out, in, NULL, 0);
    else
#endif
        apply_impl_f(D, out, in, NULL, 0);
    D->tapplyf += wtime() - t;
    D->napplyf++;
}

void dirac_apply_sites_f(dirac_t *D, cplxf *out, const cplxf *in, const int *sites, int ns)
{
    double t = wtime();
#ifdef LAT_HAVE_HALF
    if (D->half)
        apply_impl_h(D, out, in, sites, ns);
    else
#endif
        apply_impl_f(D, out, in, sites, ns);
    D->tapplyf += wtime() - t;
    D->napplyf++;
}

void dirac_block_f(const dirac_t *D, const int *sites, int ns, const int *blk, int b, cplxf *out,
                   const cplxf *in)
{
#ifdef LAT_HAVE_HALF
    if (D->half) {
        bsites_h(out, in, D->Uh, D->Ah, D->g->nb, sites, ns, blk, b);
        return;
    }
#endif
    bsites_f(out, in, (const float *)D->Uf, (const float *)D->Af, D->g->nb, sites, ns, blk, b);
}

void dirac_block_hop_f(const dirac_t *D, const int *sites, int ns, const int *blk, int b, cplxf *out,
                       const cplxf *in)
{
#ifdef LAT_HAVE_HALF
    if (D->half) {
        bsites_h(out, in, D->Uh, NULL, D->g->nb, sites, ns, blk, b);
        return;
    }
#endif
    bsites_f(out, in, (const float *)D->Uf, NULL, D->g->nb, sites, ns, blk, b);
}

void dirac_clover_f(const dirac_t *D, int inverse, const int *sites, int ns, cplxf *out, const cplxf *in)
{
#ifdef LAT_HAVE_HALF
    if (D->half) {
        clov_h(out, in, inverse ? D->Aih : D->Ah, sites, ns);
        return;
    }
#endif
    clov_f(out, in, (const float *)(inverse ? D->Aif : D->Af), sites, ns);
}

static lat_half *to_half(const cplxf *src, size_t n)
{
    lat_half *h = lat_alloc_clover(sizeof(lat_half) * 2 * n);
    const float *s = (const float *)src;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < 2 * n; i++)
        h[i] = (lat_half)s[i];
    return h;
}

int dirac_set_half(dirac_t *D)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (!__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return -1;
#endif
#ifdef LAT_HAVE_HALF
    size_t V = (size_t)D->g->V;
    lat_half *u = lat_alloc_gauge(sizeof(lat_half) * 2 * 36 * V);
    const float *s = (const float *)D->Uf;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < 2 * 36 * V; i++)
        u[i] = (lat_half)s[i];
    D->Uh = u;
    D->Ah = to_half(D->Af, 72 * V);
    D->Aih = to_half(D->Aif, 72 * V);
    lat_free(D->Uf), lat_free(D->Af), lat_free(D->Aif);
    D->Uf = D->Af = D->Aif = NULL;
    D->half = 1;
    return 0;
#else
    (void)D;
    return -1;
#endif
}

void dirac_link_f(const dirac_t *D, int x, int mu, cplxf *u9)
{
    size_t o = 36 * (size_t)x + 9 * (size_t)mu;
    if (!D->half) {
        memcpy(u9, D->Uf + o, 9 * sizeof(cplxf));
        return;
    }
    for (int i = 0; i < 9; i++)
        u9[i] = (float)D->Uh[2 * (o + i)] + I * (float)D->Uh[2 * (o + i) + 1];
}

void dirac_clover_site_f(const dirac_t *D, int x, cplxf *a72)
{
    size_t o = 72 * (size_t)x;
    if (!D->half) {
        memcpy(a72, D->Af + o, 72 * sizeof(cplxf));
        return;
    }
    for (int i = 0; i < 72; i++)
        a72[i] = (float)D->Ah[2 * (o + i)] + I * (float)D->Ah[2 * (o + i) + 1];
}

void gamma5(const geom_t *g, cplx *v)
{
#pragma omp parallel for schedule(static)
    for (int x = 0; x < g->V; x++)
        for (int a = 6; a < 12; a++)
            v[12 * (size_t)x + a] = -v[12 * (size_t)x + a];
}

void gamma5_f(const geom_t *g, cplxf *v)
{
#pragma omp parallel for schedule(static)
    for (int x = 0; x < g->V; x++)
        for (int a = 6; a < 12; a++)
            v[12 * (size_t)x + a] = -v[12 * (size_t)x + a];
}

/* Minimal memory traffic per site with perfect neighbour reuse: input and
 * output spinor (24 complex), 4 links (36), clover as stored (72). */
double dirac_bytes_per_site(int single) { return (24 + 36 + 72) * (single ? 8.0 : 16.0); }
/* half storage: single in/out spinors (24 complex x 8 B), 16-bit links and
 * clover (108 complex x 4 B) */
double dirac_bytes_per_site_half(void) { return 24 * 8.0 + (36 + 72) * 4.0; }
