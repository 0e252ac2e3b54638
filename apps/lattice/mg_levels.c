/* SPDX-License-Identifier: BSD-3-Clause */
/* Coarse levels below the first (DD-alphaAMG's multilevel K-cycle):
 *  - level l+1's sites are aggregates of `level l+1 block` sites of level l;
 *    its dof are the level-l test vectors split by the level's spin halves
 *    (the first k/2 dof of a level carry Gamma5 = +1, the rest -1), so
 *    Gamma5 stays diagonal on every level;
 *  - test vectors: the restrictions of the level above's raw test vectors
 *    (near-kernel vectors of D_l as well), random ones beyond those, then
 *    `coarse setup` inverse-iteration steps with the level's solver (at
 *    least 2 for the random ones);
 *  - D_{l+1} = P^H D_l P assembled from D_l's 9 blocks per site;
 *  - on every level but the coarsest, the coarse correction is an FGMRES on
 *    D_l (K-cycle) preconditioned by: restrict, solve on level l+1, prolong,
 *    `coarse smooth` GMRES steps on D_l. */
#include "lattice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation: each level through its own call site, so that an
 * allocation-site profiler tells level 3's operator from level 2's ---- */
static inline __attribute__((always_inline)) void *by_tag(int tag, size_t b)
{
    switch (tag) {
    case TAG_TESTVEC:
        return lat_alloc_testvec(b);
    case TAG_COARSE:
        return lat_alloc_coarse(b);
    case TAG_KRYLOV:
        return lat_alloc_krylov(b);
    default:
        return lat_alloc_vectors(b);
    }
}
/* the empty asm keeps the call from becoming a tail jump (which would drop
 * the level's frame from the call stack) */
#define LEVEL_ALLOC(l)                                                                                   \
    static __attribute__((noinline)) void *level##l##_alloc(int tag, size_t b)                           \
    {                                                                                                    \
        void *p = by_tag(tag, b);                                                                        \
        __asm__ volatile("" ::: "memory");                                                               \
        return p;                                                                                        \
    }
LEVEL_ALLOC(2)
LEVEL_ALLOC(3)
LEVEL_ALLOC(4)

void *lvl_alloc(const mgl_t *L, int tag, size_t b)
{
    return L->level == 2 ? level2_alloc(tag, b) : L->level == 3 ? level3_alloc(tag, b) : level4_alloc(tag, b);
}

/* every level's aggregates divide the level above's local lattice, and its
 * test vectors fit the aggregate: P's columns for one spin half are
 * orthonormal only if there are no more of them than the aggregate's dof */
int lvl_check(const params_t *p, const int l[4], char *err, size_t n)
{
    static const char dn[] = "xyzt";
    int cur[4], nabove = p->ntv;
    for (int m = 0; m < 4; m++)
        cur[m] = l[m] / p->block[m];
    for (int lev = 3; lev <= p->levels; lev++) {
        const int *b = p->lblock[lev];
        for (int m = 0; m < 4; m++) {
            if (cur[m] % b[m]) {
                snprintf(err, n, "local level-%d lattice dimension %c=%d not divisible by 'level %d block' %d",
                         lev - 1, dn[m], cur[m], lev, b[m]);
                return -1;
            }
            cur[m] /= b[m];
        }
        int dof = b[0] * b[1] * b[2] * b[3] * nabove;
        if (p->lntv[lev] > dof) {
            snprintf(err, n, "'level %d test vectors' %d exceeds the %d dof per spin half of a level-%d aggregate",
                     lev, p->lntv[lev], dof, lev - 1);
            return -1;
        }
        nabove = p->lntv[lev];
    }
    return 0;
}

/* ---- creation ---- */
static geom_t *next_geom(const mgl_t *L, int level)
{
    params_t q = L->prm;
    for (int m = 0; m < 4; m++) {
        q.L[m] = L->g->L[m] / L->prm.lblock[level][m];
        q.grid[m] = L->g->grid[m];
        q.block[m] = 1;
    }
    q.nocheck = 1;
    char err[256];
    geom_t *cg = malloc(sizeof *cg);
    if (geom_init(cg, &q, L->g->comm, err, sizeof err)) {
        fprintf(stderr, "hm-lattice: level-%d geometry: %s\n", level, err);
        MPI_Abort(L->g->comm, 2);
    }
    return cg;
}

/* aggregates of L's sites forming C's sites */
static void aggregate(mgl_t *L, const mgl_t *C)
{
    const geom_t *g = L->g, *cg = C->g;
    const int *bl = L->prm.lblock[C->level];
    L->nblk = cg->V;
    L->bsites = bl[0] * bl[1] * bl[2] * bl[3];
    L->bsite = malloc(sizeof(int) * (size_t)L->nblk * L->bsites);
    L->blk = malloc(sizeof(int) * (size_t)g->V);
    int *fill = calloc((size_t)L->nblk, sizeof(int));
    for (int x = 0; x < g->V; x++) {
        int bc[4];
        for (int m = 0; m < 4; m++)
            bc[m] = g->lc[4 * x + m] / bl[m];
        int c = cg->lex2eo[lex_local(cg, bc)];
        L->blk[x] = c;
        L->bsite[(size_t)c * L->bsites + fill[c]++] = x;
    }
    free(fill);
}

/* Krylov spaces: the coarsest GMRES (odd-even when possible), or the
 * K-cycle's FGMRES and the smoother's GMRES */
static void lvl_alloc_krylov(mgl_t *L, int coarsest)
{
    const params_t *p = &L->prm;
    size_t nc = (size_t)L->k * L->g->V, kk = (size_t)L->k * L->k;
    int m = coarsest ? p->coarse_restart : p->kc_restart, ms = p->coarse_smooth;
    L->cb = lvl_alloc(L, TAG_KRYLOV, sizeof(cplxf) * nc * (size_t)(m + 2));
    L->cH = lvl_alloc(L, TAG_KRYLOV, sizeof(cplx) * (size_t)((m + 1) * m + 4 * m + 4));
    if (!coarsest) {
        L->kZ = lvl_alloc(L, TAG_KRYLOV, sizeof(cplxf) * nc * (size_t)m);
        L->sb = lvl_alloc(L, TAG_KRYLOV, sizeof(cplxf) * nc * (size_t)(ms + 2));
        L->sZ = lvl_alloc(L, TAG_KRYLOV, sizeof(cplxf) * nc * (size_t)(ms + 1));
        L->Jinv = lvl_alloc(L, TAG_COARSE, sizeof(cplxf) * kk * (size_t)L->g->V);
        L->sH = lvl_alloc(L, TAG_KRYLOV, sizeof(cplx) * (size_t)((ms + 1) * ms + 4 * ms + 4));
        return;
    }
    if (lvl_direct_wanted(L))
        return; /* lvl_direct_factor allocates on the first assembly */
    L->coe = p->coarse_oddeven && lvl_oe_possible(L);
    if (p->coarse_oddeven && !L->coe && L->g->rank == 0)
        fprintf(stderr, "hm-lattice: note: level %d is %dx%dx%dx%d, an odd dimension: its GMRES runs on D_c, "
                "not on the odd-even reduced system (slower)\n", L->level, L->g->L[0], L->g->L[1], L->g->L[2],
                L->g->L[3]);
    if (L->coe) {
        L->Dinv = lvl_alloc(L, TAG_COARSE, sizeof(cplxf) * kk * (size_t)L->g->Vh);
        L->oe1 = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * nc);
        L->oe2 = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * nc);
        L->oe3 = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * nc);
    }
}

mgl_t *lvl_create(const geom_t *g, const params_t *p, int level, int half)
{
    mgl_t *L = calloc(1, sizeof *L);
    L->level = level;
    L->g = g;
    L->prm = *p;
    L->k = 2 * (level == 2 ? p->ntv : p->lntv[level]);
    L->half = half && level == 2; /* the levels below are small: single */
    size_t nc = (size_t)L->k * g->V, kk = (size_t)L->k * L->k;
    if (L->half)
        L->Dch = lvl_alloc(L, TAG_COARSE, sizeof(lat_half) * 2 * 9 * kk * (size_t)g->V);
    else
        L->Dc = lvl_alloc(L, TAG_COARSE, sizeof(cplxf) * 9 * kk * (size_t)g->V);
    halo_alloc(g, &L->hc, sizeof(cplxf) * (size_t)L->k);
    int coarsest = level >= p->levels;
    lvl_alloc_krylov(L, coarsest);
    if (coarsest)
        return L;
    geom_t *cg = next_geom(L, level + 1);
    L->next = lvl_create(cg, p, level + 1, 0);
    L->next->gown = cg;
    aggregate(L, L->next);
    L->N = p->lntv[level + 1];
    L->TV = lvl_alloc(L, TAG_TESTVEC, sizeof(cplxf) * nc * (size_t)L->N);
    L->W = lvl_alloc(L, TAG_TESTVEC, sizeof(cplxf) * nc * (size_t)L->N);
    L->r = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * nc);
    size_t ncc = (size_t)L->next->k * cg->V;
    L->rc = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * ncc);
    L->ec = lvl_alloc(L, TAG_VECTORS, sizeof(cplxf) * ncc);
    halo_alloc(g, &L->hw, sizeof(cplxf) * (size_t)L->k * (size_t)L->N);
    return L;
}

void lvl_free(mgl_t *L)
{
    if (!L)
        return;
    lvl_free(L->next);
    lvl_direct_free(L);
    lat_free(L->Dc), lat_free(L->Dch), lat_free(L->cb), lat_free(L->cH);
    lat_free(L->kZ), lat_free(L->sb), lat_free(L->sZ), lat_free(L->sH), lat_free(L->Jinv);
    lat_free(L->Dinv), lat_free(L->oe1), lat_free(L->oe2), lat_free(L->oe3);
    lat_free(L->TV), lat_free(L->W), lat_free(L->r), lat_free(L->rc), lat_free(L->ec);
    free(L->bsite), free(L->blk);
    halo_free(&L->hc);
    if (L->next)
        halo_free(&L->hw);
    if (L->gown) {
        geom_free(L->gown);
        free(L->gown);
    }
    free(L);
}

/* ---- interpolation between level L and L->next ---- */
/* vc = P^H v: per next-level site and spin half h, the test vectors'
 * products with v over the aggregate's dof of half h */
void lvl_restrict(mgl_t *L, cplxf *vc, const cplxf *v)
{
    int k = L->k, hk = k / 2, N = L->N;
    size_t n = (size_t)k * L->g->V;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < L->nblk; c++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < N; j++) {
                cplx s = 0;
                for (int q = 0; q < L->bsites; q++) {
                    size_t o = (size_t)L->bsite[(size_t)c * L->bsites + q] * k + (size_t)h * hk;
                    const cplxf *w = L->W + (size_t)j * n + o, *x = v + o;
                    for (int a = 0; a < hk; a++)
                        s += conjf(w[a]) * x[a];
                }
                vc[(size_t)c * 2 * N + (size_t)h * N + j] = (cplxf)s;
            }
}

/* v = P vc */
void lvl_prolong(mgl_t *L, cplxf *v, const cplxf *vc)
{
    int k = L->k, hk = k / 2, N = L->N;
    size_t n = (size_t)k * L->g->V;
#pragma omp parallel for schedule(static)
    for (int x = 0; x < L->g->V; x++) {
        const cplxf *cv = vc + (size_t)L->blk[x] * 2 * N;
        cplxf *o = v + (size_t)x * k;
        memset(o, 0, sizeof(cplxf) * (size_t)k);
        for (int j = 0; j < N; j++) {
            const cplxf *w = L->W + (size_t)j * n + (size_t)x * k;
            for (int a = 0; a < k; a++)
                o[a] += w[a] * cv[(a / hk) * N + j];
        }
    }
}

/* P: the raw test vectors Gram-Schmidt-orthonormalised (twice, in double)
 * per aggregate and spin half, so P^H P = I */
static void lvl_orth(mgl_t *L)
{
    int k = L->k, hk = k / 2, N = L->N, ns = L->bsites;
    size_t n = (size_t)k * L->g->V;
    memcpy(L->W, L->TV, sizeof(cplxf) * n * (size_t)N);
#pragma omp parallel for schedule(dynamic)
    for (int c = 0; c < L->nblk; c++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < N; j++) {
                const int *s = L->bsite + (size_t)c * ns;
                cplxf *wj = L->W + (size_t)j * n;
                for (int pass = 0; pass < 2; pass++)
                    for (int i = 0; i < j; i++) {
                        const cplxf *wi = L->W + (size_t)i * n;
                        cplx d = 0;
                        for (int q = 0; q < ns; q++)
                            for (int a = h * hk; a < (h + 1) * hk; a++)
                                d += conjf(wi[(size_t)s[q] * k + a]) * wj[(size_t)s[q] * k + a];
                        for (int q = 0; q < ns; q++)
                            for (int a = h * hk; a < (h + 1) * hk; a++)
                                wj[(size_t)s[q] * k + a] -= (cplxf)d * wi[(size_t)s[q] * k + a];
                    }
                double nn = 0;
                for (int q = 0; q < ns; q++)
                    for (int a = h * hk; a < (h + 1) * hk; a++)
                        nn += crealf(wj[(size_t)s[q] * k + a] * conjf(wj[(size_t)s[q] * k + a]));
                float inv = nn > 0 ? (float)(1 / sqrt(nn)) : 0;
                for (int q = 0; q < ns; q++)
                    for (int a = h * hk; a < (h + 1) * hk; a++)
                        wj[(size_t)s[q] * k + a] *= inv;
            }
}

/* ---- Galerkin product D_{l+1} = P^H D_l P ---- */
/* block d (0 self, 1..8) of D_L at site x in single, whatever the storage */
static const cplxf *dblock(const mgl_t *L, int x, int d, cplxf *buf)
{
    size_t kk = (size_t)L->k * L->k, o = ((size_t)x * 9 + (size_t)d) * kk;
#ifdef LAT_HAVE_HALF
    if (L->half) {
        for (size_t i = 0; i < kk; i++)
            buf[i] = (float)L->Dch[2 * (o + i)] + I * (float)L->Dch[2 * (o + i) + 1];
        return buf;
    }
#endif
    (void)buf;
    return L->Dc + o;
}

/* the test vectors on L's face sites to the neighbour ranks (all 8
 * directions: D_L keeps both hops of a site with the site) */
static void w_halo(mgl_t *L)
{
    const geom_t *g = L->g;
    int k = L->k, N = L->N;
    size_t n = (size_t)k * g->V;
    for (int mu = 0; mu < 4; mu++) {
        if (!g->nface[mu])
            continue;
        for (int s = 0; s < 2; s++) {
            cplxf *o = L->hw.send[2 * mu + s];
            for (int i = 0; i < g->nface[mu]; i++)
                for (int j = 0; j < N; j++)
                    memcpy(o + ((size_t)i * N + j) * k, L->W + (size_t)j * n + (size_t)g->face[mu][s][i] * k,
                           sizeof(cplxf) * (size_t)k);
        }
    }
    halo_start(g, &L->hw);
    halo_wait(&L->hw);
}

/* test vector j at L's site y reached from a local site in direction d
 * (0: y local or the site itself) */
static const cplxf *w_at(const mgl_t *L, int y, int d, int j)
{
    size_t n = (size_t)L->k * L->g->V;
    if (y >= 0)
        return L->W + (size_t)j * n + (size_t)y * L->k;
    return (const cplxf *)L->hw.recv[d] + ((size_t)(-y - 1) * L->N + j) * L->k;
}

/* acc (k2 x k2, double) += W_x^H B W_y for one block B of D_L, using the
 * spin-half structure of W (column h*N + j lives on the dof of half h) */
static void galerkin_acc(const mgl_t *L, cplx *acc, const cplxf *B, int x, int y, int d, cplx *T)
{
    int k = L->k, hk = k / 2, N = L->N, k2 = 2 * N;
    for (int col = 0; col < k2; col++) {
        const cplxf *wy = w_at(L, y, d, col % N) + (col / N) * hk;
        for (int i = 0; i < k; i++) {
            const cplxf *b = B + (size_t)i * k + (col / N) * hk;
            cplx s = 0;
            for (int a = 0; a < hk; a++)
                s += b[a] * wy[a];
            T[(size_t)i * k2 + col] = s;
        }
    }
    for (int r = 0; r < k2; r++) {
        const cplxf *wx = w_at(L, x, 0, r % N) + (r / N) * hk;
        const cplx *t = T + (size_t)(r / N) * hk * k2;
        for (int a = 0; a < hk; a++) {
            cplx cw = conj((cplx)wx[a]);
            for (int col = 0; col < k2; col++)
                acc[(size_t)r * k2 + col] += cw * t[(size_t)a * k2 + col];
        }
    }
}

/* the 9 blocks of next-level site c: a hop that stays inside the aggregate
 * adds to the self block, one that leaves it to the block of its direction */
static void galerkin_site(mgl_t *L, int c, cplx *acc, cplx *T, cplxf *buf)
{
    const geom_t *g = L->g;
    int k2 = L->next->k;
    size_t kk2 = (size_t)k2 * k2;
    memset(acc, 0, sizeof(cplx) * 9 * kk2);
    for (int q = 0; q < L->bsites; q++) {
        int x = L->bsite[(size_t)c * L->bsites + q];
        for (int d = 0; d < 9; d++) {
            int y = d ? g->nb[8 * x + d - 1] : x;
            int t = d == 0 || (y >= 0 && L->blk[y] == c) ? 0 : d;
            galerkin_acc(L, acc + (size_t)t * kk2, dblock(L, x, d, buf), x, y, d ? d - 1 : 0, T);
        }
    }
    cplxf *out = L->next->Dc + (size_t)c * 9 * kk2;
    for (size_t i = 0; i < 9 * kk2; i++)
        out[i] = (cplxf)acc[i];
}

static void lvl_assemble(mgl_t *L)
{
    int k = L->k, k2 = L->next->k;
    w_halo(L);
#pragma omp parallel
    {
        cplx *acc = malloc(sizeof(cplx) * 9 * (size_t)k2 * k2), *T = malloc(sizeof(cplx) * (size_t)k * k2);
        cplxf *buf = malloc(sizeof(cplxf) * (size_t)k * k);
#pragma omp for schedule(dynamic)
        for (int c = 0; c < L->nblk; c++)
            galerkin_site(L, c, acc, T, buf);
        free(acc), free(T), free(buf);
    }
}

static int lvl_kcycle(mgl_t *L, cplxf *x, const cplxf *b, int maxit);

/* ---- setup of the levels below L ---- */
/* test vectors nsrc .. N-1 random (keyed by global site, so independent of
 * the decomposition), then inverse iteration: v <- (approx. D_L^-1 v) / |.|.
 * On 16^4 (m0 = -0.55, 20 + 16 test vectors) one K-cycle step on the
 * restricted vectors gave the same outer and level-2 iterations (19, 90)
 * as none (19, 92) at 1-4 s per setup pass, so the default is none. At
 * lighter masses one step pays: m0 -0.76 (beta 5.7), 42 outer iterations
 * against 168. Each step after the first pass is the K-cycle capped at
 * `coarse setup iterations`: 3 gave 35 outer iterations at m0 -0.73 as 10
 * did, with 5.5 s less setup (2 gave 36, 1 gave 114). */
static void lvl_testvectors(mgl_t *L, int nsrc, int first)
{
    const geom_t *g = L->g;
    int k = L->k;
    long n = (long)k * g->V;
    for (int j = nsrc; j < L->N; j++)
        for (int x = 0; x < g->V; x++) {
            rng_t r;
            rng_seed(&r, L->prm.seed, g->gidx[x], 9000 + 100 * (uint64_t)L->level + (uint64_t)j);
            for (int a = 0; a < k; a++)
                L->TV[(size_t)j * n + (size_t)x * k + a] = (float)rng_gauss(&r) + I * (float)rng_gauss(&r);
        }
    kry_t K = {L->cb, NULL, L->cH, L->prm.kc_restart};
    for (int j = 0; j < L->N; j++) {
        int steps = L->prm.coarse_setup;
        if (j >= nsrc && steps < 2) /* random vectors need smoothing, restricted ones are smooth */
            steps = 2;
        cplxf *v = L->TV + (size_t)j * n;
        for (int s = 0; s < steps; s++) {
            /* before the level below exists: plain GMRES steps; after it,
             * the K-cycle (the coarse levels' own bootstrap) */
            if (first)
                lvl_gmres(L, &K, L->r, v, n, 0, L->prm.kc_restart, 0, lvl_apply, NULL);
            else
                lvl_kcycle(L, L->r, v, L->prm.coarse_setup_it);
            double nn = sqrt(vnorm2_f(g, L->r, n));
            for (long i = 0; i < n; i++)
                v[i] = L->r[i] / (float)nn;
        }
    }
}

void lvl_prepare(mgl_t *L)
{
    if (L->coe)
        lvl_invert_even(L);
    if (L->next)
        lvl_invert_self(L, L->Jinv, L->g->V);
    else if (lvl_direct_wanted(L))
        lvl_direct_factor(L);
}

void lvl_build(mgl_t *L, int nsrc)
{
    mgl_t *C = L->next;
    double t0 = wtime();
    lvl_testvectors(L, nsrc, !L->built);
    double t1 = wtime();
    lvl_orth(L);
    lvl_assemble(L);
    if (getenv("HM_LATTICE_VERBOSE") && L->g->rank == 0)
        fprintf(stderr, "setup: level %d test vectors %.3f s, P and D_%d %.3f s\n", L->level, t1 - t0, C->level,
                wtime() - t1);
    lvl_prepare(C);
    if (C->next) {
        int ns = C->N < L->N ? C->N : L->N;
        size_t n = (size_t)L->k * L->g->V, nn = (size_t)C->k * C->g->V;
        for (int j = 0; j < ns; j++)
            lvl_restrict(L, C->TV + (size_t)j * nn, L->TV + (size_t)j * n);
        lvl_build(C, ns);
    }
    L->built = 1;
}

/* ---- K-cycle ---- */
/* the K-cycle's preconditioner on level L: restrict, solve on the next
 * level, prolong, then smoothing from that guess: FGMRES steps on D_L
 * preconditioned by the inverse self blocks (a site's k x k block holds
 * the couplings inside its aggregate, the largest part of D_L) */
static void lvl_cycle(mgl_t *L, cplxf *x, const cplxf *r)
{
    mgl_t *C = L->next;
    lvl_restrict(L, L->rc, r);
    C->iters += lvl_solve(C, L->ec, L->rc);
    lvl_prolong(L, x, L->ec);
    int ms = L->prm.coarse_smooth;
    if (ms) {
        kry_t S = {L->sb, L->sZ, L->sH, ms};
        lvl_gmres(L, &S, x, r, (long)L->k * L->g->V, 0, ms, 1, lvl_apply, lvl_jacobi);
    }
}

/* the K-cycle's FGMRES on L (not the coarsest) to kc_tol, at most maxit
 * iterations */
static int lvl_kcycle(mgl_t *L, cplxf *x, const cplxf *b, int maxit)
{
    kry_t K = {L->cb, L->kZ, L->cH, L->prm.kc_restart};
    return lvl_gmres(L, &K, x, b, (long)L->k * L->g->V, L->prm.kc_tol, maxit, 0, lvl_apply, lvl_cycle);
}

int lvl_solve(mgl_t *L, cplxf *x, const cplxf *b)
{
    if (!L->next)
        return lvl_coarsest_solve(L, x, b);
    return lvl_kcycle(L, x, b, L->prm.kc_maxit);
}
