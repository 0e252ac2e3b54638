/* SPDX-License-Identifier: BSD-3-Clause */
/* A coarse level's operator D_L (9 k x k blocks per site, halo exchange),
 * the odd-even (Schur complement) reduction and the (flexible) GMRES used
 * for the coarsest solve, the K-cycle and the coarse smoother. */
#include "lattice.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 8 floats, loaded from any float's address (the coarse kernel's rows) */
typedef float lat_v8f __attribute__((vector_size(32), aligned(4)));

#define WT float
#define DCFIELD L->Dc
#define SFX(n) n##_f
#define ROWLOAD(row, src, n) const float *row = (src)
#include "mg_ckern.h"
#undef WT
#undef DCFIELD
#undef SFX
#undef ROWLOAD
#ifdef LAT_HAVE_HALF
/* 16-bit storage: each row of 2k converted to a single copy first */
#define WT lat_half
#define DCFIELD L->Dch
#define SFX(n) n##_h
#undef LAT_FAST
#define LAT_FAST LAT_HALF_FAST
#define ROWLOAD(row, src, n)                                                                             \
    float row[2 * LAT_KMAX];                                                                             \
    lat_h2f(row, (src), (n))
#include "mg_ckern.h"
#undef WT
#undef DCFIELD
#undef SFX
#undef ROWLOAD
#undef LAT_FAST
#define LAT_FAST LAT_FAST_CLONES
#endif

/* out = blocks d0..d1-1 of D_L applied to in, on the sites c0..c1-1 (the
 * k x k blocks as real arithmetic, SIMD reductions along the rows);
 * exchanges in's halo first when neighbour blocks are involved */
void lvl_halo(mgl_t *L, const cplxf *in)
{
    const geom_t *cg = L->g;
    int k = L->k;
    for (int mu = 0; mu < 4; mu++) {
        if (!cg->nface[mu])
            continue;
        for (int i = 0; i < cg->nface[mu]; i++) {
            memcpy((cplxf *)L->hc.send[2 * mu] + (size_t)i * k, in + (size_t)cg->face[mu][0][i] * k,
                   sizeof(cplxf) * k);
            memcpy((cplxf *)L->hc.send[2 * mu + 1] + (size_t)i * k, in + (size_t)cg->face[mu][1][i] * k,
                   sizeof(cplxf) * k);
        }
    }
    halo_start(cg, &L->hc);
    halo_wait(&L->hc);
}

void lvl_part(mgl_t *L, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1)
{
    if (d1 > 1)
        lvl_halo(L, in);
#pragma omp parallel
    {
        int a0, a1;
        (void)lat_share(c1 - c0, &a0, &a1, NULL);
        a0 += c0;
        a1 += c0;
#ifdef LAT_HAVE_HALF
        if (L->half)
            coarse_sites_h(L, out, in, a0, a1, d0, d1);
        else
#endif
            coarse_sites_f(L, out, in, a0, a1, d0, d1);
    }
}

void lvl_apply(mgl_t *L, cplxf *out, const cplxf *in) { lvl_part(L, out, in, 0, L->g->V, 0, 9); }

/* ---- odd-even (Schur complement) coarse solve ----
 * Coarse sites are stored even first. S = D_oo - D_oe D_ee^-1 D_eo. */
int lvl_oe_possible(const mgl_t *L)
{
    /* sites are ordered by global parity, so every neighbour of an even site
     * is odd when the global dimensions are even, whatever the local ones
     * (a rank may then hold more sites of one parity than of the other) */
    for (int m = 0; m < 4; m++)
        if (L->g->L[m] % 2)
            return 0;
    return L->g->Vh > 0 && L->g->Vh < L->g->V;
}

/* inverts the self blocks of sites 0 .. ns-1 (Gauss-Jordan, partial
 * pivoting, in double) into out */
void lvl_invert_self(mgl_t *L, cplxf *out, int ns)
{
    int k = L->k;
    size_t kk = (size_t)k * k;
#pragma omp parallel
    {
        cplx *a = malloc(sizeof(cplx) * 2 * kk);
#pragma omp for schedule(static)
        for (int c = 0; c < ns; c++) {
            cplx *b = a + kk;
            for (size_t i = 0; i < kk; i++) {
#ifdef LAT_HAVE_HALF
                if (L->half)
                    a[i] = (double)L->Dch[2 * ((size_t)c * 9 * kk + i)] +
                           I * (double)L->Dch[2 * ((size_t)c * 9 * kk + i) + 1];
                else
#endif
                    a[i] = L->Dc[(size_t)c * 9 * kk + i];
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
                out[(size_t)c * kk + i] = (cplxf)b[i];
        }
        free(a);
    }
}

void lvl_invert_even(mgl_t *L) { lvl_invert_self(L, L->Dinv, L->g->Vh); }

/* out = Dinv in on sites 0 .. ns-1 (Dinv: k x k blocks per site) */
static void self_inv_apply(const mgl_t *L, const cplxf *Dinv, int ns, cplxf *out, const cplxf *in)
{
    int k = L->k;
    size_t kk = (size_t)k * k;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < ns; c++) {
        const float *Di = (const float *)(Dinv + (size_t)c * kk), *x = (const float *)(in + (size_t)c * k);
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

/* out_e = D_ee^-1 in_e */
static void coarse_ee_inv(mgl_t *L, cplxf *out, const cplxf *in) { self_inv_apply(L, L->Dinv, L->g->Vh, out, in); }

/* block-Jacobi: out = D_self^-1 in on every site (the coarse smoother's
 * preconditioner) */
void lvl_jacobi(mgl_t *L, cplxf *out, const cplxf *in) { self_inv_apply(L, L->Jinv, L->g->V, out, in); }

/* out = S in on the odd part (vectors of k (V - Vh)); uses oe1, oe2 */
static void coarse_schur(mgl_t *L, cplxf *out, const cplxf *in)
{
    int k = L->k, Vh = L->g->Vh, V = L->g->V;
    size_t off = (size_t)Vh * k, no = (size_t)(V - Vh) * k;
    cplxf *a = L->oe1, *b = L->oe2;
    memcpy(a + off, in, sizeof(cplxf) * no);
    lvl_part(L, b, a, 0, Vh, 1, 9); /* b_e = D_eo in */
    coarse_ee_inv(L, a, b);            /* a_e = D_ee^-1 D_eo in (a_o = in kept) */
    lvl_part(L, b, a, Vh, V, 1, 9); /* b_o = D_oe a_e */
    memcpy(a, b + off, sizeof(cplxf) * no);
    lvl_part(L, b, L->oe1, Vh, V, 0, 1); /* b_o = D_oo in: oe1's odd part still holds in */
    for (size_t i = 0; i < no; i++)
        out[i] = b[off + i] - a[i];
}

/* applies the earlier Givens rotations to column j of H, makes the new one
 * and updates the residual vector gv; returns |residual| */
double lat_givens(cplx *H, int m, int j, cplx *cs, cplx *sn, cplx *gv)
{
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
    return cabs(gv[j + 1]);
}

/* w -= sum_i <V_i, w> V_i (column j of H), then V_{j+1} = w / |w| */
static void arnoldi(const geom_t *g, cplxf *V, cplxf *w, cplx *H, int m, int j, long n)
{
    for (int i = 0; i <= j; i++) {
        cplx h = vdot_f(g, V + (size_t)i * n, w, n);
        H[(size_t)i * m + j] = h;
        for (long l = 0; l < n; l++)
            w[l] -= (cplxf)h * V[(size_t)i * n + l];
    }
    double hn = sqrt(vnorm2_f(g, w, n));
    H[(size_t)(j + 1) * m + j] = hn;
    for (long l = 0; l < n; l++)
        V[(size_t)(j + 1) * n + l] = hn > 0 ? w[l] / (float)hn : 0;
}

/* x += sum_i y_i Z_i with H y = gv (upper triangular after the rotations) */
static void gmres_update(cplxf *x, const cplxf *Z, const cplx *H, const cplx *gv, cplx *y, int m, int j, long n)
{
    for (int i = j - 1; i >= 0; i--) {
        cplx s = gv[i];
        for (int l = i + 1; l < j; l++)
            s -= H[(size_t)i * m + l] * y[l];
        y[i] = s / H[(size_t)i * m + i];
    }
    for (int i = 0; i < j; i++)
        for (long l = 0; l < n; l++)
            x[l] += (cplxf)y[i] * Z[(size_t)i * n + l];
}

/* restarted (flexible) GMRES on a coarse level, single precision. With a
 * preconditioner the directions Z_j = prec(V_j) are kept (the K-cycle's
 * preconditioner is itself an iteration, so it changes from step to step) */
int lvl_gmres(mgl_t *L, const kry_t *K, cplxf *x, const cplxf *b, long n, double tol, int maxit, int guess,
              lvl_op_t op, lvl_op_t prec)
{
    const geom_t *cg = L->g;
    int m = K->m, it = 0;
    cplxf *V = K->V, *w = K->V + (size_t)(m + 1) * n;
    cplx *H = K->H, *gv = H + (size_t)(m + 1) * m, *cs = gv + m + 1, *sn = cs + m, *y = sn + m;
    if (!guess)
        memset(x, 0, sizeof(cplxf) * (size_t)n);
    double bn = sqrt(vnorm2_f(cg, b, n)), res = bn;
    if (bn == 0)
        return 0;
    int first = !guess;
    while (it < maxit) {
        double beta;
        if (first) {
            memcpy(V, b, sizeof(cplxf) * (size_t)n);
            beta = bn;
            first = 0;
        } else {
            op(L, V, x);
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
        for (j = 0; j < m && it < maxit; j++, it++) {
            const cplxf *d = V + (size_t)j * n;
            if (prec) {
                prec(L, K->Z + (size_t)j * n, d);
                d = K->Z + (size_t)j * n;
            }
            op(L, w, d);
            arnoldi(cg, V, w, H, m, j, n);
            res = lat_givens(H, m, j, cs, sn, gv);
            if (res <= tol * bn) {
                j++;
                it++;
                break;
            }
        }
        gmres_update(x, prec ? K->Z : V, H, gv, y, m, j, n);
        if (res <= tol * bn)
            break;
    }
    return it;
}

/* x = D_c^-1 b to the coarse tolerance; odd-even reduced when possible */
int lvl_coarsest_solve(mgl_t *L, cplxf *x, const cplxf *b)
{
    if (L->direct && L->direct_ok)
        return lvl_direct_solve(L, x, b);
    int k = L->k, Vh = L->g->Vh, V = L->g->V;
    kry_t K = {L->cb, NULL, L->cH, L->prm.coarse_restart};
    if (!L->coe)
        return lvl_gmres(L, &K, x, b, (long)k * V, L->prm.coarse_tol, L->prm.coarse_maxit, 0, lvl_apply, NULL);
    size_t off = (size_t)Vh * k, no = (size_t)(V - Vh) * k;
    cplxf *a = L->oe1, *t = L->oe2, *bo = L->oe3;
    coarse_ee_inv(L, a, b);            /* a_e = D_ee^-1 b_e */
    lvl_part(L, t, a, Vh, V, 1, 9); /* t_o = D_oe a_e */
    for (size_t i = 0; i < no; i++)
        bo[i] = b[off + i] - t[off + i];
    int it = lvl_gmres(L, &K, x + off, bo, (long)no, L->prm.coarse_tol, L->prm.coarse_maxit, 0, coarse_schur, NULL);
    lvl_part(L, t, x, 0, Vh, 1, 9); /* t_e = D_eo x_o */
    for (size_t i = 0; i < off; i++)
        a[i] = b[i] - t[i];
    coarse_ee_inv(L, x, a);
    return it;
}

