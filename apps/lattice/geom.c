/* SPDX-License-Identifier: BSD-3-Clause */
/* 4D domain decomposition, explicit rank-to-lattice mapping, even-odd site
 * order, neighbour tables and halo exchange (non-blocking MPI). */
#include "lattice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double wtime(void) { return MPI_Wtime(); }

static int hm__lex(const int *x, const int *d) { return x[0] + d[0] * (x[1] + d[1] * (x[2] + d[2] * x[3])); }
static void hm__unlex(int i, const int *d, int *x)
{
    for (int m = 0; m < 4; m++) {
        x[m] = i % d[m];
        i /= d[m];
    }
}

static int hm__auto_grid(const params_t *p, int size, int *grid)
{
    for (int m = 0; m < 4; m++)
        grid[m] = 1;
    int s = size;
    for (int f = 2; s > 1;) {
        if (s % f) {
            f++;
            continue;
        }
        int best = -1;
        for (int m = 3; m >= 0; m--) {
            int l = p->L[m] / grid[m];
            if (l % f == 0 && (l / f) % 2 == 0 && (best < 0 || l > p->L[best] / grid[best]))
                best = m;
        }
        if (best < 0)
            return -1;
        grid[best] *= f;
        s /= f;
    }
    return 0;
}

/* node-blocked: ranks_per_node consecutive ranks fill a block of the grid
 * (factors given to the longest remaining dimension first) */
static int hm__map_node_blocked(const params_t *p, int size, int (*coords)[4], char *err, size_t n)
{
    const int *grid = p->grid;
    int R = p->ranks_per_node, bd[4] = {1, 1, 1, 1}, s = R;
    if (size % R) {
        snprintf(err, n, "ranks per node %d does not divide %d ranks", R, size);
        return -1;
    }
    for (int f = 2; s > 1;) {
        if (s % f) {
            f++;
            continue;
        }
        int best = -1;
        for (int m = 0; m < 4; m++)
            if ((grid[m] / bd[m]) % f == 0 && (best < 0 || grid[m] / bd[m] > grid[best] / bd[best]))
                best = m;
        if (best < 0) {
            snprintf(err, n, "ranks per node %d does not tile process grid %dx%dx%dx%d", R, grid[0], grid[1],
                     grid[2], grid[3]);
            return -1;
        }
        bd[best] *= f;
        s /= f;
    }
    int ng[4];
    for (int m = 0; m < 4; m++)
        ng[m] = grid[m] / bd[m];
    for (int r = 0; r < size; r++) {
        int nc[4], bc[4];
        hm__unlex(r / R, ng, nc);
        hm__unlex(r % R, bd, bc);
        for (int m = 0; m < 4; m++)
            coords[r][m] = nc[m] * bd[m] + bc[m];
    }
    return 0;
}

/* file: lines "rank x y z t" (process-grid coordinates), every rank once;
 * '#' starts a comment */
static int hm__map_file(const params_t *p, int size, int (*coords)[4], char *err, size_t n)
{
    FILE *f = fopen(p->mapfile, "r");
    if (!f) {
        snprintf(err, n, "cannot open mapping file '%s'", p->mapfile);
        return -1;
    }
    int *seen = calloc((size_t)size, sizeof(int)), r, c[4], cnt = 0, rc = 0;
    char line[256];
    while (!rc && fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        int got = sscanf(line, "%d %d %d %d %d", &r, &c[0], &c[1], &c[2], &c[3]);
        if (got <= 0)
            continue;
        int ok = got == 5 && r >= 0 && r < size && !seen[r];
        for (int m = 0; m < 4; m++)
            ok = ok && c[m] >= 0 && c[m] < p->grid[m];
        if (!ok) {
            snprintf(err, n, "mapping file '%s': bad or repeated line for rank %d", p->mapfile, r);
            rc = -1;
            break;
        }
        seen[r] = 1;
        memcpy(coords[r], c, sizeof c);
        cnt++;
    }
    fclose(f);
    free(seen);
    if (!rc && cnt != size) {
        snprintf(err, n, "mapping file '%s' names %d of %d ranks", p->mapfile, cnt, size);
        rc = -1;
    }
    return rc;
}

/* every grid position exactly once */
static int hm__map_unique(const int *grid, int size, int (*coords)[4], char *err, size_t n)
{
    if (size < 1) {
        snprintf(err, n, "no ranks to map");
        return -1;
    }
    char *used = calloc((size_t)(unsigned)size, 1);
    if (!used) {
        snprintf(err, n, "out of memory mapping %d ranks", size);
        return -1;
    }
    int rc = 0;
    for (int r = 0; r < size && !rc; r++) {
        int i = hm__lex(coords[r], grid);
        if (used[i]) {
            snprintf(err, n, "mapping puts two ranks on grid position %d %d %d %d", coords[r][0], coords[r][1],
                     coords[r][2], coords[r][3]);
            rc = -1;
        }
        used[i] = 1;
    }
    free(used);
    return rc;
}

int geom_map(const params_t *p, int size, int (*coords)[4], char *err, size_t n)
{
    int rc = 0;
    if (!strcmp(p->mapping, "lexicographic"))
        for (int r = 0; r < size; r++)
            hm__unlex(r, p->grid, coords[r]);
    else if (!strcmp(p->mapping, "node-blocked"))
        rc = hm__map_node_blocked(p, size, coords, err, n);
    else
        rc = hm__map_file(p, size, coords, err, n);
    return rc ? rc : hm__map_unique(p->grid, size, coords, err, n);
}

/* the process grid (chosen when not given) in q->grid, matching the ranks */
static int hm__grid(geom_t *g, params_t *q, char *err, size_t n)
{
    if (!q->grid[0] && hm__auto_grid(q, g->size, q->grid)) {
        snprintf(err, n, "cannot split lattice %dx%dx%dx%d over %d ranks", q->L[0], q->L[1], q->L[2], q->L[3],
                 g->size);
        return -1;
    }
    int prod = 1;
    for (int m = 0; m < 4; m++) {
        prod *= q->grid[m];
        g->L[m] = q->L[m];
        g->grid[m] = q->grid[m];
    }
    if (prod != g->size) {
        snprintf(err, n, "process grid %dx%dx%dx%d needs %d ranks, have %d", q->grid[0], q->grid[1], q->grid[2],
                 q->grid[3], prod, g->size);
        return -1;
    }
    return 0;
}

/* the local dimensions, each checked against what the even-odd order,
 * the SAP blocks and their red-black colouring need (not on coarse
 * levels: q->nocheck) */
static int hm__local_dims(geom_t *g, const params_t *q, char *err, size_t n)
{
    static const char dn[] = "xyzt";
    for (int m = 0; m < 4; m++) {
        g->l[m] = q->L[m] / q->grid[m];
        if (q->nocheck)
            continue;
        if (q->L[m] % q->grid[m]) {
            snprintf(err, n, "lattice dimension %c=%d not divisible by process grid %d", dn[m], q->L[m],
                     q->grid[m]);
            return -1;
        }
        if (g->l[m] % 2) {
            snprintf(err, n, "local lattice dimension %c=%d must be even", dn[m], g->l[m]);
            return -1;
        }
        if (g->l[m] % q->block[m]) {
            snprintf(err, n, "local lattice dimension %c=%d not divisible by block size %d", dn[m], g->l[m],
                     q->block[m]);
            return -1;
        }
        if ((q->L[m] / q->block[m]) % 2) {
            snprintf(err, n, "lattice dimension %c=%d over block size %d gives an odd number of "
                     "blocks (red-black needs even)", dn[m], q->L[m], q->block[m]);
            return -1;
        }
    }
    return q->nocheck ? 0 : lvl_check(q, g->l, err, n);
}

/* this rank's grid position, origin and the ranks of its 8 neighbours */
static int hm__place_rank(geom_t *g, const params_t *q, char *err, size_t n)
{
    int(*coords)[4] = malloc(sizeof(int[4]) * (size_t)g->size);
    if (geom_map(q, g->size, coords, err, n)) {
        free(coords);
        return -1;
    }
    int *inv = malloc(sizeof(int) * (size_t)g->size);
    for (int r = 0; r < g->size; r++)
        inv[hm__lex(coords[r], g->grid)] = r;
    for (int m = 0; m < 4; m++) {
        g->coord[m] = coords[g->rank][m];
        g->origin[m] = g->coord[m] * g->l[m];
    }
    for (int m = 0; m < 4; m++) {
        int c[4];
        memcpy(c, g->coord, sizeof c);
        c[m] = (g->coord[m] + 1) % g->grid[m];
        g->nbr[m][0] = inv[hm__lex(c, g->grid)];
        c[m] = (g->coord[m] - 1 + g->grid[m]) % g->grid[m];
        g->nbr[m][1] = inv[hm__lex(c, g->grid)];
    }
    free(coords);
    free(inv);
    return 0;
}

/* global parity of local site x: the same as the local one on the fine
 * lattice (even local dimensions), and it keeps coarse levels with odd
 * local dimensions bipartite for their odd-even reduction */
static int hm__parity(const geom_t *g, const int x[4])
{
    return (g->origin[0] + x[0] + g->origin[1] + x[1] + g->origin[2] + x[2] + g->origin[3] + x[3]) & 1;
}

/* the sites in even-odd order: lex2eo, their coordinates and global index */
static void hm__order_sites(geom_t *g)
{
    int V = g->V = g->l[0] * g->l[1] * g->l[2] * g->l[3];
    g->Vh = 0;
    for (int i = 0; i < V; i++) {
        int x[4];
        hm__unlex(i, g->l, x);
        g->Vh += !hm__parity(g, x);
    }
    g->lex2eo = malloc(sizeof(int) * (size_t)V);
    g->lc = malloc(sizeof(int) * 4 * (size_t)V);
    g->gidx = malloc(sizeof(int64_t) * (size_t)V);
    int cnt[2] = {0, 0};
    for (int i = 0; i < V; i++) {
        int x[4];
        hm__unlex(i, g->l, x);
        int par = hm__parity(g, x);
        int e = par * g->Vh + cnt[par]++;
        g->lex2eo[i] = e;
        memcpy(g->lc + 4 * e, x, sizeof x);
        int64_t gi = 0;
        for (int m = 3; m >= 0; m--)
            gi = gi * g->L[m] + g->origin[m] + x[m];
        g->gidx[e] = gi;
    }
}

/* site e's neighbours in direction m (nb: local, or -(1 + face index) in
 * the halo) and its place on the faces sent to other ranks */
static void hm__link_site(geom_t *g, int e, int m)
{
    const int *x = g->lc + 4 * e;
    int d[3], y[3], k = 0;
    for (int o = 0; o < 4; o++)
        if (o != m) {
            d[k] = g->l[o];
            y[k++] = x[o];
        }
    int fp = y[0] + d[0] * (y[1] + d[1] * y[2]);
    for (int s = 0; s < 2; s++) {
        int z[4];
        memcpy(z, x, sizeof z);
        z[m] += s ? -1 : 1;
        int out = z[m] < 0 || z[m] >= g->l[m];
        if (out && g->grid[m] > 1) {
            g->nb[8 * e + 2 * m + s] = -(1 + fp);
        } else {
            z[m] = (z[m] + g->l[m]) % g->l[m];
            g->nb[8 * e + 2 * m + s] = g->lex2eo[hm__lex(z, g->l)];
        }
    }
    if (g->nface[m]) {
        if (x[m] == 0)
            g->face[m][0][fp] = e;
        if (x[m] == g->l[m] - 1)
            g->face[m][1][fp] = e;
    }
}

/* neighbour table, halo faces and the extended-lattice index of each site */
static void hm__link_sites(geom_t *g)
{
    int V = g->V;
    for (int m = 0; m < 4; m++) {
        g->nface[m] = g->grid[m] > 1 ? V / g->l[m] : 0;
        if (g->nface[m]) {
            g->face[m][0] = malloc(sizeof(int) * (size_t)g->nface[m]);
            g->face[m][1] = malloc(sizeof(int) * (size_t)g->nface[m]);
        }
    }
    g->nb = malloc(sizeof(int) * 8 * (size_t)V);
    for (int e = 0; e < V; e++)
        for (int m = 0; m < 4; m++)
            hm__link_site(g, e, m);
    for (int m = 0; m < 4; m++)
        g->e[m] = g->l[m] + 2;
    g->Ve = g->e[0] * g->e[1] * g->e[2] * g->e[3];
    g->eo2ext = malloc(sizeof(int) * (size_t)V);
    for (int e = 0; e < V; e++)
        g->eo2ext[e] = ext_index(g, g->lc + 4 * e);
}

int geom_init(geom_t *g, const params_t *p, MPI_Comm comm, char *err, size_t n)
{
    memset(g, 0, sizeof *g);
    g->comm = comm;
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    params_t q = *p;
    if (hm__grid(g, &q, err, n) || hm__local_dims(g, &q, err, n) || hm__place_rank(g, &q, err, n))
        return -1;
    hm__order_sites(g);
    hm__link_sites(g);
    return 0;
}

void geom_free(geom_t *g)
{
    free(g->nb);
    free(g->lex2eo);
    free(g->lc);
    free(g->gidx);
    free(g->eo2ext);
    for (int m = 0; m < 4; m++)
        for (int s = 0; s < 2; s++)
            free(g->face[m][s]);
    memset(g, 0, sizeof *g);
}

int ext_index(const geom_t *g, const int x[4])
{
    int y[4] = {x[0] + 1, x[1] + 1, x[2] + 1, x[3] + 1};
    return hm__lex(y, g->e);
}

int lex_local(const geom_t *g, const int x[4]) { return hm__lex(x, g->l); }

void halo_alloc(const geom_t *g, halo_t *h, size_t bps)
{
    memset(h, 0, sizeof *h);
    for (int m = 0; m < 4; m++)
        for (int s = 0; s < 2; s++) {
            h->bytes[2 * m + s] = (size_t)g->nface[m] * bps;
            if (g->nface[m]) {
                h->send[2 * m + s] = lat_alloc_halo(h->bytes[2 * m + s]);
                h->recv[2 * m + s] = lat_alloc_halo(h->bytes[2 * m + s]);
            }
        }
}

void halo_free(halo_t *h)
{
    for (int d = 0; d < 8; d++) {
        lat_free(h->send[d]);
        lat_free(h->recv[d]);
    }
    memset(h, 0, sizeof *h);
}

void halo_start(const geom_t *g, halo_t *h)
{
    h->nreq = 0;
    for (int m = 0; m < 4; m++) {
        if (!g->nface[m])
            continue;
        int cnt = (int)h->bytes[2 * m];
        MPI_Irecv(h->recv[2 * m], cnt, MPI_BYTE, g->nbr[m][0], 2 * m, g->comm, &h->req[h->nreq++]);
        MPI_Irecv(h->recv[2 * m + 1], cnt, MPI_BYTE, g->nbr[m][1], 2 * m + 1, g->comm,
                  &h->req[h->nreq++]);
        MPI_Isend(h->send[2 * m], cnt, MPI_BYTE, g->nbr[m][1], 2 * m, g->comm, &h->req[h->nreq++]);
        MPI_Isend(h->send[2 * m + 1], cnt, MPI_BYTE, g->nbr[m][0], 2 * m + 1, g->comm,
                  &h->req[h->nreq++]);
    }
}

void halo_wait(halo_t *h)
{
    if (h->nreq)
        MPI_Waitall(h->nreq, h->req, MPI_STATUSES_IGNORE);
    h->nreq = 0;
}

/* Direction by direction over full extended slabs, so corners fill too. */
void ext_exchange(const geom_t *g, double *f, int nc)
{
    for (int m = 0; m < 4; m++) {
        int slab = g->Ve / g->e[m];
        size_t sb = (size_t)slab * (size_t)nc;
        double *buf = malloc(sizeof(double) * 4 * sb);
        double *s_lo = buf, *s_hi = buf + sb, *r_lo = buf + 2 * sb, *r_hi = buf + 3 * sb;
        int o[3], k = 0;
        for (int q = 0; q < 4; q++)
            if (q != m)
                o[k++] = q;
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < slab; i++) {
                int y[4];
                y[o[0]] = i % g->e[o[0]];
                y[o[1]] = (i / g->e[o[0]]) % g->e[o[1]];
                y[o[2]] = i / (g->e[o[0]] * g->e[o[1]]);
                if (pass == 0) {
                    y[m] = 1;
                    memcpy(s_lo + (size_t)i * nc, f + (size_t)hm__lex(y, g->e) * nc, sizeof(double) * nc);
                    y[m] = g->l[m];
                    memcpy(s_hi + (size_t)i * nc, f + (size_t)hm__lex(y, g->e) * nc, sizeof(double) * nc);
                } else {
                    y[m] = g->l[m] + 1;
                    memcpy(f + (size_t)hm__lex(y, g->e) * nc, r_lo + (size_t)i * nc, sizeof(double) * nc);
                    y[m] = 0;
                    memcpy(f + (size_t)hm__lex(y, g->e) * nc, r_hi + (size_t)i * nc, sizeof(double) * nc);
                }
            }
            if (pass == 0) {
                if (g->grid[m] == 1) {
                    memcpy(r_lo, s_lo, sizeof(double) * sb);
                    memcpy(r_hi, s_hi, sizeof(double) * sb);
                } else {
                    /* my lower slab goes to -mu (their upper halo); I receive +mu's lower */
                    MPI_Sendrecv(s_lo, (int)sb, MPI_DOUBLE, g->nbr[m][1], 100 + m, r_lo, (int)sb,
                                 MPI_DOUBLE, g->nbr[m][0], 100 + m, g->comm, MPI_STATUS_IGNORE);
                    MPI_Sendrecv(s_hi, (int)sb, MPI_DOUBLE, g->nbr[m][0], 200 + m, r_hi, (int)sb,
                                 MPI_DOUBLE, g->nbr[m][1], 200 + m, g->comm, MPI_STATUS_IGNORE);
                }
            }
        }
        free(buf);
    }
}
