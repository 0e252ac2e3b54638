/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's stream detector (src/sdm/prefetch.c) on its own: a stream's
 * window grows to max_window; the windows of several active streams share
 * pf->share units; a stream that stops faulting stops taking a share; a
 * jump off the trend starts the window over; a miss inside the requested
 * range asks for that range again. Faults are fed by hand, so the
 * figures are exact. */
#include <stdint.h>
#include <string.h>

#include "sdm/sdm.h"
#include "testhelper.h"

static char g_regs[8];

/* Feeds n consecutive faults of stream (tid, reg) from unit u0 on and
 * returns the window of the last plan. */
static uint32_t walk(_hm_sdm_pf_t *pf, int tid, int reg, int64_t u0, int n, uint32_t maxw) {
  _hm_sdm_pf_plan_t plan;
  uint32_t w = 0;
  for (int i = 0; i < n; i++) {
    _hm_sdm_pf_fault(pf, tid, &g_regs[reg], u0 + i, 0, 0, maxw, &plan);
    if (plan.window) w = plan.window;
  }
  return w;
}

/* A detector with no stream yet and the given shared window budget. */
static void fresh(_hm_sdm_pf_t *pf, uint32_t share) {
  memset(pf, 0, sizeof *pf);
  pf->share = share;
}

static void one_stream_grows_then_restarts(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 1000);
  CHECK_EQ_INT(walk(&pf, 1, 0, 0, 12, 32), 32);
  /* the plan asks for units ahead of the fault, along stride 1 */
  _hm_sdm_pf_plan_t plan;
  _hm_sdm_pf_fault(&pf, 1, &g_regs[0], 12, 0, 0, 32, &plan);
  CHECK_EQ_INT(plan.trend, 1);
  /* back to the start (a new pass): the majority still reads stride 1, but
   * the window starts over */
  _hm_sdm_pf_fault(&pf, 1, &g_regs[0], 0, 0, 0, 32, &plan);
  _hm_sdm_pf_fault(&pf, 1, &g_regs[0], 1, 0, 0, 32, &plan);
  CHECK(plan.window <= 4);
}

/* n streams (thread s, region regs[s % nreg]) fault in turn, 16 times each,
 * at units s * 1000 + i; returns each stream's last window in w. */
static void interleave(_hm_sdm_pf_t *pf, int n, int nreg, int threads, uint32_t *w) {
  _hm_sdm_pf_plan_t plan;
  for (int i = 0; i < 16; i++)
    for (int s = 0; s < n; s++) {
      int tid = threads ? s / nreg : s;
      _hm_sdm_pf_fault(pf, tid, &g_regs[s % nreg], (int64_t)(s * 1000 + i), 0, 0, 32, &plan);
      if (plan.window) w[s] = plan.window;
    }
}

static void active_streams_share_the_budget(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 54); /* half of a 108-unit cache */
  /* six streams (2 threads x 3 arrays), interleaved as a STREAM triad faults */
  uint32_t w[6] = {0};
  interleave(&pf, 6, 3, 1, w);
  for (int s = 0; s < 6; s++) CHECK_EQ_INT(w[s], 54 / 6);
  /* alone again: the other five go idle after HM_SDM_ACTIVE_FAULTS faults */
  uint32_t alone = walk(&pf, 0, 0, 16, (int)HM_SDM_ACTIVE_FAULTS + 8, 32);
  CHECK_EQ_INT(alone, 32);
}

static void no_share_means_no_limit(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 0);
  uint32_t w[6] = {0};
  interleave(&pf, 6, 1, 0, w);
  CHECK_EQ_INT(w[5], 32);
}

static void a_small_share_still_prefetches(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 3); /* less than one unit per stream: each keeps a window of 2 */
  uint32_t w[4] = {0};
  interleave(&pf, 4, 1, 0, w);
  CHECK_EQ_INT(w[0], 2);
}

/* A hit inside the range a stream has requested asks only for what lies
 * beyond it; a miss there means the units prefetched there were evicted
 * before the reader came (the stream paused while other data went through
 * the cache), so the plan asks again from the next unit on. Before, it
 * asked for nothing, and each of those units became a demand read. */
static void a_miss_inside_the_window_asks_again(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 0);
  CHECK_EQ_INT(walk(&pf, 1, 0, 0, 12, 32), 32);
  _hm_sdm_pf_plan_t plan;
  _hm_sdm_pf_fault(&pf, 1, &g_regs[0], 14, 1, 0, 32, &plan);
  CHECK(plan.count > 0 && plan.from > 15); /* past what was requested */
  _hm_sdm_pf_fault(&pf, 1, &g_regs[0], 16, 0, 0, 32, &plan);
  CHECK_EQ_INT(plan.from, 17);
  CHECK_EQ_INT(plan.count, 32);
}

/* A reader one unit past the window each step (stride 4, window 3) lands
 * where the stream asked up to: without seeing that it skipped the window,
 * that reads as progress and the reader stays "sequential". With the skip
 * hint (the unit before it is an untouched prefetch) the stride is learnt. */
static void a_reader_that_skips_the_window_is_strided(void) {
  _hm_sdm_pf_t pf;
  fresh(&pf, 0);
  walk(&pf, 1, 0, 0, 6, 3); /* sequential, window 3: asked up to unit 8 */
  _hm_sdm_pf_plan_t plan;
  int64_t u = 9;
  for (int i = 0; i < 4; i++, u += 4)
    _hm_sdm_pf_fault(&pf, 1, &g_regs[0], u, 0, HM_SDM_PF_SKIP_BELOW, 3, &plan);
  CHECK_EQ_INT(plan.stride, 4);
  /* without the hint (anonymous mode: prefetches are installed at once
   * and their touches unseen) the same faults are the stream's progress */
  fresh(&pf, 0);
  walk(&pf, 1, 0, 0, 6, 3);
  u = 9;
  for (int i = 0; i < 4; i++, u += 4)
    _hm_sdm_pf_fault(&pf, 1, &g_regs[0], u, 0, 0, 3, &plan);
  CHECK_EQ_INT(plan.stride, 1);
  CHECK_EQ_INT(plan.window, 3);
}

int main(void) {
  one_stream_grows_then_restarts();
  active_streams_share_the_budget();
  no_share_means_no_limit();
  a_small_share_still_prefetches();
  a_miss_inside_the_window_asks_again();
  a_reader_that_skips_the_window_is_strided();
  return hm_test_done("test_sdm_prefetch");
}
