/* SPDX-License-Identifier: BSD-3-Clause */
/* sdm_perf: side-by-side throughput of the pager and of the raw storage
 * tier it pages to (built, not a ctest test: timings belong in benchmarks).
 *
 *   sdm_perf [dir] [budget_MiB] [fetch_unit_KiB...]
 *
 * For each fetch unit: a sequential read scan of a region 2x the budget
 * (filled first, then evicted by a second region's pass) against O_DIRECT
 * sequential reads of the same directory (1 MiB blocks, queue depth 8), and
 * random 4 KiB reads with 2 threads over a region 4x the budget against
 * O_DIRECT random 4 KiB reads at queue depth 2 (2 threads, 1 each). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hetmem.h"

#define MiB (1024ull * 1024ull)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

/* ---- raw device ---- */
static int raw_file(const char *dir, size_t bytes) {
  int fd = open(dir, O_RDWR | O_TMPFILE | O_DIRECT | O_EXCL, 0600);
  if (fd < 0) return -1;
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, MiB)) return -1;
  memset(buf, 0x11, MiB);
  for (size_t off = 0; off < bytes; off += MiB)
    if (pwrite(fd, buf, MiB, (off_t)off) != (ssize_t)MiB) return -1;
  free(buf);
  fsync(fd);
  return fd;
}

typedef struct {
  int fd;
  size_t bytes;
  double secs;
  uint64_t ops;
  unsigned seed;
  char *region;
} rr_t;

static void *raw_rand(void *arg) {
  rr_t *r = arg;
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, 4096)) return NULL;
  double t0 = now_s();
  uint64_t x = r->seed;
  while (now_s() - t0 < r->secs) {
    for (int k = 0; k < 64; k++) {
      x = mix(x + 0x9e3779b97f4a7c15ULL);
      off_t off = (off_t)((x % (r->bytes / 4096)) * 4096);
      if (pread(r->fd, buf, 4096, off) != 4096) break;
      r->ops++;
    }
  }
  free(buf);
  return NULL;
}

static double raw_seq(int fd, size_t bytes) {
  /* Sequential 1 MiB reads, 8 threads-worth of depth emulated by two
   * passes of pread on 2 threads is not enough: use readahead-free O_DIRECT
   * with large blocks, which is what the device streams best. */
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, 8 * MiB)) return 0;
  double t0 = now_s();
  for (size_t off = 0; off < bytes; off += 8 * MiB)
    if (pread(fd, buf, 8 * MiB, (off_t)off) <= 0) break;
  double t = now_s() - t0;
  free(buf);
  return (double)bytes / t / 1e9;
}

static void *pager_rand(void *arg) {
  rr_t *r = arg;
  double t0 = now_s();
  uint64_t x = r->seed, sum = 0;
  while (now_s() - t0 < r->secs) {
    for (int k = 0; k < 64; k++) {
      x = mix(x + 0x9e3779b97f4a7c15ULL);
      sum += *(volatile uint64_t *)(r->region + (x % (r->bytes / 4096)) * 4096);
      r->ops++;
    }
  }
  return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/var/tmp";
  uint64_t budget = (argc > 2 ? strtoull(argv[2], NULL, 0) : 256) * MiB;
  hm_ctx_t *ctx = NULL;
  if (hm_ctx_new(&ctx, NULL)) return 2;

  size_t seq_bytes = 2 * budget, rnd_bytes = 4 * budget;
  int fd = raw_file(dir, rnd_bytes);
  if (fd < 0) {
    perror("raw file");
    return 2;
  }
  double raw_gbs = raw_seq(fd, seq_bytes);
  rr_t rr[2] = {{.fd = fd, .bytes = rnd_bytes, .secs = 3, .seed = 1},
                {.fd = fd, .bytes = rnd_bytes, .secs = 3, .seed = 2}};
  pthread_t th[2];
  for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, raw_rand, &rr[t]);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  double raw_iops = (double)(rr[0].ops + rr[1].ops) / 3.0;
  close(fd);
  printf("raw O_DIRECT: sequential %.2f GB/s (8 MiB reads), random 4 KiB QD2 %.0f IOPS\n",
         raw_gbs, raw_iops);

  int nunits = argc > 3 ? argc - 3 : 1;
  for (int ui = 0; ui < nunits; ui++) {
    uint64_t unit = (argc > 3 ? strtoull(argv[3 + ui], NULL, 0) : 256) * 1024;
    hm_pager_config_t cfg;
    hm_pager_config_default(ctx, &cfg);
    cfg.dram_budget = budget;
    cfg.backing_dir = dir;
    cfg.fetch_unit = unit;
    /* Knobs for comparing fill modes side by side (see hetmem.h). */
    if (getenv("SDM_PERF_FLAGS")) cfg.flags = (uint32_t)strtoul(getenv("SDM_PERF_FLAGS"), NULL, 0);
    if (getenv("SDM_PERF_HANDLERS"))
      cfg.handler_threads = (uint32_t)strtoul(getenv("SDM_PERF_HANDLERS"), NULL, 0);
    hm_pager_t *p = NULL;
    if (hm_pager_open(ctx, &cfg, &p)) {
      fprintf(stderr, "%s\n", hm_ctx_last_error(ctx));
      return 2;
    }
    char *a = NULL;
    if (hm_pager_map(p, seq_bytes, (void **)&a)) {
      fprintf(stderr, "%s\n", hm_ctx_last_error(ctx));
      return 2;
    }
    for (size_t i = 0; i < seq_bytes; i += 4096) a[i] = (char)i; /* write it all once */
    hm_pager_flush(p, NULL, 0);
    hm_pager_stats_t s0 = {.size = sizeof s0}, s1 = {.size = sizeof s1};
    uint64_t sum = 0;
    /* Pass 1 warms the stream and evicts the first half; pass 2 is timed. */
    for (size_t i = 0; i < seq_bytes; i += 4096) sum += (unsigned char)a[i];
    hm_pager_stats(p, &s0);
    double t0 = now_s();
    for (size_t i = 0; i < seq_bytes; i += 64) sum += (unsigned char)a[i];
    double t = now_s() - t0;
    hm_pager_stats(p, &s1);
    double gbs = (double)seq_bytes / t / 1e9;
    printf("unit %4llu KiB: seq scan 2x budget %.2f GB/s = %.0f%% of raw; read %.0f MiB, "
           "faults %llu, demand fetches %llu, prefetch issued %llu used %llu (sum %llu)\n",
           (unsigned long long)(unit / 1024), gbs, 100.0 * gbs / raw_gbs,
           (double)(s1.bytes_read - s0.bytes_read) / (double)MiB,
           (unsigned long long)(s1.faults - s0.faults),
           (unsigned long long)(s1.fetches - s0.fetches),
           (unsigned long long)(s1.prefetch_issued - s0.prefetch_issued),
           (unsigned long long)(s1.prefetch_used - s0.prefetch_used), (unsigned long long)sum);
    hm_pager_unmap(p, a, seq_bytes);

    char *b = NULL;
    if (hm_pager_map(p, rnd_bytes, (void **)&b)) {
      fprintf(stderr, "%s\n", hm_ctx_last_error(ctx));
      return 2;
    }
    for (size_t i = 0; i < rnd_bytes; i += 4096) b[i] = 1;
    hm_pager_flush(p, NULL, 0);
    rr_t pr[2] = {{.region = b, .bytes = rnd_bytes, .secs = 1, .seed = 5},
                  {.region = b, .bytes = rnd_bytes, .secs = 1, .seed = 6}};
    for (int tt = 0; tt < 2; tt++) pthread_create(&th[tt], NULL, pager_rand, &pr[tt]);
    for (int tt = 0; tt < 2; tt++) pthread_join(th[tt], NULL); /* warm-up: detect random */
    pr[0].ops = pr[1].ops = 0;
    pr[0].secs = pr[1].secs = 3;
    hm_pager_stats(p, &s0);
    for (int tt = 0; tt < 2; tt++) pthread_create(&th[tt], NULL, pager_rand, &pr[tt]);
    for (int tt = 0; tt < 2; tt++) pthread_join(th[tt], NULL);
    hm_pager_stats(p, &s1);
    double rate = (double)(pr[0].ops + pr[1].ops) / 3.0;
    double dev = (double)(s1.bytes_read - s0.bytes_read) / 4096.0 / 3.0;
    printf("unit %4llu KiB: random 4 KiB reads 4x budget, 2 threads: %.0f reads/s (%.0f device "
           "4 KiB reads/s) = %.0f%% of raw QD2 IOPS\n",
           (unsigned long long)(unit / 1024), rate, dev, 100.0 * rate / raw_iops);
    hm_pager_unmap(p, b, rnd_bytes);
    hm_pager_close(p);
  }
  hm_ctx_free(ctx);
  return 0;
}
