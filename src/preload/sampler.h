/* SPDX-License-Identifier: BSD-3-Clause */
/* Access samplers of the profiler (sampler.c, sampler_perf.c, sampler_damon.c,
 * sampler_refs.c with sampler_writes.c;
 * the portable one in sampler_portable.c, at the end):
 * chosen at run time, each attributing what it observes
 * to the sites of the live blocks of the interposer's table.
 *
 *   pebs  Intel PEBS: cpu/mem-loads,ldlat=3/ and cpu/mem-stores/ with
 *         precise_ip, sampled addresses in PERF_RECORD_SAMPLE records
 *   ibs   AMD IBS op (ibs_op PMU): PERF_SAMPLE_ADDR, else the raw IbsDcLinAd
 *   spe   Arm SPE (arm_spe_N PMU): data virtual address packets of the AUX area
 *   damon DAMON's sysfs admin interface with vaddr operations: regions'
 *         nr_accesses, read through a `stat` scheme's tried regions
 *   refs  the kernel's referenced bits per mapping: /proc/self/smaps,
 *         cleared through /proc/self/clear_refs (sampler_refs.c)
 *
 * One sample of pebs/ibs/spe is one sampled memory operation: it stands for
 * `period` operations (the event's sample period). One damon sample is "one
 * page of the site was seen accessed in one sampling interval", like the
 * portable sampler's and refs', so its period is page size / 64. */
#ifndef HM_SAMPLER_H
#define HM_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "preload.h"

#define HM_SMP_FIX 16u /* fixed-point scale of credited weights (all samplers) */

typedef enum _hm_smp_kind_e {
  HM_SMP_NONE = 0,
  HM_SMP_PEBS,
  HM_SMP_IBS,
  HM_SMP_SPE,
  HM_SMP_DAMON,
  HM_SMP_PORTABLE,
  HM_SMP_REFS,
} _hm_smp_kind_t;

const char *_hm_smp_kind_name(_hm_smp_kind_t k);
/* HM_SMP_NONE for an unknown name ("auto" included). */
_hm_smp_kind_t _hm_smp_kind_parse(const char *name);

/* What a credit counts (the credit function's last argument): a load, a
 * store, or a page touched in the refs sampler's first or second short
 * window (how touched pages grow after a clear, not an access count). */
#define HM_SMP_LOAD 0
#define HM_SMP_STORE 1
#define HM_SMP_SHORT 2
#define HM_SMP_SHORT2 3
#define HM_SMP_FIRST 4 /* pages a live block touched first (refs sampler) */
/* Where credits go: site, weight x HM_SMP_FIX, what (HM_SMP_LOAD...). */
typedef void (*_hm_smp_credit_fn)(void *arg, uint32_t site, uint64_t weight_fix, int what);
/* Where a sampler's findings go; every drain takes one. pair, when not
 * NULL, hears that a pair of the refs sampler's short windows has ended,
 * with ratio = w1 / (w2 - w1) (0 when the second window was no longer):
 * what turns a site's growth from the first window to the second into
 * the sweep pages of the first. The receiver reads each site's pair from
 * its credits since the last one. */
typedef struct _hm_smp_sink_s {
  _hm_smp_credit_fn credit;
  void (*pair)(void *arg, double ratio);
  void *arg;
} _hm_smp_sink_t;

/* Live blocks, sorted by address, for attribution (a snapshot of the block
 * table taken by the sampler's thread before it attributes a batch). */
typedef struct _hm_smp_span_s {
  uintptr_t lo, hi;
  uint32_t site;
  /* A freed block's share of the interval it lived in, x 2^-16 (refs
   * sampler, _hm_smp_bury); 0: the whole interval (a live block). */
  uint32_t lived;
} _hm_smp_span_t;
typedef struct _hm_smp_spans_s {
  _hm_smp_span_t *v;
  size_t n, cap;
} _hm_smp_spans_t;
/* Refills s from the table (blocks with a site). */
int _hm_smp_spans_snapshot(_hm_smp_spans_t *s, _hm_pl_table_t *t);
/* Sorts v[0..n) by address (after filling it by hand: tests). */
void _hm_smp_spans_sort(_hm_smp_spans_t *s);
/* The span containing addr, or NULL. Cost: a binary search. */
const _hm_smp_span_t *_hm_smp_spans_find(const _hm_smp_spans_t *s, uintptr_t addr);
void _hm_smp_spans_free(_hm_smp_spans_t *s);

typedef int (*_hm_smp_open_fn)(void *attr, int pid, int cpu, int group_fd);

typedef struct _hm_smp_cfg_s {
  const char *root;        /* filesystem root of every /sys access */
  uint64_t period_us;      /* drain interval; DAMON's sampling interval */
  uint64_t pmu_period;     /* memory operations per PMU sample (0: default) */
  int pid;                 /* the process profiled (getpid()) */
  _hm_smp_open_fn open;    /* NULL: _hm_prim_perf_open (tests pass a fake) */
  void (*tick)(void);      /* once a period on the sampler's thread; NULL: none */
} _hm_smp_cfg_t;

/* ---- PMU samplers (sampler_perf.c) ---- */
typedef struct _hm_smp_perf_s _hm_smp_perf_t;
/* Builds the events of kind k from the sysfs tree under cfg->root and
 * opens them once on this thread to see that the kernel accepts them.
 * 0, or a negative errno and a one-line reason in why. probed gets a JSON
 * object describing what was found (always written). */
int _hm_smp_perf_probe(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t k, char *probed, size_t plen,
                       char *why, size_t wlen);
/* Opens the events on every allowed CPU (inherited by threads created
 * later) and maps their buffers. */
int _hm_smp_perf_start(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t k, _hm_smp_perf_t **out,
                       char *why, size_t wlen);
/* Reads what the buffers hold and credits it; returns samples credited. */
uint64_t _hm_smp_perf_drain(_hm_smp_perf_t *p, const _hm_smp_spans_t *spans,
                            const _hm_smp_sink_t *sink);
/* JSON members (leading comma) for the profile header's sampler object. */
void _hm_smp_perf_describe(const _hm_smp_perf_t *p, char *out, size_t len);
double _hm_smp_perf_period(const _hm_smp_perf_t *p);
void _hm_smp_perf_stop(_hm_smp_perf_t *p);

/* One decoded PMU sample. */
typedef struct _hm_smp_sample_s {
  uint64_t addr;  /* data address, 0 when the sample has none */
  uint32_t pid, tid;
  uint64_t weight; /* latency (PERF_SAMPLE_WEIGHT) */
  uint64_t data_src;
  int store;       /* -1 unknown, 0 load, 1 store */
} _hm_smp_sample_t;
typedef void (*_hm_smp_sample_fn)(void *arg, const _hm_smp_sample_t *s);
/* Parses the PERF_RECORD_* records in [tail, head) of a ring of size bytes
 * (a power of two) written for sample_type; IBS raw data is decoded when
 * ibs is set. Returns the records seen, or -EINVAL for a malformed record
 * (the rest is skipped). lost accumulates PERF_RECORD_LOST counts. */
long _hm_smp_perf_parse(const uint8_t *ring, uint64_t size, uint64_t tail, uint64_t head,
                        uint64_t sample_type, int ibs, _hm_smp_sample_fn fn, void *arg,
                        uint64_t *lost);
/* Decodes Arm SPE packets: each record's data virtual address (address
 * packet index 2) and op type, delivered at its END or TIMESTAMP packet.
 * Returns records delivered, -EINVAL on an unknown header. */
long _hm_smp_spe_decode(const uint8_t *buf, size_t len, _hm_smp_sample_fn fn, void *arg);
/* Sets the bits of an event string ("event=0xcd,umask=0x1,ldlat=3") in
 * config[0..2] from the PMU's format directory (devices/PMU/format). */
int _hm_smp_perf_encode(const char *root, const char *pmu, const char *event,
                        uint64_t config[3], char *why, size_t wlen);

/* ---- DAMON (sampler_damon.c) ---- */
typedef struct _hm_smp_damon_s _hm_smp_damon_t;
/* 0 when the admin interface is there, unused (nr_kdamonds 0) and offers
 * vaddr operations; leaves nr_kdamonds at 0. */
int _hm_smp_damon_probe(const _hm_smp_cfg_t *cfg, char *probed, size_t plen, char *why,
                        size_t wlen);
int _hm_smp_damon_start(const _hm_smp_cfg_t *cfg, _hm_smp_damon_t **out, char *why,
                        size_t wlen);
/* Asks for the tried regions, reads them and credits the overlaps. */
uint64_t _hm_smp_damon_drain(_hm_smp_damon_t *d, const _hm_smp_spans_t *spans,
                             const _hm_smp_sink_t *sink);
void _hm_smp_damon_describe(const _hm_smp_damon_t *d, char *out, size_t len);
void _hm_smp_damon_stop(_hm_smp_damon_t *d);

/* ---- Referenced bits (sampler_refs.c) ---- */
typedef struct _hm_smp_refs_s _hm_smp_refs_t;
/* 0 when smaps reads and clear_refs takes a clear (cfg->root's /proc). */
int _hm_smp_refs_probe(const _hm_smp_cfg_t *cfg, char *probed, size_t plen, char *why,
                       size_t wlen);
int _hm_smp_refs_start(const _hm_smp_cfg_t *cfg, _hm_smp_refs_t **out, char *why,
                       size_t wlen);
/* Reads the referenced bytes of every mapping, credits them and clears
 * the bits, then reads them twice more: at once (credited as
 * HM_SMP_SHORT) and when three times as long has passed (HM_SMP_SHORT2).
 * Returns samples (touched pages x intervals) credited. */
/* respan, when not NULL, refills spans before each short window: the
 * blocks live then and those freed since, each whole. */
uint64_t _hm_smp_refs_drain(_hm_smp_refs_t *r, _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink, void (*respan)(_hm_smp_spans_t *));
/* Each anonymous mapping's resident bytes at a drain, sorted by address:
 * what the next drain's resident bytes grew by are the interval's first
 * touches (refs sampler). */
typedef struct _hm_smp_rss_s {
  uint64_t *v; /* lo, hi, rss: three words a mapping */
  size_t n, cap;
} _hm_smp_rss_t;
/* A walk over smaps text: what it credits to, and what it found. */
typedef struct _hm_smp_refs_walk_s {
  const _hm_smp_spans_t *spans;
  const _hm_smp_sink_t *sink;
  int what;            /* the credits' kind: HM_SMP_LOAD or HM_SMP_SHORT */
  size_t page;
  uint64_t total;      /* weight credited x HM_SMP_FIX */
  uint64_t mappings;   /* mappings read */
  uint64_t anon_pages; /* referenced pages of anonymous mappings */
  /* NULL, or the last drain's resident bytes: a live block's pages first
   * touched since are not credited (see sampler_refs.c) */
  const _hm_smp_rss_t *prev;
  _hm_smp_rss_t *cur; /* NULL, or filled with this read's */
  uint64_t fresh_pages; /* first touches of live blocks (not loads) */
} _hm_smp_refs_walk_t;
/* Credits the mappings of smaps text (modified: lines are cut at their
 * newlines) to the spans they hold, by overlap. */
void _hm_smp_refs_credit_text(char *text, size_t len, _hm_smp_refs_walk_t *w);
/* How long the thread sleeps before the next drain: the configured
 * interval, stretched to keep the sampler's duty cycle down. */
uint64_t _hm_smp_refs_interval_ns(const _hm_smp_refs_t *r);
/* What the program's threads paid to set accessed bits again (estimated:
 * referenced pages x the touch cost measured at start). */
uint64_t _hm_smp_refs_touch_cost_ns(const _hm_smp_refs_t *r);
/* Pairs of short windows read so far (0: none, or another sampler). */
uint64_t _hm_smp_refs_shorts(const _hm_smp_refs_t *r);
/* When the referenced bits were last cleared (_hm_prim_now_ns). */
uint64_t _hm_smp_refs_since(const _hm_smp_refs_t *r);
void _hm_smp_refs_describe(const _hm_smp_refs_t *r, char *out, size_t len);
void _hm_smp_refs_stop(_hm_smp_refs_t *r);
/* Counts the writes to [base, base + len), a block's own mapping (any
 * thread). */
void _hm_smp_refs_track(_hm_smp_refs_t *r, void *base, size_t len);

/* Of n pages a drain found touched (or written), those touched again
 * since an earlier drain cleared (or protected) them, estimated: the pages
 * beyond the most an earlier drain found (*peak, updated) are first
 * touches, which cost the program its own page fault, not the sampler's
 * (a run's initialisation). */
static inline uint64_t _hm_smp_again(uint64_t n, uint64_t *peak) {
  uint64_t again = n < *peak ? n : *peak;
  if (n > *peak) *peak = n;
  return again;
}

/* ---- Written pages (sampler_writes.c), for the refs sampler ---- */
typedef struct _hm_smp_wr_s _hm_smp_wr_t;
/* 0, or a negative errno and why in one line (stores not told apart). */
int _hm_smp_wr_open(_hm_smp_wr_t **out, char *why, size_t wlen);
/* Registers a block's own mapping: its pages written count from now on.
 * Any thread; cost: one ioctl. w may be NULL. */
void _hm_smp_wr_track(_hm_smp_wr_t *w, void *base, size_t len);
/* Credits each span's pages written since the last drain as HM_SMP_STORE
 * and protects them again; returns the pages. */
/* now, before: the mappings' Rss at this drain and the last (NULL: a
 * live block's first touches count as writes too). */
uint64_t _hm_smp_wr_drain(_hm_smp_wr_t *w, const _hm_smp_spans_t *spans, const _hm_smp_sink_t *sink,
                          const _hm_smp_rss_t *now, const _hm_smp_rss_t *before);
/* Bytes the mapping holding [lo, hi) gained from before to now: all its
 * Rss when before has no mapping of its bounds; 0 when now has none. */
uint64_t _hm_smp_rss_grown(const _hm_smp_rss_t *now, const _hm_smp_rss_t *before, uintptr_t lo,
                           uintptr_t hi);
/* The measured cost of one write-protect fault (ns); the faults the
 * program took (estimated: sampler_writes.c), all drains or the last. */
double _hm_smp_wr_fault_ns(const _hm_smp_wr_t *w);
uint64_t _hm_smp_wr_faults(const _hm_smp_wr_t *w, int last);
/* Header JSON members (leading comma); w NULL: why stores are not told
 * apart. */
void _hm_smp_wr_describe(const _hm_smp_wr_t *w, const char *why, char *out, size_t len);

/* ---- Selection and the sampler thread (sampler.c) ---- */
/* Chooses the sampler for want (auto, pebs, ibs, spe, damon, refs,
 * portable): auto takes the first of pebs, ibs, spe, damon, refs whose
 * probe succeeds, else portable. A named sampler that is unavailable is an error (-ENOTSUP and
 * why). probed gets {"pebs":{...},...}, what each probe found. */
int _hm_smp_select(const _hm_smp_cfg_t *cfg, const char *want, _hm_smp_kind_t *kind,
                   char *probed, size_t plen, char *why, size_t wlen);
/* Starts kind (pebs, ibs, spe, damon or refs) with a thread that drains it every
 * period_us into fn, attributing to the live blocks of table. */
int _hm_smp_run(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t kind, _hm_pl_table_t *table,
                const _hm_smp_sink_t *sink, char *why, size_t wlen);
/* Stops the thread after a last drain. Idempotent. */
void _hm_smp_halt(void);
/* A freed block's own mapping [base, base + len) (user bytes [lo, hi) of
 * site), kept mapped until the refs sampler's next drain has credited its
 * referenced pages, which then unmaps it: 1 when taken (the caller must
 * not unmap it), 0 when the caller unmaps it now (another sampler, none
 * running, a forked child, or HM_SMP_GRAVE_BYTES already waiting). */
#define HM_SMP_GRAVE 256
#define HM_SMP_GRAVE_BYTES ((size_t)512 << 20)
int _hm_smp_bury(void *base, size_t len, uintptr_t lo, uintptr_t hi, uint32_t site,
                 uint64_t born_ns);
/* Bytes of the mappings _hm_smp_bury keeps until the next drain. */
size_t _hm_smp_grave_bytes(void);
/* Accesses one sample stands for, and header JSON members (leading comma). */
double _hm_smp_period(void);
uint64_t _hm_smp_cpu_ns(void); /* the sampler thread's CPU time */
/* What sampling cost the program's own threads (refs: accessed bits set
 * again after each clear); 0 for the others. */
uint64_t _hm_smp_program_cost_ns(void);
void _hm_smp_describe(char *out, size_t len);
/* A block's own mapping was made (profile mode, route.c): the refs
 * sampler counts its written pages. Any thread; nothing when another
 * sampler or none runs, or in a forked child. */
void _hm_smp_track_writes(void *base, size_t len);


/* ---- The portable sampler (sampler_portable.c): page protection ---- */
#define HM_SMP_PAGES_PER_BLOCK 8u /* pages armed per block and period */
/* Installs the SIGSEGV handler and starts the thread that arms pages of
 * the live blocks of table every cfg->period_us, crediting faults to fn. */
int _hm_smp_portable_start(const _hm_smp_cfg_t *cfg, _hm_pl_table_t *table,
                           const _hm_smp_sink_t *sink, char *why, size_t wlen);
/* Stops the thread (waits up to 2 s for it); idempotent. */
void _hm_smp_portable_stop(void);
/* Restores the armed pages in [lo, hi) (a block being released). */
void _hm_smp_portable_disarm(uintptr_t lo, uintptr_t hi);
/* The sigaction hook's SIGSEGV call while the handler is in: see
 * _hm_pl_prof_segv_action. */
int _hm_smp_portable_segv_action(const struct sigaction *act, struct sigaction *old);
typedef struct _hm_smp_portable_stats_s {
  uint64_t periods, armings, faults, fault_cost_ns, cpu_ns;
  int handler_lost;
} _hm_smp_portable_stats_t;
void _hm_smp_portable_stats(_hm_smp_portable_stats_t *out);

#endif
