/* SPDX-License-Identifier: BSD-3-Clause */
/* Wilson-clover kernels, included three times by dirac.c (double, single,
 * and single arithmetic on half-precision links and clover).
 * Needs REAL, CPLX, V4 (vector of 4 REAL), SHUF(v, a, b, c, d), SFX(name),
 * FIELD_U, FIELD_A, HALO, FREAL (the stored type of links and clover) and
 * LDV(p) (4 FREAL at p as a V4).
 *
 * A V4 holds two complex numbers: spins (0,1) or (2,3) of one colour, so the
 * spin projection, the SU(3) multiply of both half-spinor components and the
 * reconstruction are straight-line vector code with compile-time phases
 * (every gamma phase is +-1 or +-i: a shuffle and a sign, no multiply). The
 * clover blocks are stored in row pairs (see CLOVER_IDX in lattice.h) so the
 * 6x6 multiply is also one vector FMA per entry. */

#define VONE(a, b, c, d) ((V4){(REAL)(a), (REAL)(b), (REAL)(c), (REAL)(d)})

/* i * v for both complex numbers */
static inline HM_AI V4 SFX(vi)(V4 v) { return SHUF(v, 1, 0, 3, 2) * VONE(-1, 1, -1, 1); }
/* swap the two complex numbers */
static inline HM_AI V4 SFX(vsw)(V4 v) { return SHUF(v, 2, 3, 0, 1); }

static inline HM_AI V4 SFX(ld2)(const CPLX *a, const CPLX *b)
{
    const REAL *pa = (const REAL *)a, *pb = (const REAL *)b;
    return (V4){pa[0], pa[1], pb[0], pb[1]};
}

static inline HM_AI void SFX(st2)(CPLX *a, CPLX *b, V4 v)
{
    REAL *pa = (REAL *)a, *pb = (REAL *)b;
    pa[0] = v[0];
    pa[1] = v[1];
    pb[0] = v[2];
    pb[1] = v[3];
}

/* lower-spin part of (1 + s gamma_mu) psi as 3 colour pairs (spins 0,1) */
static inline HM_AI void SFX(vproj)(V4 *restrict h, const CPLX *restrict psi, int mu, int s)
{
    for (int c = 0; c < 3; c++) {
        /* the spin-swapped directions (x, y) load spins (3, 2) in that order:
         * one gather, no swap after it */
        V4 p01 = SFX(ld2)(psi + c, psi + 3 + c), t;
        switch (mu) {
        case 0: t = -SFX(vi)(SFX(ld2)(psi + 9 + c, psi + 6 + c)); break;          /* -i, swapped */
        case 1: t = SFX(ld2)(psi + 9 + c, psi + 6 + c) * VONE(-1, -1, 1, 1); break; /* (-1, +1), swapped */
        case 2: t = SFX(vi)(SFX(ld2)(psi + 6 + c, psi + 9 + c)) * VONE(-1, -1, 1, 1); break; /* (-i, +i) */
        default: t = SFX(ld2)(psi + 6 + c, psi + 9 + c); break;                    /* (1, 1) */
        }
        h[c] = s > 0 ? p01 + t : p01 - t;
    }
}

/* o = U h (dag = 0) or U^H h (dag = 1), both spin components at once */
static inline HM_AI void SFX(vmul)(V4 *restrict o, const FREAL *restrict uin, const V4 *restrict h, int dag)
{
#ifdef FREAL_HALF
    /* 16-bit link: converted once (vector conversions), then broadcast */
    float u[18];
    lat_h2f(u, uin, 18);
#else
    const FREAL *u = uin;
#endif
    for (int i = 0; i < 3; i++) {
        V4 re = {0}, im = {0};
        for (int j = 0; j < 3; j++) {
            int e = dag ? 3 * j + i : 3 * i + j;
            re += (REAL)u[2 * e] * h[j];
            im += (REAL)u[2 * e + 1] * h[j];
        }
        o[i] = dag ? re - SFX(vi)(im) : re + SFX(vi)(im);
    }
}

/* a01 += g, a23 += the upper spins of (1 + s gamma_mu) reconstructed from g */
static inline HM_AI void SFX(vlift)(V4 *restrict a01, V4 *restrict a23, const V4 *restrict gv, int mu,
                                    int s)
{
    for (int c = 0; c < 3; c++) {
        V4 t;
        switch (mu) {
        case 0: t = SFX(vi)(SFX(vsw)(gv[c])); break;          /* (i, i), swapped */
        case 1: t = SFX(vsw)(gv[c]) * VONE(1, 1, -1, -1); break; /* (1, -1), swapped */
        case 2: t = SFX(vi)(gv[c]) * VONE(1, 1, -1, -1); break;  /* (i, -i) */
        default: t = gv[c]; break;
        }
        a01[c] += gv[c];
        a23[c] = s > 0 ? a23[c] + t : a23[c] - t;
    }
}

/* the upper spins of (1 + s gamma_mu) reconstructed from g, summed over
 * both hops of a direction first: a23 += R_mu(gsum), gsum = sum of s g
 * (R_mu is linear, so the shuffles of the reconstruction are paid once per
 * direction instead of once per hop) */
static inline HM_AI void SFX(vlift2)(V4 *restrict a23, const V4 *restrict gsum, int mu)
{
    for (int c = 0; c < 3; c++) {
        switch (mu) {
        case 0: a23[c] += SFX(vi)(SFX(vsw)(gsum[c])); break;
        case 1: a23[c] += SFX(vsw)(gsum[c]) * VONE(1, 1, -1, -1); break;
        case 2: a23[c] += SFX(vi)(gsum[c]) * VONE(1, 1, -1, -1); break;
        default: a23[c] += gsum[c]; break;
        }
    }
}

/* half-spinor (6 complex, [spin][colour]) to / from 3 colour pairs */
static inline HM_AI void SFX(hld)(V4 *h, const CPLX *p)
{
    for (int c = 0; c < 3; c++)
        h[c] = SFX(ld2)(p + c, p + 3 + c);
}

static inline HM_AI void SFX(hst)(CPLX *p, const V4 *h)
{
    for (int c = 0; c < 3; c++)
        SFX(st2)(p + c, p + 3 + c, h[c]);
}

/* out(x) = A(x) in(x) - 1/2 sum of the hops whose neighbour passes the
 * filter: local (nb >= 0) and, when blk is given, in block b */
static inline HM_AI void SFX(site)(CPLX *restrict out, const CPLX *restrict in, const FREAL *restrict U,
                                   const FREAL *restrict A, const int *restrict nb, const int *blk, int b,
                                   int x)
{
    V4 a01[3] = {{0}}, a23[3] = {{0}}, h[3], o[3], gs[3];
#define HM_HOP(mu)                                                                                      \
    do {                                                                                               \
        int f_ = nb[8 * (size_t)x + 2 * (mu)], b_ = nb[8 * (size_t)x + 2 * (mu) + 1];                  \
        int hf_ = f_ >= 0 && (!blk || blk[f_] == b), hb_ = b_ >= 0 && (!blk || blk[b_] == b);           \
        for (int c_ = 0; c_ < 3; c_++)                                                                 \
            gs[c_] = (V4){0};                                                                          \
        if (hf_) {                                                                                     \
            SFX(vproj)(h, in + 12 * (size_t)f_, mu, -1);                                               \
            SFX(vmul)(o, U + 72 * (size_t)x + 18 * (mu), h, 0);                                         \
            for (int c_ = 0; c_ < 3; c_++)                                                             \
                a01[c_] += o[c_], gs[c_] -= o[c_];                                                     \
        }                                                                                              \
        if (hb_) {                                                                                     \
            SFX(vproj)(h, in + 12 * (size_t)b_, mu, +1);                                               \
            SFX(vmul)(o, U + 72 * (size_t)b_ + 18 * (mu), h, 1);                                        \
            for (int c_ = 0; c_ < 3; c_++)                                                             \
                a01[c_] += o[c_], gs[c_] += o[c_];                                                     \
        }                                                                                              \
        if (hf_ || hb_)                                                                                \
            SFX(vlift2)(a23, gs, mu);                                                                  \
    } while (0)
    HM_HOP(0);
    HM_HOP(1);
    HM_HOP(2);
    HM_HOP(3);
#undef HM_HOP
    CPLX *po = out + 12 * (size_t)x;
    if (!A) { /* hopping term only */
        for (int c = 0; c < 3; c++) {
            SFX(st2)(po + c, po + 3 + c, (REAL)-0.5 * a01[c]);
            SFX(st2)(po + 6 + c, po + 9 + c, (REAL)-0.5 * a23[c]);
        }
        return;
    }
    const CPLX *ps = in + 12 * (size_t)x;
    const REAL *xs = (const REAL *)ps;
#ifdef FREAL_HALF
    float Ax[144];
    lat_h2f(Ax, A + 144 * (size_t)x, 144);
#else
    const FREAL *Ax = A + 144 * (size_t)x;
#endif
    for (int bb = 0; bb < 2; bb++) {
        const V4 *acc = bb ? a23 : a01;
        for (int c = 0; c < 3; c++) {
            V4 re = {0}, im = {0};
            for (int j = 0; j < 6; j++) {
                V4 a = LDV(Ax + 4 * (18 * bb + 6 * c + j));
                re += xs[2 * (6 * bb + j)] * a;
                im += xs[2 * (6 * bb + j) + 1] * a;
            }
            V4 r = re + SFX(vi)(im) - (REAL)0.5 * acc[c];
            SFX(st2)(po + 6 * bb + c, po + 6 * bb + 3 + c, r);
        }
    }
}

/* out(x) = A(x) in(x) on the listed sites (A: clover or its inverse, in
 * the CLOVER_IDX layout) */
static HM_FAST __attribute__((unused)) void SFX(clov)(CPLX *restrict out, const CPLX *restrict in,
                                                     const FREAL *restrict A, const int *sites, int ns)
{
    for (int k = 0; k < ns; k++) {
        int x = sites[k];
        const REAL *xs = (const REAL *)(in + 12 * (size_t)x);
#ifdef FREAL_HALF
        float Ax[144];
        lat_h2f(Ax, A + 144 * (size_t)x, 144);
#else
        const FREAL *Ax = A + 144 * (size_t)x;
#endif
        CPLX *po = out + 12 * (size_t)x;
        for (int bb = 0; bb < 2; bb++)
            for (int c = 0; c < 3; c++) {
                V4 re = {0}, im = {0};
                for (int j = 0; j < 6; j++) {
                    V4 a = LDV(Ax + 4 * (18 * bb + 6 * c + j));
                    re += xs[2 * (6 * bb + j)] * a;
                    im += xs[2 * (6 * bb + j) + 1] * a;
                }
                SFX(st2)(po + 6 * bb + c, po + 6 * bb + 3 + c, re + SFX(vi)(im));
            }
    }
}

/* sites x0 .. x1-1 of the full operator, neighbours off-rank skipped */
#ifndef LAT_PF
#define LAT_PF 3 /* sites ahead; 2 .. 8 measured alike on 24^4, 1 thread */
#endif
static HM_FAST void SFX(sites)(CPLX *restrict out, const CPLX *restrict in, const FREAL *restrict U,
                               const FREAL *restrict A, const int *restrict nb, int x0, int x1)
{
    for (int x = x0; x < x1; x++) {
        /* the clover and links of the site LAT_PF ahead into L2: one core
         * alone does not keep enough of these streams in flight otherwise
         * (the hardware prefetcher trails the ~900 instructions per site) */
        size_t xp = (size_t)(x + LAT_PF < x1 ? x + LAT_PF : x);
        const char *pu = (const char *)(U + 72 * xp);
        if (A)
            for (size_t k = 0; k < 144 * sizeof(FREAL); k += 64)
                __builtin_prefetch((const char *)(A + 144 * xp) + k, 0, 2);
        for (size_t k = 0; k < 72 * sizeof(FREAL); k += 64)
            __builtin_prefetch(pu + k, 0, 2);
        SFX(site)(out, in, U, A, nb, NULL, 0, x);
    }
}

/* the whole local lattice, the thread's share of it. Sites are stored even
 * first, each parity in lexicographic order, so the even sites h .. h+n-1
 * and the odd sites Vh+h .. Vh+h+n-1 cover the same stretch of the lattice.
 * They are computed alternately in chunks of LAT_EO_CHUNK: a site's
 * neighbours of the other parity, their links (U(x-mu) of the backward hops)
 * and its own spinor then are still in cache from the chunk just done,
 * where a sweep over all even sites and then all odd ones reads the links
 * and the input spinor from memory twice. */
#ifndef LAT_EO_CHUNK
#define LAT_EO_CHUNK 64
#endif
static inline void SFX(sites_eo)(CPLX *restrict out, const CPLX *restrict in, const FREAL *restrict U,
                                 const FREAL *restrict A, const int *restrict nb, int Vh, int V)
{
    int h0, h1;
    if (2 * Vh != V) { /* not split evenly: plain order */
        (void)lat_share(V, &h0, &h1, NULL);
        SFX(sites)(out, in, U, A, nb, h0, h1);
        return;
    }
    (void)lat_share(Vh, &h0, &h1, NULL);
    for (int h = h0; h < h1; h += LAT_EO_CHUNK) {
        int n = h1 - h < LAT_EO_CHUNK ? h1 - h : LAT_EO_CHUNK;
        SFX(sites)(out, in, U, A, nb, h, h + n);
        SFX(sites)(out, in, U, A, nb, Vh + h, Vh + h + n);
    }
}

/* the listed sites; with blk, only hops within block b (Dirichlet at the
 * block boundary) */
static HM_FAST void SFX(bsites)(CPLX *restrict out, const CPLX *restrict in, const FREAL *restrict U,
                                const FREAL *restrict A, const int *restrict nb, const int *sites, int ns,
                                const int *blk, int b)
{
    for (int k = 0; k < ns; k++)
        SFX(site)(out, in, U, A, nb, blk, b, sites[k]);
}

/* list: when given, only the interior sites list[0..nlist-1] are computed
 * (the face corrections still touch every face site) */
static HM_IMPL void SFX(apply_impl)(dirac_t *D, CPLX *restrict out, const CPLX *restrict in, const int *list,
                            int nlist)
{
    const geom_t *g = D->g;
    const FREAL *U = (const FREAL *)D->FIELD_U, *A = (const FREAL *)D->FIELD_A;
    halo_t *h = &D->HALO;
    for (int mu = 0; mu < 4; mu++) {
        int nf = g->nface[mu];
        if (!nf)
            continue;
        CPLX *lo = h->send[2 * mu], *hi = h->send[2 * mu + 1];
        const int *fl = g->face[mu][0], *fh = g->face[mu][1];
#pragma omp parallel for schedule(static)
        for (int i = 0; i < nf; i++) {
            V4 t[3], u[3];
            switch (mu) {
            case 0: SFX(vproj)(t, in + 12 * (size_t)fl[i], 0, -1); break;
            case 1: SFX(vproj)(t, in + 12 * (size_t)fl[i], 1, -1); break;
            case 2: SFX(vproj)(t, in + 12 * (size_t)fl[i], 2, -1); break;
            default: SFX(vproj)(t, in + 12 * (size_t)fl[i], 3, -1); break;
            }
            SFX(hst)(lo + 6 * i, t);
            switch (mu) {
            case 0: SFX(vproj)(t, in + 12 * (size_t)fh[i], 0, +1); break;
            case 1: SFX(vproj)(t, in + 12 * (size_t)fh[i], 1, +1); break;
            case 2: SFX(vproj)(t, in + 12 * (size_t)fh[i], 2, +1); break;
            default: SFX(vproj)(t, in + 12 * (size_t)fh[i], 3, +1); break;
            }
            SFX(vmul)(u, U + 72 * (size_t)fh[i] + 18 * mu, t, 1);
            SFX(hst)(hi + 6 * i, u);
        }
    }
    halo_start(g, h);
    const int *nb = g->nb;
    int V = g->V;
#pragma omp parallel
    {
        int x0, x1;
        if (list) {
            (void)lat_share(nlist, &x0, &x1, NULL);
            SFX(bsites)(out, in, U, A, nb, list + x0, x1 - x0, NULL, 0);
        } else
            SFX(sites_eo)(out, in, U, A, nb, g->Vh, V);
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
            V4 t[3], u[3], a01[3] = {{0}}, a23[3] = {{0}};
            int x = fh[i];
            SFX(hld)(t, rf + 6 * i);
            SFX(vmul)(u, U + 72 * (size_t)x + 18 * mu, t, 0);
            switch (mu) {
            case 0: SFX(vlift)(a01, a23, u, 0, -1); break;
            case 1: SFX(vlift)(a01, a23, u, 1, -1); break;
            case 2: SFX(vlift)(a01, a23, u, 2, -1); break;
            default: SFX(vlift)(a01, a23, u, 3, -1); break;
            }
            CPLX *o = out + 12 * (size_t)x;
            for (int c = 0; c < 3; c++) {
                SFX(st2)(o + c, o + 3 + c, SFX(ld2)(o + c, o + 3 + c) - (REAL)0.5 * a01[c]);
                SFX(st2)(o + 6 + c, o + 9 + c, SFX(ld2)(o + 6 + c, o + 9 + c) - (REAL)0.5 * a23[c]);
                a01[c] = a23[c] = (V4){0};
            }
            x = fl[i];
            SFX(hld)(t, rb + 6 * i);
            switch (mu) {
            case 0: SFX(vlift)(a01, a23, t, 0, +1); break;
            case 1: SFX(vlift)(a01, a23, t, 1, +1); break;
            case 2: SFX(vlift)(a01, a23, t, 2, +1); break;
            default: SFX(vlift)(a01, a23, t, 3, +1); break;
            }
            o = out + 12 * (size_t)x;
            for (int c = 0; c < 3; c++) {
                SFX(st2)(o + c, o + 3 + c, SFX(ld2)(o + c, o + 3 + c) - (REAL)0.5 * a01[c]);
                SFX(st2)(o + 6 + c, o + 9 + c, SFX(ld2)(o + 6 + c, o + 9 + c) - (REAL)0.5 * a23[c]);
            }
        }
    }
}

#undef VONE
