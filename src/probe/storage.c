/* SPDX-License-Identifier: BSD-3-Clause */
/* Storage-tier measurement: O_DIRECT through io_uring on an unlinked probe
 * file, so the page cache is out of the picture and nothing is left behind
 * even if the process is killed. */
#include <errno.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"
#include "probe/probe.h"

#define HM__RAND_BLOCK 4096u
/* Room left for everyone else when sizing against free space. */
#define HM__FREE_MARGIN (64ull << 20)

static const uint32_t hm__default_qds[] = {1, 2, 4, 8, 16, 32};

void hm_storage_config_default(hm_storage_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->size = sizeof *cfg;
  cfg->version = HM_STORAGE_CONFIG_VERSION;
}

static uint64_t hm__rng(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* One completion, waiting as long as it takes: 0, or a negative errno. */
static int hm__wait(_hm_prim_ring_t *ring, uint64_t *tag, int *res) {
  int rc = _hm_prim_ring_next(ring, -1, tag, res);
  return rc == 1 ? 0 : rc < 0 ? rc : -EIO;
}

/* Streams the whole file in blocks of `block` with `depth` in flight.
 * Returns seconds, or a negative errno. */
static double hm__seq(hm_ctx_t *ctx, _hm_prim_ring_t *ring, int fd, char *buf, uint64_t size,
                      uint32_t block, uint32_t depth, int write, int *rc) {
  uint64_t nblocks = size / block, issued = 0, done = 0;
  uint64_t t0 = _hm_prim_now_ns();
  for (uint32_t s = 0; s < depth && issued < nblocks; s++, issued++)
    _hm_prim_ring_rw(ring, write ? HM_PRIM_RING_WRITE : 0, fd, buf + (size_t)s * block, block,
                     issued * block, s);
  int r = _hm_prim_ring_submit(ring);
  while (r >= 0 && done < nblocks) {
    uint64_t slot;
    int res;
    if ((r = hm__wait(ring, &slot, &res))) break;
    done++;
    if (res != (int)block) {
      r = res < 0 ? res : -EIO;
      break;
    }
    if (issued < nblocks) {
      _hm_prim_ring_rw(ring, write ? HM_PRIM_RING_WRITE : 0, fd, buf + slot * block, block,
                       issued * block, slot);
      issued++;
      r = _hm_prim_ring_submit(ring);
    }
  }
  uint64_t t1 = _hm_prim_now_ns();
  if (r < 0) {
    /* Drain what is still in flight before the buffers go away. */
    for (uint64_t k = done; k < issued; k++) {
      uint64_t slot;
      int res;
      if (hm__wait(ring, &slot, &res)) break;
    }
    *rc = _hm_error(ctx, r, "storage: %s failed: %s", write ? "write" : "read", hm_strerror(r));
    return -1;
  }
  return (double)(t1 - t0) * 1e-9;
}

static int hm__cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Waits for the completions still in flight (before the buffers go away). */
static void hm__drain(_hm_prim_ring_t *ring, uint64_t inflight) {
  while (inflight) {
    uint64_t slot;
    int res;
    if (hm__wait(ring, &slot, &res)) break;
    inflight--;
  }
}

/* IOPS and latency percentiles of nlat reads done in ns (sorts lat). */
static void hm__rand_stats(hm_randread_point_t *pt, uint32_t qd, uint64_t *lat, size_t nlat,
                           uint64_t ns) {
  qsort(lat, nlat, sizeof *lat, hm__cmp_u64);
  double sum = 0;
  for (size_t i = 0; i < nlat; i++) sum += (double)lat[i];
  memset(pt, 0, sizeof *pt);
  pt->qd = qd;
  pt->ios = nlat;
  pt->iops = (double)nlat / ((double)ns * 1e-9);
  pt->lat_us_mean = nlat ? sum / (double)nlat * 1e-3 : 0;
  pt->lat_us_p50 = nlat ? (double)lat[nlat / 2] * 1e-3 : 0;
  pt->lat_us_p99 = nlat ? (double)lat[(size_t)((double)(nlat - 1) * 0.99)] * 1e-3 : 0;
}

/* After the timed loop: its error, or the stats of its nlat reads done in
 * ns; frees lat either way. */
static int hm__rand_done(hm_ctx_t *ctx, int r, hm_randread_point_t *pt, uint32_t qd,
                         uint64_t *lat, size_t nlat, uint64_t ns) {
  if (r < 0) {
    free(lat);
    return _hm_error(ctx, r, "storage: random read failed: %s", hm_strerror(r));
  }
  hm__rand_stats(pt, qd, lat, nlat, ns);
  free(lat);
  return 0;
}

/* 4 KiB reads at random aligned offsets with qd in flight for `seconds`. */
static int hm__randread(hm_ctx_t *ctx, _hm_prim_ring_t *ring, int fd, char *buf,
                        uint64_t size, uint32_t qd, double seconds, hm_randread_point_t *pt) {
  uint64_t nblk = size / HM__RAND_BLOCK, seed = 0xD1B54A32D192ED03ULL ^ qd;
  uint64_t start[HM_STORAGE_MAX_QD > 64 ? HM_STORAGE_MAX_QD : 64];
  size_t cap = 65536, nlat = 0;
  uint64_t *lat = malloc(cap * sizeof *lat);
  if (!lat) return _hm_error(ctx, -ENOMEM, "storage: out of memory");
  uint64_t t0 = _hm_prim_now_ns(), deadline = t0 + (uint64_t)(seconds * 1e9), inflight = 0;
  int r = 0;
  for (uint32_t s = 0; s < qd; s++) {
    start[s] = _hm_prim_now_ns();
    _hm_prim_ring_rw(ring, 0, fd, buf + (size_t)s * HM__RAND_BLOCK, HM__RAND_BLOCK,
                            (hm__rng(&seed) % nblk) * HM__RAND_BLOCK, s);
    inflight++;
  }
  r = _hm_prim_ring_submit(ring);
  uint64_t now = t0;
  while (r >= 0 && inflight) {
    uint64_t slot;
    int res;
    if ((r = hm__wait(ring, &slot, &res))) break;
    inflight--;
    now = _hm_prim_now_ns();
    if (res != (int)HM__RAND_BLOCK) {
      r = res < 0 ? res : -EIO;
      break;
    }
    if (nlat == cap) {
      uint64_t *p = realloc(lat, 2 * cap * sizeof *lat);
      if (!p) {
        r = -ENOMEM;
        break;
      }
      lat = p;
      cap *= 2;
    }
    lat[nlat++] = now - start[slot];
    if (now < deadline) {
      start[slot] = now;
      _hm_prim_ring_rw(ring, 0, fd, buf + slot * HM__RAND_BLOCK, HM__RAND_BLOCK,
                              (hm__rng(&seed) % nblk) * HM__RAND_BLOCK, slot);
      inflight++;
      r = _hm_prim_ring_submit(ring);
    }
  }
  hm__drain(ring, inflight);
  return hm__rand_done(ctx, r, pt, qd, lat, nlat, now - t0);
}

/* One storage probe: its parameters, probe file, ring and buffer. */
typedef struct hm__sto_s {
  hm_ctx_t *ctx;
  const hm_storage_config_t *cfg;
  const char *dir;
  uint32_t block, depth, passes, nqd, maxqd;
  const uint32_t *qds;
  double secs;
  uint64_t size;
  char h2[32]; /* size, formatted */
  int fd;
  _hm_prim_ring_t *ring;
  char *buf;
  size_t buflen;
} hm__sto_t;

/* cfg's parameters into S, a default for each one left 0. */
static void hm__sto_defaults(hm__sto_t *S) {
  const hm_storage_config_t *cfg = S->cfg;
  S->block = cfg->block_bytes ? cfg->block_bytes : 1u << 20;
  S->depth = cfg->seq_depth ? cfg->seq_depth : 8;
  S->passes = cfg->seq_passes ? cfg->seq_passes : 3;
  S->secs = cfg->rand_seconds > 0 ? cfg->rand_seconds : 1.0;
  S->nqd = cfg->nqd ? cfg->nqd : (uint32_t)(sizeof hm__default_qds / sizeof(uint32_t));
  S->qds = cfg->nqd ? cfg->qds : hm__default_qds;
}

/* cfg with its defaults, checked. */
static int hm__sto_params(hm__sto_t *S) {
  const hm_storage_config_t *cfg = S->cfg;
  hm_ctx_t *ctx = S->ctx;
  hm__sto_defaults(S);
  if (S->block % HM__RAND_BLOCK || S->depth > 256 || S->nqd > HM_STORAGE_MAX_QD)
    return _hm_error(ctx, -EINVAL,
                     "storage: block size must be a multiple of 4 KiB, depth at most 256");
  S->maxqd = S->depth;
  for (uint32_t i = 0; i < S->nqd; i++) {
    if (S->qds[i] == 0 || S->qds[i] > 64)
      return _hm_error(ctx, -EINVAL, "storage: queue depth %u is not in 1..64", S->qds[i]);
    if (S->qds[i] > S->maxqd) S->maxqd = S->qds[i];
  }
  uint64_t size = cfg->file_bytes ? cfg->file_bytes : 1ull << 30;
  size -= size % S->block;
  if (size < S->block) size = S->block;
  S->size = size;
  return 0;
}

/* The directory: there, writable, real storage, room for the file. */
static int hm__sto_dir(hm__sto_t *S) {
  hm_ctx_t *ctx = S->ctx;
  const char *dir = S->dir;
  _hm_prim_fsinfo_t fs;
  int rc = _hm_prim_fs_info(dir, &fs);
  if (rc == -ENOENT) return _hm_error(ctx, rc, "storage directory '%s' does not exist", dir);
  if (rc == -ENOTDIR) return _hm_error(ctx, rc, "storage path '%s' is not a directory", dir);
  if (rc) return _hm_error(ctx, rc, "storage directory '%s': %s", dir, hm_strerror(rc));
  if (fs.readonly)
    return _hm_error(ctx, -EROFS, "storage directory '%s' is on a read-only filesystem", dir);
  if (!fs.writable)
    return _hm_error(ctx, -EACCES, "storage directory '%s' is not writable", dir);
  if (fs.fs_magic == TMPFS_MAGIC || fs.fs_magic == RAMFS_MAGIC)
    return _hm_error(ctx, -EINVAL,
                     "storage directory '%s': filesystem does not support O_DIRECT "
                     "(tmpfs/ramfs serve direct I/O from memory, not storage)",
                     dir);
  char h1[32];
  _hm_format_size(S->size, S->h2, sizeof S->h2);
  if (fs.free_bytes < S->size + HM__FREE_MARGIN) {
    _hm_format_size(fs.free_bytes, h1, sizeof h1);
    return _hm_error(ctx, -ENOSPC,
                     "storage directory '%s' has %s free; the probe file needs %s plus %s "
                     "to spare",
                     dir, h1, S->h2, "64 MiB");
  }
  return 0;
}

/* The unlinked O_DIRECT probe file, its blocks allocated. */
static int hm__sto_file(hm__sto_t *S) {
  hm_ctx_t *ctx = S->ctx;
  int rc = _hm_prim_probe_file(S->dir, &S->fd);
  if (rc == -EINVAL)
    return _hm_error(ctx, rc, "storage directory '%s': filesystem does not support O_DIRECT",
                     S->dir);
  if (rc) return _hm_error(ctx, rc, "storage directory '%s': cannot create the probe file: %s",
                           S->dir, hm_strerror(rc));
  rc = _hm_prim_fallocate(S->fd, 0, S->size);
  if (rc == -ENOSPC)
    return _hm_error(ctx, rc, "storage directory '%s' has no room for a %s probe file", S->dir,
                     S->h2);
  if (rc && rc != -EOPNOTSUPP)
    return _hm_error(ctx, rc, "storage: fallocate: %s", hm_strerror(rc));
  return 0;
}

/* The ring and the I/O buffer, filled with incompressible contents (some
 * virtual disks shortcut zeros). The buffer is advised huge pages, as the
 * pager's read buffers are (pager.c): in 4 KiB pages a 1 MiB read is 256
 * DMA segments, and on a virtio disk that, not the disk, set the rate:
 * this VM's /var/tmp probed 1.04-1.19 GB/s sequential read with them and
 * 2.45-2.52 GB/s with huge pages (3 alternated rounds; fio with huge-page
 * buffers 1.9-2.2, the pager's scans 1.5-1.7), so the tier was reported at
 * half its speed. 4 KiB random reads are one page either way. */
static int hm__sto_buffers(hm__sto_t *S) {
  hm_ctx_t *ctx = S->ctx;
  int rc = _hm_prim_ring_new(S->maxqd < 8 ? 8 : S->maxqd, &S->ring);
  if (rc) return _hm_error(ctx, rc, "storage: io_uring setup failed: %s", hm_strerror(rc));
  void *mem = NULL;
  if ((rc = _hm_prim_vm_map_huge(S->buflen, &mem)))
    return _hm_error(ctx, rc, "storage: out of memory");
  S->buf = mem;
  uint64_t seed = 0x243F6A8885A308D3ULL;
  for (size_t i = 0; i + 8 <= S->buflen; i += 8) {
    uint64_t v = hm__rng(&seed);
    memcpy(S->buf + i, &v, 8);
  }
  return 0;
}

/* Sequential write, best of the sequential reads, random reads per qd. */
static int hm__sto_measure(hm__sto_t *S, hm_storage_result_t *r) {
  const hm_storage_config_t *cfg = S->cfg;
  int rc = 0;
  /* The write fills the file, so later reads hit real blocks rather than
   * unwritten extents the filesystem answers with zeros. */
  double t = hm__seq(S->ctx, S->ring, S->fd, S->buf, S->size, S->block, S->depth, 1, &rc);
  if (rc) return rc;
  if (!(cfg->flags & HM_STORAGE_NO_WRITE)) r->seq_write_gbs = (double)S->size / t * 1e-9;
  double best = 0;
  for (uint32_t p = 0; p < S->passes; p++) {
    t = hm__seq(S->ctx, S->ring, S->fd, S->buf, S->size, S->block, S->depth, 0, &rc);
    if (rc) return rc;
    double gbs = (double)S->size / t * 1e-9;
    if (gbs > best) best = gbs;
  }
  r->seq_read_gbs = best;
  if (!(cfg->flags & HM_STORAGE_NO_RANDOM)) {
    for (uint32_t i = 0; i < S->nqd; i++)
      if ((rc = hm__randread(S->ctx, S->ring, S->fd, S->buf, S->size, S->qds[i], S->secs,
                             &r->randread[i])))
        return rc;
    r->nqd = S->nqd;
  }
  r->block_bytes = S->block;
  r->seq_depth = S->depth;
  return 0;
}

/* The probe file, then (unless only checking) the measurements; *out is
 * written only on success. The caller frees S's file, ring and buffer. */
static int hm__sto_run(hm__sto_t *S, hm_storage_result_t *out) {
  hm_storage_result_t r;
  memset(&r, 0, sizeof r);
  int rc = hm__sto_file(S);
  if (!rc && !(S->cfg->flags & HM_STORAGE_CHECK_ONLY)) {
    rc = hm__sto_buffers(S);
    if (!rc) rc = hm__sto_measure(S, &r);
  }
  if (rc) return rc;
  r.size = sizeof r;
  r.version = HM_STORAGE_RESULT_VERSION;
  r.file_bytes = S->size;
  *out = r;
  return 0;
}

int hm_probe_storage(hm_ctx_t *ctx, const hm_storage_config_t *cfg, hm_storage_result_t *out) {
  if (!cfg || !out || cfg->size < sizeof *cfg || out->size < sizeof *out)
    return _hm_error(ctx, -EINVAL, "storage: config or result struct of the wrong size");
  if (!cfg->dir || !*cfg->dir) return _hm_error(ctx, -EINVAL, "storage: no directory given");
  hm__sto_t S;
  memset(&S, 0, sizeof S);
  S.ctx = ctx;
  S.cfg = cfg;
  S.dir = cfg->dir;
  S.fd = -1;
  int rc = hm__sto_params(&S);
  if (!rc) rc = hm__sto_dir(&S);
  if (rc) return rc;
  S.buflen = (size_t)S.depth * S.block;
  if (S.buflen < (size_t)S.maxqd * HM__RAND_BLOCK) S.buflen = (size_t)S.maxqd * HM__RAND_BLOCK;
  rc = hm__sto_run(&S, out);
  _hm_prim_ring_free(S.ring);
  if (S.buf) _hm_prim_vm_unmap(S.buf, S.buflen);
  if (S.fd >= 0) _hm_prim_close(S.fd);
  return rc;
}
