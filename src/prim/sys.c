/* SPDX-License-Identifier: BSD-3-Clause */
/* Raw system calls and process facts.
 *
 * The interposer defines mmap, munmap, madvise, mremap and sigaction; a libc
 * call to one of those from inside libhetmem lands in its own hook. The
 * memory calls here go to the kernel with syscall(2), so they are never
 * interposed, are async-signal-safe and work before any init. Cost: one
 * system call each, no lock, no allocation. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "prim/prim.h"

/* syscall(2) returns -1 and sets errno; the contract here is -errno. */
static int hm__rc(long r) { return r < 0 ? -errno : 0; }

int _hm_prim_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off,
                      void **out) {
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  if (r == -1) return -errno;
  *out = (void *)r;
  return 0;
}

ssize_t _hm_prim_sys_pread(int fd, void *buf, size_t len, off_t off, int rwf) {
  struct iovec iov = {buf, len};
  /* the kernel takes the offset as two longs (low, high); on LP64 the low
   * one holds it all, and -1 there means the file position */
  long r = syscall(SYS_preadv2, fd, &iov, 1, (long)off, 0L, rwf);
  return r < 0 ? -errno : (ssize_t)r;
}

int _hm_prim_sys_fd_flags(int fd) {
  long r = syscall(SYS_fcntl, fd, F_GETFL);
  return r < 0 ? -errno : (int)r;
}

int _hm_prim_sys_munmap(void *addr, size_t len) {
  return hm__rc(syscall(SYS_munmap, addr, len));
}

int _hm_prim_sys_madvise(void *addr, size_t len, int advice) {
  return hm__rc(syscall(SYS_madvise, addr, len, advice));
}

int _hm_prim_sys_mincore(void *addr, size_t len, unsigned char *vec) {
  return hm__rc(syscall(SYS_mincore, addr, len, vec));
}

int _hm_prim_sys_mprotect(void *addr, size_t len, int prot) {
  return hm__rc(syscall(SYS_mprotect, addr, len, prot));
}

int _hm_prim_sys_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr,
                        void **out) {
  long r = syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
  if (r == -1) return -errno;
  *out = (void *)r;
  return 0;
}

int _hm_prim_sys_mbind(void *addr, size_t len, int mode, const unsigned long *mask,
                       unsigned long maxnode, unsigned flags) {
  return hm__rc(syscall(SYS_mbind, addr, len, mode, mask, maxnode, flags));
}

int _hm_prim_sys_set_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode) {
  return hm__rc(syscall(SYS_set_mempolicy, mode, mask, maxnode));
}

int _hm_prim_page_nodes(void **pages, int *status, size_t n) {
  /* move_pages with no target nodes only reports where each page is. */
  return hm__rc(syscall(SYS_move_pages, 0, n, pages, NULL, status, 0));
}

void _hm_prim_stderr(const char *buf, size_t len) {
  /* One write(2): async-signal-safe; a message is best effort. */
  (void)!write(2, buf, len);
}

ssize_t _hm_prim_read(int fd, void *buf, size_t len) {
  ssize_t r; /* raw, as _hm_prim_uffd_read: past the interposer's read hook */
  do r = (ssize_t)syscall(SYS_read, fd, buf, len);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

ssize_t _hm_prim_write(int fd, const void *buf, size_t len) {
  ssize_t r;
  do r = write(fd, buf, len);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

int _hm_prim_open_read(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

int _hm_prim_eventfd(void) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? -errno : fd;
}

int _hm_prim_pid(void) { return (int)getpid(); }
int _hm_prim_ppid(void) { return (int)getppid(); }
int _hm_prim_tid(void) { return (int)gettid(); }
int _hm_prim_cpu(void) { return sched_getcpu(); }

int _hm_prim_cpu_node(void) {
  unsigned cpu = 0, node = 0;
  return getcpu(&cpu, &node) == 0 ? (int)node : -errno;
}

int _hm_prim_raise(int sig) { return raise(sig) ? -errno : 0; }

size_t _hm_prim_page_size(void) {
  long pg = sysconf(_SC_PAGESIZE);
  return pg > 0 ? (size_t)pg : 4096;
}

int _hm_prim_ncpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static uint64_t hm__clock_ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts)) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t _hm_prim_thread_cpu_ns(void) { return hm__clock_ns(CLOCK_THREAD_CPUTIME_ID); }
uint64_t _hm_prim_realtime_ns(void) { return hm__clock_ns(CLOCK_REALTIME); }

void _hm_prim_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  /* An interrupted sleep is only shorter; callers loop on their own state. */
  (void)nanosleep(&ts, NULL);
}

const char *_hm_prim_getenv(const char *name) { return getenv(name); }

ssize_t _hm_prim_self_exe(char *buf, size_t len) {
  if (len < 2) return -ENAMETOOLONG;
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n < 0) return -errno;
  buf[n] = 0;
  return n;
}

int _hm_prim_stat_dir(const char *path) {
  struct stat st;
  if (stat(path, &st)) return -errno;
  return S_ISDIR(st.st_mode) ? 1 : 0;
}

_Noreturn void _hm_prim_exit_now(int status) { _exit(status); }

void _hm_prim_yield(void) { (void)sched_yield(); }

int _hm_prim_hostname(char *buf, size_t len) {
  if (len == 0) return -EINVAL;
  if (gethostname(buf, len) != 0) return -errno;
  return 0;
}
