/* The OS layer: every syscall, ioctl and /sys or /proc read of libhetmem
 * goes through a function declared here (names start with _hm_prim_).
 *
 * Contract for all of them: the return value is 0 (or a non-negative count
 * where stated) on success and a negative errno on failure; they never print
 * and never touch a context. Paths named "sysfs path" are absolute paths
 * such as "/sys/devices/system/node" and are resolved under `root`, which
 * replaces "/" so that tests replay recorded trees. */
#ifndef HM_PRIM_H
#define HM_PRIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Joins root and an absolute path into out. -ENAMETOOLONG if it won't fit. */
int _hm_prim_path(const char *root, const char *path, char *out, size_t len);

/* Reads a small text file under root into buf, NUL-terminated, trailing
 * newlines removed. Returns the length. -EFBIG if it did not fit. */
ssize_t _hm_prim_read_text(const char *root, const char *path, char *buf, size_t len);

/* Reads a file holding one unsigned decimal (or 0x hex) integer.
 * -EINVAL when the text is not exactly that. */
int _hm_prim_read_u64(const char *root, const char *path, uint64_t *out);

/* Calls fn(name, arg) for each entry of the directory other than . and ..,
 * in sorted order so results are reproducible. Stops early and returns what
 * fn returned if it is non-zero. */
int _hm_prim_list_dir(const char *root, const char *path,
                      int (*fn)(const char *name, void *arg), void *arg);

/* The target text of a symbolic link under root (as stored, not resolved). */
ssize_t _hm_prim_readlink(const char *root, const char *path, char *buf, size_t len);

/* 1 if path under root is a directory, 0 if it is something else or absent. */
int _hm_prim_is_dir(const char *root, const char *path);

/* 0 if path (not under any root: a real path) is a readable directory. */
int _hm_prim_check_dir(const char *path);

/* ---- Storage directories (prim/fsinfo.c); real paths, never under a root ---- */
/* statfs magic, size and space free to unprivileged writers, in bytes. */
int _hm_prim_statfs_dir(const char *path, uint64_t *magic, uint64_t *total, uint64_t *avail);
/* 0 if path is a directory this process may create files in; -ENOENT,
 * -ENOTDIR, -EROFS or -EACCES otherwise. */
int _hm_prim_check_writable_dir(const char *path);
int _hm_prim_realpath(const char *path, char *out, size_t len);
/* 1 if a file in dir can be opened with O_DIRECT, 0 if the filesystem
 * refuses O_DIRECT; negative errno if no file could be made. Leaves nothing
 * behind. */
int _hm_prim_odirect_supported(const char *dir);

#endif
