/* SPDX-License-Identifier: BSD-3-Clause */
/* Multigrid kernels on the stored test vectors (WFIELD) and coarse operator
 * (DCFIELD), included twice by mg.c: WT = float, and WT = lat_half (16-bit
 * storage, converted to single on load). Needs WT, WFIELD, DCFIELD, SFX. */

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

static LAT_FAST void SFX(coarse_sites)(const mg_t *M, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1)
{
    const geom_t *cg = &M->cg;
    int k = M->k;
    size_t kk = (size_t)k * k;
    for (int c = c0; c < c1; c++) {
        const float *v[9];
        v[0] = (const float *)(in + (size_t)c * k);
        for (int d = 0; d < 8; d++) {
            int y = cg->nb[8 * c + d];
            v[1 + d] = (const float *)(y >= 0 ? in + (size_t)y * k
                                               : (const cplxf *)M->hc.recv[d] + (size_t)(-y - 1) * k);
        }
        const WT *Dc = (const WT *)DCFIELD + 2 * ((size_t)c * 9 * kk);
        float *o = (float *)(out + (size_t)c * k);
        for (int i = 0; i < k; i++) {
            float sr = 0, si = 0;
            for (int d = d0; d < d1; d++) {
                const float *x = v[d];
                ROWLOAD(row, Dc + 2 * ((size_t)d * kk + (size_t)i * k), 2 * k);
#pragma omp simd reduction(+ : sr, si)
                for (int j = 0; j < k; j++) {
                    float ar = row[2 * j], ai = row[2 * j + 1], xr = x[2 * j], xi = x[2 * j + 1];
                    sr += ar * xr - ai * xi;
                    si += ar * xi + ai * xr;
                }
            }
            o[2 * i] = sr;
            o[2 * i + 1] = si;
        }
    }
}

