/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-lattice driver: input parsing, the solves, the halo benchmark and
 * versioned JSON output (fields.c makes the fields, selftest.c holds the
 * self-tests). Usage:
 *   hm-lattice [input-file] [--set 'key=value']... [--selftest NAME] [--json PATH]
 * Bad input (unknown key, indivisible dims, bad gauge file) ends every rank
 * with one line on stderr (rank 0) and exit code 2. */
#define _GNU_SOURCE
#include "lattice.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
static int hm__rank;

/* Whether path can be written: opened for append (truncating nothing) and,
 * when this made it, removed again. */
static int writable(const char *path)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode))
        return 0;
    FILE *f = fopen(path, "a");
    if (!f)
        return 0;
    fclose(f);
    if (!existed)
        remove(path);
    return 1;
}

/* Mean seconds per single-precision apply over reps (after one warm-up),
 * the fastest one in *best: the operator as it stands (single or half
 * storage) */
static double time_dirac_f(dirac_t *D, const geom_t *g, cplxf *af, cplxf *bf, int reps,
                           double *best)
{
    dirac_apply_f(D, bf, af);
    MPI_Barrier(g->comm);
    double t = wtime();
    for (int r = 0; r < reps; r++) {
        double t1 = wtime();
        dirac_apply_f(D, r % 2 ? af : bf, r % 2 ? bf : af);
        t1 = wtime() - t1;
        *best = t1 < *best ? t1 : *best;
    }
    MPI_Barrier(g->comm);
    return (wtime() - t) / reps;
}

/* Halo-exchange benchmark: every rank exchanges one message of each size with
 * its +mu and -mu neighbour in every split direction (as the Dirac halo
 * does), non-blocking; effective bandwidth = bytes sent + received per rank
 * per second. With one rank in a direction it still goes through MPI (self). */
static void halo_bench(const geom_t *g, const char *json)
{
    int dirs[4], nd = 0;
    for (int m = 0; m < 4; m++)
        if (g->grid[m] > 1)
            dirs[nd++] = m;
    int self = nd == 0;
    if (self)
        dirs[nd++] = 3;
    FILE *f = NULL;
    if (g->rank == 0) {
        f = json ? fopen(json, "w") : stdout;
        if (!f)
            f = stdout;
        fprintf(f, "{\n  \"schema_version\": %d,\n  \"app\": \"hm-lattice\",\n  \"bench\": \"halo\",\n"
                "  \"ranks\": %d,\n  \"process_grid\": [%d, %d, %d, %d],\n  \"directions\": %d,\n"
                "  \"points\": [\n", LAT_SCHEMA_VERSION, g->size, g->grid[0], g->grid[1], g->grid[2],
                g->grid[3], self ? 0 : nd);
    }
    size_t maxb = 4u << 20;
    char *sb = malloc(maxb * 2 * 4), *rb = malloc(maxb * 2 * 4);
    memset(sb, 1, maxb * 8);
    int first = 1;
    for (size_t bytes = 256; bytes <= maxb; bytes *= 4) {
        int reps = bytes < 65536 ? 200 : bytes < (1u << 20) ? 50 : 10;
        double best = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            MPI_Barrier(g->comm);
            double t = wtime();
            for (int r = 0; r < reps; r++) {
                MPI_Request req[16];
                int nr = 0;
                for (int k = 0; k < nd; k++) {
                    int m = dirs[k], up = self ? g->rank : g->nbr[m][0], dn = self ? g->rank : g->nbr[m][1];
                    MPI_Irecv(rb + (size_t)(2 * k) * maxb, (int)bytes, MPI_BYTE, up, 2 * k, g->comm, &req[nr++]);
                    MPI_Irecv(rb + (size_t)(2 * k + 1) * maxb, (int)bytes, MPI_BYTE, dn, 2 * k + 1, g->comm,
                              &req[nr++]);
                    MPI_Isend(sb + (size_t)(2 * k) * maxb, (int)bytes, MPI_BYTE, dn, 2 * k, g->comm, &req[nr++]);
                    MPI_Isend(sb + (size_t)(2 * k + 1) * maxb, (int)bytes, MPI_BYTE, up, 2 * k + 1, g->comm,
                              &req[nr++]);
                }
                MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
            }
            double dt = (wtime() - t) / reps;
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, g->comm);
            if (dt < best)
                best = dt;
        }
        double moved = 4.0 * nd * (double)bytes; /* sent + received per rank */
        if (g->rank == 0)
            fprintf(f, "%s    {\"message_bytes\": %zu, \"seconds\": %.6e, \"gbs_per_rank\": %.4f}",
                    first ? "" : ",\n", bytes, best, moved / best / 1e9);
        first = 0;
    }
    if (g->rank == 0) {
        fprintf(f, "\n  ]\n}\n");
        if (f != stdout)
            fclose(f);
    }
    free(sb);
    free(rb);
}

/* ------------------------------------------------------------------ main */
static void usage(void)
{
    printf("usage: hm-lattice [input-file] [--set 'key=value']... [--selftest free|gauge|g5|decomp|mg|half|levels]"
           " [--halo-bench] [--json PATH]\n");
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &hm__rank);
    params_t p;
    params_default(&p);
    const char *selftest = NULL, *json = NULL, *input = NULL;
    int do_halo = 0;
    char err[512];
    /* the input file first, then --set overrides in order */
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            input = argv[i];
            break;
        } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--selftest") ||
                   !strcmp(argv[i], "--json")) {
            i++;
        }
    if (input && params_read(&p, input, err, sizeof err))
        lat_die(err);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (hm__rank == 0)
                usage();
            MPI_Finalize();
            return 0;
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            char kv[256];
            snprintf(kv, sizeof kv, "%s", argv[++i]);
            char *eq = strchr(kv, '=');
            if (!eq) {
                snprintf(err, sizeof err, "--set needs key=value, got '%s'", kv);
                lat_die(err);
            }
            *eq = 0;
            if (params_set(&p, kv, eq + 1, err, sizeof err))
                lat_die(err);
        } else if (!strcmp(argv[i], "--selftest") && i + 1 < argc) {
            selftest = argv[++i];
        } else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(argv[i], "--halo-bench")) {
            do_halo = 1;
        } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--selftest") || !strcmp(argv[i], "--json")) {
            snprintf(err, sizeof err, "option %s needs a value", argv[i]);
            lat_die(err);
        } else if (argv[i][0] == '-' || (argv[i] != input)) {
            snprintf(err, sizeof err, "unknown argument '%s'", argv[i]);
            lat_die(err);
        }
    }
    /* output files are checked before any work: the result is written at
     * the end of the run, the gauge field after it is generated */
    int unwritable = 0;
    if (hm__rank == 0)
        unwritable = json && !writable(json) ? 1 : p.gauge_write[0] && !writable(p.gauge_write) ? 2 : 0;
    MPI_Bcast(&unwritable, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (unwritable) {
        snprintf(err, sizeof err, "cannot write the %s file '%s'", unwritable == 1 ? "--json" : "'gauge write'",
                 unwritable == 1 ? json : p.gauge_write);
        lat_die(err);
    }
    char note[256];
    if (lat_alloc_policy(p.fast, p.fast_node, note, sizeof note))
        lat_die(note);
    geom_t g;
    if (geom_init(&g, &p, MPI_COMM_WORLD, err, sizeof err))
        lat_die(err);

    if (do_halo) {
        halo_bench(&g, json);
        geom_free(&g);
        MPI_Finalize();
        return 0;
    }
    if (selftest) {
        int rc = lat_selftest(&g, &p, selftest);
        if (rc < 0) {
            snprintf(err, sizeof err, "unknown self-test '%s'", selftest);
            lat_die(err);
        }
        geom_free(&g);
        MPI_Finalize();
        return rc;
    }

    double t0 = wtime();
    gauge_t G;
    lat_make_gauge(&G, &g, &p);
    double t_gauge = wtime() - t0, plaq = gauge_plaquette(&G, &g);
    dirac_t D;
    dirac_init(&D, &g, &G, p.m0, p.csw);
    gauge_free(&G); /* the operator keeps its own copies */
    long n = 12L * g.V;

    /* Dirac operator bandwidth, double and single */
    /* mean and best time per apply: the bound (the probe's STREAM triad)
     * is a best-of-repetitions figure, so the like-for-like comparison
     * uses the best apply; the mean is reported beside it */
    double tdd, tdf, bdd = 1e30, bdf = 1e30, tdh = 0, bdh = 1e30;
    {
        cplx *a = lat_alloc_vectors(sizeof(cplx) * n), *b = lat_alloc_vectors(sizeof(cplx) * n);
        cplxf *af = lat_alloc_vectors(sizeof(cplxf) * n), *bf = lat_alloc_vectors(sizeof(cplxf) * n);
        lat_fill_random(&g, a, p.seed, 1);
        for (long i = 0; i < n; i++)
            af[i] = (cplxf)a[i];
        dirac_apply(&D, b, a);
        MPI_Barrier(g.comm);
        double t = wtime();
        for (int r = 0; r < p.dirac_reps; r++) {
            double t1 = wtime();
            dirac_apply(&D, r % 2 ? a : b, r % 2 ? b : a);
            t1 = wtime() - t1;
            bdd = t1 < bdd ? t1 : bdd;
        }
        MPI_Barrier(g.comm);
        tdd = (wtime() - t) / p.dirac_reps;
        tdf = time_dirac_f(&D, &g, af, bf, p.dirac_reps, &bdf);
        if (p.half) {
            if (dirac_set_half(&D))
                lat_die("storage = half needs a compiler with _Float16 and a CPU with F16C, AVX2 and FMA");
            tdh = time_dirac_f(&D, &g, af, bf, p.dirac_reps, &bdh);
            MPI_Allreduce(MPI_IN_PLACE, &bdh, 1, MPI_DOUBLE, MPI_MAX, g.comm);
        }
        /* the slowest rank's best apply */
        double bb[2] = {bdd, bdf};
        MPI_Allreduce(MPI_IN_PLACE, bb, 2, MPI_DOUBLE, MPI_MAX, g.comm);
        bdd = bb[0];
        bdf = bb[1];
        lat_free(a), lat_free(b), lat_free(af), lat_free(bf);
    }

    /* solves */
    int do_cg = !strcmp(p.solver, "cgnr") || !strcmp(p.solver, "all");
    int do_bi = !strcmp(p.solver, "bicgstab") || !strcmp(p.solver, "all");
    int do_mg = !strcmp(p.solver, "amg") || !strcmp(p.solver, "all");
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x = lat_alloc_vectors(sizeof(cplx) * n);
    typedef struct { const char *name; int rhs; solve_info_t si; } rec_t;
    rec_t *recs = calloc((size_t)p.nrhs * 3, sizeof(rec_t));
    int nrec = 0;
    mg_t M;
    double t_setup = 0, t_solve[3] = {0}, t_coarse = 0;
    double t_amg[5] = {0}; /* smoother, restrict, prolong, coarse solve, outer */
    long coarse_its = 0;
    double tca = 0, bca = 0; /* coarse operator: seconds per apply, bytes per apply */
    if (do_mg) {
        mg_setup(&M, &D, &p);
        t_setup = M.t_setup;
        long ncv = (long)M.k * M.cg.V;
        cplxf *ca = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv), *cb = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv);
        for (long i = 0; i < ncv; i++)
            ca[i] = 1.0f / (float)(1 + i % 7);
        MPI_Barrier(g.comm);
        double t = wtime();
        for (int r = 0; r < p.dirac_reps; r++)
            mg_coarse_apply(&M, r % 2 ? ca : cb, r % 2 ? cb : ca);
        MPI_Barrier(g.comm);
        tca = (wtime() - t) / p.dirac_reps;
        /* 9 k x k blocks, in and out vectors, single precision, per coarse site */
        bca = (9.0 * M.k * M.k + 2.0 * M.k) * 8.0 * M.cg.V * g.size;
        lat_free(ca), lat_free(cb);
    }
    for (int k = 0; k < p.nrhs; k++) {
        lat_make_rhs(&g, &p, b, k);
        if (do_cg) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "cgnr";
            recs[nrec].rhs = k;
            solve_cgnr(&D, x, b, p.tol, p.maxit, &recs[nrec].si);
            t_solve[0] += recs[nrec++].si.time;
        }
        if (do_bi) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "bicgstab";
            recs[nrec].rhs = k;
            solve_bicgstab(&D, x, b, p.tol, p.maxit, &recs[nrec].si);
            t_solve[1] += recs[nrec++].si.time;
        }
        if (do_mg) {
            memset(x, 0, sizeof(cplx) * n);
            recs[nrec].name = "amg";
            recs[nrec].rhs = k;
            solve_fgmres_mg(&M, x, b, p.tol, p.maxit, p.restart, &recs[nrec].si);
            t_solve[2] += recs[nrec].si.time;
            t_coarse += recs[nrec].si.t_coarse;
            t_amg[0] += recs[nrec].si.t_smooth;
            t_amg[1] += recs[nrec].si.t_restrict;
            t_amg[2] += recs[nrec].si.t_prolong;
            t_amg[3] += recs[nrec].si.t_csolve;
            t_amg[4] += recs[nrec].si.t_outer;
            coarse_its += recs[nrec++].si.coarse_iters;
        }
    }
    /* bytes per tag, summed over ranks (peak per rank summed) */
    double tagb[NTAGS];
    for (int t = 0; t < NTAGS; t++)
        tagb[t] = (double)lat_tag_peak(t);
    MPI_Allreduce(MPI_IN_PLACE, tagb, NTAGS, MPI_DOUBLE, MPI_SUM, g.comm);
    double vol = (double)g.L[0] * g.L[1] * g.L[2] * g.L[3];

    if (hm__rank == 0) {
        FILE *f = json ? fopen(json, "w") : stdout;
        if (!f) {
            fprintf(stderr, "hm-lattice: error: cannot write '%s'\n", json);
            f = stdout;
        }
        fprintf(f, "{\n  \"schema_version\": %d,\n  \"app\": \"hm-lattice\",\n", LAT_SCHEMA_VERSION);
        fprintf(f, "  \"ranks\": %d,\n  \"threads\": %d,\n", g.size, omp_get_max_threads());
        fprintf(f, "  \"lattice\": [%d, %d, %d, %d],\n  \"process_grid\": [%d, %d, %d, %d],\n", g.L[0],
                g.L[1], g.L[2], g.L[3], g.grid[0], g.grid[1], g.grid[2], g.grid[3]);
        fprintf(f, "  \"mapping\": \"%s\",\n  \"block\": [%d, %d, %d, %d],\n", p.mapping, p.block[0],
                p.block[1], p.block[2], p.block[3]);
        fprintf(f, "  \"params\": {\"m0\": %.17g, \"csw\": %.17g, \"gauge\": \"%s\", \"beta\": %.17g, "
                "\"sweeps\": %d, \"seed\": %llu, \"tolerance\": %.3g, \"test_vectors\": %d, "
                "\"setup_iter\": %d, \"post_smooth\": %d, \"block_mr\": %d, \"nrhs\": %d, "
                "\"storage\": \"%s\", \"levels\": %d},\n",
                p.m0, p.csw, p.gauge, p.beta, p.sweeps, (unsigned long long)p.seed, p.tol, p.ntv,
                p.setup_iter, p.post_smooth, p.block_mr, p.nrhs, p.half ? "half" : "single", p.levels);
        fprintf(f, "  \"plaquette\": %.15f,\n", plaq);
        fprintf(f, "  \"kernels\": {\n");
        for (int s = 0; s < 2; s++) {
            double t = s ? tdf : tdd, tb = s ? bdf : bdd, bps = dirac_bytes_per_site(s);
            fprintf(f, "    \"dirac_%s\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                    "\"bytes_per_site\": %.0f, \"bytes_per_site_nocache\": %.0f, \"gbs\": %.4f, "
                    "\"gbs_best\": %.4f, \"gbs_nocache\": %.4f, \"gflops\": %.4f}%s\n",
                    s ? "single" : "double", t, tb, bps, (264.0 * (s ? 8 : 16)), bps * vol / t / 1e9,
                    bps * vol / tb / 1e9, 264.0 * (s ? 8 : 16) * vol / t / 1e9, 1872.0 * vol / t / 1e9,
                    s ? "" : ",");
        }
        if (p.half) {
            double bps = dirac_bytes_per_site_half();
            fprintf(f, "    ,\"dirac_half\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                    "\"bytes_per_site\": %.0f, \"gbs\": %.4f, \"gbs_best\": %.4f, \"gflops\": %.4f}\n",
                    tdh, bdh, bps, bps * vol / tdh / 1e9, bps * vol / bdh / 1e9, 1872.0 * vol / tdh / 1e9);
        }
        if (do_mg)
            fprintf(f, "    ,\"coarse_apply\": {\"seconds_per_apply\": %.6e, \"bytes_per_apply\": %.0f, "
                    "\"gbs\": %.4f}\n", tca, bca, bca / tca / 1e9);
        fprintf(f, "  },\n  \"phases\": {\"gauge_s\": %.6f, \"setup_s\": %.6f, \"solve_cgnr_s\": %.6f, "
                "\"solve_bicgstab_s\": %.6f, \"solve_amg_s\": %.6f, \"coarse_s\": %.6f, "
                "\"coarse_share\": %.4f, \"coarse_iterations\": %ld},\n",
                t_gauge, t_setup, t_solve[0], t_solve[1], t_solve[2], t_coarse,
                t_solve[2] > 0 ? t_coarse / t_solve[2] : 0.0, coarse_its);
        if (do_mg)
            fprintf(f, "  \"amg_phases\": {\"setup_initial_s\": %.6f, \"setup_bootstrap_s\": %.6f, "
                    "\"setup_orthonormalise_s\": %.6f, \"setup_assemble_s\": %.6f, \"solve_smoother_s\": %.6f, "
                    "\"solve_restrict_s\": %.6f, \"solve_prolong_s\": %.6f, \"solve_coarse_solve_s\": %.6f, "
                    "\"solve_outer_s\": %.6f, \"k\": %d},\n",
                    M.ts_init, M.ts_boot, M.ts_orth, M.ts_asm, t_amg[0], t_amg[1], t_amg[2], t_amg[3],
                    t_amg[4], M.k);
        fprintf(f, "  \"solves\": [\n");
        for (int i = 0; i < nrec; i++)
            fprintf(f, "    {\"solver\": \"%s\", \"rhs\": %d, \"iterations\": %d, \"relres\": %.3e, "
                    "\"true_relres\": %.3e, \"converged\": %s, \"time_s\": %.6f}%s\n",
                    recs[i].name, recs[i].rhs, recs[i].si.iters, recs[i].si.relres,
                    recs[i].si.true_relres, recs[i].si.converged ? "true" : "false", recs[i].si.time,
                    i + 1 < nrec ? "," : "");
        fprintf(f, "  ],\n  \"memory\": {\"placement\": \"%s\", \"fast\": \"%s\", \"tags\": {", note,
                p.fast);
        for (int t = 0; t < NTAGS; t++)
            fprintf(f, "%s\"%s\": {\"bytes\": %.0f, \"fast\": %s}", t ? ", " : "", lat_tag_names[t],
                    tagb[t], lat_tag_fast(t) ? "true" : "false");
        double fastb = 0, slowb = 0;
        for (int t = 0; t < NTAGS; t++)
            *(lat_tag_fast(t) ? &fastb : &slowb) += tagb[t];
        fprintf(f, "}, \"tiers\": {\"fast\": %.0f, \"slow\": %.0f}}\n}\n", fastb, slowb);
        if (f != stdout)
            fclose(f);
    }
    if (do_mg)
        mg_free(&M);
    free(recs);
    lat_free(b), lat_free(x);
    dirac_free(&D);
    geom_free(&g);
    MPI_Finalize();
    return 0;
}
