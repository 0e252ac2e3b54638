/* SPDX-License-Identifier: BSD-3-Clause */
/* hm-lattice: Wilson-clover lattice QCD mini-app with two-level aggregation
 * multigrid (DD-alphaAMG class), MPI halo exchange and tagged allocation.
 * Conventions: direction mu = 0,1,2,3 is x,y,z,t (t antiperiodic); 12 complex
 * components per site, index (spin*3 + colour); chiral gamma basis with
 * gamma5 = diag(1,1,-1,-1); local sites in even-odd order (even first). */
#ifndef HM_LATTICE_H
#define HM_LATTICE_H

#ifdef _OPENMP
#include <omp.h>
#endif
#include <complex.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

typedef double complex cplx;
typedef float complex cplxf;
/* 16-bit storage (key 'storage = half'): IEEE binary16 where the compiler
 * has it (GCC >= 12, Clang >= 15 on x86-64), converted to single for
 * arithmetic (F16C in the x86-64-v3 clones) */
#ifdef __FLT16_MAX__
#define LAT_HAVE_HALF 1
__extension__ typedef _Float16 lat_half;
/* n 16-bit values to single. On x86-64 the half-storage kernels are built
 * for x86-64-v3 only (LAT_HALF_FAST; dirac_set_half refuses a CPU without
 * F16C/AVX2/FMA) and convert 8 at a time with vcvtph2ps: GCC 12 turns a
 * plain conversion loop, or __builtin_convertvector, into scalar code. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define LAT_HALF_FAST __attribute__((target("arch=x86-64-v3")))
static inline __attribute__((always_inline, target("arch=x86-64-v3"))) void lat_h2f(float *dst, const lat_half *src,
                                                                                    int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++)
        dst[i] = (float)src[i];
}
#else
#define LAT_HALF_FAST
static inline void lat_h2f(float *dst, const lat_half *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = (float)src[i];
}
#endif
#else
typedef unsigned short lat_half; /* placeholder: half storage is refused */
#endif

#define LAT_SCHEMA_VERSION 1
#define LAT_KMAX 256 /* coarse dof per site, 2 x at most 128 test vectors */
#define LAT_MAXLEV 4  /* multigrid levels, the fine one included */

/* ---- tagged allocation (alloc.c) ---- */
enum { TAG_GAUGE, TAG_CLOVER, TAG_VECTORS, TAG_TESTVEC, TAG_COARSE, TAG_KRYLOV, TAG_HALO, NTAGS };
extern const char *const lat_tag_names[NTAGS];
void *lat_alloc_gauge(size_t bytes);
void *lat_alloc_clover(size_t bytes);
void *lat_alloc_vectors(size_t bytes);
void *lat_alloc_testvec(size_t bytes);
void *lat_alloc_coarse(size_t bytes);
void *lat_alloc_krylov(size_t bytes);
void *lat_alloc_halo(size_t bytes);
void lat_free(void *p);
/* policy: "all", "none" or a comma list of tag names; node < 0: none given */
int lat_alloc_policy(const char *fast, int node, char *note, size_t notelen);
size_t lat_tag_bytes(int tag);
size_t lat_tag_peak(int tag);
int lat_tag_fast(int tag);

/* ---- parameters (params.c) ---- */
typedef struct {
    int L[4], grid[4], block[4];
    char mapping[32], mapfile[256];
    int ranks_per_node;
    double m0, csw;
    char gauge[32], gauge_file[256], gauge_write[256];
    double beta;
    int sweeps, smear;
    double smear_alpha;
    uint64_t seed;
    char solver[32];
    double tol;
    int maxit, restart;
    int ntv, setup_iter, post_smooth, block_mr;
    int setup_sap;     /* initial phase: SAP inverse iteration with 1 .. setup_sap sweeps */
    int block_oddeven; /* SAP block solves: MR on the odd-even reduced block system */
    double coarse_tol;
    int coarse_maxit, coarse_restart, coarse_oddeven;
    int coarse_direct; /* coarsest level solved by LU up to this many dof (0: never) */
    /* multigrid depth (fine level = 1) and, for levels 3 .. levels, the
     * aggregates (in sites of the level above) and test vectors defining them */
    int levels;
    int lblock[LAT_MAXLEV + 1][4], lntv[LAT_MAXLEV + 1];
    /* K-cycle on intermediate levels: FGMRES(kc_restart), at most kc_maxit
     * iterations to kc_tol, preconditioned by the next level's cycle and
     * post-smoothed by coarse_smooth GMRES steps; coarse_setup inverse
     * iteration steps on each coarse level's test vectors, each at most
     * coarse_setup_it K-cycle iterations */
    int kc_restart, kc_maxit, coarse_smooth, coarse_setup, coarse_setup_it;
    double kc_tol;
    char rhs[32];
    int nrhs;
    int half; /* storage = half: preconditioner data (links, clover, P, D_c) in 16 bit */
    int dirac_reps;
    char fast[128];
    int fast_node;
    int nocheck; /* internal: coarse geometry skips the fine-lattice checks */
} params_t;

void params_default(params_t *p);
/* returns 0, or -1 with a one-line message in err */
int params_set(params_t *p, const char *key, const char *val, char *err, size_t n);
int params_read(params_t *p, const char *path, char *err, size_t n);

/* ---- geometry and communication (geom.c) ---- */
typedef struct {
    int L[4], grid[4], l[4], coord[4], origin[4];
    int nbr[4][2]; /* neighbour rank [mu][0: +mu, 1: -mu] */
    int V, Vh;
    MPI_Comm comm;
    int rank, size;
    int *nb;          /* [V][8]: dir 2mu (+mu), 2mu+1 (-mu); >=0 local eo index, else -(1+face pos) */
    int *face[4][2];  /* [mu][0] sites with x_mu=0, [mu][1] x_mu=l-1, both ordered alike */
    int nface[4];     /* 0 when grid[mu]==1 (neighbours wrap locally) */
    int64_t *gidx;    /* global lexicographic index of each local eo site */
    int *lc;          /* [V][4] local coordinates of eo site */
    int *lex2eo;
    /* extended (width-1 halo incl. corners) lattice for gauge-field work */
    int e[4], Ve;
    int *eo2ext;
} geom_t;

typedef struct {
    void *send[8], *recv[8];
    size_t bytes[8];
    MPI_Request req[16];
    int nreq;
} halo_t;

/* computes grid coords for every rank from the mapping; returns -1 + err */
int geom_map(const params_t *p, int size, int (*coords)[4], char *err, size_t n);
int geom_init(geom_t *g, const params_t *p, MPI_Comm comm, char *err, size_t n);
void geom_free(geom_t *g);
/* buffers for a face exchange carrying bytes_per_site for each face site */
void halo_alloc(const geom_t *g, halo_t *h, size_t bytes_per_site);
void halo_free(halo_t *h);
/* send[2mu] = my lower face to -mu rank; send[2mu+1] = my upper face to +mu.
 * recv[2mu] = +mu rank's lower face; recv[2mu+1] = -mu rank's upper face. */
void halo_start(const geom_t *g, halo_t *h);
void halo_wait(halo_t *h);
/* full width-1 halo of an extended field with ncomp doubles per site */
void ext_exchange(const geom_t *g, double *f, int ncomp);
int ext_index(const geom_t *g, const int x[4]); /* x in -1..l */
int lex_local(const geom_t *g, const int x[4]);

/* ---- random numbers keyed by global index (rng.c in gauge.c) ---- */
typedef struct { uint64_t s; } rng_t;
void rng_seed(rng_t *r, uint64_t seed, int64_t site, uint64_t stream);
double rng_uniform(rng_t *r); /* (0,1] */
double rng_gauss(rng_t *r);

/* ---- SU(3) and gauge fields (gauge.c) ---- */
typedef struct { cplx m[9]; } su3;
typedef struct {
    double *u; /* extended lattice, [Ve][4][18] doubles, physical links */
} gauge_t;
int gauge_create(gauge_t *G, const geom_t *g);
void gauge_free(gauge_t *G);
su3 *gauge_link(const gauge_t *G, const geom_t *g, int ext, int mu);
void gauge_unit(gauge_t *G, const geom_t *g);
void gauge_random(gauge_t *G, const geom_t *g, uint64_t seed);
void gauge_heatbath(gauge_t *G, const geom_t *g, double beta, int sweeps, uint64_t seed);
void gauge_smear(gauge_t *G, const geom_t *g, int steps, double alpha);
void gauge_transform(gauge_t *G, const geom_t *g, const su3 *omega); /* omega per eo site */
void random_su3(rng_t *r, su3 *o);
double gauge_plaquette(const gauge_t *G, const geom_t *g); /* Re tr averaged, 3 for unit */
int gauge_read(gauge_t *G, const geom_t *g, const char *path, char *err, size_t n);
int gauge_write(const gauge_t *G, const geom_t *g, const char *path, char *err, size_t n);

/* ---- Dirac operator (dirac.c) ---- */
typedef struct {
    const geom_t *g;
    double m0, csw;
    cplx *U;    /* [V][4][9], boundary sign folded in, eo order */
    cplxf *Uf;
    cplx *A;    /* [V][72] clover + diagonal, two 6x6 chiral blocks, CLOVER_IDX order */
    cplxf *Af;
    cplxf *Aif; /* [V][72] inverse of A, single (odd-even SAP block solves) */
    /* storage = half: the single-precision operator's links, clover and
     * inverse clover as 16-bit (same layouts), Uf/Af/Aif freed */
    int half;
    lat_half *Uh, *Ah, *Aih;
    halo_t hd, hf; /* half-spinor halos, double and single */
    long napply, napplyf;
    double tapply, tapplyf;
} dirac_t;
/* entry (i, j) of chiral block b (rows/columns 3*spin + colour within the
 * block) in a site's 72 stored complex: row pairs (c, c+3) adjacent, so the
 * kernel multiplies both spins of a colour with one vector operation */
#define CLOVER_IDX(b, i, j) (36 * (b) + 12 * ((i) % 3) + 2 * (j) + (i) / 3)
int dirac_init(dirac_t *D, const geom_t *g, const gauge_t *G, double m0, double csw);
void dirac_free(dirac_t *D);
/* switch the single-precision operator to half-precision storage; -1 when
 * the compiler has no 16-bit float */
int dirac_set_half(dirac_t *D);
/* link U_mu(x) and the 72 clover entries of x in single, whatever the storage */
void dirac_link_f(const dirac_t *D, int x, int mu, cplxf *u9);
void dirac_clover_site_f(const dirac_t *D, int x, cplxf *a72);
void dirac_apply(dirac_t *D, cplx *out, const cplx *in);
void dirac_apply_f(dirac_t *D, cplxf *out, const cplxf *in);
/* out = D in on the listed sites only (other sites of out: unspecified), single */
void dirac_apply_sites_f(dirac_t *D, cplxf *out, const cplxf *in, const int *sites, int ns);
/* block-restricted operator (Dirichlet at the block boundary), single */
void dirac_block_f(const dirac_t *D, const int *sites, int ns, const int *blk, int b,
                   cplxf *out, const cplxf *in);
/* block-restricted hopping term only (D - A), single */
void dirac_block_hop_f(const dirac_t *D, const int *sites, int ns, const int *blk, int b, cplxf *out,
                       const cplxf *in);
/* out = A in (inverse: A^-1 in) on the listed sites, single */
void dirac_clover_f(const dirac_t *D, int inverse, const int *sites, int ns, cplxf *out, const cplxf *in);
void gamma5(const geom_t *g, cplx *v);
void gamma5_f(const geom_t *g, cplxf *v);
double dirac_bytes_per_site(int single);
double dirac_bytes_per_site_half(void);
extern const cplx lat_gamma[4][4][4];

/* ---- vector helpers (solvers.c) ---- */
cplx vdot(const geom_t *g, const cplx *a, const cplx *b, long n);
double vnorm2(const geom_t *g, const cplx *a, long n);
cplx vdot_f(const geom_t *g, const cplxf *a, const cplxf *b, long n);
double vnorm2_f(const geom_t *g, const cplxf *a, long n);

typedef struct {
    int iters;
    double relres, true_relres, time;
    double t_coarse;
    long coarse_iters;
    int converged;
    /* AMG solves: V-cycle parts and the outer FGMRES (fine D in double,
     * Gram-Schmidt, updates), seconds */
    double t_smooth, t_restrict, t_prolong, t_csolve, t_outer;
} solve_info_t;
void solve_cgnr(dirac_t *D, cplx *x, const cplx *b, double tol, int maxit, solve_info_t *si);
void solve_bicgstab(dirac_t *D, cplx *x, const cplx *b, double tol, int maxit, solve_info_t *si);
double true_residual(dirac_t *D, const cplx *x, const cplx *b);

/* ---- coarse levels (mg_coarse.c: operator and Krylov solvers;
 * mg_levels.c: aggregation, Galerkin products, K-cycle) ---- */
typedef struct mgl mgl_t;
struct mgl {
    int level;            /* 2: first coarse level (1 is the fine lattice) */
    const geom_t *g;      /* this level's geometry */
    geom_t *gown;         /* levels >= 3 own theirs (= g); level 2 uses mg_t's cg */
    params_t prm;
    int k, half;          /* dof per site; half: D_c stored in Dch (level 2 only) */
    cplxf *Dc;            /* [V][9][k*k]: self, then dirs 0..7 */
    lat_half *Dch;
    halo_t hc;            /* halo of one level vector */
    int coe;              /* odd-even reduced coarsest solve in use */
    cplxf *Dinv;          /* [Vh][k*k] inverse self blocks of the even sites */
    cplxf *oe1, *oe2, *oe3;
    cplxf *cb, *kZ;       /* Krylov basis (coarsest GMRES or K-cycle FGMRES), its Z */
    cplx *cH;
    cplxf *sb, *sZ;       /* smoother: FGMRES basis, directions, Hessenberg, */
    cplx *sH;
    cplxf *Jinv;          /* [V][k*k] inverse self blocks (its block-Jacobi preconditioner) */
    struct lvl_direct *direct; /* coarsest level's LU (mg_direct.c), NULL: GMRES */
    int direct_ok;        /* the last factorisation succeeded */
    long iters;           /* Krylov iterations of this level's solves */
    int built;            /* the levels below have been set up once */
    /* towards the next level (NULL on the coarsest) */
    mgl_t *next;
    int N, nblk, bsites;  /* test vectors, next-level sites, sites per aggregate */
    int *bsite, *blk;     /* [nblk][bsites] sites of each aggregate; [V] aggregate of a site */
    cplxf *TV, *W;        /* [N][V*k] raw and orthonormalised test vectors (P) */
    halo_t hw;            /* test-vector halo for the Galerkin product */
    cplxf *rc, *ec, *r;   /* next level's right-hand side and solution; work */
};
typedef void (*lvl_op_t)(mgl_t *, cplxf *, const cplxf *);
/* Krylov workspace: basis V (m + 2 vectors: m + 1 and the new direction),
 * Z (m vectors, flexible variant only) and Hessenberg + Givens (H) */
typedef struct { cplxf *V, *Z; cplx *H; int m; } kry_t;
void lvl_apply(mgl_t *L, cplxf *out, const cplxf *in);
/* out = blocks d0..d1-1 of D_L on sites c0..c1-1 (0 self, 1..8 neighbours) */
void lvl_part(mgl_t *L, cplxf *out, const cplxf *in, int c0, int c1, int d0, int d1);
/* (F)GMRES(K->m) on op with the preconditioner prec (NULL: none, Z unused);
 * guess: x holds the initial guess (else zero); returns the iterations */
int lvl_gmres(mgl_t *L, const kry_t *K, cplxf *x, const cplxf *b, long n, double tol, int maxit, int guess,
              lvl_op_t op, lvl_op_t prec);
int lvl_coarsest_solve(mgl_t *L, cplxf *x, const cplxf *b);
/* in's halo on this level (hc.recv), as the neighbour blocks read it */
void lvl_halo(mgl_t *L, const cplxf *in);
/* the coarsest level solved by LU when it has at most `coarse direct` dof */
int lvl_direct_wanted(const mgl_t *L);
void lvl_direct_factor(mgl_t *L);
int lvl_direct_solve(mgl_t *L, cplxf *x, const cplxf *b);
void lvl_direct_free(mgl_t *L);
/* b bytes for one of L's arrays through the level's own allocation site */
void *lvl_alloc(const mgl_t *L, int tag, size_t b);
int lvl_oe_possible(const mgl_t *L);
void lvl_invert_even(mgl_t *L);
void lvl_invert_self(mgl_t *L, cplxf *out, int ns);
void lvl_jacobi(mgl_t *L, cplxf *out, const cplxf *in);
/* x = approximately D_L^-1 b: the coarsest solve, or the K-cycle */
int lvl_solve(mgl_t *L, cplxf *x, const cplxf *b);
void lvl_restrict(mgl_t *L, cplxf *vc, const cplxf *v);
void lvl_prolong(mgl_t *L, cplxf *v, const cplxf *vc);
/* coarse levels from level 2 down, for the parameters' `levels` */
mgl_t *lvl_create(const geom_t *g, const params_t *p, int level, int half);
void lvl_free(mgl_t *L);
/* the levels below L from L's current operator: test vectors (the first
 * nsrc already in L->TV: restrictions of the finer raw ones), inverse
 * iteration, P, Galerkin product, recursively */
void lvl_build(mgl_t *L, int nsrc);
/* after L's operator is (re)assembled, what its solves precompute: the
 * inverse self blocks (even sites for the odd-even coarsest solve, all of
 * them for the K-cycle's block Jacobi) or the coarsest LU */
void lvl_prepare(mgl_t *L);
/* checks the levels' aggregates against the local lattice; -1 + err */
int lvl_check(const params_t *p, const int l[4], char *err, size_t n);

/* ---- multigrid, fine level (mg_setup.c, mg_sap.c, mg_interp.c) ---- */
typedef struct {
    dirac_t *D;
    const geom_t *g;
    params_t prm;
    int nblk, bsites;     /* local blocks, sites per block */
    int *bsite;           /* [nblk][bsites] eo indices */
    int *blk;             /* [V] block of each site */
    int *bcolor;          /* [nblk] red/black */
    int *csite[2];        /* sites of the red / black blocks */
    int ncsite[2];
    geom_t cg;            /* coarse geometry (one site per block) */
    int N, k;             /* test vectors, k = 2N coarse dof */
    int half;             /* storage = half: P and D_c in Wh, lv->Dch (W, Dc NULL) */
    cplxf *W;             /* [N][V*12] orthonormalised test vectors (P) */
    lat_half *Wh;         /* the same, 16 bit (re, im) */
    cplxf *TV;            /* [N][V*12] the raw test vectors the setup iterates on */
    mgl_t *lv;            /* level 2 (and below it the others) */
    halo_t hw;            /* test-vector halo for assembly */
    halo_t hb;            /* coarse forward-block halo for assembly */
    cplxf *r, *e, *q, *t; /* fine work vectors */
    cplxf *q2, *q3;       /* fine work vectors of the odd-even block solves */
    int *bne;             /* [nblk] even sites of each block (listed first in bsite) */
    cplxf *rc, *ec;       /* coarse work vectors */
    double t_setup, t_coarse;
    double t_smooth, t_restrict, t_prolong, t_csolve; /* V-cycle parts */
    /* setup parts: SAP inverse iteration, bootstrap V-cycles (with their
     * residuals), orthonormalisation, coarse assembly (+ even inversion and
     * the levels below) */
    double ts_init, ts_boot, ts_orth, ts_asm;
    long coarse_iters, ncycles;
} mg_t;
int mg_setup(mg_t *M, dirac_t *D, const params_t *p);
void mg_free(mg_t *M);
void mg_restrict(mg_t *M, cplxf *vc, const cplxf *v);
void mg_prolong(mg_t *M, cplxf *v, const cplxf *vc);
void mg_coarse_apply(mg_t *M, cplxf *out, const cplxf *in);
void mg_vcycle(mg_t *M, cplxf *x, const cplxf *r);
void sap(mg_t *M, cplxf *x, const cplxf *b, int sweeps, int zero_guess);
/* P from the raw test vectors; D_c = P^H D P into M->lv (mg_interp.c) */
void mg_orthonormalise(mg_t *M, cplxf *coef, int ns);
void mg_assemble(mg_t *M);
/* self-test: ||D_b e - r|| / ||r|| after the odd-even block solve with
 * `steps` MR steps on block c (random r); -1 when block oddeven is off */
double mg_block_solve_residual(mg_t *M, int c, int steps);
void solve_fgmres_mg(mg_t *M, cplx *x, const cplx *b, double tol, int maxit, int restart,
                     solve_info_t *si);

double wtime(void);
/* GMRES's Givens step (mg_coarse.c): the earlier rotations applied to
 * column j of the (m+1) x m Hessenberg H, a new one zeroing H[j+1][j],
 * the rotated right-hand side gv updated; returns |gv[j+1]| */
double lat_givens(cplx *H, int m, int j, cplx *cs, cplx *sn, cplx *gv);

/* the driver's fields (fields.c): lat_die ends every rank with one line on
 * rank 0 and exit code 2 (collective: every rank calls it) */
void lat_die(const char *msg);
void lat_fill_random(const geom_t *g, cplx *v, uint64_t seed, uint64_t stream);
void lat_make_rhs(const geom_t *g, const params_t *p, cplx *b, int k);
void lat_make_gauge(gauge_t *G, const geom_t *g, const params_t *p);
/* self-test `name` (selftest.c): 0 passed, 1 a check failed, -1 no such test */
int lat_selftest(const geom_t *g, const params_t *p, const char *name);

/* hot loops get an AVX2+FMA clone beside the baseline one on x86-64 (ifunc) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define LAT_FAST_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LAT_FAST_CLONES
#endif
#define LAT_FAST LAT_FAST_CLONES

/* Inside an OpenMP parallel region: the calling thread's contiguous share
 * [*lo, *hi) of n items (each thread streams its own part of the arrays)
 * and, if id is given, its number; returns the number of threads. */
static inline int lat_share(int n, int *lo, int *hi, int *id_out)
{
#ifdef _OPENMP
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    int nt = 1, id = 0;
#endif
    *lo = (int)((long)n * id / nt);
    *hi = (int)((long)n * (id + 1) / nt);
    if (id_out)
        *id_out = id;
    return nt;
}

#endif
