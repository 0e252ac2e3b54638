/* SPDX-License-Identifier: BSD-3-Clause */
/* Restriction and prolongation on the stored test vectors (WFIELD),
 * included twice by mg_interp.c: WT = float, and WT = lat_half (16-bit
 * storage, converted to single on load). Needs WT, WFIELD, WLOAD24, SFX. */

static LAT_FAST void SFX(restrict_sites)(const mg_t *M, double *acc, const cplxf *v, int x0, int x1)
{
    int N = M->N, k = M->k;
    size_t V12 = 12 * (size_t)M->g->V;
    for (int x = x0; x < x1; x++) {
        const float *xs = (const float *)(v + 12 * (size_t)x);
        double *a = acc + 2 * (size_t)k * M->blk[x];
        for (int j = 0; j < N; j++) {
            const WT *wsrc = (const WT *)WFIELD + 2 * ((size_t)j * V12 + 12 * (size_t)x);
            WLOAD24(w, wsrc);
            float r0 = 0, i0 = 0, r1 = 0, i1 = 0;
#pragma omp simd reduction(+ : r0, i0, r1, i1)
            for (int q = 0; q < 6; q++) {
                r0 += w[2 * q] * xs[2 * q] + w[2 * q + 1] * xs[2 * q + 1];
                i0 += w[2 * q] * xs[2 * q + 1] - w[2 * q + 1] * xs[2 * q];
                r1 += w[12 + 2 * q] * xs[12 + 2 * q] + w[13 + 2 * q] * xs[13 + 2 * q];
                i1 += w[12 + 2 * q] * xs[13 + 2 * q] - w[13 + 2 * q] * xs[12 + 2 * q];
            }
            a[2 * j] += r0;
            a[2 * j + 1] += i0;
            a[2 * (N + j)] += r1;
            a[2 * (N + j) + 1] += i1;
        }
    }
}

static LAT_FAST void SFX(prolong_sites)(const mg_t *M, cplxf *v, const cplxf *vc, int x0, int x1)
{
    int N = M->N, k = M->k;
    size_t V12 = 12 * (size_t)M->g->V;
    for (int x = x0; x < x1; x++) {
        const float *cv = (const float *)(vc + (size_t)M->blk[x] * k);
        float acc[24] = {0};
        for (int j = 0; j < N; j++) {
            const WT *wsrc = (const WT *)WFIELD + 2 * ((size_t)j * V12 + 12 * (size_t)x);
            WLOAD24(w, wsrc);
            float c0r = cv[2 * j], c0i = cv[2 * j + 1], c1r = cv[2 * (N + j)], c1i = cv[2 * (N + j) + 1];
#pragma omp simd
            for (int a = 0; a < 12; a++) {
                float cr = a < 6 ? c0r : c1r, ci = a < 6 ? c0i : c1i;
                acc[2 * a] += w[2 * a] * cr - w[2 * a + 1] * ci;
                acc[2 * a + 1] += w[2 * a] * ci + w[2 * a + 1] * cr;
            }
        }
        memcpy(v + 12 * (size_t)x, acc, sizeof acc);
    }
}
