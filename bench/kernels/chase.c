/* SPDX-License-Identifier: BSD-3-Clause */
/* Randomized pointer chase: the array is cut into 64-byte nodes linked in
 * one random cycle (a shuffled visiting order), so every load depends on the
 * previous one and lands on an unpredictable line and page: time per load is
 * the memory latency. Each thread chases the same cycle from its own start.
 * Every node also stores its position in the cycle, so the check knows where
 * a chase of L loads must end without keeping the order. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hmk.h"

typedef struct {
  uint64_t next; /* index of the next node */
  uint64_t pos;  /* this node's position in the cycle */
  uint64_t pad[6];
} node_t;

static uint64_t chase(const node_t *nodes, uint64_t p, uint64_t loads) {
  for (uint64_t k = 0; k < loads; k++) p = nodes[p].next;
  return p;
}

int main(int argc, char **argv) {
  uint64_t loads = 0;
  hmk_args_t a = {.kernel = "chase",
                  .summary = "Random pointer chase over 64-byte nodes (memory latency, ns per load).",
                  .bytes = 64ull << 20,
                  .min_bytes = 64 * 64,
                  .reps = 3};
  hmk_opt_t opts[] = {
      {"--loads", HMK_OPT_COUNT, &loads, NULL, 1, UINT64_MAX,
       "dependent loads per thread and repetition (default: one lap of the cycle)"},
  };
  hmk_parse(&a, argc, argv, opts, 1);
  a.variant = "random";
  uint64_t n = a.bytes / sizeof(node_t);
  if (!loads) loads = n;
  int T = a.threads;

  hmk_result_t r;
  hmk_result_init(&r, &a);
  double t0 = hmk_now();
  node_t *nodes = hmk_alloc(n * sizeof(node_t));
  /* The shuffled order is set-up scratch (1/8 of the footprint), freed
   * before anything is timed. */
  uint64_t *ord = hmk_alloc(n * sizeof(uint64_t));
#pragma omp parallel for schedule(static)
  for (uint64_t i = 0; i < n; i++) {
    ord[i] = i;
    memset(&nodes[i], 0, sizeof nodes[i]);
  }
  uint64_t s = 0x63686173u;
  for (uint64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
    s = hmk_mix(s);
    uint64_t j = s % (i + 1);
    uint64_t t = ord[i];
    ord[i] = ord[j];
    ord[j] = t;
  }
#pragma omp parallel for schedule(static)
  for (uint64_t k = 0; k < n; k++) {
    node_t *nd = &nodes[ord[k]];
    nd->next = ord[(k + 1) % n];
    nd->pos = k;
  }
  uint64_t *start = hmk_alloc(sizeof(uint64_t) * (size_t)T);
  uint64_t *end = hmk_alloc(sizeof(uint64_t) * (size_t)T);
  for (int t = 0; t < T; t++) start[t] = ord[(uint64_t)t * n / (uint64_t)T];
  free(ord);
  r.init_s = hmk_now() - t0;

  /* A broken link: thread 0's start skips its successor. */
  if (a.inject_error) nodes[start[0]].next = nodes[nodes[start[0]].next].next;

  for (int rep = 0; hmk_more(&a, &r); rep++) {
    double st = hmk_now();
#pragma omp parallel num_threads(T)
    {
      int t = omp_get_thread_num();
      /* Repetitions continue where the last ended, as the check expects. */
      uint64_t p = rep == 0 ? start[t] : end[t];
      end[t] = chase(nodes, p, loads);
    }
    r.times[r.n++] = hmk_now() - st;
  }
  double total_loads = (double)loads * (double)T;
  r.bytes_moved = total_loads * 64.0; /* one line per load */
  r.flops = 0;

  double v0 = hmk_now();
  for (int t = 0; t < T; t++) {
    /* position after loads*reps steps, in 128 bits so huge runs cannot wrap */
    __extension__ typedef unsigned __int128 u128;
    uint64_t expect = (uint64_t)(((u128)nodes[start[t]].pos + (u128)loads * (u128)a.reps) % n);
    if (nodes[end[t]].pos != expect)
      hmk_fail(HMK_EXIT_VERIFY, "verification failed: thread %d ended at cycle position %llu, expected %llu", t,
               (unsigned long long)nodes[end[t]].pos, (unsigned long long)expect);
  }
  r.verify_s = hmk_now() - v0;
  double best = r.times[0];
  for (int i = 1; i < r.n; i++)
    if (r.times[i] < best) best = r.times[i];
  hmk_extra_u64(&r, "nodes", n);
  hmk_extra_u64(&r, "node_bytes", sizeof(node_t));
  hmk_extra_u64(&r, "loads_per_thread", loads);
  hmk_extra_num(&r, "ns_per_load", best / (double)loads * 1e9);
  hmk_extra_num(&r, "loads_per_s", total_loads / best);
  hmk_emit(&a, &r);
  free(nodes);
  free(start);
  free(end);
  return 0;
}
