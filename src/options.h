/* SPDX-License-Identifier: BSD-3-Clause */
/* The one table of runtime settings. Each row is an option whose name, in
 * upper case with a HETMEM_ prefix, is also its environment variable. Later
 * concerns add rows here, never a getenv() of their own. */
#ifndef HM_OPTIONS_H
#define HM_OPTIONS_H

#include <stdint.h>

typedef enum _hm_opt_kind_e {
  HM_OPTK_STR,   /* free text */
  HM_OPTK_SIZE,  /* bytes, with suffixes */
  HM_OPTK_COUNT, /* non-negative integer */
  HM_OPTK_BOOL,  /* 1/0, true/false, on/off, yes/no */
  HM_OPTK_DURATION, /* microseconds: 500us, 10ms, 1.5s (a bare number is us) */
} _hm_opt_kind_t;

/* X(ID, name, kind, default, help) */
#define HM_OPTION_TABLE(X)                                                                    \
  X(FSROOT, fsroot, STR, "/", "filesystem root for every /sys and /proc read")               \
  X(STORAGE, storage, STR, "", "storage-tier directory (empty: $TMPDIR, else /var/tmp)")     \
  X(FAST_BUDGET, fast_budget, SIZE, "0", "fast-tier (DRAM) budget per process; 0 = none")    \
  X(BUDGET_OVER_RAM, budget_over_ram, BOOL, "0",                                            \
    "allow a pager budget above this machine's physical memory (refused by default: a typo "  \
    "such as 1T would take the node's memory)")                                               \
  X(FETCH_UNIT, fetch_unit, SIZE, "256KiB", "pager fetch unit (64KiB..2MiB)")               \
  X(IO_DEPTH, io_depth, COUNT, "32", "io_uring queue depth for storage-tier I/O")           \
  X(PREFETCH, prefetch, STR, "auto", "pager prefetch policy: auto, off, sequential")        \
  X(HANDLER_THREADS, handler_threads, COUNT, "0",                                            \
    "pager fault-handling threads (0: chosen by the pager)")                                  \
  X(BUDGET_PROCESS, budget_process, BOOL, "0",                                              \
    "the fast budget bounds the process's anonymous memory, not only the pager's: its cache "  \
    "gets what the rest of the process leaves (measured every 100 ms; hetmem run sets it)")    \
  X(PAGER_FILL, pager_fill, STR, "anon",                                                    \
    "pager fill mode: anon (copied into anonymous memory: the faster sweep) or memfd "        \
    "(mapped from a memfd: CLOCK sees resident data used, fewer re-reads at random access)")   \
  X(COPIER, copier, BOOL, "1",                                                               \
    "pager: install prefetched units on a thread beside each handler (2+ CPUs)")             \
  X(ALLOC_THRESHOLD, alloc_threshold, SIZE, "1MiB",                                          \
    "smallest allocation the interposer serves from a tier")                                  \
  X(STATS, stats, STR, "", "file the interposer writes its statistics to at exit")          \
  X(STORAGE_FULL, storage_full, STR, "error",                                               \
    "when the storage tier cannot back a large allocation: error (the allocation fails, "     \
    "one line on stderr) or fallback (served from DRAM beyond the budget, counted in stats)")  \
  X(PROFILE, profile, STR, "", "allocation-site profile path template (%h %r %p); on if set") \
  X(PROFILE_DEPTH, profile_depth, COUNT, "8", "frames recorded per allocation site (1..64)")   \
  X(SAMPLER, sampler, STR, "auto", "access sampler while profiling: auto, pebs, ibs, spe, damon, refs, portable, none") \
  X(SAMPLE_PERIOD, sample_period, DURATION, "10ms",                                           \
    "access sampler period: 10ms, 500us, 1s (a bare number is microseconds)")                 \
  X(PLACEMENT, placement, STR, "", "compact placement table (flat/hybrid modes); on if set") \
  X(PLACE_MODE, place_mode, STR, "flat", "flat (pager gets a minimal cache) or hybrid")       \
  X(HUGE_PAGES, huge_pages, BOOL, "1",                                                       \
    "flat/hybrid: transparent huge pages on large DRAM and NUMA-tier blocks")                 \
  X(STATICS, statics, BOOL, "1",                                                             \
    "cache mode: move large zero-initialized static arrays (.bss) into the pager")          \
  X(FORK_COPY, fork_copy, SIZE, "2GiB",                                                     \
    "a child forked without exec gets a copy of its parent's blocks in the pager, made at "  \
    "fork, when they add up to at most this (and half the memory available); 0: never")      \
  X(SMALL_BLOCKS, small_blocks, BOOL, "0",                                                   \
    "cache mode: serve allocations below the threshold (up to 1 MiB) from pager memory "      \
    "too, so that the budget pages them; a forked child cannot use its parent's")             \
  X(AUTO_FAST, auto_fast, STR, "",                                                          \
    "flat/hybrid: allocations of MIN[:MAX] bytes that match no placement site go to the "    \
    "fastest tier (memkind's AUTO_HBW_SIZE); empty: off")                                     \
  X(HBW_NODES, hbw_nodes, STR, "",                                                          \
    "NUMA nodes that are high-bandwidth memory whatever the firmware says (e.g. 1 or 4-7); "  \
    "they rank first; empty: $MEMKIND_HBW_NODES, else discovered")                            \
  X(VERBOSE, verbose, BOOL, "0", "print diagnostics to stderr")

typedef enum _hm_opt_id_e {
#define HM__OPT_ENUM(id, name, kind, def, help) HM_OPT_##id,
  HM_OPTION_TABLE(HM__OPT_ENUM)
#undef HM__OPT_ENUM
      HM_OPT__COUNT
} _hm_opt_id_t;

#define HM_OPT_VALUE_MAX 4096

typedef enum _hm_opt_origin_e { HM_ORIGIN_DEFAULT, HM_ORIGIN_ENV, HM_ORIGIN_SET } _hm_opt_origin_t;

typedef struct _hm_options_s {
  char text[HM_OPT__COUNT][HM_OPT_VALUE_MAX];
  uint64_t num[HM_OPT__COUNT];
  _hm_opt_origin_t origin[HM_OPT__COUNT];
} _hm_options_t;

struct hm_ctx_s;

/* Fills opts with defaults, then the environment. Bad environment values are
 * reported through ctx and leave the default in place (the run goes on). */
int _hm_options_init(struct hm_ctx_s *ctx, _hm_options_t *opts);
const char *_hm_opt_str(const struct hm_ctx_s *ctx, _hm_opt_id_t id);
uint64_t _hm_opt_u64(const struct hm_ctx_s *ctx, _hm_opt_id_t id);

#endif
