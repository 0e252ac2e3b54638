/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's output files (the profile, the statistics line), which
 * may go into directories that other users can write (a shared project
 * directory, /tmp).
 *
 * The profile replaces its target: it is written to a new file beside it,
 * created exclusively under an unpredictable name (never an existing file,
 * never through a symbolic link), and renamed over the target, which
 * replaces a symbolic link there instead of writing through it. A target
 * directory that anyone may write and that lacks the sticky bit is refused:
 * there another user could rename the file away before the rename, or
 * replace the profile afterwards.
 *
 * The statistics are one line appended per process (the processes of a
 * command share the file), so they cannot be renamed into place: the file
 * is opened with O_NOFOLLOW, created 0600 if absent, and must otherwise be
 * a regular file of this user. Anything else is a one-line warning and no
 * write. Neither path is hot: both run once per process, at exit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

static void hm__dir_of(const char *path, char *dir, size_t len) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, len, ".");
  else if (slash == path)
    snprintf(dir, len, "/");
  else
    snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

int _hm_pl_out_dir_check(const char *path, char *why, size_t len) {
  char dir[HM_PATH_MAX];
  hm__dir_of(path, dir, sizeof dir);
  if (_hm_prim_dir_unsafe(dir) != 1) return 0; /* other errors: open says it better */
  snprintf(why, len,
           "directory '%s' is writable by every user and has no sticky bit, so another user "
           "could replace the file: chmod +t %s or choose another directory",
           dir, dir);
  return -EPERM;
}

int _hm_pl_out_replace(const char *path, const char *text, char *why, size_t len) {
  int rc = _hm_pl_out_dir_check(path, why, len);
  if (rc) return rc;
  char tmp[HM_PATH_MAX + 64];
  int fd = _hm_prim_file_create_excl(path, 0644, tmp, sizeof tmp);
  if (fd < 0) {
    snprintf(why, len, "cannot create a file beside it: %s", strerror(-fd));
    return fd;
  }
  rc = _hm_prim_write_all(fd, text, strlen(text));
  if (!rc) rc = _hm_prim_fsync(fd);
  int crc = _hm_prim_close(fd);
  if (!rc) rc = crc;
  if (!rc) rc = _hm_prim_rename(tmp, path);
  if (rc) {
    snprintf(why, len, "%s", strerror(-rc));
    (void)_hm_prim_unlink(tmp);
  }
  return rc;
}

int _hm_pl_out_append(const char *path, const char *text, char *why, size_t len) {
  int fd = _hm_prim_open_append_own(path);
  if (fd == -ELOOP) {
    snprintf(why, len, "it is a symbolic link (remove it or choose another file)");
    return fd;
  }
  if (fd == -EPERM) {
    snprintf(why, len, "it is not a regular file of this user (remove it or choose another file)");
    return fd;
  }
  if (fd < 0) {
    snprintf(why, len, "%s", strerror(-fd));
    return fd;
  }
  /* One write: O_APPEND keeps the lines of concurrent processes whole. */
  int rc = _hm_prim_write_all(fd, text, strlen(text));
  (void)_hm_prim_close(fd);
  if (rc) snprintf(why, len, "%s", strerror(-rc));
  return rc;
}
