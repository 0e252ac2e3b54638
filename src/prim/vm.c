/* SPDX-License-Identifier: BSD-3-Clause */
/* Virtual-memory and backing-file primitives of the pager: memfd, shared and
 * anonymous mappings, madvise, fallocate and the O_DIRECT backing files. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"

int _hm_prim_vm_memfd(const char *name, size_t len) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -errno;
  if (ftruncate(fd, (off_t)len)) {
    int e = -errno;
    close(fd);
    return e;
  }
  return fd;
}

int _hm_prim_vm_map(int fd, size_t len, void **out) {
  if (fd < 0)
    return _hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, out);
  return _hm_prim_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, out);
}

/* An anonymous mapping of len bytes at a 2 MiB boundary, advised
 * MADV_HUGEPAGE (advice refused: 4 KiB pages, no error): over-map, then
 * unmap the head and tail, so that it is unmapped with (out, len) like any
 * other. */
int _hm_prim_vm_map_huge(size_t len, void **out) {
  const size_t align = (size_t)2 << 20;
  if (len == 0) return -EINVAL;
  if (len > SIZE_MAX - align) return -ENOMEM;
  void *mem = NULL;
  int rc = _hm_prim_vm_map(-1, len + align, &mem);
  if (rc) return rc;
  uintptr_t a = ((uintptr_t)mem + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)mem, tail = align - head;
  if (head) (void)_hm_prim_sys_munmap(mem, head);
  if (tail) (void)_hm_prim_sys_munmap((char *)a + len, tail);
  (void)_hm_prim_advise_hugepage((void *)a, len);
  *out = (void *)a;
  return 0;
}

int _hm_prim_vm_map_at(int fd, size_t len, void *addr) {
  void *got = NULL;
  int rc = fd < 0 ? _hm_prim_sys_mmap(addr, len, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                                      -1, 0, &got)
                  : _hm_prim_sys_mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                                      fd, 0, &got);
  return rc ? rc : got == addr ? 0 : -EINVAL;
}

int _hm_prim_vm_unmap(void *addr, size_t len) {
  if (!addr) return 0;
  return _hm_prim_sys_munmap(addr, len);
}

int _hm_prim_vm_madvise(void *addr, size_t len, int advice) {
  return _hm_prim_sys_madvise(addr, len, advice);
}

int _hm_prim_vm_pidfd_self(void) {
#ifdef SYS_pidfd_open
  long r = syscall(SYS_pidfd_open, (pid_t)getpid(), 0);
  return r < 0 ? -errno : (int)r;
#else
  return -ENOSYS;
#endif
}

/* One process_madvise(2) for the whole batch where the kernel takes
 * MADV_DONTNEED from it (6.13+ for the calling process; 6.16+ flushes the
 * TLB once for the batch: one shootdown, not one per range); madvise(2)
 * range by range for what it did not do. */
int _hm_prim_vm_dontneed_runs(int pidfd, void *const *addr, const size_t *len, unsigned n) {
  if (n > 64) return -EINVAL;
  unsigned done = 0;
#ifdef SYS_process_madvise
  if (pidfd >= 0 && n > 1) {
    struct iovec iov[64];
    for (unsigned k = 0; k < n; k++) iov[k] = (struct iovec){addr[k], len[k]};
    long r = syscall(SYS_process_madvise, pidfd, iov, (size_t)n, MADV_DONTNEED, 0u);
    /* the ranges it did whole, in order (a range it did in part is done
     * again by madvise: advising DONTNEED twice is harmless) */
    for (size_t left = r > 0 ? (size_t)r : 0; done < n && left >= len[done]; done++)
      left -= len[done];
  }
#else
  (void)pidfd;
#endif
  int rc = 0;
  for (unsigned k = done; k < n; k++) {
    int e = _hm_prim_sys_madvise(addr[k], len[k], MADV_DONTNEED);
    if (e && !rc) rc = e;
  }
  return rc;
}

int _hm_prim_vm_dontneed_many(int pidfd, void *const *addr, size_t len, unsigned n) {
  if (n > 64) return -EINVAL;
  size_t lens[64];
  for (unsigned k = 0; k < n; k++) lens[k] = len;
  return _hm_prim_vm_dontneed_runs(pidfd, addr, lens, n);
}

int _hm_prim_vm_punch(int fd, uint64_t off, uint64_t len) {
  return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len)
             ? -errno
             : 0;
}

int _hm_prim_vm_fallocate(int fd, int mode, uint64_t off, uint64_t len) {
  return fallocate(fd, mode, (off_t)off, (off_t)len) ? -errno : 0;
}

int _hm_prim_vm_backing_file(const char *dir, int direct) {
  int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
  /* O_TMPFILE never has a name; where the filesystem lacks it, an O_EXCL
   * name is unlinked at once. Either way a SIGKILL leaves nothing behind. */
  int fd = open(dir, flags | O_TMPFILE | O_EXCL, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -errno;
  if (errno == EINVAL && direct) {
    /* EINVAL also means "no O_DIRECT here": ask again without it so that
     * the caller can tell the two apart. */
    int probe = open(dir, (flags & ~O_DIRECT) | O_TMPFILE | O_EXCL, 0600);
    if (probe >= 0) {
      close(probe);
      return -EINVAL;
    }
  }
  char path[4096];
  for (int attempt = 0; attempt < 64; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int n = snprintf(path, sizeof path, "%s/.hetmem-sdm-%ld-%lx-%d", dir, (long)getpid(),
                     (unsigned long)ts.tv_nsec, attempt);
    if (n < 0 || (size_t)n >= sizeof path) return -ENAMETOOLONG;
    fd = open(path, flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      unlink(path);
      return fd;
    }
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

ssize_t _hm_prim_vm_pio(int fd, int write, void *buf, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write ? pwrite(fd, (char *)buf + done, len - done, (off_t)(off + done))
                      : pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) return -EIO;
    done += (size_t)n;
  }
  return (ssize_t)done;
}

int _hm_prim_vm_block_signals(void *old_set) {
  sigset_t all;
  sigfillset(&all);
  return pthread_sigmask(SIG_SETMASK, &all, (sigset_t *)old_set) ? -EINVAL : 0;
}

int _hm_prim_vm_restore_signals(const void *old_set) {
  return pthread_sigmask(SIG_SETMASK, (const sigset_t *)old_set, NULL) ? -EINVAL : 0;
}


int _hm_prim_vm_phys_mem(uint64_t *out) {
  long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pg <= 0) return -ENOSYS;
  *out = (uint64_t)pages * (uint64_t)pg;
  return 0;
}

_Noreturn void _hm_prim_vm_die(int sig) {
  struct {
    void *handler; /* SIG_DFL */
    unsigned long flags;
    void *restorer;
    unsigned long mask;
  } k;
  memset(&k, 0, sizeof k);
  (void)syscall(SYS_rt_sigaction, sig, &k, NULL, sizeof k.mask);
  (void)syscall(SYS_kill, (long)getpid(), sig);
  struct timespec ts = {1, 0};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  _exit(128 + sig);
}
