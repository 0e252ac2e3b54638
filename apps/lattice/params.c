/* SPDX-License-Identifier: BSD-3-Clause */
/* Input file: `key: value` lines, '#' comments. Every rank parses the same
 * file, so every rank reaches the same verdict on bad input. */
#include "lattice.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void params_default(params_t *p)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 4; i++) {
        p->L[i] = 8;
        p->grid[i] = 0; /* 0: chosen automatically */
        p->block[i] = 4;
    }
    snprintf(p->mapping, sizeof p->mapping, "lexicographic");
    p->ranks_per_node = 1;
    p->m0 = -0.5;
    p->csw = 1.0;
    snprintf(p->gauge, sizeof p->gauge, "heatbath");
    p->beta = 6.0;
    p->sweeps = 20;
    p->smear_alpha = 0.5;
    p->seed = 1;
    snprintf(p->solver, sizeof p->solver, "amg");
    p->tol = 1e-10;
    p->maxit = 20000;
    p->restart = 25;
    p->ntv = 12;
    p->setup_iter = 3;
    p->post_smooth = 2;
    p->block_mr = 4;
    p->setup_sap = 3;
    p->block_oddeven = 1;
    p->coarse_tol = 5e-2;
    p->coarse_maxit = 60;
    p->coarse_restart = 60;
    p->coarse_oddeven = 1;
    p->coarse_direct = 1024;
    p->levels = 2;
    for (int l = 0; l <= LAT_MAXLEV; l++) {
        for (int m = 0; m < 4; m++)
            p->lblock[l][m] = 2;
        p->lntv[l] = 16;
    }
    /* tuned on 16^4, beta 5.8, m0 -0.65 (CGNR 1927 iterations), 2 ranks:
     * FGMRES(5) to 0.1 with 2 smoothing steps gave 47 outer iterations
     * against two levels' 26; (10, 0.1, 4 steps) 27; (10, 0.05, 4) 26 */
    p->kc_restart = 10;
    p->kc_maxit = 10;
    p->kc_tol = 0.05;
    p->coarse_smooth = 4;
    p->coarse_setup = 0;
    p->coarse_setup_it = 3;
    snprintf(p->rhs, sizeof p->rhs, "random");
    p->nrhs = 1;
    p->dirac_reps = 20;
    snprintf(p->fast, sizeof p->fast, "none");
    p->fast_node = -1;
}

static int ints(const char *v, int *out, int n)
{
    char *end;
    for (int i = 0; i < n; i++) {
        long x = strtol(v, &end, 10);
        if (end == v || x <= 0 || x > 1 << 20)
            return -1;
        out[i] = (int)x;
        v = end;
    }
    while (isspace((unsigned char)*v))
        v++;
    return *v ? -1 : 0;
}

static int dbl(const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    while (isspace((unsigned char)*end))
        end++;
    return (end == v || *end || !isfinite(*out)) ? -1 : 0; /* nan and inf are no parameter */
}

static int int1(const char *v, int *out, int min)
{
    char *end;
    long x = strtol(v, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (end == v || *end || x < min || x > 1 << 30)
        return -1;
    *out = (int)x;
    return 0;
}

/* a relative residual tolerance: strictly between 0 and 1 */
static int tol1(const char *v, double *out)
{
    double x;
    if (dbl(v, &x) || !(x > 0 && x < 1))
        return -1;
    *out = x;
    return 0;
}

/* an on/off switch: 0 or 1 */
static int flag(const char *v, int *out)
{
    int x;
    if (int1(v, &x, 0) || x > 1)
        return -1;
    *out = x;
    return 0;
}

static int str(const char *v, char *out, size_t n, const char *const *allowed)
{
    if (!*v || strlen(v) >= n)
        return -1;
    if (allowed) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= !strcmp(v, allowed[i]);
        if (!ok)
            return -1;
    }
    snprintf(out, n, "%s", v);
    return 0;
}

/* "level L <what>" with 3 <= L <= LAT_MAXLEV: the level's number in *lev */
static int level_key(const char *key, const char *what, int *lev)
{
    char tail[32];
    int l, used = 0;
    if (sscanf(key, "level %d %31[a-z ]%n", &l, tail, &used) != 2 || key[used] || strcmp(tail, what))
        return 0;
    if (l < 3 || l > LAT_MAXLEV)
        return 0;
    *lev = l;
    return 1;
}

int params_set(params_t *p, const char *key, const char *val, char *err, size_t n)
{
    static const char *const maps[] = {"lexicographic", "node-blocked", "file", NULL};
    static const char *const gauges[] = {"unit", "random", "heatbath", "smeared", "file", NULL};
    static const char *const solvers[] = {"cgnr", "bicgstab", "amg", "all", NULL};
    static const char *const rhss[] = {"random", "point", "ones", NULL};
    int rc = -1, tmp;
    if (!strcmp(key, "lattice"))
        rc = ints(val, p->L, 4);
    else if (!strcmp(key, "process grid"))
        rc = ints(val, p->grid, 4);
    else if (!strcmp(key, "block"))
        rc = ints(val, p->block, 4);
    else if (!strcmp(key, "mapping"))
        rc = str(val, p->mapping, sizeof p->mapping, maps);
    else if (!strcmp(key, "mapping file"))
        rc = str(val, p->mapfile, sizeof p->mapfile, NULL);
    else if (!strcmp(key, "ranks per node"))
        rc = int1(val, &p->ranks_per_node, 1);
    else if (!strcmp(key, "m0"))
        rc = dbl(val, &p->m0);
    else if (!strcmp(key, "csw"))
        rc = dbl(val, &p->csw);
    else if (!strcmp(key, "gauge"))
        rc = str(val, p->gauge, sizeof p->gauge, gauges);
    else if (!strcmp(key, "gauge file"))
        rc = str(val, p->gauge_file, sizeof p->gauge_file, NULL);
    else if (!strcmp(key, "gauge write"))
        rc = str(val, p->gauge_write, sizeof p->gauge_write, NULL);
    else if (!strcmp(key, "beta"))
        rc = dbl(val, &p->beta);
    else if (!strcmp(key, "sweeps"))
        rc = int1(val, &p->sweeps, 0);
    else if (!strcmp(key, "smear steps"))
        rc = int1(val, &p->smear, 0);
    else if (!strcmp(key, "smear alpha"))
        rc = dbl(val, &p->smear_alpha);
    else if (!strcmp(key, "seed"))
        rc = int1(val, &tmp, 0), p->seed = (uint64_t)tmp;
    else if (!strcmp(key, "solver"))
        rc = str(val, p->solver, sizeof p->solver, solvers);
    else if (!strcmp(key, "tolerance"))
        rc = tol1(val, &p->tol);
    else if (!strcmp(key, "max iterations"))
        rc = int1(val, &p->maxit, 1);
    else if (!strcmp(key, "restart"))
        rc = int1(val, &p->restart, 1);
    else if (!strcmp(key, "test vectors"))
    {
        if (int1(val, &tmp, 1) || tmp > LAT_KMAX / 2) {
            snprintf(err, n, "bad value '%s' for parameter 'test vectors' (1..%d)", val, LAT_KMAX / 2);
            return -1;
        }
        p->ntv = tmp;
        rc = 0;
    }
    else if (!strcmp(key, "setup iter"))
        rc = int1(val, &p->setup_iter, 0);
    else if (!strcmp(key, "post smooth"))
        rc = int1(val, &p->post_smooth, 0);
    else if (!strcmp(key, "block mr"))
        rc = int1(val, &p->block_mr, 1);
    else if (!strcmp(key, "storage")) {
        static const char *const stor[] = {"single", "half", NULL};
        char s[16];
        rc = str(val, s, sizeof s, stor);
        if (!rc)
            p->half = !strcmp(s, "half");
#ifndef LAT_HAVE_HALF
        if (!rc && p->half) {
            snprintf(err, n, "storage = half: this compiler has no 16-bit float (_Float16)");
            return -1;
        }
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
        /* refused here, before any work, rather than when the operator is converted */
        if (!rc && p->half &&
            (!__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))) {
            snprintf(err, n, "storage = half: this CPU lacks F16C, AVX2 or FMA");
            return -1;
        }
#endif
    } else if (!strcmp(key, "setup sap"))
        rc = int1(val, &p->setup_sap, 1);
    else if (!strcmp(key, "block oddeven"))
        rc = flag(val, &p->block_oddeven);
    else if (!strcmp(key, "coarse tolerance"))
        rc = tol1(val, &p->coarse_tol);
    else if (!strcmp(key, "coarse max iterations"))
        rc = int1(val, &p->coarse_maxit, 1);
    else if (!strcmp(key, "coarse restart"))
        rc = int1(val, &p->coarse_restart, 1);
    else if (!strcmp(key, "coarse oddeven"))
        rc = flag(val, &p->coarse_oddeven);
    else if (!strcmp(key, "coarse direct")) {
        /* the LU holds n^2 complex doubles on every rank: 1 GiB at 8192 */
        if (int1(val, &p->coarse_direct, 0) || p->coarse_direct > 8192) {
            snprintf(err, n, "bad value '%s' for parameter 'coarse direct' (0..8192 dof)", val);
            return -1;
        }
        rc = 0;
    }
    else if (!strcmp(key, "levels")) {
        if (int1(val, &tmp, 1) || tmp < 2 || tmp > LAT_MAXLEV) {
            snprintf(err, n, "bad value '%s' for parameter 'levels' (2..%d)", val, LAT_MAXLEV);
            return -1;
        }
        p->levels = tmp;
        rc = 0;
    } else if (level_key(key, "block", &tmp))
        rc = ints(val, p->lblock[tmp], 4);
    else if (level_key(key, "test vectors", &tmp)) {
        if (int1(val, &p->lntv[tmp], 1) || p->lntv[tmp] > LAT_KMAX / 2) {
            snprintf(err, n, "bad value '%s' for parameter '%s' (1..%d)", val, key, LAT_KMAX / 2);
            return -1;
        }
        rc = 0;
    } else if (!strcmp(key, "kcycle restart"))
        rc = int1(val, &p->kc_restart, 1);
    else if (!strcmp(key, "kcycle max iterations"))
        rc = int1(val, &p->kc_maxit, 1);
    else if (!strcmp(key, "kcycle tolerance"))
        rc = tol1(val, &p->kc_tol);
    else if (!strcmp(key, "coarse smooth"))
        rc = int1(val, &p->coarse_smooth, 0);
    else if (!strcmp(key, "coarse setup"))
        rc = int1(val, &p->coarse_setup, 0);
    else if (!strcmp(key, "coarse setup iterations"))
        rc = int1(val, &p->coarse_setup_it, 1);
    else if (!strcmp(key, "rhs"))
        rc = str(val, p->rhs, sizeof p->rhs, rhss);
    else if (!strcmp(key, "nrhs"))
        rc = int1(val, &p->nrhs, 1);
    else if (!strcmp(key, "dirac reps"))
        rc = int1(val, &p->dirac_reps, 1);
    else if (!strcmp(key, "fast"))
        rc = str(val, p->fast, sizeof p->fast, NULL);
    else if (!strcmp(key, "fast node"))
        rc = int1(val, &p->fast_node, -1);
    else {
        snprintf(err, n, "unknown parameter '%s'", key);
        return -1;
    }
    if (rc) {
        snprintf(err, n, "bad value '%s' for parameter '%s'", val, key);
        return -1;
    }
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int params_read(params_t *p, const char *path, char *err, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, n, "cannot open input file '%s'", path);
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        char *s = trim(line);
        if (!*s)
            continue;
        char *c = strchr(s, ':');
        if (!c) {
            snprintf(err, n, "%s:%d: expected 'key: value'", path, lineno);
            rc = -1;
            break;
        }
        *c = 0;
        char e2[256];
        if (params_set(p, trim(s), trim(c + 1), e2, sizeof e2)) {
            snprintf(err, n, "%s:%d: %s", path, lineno, e2);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}
