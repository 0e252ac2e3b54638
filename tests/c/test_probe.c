/* SPDX-License-Identifier: BSD-3-Clause */
/* Tier measurements at small sizes: sane results, the calling thread's
 * affinity restored, bad storage directories refused with the right errno
 * and nothing left behind in the directory. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "hetmem.h"
#include "prim/prim.h"
#include "probe/probe.h"
#include "testhelper.h"

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static int probe_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, ".hetmem-probe", 13)) n++;
  closedir(d);
  return n;
}

static void test_stream(hm_ctx_t *ctx) {
  int before[256], after[256];
  int nb = _hm_prim_allowed_cpus(before, 256);
  hm_stream_config_t cfg;
  hm_stream_config_default(&cfg);
  cfg.array_bytes = 8u << 20;
  cfg.repetitions = 3;
  hm_stream_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  CHECK_EQ_INT(hm_probe_stream(ctx, &cfg, &r), 0);
  CHECK(r.copy_gbs > 0 && r.scale_gbs > 0 && r.add_gbs > 0 && r.triad_gbs > 0);
  CHECK(r.threads >= 1);
  CHECK_EQ_INT(r.array_bytes, 8u << 20);
  CHECK_EQ_INT(r.version, HM_STREAM_RESULT_VERSION);
  int na = _hm_prim_allowed_cpus(after, 256);
  CHECK_EQ_INT(na, nb);
  CHECK(na == nb && memcmp(before, after, sizeof(int) * (size_t)na) == 0);

  /* Bound to node 0, one thread. */
  cfg.numa_node = 0;
  cfg.threads = 1;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  CHECK_EQ_INT(hm_probe_stream(ctx, &cfg, &r), 0);
  CHECK_EQ_INT(r.threads, 1);
  CHECK(r.triad_gbs > 0);

  cfg.numa_node = 1023; /* no machine here has memory there */
  CHECK_EQ_INT(hm_probe_stream(ctx, &cfg, &r), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "node 1023") != NULL);
  cfg.numa_node = -1;
  cfg.threads = 100000;
  CHECK_EQ_INT(hm_probe_stream(ctx, &cfg, &r), -EINVAL);
  cfg.threads = 1;
  cfg.size = 8; /* a struct from some other ABI */
  CHECK_EQ_INT(hm_probe_stream(ctx, &cfg, &r), -EINVAL);
}

static void test_latency(hm_ctx_t *ctx) {
  hm_latency_config_t cfg;
  hm_latency_config_default(&cfg);
  cfg.buffer_bytes = 8u << 20;
  cfg.loads = 200000;
  cfg.repetitions = 2;
  hm_latency_result_t r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  CHECK_EQ_INT(hm_probe_latency(ctx, &cfg, &r), 0);
  CHECK(r.ns_per_load > 0 && r.ns_per_load < 1e6);
  CHECK_EQ_INT(r.loads, 200000);
  CHECK_EQ_INT(r.load_threads, 0);
  int cpus[256];
  if (_hm_prim_allowed_cpus(cpus, 256) >= 2) {
    cfg.load_threads = 1;
    memset(&r, 0, sizeof r);
    r.size = sizeof r;
    CHECK_EQ_INT(hm_probe_latency(ctx, &cfg, &r), 0);
    CHECK_EQ_INT(r.load_threads, 1);
    CHECK(r.load_gbs > 0 && r.ns_per_load > 0);
  }
  cfg.load_threads = 4000; /* more than the CPUs besides the chase's */
  CHECK_EQ_INT(hm_probe_latency(ctx, &cfg, &r), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "load threads") != NULL);
  cfg.load_threads = 0;
  cfg.buffer_bytes = 64; /* fewer lines than a chase needs */
  CHECK_EQ_INT(hm_probe_latency(ctx, &cfg, &r), -EINVAL);
}

static int storage(hm_ctx_t *ctx, const char *dir, uint64_t bytes, hm_storage_result_t *r) {
  hm_storage_config_t cfg;
  hm_storage_config_default(&cfg);
  cfg.dir = dir;
  cfg.file_bytes = bytes;
  cfg.seq_depth = 4;
  cfg.seq_passes = 1;
  cfg.nqd = 2;
  cfg.qds[0] = 1;
  cfg.qds[1] = 4;
  cfg.rand_seconds = 0.05;
  memset(r, 0, sizeof *r);
  r->size = sizeof *r;
  return hm_probe_storage(ctx, &cfg, r);
}

static void test_storage(hm_ctx_t *ctx) {
  const char *base = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/hm-test-probe-XXXXXX", base && *base ? base : "/var/tmp");
  if (!mkdtemp(dir)) {
    CHECK(!"mkdtemp");
    return;
  }
  hm_storage_result_t r;
  int rc = storage(ctx, dir, 16u << 20, &r);
  struct statfs sf;
  if (rc == -EINVAL && statfs(dir, &sf) == 0) {
    /* $TMPDIR on tmpfs: the refusal is the right answer there. */
    printf("skipping storage measurement: %s\n", hm_ctx_last_error(ctx));
  } else {
    CHECK_EQ_INT(rc, 0);
    CHECK(r.seq_read_gbs > 0 && r.seq_write_gbs > 0);
    CHECK_EQ_INT(r.file_bytes, 16u << 20);
    CHECK_EQ_INT(r.nqd, 2);
    CHECK_EQ_INT(r.randread[0].qd, 1);
    CHECK_EQ_INT(r.randread[1].qd, 4);
    for (int i = 0; i < 2; i++) {
      CHECK(r.randread[i].ios > 0 && r.randread[i].iops > 0);
      CHECK(r.randread[i].lat_us_mean > 0);
      CHECK(r.randread[i].lat_us_p50 <= r.randread[i].lat_us_p99);
    }
  }
  CHECK_EQ_INT(entries(dir), 0);

  /* Too full: a probe file far larger than any disk. */
  CHECK_EQ_INT(storage(ctx, dir, 1ull << 60, &r), -ENOSPC);
  CHECK(strstr(hm_ctx_last_error(ctx), "free") != NULL);
  CHECK_EQ_INT(entries(dir), 0);

  /* Not writable (root writes anywhere, so only as a user). */
  if (geteuid() != 0) {
    chmod(dir, 0555);
    rc = storage(ctx, dir, 16u << 20, &r);
    CHECK(rc == -EACCES || rc == -EROFS);
    chmod(dir, 0700);
  }

  char missing[4200], file[4200];
  snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
  CHECK_EQ_INT(storage(ctx, missing, 16u << 20, &r), -ENOENT);
  CHECK(strstr(hm_ctx_last_error(ctx), "does not exist") != NULL);
  snprintf(file, sizeof file, "%s/plain-file", dir);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  CHECK_EQ_INT(storage(ctx, file, 16u << 20, &r), -ENOTDIR);
  unlink(file);
  CHECK_EQ_INT(storage(ctx, NULL, 16u << 20, &r), -EINVAL);
  CHECK_EQ_INT(entries(dir), 0);
  rmdir(dir);

  /* tmpfs serves "direct" I/O from memory: not a storage tier. */
  if (statfs("/dev/shm", &sf) == 0 && sf.f_type == 0x01021994) {
    CHECK_EQ_INT(storage(ctx, "/dev/shm", 16u << 20, &r), -EINVAL);
    CHECK(strstr(hm_ctx_last_error(ctx), "does not support O_DIRECT") != NULL);
    /* Others (MPI, pagers) use /dev/shm too: look for our own names only. */
    CHECK_EQ_INT(probe_files("/dev/shm"), 0);
  }
}

static void test_json(hm_ctx_t *ctx) {
  char *out = NULL;
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"llc\"}", &out), 0);
  CHECK(out && strstr(out, "\"llc_bytes\""));
  hm_free(out);
  out = NULL;
  CHECK_EQ_INT(hm_probe_json(ctx,
                             "{\"test\": \"stream\", \"threads\": 1, \"array_bytes\": 8388608, "
                             "\"repetitions\": 2, \"cpus\": [ ]}",
                             &out),
               0);
  CHECK(out && strstr(out, "\"triad_gbs\"") && strstr(out, "\"threads\": 1,"));
  hm_free(out);
  out = NULL;
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"stream\", \"thread\": 1}", &out), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "unknown key 'thread'") != NULL);
  CHECK(out == NULL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"stream\", \"threads\": 1.5}", &out), -EINVAL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"stream\", \"threads\": 1e300}", &out), -EINVAL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"nope\"}", &out), -EINVAL);
  CHECK_EQ_INT(hm_probe_json(ctx, "[1, 2]", &out), -EINVAL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"storage\"}", &out), -EINVAL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"storage\", \"dir\": \"/no\\u0073uch\"}", &out),
               -ENOENT);
  CHECK(strstr(hm_ctx_last_error(ctx), "'/nosuch'") != NULL);
  CHECK_EQ_INT(hm_probe_json(ctx, "{\"test\": \"latency\"", &out), -EINVAL);
}

/* CPU-less nodes are measured from the nearest node with CPUs. */
static void test_nearest_cpu_node(void) {
  const char *g = HM_SOURCE_DIR "/tests/golden";
  char root[4200];
  snprintf(root, sizeof root, "%s/xeon-max-flat-snc4", g);
  if (!_hm_prim_is_dir(root, "/sys/devices/system/node")) {
    printf("skipping nearest-node checks: no golden trees\n");
    return;
  }
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 0), 0);  /* has CPUs */
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 8), 0);  /* HBM of SNC 0 */
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 9), 1);
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 15), 7); /* socket 1 */
  snprintf(root, sizeof root, "%s/optane-kmem", g);
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 2), 0);
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 3), 1);
  snprintf(root, sizeof root, "%s/vm", g);
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 0), 0);
  CHECK_EQ_INT(_hm_probe_nearest_cpu_node(root, 5), 5); /* no such node: itself */
}

int main(void) {
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  test_nearest_cpu_node();
  test_stream(ctx);
  test_latency(ctx);
  test_storage(ctx);
  test_json(ctx);
  hm_ctx_free(ctx);
  return hm_test_done("test_probe");
}
