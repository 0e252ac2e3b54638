/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's prefetcher: per-thread, per-region stream detection.
 *
 * A thread has up to HM__PER_REGION streams in one region: a loop walking
 * several arrays that share a region (static arrays in one .bss, a struct
 * of arrays in one allocation) faults in each in turn, and one stream per
 * (thread, region) read those alternating faults as random jumps (hm-
 * stream-static at 4x: 8% of faults found their unit read ahead, against
 * 97% with each array in a region of its own). A fault belongs to the
 * thread's stream there that it is near (HM__NEAR units of where it stands
 * or of what it requested); one near none starts another, unless the
 * thread's latest stream there reads as random or has found no trend in
 * several faults, or all are taken: then it is a jump of the latest, as
 * with one stream.
 *
 * Each stream keeps the last 8 fault deltas in units. A trend
 * is found Leap-style: a Boyer-Moore majority vote over the newest 2, then
 * 4, then 8 deltas; a delta that occurs in more than half of the window is
 * the stride (1 = sequential, k = strided, negative = backwards). Along a
 * trend the window doubles on every confirming fault, up to max_window, which
 * the pager lowers per region when prefetches go unused (accuracy =
 * used/issued). Without a trend the window halves, and a full history of
 * jumps longer than a unit marks the thread random, so that the pager
 * fetches single pages instead of whole units. Along a stream of stride +-1
 * every plan names a readahead trigger, the unit half a window before its
 * end (Linux's async readahead mark): a reader reaching it has half a window
 * still requested ahead, so the next half is read while it walks that, and
 * the device never idles at a window's end. The windows of all active
 * streams share half of the cache.
 * Successors: when a forward stream's requests reach its region's end, the
 * stream is marked ended; the same thread's next miss that starts a stream
 * in another region names that region (plan->pred), and the pager keeps the
 * miss as the region's successor. Next time the stream reaches the end, the
 * pager requests the successor's first window at once and seeds its stream
 * (_hm_sdm_pf_seed), so an application sweeping its arrays in the same
 * order every iteration finds each array's head already read, with no
 * demand miss and no window ramp-up at each array's start, and the device
 * reads the next array while the program computes on data in DRAM between
 * sweeps. Cost: O(64) per fault (the stream table is scanned), under the
 * pager lock that the fault path already holds. */
#include <errno.h>
#include <string.h>

#include "sdm/sdm.h"

static int64_t hm__majority(const _hm_sdm_stream_t *s, unsigned w) {
  int64_t cand = 0;
  unsigned cnt = 0;
  for (unsigned i = 0; i < w; i++) {
    int64_t d = s->hist[(s->pos + 8u - 1u - i) % 8u];
    if (cnt == 0) {
      cand = d;
      cnt = 1;
    } else if (d == cand) {
      cnt++;
    } else {
      cnt--;
    }
  }
  unsigned occ = 0;
  for (unsigned i = 0; i < w; i++)
    if (s->hist[(s->pos + 8u - 1u - i) % 8u] == cand) occ++;
  return occ * 2 > w ? cand : 0;
}

/* The unit half a window before the plan's last one, within the plan. */
static void hm__set_trigger(_hm_sdm_pf_plan_t *plan, uint32_t window) {
  if (plan->count == 0 || (plan->stride != 1 && plan->stride != -1)) return;
  int64_t k = (int64_t)plan->count - 1 - (int64_t)(window / 2);
  plan->trigger = plan->from + (k > 0 ? k : 0) * plan->stride;
}

/* A fault at unit inside the range already requested along the trend
 * continues the stream: units that arrived in between were mapped without
 * faulting (mapped ahead, or installed at once in anonymous mode), so the
 * gap is the stream's progress, not a jump. */
static int hm__continues(const _hm_sdm_stream_t *s, int64_t unit, int hints) {
  int64_t delta = unit - s->last;
  if (s->trend == 0 || delta == 0) return 0;
  /* The unit before the fault along the trend was prefetched and never
   * touched: the reader stepped over the window (a stride of the window
   * plus one), and taking that for progress kept a strided reader
   * sequential, reading a whole window of units per touch. */
  if (delta != s->trend && (hints & (s->trend > 0 ? HM_SDM_PF_SKIP_BELOW : HM_SDM_PF_SKIP_ABOVE)))
    return 0;
  return delta % s->trend == 0 && delta / s->trend > 0 &&
         delta / s->trend <= (s->next_pf - s->last) / s->trend;
}

#define HM__PER_REGION 4 /* streams of one thread in one region */
#define HM__NEAR 4       /* units around a stream that a fault joins it from */

/* How far unit is from stream c: 0 inside [where it stands, what it
 * requested], else the units outside, or from where its pass began (the
 * loop's next pass over that array starts there). */
static int64_t hm__distance(const _hm_sdm_stream_t *c, int64_t unit) {
  int64_t lo = c->last < c->next_pf ? c->last : c->next_pf;
  int64_t hi = c->last < c->next_pf ? c->next_pf : c->last;
  int64_t d = unit < lo ? lo - unit : unit > hi ? unit - hi : 0;
  int64_t f = unit < c->first ? c->first - unit : unit - c->first;
  return f < d ? f : d;
}

/* What the stream table holds for (tid, reg) at a fault. */
typedef struct hm__scan_s {
  _hm_sdm_stream_t *s;      /* the (tid, reg) stream the fault belongs to, or NULL */
  _hm_sdm_stream_t *old;    /* the least recently used entry */
  _hm_sdm_stream_t *latest; /* this thread's most recent stream */
  _hm_sdm_stream_t *here;   /* this thread's most recent stream in reg */
  _hm_sdm_stream_t *lru;    /* this thread's least recent stream in reg */
  uint32_t active;          /* this stream, and the others with a trend */
  unsigned mine;            /* this thread's streams in reg */
  unsigned trends;          /* how many of them have a trend */
} hm__scan_t;

/* Which of the thread's streams in the region a fault at unit joins (see
 * the top): the nearest within HM__NEAR, else none (a new one) or the
 * latest (a jump). */
static _hm_sdm_stream_t *hm__pick(const hm__scan_t *sc, _hm_sdm_stream_t *near, int hints) {
  /* in a mostly random region only a stream with a trend draws faults in:
   * a stale patternless one would take random faults without the history
   * that reads them as random (each then filled a whole unit) */
  if (near && (near->trend != 0 || !(hints & HM_SDM_PF_RANDOM_REGION))) return near;
  _hm_sdm_stream_t *h = sc->here;
  if (!h) return NULL;
  if (h->rnd || (hints & HM_SDM_PF_RANDOM_REGION)) return h;
  /* No stream here has a trend: while all are fresh, another may be the
   * next array of a loop; after that, far faults are one stream's jumps,
   * and four of them read as random. A new stream once all are taken
   * replaces the thread's least recent one here (the arrays of an earlier
   * loop), not the latest. */
  if (!sc->trends && (h->n >= 1 || sc->mine >= HM__PER_REGION)) return h;
  return NULL;
}

/* One of the thread's streams in the region, counted into sc; *near and
 * *best follow the nearest. */
static void hm__scan_mine(hm__scan_t *sc, _hm_sdm_stream_t *c, int64_t unit,
                          _hm_sdm_stream_t **near, int64_t *best) {
  sc->mine++;
  sc->trends += c->trend != 0;
  if (!sc->here || c->stamp > sc->here->stamp) sc->here = c;
  if (!sc->lru || c->stamp < sc->lru->stamp) sc->lru = c;
  int64_t d = hm__distance(c, unit);
  if (d < *best) *best = d, *near = c;
}

/* The other streams with a trend that faulted lately: they share the
 * window budget with this one. */
static uint32_t hm__active(const _hm_sdm_pf_t *pf, const _hm_sdm_stream_t *s) {
  uint32_t n = 1;
  for (unsigned i = 0; pf->share && i < HM_SDM_STREAMS; i++) {
    const _hm_sdm_stream_t *c = &pf->s[i];
    n += c != s && c->reg && c->trend != 0 && pf->clock - c->stamp < HM_SDM_ACTIVE_FAULTS;
  }
  return n;
}

static void hm__scan(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t unit, int hints,
                     hm__scan_t *sc) {
  memset(sc, 0, sizeof *sc);
  sc->old = &pf->s[0];
  _hm_sdm_stream_t *near = NULL;
  int64_t best = HM__NEAR + 1;
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++) {
    _hm_sdm_stream_t *c = &pf->s[i];
    if (c->reg && c->tid == tid && (!sc->latest || c->stamp > sc->latest->stamp)) sc->latest = c;
    if (c->reg == reg && c->tid == tid) hm__scan_mine(sc, c, unit, &near, &best);
    if (c->stamp < sc->old->stamp) sc->old = c;
  }
  sc->s = hm__pick(sc, near, hints);
  if (!sc->s && sc->mine >= HM__PER_REGION) sc->old = sc->lru;
  sc->active = hm__active(pf, sc->s);
}

/* The thread's stream in reg that faulted last (the one the pager's
 * calls about "this stream" mean), or NULL. */
static const _hm_sdm_stream_t *hm__latest(const _hm_sdm_pf_t *pf, int tid, const void *reg) {
  const _hm_sdm_stream_t *s = NULL;
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++) {
    const _hm_sdm_stream_t *c = &pf->s[i];
    if (c->reg == reg && c->tid == tid && (!s || c->stamp > s->stamp)) s = c;
  }
  return s;
}

static _hm_sdm_stream_t *hm__latest_in(_hm_sdm_pf_t *pf, int tid, const void *reg) {
  const _hm_sdm_stream_t *s = hm__latest(pf, tid, reg);
  return s ? &pf->s[s - pf->s] : NULL; /* pf is ours to change */
}

/* Windows together cover at most pf->share units. Each stream sizing its
 * window alone let six streams (STREAM triad, 2 threads) at a 64 MiB budget
 * request 48 MiB ahead in a 54 MiB cache: CLOCK evicted prefetched units
 * before their reader came, and 1.3x the footprint was read per pass. */
static uint32_t hm__share_cap(const _hm_sdm_pf_t *pf, uint32_t max_window, uint32_t active) {
  if (pf->share && max_window > pf->share / active)
    max_window = pf->share / active > 2 ? pf->share / active : 2;
  return max_window;
}

/* A miss that starts a stream (a new one, or a jump off the trend) right
 * after this thread's stream in another region reached that region's
 * end: the pager learns it as what comes after that region. Hits are
 * left out: one inside a successor's window whose trigger page went
 * unseen reads as a jump, and would teach a point past the head; a wrong
 * guess is corrected at the next miss that it causes. */
static void hm__learn_pred(const hm__scan_t *sc, const void *reg, int64_t unit, int hit,
                           int hints, _hm_sdm_pf_plan_t *plan) {
  const _hm_sdm_stream_t *s = sc->s;
  int starts =
      !s || (unit != s->last && unit - s->last != s->trend && !hm__continues(s, unit, hints));
  /* Only the thread's latest stream: if it went on elsewhere after an end
   * (an array whose end went unseen), this miss follows that. The ended
   * stream itself jumping (forward past its requests; back to start a new
   * pass is handled below) learns nothing, and nor does a miss in the same
   * region: its end was taken as reached while units before it were still
   * to be read (a resident tail evicted before the reader came), and that
   * miss, read as another stream of the region, overwrote the successor
   * learned with the region itself, which is never prefetched (a sweep of
   * three arrays under TSan lost its successor for a pass, 1 run in 10). */
  if (!hit && starts && sc->latest && sc->latest->ended && sc->latest != s &&
      sc->latest->reg != reg) {
    sc->latest->ended = 0;
    plan->pred = sc->latest->reg;
  }
}

/* A new pass of s over its region (its first moved back, or a seeded
 * successor window): the thread's other streams there whose passes ended
 * are over. Left in place, a stale one took a fault of the live pass near
 * where it had stood (a restart near the end of the last pass), so the
 * live stream never saw the end and the region's successor was not
 * seeded for that pass (test_sdm_successor under TSan, 1 run in ~20).
 * Cost: one scan of the stream table. */
static void hm__drop_ended(_hm_sdm_pf_t *pf, const _hm_sdm_stream_t *s) {
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++) {
    _hm_sdm_stream_t *c = &pf->s[i];
    if (c != s && c->ended && c->reg == s->reg && c->tid == s->tid) memset(c, 0, sizeof *c);
  }
}

/* A first fault of (tid, reg): a new stream in the oldest entry, with a
 * plan at once when advised sequential or a prefetch hit. */
static void hm__stream_new(_hm_sdm_pf_t *pf, _hm_sdm_stream_t *s, int tid, const void *reg,
                           int64_t unit, int hit, int seq_hint, uint32_t max_window,
                           _hm_sdm_pf_plan_t *plan) {
  memset(s, 0, sizeof *s);
  s->tid = tid;
  s->reg = reg;
  s->last = s->first = unit;
  s->window = seq_hint ? max_window : 2;
  s->next_pf = unit + 1;
  s->stamp = pf->clock;
  plan->fresh = 1;
  if (seq_hint || hit) {
    plan->stride = 1;
    plan->from = unit + 1;
    plan->count = s->window;
    s->next_pf = unit + 1 + s->window;
    hm__set_trigger(plan, s->window);
  }
}

/* Records the fault's delta and finds the trend over the history. */
static int64_t hm__record(_hm_sdm_stream_t *s, int64_t unit, int64_t delta, int hit,
                          int hints) {
  int seq_hint = hints & HM_SDM_PF_SEQ;
  if (hm__continues(s, unit, hints)) delta = s->trend;
  /* Back behind itself by more than a window: a new pass (faults handled a
   * little out of order by two handler threads are not). */
  else if (delta < -(int64_t)(s->window > 2 ? s->window : 2)) s->ended = 0, s->first = unit;
  s->last = unit;
  s->hist[s->pos] = delta;
  s->pos = (uint8_t)((s->pos + 1u) % 8u);
  if (s->n < 8) s->n++;
  int64_t trend = 0;
  for (unsigned w = 2; w <= s->n && trend == 0; w *= 2) trend = hm__majority(s, w);
  if (trend == 0 && s->n == 1 && (delta == 1 || hit)) trend = delta;
  if (trend == 0 && seq_hint) trend = 1;
  s->trend = trend;
  return delta;
}

/* No trend: the window halves, and a history of jumps longer than a unit
 * (three of the last four) marks the thread random. Three, not four: a
 * random 4 KiB block that crosses into the next unit (one in 64 with 256 KiB
 * units) adds a delta of 1, and with four required the next four misses
 * each filled a whole unit, 16 KiB read per access on average. */
static void hm__no_trend(_hm_sdm_stream_t *s, _hm_sdm_pf_plan_t *plan) {
  s->window = s->window > 1 ? s->window / 2 : 1;
  if (s->n < 4) return;
  unsigned far = 0;
  for (unsigned i = 0; i < 4; i++) {
    int64_t d = s->hist[(s->pos + 8u - 1u - i) % 8u];
    far += d < -1 || d > 1;
  }
  plan->random = far >= 3;
  s->rnd = (uint8_t)plan->random;
}

/* Along a trend: the window grows, and the plan covers what the stream
 * has not requested yet. */
static void hm__along(_hm_sdm_stream_t *s, int64_t unit, int64_t delta, int hit,
                      uint32_t max_window, _hm_sdm_pf_plan_t *plan) {
  int64_t trend = s->trend;
  s->rnd = 0;
  /* A jump that the majority still reads as the old trend (a new pass
   * over the region, another phase of the program) starts the window over:
   * a long sequential fill followed by a strided pass read a full window
   * of whole units at each of its first faults, all of them unused. */
  if (delta != trend) s->window = 1;
  uint32_t w = s->window < 2 ? 2 : s->window * 2;
  s->window = w > max_window ? max_window : w;
  plan->trend = trend;
  plan->window = s->window;
  plan->ended = s->ended;
  int64_t k0 = 1;
  int64_t ahead = s->next_pf - unit;
  /* A miss inside the range already requested: what was prefetched there
   * was evicted before the reader came (the stream paused while other data
   * went through the cache), so the rest of it is requested again, not
   * left to one demand read per unit. */
  if (ahead % trend == 0 && ahead / trend > 0 && hit) k0 = ahead / trend;
  /* Beyond the window: the stream jumped (a new pass); start over here. */
  if (k0 > (int64_t)s->window + 1) k0 = 1;
  if (k0 > (int64_t)s->window) return; /* already requested far enough */
  plan->stride = trend;
  plan->from = unit + k0 * trend;
  plan->count = (uint32_t)((int64_t)s->window - k0 + 1);
  s->next_pf = unit + ((int64_t)s->window + 1) * trend;
  hm__set_trigger(plan, s->window);
}

void _hm_sdm_pf_fault(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t unit, int hit,
                      int hints, uint32_t max_window, _hm_sdm_pf_plan_t *plan) {
  int seq_hint = hints & HM_SDM_PF_SEQ;
  memset(plan, 0, sizeof *plan);
  plan->trigger = -1;
  plan->tid = tid;
  if (max_window == 0) max_window = 1;
  hm__scan_t sc;
  hm__scan(pf, tid, reg, unit, hints, &sc);
  max_window = hm__share_cap(pf, max_window, sc.active);
  pf->clock++;
  hm__learn_pred(&sc, reg, unit, hit, hints, plan);
  _hm_sdm_stream_t *s = sc.s;
  if (!s) {
    hm__stream_new(pf, sc.old, tid, reg, unit, hit, seq_hint, max_window, plan);
    plan->first = unit;
    return;
  }
  s->stamp = pf->clock;
  int64_t delta = unit - s->last;
  if (delta == 0) {
    plan->random = s->rnd;
    plan->same = 1;
    plan->first = s->first;
    return;
  }
  int64_t first = s->first;
  delta = hm__record(s, unit, delta, hit, hints);
  if (s->first != first) hm__drop_ended(pf, s);
  if (s->trend == 0)
    hm__no_trend(s, plan);
  else
    hm__along(s, unit, delta, hit, max_window, plan);
  plan->first = s->first;
}

int _hm_sdm_pf_end(_hm_sdm_pf_t *pf, int tid, const void *reg) {
  _hm_sdm_stream_t *c = hm__latest_in(pf, tid, reg);
  if (!c || c->ended) return 0;
  c->ended = 1;
  return 1;
}

#define HM__SEED_RECENT 8u

int _hm_sdm_pf_seed(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t from, uint32_t window,
                    _hm_sdm_pf_plan_t *plan) {
  memset(plan, 0, sizeof *plan);
  plan->trigger = -1;
  plan->tid = tid;
  plan->first = from; /* a stream seeded here begins its pass at from */
  if (window == 0) return -EINVAL;
  _hm_sdm_stream_t *s = hm__latest_in(pf, tid, reg), *old = &pf->s[0];
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++)
    if (pf->s[i].stamp < old->stamp) old = &pf->s[i];
  /* Arrays read in one loop fault in turn: a stream seen a few faults ago
   * is still being walked. In its middle, its head is no use now; near its
   * end (the arrays end together and the next pass starts over), its head
   * is, but moving the stream would turn its last faults into jumps. */
  int keep = s && s->trend != 0 && pf->clock - s->stamp < HM__SEED_RECENT;
  if (keep && !s->ended) return -EBUSY;
  /* The window at once, with its trigger as along any forward stream. */
  plan->stride = 1;
  plan->from = from;
  plan->count = window;
  hm__set_trigger(plan, window);
  if (keep) return 1;
  if (!s) s = old;
  memset(s, 0, sizeof *s);
  s->tid = tid;
  s->reg = reg;
  s->last = from - 1;
  s->first = from;
  for (unsigned i = 0; i < 8; i++) s->hist[i] = 1;
  s->n = 8;
  s->trend = 1;
  s->window = window;
  s->next_pf = from + (int64_t)window;
  /* Not newer than the stream now ending, which stays the thread's latest:
   * if the thread goes elsewhere after all, that miss is learned instead. */
  s->stamp = pf->clock ? pf->clock - 1 : 0;
  hm__drop_ended(pf, s);
  return 0;
}

/* Cost: O(HM_SDM_STREAMS^2) compares at worst, under the pager lock. A
 * short window: the streams of one sweep fault in turn, while a sweep
 * that ended a few faults ago (a cold array read after a hot one) is not
 * going on now. */
uint64_t _hm_sdm_pf_swept(const _hm_sdm_pf_t *pf, uint64_t (*len)(const void *reg)) {
  const void *seen[HM_SDM_STREAMS];
  unsigned n = 0;
  uint64_t sum = 0;
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++) {
    const _hm_sdm_stream_t *c = &pf->s[i];
    if (!c->reg || (c->trend != 1 && c->trend != -1)) continue;
    if (pf->clock - c->stamp >= HM_SDM_SWEEP_FAULTS) continue;
    unsigned k = 0;
    while (k < n && seen[k] != c->reg) k++;
    if (k < n) continue;
    seen[n++] = c->reg;
    sum += len(c->reg);
  }
  return sum;
}

/* Cost: one scan of the stream table (HM_SDM_STREAMS entries). An ended
 * stream is not judged: a seeded successor plan (_hm_sdm_pf_seed, kept
 * stream) covers the head of a region whose stream is still at its end. */
int _hm_sdm_pf_passed(const _hm_sdm_pf_t *pf, int tid, const void *reg, int64_t first,
                      int64_t stride, int64_t unit) {
  const _hm_sdm_stream_t *s = tid < 0 ? NULL : hm__latest(pf, tid, reg);
  if (!s || s->ended || s->first != first || s->trend == 0) return 0;
  if ((s->trend > 0) != (stride > 0)) return 0;
  return s->trend > 0 ? unit < s->last : unit > s->last;
}

void _hm_sdm_pf_forget(_hm_sdm_pf_t *pf, const void *reg) {
  for (unsigned i = 0; i < HM_SDM_STREAMS; i++)
    if (pf->s[i].reg == reg) memset(&pf->s[i], 0, sizeof pf->s[i]);
}

void _hm_sdm_pf_advance(_hm_sdm_pf_t *pf, int tid, const void *reg, int64_t unit) {
  /* The pager mapped units ahead of this stream's reader: its next fault is
   * one step past them, which must read as the same stride, not a jump. */
  _hm_sdm_stream_t *s = hm__latest_in(pf, tid, reg);
  if (s) s->last = unit;
}
