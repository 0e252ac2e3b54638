/* SPDX-License-Identifier: BSD-3-Clause */
/* Filesystem reads for discovery, under a replaceable root, and the
 * creation of output files in directories other users may write. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_path(const char *root, const char *path, char *out, size_t len) {
  int n;
  if (!root || !*root || (root[0] == '/' && root[1] == 0))
    n = snprintf(out, len, "%s", path);
  else
    n = snprintf(out, len, "%s%s%s", root, path[0] == '/' ? "" : "/", path);
  return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

ssize_t _hm_prim_read_text(const char *root, const char *path, char *buf, size_t len) {
  char full[4096];
  int rc = _hm_prim_path(root, path, full, sizeof full);
  if (rc) return rc;
  if (len == 0) return -EINVAL;
  int fd = open(full, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t got = 0;
  for (;;) {
    if (got + 1 >= len) {
      /* Only a problem if there is more to read. */
      char extra;
      ssize_t more = read(fd, &extra, 1);
      close(fd);
      if (more > 0) return -EFBIG;
      break;
    }
    ssize_t r = read(fd, buf + got, len - 1 - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = -errno;
      close(fd);
      return e;
    }
    if (r == 0) {
      close(fd);
      break;
    }
    got += (size_t)r;
  }
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) got--;
  buf[got] = 0;
  return (ssize_t)got;
}

int _hm_prim_read_u64(const char *root, const char *path, uint64_t *out) {
  char buf[64];
  ssize_t n = _hm_prim_read_text(root, path, buf, sizeof buf);
  if (n < 0) return (int)n;
  if (n == 0 || buf[0] == '-') return -EINVAL;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 0);
  if (errno || end == buf || *end) return -EINVAL;
  *out = v;
  return 0;
}

static int hm__cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int _hm_prim_list_dir(const char *root, const char *path,
                      int (*fn)(const char *name, void *arg), void *arg) {
  char full[4096];
  int rc = _hm_prim_path(root, path, full, sizeof full);
  if (rc) return rc;
  DIR *d = opendir(full);
  if (!d) return -errno;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  rc = 0;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 64;
      char **p = realloc(names, ncap * sizeof *p);
      if (!p) {
        rc = -ENOMEM;
        break;
      }
      names = p;
      cap = ncap;
    }
    if (!(names[n] = strdup(e->d_name))) {
      rc = -ENOMEM;
      break;
    }
    n++;
  }
  closedir(d);
  if (!rc) {
    if (n) qsort(names, n, sizeof *names, hm__cmp_names); /* names is NULL when n == 0 */
    for (size_t i = 0; i < n && !rc; i++) rc = fn(names[i], arg);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return rc;
}

ssize_t _hm_prim_readlink(const char *root, const char *path, char *buf, size_t len) {
  char full[4096];
  int rc = _hm_prim_path(root, path, full, sizeof full);
  if (rc) return rc;
  if (len == 0) return -EINVAL;
  ssize_t n = readlink(full, buf, len - 1);
  if (n < 0) return -errno;
  buf[n] = 0;
  return n;
}

int _hm_prim_is_dir(const char *root, const char *path) {
  char full[4096];
  struct stat st;
  if (_hm_prim_path(root, path, full, sizeof full)) return 0;
  return stat(full, &st) == 0 && S_ISDIR(st.st_mode);
}

int _hm_prim_check_dir(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -errno;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  if (access(path, R_OK | X_OK) != 0) return -errno;
  return 0;
}

int _hm_prim_dir_unsafe(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return -errno;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  return (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX) ? 1 : 0;
}

static uint64_t hm__random64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* no entropy yet: still never reused below */
  return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
}

int _hm_prim_file_create_excl(const char *path, unsigned mode, char *tmp, size_t len) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  int dl = slash ? (int)(slash - path) + 1 : 0;
  if (!*name) return -EISDIR;
  for (int attempt = 0; attempt < 100; attempt++) {
    int n = snprintf(tmp, len, "%.*s.%s.%016llx.tmp", dl, path, name,
                     (unsigned long long)hm__random64());
    if (n < 0 || (size_t)n >= len) return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

int _hm_prim_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    if (w == 0) return -EIO;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int _hm_prim_fsync(int fd) { return fsync(fd) ? -errno : 0; }

int _hm_prim_rename(const char *from, const char *to) { return rename(from, to) ? -errno : 0; }

int _hm_prim_unlink(const char *path) { return unlink(path) ? -errno : 0; }

int _hm_prim_open_append_own(const char *path) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    close(fd);
    return -EPERM;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

/* One "Name:   N kB" line of a /proc status text, in bytes; 0 if absent. */
static uint64_t hm__status_kb(const char *text, const char *name) {
  const char *at = strstr(text, name);
  if (!at) return 0;
  return (uint64_t)strtoull(at + strlen(name), NULL, 10) << 10;
}

int _hm_prim_self_anon_bytes(const char *root, uint64_t *out) {
  char buf[4096];
  ssize_t n = _hm_prim_read_text(root, "/proc/self/status", buf, sizeof buf);
  if (n < 0) return (int)n;
  if (!strstr(buf, "\nRssAnon:")) return -ENODATA;
  *out = hm__status_kb(buf, "\nRssAnon:") + hm__status_kb(buf, "\nRssShmem:");
  return 0;
}
