/* SPDX-License-Identifier: BSD-3-Clause */
/* Two-level aggregation multigrid (DD-alphaAMG class):
 *  - red-black Schwarz (SAP) smoother on lattice blocks, MR(k) block solves;
 *  - aggregates = SAP blocks x {spins 0,1} / {spins 2,3} (Gamma5-compatible);
 *  - adaptive setup: SAP inverse iteration (1, 2, 3 sweeps) on random vectors,
 *    then bootstrap cycles v <- v + C (v - D v) with the current V-cycle C;
 *  - P: test vectors Gram-Schmidt-orthonormalised per aggregate (P^H P = I);
 *  - D_c = P^H D P assembled from self and neighbour couplings (9 k x k
 *    blocks per coarse site), applied with a coarse halo exchange;
 *  - V-cycle in single precision (restrict, coarse GMRES, prolong, SAP
 *    post-smoothing) preconditioning an outer FGMRES in double. */
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

/* ---- fine-level SAP ---- */
/* One minimal-residual step on the listed sites: e += alpha r, r -= alpha q
 * with alpha = <q, r> / <q, q> (both block solvers) */
static inline __attribute__((always_inline)) void mr_update(float ar, float ai, const int *s, int ns, cplxf *e,
                                                            cplxf *r, const cplxf *q)
{
    for (int k = 0; k < ns; k++) {
        float *ea = (float *)(e + 12 * (size_t)s[k]), *ra = (float *)(r + 12 * (size_t)s[k]);
        const float *qa = (const float *)(q + 12 * (size_t)s[k]);
#pragma omp simd
        for (int a = 0; a < 12; a++) {
            float rr = ra[2 * a], ri = ra[2 * a + 1], qr = qa[2 * a], qi = qa[2 * a + 1];
            ea[2 * a] += ar * rr - ai * ri;
            ea[2 * a + 1] += ar * ri + ai * rr;
            ra[2 * a] = rr - (ar * qr - ai * qi);
            ra[2 * a + 1] = ri - (ar * qi + ai * qr);
        }
    }
}

static LAT_FAST void block_mr(mg_t *M, int c, cplxf *e, cplxf *r, cplxf *q)
{
    const int *s = M->bsite + (size_t)c * M->bsites;
    int ns = M->bsites;
    for (int k = 0; k < ns; k++)
        memset(e + 12 * (size_t)s[k], 0, 12 * sizeof(cplxf));
    for (int it = 0; it < M->prm.block_mr; it++) {
        dirac_block_f(M->D, s, ns, M->blk, c, q, r);
        double qq = 0, qr_re = 0, qr_im = 0;
        for (int k = 0; k < ns; k++) {
            const float *qa = (const float *)(q + 12 * (size_t)s[k]), *ra = (const float *)(r + 12 * (size_t)s[k]);
            float sq = 0, sre = 0, sim = 0;
#pragma omp simd reduction(+ : sq, sre, sim)
            for (int a = 0; a < 12; a++) {
                float qr = qa[2 * a], qi = qa[2 * a + 1], rr = ra[2 * a], ri = ra[2 * a + 1];
                sq += qr * qr + qi * qi;
                sre += qr * rr + qi * ri;
                sim += qr * ri - qi * rr;
            }
            qq += sq;
            qr_re += sre;
            qr_im += sim;
        }
        if (qq == 0)
            break;
        mr_update((float)(qr_re / qq), (float)(qr_im / qq), s, ns, e, r, q);
    }
}

/* MR on the odd-even reduced block system (DD-alphaAMG's block solve):
 * S e_o = r_o - H_oe A_ee^-1 r_e with S = A_oo - H_oe A_ee^-1 H_eo (H: the
 * in-block hopping term), block_mr steps of MR from e_o = 0, then
 * e_e = A_ee^-1 (r_e - H_eo e_o). One MR step costs about one block
 * operator, and the reduced system is better conditioned than the full one. */
static LAT_FAST void block_mr_oe(mg_t *M, int c, cplxf *e, const cplxf *r)
{
    const dirac_t *D = M->D;
    const int *s = M->bsite + (size_t)c * M->bsites, *ev = s, *od = s + M->bne[c];
    int ne = M->bne[c], no = M->bsites - ne;
    cplxf *q = M->q, *q2 = M->q2, *q3 = M->q3;
    dirac_clover_f(D, 1, ev, ne, q, r);              /* q_e = A_ee^-1 r_e */
    dirac_block_hop_f(D, od, no, M->blk, c, q2, q);   /* q2_o = H_oe q_e */
    for (int k = 0; k < no; k++) {
        float *ra = (float *)(q2 + 12 * (size_t)od[k]), *ea = (float *)(e + 12 * (size_t)od[k]);
        const float *rb = (const float *)(r + 12 * (size_t)od[k]);
#pragma omp simd
        for (int a = 0; a < 24; a++) {
            ra[a] = rb[a] - ra[a]; /* q2_o: the reduced residual */
            ea[a] = 0;
        }
    }
    for (int it = 0; it < M->prm.block_mr; it++) {
        dirac_block_hop_f(D, ev, ne, M->blk, c, q, q2); /* q_e = H_eo res */
        dirac_clover_f(D, 1, ev, ne, q3, q);             /* q3_e = A_ee^-1 q_e */
        dirac_clover_f(D, 0, od, no, q, q2);             /* q_o = A_oo res */
        dirac_block_hop_f(D, od, no, M->blk, c, q3, q3); /* q3_o = H_oe q3_e */
        double qq = 0, qr_re = 0, qr_im = 0;
        for (int k = 0; k < no; k++) {
            float *qa = (float *)(q + 12 * (size_t)od[k]);
            const float *ha = (const float *)(q3 + 12 * (size_t)od[k]), *ra = (const float *)(q2 + 12 * (size_t)od[k]);
            float sq = 0, sre = 0, sim = 0;
#pragma omp simd reduction(+ : sq, sre, sim)
            for (int a = 0; a < 12; a++) {
                float qr = qa[2 * a] - ha[2 * a], qi = qa[2 * a + 1] - ha[2 * a + 1];
                float rr = ra[2 * a], ri = ra[2 * a + 1];
                qa[2 * a] = qr;
                qa[2 * a + 1] = qi;
                sq += qr * qr + qi * qi;
                sre += qr * rr + qi * ri;
                sim += qr * ri - qi * rr;
            }
            qq += sq;
            qr_re += sre;
            qr_im += sim;
        }
        if (qq == 0)
            break;
        mr_update((float)(qr_re / qq), (float)(qr_im / qq), od, no, e, q2, q);
    }
    dirac_block_hop_f(D, ev, ne, M->blk, c, q, e); /* q_e = H_eo e_o */
    for (int k = 0; k < ne; k++) {
        float *qa = (float *)(q + 12 * (size_t)ev[k]);
        const float *rb = (const float *)(r + 12 * (size_t)ev[k]);
#pragma omp simd
        for (int a = 0; a < 24; a++)
            qa[a] = rb[a] - qa[a];
    }
    dirac_clover_f(D, 1, ev, ne, e, q); /* e_e = A_ee^-1 (r_e - H_eo e_o) */
}

double mg_block_solve_residual(mg_t *M, int c, int steps)
{
    if (!M->bne)
        return -1;
    const int *s = M->bsite + (size_t)c * M->bsites;
    int ns = M->bsites, save = M->prm.block_mr;
    for (int k = 0; k < ns; k++) {
        rng_t rg;
        rng_seed(&rg, M->prm.seed, M->g->gidx[s[k]], 4242);
        for (int a = 0; a < 12; a++)
            M->r[12 * (size_t)s[k] + a] = (float)rng_gauss(&rg) + I * (float)rng_gauss(&rg);
    }
    M->prm.block_mr = steps;
    block_mr_oe(M, c, M->e, M->r);
    M->prm.block_mr = save;
    dirac_block_f(M->D, s, ns, M->blk, c, M->q, M->e);
    double d = 0, nr = 0;
    for (int k = 0; k < ns; k++)
        for (int a = 0; a < 12; a++) {
            size_t i = 12 * (size_t)s[k] + a;
            cplx diff = (cplx)M->q[i] - (cplx)M->r[i];
            d += creal(diff * conj(diff));
            nr += creal((cplx)M->r[i] * conj((cplx)M->r[i]));
        }
    return sqrt(d / nr);
}

void sap(mg_t *M, cplxf *x, const cplxf *b, int sweeps, int zero_guess)
{
    const geom_t *g = M->g;
    long n = 12L * g->V;
    if (zero_guess)
        memset(x, 0, sizeof(cplxf) * (size_t)n);
    for (int sw = 0; sw < sweeps; sw++)
        for (int col = 0; col < 2; col++) {
            if (zero_guess && sw == 0 && col == 0) {
                memcpy(M->r, b, sizeof(cplxf) * (size_t)n);
            } else {
                /* the residual is only read on this colour's blocks */
                const int *cs = M->csite[col];
                dirac_apply_sites_f(M->D, M->r, x, cs, M->ncsite[col]);
#pragma omp parallel for schedule(static)
                for (int q = 0; q < M->ncsite[col]; q++)
                    for (int a = 0; a < 12; a++) {
                        size_t i = 12 * (size_t)cs[q] + a;
                        M->r[i] = b[i] - M->r[i];
                    }
            }
#pragma omp parallel for schedule(dynamic)
            for (int c = 0; c < M->nblk; c++) {
                if (M->bcolor[c] != col)
                    continue;
                if (M->bne)
                    block_mr_oe(M, c, M->e, M->r);
                else
                    block_mr(M, c, M->e, M->r, M->q);
                const int *s = M->bsite + (size_t)c * M->bsites;
                for (int k = 0; k < M->bsites; k++)
                    for (int a = 0; a < 12; a++)
                        x[12 * (size_t)s[k] + a] += M->e[12 * (size_t)s[k] + a];
            }
        }
}

/* ---- interpolation ---- */
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

/* P from the raw test vectors TV, block by block in a block-local single
 * buffer (cache resident), stored as single or half. The setup keeps
 * iterating on the smooth raw vectors, not on their block-wise rescaled,
 * orthonormalised versions. */
static void orthonormalise(mg_t *M)
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
                    for (int pass = 0; pass < 2; pass++) /* twice is enough in single */
                        for (int i = 0; i < j; i++) {
                            const cplxf *wi = buf + (size_t)i * ns * 12;
                            cplx d = 0;
                            for (int k = 0; k < ns; k++)
                                for (int a = 6 * h; a < 6 * h + 6; a++)
                                    d += conj((cplx)wi[12 * k + a]) * wj[12 * k + a];
                            cplxf df = (cplxf)d;
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
#define DCFIELD M->Dc
#define SFX(n) n##_f
#define WLOAD24(w, src) const float *w = (src)
#define ROWLOAD(row, src, n) const float *row = (src)
#include "mg_kern.h"
#undef WT
#undef WFIELD
#undef DCFIELD
#undef SFX
#undef WLOAD24
#undef ROWLOAD
#ifdef LAT_HAVE_HALF
/* 16-bit storage: each site's 24 values, or each row of 2k, converted to a
 * single copy with vector conversions first */
#define WT lat_half
#define WFIELD M->Wh
#define DCFIELD M->Dch
#define SFX(n) n##_h
#undef LAT_FAST
#define LAT_FAST LAT_HALF_FAST
#define WLOAD24(w, src)                                                                                  \
    float w[24];                                                                                         \
    lat_h2f(w, (src), 24)
#define ROWLOAD(row, src, n)                                                                             \
    float row[2 * LAT_KMAX];                                                                             \
    lat_h2f(row, (src), (n))
#include "mg_kern.h"
#undef WT
#undef WFIELD
#undef DCFIELD
#undef SFX
#undef WLOAD24
#undef ROWLOAD
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
 * moves it to the other half with one phase per spin. U == NULL: identity. */
static inline void hop_col(float *Tr, float *Ti, int k, int col, const cplxf *U, int dag, const cplxf *w, int mu,
                           int bwd, int h2, int add)
{
    cplxf u[6];
    for (int sl = 0; sl < 2; sl++)
        for (int i = 0; i < 3; i++) {
            if (!U) {
                u[3 * sl + i] = w[3 * sl + i];
                continue;
            }
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
                    } else {
                        /* backward halo vectors arrive already multiplied by U^H */
                        src = (const cplxf *)M->hw.recv[d] + ((size_t)(-y - 1) * N + j) * 12;
                        U = bwd ? NULL : ux[mu];
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
        lat_half *oh = M->Dch + 2 * (size_t)c * 9 * kk;
        for (size_t i = 0; i < 9 * kk; i++) {
            oh[2 * i] = (lat_half)accr[i];
            oh[2 * i + 1] = (lat_half)acci[i];
        }
        return;
    }
#endif
    cplxf *out = M->Dc + (size_t)c * 9 * kk;
    for (size_t i = 0; i < 9 * kk; i++)
        out[i] = (float)accr[i] + I * (float)acci[i];
}

static void assemble(mg_t *M)
{
    const geom_t *g = M->g;
    const dirac_t *D = M->D;
    int N = M->N, k = M->k;
    size_t kk = (size_t)k * k;
    /* halo of all test vectors; the -mu rank gets U^H-multiplied upper-face
     * vectors because the link U_mu(y) lives with y */
    for (int mu = 0; mu < 4; mu++) {
        if (!g->nface[mu])
            continue;
        cplxf *lo = M->hw.send[2 * mu], *hi = M->hw.send[2 * mu + 1];
        for (int i = 0; i < g->nface[mu]; i++)
            for (int j = 0; j < N; j++) {
                int xl = g->face[mu][0][i], xh = g->face[mu][1][i];
                w_site(M, j, xl, lo + ((size_t)i * N + j) * 12);
                cplxf U[9], w[12];
                dirac_link_f(D, xh, mu, U);
                w_site(M, j, xh, w);
                cplxf *o = hi + ((size_t)i * N + j) * 12;
                for (int s = 0; s < 4; s++)
                    for (int a = 0; a < 3; a++)
                        o[3 * s + a] = conjf(U[a]) * w[3 * s] + conjf(U[3 + a]) * w[3 * s + 1] +
                                       conjf(U[6 + a]) * w[3 * s + 2];
            }
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
}

/* out = D_c in on coarse sites c0 .. c1-1 (halo already received), blocks
 * d0 .. d1-1 (0 self, 1..8 neighbours): the k x k blocks as real arithmetic,
 * SIMD reductions along the rows */
/* out = blocks d0..d1-1 of D_c applied to in, on the coarse sites c0..c1-1;
 * exchanges in's halo first when neighbour blocks are involved */
static void coarse_part(mg_t *M, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1)
{
    const geom_t *cg = &M->cg;
    int k = M->k;
    if (d1 > 1) {
        for (int mu = 0; mu < 4; mu++) {
            if (!cg->nface[mu])
                continue;
            for (int i = 0; i < cg->nface[mu]; i++) {
                memcpy((cplxf *)M->hc.send[2 * mu] + (size_t)i * k, in + (size_t)cg->face[mu][0][i] * k,
                       sizeof(cplxf) * k);
                memcpy((cplxf *)M->hc.send[2 * mu + 1] + (size_t)i * k, in + (size_t)cg->face[mu][1][i] * k,
                       sizeof(cplxf) * k);
            }
        }
        halo_start(cg, &M->hc);
        halo_wait(&M->hc);
    }
#pragma omp parallel
    {
        int a0, a1;
        (void)lat_share(c1 - c0, &a0, &a1, NULL);
        a0 += c0;
        a1 += c0;
#ifdef LAT_HAVE_HALF
        if (M->half)
            coarse_sites_h(M, out, in, a0, a1, d0, d1);
        else
#endif
            coarse_sites_f(M, out, in, a0, a1, d0, d1);
    }
}

void mg_coarse_apply(mg_t *M, cplxf *out, const cplxf *in) { coarse_part(M, out, in, 0, M->cg.V, 0, 9); }

/* ---- odd-even (Schur complement) coarse solve ----
 * Coarse sites are stored even first; every neighbour of an even site is odd
 * when all local coarse dimensions are even. S = D_oo - D_oe D_ee^-1 D_eo. */
static int coarse_oe_possible(const mg_t *M)
{
    for (int m = 0; m < 4; m++)
        if (M->cg.l[m] % 2)
            return 0;
    return M->cg.Vh > 0 && 2 * M->cg.Vh == M->cg.V;
}

/* inverts the self blocks of the even coarse sites (Gauss-Jordan, partial
 * pivoting, in double) into M->Dinv */
static void coarse_invert_even(mg_t *M)
{
    int k = M->k;
    size_t kk = (size_t)k * k;
#pragma omp parallel
    {
        cplx *a = malloc(sizeof(cplx) * 2 * kk);
#pragma omp for schedule(static)
        for (int c = 0; c < M->cg.Vh; c++) {
            cplx *b = a + kk;
            for (size_t i = 0; i < kk; i++) {
#ifdef LAT_HAVE_HALF
                if (M->half)
                    a[i] = (double)M->Dch[2 * ((size_t)c * 9 * kk + i)] +
                           I * (double)M->Dch[2 * ((size_t)c * 9 * kk + i) + 1];
                else
#endif
                    a[i] = M->Dc[(size_t)c * 9 * kk + i];
                b[i] = 0;
            }
            for (int i = 0; i < k; i++)
                b[(size_t)i * k + i] = 1;
            for (int col = 0; col < k; col++) {
                int piv = col;
                for (int r = col + 1; r < k; r++)
                    if (cabs(a[(size_t)r * k + col]) > cabs(a[(size_t)piv * k + col]))
                        piv = r;
                if (piv != col)
                    for (int j = 0; j < k; j++) {
                        cplx t = a[(size_t)piv * k + j];
                        a[(size_t)piv * k + j] = a[(size_t)col * k + j];
                        a[(size_t)col * k + j] = t;
                        t = b[(size_t)piv * k + j];
                        b[(size_t)piv * k + j] = b[(size_t)col * k + j];
                        b[(size_t)col * k + j] = t;
                    }
                cplx d = a[(size_t)col * k + col];
                cplx inv = d != 0 ? 1 / d : 0;
                for (int j = 0; j < k; j++) {
                    a[(size_t)col * k + j] *= inv;
                    b[(size_t)col * k + j] *= inv;
                }
                for (int r = 0; r < k; r++) {
                    if (r == col)
                        continue;
                    cplx f = a[(size_t)r * k + col];
                    if (f == 0)
                        continue;
                    for (int j = 0; j < k; j++) {
                        a[(size_t)r * k + j] -= f * a[(size_t)col * k + j];
                        b[(size_t)r * k + j] -= f * b[(size_t)col * k + j];
                    }
                }
            }
            for (size_t i = 0; i < kk; i++)
                M->Dinv[(size_t)c * kk + i] = (cplxf)b[i];
        }
        free(a);
    }
}

/* out_e = D_ee^-1 in_e */
static void coarse_ee_inv(mg_t *M, cplxf *out, const cplxf *in)
{
    int k = M->k;
    size_t kk = (size_t)k * k;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < M->cg.Vh; c++) {
        const float *Di = (const float *)(M->Dinv + (size_t)c * kk), *x = (const float *)(in + (size_t)c * k);
        float *o = (float *)(out + (size_t)c * k);
        for (int i = 0; i < k; i++) {
            float sr = 0, si = 0;
            const float *row = Di + 2 * (size_t)i * k;
#pragma omp simd reduction(+ : sr, si)
            for (int j = 0; j < k; j++) {
                sr += row[2 * j] * x[2 * j] - row[2 * j + 1] * x[2 * j + 1];
                si += row[2 * j] * x[2 * j + 1] + row[2 * j + 1] * x[2 * j];
            }
            o[2 * i] = sr;
            o[2 * i + 1] = si;
        }
    }
}

/* out = S in on the odd part (vectors of k (V - Vh)); uses oe1, oe2 */
static void coarse_schur(mg_t *M, cplxf *out, const cplxf *in)
{
    int k = M->k, Vh = M->cg.Vh, V = M->cg.V;
    size_t off = (size_t)Vh * k, no = (size_t)(V - Vh) * k;
    cplxf *a = M->oe1, *b = M->oe2;
    memcpy(a + off, in, sizeof(cplxf) * no);
    coarse_part(M, b, a, 0, Vh, 1, 9); /* b_e = D_eo in */
    coarse_ee_inv(M, a, b);            /* a_e = D_ee^-1 D_eo in (a_o = in kept) */
    coarse_part(M, b, a, Vh, V, 1, 9); /* b_o = D_oe a_e */
    memcpy(a, b + off, sizeof(cplxf) * no);
    coarse_part(M, b, M->oe1, Vh, V, 0, 1); /* b_o = D_oo in: oe1's odd part still holds in */
    for (size_t i = 0; i < no; i++)
        out[i] = b[off + i] - a[i];
}

/* restarted GMRES on the coarse level, single precision, zero initial guess */
static int coarse_gmres(mg_t *M, cplxf *x, const cplxf *b, long n, double tol, int maxit,
                        void (*op)(mg_t *, cplxf *, const cplxf *))
{
    const geom_t *cg = &M->cg;
    int m = M->prm.coarse_restart, it = 0;
    cplxf *V = M->cb, *w = M->cb + (size_t)(m + 1) * n;
    cplx *H = M->cH, *gv = H + (size_t)(m + 1) * m, *cs = gv + m + 1, *sn = cs + m, *y = sn + m;
    memset(x, 0, sizeof(cplxf) * (size_t)n);
    double bn = sqrt(vnorm2_f(cg, b, n));
    if (bn == 0)
        return 0;
    int first = 1;
    while (it < maxit) {
        double beta;
        if (first) {
            memcpy(V, b, sizeof(cplxf) * (size_t)n);
            beta = bn;
            first = 0;
        } else {
            op(M, V, x);
            for (long i = 0; i < n; i++)
                V[i] = b[i] - V[i];
            beta = sqrt(vnorm2_f(cg, V, n));
        }
        if (beta <= tol * bn)
            break;
        for (long i = 0; i < n; i++)
            V[i] /= (float)beta;
        memset(gv, 0, sizeof(cplx) * (size_t)(m + 1));
        gv[0] = beta;
        int j;
        double res = beta;
        for (j = 0; j < m && it < maxit; j++, it++) {
            op(M, w, V + (size_t)j * n);
            for (int i = 0; i <= j; i++) {
                cplx h = vdot_f(cg, V + (size_t)i * n, w, n);
                H[(size_t)i * m + j] = h;
                for (long l = 0; l < n; l++)
                    w[l] -= (cplxf)h * V[(size_t)i * n + l];
            }
            double hn = sqrt(vnorm2_f(cg, w, n));
            H[(size_t)(j + 1) * m + j] = hn;
            for (long l = 0; l < n; l++)
                V[(size_t)(j + 1) * n + l] = hn > 0 ? w[l] / (float)hn : 0;
            for (int i = 0; i < j; i++) {
                cplx a = H[(size_t)i * m + j], bb = H[(size_t)(i + 1) * m + j];
                H[(size_t)i * m + j] = cs[i] * a + sn[i] * bb;
                H[(size_t)(i + 1) * m + j] = -conj(sn[i]) * a + cs[i] * bb;
            }
            cplx a = H[(size_t)j * m + j], bb = H[(size_t)(j + 1) * m + j];
            double na = cabs(a), nr = sqrt(na * na + creal(bb * conj(bb)));
            if (na == 0) {
                cs[j] = 0;
                sn[j] = 1;
            } else {
                cs[j] = na / nr;
                sn[j] = (a / na) * conj(bb) / nr;
            }
            H[(size_t)j * m + j] = cs[j] * a + sn[j] * bb;
            H[(size_t)(j + 1) * m + j] = 0;
            gv[j + 1] = -conj(sn[j]) * gv[j];
            gv[j] = cs[j] * gv[j];
            res = cabs(gv[j + 1]);
            if (res <= tol * bn) {
                j++;
                it++;
                break;
            }
        }
        for (int i = j - 1; i >= 0; i--) {
            cplx s = gv[i];
            for (int l = i + 1; l < j; l++)
                s -= H[(size_t)i * m + l] * y[l];
            y[i] = s / H[(size_t)i * m + i];
        }
        for (int i = 0; i < j; i++)
            for (long l = 0; l < n; l++)
                x[l] += (cplxf)y[i] * V[(size_t)i * n + l];
        if (res <= tol * bn)
            break;
    }
    return it;
}

/* x = D_c^-1 b to the coarse tolerance; odd-even reduced when possible */
static int coarse_solve(mg_t *M, cplxf *x, const cplxf *b)
{
    int k = M->k, Vh = M->cg.Vh, V = M->cg.V;
    if (!M->coe)
        return coarse_gmres(M, x, b, (long)k * V, M->prm.coarse_tol, M->prm.coarse_maxit, mg_coarse_apply);
    size_t off = (size_t)Vh * k, no = (size_t)(V - Vh) * k;
    cplxf *a = M->oe1, *t = M->oe2, *bo = M->oe3;
    coarse_ee_inv(M, a, b);            /* a_e = D_ee^-1 b_e */
    coarse_part(M, t, a, Vh, V, 1, 9); /* t_o = D_oe a_e */
    for (size_t i = 0; i < no; i++)
        bo[i] = b[off + i] - t[off + i];
    int it = coarse_gmres(M, x + off, bo, (long)no, M->prm.coarse_tol, M->prm.coarse_maxit, coarse_schur);
    coarse_part(M, t, x, 0, Vh, 1, 9); /* t_e = D_eo x_o */
    for (size_t i = 0; i < off; i++)
        a[i] = b[i] - t[i];
    coarse_ee_inv(M, x, a);
    return it;
}

void mg_vcycle(mg_t *M, cplxf *x, const cplxf *r)
{
    double t = wtime();
    mg_restrict(M, M->rc, r);
    double t1 = wtime();
    M->coarse_iters += coarse_solve(M, M->ec, M->rc);
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

/* P from the current test vectors, then D_c = P^H D P (timed) */
static void setup_interp(mg_t *M)
{
    double t = wtime();
    orthonormalise(M);
    double t1 = wtime();
    assemble(M);
    if (M->coe)
        coarse_invert_even(M);
    M->ts_orth += t1 - t;
    M->ts_asm += wtime() - t1;
}

int mg_setup(mg_t *M, dirac_t *D, const params_t *p)
{
    double t0 = wtime();
    memset(M, 0, sizeof *M);
    M->D = D;
    M->g = D->g;
    M->prm = *p;
    const geom_t *g = M->g;
    coarse_geom(M, p);
    M->nblk = M->cg.V;
    M->bsites = p->block[0] * p->block[1] * p->block[2] * p->block[3];
    M->N = p->ntv;
    M->k = 2 * p->ntv;
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
    size_t V12 = 12 * (size_t)g->V, n = V12 * sizeof(cplxf);
    long nc = (long)M->k * M->cg.V;
    M->half = D->half;
    M->TV = lat_alloc_testvec(n * (size_t)M->N);
    if (M->half) {
        M->Wh = lat_alloc_testvec(n / 2 * (size_t)M->N);
        M->Dch = lat_alloc_coarse(sizeof(lat_half) * 2 * 9 * (size_t)M->k * M->k * (size_t)M->nblk);
    } else {
        M->W = lat_alloc_testvec(n * (size_t)M->N);
        M->Dc = lat_alloc_coarse(sizeof(cplxf) * 9 * (size_t)M->k * M->k * (size_t)M->nblk);
    }
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
    int m = p->coarse_restart;
    M->cb = lat_alloc_krylov(sizeof(cplxf) * (size_t)nc * (size_t)(m + 2));
    M->cH = lat_alloc_krylov(sizeof(cplx) * (size_t)((m + 1) * m + 4 * m + 4));
    M->coe = p->coarse_oddeven && coarse_oe_possible(M);
    if (M->coe) {
        M->Dinv = lat_alloc_coarse(sizeof(cplxf) * (size_t)M->k * M->k * (size_t)M->cg.Vh);
        M->oe1 = lat_alloc_vectors(sizeof(cplxf) * (size_t)nc);
        M->oe2 = lat_alloc_vectors(sizeof(cplxf) * (size_t)nc);
        M->oe3 = lat_alloc_vectors(sizeof(cplxf) * (size_t)nc);
    }
    halo_alloc(&M->cg, &M->hc, sizeof(cplxf) * (size_t)M->k);
    halo_alloc(g, &M->hw, sizeof(cplxf) * 12 * (size_t)M->N);

    /* initial phase: random vectors keyed by global site, SAP inverse iteration */
    double ts = wtime();
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
    M->ts_init = wtime() - ts;
    setup_interp(M);
    if (getenv("HM_LATTICE_VERBOSE") && g->rank == 0)
        fprintf(stderr, "setup: initial phase done, %.2f s\n", wtime() - t0);
    /* bootstrap: v <- v + C (v - D v) */
    for (int it = 0; it < p->setup_iter; it++) {
        ts = wtime();
        for (int j = 0; j < M->N; j++) {
            cplxf *w = M->TV + (size_t)j * V12;
            dirac_apply_f(D, M->t, w);
            for (size_t i = 0; i < V12; i++)
                M->t[i] = w[i] - M->t[i];
            cplxf *z = lat_alloc_vectors(n);
            mg_vcycle(M, z, M->t);
            for (size_t i = 0; i < V12; i++)
                w[i] += z[i];
            lat_free(z);
            double nn = sqrt(vnorm2_f(g, w, (long)V12));
            for (size_t i = 0; i < V12; i++)
                w[i] /= (float)nn;
        }
        M->ts_boot += wtime() - ts;
        setup_interp(M);
        if (getenv("HM_LATTICE_VERBOSE") && g->rank == 0)
            fprintf(stderr, "setup: bootstrap %d done, %.2f s, %ld coarse iterations\n", it + 1,
                    wtime() - t0, M->coarse_iters);
    }
    M->t_coarse = M->t_smooth = M->t_restrict = M->t_prolong = M->t_csolve = 0;
    M->coarse_iters = 0;
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
    lat_free(M->Dch);
    lat_free(M->TV);
    lat_free(M->Dc);
    lat_free(M->r), lat_free(M->e), lat_free(M->q), lat_free(M->t);
    if (M->bne)
        lat_free(M->q2), lat_free(M->q3), free(M->bne);
    lat_free(M->rc), lat_free(M->ec), lat_free(M->cb), lat_free(M->cH);
    if (M->coe)
        lat_free(M->Dinv), lat_free(M->oe1), lat_free(M->oe2), lat_free(M->oe3);
    halo_free(&M->hc);
    halo_free(&M->hw);
    geom_free(&M->cg);
}

/* FGMRES(restart) in double, right-preconditioned by the single V-cycle */
void solve_fgmres_mg(mg_t *M, cplx *x, const cplx *b, double tol, int maxit, int restart,
                     solve_info_t *si)
{
    const geom_t *g = M->g;
    long n = 12L * g->V;
    int m = restart;
    size_t sz = sizeof(cplx) * (size_t)n;
    /* Z holds the V-cycle outputs, which are single precision: stored as
     * such (exact), half the traffic of the final update */
    cplx *V = lat_alloc_krylov(sz * (size_t)(m + 1)), *w = lat_alloc_krylov(sz), *zd = lat_alloc_krylov(sz);
    cplxf *Z = lat_alloc_krylov(sizeof(cplxf) * (size_t)n * (size_t)m);
    cplx *H = calloc((size_t)(m + 1) * m + 4 * (size_t)m + 4, sizeof(cplx));
    cplx *gv = H + (size_t)(m + 1) * m, *cs = gv + m + 1, *sn = cs + m, *y = sn + m;
    cplxf *rf = lat_alloc_vectors(sizeof(cplxf) * (size_t)n);
    double t0 = wtime(), tc0 = M->t_coarse, tv0[4] = {M->t_smooth, M->t_restrict, M->t_prolong, M->t_csolve};
    long ci0 = M->coarse_iters;
    memset(si, 0, sizeof *si);
    double bn = sqrt(vnorm2(g, b, n)), res = 0;
    int it = 0, verbose = getenv("HM_LATTICE_VERBOSE") != NULL;
    while (it < maxit) {
        dirac_apply(M->D, V, x);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++)
            V[i] = b[i] - V[i];
        double beta = sqrt(vnorm2(g, V, n));
        res = beta;
        if (beta <= tol * bn)
            break;
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++)
            V[i] /= beta;
        memset(gv, 0, sizeof(cplx) * (size_t)(m + 1));
        gv[0] = beta;
        int j;
        for (j = 0; j < m && it < maxit; j++) {
            cplx *vj = V + (size_t)j * n;
            cplxf *zj = Z + (size_t)j * n;
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++)
                rf[i] = (cplxf)vj[i];
            mg_vcycle(M, zj, rf);
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++)
                zd[i] = zj[i];
            dirac_apply(M->D, w, zd);
            for (int i = 0; i <= j; i++) {
                cplx h = vdot(g, V + (size_t)i * n, w, n);
                H[(size_t)i * m + j] = h;
                const cplx *vi = V + (size_t)i * n;
#pragma omp parallel for schedule(static)
                for (long l = 0; l < n; l++)
                    w[l] -= h * vi[l];
            }
            double hn = sqrt(vnorm2(g, w, n));
            H[(size_t)(j + 1) * m + j] = hn;
            cplx *vn = V + (size_t)(j + 1) * n;
#pragma omp parallel for schedule(static)
            for (long l = 0; l < n; l++)
                vn[l] = w[l] / hn;
            for (int i = 0; i < j; i++) {
                cplx a = H[(size_t)i * m + j], bb = H[(size_t)(i + 1) * m + j];
                H[(size_t)i * m + j] = cs[i] * a + sn[i] * bb;
                H[(size_t)(i + 1) * m + j] = -conj(sn[i]) * a + cs[i] * bb;
            }
            cplx a = H[(size_t)j * m + j], bb = H[(size_t)(j + 1) * m + j];
            double na = cabs(a), nr = sqrt(na * na + creal(bb * conj(bb)));
            cs[j] = na == 0 ? 0 : na / nr;
            sn[j] = na == 0 ? 1 : (a / na) * conj(bb) / nr;
            H[(size_t)j * m + j] = cs[j] * a + sn[j] * bb;
            gv[j + 1] = -conj(sn[j]) * gv[j];
            gv[j] = cs[j] * gv[j];
            res = cabs(gv[j + 1]);
            it++;
            if (verbose && g->rank == 0)
                fprintf(stderr, "fgmres %d: relres %.3e, coarse iterations so far %ld, %.2f s\n", it,
                        res / bn, M->coarse_iters - ci0, wtime() - t0);
            if (res <= tol * bn) {
                j++;
                break;
            }
        }
        for (int i = j - 1; i >= 0; i--) {
            cplx s = gv[i];
            for (int l = i + 1; l < j; l++)
                s -= H[(size_t)i * m + l] * y[l];
            y[i] = s / H[(size_t)i * m + i];
        }
        for (int i = 0; i < j; i++) {
            const cplxf *zi = Z + (size_t)i * n;
#pragma omp parallel for schedule(static)
            for (long l = 0; l < n; l++)
                x[l] += y[i] * zi[l];
        }
        if (res <= tol * bn)
            break;
    }
    si->iters = it;
    si->relres = res / bn;
    si->time = wtime() - t0;
    si->t_coarse = M->t_coarse - tc0;
    si->coarse_iters = M->coarse_iters - ci0;
    si->t_smooth = M->t_smooth - tv0[0];
    si->t_restrict = M->t_restrict - tv0[1];
    si->t_prolong = M->t_prolong - tv0[2];
    si->t_csolve = M->t_csolve - tv0[3];
    si->t_outer = si->time - si->t_smooth - si->t_restrict - si->t_prolong - si->t_csolve;
    si->true_relres = true_residual(M->D, x, b);
    si->converged = si->true_relres <= tol * 10;
    lat_free(V), lat_free(Z), lat_free(w), lat_free(zd), lat_free(rf);
    free(H);
}
