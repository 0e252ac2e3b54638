/* Wilson-clover kernels, included twice by dirac.c (double and single).
 * Needs REAL, CPLX, SFX(name), FIELD_U, FIELD_A, HALO. */

/* h = (1 + s*gamma_mu) psi, upper two spins (the lower ones follow) */
static inline void SFX(proj)(CPLX *restrict h, const CPLX *restrict psi, int mu, int s)
{
    for (int a = 0; a < 2; a++) {
        CPLX ph = (CPLX)(s * hm__pha[mu][a]);
        const CPLX *p = psi + 3 * (2 + hm__cola[mu][a]);
        for (int c = 0; c < 3; c++)
            h[3 * a + c] = psi[3 * a + c] + ph * p[c];
    }
}

static inline void SFX(umul)(CPLX *restrict o, const CPLX *restrict U, const CPLX *restrict h)
{
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 3; i++)
            o[3 * a + i] = U[3 * i] * h[3 * a] + U[3 * i + 1] * h[3 * a + 1] + U[3 * i + 2] * h[3 * a + 2];
}

static inline void SFX(udmul)(CPLX *restrict o, const CPLX *restrict U, const CPLX *restrict h)
{
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 3; i++)
            o[3 * a + i] = conj(U[i]) * h[3 * a] + conj(U[3 + i]) * h[3 * a + 1] +
                           conj(U[6 + i]) * h[3 * a + 2];
}

/* acc += (1 + s*gamma_mu) reconstructed from its upper half g */
static inline void SFX(lift)(CPLX *restrict acc, const CPLX *restrict g, int mu, int s)
{
    for (int a = 0; a < 6; a++)
        acc[a] += g[a];
    for (int a = 0; a < 2; a++) {
        CPLX ph = (CPLX)(s * hm__phb[mu][a]);
        const CPLX *q = g + 3 * hm__colb[mu][a];
        for (int c = 0; c < 3; c++)
            acc[6 + 3 * a + c] += ph * q[c];
    }
}

static inline void SFX(diag)(CPLX *restrict out, const CPLX *restrict A, const CPLX *restrict in,
                             const CPLX *restrict acc)
{
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 6; i++) {
            CPLX s = 0;
            for (int j = 0; j < 6; j++)
                s += A[36 * b + 6 * i + j] * in[6 * b + j];
            out[6 * b + i] = s - (REAL)0.5 * acc[6 * b + i];
        }
}

static void SFX(apply_impl)(dirac_t *D, CPLX *restrict out, const CPLX *restrict in)
{
    const geom_t *g = D->g;
    const CPLX *U = D->FIELD_U, *A = D->FIELD_A;
    halo_t *h = &D->HALO;
    for (int mu = 0; mu < 4; mu++) {
        int nf = g->nface[mu];
        if (!nf)
            continue;
        CPLX *lo = h->send[2 * mu], *hi = h->send[2 * mu + 1];
        const int *fl = g->face[mu][0], *fh = g->face[mu][1];
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nf; i++) {
            CPLX t[6];
            SFX(proj)(lo + 6 * i, in + 12 * (size_t)fl[i], mu, -1);
            SFX(proj)(t, in + 12 * (size_t)fh[i], mu, +1);
            SFX(udmul)(hi + 6 * i, U + 36 * (size_t)fh[i] + 9 * mu, t);
        }
    }
    halo_start(g, h);
    const int *nb = g->nb;
#pragma omp parallel for schedule(static)
    for (int x = 0; x < g->V; x++) {
        CPLX acc[12] = {0}, t[6], u[6];
        for (int mu = 0; mu < 4; mu++) {
            int f = nb[8 * x + 2 * mu], b = nb[8 * x + 2 * mu + 1];
            if (f >= 0) {
                SFX(proj)(t, in + 12 * (size_t)f, mu, -1);
                SFX(umul)(u, U + 36 * (size_t)x + 9 * mu, t);
                SFX(lift)(acc, u, mu, -1);
            }
            if (b >= 0) {
                SFX(proj)(t, in + 12 * (size_t)b, mu, +1);
                SFX(udmul)(u, U + 36 * (size_t)b + 9 * mu, t);
                SFX(lift)(acc, u, mu, +1);
            }
        }
        SFX(diag)(out + 12 * (size_t)x, A + 72 * (size_t)x, in + 12 * (size_t)x, acc);
    }
    halo_wait(h);
    for (int mu = 0; mu < 4; mu++) {
        int nf = g->nface[mu];
        if (!nf)
            continue;
        const CPLX *rf = h->recv[2 * mu], *rb = h->recv[2 * mu + 1];
        const int *fl = g->face[mu][0], *fh = g->face[mu][1];
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nf; i++) {
            CPLX acc[12] = {0}, u[6];
            int x = fh[i];
            SFX(umul)(u, U + 36 * (size_t)x + 9 * mu, rf + 6 * i);
            SFX(lift)(acc, u, mu, -1);
            for (int a = 0; a < 12; a++)
                out[12 * (size_t)x + a] -= (REAL)0.5 * acc[a];
            x = fl[i];
            CPLX acc2[12] = {0};
            SFX(lift)(acc2, rb + 6 * i, mu, +1);
            for (int a = 0; a < 12; a++)
                out[12 * (size_t)x + a] -= (REAL)0.5 * acc2[a];
        }
    }
}
