/* SPDX-License-Identifier: BSD-3-Clause */
/* Fine-level smoother: red-black Schwarz (SAP) over the lattice blocks, each
 * block solved by MR(k) on the odd-even reduced block system (or the full
 * block), Dirichlet boundaries. */
#include "lattice.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

