/* SPDX-License-Identifier: BSD-3-Clause */
/* Workflow channel: steps, atomicity, queue limit, reclaim, many objects,
 * several writer and reader ranks, tiers, bad input. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hetmem.h"
#include "testhelper.h"

static char name_buf[64];
static const char *uname_(const char *what) {
  snprintf(name_buf, sizeof name_buf, "t%d-%s", (int)getpid(), what);
  return name_buf;
}

static int make(hm_ctx_t *ctx, const char *tier, const char *name, uint32_t slots,
                uint32_t writers, uint32_t readers, hm_chan_policy_t policy, uint64_t objs) {
  hm_chan_config_t cfg;
  hm_chan_config_default(&cfg);
  cfg.tier = tier;
  cfg.name = name;
  cfg.slots = slots;
  cfg.writers = writers;
  cfg.readers = readers;
  cfg.policy = policy;
  cfg.slot_bytes = 8 << 20;
  cfg.max_objects = objs;
  cfg.timeout_ms = 200;
  return hm_chan_create(ctx, &cfg);
}

static void test_basic(hm_ctx_t *ctx, const char *tier) {
  char name[64];
  snprintf(name, sizeof name, "%s", uname_("basic"));
  CHECK_EQ_INT(make(ctx, tier, name, 2, 1, 1, HM_CHAN_BLOCK, 64), 0);
  CHECK_EQ_INT(make(ctx, tier, name, 2, 1, 1, HM_CHAN_BLOCK, 64), -EEXIST);
  hm_chan_t *w = NULL, *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, tier, name, HM_CHAN_WRITER, 0, &w), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, tier, name, HM_CHAN_READER, -1, &r), 0);
  if (!w || !r) return;
  CHECK_EQ_INT(hm_chan_rank(r), 0);
  double a[100];
  for (int i = 0; i < 100; i++) a[i] = i * 1.5;
  CHECK_EQ_INT(hm_chan_put(w, "a", 0, a, sizeof a), 0);
  CHECK_EQ_INT(hm_chan_put(w, "a", 0, a, sizeof a), -EEXIST);
  CHECK_EQ_INT(hm_chan_put(w, "empty", 0, NULL, 0), 0);
  void *z = NULL;
  CHECK_EQ_INT(hm_chan_put_alloc(w, "b", 0, 1000, &z), 0);
  CHECK(z != NULL && ((uintptr_t)z % 64) == 0);
  if (z) memset(z, 0x5a, 1000);
  /* Not committed: a reader must not see the step. */
  CHECK_EQ_INT(hm_chan_wait(r, 0, 0), -ETIMEDOUT);
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r, "a", 0, &p, &n), -EINVAL);
  CHECK_EQ_INT(hm_chan_commit(w, 0), 0);
  CHECK_EQ_INT(hm_chan_put(w, "late", 0, a, 8), -EINVAL); /* step 0 is committed */
  CHECK_EQ_INT(hm_chan_wait(r, 0, 1000), 0);
  CHECK_EQ_INT(hm_chan_get(r, "a", 0, &p, &n), 0);
  CHECK_EQ_INT(n, sizeof a);
  CHECK(p && !memcmp(p, a, sizeof a));
  CHECK_EQ_INT(hm_chan_get(r, "b", 0, &p, &n), 0);
  CHECK_EQ_INT(n, 1000);
  CHECK(p && ((const unsigned char *)p)[999] == 0x5a);
  CHECK_EQ_INT(hm_chan_get(r, "empty", 0, &p, &n), 0);
  CHECK_EQ_INT(n, 0);
  CHECK_EQ_INT(hm_chan_get(r, "nope", 0, &p, &n), -ENOENT);
  double back[100];
  CHECK_EQ_INT(hm_chan_get_copy(r, "a", 0, back, sizeof back, &n), 0);
  CHECK(!memcmp(back, a, sizeof a));
  CHECK_EQ_INT(hm_chan_get_copy(r, "a", 0, back, 10, &n), -ENOBUFS);
  CHECK_EQ_INT(n, sizeof a);
  uint64_t latest = 99;
  CHECK_EQ_INT(hm_chan_latest(r, &latest), 0);
  CHECK_EQ_INT(latest, 0);
  char *info = NULL;
  CHECK_EQ_INT(hm_chan_info_json(r, &info), 0);
  CHECK(info && strstr(info, "\"committed\": 1") && strstr(info, "\"objects\": 3"));
  hm_free(info);
  CHECK_EQ_INT(hm_chan_release(r, 0), 0);
  CHECK_EQ_INT(hm_chan_release(r, 0), -ENOENT);
  CHECK_EQ_INT(hm_chan_wait(r, 0, 0), -ENOENT); /* gone */
  /* A second reader rank does not exist in a 1-reader channel. */
  hm_chan_t *r2 = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, tier, name, HM_CHAN_READER, -1, &r2), -EBUSY);
  CHECK_EQ_INT(hm_chan_open(ctx, tier, name, HM_CHAN_READER, 3, &r2), -EINVAL);
  /* Writer closes: a reader waiting past its last step hears end of stream. */
  hm_chan_close(w);
  CHECK_EQ_INT(hm_chan_wait(r, 1, 1000), -ENODATA);
  hm_chan_close(r);
  CHECK_EQ_INT(hm_chan_unlink(ctx, tier, name), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, tier, name, HM_CHAN_READER, 0, &r), -ENOENT);
}

static void test_queue(hm_ctx_t *ctx, hm_chan_policy_t policy) {
  const char *name = uname_(policy == HM_CHAN_BLOCK ? "qblock" : "qdiscard");
  CHECK_EQ_INT(make(ctx, "dram", name, 2, 1, 1, policy, 16), 0);
  hm_chan_t *w = NULL, *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 0, &w), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r), 0);
  if (!w || !r) return;
  int v = 0;
  for (uint64_t s = 0; s < 2; s++) {
    v = (int)s;
    CHECK_EQ_INT(hm_chan_put(w, "x", s, &v, sizeof v), 0);
    CHECK_EQ_INT(hm_chan_commit(w, s), 0);
  }
  v = 2;
  if (policy == HM_CHAN_BLOCK) {
    CHECK_EQ_INT(hm_chan_put(w, "x", 2, &v, sizeof v), -ETIMEDOUT);
    CHECK_EQ_INT(hm_chan_wait(r, 0, 100), 0);
    CHECK_EQ_INT(hm_chan_release(r, 0), 0); /* reclaims step 0's slot */
    CHECK_EQ_INT(hm_chan_put(w, "x", 2, &v, sizeof v), 0);
    CHECK_EQ_INT(hm_chan_commit(w, 2), 0);
    CHECK_EQ_INT(hm_chan_wait(r, 1, 100), 0);
    CHECK_EQ_INT(hm_chan_wait(r, 2, 100), 0);
  } else {
    /* A held step is never discarded; the oldest unheld one is. */
    CHECK_EQ_INT(hm_chan_wait(r, 1, 100), 0);
    CHECK_EQ_INT(hm_chan_put(w, "x", 2, &v, sizeof v), 0);
    CHECK_EQ_INT(hm_chan_commit(w, 2), 0);
    CHECK_EQ_INT(hm_chan_wait(r, 0, 100), -ENOENT);
    CHECK_EQ_INT(hm_chan_wait(r, 2, 100), 0);
    const void *p = NULL;
    size_t n = 0;
    CHECK_EQ_INT(hm_chan_get(r, "x", 1, &p, &n), 0);
    CHECK(p && *(const int *)p == 1);
    char *info = NULL;
    CHECK_EQ_INT(hm_chan_info_json(r, &info), 0);
    CHECK(info && strstr(info, "\"discarded\": 1"));
    hm_free(info);
  }
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r, "x", 2, &p, &n), 0);
  CHECK(p && *(const int *)p == 2);
  hm_chan_close(w);
  hm_chan_close(r);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

/* Two writer ranks and two reader ranks: a step is visible only once both
 * writers committed, and reclaimed only once both readers released. */
static void test_ranks(hm_ctx_t *ctx) {
  const char *name = uname_("ranks");
  CHECK_EQ_INT(make(ctx, "dram", name, 1, 2, 2, HM_CHAN_BLOCK, 16), 0);
  hm_chan_t *w0 = NULL, *w1 = NULL, *r0 = NULL, *r1 = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, -1, &w0), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, -1, &w1), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r0), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 1, &r1), 0);
  if (!w0 || !w1 || !r0 || !r1) return;
  CHECK_EQ_INT(hm_chan_rank(w1), 1);
  int a = 10, b = 11;
  CHECK_EQ_INT(hm_chan_put(w0, "rank0", 0, &a, sizeof a), 0);
  CHECK_EQ_INT(hm_chan_put(w1, "rank1", 0, &b, sizeof b), 0);
  CHECK_EQ_INT(hm_chan_commit(w0, 0), 0);
  CHECK_EQ_INT(hm_chan_wait(r0, 0, 0), -ETIMEDOUT);
  CHECK_EQ_INT(hm_chan_commit(w1, 0), 0);
  CHECK_EQ_INT(hm_chan_wait(r0, 0, 0), 0);
  CHECK_EQ_INT(hm_chan_wait(r1, 0, 0), 0);
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r1, "rank0", 0, &p, &n), 0);
  CHECK(p && *(const int *)p == 10);
  CHECK_EQ_INT(hm_chan_get(r0, "rank1", 0, &p, &n), 0);
  CHECK(p && *(const int *)p == 11);
  CHECK_EQ_INT(hm_chan_release(r0, 0), 0);
  CHECK_EQ_INT(hm_chan_put(w0, "rank0", 1, &a, sizeof a), -ETIMEDOUT); /* r1 holds it */
  CHECK_EQ_INT(hm_chan_release(r1, 0), 0);
  CHECK_EQ_INT(hm_chan_put(w0, "rank0", 1, &a, sizeof a), 0);
  hm_chan_close(w0);
  hm_chan_close(w1);
  hm_chan_close(r0);
  hm_chan_close(r1);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

/* An out-of-range rank is refused without touching any rank: writer rank 0
 * stays active (no end of stream for a reader), still held (-EBUSY for a
 * second open) and still works. */
static void test_bad_rank(hm_ctx_t *ctx) {
  const char *name = uname_("badrank");
  CHECK_EQ_INT(make(ctx, "dram", name, 2, 1, 1, HM_CHAN_BLOCK, 8), 0);
  hm_chan_t *w0 = NULL, *r0 = NULL, *bad = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 0, &w0), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r0), 0);
  if (!w0 || !r0) return;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 1, &bad), -EINVAL);
  CHECK(bad == NULL);
  CHECK(strstr(hm_ctx_last_error(ctx), "out of range") != NULL);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 7, &bad), -EINVAL);
  CHECK(bad == NULL);
  CHECK_EQ_INT(hm_chan_wait(r0, 0, 0), -ETIMEDOUT); /* not -ENODATA: rank 0 is not closed */
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 0, &bad), -EBUSY);
  hm_chan_close(bad);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &bad), -EBUSY);
  hm_chan_close(bad);
  int v = 42;
  CHECK_EQ_INT(hm_chan_put(w0, "v", 0, &v, sizeof v), 0);
  CHECK_EQ_INT(hm_chan_commit(w0, 0), 0);
  CHECK_EQ_INT(hm_chan_wait(r0, 0, 1000), 0);
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r0, "v", 0, &p, &n), 0);
  CHECK(p && *(const int *)p == 42);
  hm_chan_close(w0);
  hm_chan_close(r0);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

/* Many objects in one step: every one is found by its key. */
static void test_many(hm_ctx_t *ctx) {
  const char *name = uname_("many");
  enum { N = 100000 };
  hm_chan_config_t cfg;
  hm_chan_config_default(&cfg);
  cfg.name = name;
  cfg.slots = 1;
  cfg.slot_bytes = (uint64_t)N * 64;
  cfg.max_objects = N;
  CHECK_EQ_INT(hm_chan_create(ctx, &cfg), 0);
  hm_chan_t *w = NULL, *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 0, &w), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r), 0);
  if (!w || !r) return;
  char key[32];
  int bad = 0;
  for (uint32_t i = 0; i < N; i++) {
    snprintf(key, sizeof key, "var%u", i);
    if (hm_chan_put(w, key, 7, &i, sizeof i)) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  uint32_t one = 0;
  CHECK_EQ_INT(hm_chan_put(w, "overflow", 7, &one, sizeof one), -E2BIG);
  CHECK_EQ_INT(hm_chan_commit(w, 7), 0);
  CHECK_EQ_INT(hm_chan_wait(r, 7, 1000), 0);
  for (uint32_t i = N; i-- > 0;) {
    snprintf(key, sizeof key, "var%u", i);
    const void *p = NULL;
    size_t n = 0;
    if (hm_chan_get(r, key, 7, &p, &n) || n != sizeof i || memcmp(p, &i, sizeof i)) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  hm_chan_close(w);
  hm_chan_close(r);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

static void test_tiers_and_input(hm_ctx_t *ctx) {
  char dir[] = "/tmp/hmchanXXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char tier[128];
  snprintf(tier, sizeof tier, "file:%s", dir);
  test_basic(ctx, tier);
  snprintf(tier, sizeof tier, "dax:%s", dir); /* a plain file system: mapped without MAP_SYNC */
  test_basic(ctx, tier);
  rmdir(dir);
  test_basic(ctx, "node:0");
  CHECK_EQ_INT(make(ctx, "node:999", uname_("n999"), 2, 1, 1, HM_CHAN_BLOCK, 4), -EINVAL);
  CHECK_EQ_INT(make(ctx, "tape", uname_("x"), 2, 1, 1, HM_CHAN_BLOCK, 4), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "tier") != NULL);
  CHECK_EQ_INT(make(ctx, "dram", "bad/name", 2, 1, 1, HM_CHAN_BLOCK, 4), -EINVAL);
  CHECK_EQ_INT(make(ctx, "dram", uname_("r"), 2, 65, 1, HM_CHAN_BLOCK, 4), -EINVAL);
  CHECK_EQ_INT(make(ctx, "file:/nonexistent/dir", uname_("f"), 2, 1, 1, HM_CHAN_BLOCK, 4),
               -ENOENT);
  char path[256];
  CHECK_EQ_INT(hm_chan_path("dram", "abc", path, sizeof path), 0);
  CHECK(!strcmp(path, "/dev/shm/hetmem-chan-abc"));
}

/* Writer and reader in two processes: every step arrives whole and in order. */
static void test_fork(hm_ctx_t *ctx) {
  const char *name = uname_("fork");
  enum { STEPS = 20, OBJ = 50 };
  CHECK_EQ_INT(make(ctx, "dram", name, 2, 1, 1, HM_CHAN_BLOCK, OBJ), 0);
  pid_t pid = fork();
  if (pid == 0) {
    hm_ctx_t *c = NULL;
    hm_chan_t *w = NULL;
    if (hm_ctx_new(&c, NULL) || hm_chan_open(c, "dram", name, HM_CHAN_WRITER, 0, &w)) _exit(3);
    hm_chan_set_timeout(w, 20000);
    uint64_t buf[512];
    char key[16];
    for (uint64_t s = 0; s < STEPS; s++) {
      for (int i = 0; i < OBJ; i++) {
        for (int j = 0; j < 512; j++) buf[j] = s * 1000000 + (uint64_t)i * 1000 + (uint64_t)j;
        snprintf(key, sizeof key, "o%d", i);
        if (hm_chan_put(w, key, s, buf, sizeof buf)) _exit(4);
        if (i == OBJ / 2 && s % 5 == 0) usleep(2000); /* a reader must not see half a step */
      }
      if (hm_chan_commit(w, s)) _exit(5);
    }
    hm_chan_close(w);
    hm_ctx_free(c);
    _exit(0);
  }
  hm_chan_t *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r), 0);
  int bad = 0, steps = 0;
  char key[16];
  for (uint64_t s = 0; r; s++) {
    int rc = hm_chan_wait(r, s, 20000);
    if (rc == -ENODATA) break;
    if (rc) {
      bad++;
      break;
    }
    steps++;
    for (int i = 0; i < OBJ; i++) {
      snprintf(key, sizeof key, "o%d", i);
      const void *p = NULL;
      size_t n = 0;
      if (hm_chan_get(r, key, s, &p, &n) || n != 4096) {
        bad++;
        continue;
      }
      const uint64_t *u = p;
      if (u[0] != s * 1000000 + (uint64_t)i * 1000 || u[511] != u[0] + 511) bad++;
    }
    if (hm_chan_release(r, s)) bad++;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(steps, STEPS);
  hm_chan_close(r);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

/* A writer that dies mid-step: the reader gets -EPIPE, not a hang or a
 * timeout; the committed step before it stays readable. A reader that
 * dies holding the queue full: the writer gets -EPIPE. */
static void test_dead_peers(hm_ctx_t *ctx) {
  const char *name = uname_("dead");
  CHECK_EQ_INT(make(ctx, "dram", name, 1, 1, 1, HM_CHAN_BLOCK, 8), 0);
  int pfd[2];
  CHECK_EQ_INT(pipe(pfd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    hm_ctx_t *c = NULL;
    hm_chan_t *w = NULL;
    if (hm_ctx_new(&c, NULL) || hm_chan_open(c, "dram", name, HM_CHAN_WRITER, 0, &w)) _exit(3);
    int v = 1;
    if (hm_chan_put(w, "v", 0, &v, sizeof v) || hm_chan_commit(w, 0)) _exit(4);
    if (write(pfd[1], "x", 1) != 1) _exit(6);
    hm_chan_set_timeout(w, 60000);
    if (hm_chan_put(w, "v", 1, &v, sizeof v)) _exit(7); /* blocks: the queue holds one step */
    _exit(5);
  }
  char c;
  CHECK_EQ_INT(read(pfd[0], &c, 1), 1);
  hm_chan_t *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_READER, 0, &r), 0);
  CHECK_EQ_INT(hm_chan_wait(r, 0, 1000), 0);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_EQ_INT(hm_chan_wait(r, 1, 20000), -EPIPE);
  CHECK(strstr(hm_ctx_last_error(ctx), "died") != NULL);
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r, "v", 0, &p, &n), 0);
  CHECK(p && *(const int *)p == 1);
  hm_chan_close(r);

  /* The reader dies holding step 0; the writer blocks on step 1. A new
   * writer rank 0 can be opened: the dead one's rank is free again. */
  pid = fork();
  if (pid == 0) {
    hm_ctx_t *cc = NULL;
    hm_chan_t *rr = NULL;
    if (hm_ctx_new(&cc, NULL) || hm_chan_open(cc, "dram", name, HM_CHAN_READER, 0, &rr))
      _exit(3);
    if (write(pfd[1], "x", 1) != 1) _exit(6);
    pause();
    _exit(0);
  }
  CHECK_EQ_INT(read(pfd[0], &c, 1), 1);
  hm_chan_t *w = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, "dram", name, HM_CHAN_WRITER, 0, &w), 0);
  if (w) {
    hm_chan_set_timeout(w, 20000);
    int v = 2;
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    CHECK_EQ_INT(hm_chan_put(w, "v", 1, &v, sizeof v), -EPIPE);
    CHECK(strstr(hm_ctx_last_error(ctx), "reader rank 0") != NULL);
    /* The dead reader's share was released: the writer goes on. */
    CHECK_EQ_INT(hm_chan_put(w, "v", 1, &v, sizeof v), 0);
    CHECK_EQ_INT(hm_chan_commit(w, 1), 0);
    hm_chan_close(w);
  }
  close(pfd[0]);
  close(pfd[1]);
  CHECK_EQ_INT(hm_chan_unlink(ctx, "dram", name), 0);
}

int main(void) {
  hm_ctx_t *ctx = NULL;
  if (hm_ctx_new(&ctx, NULL)) return 1;
  test_basic(ctx, "dram");
  test_queue(ctx, HM_CHAN_BLOCK);
  test_queue(ctx, HM_CHAN_DISCARD);
  test_ranks(ctx);
  test_bad_rank(ctx);
  test_many(ctx);
  test_tiers_and_input(ctx);
  test_fork(ctx);
  test_dead_peers(ctx);
  hm_ctx_free(ctx);
  return hm_test_done("test_channel");
}
