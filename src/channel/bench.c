/* SPDX-License-Identifier: BSD-3-Clause */
/* hm_chan_bench_json: the channel's own costs, measured in C so that the
 * figures are the library's and not the caller's (ctypes adds ~1 us a call).
 * Used by `hetmem flow bench` and `hetmem flow calibrate`. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "prim/chan.h"
#include "prim/prim.h"

#define HM__BKEY 24

typedef struct hm__bstream_s {
  hm_ctx_t *ctx;
  const char *tier;
  char name[80];
  uint64_t objects, bytes;
  uint32_t steps;
  int mix;
  pthread_barrier_t *bar;
  unsigned char *src, *dst;
  char (*keys)[HM__BKEY];
  /* results: best and total ns over the steps after the first */
  uint64_t put_best, put_total, view_best, copy_best, copy_total, mix_ns;
  uint64_t checksum_errors;
  int rc;
  char err[HM_ERRMSG_MAX];
} hm__bstream_t;

static void hm__bfail(hm__bstream_t *b, int rc, hm_ctx_t *ctx) {
  if (!b->rc) {
    b->rc = rc;
    snprintf(b->err, sizeof b->err, "%s", hm_ctx_last_error(ctx));
  }
}

static uint64_t hm__min(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Steps not counted: the first use of each of the 2 slots pays page faults. */
static uint32_t hm__warm(uint32_t steps) { return steps > 2 ? 2 : steps - 1; }

static void *hm__bwriter(void *arg) {
  hm__bstream_t *b = arg;
  hm_ctx_t *ctx = NULL;
  hm_chan_t *w = NULL;
  int rc = hm_ctx_new(&ctx, NULL);
  if (!rc) rc = hm_chan_open(ctx, b->tier, b->name, HM_CHAN_WRITER, 0, &w);
  if (rc) hm__bfail(b, rc, ctx);
  for (uint32_t s = 0; s < b->steps; s++) {
    if (!b->mix) pthread_barrier_wait(b->bar);
    uint64_t t0 = _hm_prim_now_ns();
    for (uint64_t i = 0; w && !b->rc && i < b->objects; i++) {
      rc = hm_chan_put(w, b->keys[i], s, b->src + i * b->bytes, b->bytes);
      if (rc) hm__bfail(b, rc, ctx);
    }
    if (w && !b->rc && (rc = hm_chan_commit(w, s))) hm__bfail(b, rc, ctx);
    uint64_t dt = _hm_prim_now_ns() - t0;
    if (s >= hm__warm(b->steps)) {
      b->put_best = hm__min(b->put_best, dt);
      b->put_total += dt;
    }
    if (!b->mix) pthread_barrier_wait(b->bar);
  }
  hm_chan_close(w);
  hm_ctx_free(ctx);
  return NULL;
}

/* One step of a reader: views, then copies, timed apart. */
static void hm__bread_step(hm__bstream_t *b, hm_chan_t *r, hm_ctx_t *ctx, uint32_t s) {
  int rc = hm_chan_wait(r, s, 60000);
  if (rc) {
    hm__bfail(b, rc, ctx);
    return;
  }
  uint64_t t0 = _hm_prim_now_ns();
  for (uint64_t i = 0; i < b->objects; i++) {
    const void *p = NULL;
    size_t n = 0;
    if ((rc = hm_chan_get(r, b->keys[i], s, &p, &n))) hm__bfail(b, rc, ctx);
  }
  uint64_t t1 = _hm_prim_now_ns();
  for (uint64_t i = 0; i < b->objects && !b->rc; i++) {
    size_t n = 0;
    rc = hm_chan_get_copy(r, b->keys[i], s, b->dst + i * b->bytes, b->bytes, &n);
    if (rc) hm__bfail(b, rc, ctx);
  }
  uint64_t t2 = _hm_prim_now_ns();
  /* The data must be what was put: check a word per object. */
  for (uint64_t i = 0; i < b->objects && b->bytes >= 8; i++)
    if (memcmp(b->dst + i * b->bytes, b->src + i * b->bytes, 8)) b->checksum_errors++;
  if ((rc = hm_chan_release(r, s))) hm__bfail(b, rc, ctx);
  if (s >= hm__warm(b->steps)) {
    b->view_best = hm__min(b->view_best, t1 - t0);
    b->copy_best = hm__min(b->copy_best, t2 - t1);
    b->copy_total += t2 - t1;
  }
}

static void *hm__breader(void *arg) {
  hm__bstream_t *b = arg;
  hm_ctx_t *ctx = NULL;
  hm_chan_t *r = NULL;
  int rc = hm_ctx_new(&ctx, NULL);
  if (!rc) rc = hm_chan_open(ctx, b->tier, b->name, HM_CHAN_READER, 0, &r);
  if (rc) hm__bfail(b, rc, ctx);
  for (uint32_t s = 0; s < b->steps; s++) {
    if (!b->mix) pthread_barrier_wait(b->bar);
    if (!b->mix) pthread_barrier_wait(b->bar); /* after the writers' phase */
    if (!r || b->rc) continue;
    hm__bread_step(b, r, ctx, s);
  }
  hm_chan_close(r);
  hm_ctx_free(ctx);
  return NULL;
}

/* One benchmark run: its streams (a writer and a reader thread each). */
typedef struct hm__bench_s {
  hm_ctx_t *ctx;
  const char *tier;
  uint64_t objects, bytes;
  uint32_t steps, streams;
  int mix;
  hm__bstream_t *bs;
  pthread_t *th;
  char (*keys)[HM__BKEY];
  pthread_barrier_t bar;
  uint32_t created, started;
  uint64_t wall, mc_best;
} hm__bench_t;

/* Stream t: its buffers (touched outside the timing) and its channel. */
static int hm__bstream_setup(hm__bench_t *run, uint32_t t) {
  hm__bstream_t *b = &run->bs[t];
  uint64_t total = run->objects * run->bytes;
  b->ctx = run->ctx;
  b->tier = run->tier;
  snprintf(b->name, sizeof b->name, "bench-%d-%u", _hm_prim_chan_pid(), t);
  b->objects = run->objects;
  b->bytes = run->bytes;
  b->steps = run->steps;
  b->mix = run->mix;
  b->bar = &run->bar;
  b->keys = run->keys;
  b->put_best = b->view_best = b->copy_best = UINT64_MAX;
  int rc = _hm_prim_map_anon(total, (void **)&b->src);
  if (!rc) rc = _hm_prim_map_anon(total, (void **)&b->dst);
  if (rc) return rc;
  for (uint64_t i = 0; i < total; i += 8) {
    uint64_t v = i * 0x9e3779b97f4a7c15ull + t;
    memcpy(b->src + i, &v, total - i < 8 ? total - i : 8);
  }
  memset(b->dst, 0, total); /* first touch outside the timing */
  hm_chan_config_t cfg;
  hm_chan_config_default(&cfg);
  cfg.tier = run->tier;
  cfg.name = b->name;
  cfg.slots = 2;
  cfg.slot_bytes = run->objects * ((run->bytes + 63) & ~63ull);
  cfg.max_objects = run->objects;
  cfg.replace = 1;
  rc = hm_chan_create(run->ctx, &cfg);
  if (!rc) run->created = t + 1;
  return rc;
}

static int hm__bench_setup(hm__bench_t *run) {
  run->bs = calloc(run->streams, sizeof *run->bs);
  run->th = calloc(2 * (size_t)run->streams, sizeof *run->th);
  run->keys = calloc(run->objects, HM__BKEY);
  if (!run->bs || !run->th || !run->keys) return -ENOMEM;
  pthread_barrier_init(&run->bar, NULL, 2 * run->streams);
  for (uint64_t i = 0; i < run->objects; i++)
    snprintf(run->keys[i], HM__BKEY, "obj%llu", (unsigned long long)i);
  int rc = 0;
  for (uint32_t t = 0; !rc && t < run->streams; t++) rc = hm__bstream_setup(run, t);
  return rc;
}

static void hm__bench_threads(hm__bench_t *run, int rc) {
  uint64_t t0 = _hm_prim_now_ns();
  for (uint32_t t = 0; !rc && t < run->streams; t++) {
    pthread_create(&run->th[2 * t], NULL, hm__bwriter, &run->bs[t]);
    pthread_create(&run->th[2 * t + 1], NULL, hm__breader, &run->bs[t]);
    run->started = t + 1;
  }
  for (uint32_t t = 0; t < run->started; t++) {
    pthread_join(run->th[2 * t], NULL);
    pthread_join(run->th[2 * t + 1], NULL);
  }
  run->wall = _hm_prim_now_ns() - t0;
}

/* memcpy of the same bytes, same threads count 1, best of steps */
static void hm__bench_memcpy(hm__bench_t *run) {
  run->mc_best = UINT64_MAX;
  const hm__bstream_t *b = &run->bs[0];
  for (uint32_t s = 0; s < run->steps + 1; s++) {
    uint64_t a = _hm_prim_now_ns();
    for (uint64_t i = 0; i < run->objects; i++)
      memcpy(b->dst + i * run->bytes, b->src + i * run->bytes, run->bytes);
    uint64_t dt = _hm_prim_now_ns() - a;
    if (s > 0) run->mc_best = hm__min(run->mc_best, dt);
  }
}

/* The first failure of a stream, then wrong read-backs. */
static int hm__bench_errors(hm__bench_t *run) {
  for (uint32_t t = 0; t < run->started; t++)
    if (run->bs[t].rc)
      return _hm_error(run->ctx, run->bs[t].rc, "bench stream %u: %s", t, run->bs[t].err);
  int rc = 0;
  for (uint32_t t = 0; !rc && t < run->started; t++)
    if (run->bs[t].checksum_errors)
      rc = _hm_error(run->ctx, -EIO, "bench stream %u: %llu objects read back wrong", t,
                     (unsigned long long)run->bs[t].checksum_errors);
  return rc;
}

static void hm__bench_json(const hm__bench_t *run, _hm_sb_t *sb) {
  uint64_t put = 0, view = 0, copy = 0;
  double put_mean = 0, copy_mean = 0;
  uint32_t steps = run->steps, streams = run->streams;
  uint64_t objects = run->objects;
  uint32_t counted = steps - hm__warm(steps);
  for (uint32_t t = 0; t < streams; t++) {
    const hm__bstream_t *b = &run->bs[t];
    put = put > b->put_best ? put : b->put_best; /* slowest stream's best */
    view = view > b->view_best ? view : b->view_best;
    copy = copy > b->copy_best ? copy : b->copy_best;
    put_mean += (double)b->put_total / counted / streams;
    copy_mean += (double)b->copy_total / counted / streams;
  }
  double bytes = (double)(objects * run->bytes);
  _hm_sb_printf(sb, "{\"schema_version\": 1, \"tier\": ");
  _hm_sb_json_str(sb, run->tier ? run->tier : "dram");
  _hm_sb_printf(
      sb,
      ", \"objects\": %llu, \"object_bytes\": %llu, \"steps\": %u, \"streams\": %u, "
      "\"mix\": %s, \"put_ns_per_object\": %.1f, \"get_view_ns_per_object\": %.1f, "
      "\"get_copy_ns_per_object\": %.1f, \"memcpy_ns_per_object\": %.1f, "
      "\"put_mean_ns_per_object\": %.1f, \"get_copy_mean_ns_per_object\": %.1f, "
      "\"put_gbs\": %.3f, \"get_gbs\": %.3f, \"memcpy_gbs\": %.3f, "
      "\"aggregate_put_gbs\": %.3f, \"aggregate_get_gbs\": %.3f, \"wall_s\": %.4f}",
      (unsigned long long)objects, (unsigned long long)run->bytes, steps, streams,
      run->mix ? "true" : "false", (double)put / objects, (double)view / objects,
      (double)copy / objects, (double)run->mc_best / objects, put_mean / objects,
      copy_mean / objects, bytes / (double)put, bytes / (double)copy,
      bytes / (double)run->mc_best, bytes * streams / put_mean, bytes * streams / copy_mean,
      (double)run->wall / 1e9);
}

static void hm__bench_free(hm__bench_t *run) {
  for (uint32_t t = 0; t < run->created; t++) hm_chan_unlink(run->ctx, run->tier, run->bs[t].name);
  for (uint32_t t = 0; run->bs && t < run->streams; t++) {
    _hm_prim_unmap(run->bs[t].src, run->objects * run->bytes);
    _hm_prim_unmap(run->bs[t].dst, run->objects * run->bytes);
  }
  if (run->bs && run->th && run->keys) pthread_barrier_destroy(&run->bar);
  free(run->bs);
  free(run->th);
  free(run->keys);
}

int hm_chan_bench_json(hm_ctx_t *ctx, const char *tier, uint64_t objects, uint64_t object_bytes,
                       uint32_t steps, uint32_t streams, int mix, char **out) {
  if (!ctx || !out) return -EINVAL;
  if (!objects || !object_bytes || !steps || !streams || streams > 64)
    return _hm_error(ctx, -EINVAL, "bench: objects, object_bytes, steps and streams (<= 64) "
                     "must be positive");
  if (objects * object_bytes > (8ull << 30))
    return _hm_error(ctx, -EINVAL, "bench: a step of %llu bytes is too large",
                     (unsigned long long)(objects * object_bytes));
  hm__bench_t run = {.ctx = ctx, .tier = tier, .objects = objects, .bytes = object_bytes,
                     .steps = steps, .streams = streams, .mix = mix};
  int rc = hm__bench_setup(&run);
  hm__bench_threads(&run, rc);
  if (!rc) hm__bench_memcpy(&run);
  if (!rc) rc = hm__bench_errors(&run);
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  if (!rc) hm__bench_json(&run, &sb);
  hm__bench_free(&run);
  if (rc) {
    _hm_sb_free(&sb);
    return rc;
  }
  return _hm_sb_take(&sb, out);
}
