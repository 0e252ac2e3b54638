/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-lattice driver's fields: the gauge field a run asks for (generated,
 * or read from a file), right-hand sides and random vectors keyed by global
 * site (the same on any number of ranks), and the collective exit on bad
 * input. Shared by the solves (main.c) and the self-tests (selftest.c). */
#define _GNU_SOURCE
#include "lattice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* collective: every rank calls it with the same verdict */
void lat_die(const char *msg)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        fprintf(stderr, "hm-lattice: error: %s\n", msg);
    fflush(stderr);
    MPI_Finalize();
    exit(2);
}

void lat_fill_random(const geom_t *g, cplx *v, uint64_t seed, uint64_t stream)
{
    for (int e = 0; e < g->V; e++) {
        rng_t r;
        rng_seed(&r, seed, g->gidx[e], stream);
        for (int a = 0; a < 12; a++)
            v[12 * (size_t)e + a] = rng_gauss(&r) + I * rng_gauss(&r);
    }
}

void lat_make_rhs(const geom_t *g, const params_t *p, cplx *b, int k)
{
    long n = 12L * g->V;
    memset(b, 0, sizeof(cplx) * (size_t)n);
    if (!strcmp(p->rhs, "random"))
        lat_fill_random(g, b, p->seed, 5000 + (uint64_t)k);
    else if (!strcmp(p->rhs, "ones"))
        for (long i = 0; i < n; i++)
            b[i] = 1;
    else
        for (int e = 0; e < g->V; e++)
            if (g->gidx[e] == 0)
                b[12 * (size_t)e + (k % 12)] = 1;
}

void lat_make_gauge(gauge_t *G, const geom_t *g, const params_t *p)
{
    char err[512];
    gauge_create(G, g);
    if (!strcmp(p->gauge, "unit")) {
        gauge_unit(G, g);
    } else if (!strcmp(p->gauge, "random")) {
        gauge_random(G, g, p->seed);
    } else if (!strcmp(p->gauge, "smeared")) {
        gauge_random(G, g, p->seed);
        gauge_smear(G, g, p->smear, p->smear_alpha);
    } else if (!strcmp(p->gauge, "heatbath")) {
        gauge_unit(G, g);
        gauge_heatbath(G, g, p->beta, p->sweeps, p->seed);
    } else {
        if (!p->gauge_file[0])
            lat_die("gauge: file needs 'gauge file'");
        if (gauge_read(G, g, p->gauge_file, err, sizeof err))
            lat_die(err);
    }
    if (p->gauge_write[0] && gauge_write(G, g, p->gauge_write, err, sizeof err))
        lat_die(err);
}
