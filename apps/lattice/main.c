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

/* --------------------------------------------------------------- the run */
typedef struct {
    const char *name;
    int rhs;
    solve_info_t si;
} rec_t;

/* what a run measured, for the JSON result */
typedef struct {
    double plaq, t_gauge;
    double tdd, tdf, tdh, bdd, bdf, bdh; /* Dirac: mean and best seconds per apply */
    int do_mg;
    double tca, bca; /* coarse operator: seconds per apply, bytes per apply */
    double t_setup, t_solve[3], t_coarse;
    double t_amg[5]; /* smoother, restrict, prolong, coarse solve, outer */
    long coarse_its;
    rec_t *recs;
    int nrec;
    double tagb[NTAGS]; /* peak bytes per tag, summed over the ranks */
    char note[256];     /* the allocation policy */
} run_t;

/* Dirac operator bandwidth, double and single (and half): mean and best
 * time per apply. The bound (the probe's STREAM triad) is a best-of-
 * repetitions figure, so the like-for-like comparison uses the slowest
 * rank's best apply; the mean is reported beside it. */
static void time_dirac(run_t *R, dirac_t *D, const geom_t *g, const params_t *p)
{
    long n = 12L * g->V;
    cplx *a = lat_alloc_vectors(sizeof(cplx) * n), *b = lat_alloc_vectors(sizeof(cplx) * n);
    cplxf *af = lat_alloc_vectors(sizeof(cplxf) * n), *bf = lat_alloc_vectors(sizeof(cplxf) * n);
    lat_fill_random(g, a, p->seed, 1);
    for (long i = 0; i < n; i++)
        af[i] = (cplxf)a[i];
    R->bdd = R->bdf = R->bdh = 1e30;
    dirac_apply(D, b, a);
    MPI_Barrier(g->comm);
    double t = wtime();
    for (int r = 0; r < p->dirac_reps; r++) {
        double t1 = wtime();
        dirac_apply(D, r % 2 ? a : b, r % 2 ? b : a);
        t1 = wtime() - t1;
        R->bdd = t1 < R->bdd ? t1 : R->bdd;
    }
    MPI_Barrier(g->comm);
    R->tdd = (wtime() - t) / p->dirac_reps;
    R->tdf = time_dirac_f(D, g, af, bf, p->dirac_reps, &R->bdf);
    if (p->half) {
        if (dirac_set_half(D))
            lat_die("storage = half needs a compiler with _Float16 and a CPU with F16C, AVX2 and FMA");
        R->tdh = time_dirac_f(D, g, af, bf, p->dirac_reps, &R->bdh);
        MPI_Allreduce(MPI_IN_PLACE, &R->bdh, 1, MPI_DOUBLE, MPI_MAX, g->comm);
    }
    double bb[2] = {R->bdd, R->bdf};
    MPI_Allreduce(MPI_IN_PLACE, bb, 2, MPI_DOUBLE, MPI_MAX, g->comm);
    R->bdd = bb[0];
    R->bdf = bb[1];
    lat_free(a), lat_free(b), lat_free(af), lat_free(bf);
}

/* the coarse operator's time per apply after the setup */
static void time_coarse(run_t *R, mg_t *M, const geom_t *g, const params_t *p)
{
    long ncv = (long)M->k * M->cg.V;
    cplxf *ca = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv), *cb = lat_alloc_vectors(sizeof(cplxf) * (size_t)ncv);
    for (long i = 0; i < ncv; i++)
        ca[i] = 1.0f / (float)(1 + i % 7);
    MPI_Barrier(g->comm);
    double t = wtime();
    for (int r = 0; r < p->dirac_reps; r++)
        mg_coarse_apply(M, r % 2 ? ca : cb, r % 2 ? cb : ca);
    MPI_Barrier(g->comm);
    R->tca = (wtime() - t) / p->dirac_reps;
    /* 9 k x k blocks, in and out vectors, single precision, per coarse site */
    R->bca = (9.0 * M->k * M->k + 2.0 * M->k) * 8.0 * M->cg.V * g->size;
    lat_free(ca), lat_free(cb);
}

/* one solve of rhs k by `name` from x = 0, recorded */
static solve_info_t *solve_one(run_t *R, const char *name, int k, cplx *x, long n)
{
    memset(x, 0, sizeof(cplx) * (size_t)n);
    rec_t *rec = &R->recs[R->nrec++];
    rec->name = name;
    rec->rhs = k;
    return &rec->si;
}

/* every right-hand side by each solver the parameters ask for */
static void run_solves(run_t *R, dirac_t *D, mg_t *M, const geom_t *g, const params_t *p)
{
    int do_cg = !strcmp(p->solver, "cgnr") || !strcmp(p->solver, "all");
    int do_bi = !strcmp(p->solver, "bicgstab") || !strcmp(p->solver, "all");
    long n = 12L * g->V;
    cplx *b = lat_alloc_vectors(sizeof(cplx) * n), *x = lat_alloc_vectors(sizeof(cplx) * n);
    R->recs = calloc((size_t)p->nrhs * 3, sizeof(rec_t));
    for (int k = 0; k < p->nrhs; k++) {
        lat_make_rhs(g, p, b, k);
        if (do_cg) {
            solve_info_t *si = solve_one(R, "cgnr", k, x, n);
            solve_cgnr(D, x, b, p->tol, p->maxit, si);
            R->t_solve[0] += si->time;
        }
        if (do_bi) {
            solve_info_t *si = solve_one(R, "bicgstab", k, x, n);
            solve_bicgstab(D, x, b, p->tol, p->maxit, si);
            R->t_solve[1] += si->time;
        }
        if (R->do_mg) {
            solve_info_t *si = solve_one(R, "amg", k, x, n);
            solve_fgmres_mg(M, x, b, p->tol, p->maxit, p->restart, si);
            R->t_solve[2] += si->time;
            R->t_coarse += si->t_coarse;
            R->t_amg[0] += si->t_smooth;
            R->t_amg[1] += si->t_restrict;
            R->t_amg[2] += si->t_prolong;
            R->t_amg[3] += si->t_csolve;
            R->t_amg[4] += si->t_outer;
            R->coarse_its += si->coarse_iters;
        }
    }
    lat_free(b), lat_free(x);
}

/* ------------------------------------------------------------ JSON result */
static void json_head(FILE *f, const geom_t *g, const params_t *p, double plaq)
{
    fprintf(f, "{\n  \"schema_version\": %d,\n  \"app\": \"hm-lattice\",\n", LAT_SCHEMA_VERSION);
    fprintf(f, "  \"ranks\": %d,\n  \"threads\": %d,\n", g->size, omp_get_max_threads());
    fprintf(f, "  \"lattice\": [%d, %d, %d, %d],\n  \"process_grid\": [%d, %d, %d, %d],\n", g->L[0], g->L[1],
            g->L[2], g->L[3], g->grid[0], g->grid[1], g->grid[2], g->grid[3]);
    fprintf(f, "  \"mapping\": \"%s\",\n  \"block\": [%d, %d, %d, %d],\n", p->mapping, p->block[0], p->block[1],
            p->block[2], p->block[3]);
    fprintf(f, "  \"params\": {\"m0\": %.17g, \"csw\": %.17g, \"gauge\": \"%s\", \"beta\": %.17g, "
            "\"sweeps\": %d, \"seed\": %llu, \"tolerance\": %.3g, \"test_vectors\": %d, "
            "\"setup_iter\": %d, \"post_smooth\": %d, \"block_mr\": %d, \"nrhs\": %d, "
            "\"storage\": \"%s\", \"levels\": %d},\n",
            p->m0, p->csw, p->gauge, p->beta, p->sweeps, (unsigned long long)p->seed, p->tol, p->ntv,
            p->setup_iter, p->post_smooth, p->block_mr, p->nrhs, p->half ? "half" : "single", p->levels);
    fprintf(f, "  \"plaquette\": %.15f,\n", plaq);
}

static void json_kernels(FILE *f, const run_t *R, const geom_t *g, const params_t *p)
{
    double vol = (double)g->L[0] * g->L[1] * g->L[2] * g->L[3];
    fprintf(f, "  \"kernels\": {\n");
    for (int s = 0; s < 2; s++) {
        double t = s ? R->tdf : R->tdd, tb = s ? R->bdf : R->bdd, bps = dirac_bytes_per_site(s);
        fprintf(f, "    \"dirac_%s\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                "\"bytes_per_site\": %.0f, \"bytes_per_site_nocache\": %.0f, \"gbs\": %.4f, "
                "\"gbs_best\": %.4f, \"gbs_nocache\": %.4f, \"gflops\": %.4f}%s\n",
                s ? "single" : "double", t, tb, bps, (264.0 * (s ? 8 : 16)), bps * vol / t / 1e9,
                bps * vol / tb / 1e9, 264.0 * (s ? 8 : 16) * vol / t / 1e9, 1872.0 * vol / t / 1e9,
                s ? "" : ",");
    }
    if (p->half) {
        double bps = dirac_bytes_per_site_half();
        fprintf(f, "    ,\"dirac_half\": {\"seconds_per_apply\": %.6e, \"seconds_best\": %.6e, "
                "\"bytes_per_site\": %.0f, \"gbs\": %.4f, \"gbs_best\": %.4f, \"gflops\": %.4f}\n",
                R->tdh, R->bdh, bps, bps * vol / R->tdh / 1e9, bps * vol / R->bdh / 1e9,
                1872.0 * vol / R->tdh / 1e9);
    }
    if (R->do_mg)
        fprintf(f, "    ,\"coarse_apply\": {\"seconds_per_apply\": %.6e, \"bytes_per_apply\": %.0f, "
                "\"gbs\": %.4f}\n", R->tca, R->bca, R->bca / R->tca / 1e9);
    fprintf(f, "  },\n");
}

static void json_phases(FILE *f, const run_t *R, const mg_t *M)
{
    fprintf(f, "  \"phases\": {\"gauge_s\": %.6f, \"setup_s\": %.6f, \"solve_cgnr_s\": %.6f, "
            "\"solve_bicgstab_s\": %.6f, \"solve_amg_s\": %.6f, \"coarse_s\": %.6f, "
            "\"coarse_share\": %.4f, \"coarse_iterations\": %ld},\n",
            R->t_gauge, R->t_setup, R->t_solve[0], R->t_solve[1], R->t_solve[2], R->t_coarse,
            R->t_solve[2] > 0 ? R->t_coarse / R->t_solve[2] : 0.0, R->coarse_its);
    if (R->do_mg)
        fprintf(f, "  \"amg_phases\": {\"setup_initial_s\": %.6f, \"setup_bootstrap_s\": %.6f, "
                "\"setup_orthonormalise_s\": %.6f, \"setup_assemble_s\": %.6f, \"solve_smoother_s\": %.6f, "
                "\"solve_restrict_s\": %.6f, \"solve_prolong_s\": %.6f, \"solve_coarse_solve_s\": %.6f, "
                "\"solve_outer_s\": %.6f, \"k\": %d},\n",
                M->ts_init, M->ts_boot, M->ts_orth, M->ts_asm, R->t_amg[0], R->t_amg[1], R->t_amg[2],
                R->t_amg[3], R->t_amg[4], M->k);
}

static void json_solves_memory(FILE *f, const run_t *R, const params_t *p)
{
    fprintf(f, "  \"solves\": [\n");
    for (int i = 0; i < R->nrec; i++) {
        const rec_t *r = &R->recs[i];
        fprintf(f, "    {\"solver\": \"%s\", \"rhs\": %d, \"iterations\": %d, \"relres\": %.3e, "
                "\"true_relres\": %.3e, \"converged\": %s, \"time_s\": %.6f}%s\n",
                r->name, r->rhs, r->si.iters, r->si.relres, r->si.true_relres,
                r->si.converged ? "true" : "false", r->si.time, i + 1 < R->nrec ? "," : "");
    }
    fprintf(f, "  ],\n  \"memory\": {\"placement\": \"%s\", \"fast\": \"%s\", \"tags\": {", R->note, p->fast);
    double fastb = 0, slowb = 0;
    for (int t = 0; t < NTAGS; t++) {
        fprintf(f, "%s\"%s\": {\"bytes\": %.0f, \"fast\": %s}", t ? ", " : "", lat_tag_names[t], R->tagb[t],
                lat_tag_fast(t) ? "true" : "false");
        *(lat_tag_fast(t) ? &fastb : &slowb) += R->tagb[t];
    }
    fprintf(f, "}, \"tiers\": {\"fast\": %.0f, \"slow\": %.0f}}\n}\n", fastb, slowb);
}

/* rank 0 writes the result to json (checked writable at the start), or stdout */
static void write_result(const run_t *R, const mg_t *M, const geom_t *g, const params_t *p, const char *json)
{
    if (g->rank != 0)
        return;
    FILE *f = json ? fopen(json, "w") : stdout;
    if (!f) {
        fprintf(stderr, "hm-lattice: error: cannot write '%s'\n", json);
        f = stdout;
    }
    json_head(f, g, p, R->plaq);
    json_kernels(f, R, g, p);
    json_phases(f, R, M);
    json_solves_memory(f, R, p);
    if (f != stdout)
        fclose(f);
}

/* gauge field, operator, kernel timings, setup, solves, result */
static void run(const geom_t *g, const params_t *p, const char *json, run_t *R)
{
    double t0 = wtime();
    gauge_t G;
    lat_make_gauge(&G, g, p);
    R->t_gauge = wtime() - t0;
    R->plaq = gauge_plaquette(&G, g);
    dirac_t D;
    dirac_init(&D, g, &G, p->m0, p->csw);
    gauge_free(&G); /* the operator keeps its own copies */
    time_dirac(R, &D, g, p);
    mg_t M;
    memset(&M, 0, sizeof M); /* read only when do_mg */
    R->do_mg = !strcmp(p->solver, "amg") || !strcmp(p->solver, "all");
    if (R->do_mg) {
        mg_setup(&M, &D, p);
        R->t_setup = M.t_setup;
        time_coarse(R, &M, g, p);
    }
    run_solves(R, &D, &M, g, p);
    for (int t = 0; t < NTAGS; t++)
        R->tagb[t] = (double)lat_tag_peak(t);
    MPI_Allreduce(MPI_IN_PLACE, R->tagb, NTAGS, MPI_DOUBLE, MPI_SUM, g->comm);
    write_result(R, &M, g, p, json);
    if (R->do_mg)
        mg_free(&M);
    free(R->recs);
    dirac_free(&D);
}

/* ------------------------------------------------------------------ main */
static void usage(void)
{
    printf("usage: hm-lattice [input-file] [--set 'key=value']... [--selftest free|gauge|g5|decomp|mg|half|levels]"
           " [--halo-bench] [--json PATH]\n");
}

typedef struct {
    const char *selftest, *json, *input;
    int halo, help;
} args_t;

static int takes_value(const char *a)
{
    return !strcmp(a, "--set") || !strcmp(a, "--selftest") || !strcmp(a, "--json");
}

/* --set key=value onto p */
static void set_one(params_t *p, const char *arg)
{
    char kv[256], err[512];
    snprintf(kv, sizeof kv, "%s", arg);
    char *eq = strchr(kv, '=');
    if (!eq) {
        snprintf(err, sizeof err, "--set needs key=value, got '%s'", kv);
        lat_die(err);
    }
    *eq = 0;
    if (params_set(p, kv, eq + 1, err, sizeof err))
        lat_die(err);
}

/* the input file first, then --set overrides in order; bad input ends the
 * run (lat_die) */
static void parse_args(int argc, char **argv, params_t *p, args_t *A)
{
    char err[512];
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            A->input = argv[i];
            break;
        } else if (takes_value(argv[i])) {
            i++;
        }
    if (A->input && params_read(p, A->input, err, sizeof err))
        lat_die(err);
    for (int i = 1; i < argc && !A->help; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            A->help = 1;
        else if (takes_value(a) && i + 1 >= argc)
            snprintf(err, sizeof err, "option %s needs a value", a), lat_die(err);
        else if (!strcmp(a, "--set"))
            set_one(p, argv[++i]);
        else if (!strcmp(a, "--selftest"))
            A->selftest = argv[++i];
        else if (!strcmp(a, "--json"))
            A->json = argv[++i];
        else if (!strcmp(a, "--halo-bench"))
            A->halo = 1;
        else if (a[0] == '-' || a != A->input)
            snprintf(err, sizeof err, "unknown argument '%s'", a), lat_die(err);
    }
}

/* Output files are checked before any work: the result is written at the
 * end of the run, the gauge field after it is generated. */
static void check_outputs(const params_t *p, const char *json)
{
    int unwritable = 0, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        unwritable = json && !writable(json) ? 1 : p->gauge_write[0] && !writable(p->gauge_write) ? 2 : 0;
    MPI_Bcast(&unwritable, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (unwritable) {
        char err[512];
        snprintf(err, sizeof err, "cannot write the %s file '%s'", unwritable == 1 ? "--json" : "'gauge write'",
                 unwritable == 1 ? json : p->gauge_write);
        lat_die(err);
    }
}

int main(int argc, char **argv)
{
    int prov, rank, rc = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    params_t p;
    params_default(&p);
    args_t A = {0};
    parse_args(argc, argv, &p, &A);
    if (A.help) {
        if (rank == 0)
            usage();
        MPI_Finalize();
        return 0;
    }
    check_outputs(&p, A.json);
    run_t R = {0};
    char err[512];
    if (lat_alloc_policy(p.fast, p.fast_node, R.note, sizeof R.note))
        lat_die(R.note);
    geom_t g;
    if (geom_init(&g, &p, MPI_COMM_WORLD, err, sizeof err))
        lat_die(err);
    if (A.halo) {
        halo_bench(&g, A.json);
    } else if (A.selftest) {
        rc = lat_selftest(&g, &p, A.selftest);
        if (rc < 0)
            snprintf(err, sizeof err, "unknown self-test '%s'", A.selftest), lat_die(err);
    } else {
        run(&g, &p, A.json, &R);
    }
    geom_free(&g);
    MPI_Finalize();
    return rc;
}
