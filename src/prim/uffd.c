/* SPDX-License-Identifier: BSD-3-Clause */
/* userfaultfd and PAGEMAP_SCAN: the ioctls the pager (src/sdm/) resolves
 * faults and tracks dirty pages with. Features are negotiated at run time;
 * constants newer than the build host's headers are defined here with the
 * kernel's values (include/uapi/linux/userfaultfd.h, linux/fs.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prim/prim.h"

#ifndef UFFDIO_CONTINUE_MODE_WP
#define UFFDIO_CONTINUE_MODE_WP ((__u64)1 << 1)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED ((__u64)1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC ((__u64)1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

struct hm__pm_scan_arg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define HM__PAGEMAP_SCAN _IOWR('f', 16, struct hm__pm_scan_arg)

static int hm__uffd_api(int fd, uint64_t want, uint64_t *got) {
  struct uffdio_api api;
  memset(&api, 0, sizeof api);
  api.api = UFFD_API;
  api.features = want;
  if (ioctl(fd, UFFDIO_API, &api)) return -errno;
  *got = api.features;
  return 0;
}

int _hm_prim_uffd_open(uint64_t want, uint64_t *got) {
  /* UFFDIO_API may be called once per descriptor, so the supported set is
   * asked for on a throwaway descriptor first (features = 0 reports all). */
  int flags = O_CLOEXEC | O_NONBLOCK;
  int fd = (int)syscall(SYS_userfaultfd, flags);
  if (fd < 0 && (errno == EPERM || errno == EACCES))
    fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
  if (fd < 0) return errno == ENOSYS ? -ENOSYS : -errno;
  uint64_t avail = 0;
  int rc = hm__uffd_api(fd, 0, &avail);
  close(fd);
  if (rc) return rc;
  fd = (int)syscall(SYS_userfaultfd, flags);
  if (fd < 0) fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
  if (fd < 0) return -errno;
  /* On return the kernel lists every feature it supports, not the ones
   * enabled: what is enabled is what was asked for. */
  uint64_t ignored = 0;
  rc = hm__uffd_api(fd, want & avail, &ignored);
  if (rc) {
    close(fd);
    return rc;
  }
  *got = want & avail;
  return fd;
}

int _hm_prim_uffd_register(int uffd, void *addr, size_t len, uint64_t mode, uint64_t *ioctls) {
  struct uffdio_register reg;
  memset(&reg, 0, sizeof reg);
  reg.range.start = (uint64_t)(uintptr_t)addr;
  reg.range.len = len;
  reg.mode = mode;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg)) return -errno;
  if (ioctls) *ioctls = reg.ioctls;
  return 0;
}

int _hm_prim_uffd_unregister(int uffd, void *addr, size_t len) {
  struct uffdio_range r = {.start = (uint64_t)(uintptr_t)addr, .len = len};
  return ioctl(uffd, UFFDIO_UNREGISTER, &r) ? -errno : 0;
}

int _hm_prim_uffd_continue(int uffd, void *addr, size_t len, int wp, size_t *done) {
  struct uffdio_continue c;
  memset(&c, 0, sizeof c);
  c.range.start = (uint64_t)(uintptr_t)addr;
  c.range.len = len;
  c.mode = wp ? UFFDIO_CONTINUE_MODE_WP : 0;
  int rc = ioctl(uffd, UFFDIO_CONTINUE, &c) ? -errno : 0;
  *done = c.mapped > 0 ? (size_t)c.mapped : 0;
  return rc;
}

int _hm_prim_uffd_continue_wp_works(int uffd) {
  /* A page that no registered range holds (the first 64 KiB are never
   * mapped): the kernel checks the mode before it looks for the range, so
   * an unknown mode says EINVAL and a known one fails on the range. */
  size_t done = 0;
  int rc = _hm_prim_uffd_continue(uffd, (void *)(uintptr_t)0x8000, 4096, 1, &done);
  return rc != -EINVAL;
}

int _hm_prim_uffd_copy(int uffd, void *dst, const void *src, size_t len, int wp, size_t *done) {
  struct uffdio_copy c;
  memset(&c, 0, sizeof c);
  c.dst = (uint64_t)(uintptr_t)dst;
  c.src = (uint64_t)(uintptr_t)src;
  c.len = len;
  c.mode = wp ? UFFDIO_COPY_MODE_WP : 0;
  int rc = ioctl(uffd, UFFDIO_COPY, &c) ? -errno : 0;
  *done = c.copy > 0 ? (size_t)c.copy : 0;
  return rc;
}

int _hm_prim_uffd_wake(int uffd, void *addr, size_t len) {
  struct uffdio_range r = {.start = (uint64_t)(uintptr_t)addr, .len = len};
  return ioctl(uffd, UFFDIO_WAKE, &r) ? -errno : 0;
}

int _hm_prim_uffd_wp(int uffd, void *addr, size_t len, int protect) {
  struct uffdio_writeprotect w;
  memset(&w, 0, sizeof w);
  w.range.start = (uint64_t)(uintptr_t)addr;
  w.range.len = len;
  w.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return ioctl(uffd, UFFDIO_WRITEPROTECT, &w) ? -errno : 0;
}

ssize_t _hm_prim_uffd_read(int uffd, void *msgs, size_t bytes) {
  /* the raw call (_hm_prim_read): inside the interposer libc's read is its
   * own hook (preload/dio.c), which the fault path has no need to pass */
  return _hm_prim_read(uffd, msgs, bytes);
}

int _hm_prim_pagemap_open(void) {
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

ssize_t _hm_prim_pagemap_query(int fd, void *start, size_t len, const _hm_prim_pm_query_t *q,
                               _hm_prim_page_region_t *vec, size_t vec_len, uint64_t *walk_end) {
  struct hm__pm_scan_arg a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.flags = q->flags;
  a.start = (uint64_t)(uintptr_t)start;
  a.end = a.start + len;
  a.vec = (uint64_t)(uintptr_t)vec;
  a.vec_len = vec_len;
  a.category_mask = q->mask;
  a.category_inverted = q->inverted;
  a.category_anyof_mask = q->anyof;
  a.return_mask = q->ret;
  int n = ioctl(fd, HM__PAGEMAP_SCAN, &a);
  if (walk_end) *walk_end = a.walk_end;
  return n < 0 ? -errno : n;
}

int _hm_prim_uffd_open_wp_async(void) {
  uint64_t want = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED, got = 0;
  int fd = _hm_prim_uffd_open(want, &got);
  if (fd >= 0 && got != want) {
    close(fd);
    return -ENOTSUP;
  }
  return fd;
}

int _hm_prim_uffd_register_wp(int uffd, void *addr, size_t len) {
  return _hm_prim_uffd_register(uffd, addr, len, UFFDIO_REGISTER_MODE_WP, NULL);
}
