/* SPDX-License-Identifier: BSD-3-Clause */
/* Storage-tier primitives: filesystem facts, O_DIRECT probe files and a thin
 * io_uring wrapper (the rest of libhetmem never sees liburing's types). */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_fs_info(const char *dir, _hm_prim_fsinfo_t *out) {
  struct stat st;
  struct statvfs vfs;
  struct statfs fs;
  memset(out, 0, sizeof *out);
  if (stat(dir, &st)) return -errno;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  if (statvfs(dir, &vfs) || statfs(dir, &fs)) return -errno;
  out->free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  out->total_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  out->fs_magic = (uint64_t)fs.f_type;
  out->readonly = (vfs.f_flag & ST_RDONLY) != 0;
  out->writable = access(dir, W_OK | X_OK) == 0;
  return 0;
}

int _hm_prim_probe_file(const char *dir, int *fd_out) {
  char path[4096];
  int fd = -1;
  /* O_EXCL with a fresh name per attempt: never opens someone else's file. */
  for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
    unsigned long tag = ((unsigned long)getpid() << 32) ^ (unsigned long)_hm_prim_now_ns() ^
                        ((unsigned long)attempt << 56);
    int n = snprintf(path, sizeof path, "%s/.hetmem-probe-%lx", dir, tag);
    if (n < 0 || (size_t)n >= sizeof path) return -ENAMETOOLONG;
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return -errno;
  }
  if (fd < 0) return -EEXIST;
  /* Unlinked at once: the space goes back when fd closes, even if the
   * process is killed mid-measurement. */
  if (unlink(path)) {
    int e = -errno;
    close(fd);
    return e;
  }
  *fd_out = fd;
  return 0;
}

int _hm_prim_fallocate(int fd, uint64_t off, uint64_t len) {
  return fallocate(fd, 0, (off_t)off, (off_t)len) ? -errno : 0;
}

int _hm_prim_close(int fd) { return close(fd) ? -errno : 0; }
