/* SPDX-License-Identifier: BSD-3-Clause */
/* The allocation-site profiler's internals, shared by prof.c (recording)
 * and prof_write.c (the profile at exit). */
#ifndef HM_PROF_H
#define HM_PROF_H

#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"
#include "preload.h"
#include "sampler.h"

#define HM_PF_SITES 16384u         /* site slots (slot 0 unused) */
#define HM_PF_CHUNK 65536u         /* events per buffer chunk */
#define HM_PF_SMALL 4096u          /* caller slots per thread */
#define HM_PF_POINTS 512           /* most points of a live series */

typedef struct _hm_pf_site_s {
  _Atomic uint64_t hash; /* 0 empty, 1 being filled */
  int n;
  uintptr_t a[HM_PL_MAX_DEPTH];
  /* Each frame's module, resolved when the site is first seen: a module
   * dlopen'ed and dlclose'd before the profile is written is still named
   * (the module table keeps its entry). -1: no module holds the frame. */
  int16_t mod[HM_PL_MAX_DEPTH];
  _Atomic uint64_t allocs, bytes, max_bytes, frees, lt_sum, lt_min, lt_max;
  _Atomic uint64_t loads, stores; /* x HM_SMP_FIX */
  _Atomic uint64_t firsts;        /* pages first touched (HM_SMP_FIRST), x HM_SMP_FIX */
  /* pages touched in the refs sampler's first and second short windows
   * (sampler_refs.c), x HM_SMP_FIX */
  _Atomic uint64_t shorts, shorts2;
  /* Each pair of short windows read on its own (hm__pair in prof.c; the
   * sampler thread's only): the counts at the last pair, pairs the site
   * was touched in, pairs that showed reuse, reused pages x HM_SMP_FIX */
  uint64_t at1, at2, reuse_fix;
  uint32_t pairs_seen, pairs_reused;
  int is_static; /* a static array's site (statics_place.c): its frame is its address */
} _hm_pf_site_t;

typedef struct _hm_pf_ev_s {
  uint64_t t;
  uint32_t site;
  uint32_t pad;
  int64_t delta;
} _hm_pf_ev_t;

typedef struct _hm_pf_chunk_s {
  struct _hm_pf_chunk_s *_Atomic next; /* linked by the owner, read by the writer */
  _Atomic size_t n;
  _hm_pf_ev_t ev[HM_PF_CHUNK];
} _hm_pf_chunk_t;

typedef struct _hm_pf_small_s {
  _Atomic uintptr_t ra;
  _Atomic uint64_t count, bytes;
} _hm_pf_small_t;

typedef struct _hm_pf_tbuf_s {
  struct _hm_pf_tbuf_s *next; /* every thread's buffer, pushed once */
  _hm_pf_chunk_t *_Atomic head; /* set by the owner, read by the writer */
  _hm_pf_chunk_t *cur;
  _Atomic uint64_t other_count, other_bytes; /* small table full */
  /* small allocations of at least a quarter of the threshold: a program
   * whose arrays are just under it is told so (one writer: plain adds) */
  _Atomic uint64_t near_count, near_bytes;
  _hm_pf_small_t small[HM_PF_SMALL];
} _hm_pf_tbuf_t;

/* The profiler's state, shared by its recording (prof.c) and its writer
 * (prof_write.c); the access sampler's is its own (sampler.h). */
typedef struct _hm_pf_state_s {
  _hm_pl_prof_cfg_t cfg;
  char path_template[HM_PATH_MAX];
  char sampler_name[32];
  char probed[4096];
  char fsroot[HM_PATH_MAX];
  int precise; /* a sampler of sampler.c runs (pebs, ibs, spe, damon) */
  int portable; /* the portable sampler runs (sampler_portable.c) */
  size_t page;
  uint64_t t0;
  double start_unix;
  _hm_pf_site_t *sites;
  _Atomic uint32_t nsites_used;
  _Atomic uint64_t unsited_count, unsited_bytes;
  _hm_pf_tbuf_t *_Atomic threads;
  _Atomic int live_threads, max_threads;
} _hm_pf_state_t;

extern HM_PL_HIDDEN _hm_pf_state_t _hm_pf;

/* The most memory seen outside the sites while they held at least half
 * their most, read once more now (rest.c). */
uint64_t _hm_pf_rest_peak(void);

/* Writes the profile (prof_write.c); the sampler has stopped. */
void _hm_pf_write(void);

#endif
