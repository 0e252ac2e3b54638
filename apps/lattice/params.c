/* SPDX-License-Identifier: BSD-3-Clause */
/* Input file: `key: value` lines, '#' comments. Every rank parses the same
 * file, so every rank reaches the same verdict on bad input. */
#include "lattice.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
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

/* ---- the keys ---- */
typedef enum { P_INT, P_INTS4, P_DBL, P_TOL, P_FLAG, P_STR } pkind_t;

typedef struct {
    const char *key;
    pkind_t kind;
    size_t off, size;            /* the field in params_t; size: strings' buffer */
    int min, max;                /* P_INT: range (max 0: none); a bounded one names it */
    const char *unit;            /* after the range in the message, or NULL */
    const char *const *allowed;  /* P_STR: the words allowed, or NULL: any */
} pdef_t;

static const char *const hm__maps[] = {"lexicographic", "node-blocked", "file", NULL};
static const char *const hm__gauges[] = {"unit", "random", "heatbath", "smeared", "file", NULL};
static const char *const hm__solvers[] = {"cgnr", "bicgstab", "amg", "all", NULL};
static const char *const hm__rhss[] = {"random", "point", "ones", NULL};

#define F(f) offsetof(params_t, f), sizeof(((params_t *)0)->f)
#define INT(k, f, lo) {k, P_INT, F(f), lo, 0, NULL, NULL}
#define STR(k, f, words) {k, P_STR, F(f), 0, 0, NULL, words}
static const pdef_t hm__keys[] = {
    {"lattice", P_INTS4, F(L), 0, 0, NULL, NULL},
    {"process grid", P_INTS4, F(grid), 0, 0, NULL, NULL},
    {"block", P_INTS4, F(block), 0, 0, NULL, NULL},
    STR("mapping", mapping, hm__maps),
    STR("mapping file", mapfile, NULL),
    INT("ranks per node", ranks_per_node, 1),
    {"m0", P_DBL, F(m0), 0, 0, NULL, NULL},
    {"csw", P_DBL, F(csw), 0, 0, NULL, NULL},
    STR("gauge", gauge, hm__gauges),
    STR("gauge file", gauge_file, NULL),
    STR("gauge write", gauge_write, NULL),
    {"beta", P_DBL, F(beta), 0, 0, NULL, NULL},
    INT("sweeps", sweeps, 0),
    INT("smear steps", smear, 0),
    {"smear alpha", P_DBL, F(smear_alpha), 0, 0, NULL, NULL},
    STR("solver", solver, hm__solvers),
    {"tolerance", P_TOL, F(tol), 0, 0, NULL, NULL},
    INT("max iterations", maxit, 1),
    INT("restart", restart, 1),
    {"test vectors", P_INT, F(ntv), 1, LAT_KMAX / 2, NULL, NULL},
    INT("setup iter", setup_iter, 0),
    INT("post smooth", post_smooth, 0),
    INT("block mr", block_mr, 1),
    INT("setup sap", setup_sap, 1),
    {"block oddeven", P_FLAG, F(block_oddeven), 0, 0, NULL, NULL},
    {"coarse tolerance", P_TOL, F(coarse_tol), 0, 0, NULL, NULL},
    INT("coarse max iterations", coarse_maxit, 1),
    INT("coarse restart", coarse_restart, 1),
    {"coarse oddeven", P_FLAG, F(coarse_oddeven), 0, 0, NULL, NULL},
    /* the LU holds n^2 complex doubles on every rank: 1 GiB at 8192 */
    {"coarse direct", P_INT, F(coarse_direct), 0, 8192, " dof", NULL},
    {"levels", P_INT, F(levels), 2, LAT_MAXLEV, NULL, NULL},
    INT("kcycle restart", kc_restart, 1),
    INT("kcycle max iterations", kc_maxit, 1),
    {"kcycle tolerance", P_TOL, F(kc_tol), 0, 0, NULL, NULL},
    INT("coarse smooth", coarse_smooth, 0),
    INT("coarse setup", coarse_setup, 0),
    INT("coarse setup iterations", coarse_setup_it, 1),
    STR("rhs", rhs, hm__rhss),
    INT("nrhs", nrhs, 1),
    INT("dirac reps", dirac_reps, 1),
    STR("fast", fast, NULL),
    INT("fast node", fast_node, -1),
};
#undef F
#undef INT
#undef STR

/* val into the field d describes: 0, or -1 when it is no value of it */
static int set_field(params_t *p, const pdef_t *d, const char *val)
{
    char *f = (char *)p + d->off;
    switch (d->kind) {
    case P_INTS4:
        return ints(val, (int *)(void *)f, 4);
    case P_DBL:
        return dbl(val, (double *)(void *)f);
    case P_TOL:
        return tol1(val, (double *)(void *)f);
    case P_FLAG:
        return flag(val, (int *)(void *)f);
    case P_STR:
        return str(val, f, d->size, d->allowed);
    case P_INT: {
        int x;
        if (int1(val, &x, d->min) || (d->max && x > d->max))
            return -1;
        *(int *)(void *)f = x;
        return 0;
    }
    }
    return -1;
}

/* storage = single | half; half needs _Float16 and, on x86-64, F16C, AVX2
 * and FMA: refused here, before any work, rather than when the operator is
 * converted */
static int set_storage(params_t *p, const char *val, char *err, size_t n)
{
    static const char *const stor[] = {"single", "half", NULL};
    char s[16];
    if (str(val, s, sizeof s, stor)) {
        snprintf(err, n, "bad value '%s' for parameter 'storage'", val);
        return -1;
    }
    p->half = !strcmp(s, "half");
#ifndef LAT_HAVE_HALF
    if (p->half) {
        snprintf(err, n, "storage = half: this compiler has no 16-bit float (_Float16)");
        return -1;
    }
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (p->half && (!__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx2") ||
                    !__builtin_cpu_supports("fma"))) {
        snprintf(err, n, "storage = half: this CPU lacks F16C, AVX2 or FMA");
        return -1;
    }
#endif
    return 0;
}

/* the keys that are no plain field: seed (64 bits), storage, "level L
 * block" and "level L test vectors"; 1 when key is none of them */
static int set_special(params_t *p, const char *key, const char *val, char *err, size_t n)
{
    int tmp;
    if (!strcmp(key, "seed")) {
        if (int1(val, &tmp, 0))
            goto bad;
        p->seed = (uint64_t)tmp;
        return 0;
    }
    if (!strcmp(key, "storage"))
        return set_storage(p, val, err, n);
    if (level_key(key, "block", &tmp)) {
        if (ints(val, p->lblock[tmp], 4))
            goto bad;
        return 0;
    }
    if (level_key(key, "test vectors", &tmp)) {
        if (int1(val, &p->lntv[tmp], 1) || p->lntv[tmp] > LAT_KMAX / 2) {
            snprintf(err, n, "bad value '%s' for parameter '%s' (1..%d)", val, key, LAT_KMAX / 2);
            return -1;
        }
        return 0;
    }
    return 1;
bad:
    snprintf(err, n, "bad value '%s' for parameter '%s'", val, key);
    return -1;
}

int params_set(params_t *p, const char *key, const char *val, char *err, size_t n)
{
    for (size_t i = 0; i < sizeof hm__keys / sizeof hm__keys[0]; i++) {
        const pdef_t *d = &hm__keys[i];
        if (strcmp(key, d->key))
            continue;
        if (!set_field(p, d, val))
            return 0;
        if (d->kind == P_INT && d->max)
            snprintf(err, n, "bad value '%s' for parameter '%s' (%d..%d%s)", val, key, d->min, d->max,
                     d->unit ? d->unit : "");
        else
            snprintf(err, n, "bad value '%s' for parameter '%s'", val, key);
        return -1;
    }
    int rc = set_special(p, key, val, err, n);
    if (rc == 1) {
        snprintf(err, n, "unknown parameter '%s'", key);
        return -1;
    }
    return rc;
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
