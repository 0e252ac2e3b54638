/* SPDX-License-Identifier: BSD-3-Clause */
/* Files and shared mappings behind the workflow channel. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prim/chan.h"
#include "prim/prim.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

int _hm_prim_chan_open(const char *path, int create) {
  int flags = O_RDWR | O_CLOEXEC;
  if (create == 1) flags |= O_CREAT | O_EXCL;
  if (create == 2) flags |= O_CREAT | O_TRUNC;
  int fd = open(path, flags, 0600);
  return fd < 0 ? -errno : fd;
}

int _hm_prim_chan_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st)) return -errno;
  *size = (uint64_t)st.st_size;
  return 0;
}

int _hm_prim_chan_truncate(int fd, uint64_t size) {
  return ftruncate(fd, (off_t)size) ? -errno : 0;
}

int _hm_prim_chan_map(int fd, size_t len, int sync, void **out) {
  /* EOPNOTSUPP on a filesystem without DAX: a plain mapping then */
  if (sync && !_hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                                 MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0, out))
    return 0;
  return _hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, out);
}

int _hm_prim_chan_unlink(const char *path) { return unlink(path) ? -errno : 0; }

int _hm_prim_chan_reserve(int fd, uint64_t off, uint64_t len) {
  /* Touching a hole of a full tmpfs or disk through a mapping raises SIGBUS;
   * allocating first turns that into -ENOSPC here. */
  int rc = posix_fallocate(fd, (off_t)off, (off_t)len);
  return rc ? -rc : 0;
}

int _hm_prim_chan_pid(void) { return (int)getpid(); }
