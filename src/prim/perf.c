/* SPDX-License-Identifier: BSD-3-Clause */
/* Access samplers' primitives: perf_event_open and its ring buffers, and
 * the small sysfs writes of DAMON's admin interface (under a root). */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_perf_open(void *attr, int pid, int cpu, int group_fd) {
  long fd = syscall(SYS_perf_event_open, (struct perf_event_attr *)attr, (pid_t)pid, cpu,
                    group_fd, (unsigned long)PERF_FLAG_FD_CLOEXEC);
  return fd < 0 ? -errno : (int)fd;
}

int _hm_prim_perf_ioctl(int fd, unsigned long req, unsigned long arg) {
  return ioctl(fd, req, arg) < 0 ? -errno : 0;
}

int _hm_prim_perf_map(int fd, size_t len, size_t off, int writable, void **out) {
  return _hm_prim_sys_mmap(NULL, len, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd,
                           (off_t)off, out);
}

int _hm_prim_write_text(const char *root, const char *path, const char *text) {
  char full[4096];
  int rc = _hm_prim_path(root, path, full, sizeof full);
  if (rc) return rc;
  /* never O_CREAT: a sysfs file that is missing is a feature the kernel
   * lacks, and a recorded tree must behave the same */
  int fd = open(full, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t len = strlen(text), done = 0;
  rc = 0;
  while (done < len) {
    ssize_t n = write(fd, text + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      rc = n < 0 ? -errno : -EIO;
      break;
    }
    done += (size_t)n;
  }
  if (close(fd) != 0 && !rc) rc = -errno;
  return rc;
}
