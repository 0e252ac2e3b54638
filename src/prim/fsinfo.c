/* SPDX-License-Identifier: BSD-3-Clause */
/* Storage-directory checks for the tier inventory: statfs/statvfs facts and
 * whether O_DIRECT opens succeed there. These act on real paths (never
 * under an fsroot): storage tiers are always the live machine's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_check_writable_dir(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -errno;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  struct statvfs vfs;
  if (statvfs(path, &vfs) != 0) return -errno;
  if (vfs.f_flag & ST_RDONLY) return -EROFS;
  if (access(path, W_OK | X_OK) != 0) return -errno;
  return 0;
}

int _hm_prim_realpath(const char *path, char *out, size_t len) {
  /* A PATH_MAX buffer on the stack, never realpath's malloc: the
   * interposer calls this while it writes a profile. */
  char r[PATH_MAX];
  if (!realpath(path, r)) return -errno;
  int n = snprintf(out, len, "%s", r);
  return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* One exclusive named file: 1 with O_DIRECT, 0 without, -EEXIST to try
 * another name, else -errno. It is unlinked at once. */
static int hm__odirect_named(const char *name) {
  int fd = open(name, O_CREAT | O_EXCL | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    unlink(name);
    close(fd);
    return 1;
  }
  if (errno == EEXIST) return -EEXIST;
  if (errno != EINVAL) return -errno;
  fd = open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) {
    unlink(name);
    close(fd);
    return 0;
  }
  return -errno;
}

/* An O_TMPFILE in dir: 1 with O_DIRECT, 0 without, else -errno of the
 * first open (the O_DIRECT one, unless that said EINVAL). */
static int hm__odirect_tmpfile(const char *dir) {
  int fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    close(fd);
    return 1;
  }
  int e = errno;
  if (e == EINVAL) {
    /* EINVAL is either "no O_DIRECT" or "no O_TMPFILE": tell them apart. */
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      close(fd);
      return 0;
    }
    e = errno;
  }
  return -e;
}

/* An anonymous O_TMPFILE needs no cleanup at all; filesystems without it get
 * an exclusive 0600 file that is unlinked before anything else happens. */
int _hm_prim_odirect_supported(const char *dir) {
  int r = hm__odirect_tmpfile(dir);
  if (r >= 0) return r;
  int e = -r;
  if (e == EROFS || e == EACCES || e == EPERM || e == ENOSPC || e == EDQUOT) return -e;
  /* O_TMPFILE unsupported here (EOPNOTSUPP, EISDIR, ...): named file. */
  char name[4096];
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  for (int attempt = 0; attempt < 16; attempt++) {
    int n = snprintf(name, sizeof name, "%s/.hetmem-odirect-%ld-%ld-%d", dir, (long)getpid(),
                     (long)ts.tv_nsec, attempt);
    if (n < 0 || (size_t)n >= sizeof name) return -ENAMETOOLONG;
    r = hm__odirect_named(name);
    if (r != -EEXIST) return r;
  }
  return -EEXIST;
}
