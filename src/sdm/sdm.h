/* SPDX-License-Identifier: BSD-3-Clause */
/* Internals of the pager (src/sdm/). See pager.c for the design. */
#ifndef HM_SDM_H
#define HM_SDM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "internal.h"
#include "prim/prim.h"

#define HM_SDM_PAGE 4096u
#define HM_SDM_MAX_UNIT_PAGES 512u /* 2 MiB / 4 KiB */
#define HM_SDM_BITMAP_WORDS (HM_SDM_MAX_UNIT_PAGES / 64u)

/* Unit states. */
enum { HM_U_NONE = 0, HM_U_FILLING = 1, HM_U_RES = 2, HM_U_BUSY = 3 };
/* Unit flags. */
#define HM_UF_ONDISK 0x01u /* the backing file holds data for it (else: zeros) */
#define HM_UF_RANDOM 0x02u /* advised random: no prefetch, page-sized fills */
#define HM_UF_SEQ 0x04u    /* advised sequential: a large window from the start */
#define HM_UF_SEEN 0x08u   /* filled at least once (counted in the footprint) */
#define HM_UF_OUT 0x10u    /* evicted since its last fill: out_at is when */
#define HM_UF_MRU_OUT 0x20u /* ...and evicted first, as left behind by a stream */
/* Heat, 0-3: how often in a row it came back soon after CLOCK evicted it
 * (evict.c, hm__judge_refill); its slot gets as many extra turns. */
#define HM_UF_HEAT_SHIFT 6
#define HM_UF_HEAT (3u << HM_UF_HEAT_SHIFT)
/* Unit density (_hm_sdm_unit_t.dense). */
#define HM_DENSE_SEEN 0x80u
#define HM_DENSE_CREDITS 0x7fu

typedef struct _hm_sdm_unit_s {
  uint8_t state;
  uint8_t flags;
  uint16_t behind; /* how far behind its stream it was when queued to be evicted first */
  /* wp_sync: its write history (evict.c, hm__learn_dirty): 0-3, from 2
   * on the next fill is taken as dirty and mapped unprotected. */
  uint8_t wrote;
  /* Whole-unit refills it may still take (HM_DENSE_CREDITS, fault.c,
   * hm__dense_back), and HM_DENSE_SEEN once a stay of it filled fast at
   * random (evict.c, hm__learn_dense). */
  uint8_t dense;
  /* A fault was parked on it while it was BUSY (fault.c). hm__see_done
   * (evict.c) wakes a unit it saw only when this is set, and clears it;
   * the other BUSY paths wake always, so a flag left from them costs at
   * most one needless wake. */
  uint8_t waits;
  int32_t slot; /* index into the pager's slots while FILLING/RES/BUSY, else -1 */
  uint32_t out_at; /* the pager's fill count when it was last evicted (HM_UF_OUT) */
} _hm_sdm_unit_t;

struct _hm_sdm_region_s;

/* A resident (or filling) unit. */
typedef struct _hm_sdm_slot_s {
  struct _hm_sdm_region_s *reg;
  uint32_t unit;
  uint8_t used;
  uint8_t ref;        /* faulted on since the clock hand last passed */
  uint8_t passed;     /* prefetched, untouched, and passed once by the hand */
  uint8_t prefetched; /* prefetched and not touched yet */
  uint8_t mapped;     /* memfd mode: every filled page is mapped in the region */
  uint8_t dirty;      /* sync-WP mode: written since the last write-back */
  uint8_t pdirty;     /* ...or taken as written from its unit's history, unseen */
  uint8_t wpf;        /* sync-WP mode: took a WP fault since it was filled */
  uint8_t held;       /* anonymous mode: readahead trigger page held back: pool index + 1,
                         0x80 when it is the unit's last page (a backward stream), 0: none */
  uint8_t demoted;    /* queued for eviction first, behind a stream (reset when reused) */
  uint8_t mru_victim; /* being evicted as a unit left behind (HM_UF_MRU_OUT once out) */
  uint8_t heat;       /* CLOCK turns it may still skip unreferenced (HM_UF_HEAT) */
  uint8_t walk;       /* random fills that each began where the last one ended, in a row */
  uint8_t installing; /* anonymous mode: fills whose pages are being copied in (fault.c) */
  uint8_t pfills;     /* page fills of a sparse spell in flight (infl) */
  uint16_t walk_next; /* 1 + the page after the last random fill's run, 0: none */
  uint16_t pin;       /* being mapped or unprotected: not a victim yet */
  uint16_t nfilled;
  uint16_t rpages;    /* pages random demand fills brought in this residency */
  uint8_t whole;      /* filled whole as a dense unit come back (hm__dense_back) */
  uint8_t fast;       /* random fills filled it fast (fault.c, hm__rnd_dense) */
  uint32_t born;      /* the pager's page_tick when it was filled */
  int32_t next_free;
  uint32_t act_pos; /* index in the pager's dense list of slots in use */
  uint32_t dtag;    /* while demoted: the tag of its live ring entry (pager_int.h) */
  uint32_t dtick;   /* the pager's fill count when it was last demoted */
  uint64_t filled[HM_SDM_BITMAP_WORDS];
  /* Sparse spells (sparse.c), for units of at most 64 pages (the default
   * 256 KiB): a word each, where a bitmap of the largest unit would double
   * the slot table (charged to the budget). */
  uint64_t seen; /* pages filled when the hand last passed */
  uint64_t infl; /* pages page fills are reading (pfills) */
} _hm_sdm_slot_t;

typedef struct _hm_sdm_region_s {
  char *base;  /* what the application sees, registered with the uffd */
  char *alias; /* memfd mode: unregistered second view the pager fills through */
  size_t len;
  uint32_t nunits;
  int memfd;   /* -1 in anonymous mode */
  int file;    /* backing file, O_DIRECT, unlinked */
  _hm_sdm_unit_t *units; /* mmap'd (never malloc: see pager.c) */
  size_t units_bytes;
  int busy; /* operations in flight on it (pager lock) */
  int dead;
  /* Prefetch accuracy, per region (pager lock): resolved prefetches and the
   * used ones among them in the current epoch, and the window limit. */
  uint32_t pf_issued, pf_used, pf_limit;
  /* Random fills (fault.c, hm__rnd_*): the pages a random miss reads from
   * its page (1, 2 or 4), learned from how often the page right after a
   * random fill faults next; the epoch's fills, such faults, and epochs
   * counted (pager lock). */
  uint32_t rnd_fills, rnd_short;
  uint16_t rnd_npg, rnd_epoch;
  /* How random its misses were lately: +1 per miss classified random, -4
   * per miss along a trend, within 0..16; at 8 or more a thread's first
   * miss in the region, which has no history yet, fills as random. */
  uint8_t rnd_score;
  /* wp_sync (evict.c, hm__learn_dirty): whether a unit written in one
   * residency takes a WP fault in its next watched one (+1) or is clean
   * (-2), within -16..16; below 0 no unit of the region is guessed dirty. */
  int8_t guess_score;
  /* Units just behind a stream that are left to CLOCK, not evicted first:
   * spans this region's streams swept again soon (hm__judge_refill). */
  uint32_t keep_behind;
  uint32_t seen_units; /* units filled at least once (HM_UF_SEEN) */
  /* Where the next stream began (a unit's address in the application's
   * view) after a stream last reached this region's end, 0: not known. An
   * address, not a pointer: the region there may have been unmapped since,
   * and one mapped there later is looked up afresh (pager lock). */
  uint64_t succ_addr;
  uint64_t bytes_read; /* read from its file (pager lock; stats.c) */
  /* Sparse sweeps (sparse.c): a unit refilled whole is now and then
   * watched for six stays, filled page by page; when together they used
   * few of its pages, and those pages of the region fit the cache, the
   * region fills page by page (sparse) for a while (pager lock). */
  uint64_t probe_bits[HM_SDM_BITMAP_WORDS]; /* pages the watched unit's stays used so far */
  uint32_t probe;       /* 1 + the unit watched, 0: none */
  uint32_t probe_since; /* the pager's fill count when the watch began or a stay ended */
  uint32_t probe_wait;  /* refills of the region until the next watch */
  uint32_t sparse_left; /* page fills before sparse filling is checked again */
  uint32_t sparse_ok, sparse_bad; /* this spell's stays that used few pages, many */
  uint8_t probe_stays;  /* stays of the watched unit seen */
  uint8_t probe_backoff; /* watches that found no sparse sweep, in a row (log2 of the wait) */
  uint8_t sparse;       /* filling page by page */
} _hm_sdm_region_t;

/* Per-thread, per-region stream detector (prefetch.c). */
typedef struct _hm_sdm_stream_s {
  int tid;
  const void *reg;
  int64_t last;
  int64_t first;   /* where its current pass began: a fault there is a new pass */
  int64_t hist[8]; /* last fault deltas, in units */
  uint8_t n, pos;
  uint32_t window; /* units ahead to prefetch, adaptive */
  int64_t next_pf; /* first unit not yet requested along the stream */
  int64_t trend;   /* the stride last found, 0 if none */
  uint64_t stamp;
  /* Its requests reached the end of its region (_hm_sdm_pf_end): the
   * thread's next miss that starts a stream elsewhere is what followed. */
  uint8_t ended;
  /* The last classification was random (a full history of long jumps):
   * kept for the faults that carry no delta of their own (a second fault
   * on the unit of the last one, like the two pages a 4 KiB block that is
   * not page-aligned spans), which must fill as randomly as the first. */
  uint8_t rnd;
} _hm_sdm_stream_t;

#define HM_SDM_STREAMS 64

/* A stream that has not faulted in this many faults (of any stream) is idle:
 * it no longer takes a share of the window budget. */
#define HM_SDM_ACTIVE_FAULTS 64u

typedef struct _hm_sdm_pf_s {
  _hm_sdm_stream_t s[HM_SDM_STREAMS];
  uint64_t clock;
  /* Units that all active streams' windows may cover together (half of
   * the cache; 0: no shared limit), split evenly among the streams with a
   * trend that faulted in the last HM_SDM_ACTIVE_FAULTS faults. */
  uint32_t share;
} _hm_sdm_pf_t;

/* Result of feeding one fault to the detector. */
typedef struct _hm_sdm_pf_plan_s {
  int64_t stride; /* 0: no pattern */
  int64_t from;   /* first unit to prefetch */
  uint32_t count; /* how many units along the stride */
  int random;     /* no pattern over a full history: fetch single pages */
  int64_t trend;  /* the stream's stride when one was found, else 0 */
  uint32_t window;
  /* Readahead trigger (a unit of the plan, or -1): half a window before the
   * plan's end along a sequential stream. Where prefetched units are
   * installed without faulting (anonymous mode), the pager holds back one
   * page of this unit, so that the reader's touch of it is seen and the
   * next half window is requested while the rest is still ahead of it. */
  int64_t trigger;
  uint32_t pg; /* set by the pager: the faulting page within its unit */
  /* A miss that started a stream in another region right after this
   * thread's stream in that region ended: that region (the pager learns
   * this fault as its successor), else NULL. */
  const void *pred;
  /* The stream had already reached its region's end (_hm_sdm_pf_end): the
   * pager need not look for the end again on this pass. */
  uint8_t ended;
  /* The fault started the thread's first stream in the region: no history
   * to classify it by (the pager then goes by what the region showed). */
  uint8_t fresh;
  /* The thread's last fault in the region was on the same unit. */
  uint8_t same;
  /* Where the stream's current pass began: what lies between it and the
   * fault is what this pass went through. */
  int64_t first;
  /* The thread whose stream made the plan; -1: none (WILLNEED). */
  int tid;
} _hm_sdm_pf_plan_t;

/* Hints of a fault (bits): advised sequential; in a region whose misses
 * were mostly random (no new stream is started there); the reader stepped
 * over the unit just below (SKIP_BELOW) or above (SKIP_ABOVE) the fault (it
 * holds a prefetch the reader has not touched, where touches are seen, or
 * it has been absent for a cache-full of fills): a fault past it is not
 * the stream's progress. */
#define HM_SDM_PF_SEQ 1
#define HM_SDM_PF_RANDOM_REGION 2
#define HM_SDM_PF_SKIP_BELOW 4
#define HM_SDM_PF_SKIP_ABOVE 8
/* Feeds a fault at unit (hit: it landed on a prefetched unit) and returns
 * what to prefetch, capped at max_window units and at the stream's share of
 * pf->share. */
void _hm_sdm_pf_fault(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t unit, int hit,
                      int hints, uint32_t max_window, _hm_sdm_pf_plan_t *plan);
/* Moves a stream's last position (units mapped ahead of its reader). */
void _hm_sdm_pf_advance(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t unit);
/* The (tid, reg) stream's requests reached the end of its region: 1 the
 * first time since it last started over, else 0. */
int _hm_sdm_pf_end(_hm_sdm_pf_t *pf, int tid, const void *reg);
/* A successor prefetch: the plan for window units of reg from unit from,
 * and (tid, reg) made a forward stream whose reader is about to start
 * there, so that its first faults confirm the trend instead of starting it
 * over: 0. 1 when the thread is still reading the end of reg (its stream
 * is left as it is; the plan is still worth it), -EBUSY when it is in the
 * middle of reg (no plan). */
int _hm_sdm_pf_seed(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t from, uint32_t window,
                    _hm_sdm_pf_plan_t *plan);
/* Whether the (tid, reg) stream's reader has gone past unit since a plan
 * of its pass `first` along stride was made: the stream is on that pass,
 * still going the plan's way and not at its region's end, and its last
 * fault lies beyond unit. */
int _hm_sdm_pf_passed(const _hm_sdm_pf_t *pf, int tid, const void *reg, int64_t first,
                      int64_t stride, int64_t unit);
/* Forgets the streams of a region being unmapped. */
void _hm_sdm_pf_forget(_hm_sdm_pf_t *pf, const void *reg);
/* The bytes of the distinct regions that sequential streams faulted in
 * among the last HM_SDM_SWEEP_FAULTS faults (len(reg) gives a region's):
 * what the sweep going on now spans (STREAM's triad: its three arrays). */
#define HM_SDM_SWEEP_FAULTS 8u
uint64_t _hm_sdm_pf_swept(const _hm_sdm_pf_t *pf, uint64_t (*len)(const void *reg));

/* Guards (guard.c). */
/* -EINVAL with a message naming HETMEM_BUDGET_OVER_RAM when budget is more
 * than the machine's physical memory and ctx's budget_over_ram is off. */
int _hm_sdm_check_budget(hm_ctx_t *ctx, uint64_t budget);
/* An I/O error on a backing file that a synchronous retry did not cure:
 * one line on stderr, then the process ends as a failing mmap'd file would
 * end it, by SIGBUS (default action). Never returns. */
_Noreturn void _hm_sdm_io_fatal(const char *dir, int is_write, uint64_t off, size_t len,
                                int err);

#endif
