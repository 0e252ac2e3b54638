/* SPDX-License-Identifier: BSD-3-Clause */
/* A coarse level's operator on its stored blocks (DCFIELD), included twice
 * by mg_coarse.c: WT = float, and WT = lat_half (16-bit storage, converted
 * to single row by row). Needs WT, DCFIELD, ROWLOAD, SFX. */

/* Each row is two plain dot products of 2k floats against the neighbour's
 * vector rewritten as xn = (xr, -xi, ...) and xs = (xi, xr, ...): re = row .
 * xn, im = row . xs. Two rows at a time, in 8-float vectors summed once per
 * row pair: four independent FMA chains, each x load used twice. The
 * complex loop on interleaved (re, im) pairs it replaces shuffled every
 * element and reduced after every block; it was 26% of a three-level run
 * on 16^4 (k = 40). */
static LAT_FAST void SFX(coarse_sites)(const mgl_t *L, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1)
{
    const geom_t *cg = L->g;
    int k = L->k, n2 = 2 * k, nv = n2 / 8 * 8;
    size_t kk = (size_t)k * k;
    float xn[9][2 * LAT_KMAX], xs[9][2 * LAT_KMAX];
    for (int c = c0; c < c1; c++) {
        for (int d = d0; d < d1; d++) {
            int y = d ? cg->nb[8 * c + d - 1] : c;
            const float *x = (const float *)(y >= 0 ? in + (size_t)y * k
                                                    : (const cplxf *)L->hc.recv[d - 1] + (size_t)(-y - 1) * k);
            for (int j = 0; j < k; j++) {
                xn[d][2 * j] = x[2 * j];
                xn[d][2 * j + 1] = -x[2 * j + 1];
                xs[d][2 * j] = x[2 * j + 1];
                xs[d][2 * j + 1] = x[2 * j];
            }
        }
        const WT *Dc = (const WT *)DCFIELD + 2 * ((size_t)c * 9 * kk);
        float *o = (float *)(out + (size_t)c * k);
        for (int i = 0; i < k; i += 2) { /* k = 2 x test vectors: even */
            lat_v8f r0 = {0}, i0 = {0}, r1 = {0}, i1 = {0};
            float t[4] = {0, 0, 0, 0};
            for (int d = d0; d < d1; d++) {
                const float *a = xn[d], *b = xs[d];
                ROWLOAD(w0, Dc + 2 * ((size_t)d * kk + (size_t)i * k), n2);
                ROWLOAD(w1, Dc + 2 * ((size_t)d * kk + (size_t)(i + 1) * k), n2);
                for (int j = 0; j < nv; j += 8) {
                    lat_v8f va = *(const lat_v8f *)(a + j), vb = *(const lat_v8f *)(b + j);
                    lat_v8f u0 = *(const lat_v8f *)(w0 + j), u1 = *(const lat_v8f *)(w1 + j);
                    r0 += u0 * va;
                    i0 += u0 * vb;
                    r1 += u1 * va;
                    i1 += u1 * vb;
                }
                for (int j = nv; j < n2; j++) {
                    t[0] += w0[j] * a[j];
                    t[1] += w0[j] * b[j];
                    t[2] += w1[j] * a[j];
                    t[3] += w1[j] * b[j];
                }
            }
            for (int l = 0; l < 8; l++) {
                t[0] += r0[l];
                t[1] += i0[l];
                t[2] += r1[l];
                t[3] += i1[l];
            }
            for (int l = 0; l < 4; l++)
                o[2 * i + l] = t[l];
        }
    }
}
