/* SPDX-License-Identifier: BSD-3-Clause */
/* A coarse level's operator on its stored blocks (DCFIELD), included twice
 * by mg_coarse.c: WT = float, and WT = lat_half (16-bit storage, converted
 * to single row by row). Needs WT, DCFIELD, ROWLOAD, SFX. */

static LAT_FAST void SFX(coarse_sites)(const mgl_t *L, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1)
{
    const geom_t *cg = L->g;
    int k = L->k;
    size_t kk = (size_t)k * k;
    for (int c = c0; c < c1; c++) {
        const float *v[9];
        v[0] = (const float *)(in + (size_t)c * k);
        for (int d = 0; d < 8; d++) {
            int y = cg->nb[8 * c + d];
            v[1 + d] = (const float *)(y >= 0 ? in + (size_t)y * k
                                               : (const cplxf *)L->hc.recv[d] + (size_t)(-y - 1) * k);
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

