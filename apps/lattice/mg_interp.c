/* SPDX-License-Identifier: BSD-3-Clause */
/* Fine-level interpolation: P from the test vectors (per-aggregate
 * Gram-Schmidt), restriction, prolongation, and the Galerkin product
 * D_c = P^H D P assembled from the Dirac operator's couplings. */
#include "lattice.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* test vector j at site x (12 complex) in single, whatever the storage */
static inline void w_site(const mg_t *M, int j, int x, cplxf *out)
{
    size_t o = (size_t)j * 12 * M->g->V + 12 * (size_t)x;
#ifdef LAT_HAVE_HALF
    if (M->half) {
        for (int a = 0; a < 12; a++)
            out[a] = (float)M->Wh[2 * (o + a)] + I * (float)M->Wh[2 * (o + a) + 1];
        return;
    }
#endif
    memcpy(out, M->W + o, 12 * sizeof(cplxf));
}

/* TV_j = sum_{i <= j} R_ij W_i on each aggregate and spin half, so the
 * restriction P^H TV_j is column j of the Gram-Schmidt coefficients R:
 * stored into coef (the next level's first ns test vectors) it spares ns
 * restrictions, each a pass over all of P (63 MB per rank at 16^4 / 2
 * ranks, 20 vectors: 0.2 s per setup pass). */
static void gs_coef(const mg_t *M, cplxf *coef, int ns, int c, int h, int j, const cplx *r)
{
    if (j >= ns)
        return;
    cplxf *o = coef + (size_t)j * M->k * M->nblk + (size_t)c * M->k + (size_t)h * M->N;
    for (int i = 0; i < M->N; i++)
        o[i] = i <= j ? (cplxf)r[i] : 0;
}

/* P from the raw test vectors TV, block by block in a block-local single
 * buffer (cache resident), stored as single or half. The setup keeps
 * iterating on the smooth raw vectors, not on their block-wise rescaled,
 * orthonormalised versions. coef (NULL: none) gets the restrictions of the
 * first ns raw vectors (gs_coef). */
void mg_orthonormalise(mg_t *M, cplxf *coef, int ns_coef)
{
    int N = M->N, ns = M->bsites;
    size_t V12 = 12 * (size_t)M->g->V;
#pragma omp parallel
    {
        cplxf *buf = malloc(sizeof(cplxf) * 12 * (size_t)ns * (size_t)N);
#pragma omp for schedule(dynamic)
        for (int c = 0; c < M->nblk; c++) {
            const int *s = M->bsite + (size_t)c * ns;
            for (int j = 0; j < N; j++)
                for (int k = 0; k < ns; k++)
                    memcpy(buf + ((size_t)j * ns + k) * 12, M->TV + (size_t)j * V12 + 12 * (size_t)s[k],
                           12 * sizeof(cplxf));
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < N; j++) {
                    cplxf *wj = buf + (size_t)j * ns * 12;
                    cplx r[LAT_KMAX / 2 + 1] = {0};
                    for (int pass = 0; pass < 2; pass++) /* twice is enough in single */
                        for (int i = 0; i < j; i++) {
                            const cplxf *wi = buf + (size_t)i * ns * 12;
                            cplx d = 0;
                            for (int k = 0; k < ns; k++)
                                for (int a = 6 * h; a < 6 * h + 6; a++)
                                    d += conj((cplx)wi[12 * k + a]) * wj[12 * k + a];
                            cplxf df = (cplxf)d;
                            r[i] += df;
                            for (int k = 0; k < ns; k++)
                                for (int a = 6 * h; a < 6 * h + 6; a++)
                                    wj[12 * k + a] -= df * wi[12 * k + a];
                        }
                    double nn = 0;
                    for (int k = 0; k < ns; k++)
                        for (int a = 6 * h; a < 6 * h + 6; a++) {
                            cplxf v = wj[12 * k + a];
                            nn += crealf(v) * crealf(v) + cimagf(v) * cimagf(v);
                        }
                    float inv = nn > 0 ? (float)(1 / sqrt(nn)) : 0;
                    r[j] = sqrt(nn);
                    if (coef)
                        gs_coef(M, coef, ns_coef, c, h, j, r);
                    for (int k = 0; k < ns; k++)
                        for (int a = 6 * h; a < 6 * h + 6; a++)
                            wj[12 * k + a] *= inv;
                }
            for (int j = 0; j < N; j++)
                for (int k = 0; k < ns; k++) {
                    const cplxf *src = buf + ((size_t)j * ns + k) * 12;
                    size_t o = (size_t)j * V12 + 12 * (size_t)s[k];
#ifdef LAT_HAVE_HALF
                    if (M->half) {
                        for (int a = 0; a < 12; a++) {
                            M->Wh[2 * (o + a)] = (lat_half)crealf(src[a]);
                            M->Wh[2 * (o + a) + 1] = (lat_half)cimagf(src[a]);
                        }
                        continue;
                    }
#endif
                    memcpy(M->W + o, src, 12 * sizeof(cplxf));
                }
        }
        free(buf);
    }
}

/* Restriction and prolongation walk the fine sites in memory order (the
 * test vectors are N sequential streams that the hardware prefetcher
 * follows); walking block by block jumped between scattered sites and was
 * latency-bound. Restriction accumulates per coarse site in double, one
 * accumulator array per thread, summed afterwards. */
#define WT float
#define WFIELD M->W
#define SFX(n) n##_f
#define WLOAD24(w, src) const float *w = (src)
#include "mg_kern.h"
#undef WT
#undef WFIELD
#undef SFX
#undef WLOAD24
#ifdef LAT_HAVE_HALF
/* 16-bit storage: each site's 24 values converted to a single copy with
 * vector conversions first */
#define WT lat_half
#define WFIELD M->Wh
#define SFX(n) n##_h
#undef LAT_FAST
#define LAT_FAST LAT_HALF_FAST
#define WLOAD24(w, src)                                                                                  \
    float w[24];                                                                                         \
    lat_h2f(w, (src), 24)
#include "mg_kern.h"
#undef WT
#undef WFIELD
#undef SFX
#undef WLOAD24
#undef LAT_FAST
#define LAT_FAST LAT_FAST_CLONES
#endif

void mg_restrict(mg_t *M, cplxf *vc, const cplxf *v)
{
#ifdef _OPENMP
    int ntm = omp_get_max_threads();
#else
    int ntm = 1;
#endif
    size_t per = 2 * (size_t)M->k * M->nblk;
    double *acc = calloc(per * (size_t)ntm, sizeof(double));
    int used = 1;
#pragma omp parallel
    {
        int x0, x1, id, nt = lat_share(M->g->V, &x0, &x1, &id);
#pragma omp single
        used = nt;
#ifdef LAT_HAVE_HALF
        if (M->half)
            restrict_sites_h(M, acc + per * (size_t)id, v, x0, x1);
        else
#endif
            restrict_sites_f(M, acc + per * (size_t)id, v, x0, x1);
    }
    float *o = (float *)vc;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < per; i++) {
        double s = 0;
        for (int t = 0; t < used; t++)
            s += acc[per * (size_t)t + i];
        o[i] = (float)s;
    }
    free(acc);
}

void mg_prolong(mg_t *M, cplxf *v, const cplxf *vc)
{
#pragma omp parallel
    {
        int x0, x1;
        (void)lat_share(M->g->V, &x0, &x1, NULL);
#ifdef LAT_HAVE_HALF
        if (M->half)
            prolong_sites_h(M, v, vc, x0, x1);
        else
#endif
            prolong_sites_f(M, v, vc, x0, x1);
    }
}

/* column col of T (12 rows x k, split re/im) = or += -1/2 (1 -/+ gamma_mu)
 * op(U) w, single precision, w (6 complex) living on the spins of half h2:
 * the identity keeps half h2, gamma_mu (off-diagonal in the chiral basis)
 * moves it to the other half with one phase per spin. */
static inline void hop_col(float *Tr, float *Ti, int k, int col, const cplxf *U, int dag, const cplxf *w, int mu,
                           int bwd, int h2, int add)
{
    cplxf u[6];
    for (int sl = 0; sl < 2; sl++)
        for (int i = 0; i < 3; i++) {
            cplxf acc = 0;
            for (int j = 0; j < 3; j++)
                acc += (dag ? conjf(U[3 * j + i]) : U[3 * i + j]) * w[3 * sl + j];
            u[3 * sl + i] = acc;
        }
    float sg = bwd ? 0.5f : -0.5f;
    for (int s = 0; s < 4; s++) {
        int same = s / 2 == h2;
        int r = 0;
        cplxf ph = -0.5f;
        if (!same) {
            while (lat_gamma[mu][s][2 * h2 + r] == 0)
                r++;
            ph = -sg * (cplxf)lat_gamma[mu][s][2 * h2 + r];
        } else {
            r = s - 2 * h2;
        }
        for (int c = 0; c < 3; c++) {
            cplxf v = ph * u[3 * r + c];
            size_t o = (size_t)(3 * s + c) * k + col;
            if (add) {
                Tr[o] += crealf(v);
                Ti[o] += cimagf(v);
            } else {
                Tr[o] = crealf(v);
                Ti[o] = cimagf(v);
            }
        }
    }
}

/* acc[target] += W(x)^H T: rows (h, i) of the coarse block against the
 * columns T (12 components x k, split re/im) of one site's couplings. The
 * columns go in chunks of 8 whose sums stay in registers over the 6
 * components (a loop over all k columns per component spilled them). */
static inline void assemble_acc(int k, int N, double *accr, double *acci, const float *Wr, const float *Wi,
                                const float *Tr, const float *Ti, float *sr, float *si)
{
    (void)sr, (void)si;
    for (int r = 0; r < k; r++) {
        int h = r / N;
        const float *wr = Wr + 6 * r, *wi = Wi + 6 * r;
        const float *tr0 = Tr + (size_t)(6 * h) * k, *ti0 = Ti + (size_t)(6 * h) * k;
        double *ar = accr + (size_t)r * k, *ai = acci + (size_t)r * k;
        int col = 0;
        for (; col + 8 <= k; col += 8) {
            float vr[8] = {0}, vi[8] = {0};
            for (int a = 0; a < 6; a++) {
                const float *tr = tr0 + (size_t)a * k + col, *ti = ti0 + (size_t)a * k + col;
                float xr = wr[a], xi = wi[a];
#pragma omp simd
                for (int q = 0; q < 8; q++) {
                    vr[q] += xr * tr[q] + xi * ti[q];
                    vi[q] += xr * ti[q] - xi * tr[q];
                }
            }
#pragma omp simd
            for (int q = 0; q < 8; q++) {
                ar[col + q] += vr[q];
                ai[col + q] += vi[q];
            }
        }
        for (; col < k; col++) {
            float vr = 0, vi = 0;
            for (int a = 0; a < 6; a++) {
                float tr = tr0[(size_t)a * k + col], ti = ti0[(size_t)a * k + col];
                vr += wr[a] * tr + wi[a] * ti;
                vi += wr[a] * ti - wi[a] * tr;
            }
            ar[col] += vr;
            ai[col] += vi;
        }
    }
}

/* the 9 k x k blocks of coarse site c: acc is 2 x 9 k^2 doubles (re, im),
 * buf holds T (2 x 12 k) for the self coupling, T2 (2 x 12 k) for one hop
 * leaving the block, W at one site (2 x 6 k) and a row (2 k). The clover
 * term and every hop staying inside the block are summed into T first, so
 * each site costs one W^H T product for the self block plus one per
 * direction only where the hop leaves the block (face sites). */
static LAT_FAST void assemble_block(mg_t *M, int c, double *acc, float *buf)
{
    const geom_t *g = M->g;
    const dirac_t *D = M->D;
    int N = M->N, k = M->k;
    size_t kk = (size_t)k * k;
    float *Tr = buf, *Ti = Tr + 12 * (size_t)k, *T2r = Ti + 12 * (size_t)k, *T2i = T2r + 12 * (size_t)k;
    float *Wr = T2i + 12 * (size_t)k, *Wi = Wr + 6 * (size_t)k;
    float *sr = Wi + 6 * (size_t)k, *si = sr + k;
    cplxf *wx = (cplxf *)(void *)(si + k); /* N x 12 complex: the test vectors at x */
    double *accr = acc, *acci = acc + 9 * kk;
    memset(acc, 0, sizeof(double) * 2 * 9 * kk);
    const int *bs = M->bsite + (size_t)c * M->bsites;
    for (int q = 0; q < M->bsites; q++) {
        int x = bs[q];
        for (int i = 0; i < N; i++) {
            w_site(M, i, x, wx + 12 * (size_t)i);
            for (int h = 0; h < 2; h++)
                for (int a = 0; a < 6; a++) {
                    Wr[6 * (h * N + i) + a] = crealf(wx[12 * i + 6 * h + a]);
                    Wi[6 * (h * N + i) + a] = cimagf(wx[12 * i + 6 * h + a]);
                }
        }
        cplxf A[72], ux[4][9], uy[9], wy[12];
        dirac_clover_site_f(D, x, A);
        for (int mu = 0; mu < 4; mu++)
            dirac_link_f(D, x, mu, ux[mu]);
        /* self: clover/diagonal, block diagonal in the spin halves */
        for (int h2 = 0; h2 < 2; h2++)
            for (int j = 0; j < N; j++) {
                int col = h2 * N + j;
                const cplxf *wj = wx + 12 * (size_t)j + 6 * h2;
                for (int a = 0; a < 12; a++) {
                    cplxf sacc = 0;
                    if (a / 6 == h2)
                        for (int b = 0; b < 6; b++)
                            sacc += A[CLOVER_IDX(h2, a % 6, b)] * wj[b];
                    Tr[(size_t)a * k + col] = crealf(sacc);
                    Ti[(size_t)a * k + col] = cimagf(sacc);
                }
            }
        for (int d = 0; d < 8; d++) {
            int mu = d / 2, bwd = d & 1, y = g->nb[8 * x + d];
            int inside = y >= 0 && M->blk[y] == c;
            if (bwd && !inside)
                continue; /* from the neighbour's forward block: backward_blocks */
            float *tr = inside ? Tr : T2r, *ti = inside ? Ti : T2i;
            if (y >= 0 && bwd)
                dirac_link_f(D, y, mu, uy);
            for (int h2 = 0; h2 < 2; h2++)
                for (int j = 0; j < N; j++) {
                    const cplxf *src, *U;
                    if (y >= 0) {
                        w_site(M, j, y, wy);
                        src = wy;
                        U = bwd ? uy : ux[mu];
                    } else { /* forward: a hop to another rank never stays inside */
                        src = (const cplxf *)M->hw.recv[d] + ((size_t)(-y - 1) * N + j) * 12;
                        U = ux[mu];
                    }
                    hop_col(tr, ti, k, h2 * N + j, U, bwd, src + 6 * h2, mu, bwd, h2, inside);
                }
            if (!inside)
                assemble_acc(k, N, accr + (size_t)(1 + d) * kk, acci + (size_t)(1 + d) * kk, Wr, Wi, T2r, T2i,
                             sr, si);
        }
        assemble_acc(k, N, accr, acci, Wr, Wi, Tr, Ti, sr, si);
    }
#ifdef LAT_HAVE_HALF
    if (M->half) {
        lat_half *oh = M->lv->Dch + 2 * (size_t)c * 9 * kk;
        for (size_t i = 0; i < 9 * kk; i++) {
            oh[2 * i] = (lat_half)accr[i];
            oh[2 * i + 1] = (lat_half)acci[i];
        }
        return;
    }
#endif
    cplxf *out = M->lv->Dc + (size_t)c * 9 * kk;
    for (size_t i = 0; i < 9 * kk; i++)
        out[i] = (float)accr[i] + I * (float)acci[i];
}

/* dst = Gamma5 src^H Gamma5 for one k x k block (Gamma5_c = +1 on the
 * first N dof of a site, -1 on the rest): exact in single and half */
static void g5_adjoint(mg_t *M, size_t dst, const void *src)
{
    int k = M->k, N = M->N;
#ifdef LAT_HAVE_HALF
    if (M->half) {
        const lat_half *s = src;
        lat_half *o = M->lv->Dch + 2 * dst;
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) {
                size_t i = 2 * ((size_t)b * k + a), j = 2 * ((size_t)a * k + b);
                lat_half sg = (lat_half)((a < N) == (b < N) ? 1 : -1);
                o[j] = sg * s[i];
                o[j + 1] = -sg * s[i + 1];
            }
        return;
    }
#endif
    const cplxf *s = src;
    cplxf *o = M->lv->Dc + dst;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++) {
            float sg = (a < N) == (b < N) ? 1 : -1;
            o[(size_t)a * k + b] = sg * conjf(s[(size_t)b * k + a]);
        }
}

/* The backward blocks: D_c is Gamma5-hermitian like D, so the block
 * coupling c to c - mu is Gamma5 F^H Gamma5, F the block coupling c - mu to
 * c, which comes through M->hb when c - mu is on another rank. This skips
 * the W^H T product of every backward hop leaving an aggregate: a third of
 * the products with 4^4 aggregates. */
static void backward_blocks(mg_t *M)
{
    const geom_t *cg = &M->cg;
    size_t kk = (size_t)M->k * M->k, es = M->half ? 2 * sizeof(lat_half) : sizeof(cplxf), bb = kk * es;
    const char *base = M->half ? (const char *)(void *)M->lv->Dch : (const char *)(void *)M->lv->Dc;
    for (int mu = 0; mu < 4; mu++)
        for (int i = 0; i < cg->nface[mu]; i++)
            memcpy((char *)M->hb.send[2 * mu + 1] + i * bb, base + ((size_t)cg->face[mu][1][i] * 9 + 1 + 2 * mu) * bb,
                   bb);
    halo_start(cg, &M->hb);
    halo_wait(&M->hb);
#pragma omp parallel for schedule(static)
    for (int c = 0; c < cg->V; c++)
        for (int mu = 0; mu < 4; mu++) {
            int y = cg->nb[8 * c + 2 * mu + 1];
            const char *src = y >= 0 ? base + ((size_t)y * 9 + 1 + 2 * mu) * bb
                                     : (const char *)M->hb.recv[2 * mu + 1] + (size_t)(-y - 1) * bb;
            g5_adjoint(M, ((size_t)c * 9 + 2 + 2 * mu) * kk, src);
        }
}

void mg_assemble(mg_t *M)
{
    const geom_t *g = M->g;
    int N = M->N, k = M->k;
    size_t kk = (size_t)k * k;
    /* halo of all test vectors on the lower faces: the forward hops to
     * another rank read them (the upper faces' part is not used: backward
     * blocks come from the neighbours' forward ones) */
    for (int mu = 0; mu < 4; mu++) {
        if (!g->nface[mu])
            continue;
        cplxf *lo = M->hw.send[2 * mu];
        for (int i = 0; i < g->nface[mu]; i++)
            for (int j = 0; j < N; j++)
                w_site(M, j, g->face[mu][0][i], lo + ((size_t)i * N + j) * 12);
    }
    halo_start(g, &M->hw);
    halo_wait(&M->hw);
#pragma omp parallel
    {
        double *acc = calloc(2 * 9 * kk, sizeof(double));
        float *buf = malloc(sizeof(float) * (4 * 12 * (size_t)k + 2 * 6 * (size_t)k + 2 * (size_t)k + 24 * (size_t)k));
#pragma omp for schedule(dynamic)
        for (int c = 0; c < M->nblk; c++)
            assemble_block(M, c, acc, buf);
        free(acc);
        free(buf);
    }
    backward_blocks(M);
}
