/* SPDX-License-Identifier: BSD-3-Clause */
/* The OS layer: every syscall, ioctl and /sys or /proc read of libhetmem
 * goes through a function declared here (names start with _hm_prim_).
 *
 * Contract for all of them: the return value is 0 (or a non-negative count
 * where stated) on success and a negative errno on failure; they never print
 * and never touch a context. Paths named "sysfs path" are absolute paths
 * such as "/sys/devices/system/node" and are resolved under `root`, which
 * replaces "/" so that tests replay recorded trees.
 *
 * The seam rule: no code under src/ outside src/prim calls the OS directly.
 * That means the libc wrappers of system calls and the libc calls that
 * enter the kernel or read the environment: open/openat/creat/fopen/
 * fdopen/opendir, read/write/pread/pwrite/readv/writev, close, stat/fstat/
 * lstat/fstatat/statfs/statvfs, access, readlink, realpath, unlink, rename,
 * mkdir, ftruncate, fallocate, fsync, mmap/munmap/mprotect/madvise/mremap,
 * mbind/move_pages/get_mempolicy/set_mempolicy, syscall, ioctl, fcntl,
 * poll, epoll_*, io_uring_*, eventfd, memfd_create, perf_event_open,
 * sysconf, getenv/secure_getenv/setenv, clock_gettime/gettimeofday/time,
 * nanosleep/usleep/sleep, getpid/getppid/gettid, kill/raise/sigaction/
 * sigprocmask, sched_getcpu/getcpu/sched_*affinity/sched_yield, dup/pipe/
 * fork/execve/waitpid, sockets, gethostname/uname, rlimits, prctl (and
 * their fortified and 64-bit variants). pthread_* is not part of the seam.
 * tests/unit/test_os_seam.py holds the exact list and checks every object built
 * from src/ with nm -u; a new need gets a _hm_prim_ wrapper here. */
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

/* ---- Output files in directories other users may write (prim/fs.c);
 * real paths, never under a root ---- */
/* 1 if dir is writable by every user and lacks the sticky bit (anyone may
 * then rename or replace other users' files in it), 0 if not; -errno. */
int _hm_prim_dir_unsafe(const char *dir);
/* A new file beside path (same directory), named .<name>.<random>.tmp, made
 * with O_CREAT|O_EXCL|O_NOFOLLOW: never an existing file, never through a
 * symbolic link; a name already taken is retried with another. Its path
 * goes to tmp. Returns the descriptor (O_WRONLY|O_CLOEXEC). */
int _hm_prim_file_create_excl(const char *path, unsigned mode, char *tmp, size_t len);
/* Writes all of buf (retrying short writes and EINTR). */
int _hm_prim_write_all(int fd, const void *buf, size_t len);
int _hm_prim_fsync(int fd);
/* rename(2): a symbolic link at to is replaced, never followed. */
int _hm_prim_rename(const char *from, const char *to);
int _hm_prim_unlink(const char *path);
/* Opens path to append to it, creating it with mode 0600 if absent; never
 * through a symbolic link (-ELOOP), and an existing file must be a regular
 * file of this user (-EPERM otherwise; a FIFO never blocks the open).
 * Returns the descriptor. */
int _hm_prim_open_append_own(const char *path);

/* ---- Memory, affinity, clock (prim/mem.c) ---- */
int _hm_prim_map_anon(size_t len, void **out);
/* Anonymous, MAP_NORESERVE memory straight from the kernel (the mmap
 * syscall, never an interposed mmap): the interposer's own tables. NULL on
 * failure. Async-signal-safe and usable before libc's allocator is up. */
void *_hm_prim_map_raw(size_t len);
int _hm_prim_unmap(void *addr, size_t len);
int _hm_prim_advise_hugepage(void *addr, size_t len);
/* MPOL_BIND of [addr, addr+len) to one NUMA node; call before first touch. */
int _hm_prim_bind_node(void *addr, size_t len, int node);
/* CPUs the calling thread may run on, ascending; returns the count. */
int _hm_prim_allowed_cpus(int *cpus, int max);
/* Restricts the calling thread to the given CPUs. */
int _hm_prim_set_thread_cpus(const int *cpus, int n);
uint64_t _hm_prim_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- Storage tier: files (prim/storage.c) and io_uring; _hm_prim_fs_info is
 * the one statfs of a storage directory (size, free space, fs type) ---- */
typedef struct _hm_prim_fsinfo_s {
  uint64_t free_bytes;  /* available to unprivileged users */
  uint64_t total_bytes;
  uint64_t fs_magic;    /* statfs f_type */
  int readonly;         /* mounted read-only */
  int writable;         /* access(W_OK|X_OK) for this process */
} _hm_prim_fsinfo_t;
/* Facts about a real directory (not under a root). -ENOTDIR if not a dir. */
int _hm_prim_fs_info(const char *dir, _hm_prim_fsinfo_t *out);
/* Creates a fresh file in dir (O_EXCL, mode 0600, O_DIRECT) and unlinks it
 * at once, so nothing is left behind whatever happens next. */
int _hm_prim_probe_file(const char *dir, int *fd_out);
int _hm_prim_fallocate(int fd, uint64_t off, uint64_t len);
int _hm_prim_close(int fd);
/* io_uring (prim/ring.c), for the storage probe and the pager. */
typedef struct _hm_prim_ring_s _hm_prim_ring_t;
int _hm_prim_ring_new(unsigned entries, _hm_prim_ring_t **out);
void _hm_prim_ring_free(_hm_prim_ring_t *r);
/* Queue an O_DIRECT read (op 0) or write (HM_PRIM_RING_WRITE), or a
 * one-shot POLLIN; -EBUSY when full. HM_PRIM_RING_ASYNC hands the I/O to
 * io_uring's workers instead of issuing it inside the submitting call. */
#define HM_PRIM_RING_WRITE 1
#define HM_PRIM_RING_ASYNC 2
int _hm_prim_ring_rw(_hm_prim_ring_t *r, int op, int fd, void *buf, unsigned len,
                        uint64_t off, uint64_t tag);
int _hm_prim_ring_poll(_hm_prim_ring_t *r, int fd, uint64_t tag);
int _hm_prim_ring_submit(_hm_prim_ring_t *r);
/* Makes each completion of r signal the eventfd fd (another ring's poll
 * then wakes on r's completions). */
int _hm_prim_ring_notify(_hm_prim_ring_t *r, int fd);
/* One completion: 1 and its tag/result, 0 if none, or -errno. wait_us 0
 * only peeks; otherwise submits what is queued and waits up to wait_us
 * microseconds (< 0: without limit) for one. */
int _hm_prim_ring_next(_hm_prim_ring_t *r, int wait_us, uint64_t *tag, int *res);

/* ---- Storage directories (prim/fsinfo.c); real paths, never under a root ---- */
/* 0 if path is a directory this process may create files in; -ENOENT,
 * -ENOTDIR, -EROFS or -EACCES otherwise. */
int _hm_prim_check_writable_dir(const char *path);
int _hm_prim_realpath(const char *path, char *out, size_t len);
/* 1 if a file in dir can be opened with O_DIRECT, 0 if the filesystem
 * refuses O_DIRECT; negative errno if no file could be made. Leaves nothing
 * behind. */
int _hm_prim_odirect_supported(const char *dir);

/* ---- Pager primitives (prim/uffd.c, prim/vm.c, prim/sdm_io.c) ---- */
/* A userfaultfd (O_CLOEXEC|O_NONBLOCK) with the features of want that this
 * kernel has, written to *got. Returns the descriptor. -EPERM when the
 * process may not use userfaultfd (vm.unprivileged_userfaultfd). */
int _hm_prim_uffd_open(uint64_t want, uint64_t *got);
int _hm_prim_uffd_register(int uffd, void *addr, size_t len, uint64_t mode, uint64_t *ioctls);
int _hm_prim_uffd_unregister(int uffd, void *addr, size_t len);
/* Resolving ioctls; *done is the number of bytes they mapped even on error. */
int _hm_prim_uffd_continue(int uffd, void *addr, size_t len, int wp, size_t *done);
/* Whether UFFDIO_CONTINUE takes UFFDIO_CONTINUE_MODE_WP (Linux 6.6): 1 or 0. */
int _hm_prim_uffd_continue_wp_works(int uffd);
int _hm_prim_uffd_copy(int uffd, void *dst, const void *src, size_t len, int wp, size_t *done);
int _hm_prim_uffd_wake(int uffd, void *addr, size_t len);
int _hm_prim_uffd_wp(int uffd, void *addr, size_t len, int protect);
/* Reads whole struct uffd_msg records; -EAGAIN when none is pending. */
ssize_t _hm_prim_uffd_read(int uffd, void *msgs, size_t bytes);
typedef struct _hm_prim_page_region_s {
  uint64_t start, end, categories;
} _hm_prim_page_region_t;
int _hm_prim_pagemap_open(void);
/* PAGEMAP_SCAN's flags and page categories (include/uapi/linux/fs.h). */
#define HM_PRIM_PM_WP_MATCHING (1ULL << 0)
#define HM_PRIM_PAGE_IS_WRITTEN (1ULL << 1)
#define HM_PRIM_PAGE_IS_PRESENT (1ULL << 3)
#define HM_PRIM_PAGE_IS_SWAPPED (1ULL << 4)
#define HM_PRIM_PAGE_IS_PFNZERO (1ULL << 5)
/* PAGEMAP_SCAN (Linux 6.7) with every selector: a page is reported when
 * (categories ^ inverted) has all of mask and, where anyof is nonzero, one
 * of anyof. Returns the number of regions written to vec; *walk_end (may
 * be NULL): where the walk stopped (vec full: go on from there). */
typedef struct _hm_prim_pm_query_s {
  uint64_t flags, mask, inverted, anyof, ret;
} _hm_prim_pm_query_t;
ssize_t _hm_prim_pagemap_query(int fd, void *start, size_t len, const _hm_prim_pm_query_t *q,
                               _hm_prim_page_region_t *vec, size_t vec_len, uint64_t *walk_end);
/* A userfaultfd that only write-protects anonymous memory, resolved by the
 * kernel itself (UFFD_FEATURE_WP_ASYNC and WP_UNPOPULATED, Linux 6.7): no
 * thread ever waits on it, and PAGEMAP_SCAN tells the pages written since
 * it protected them. The descriptor, or -ENOTSUP / a negative errno. */
int _hm_prim_uffd_open_wp_async(void);
/* UFFDIO_REGISTER_MODE_WP of [addr, addr + len). */
int _hm_prim_uffd_register_wp(int uffd, void *addr, size_t len);
int _hm_prim_vm_memfd(const char *name, size_t len); /* returns the fd */
/* fd < 0: private anonymous (MAP_NORESERVE); else MAP_SHARED of fd. */
int _hm_prim_vm_map(int fd, size_t len, void **out);
/* The same at addr exactly, replacing whatever the caller reserved there. */
int _hm_prim_vm_map_at(int fd, size_t len, void *addr);
/* Private anonymous, len bytes at a 2 MiB boundary, advised MADV_HUGEPAGE;
 * unmapped with (out, len) like any other. */
int _hm_prim_vm_map_huge(size_t len, void **out);
int _hm_prim_vm_unmap(void *addr, size_t len);
int _hm_prim_vm_madvise(void *addr, size_t len, int advice);
/* A pidfd of this process (for dontneed_many), or -errno. */
int _hm_prim_vm_pidfd_self(void);
/* MADV_DONTNEED on n (<= 64) ranges of len bytes at addr[k], in one
 * system call where pidfd >= 0 and the kernel takes it; the first error. */
int _hm_prim_vm_dontneed_many(int pidfd, void *const *addr, size_t len, unsigned n);
/* The same for n (<= 64) ranges of len[k] bytes each. */
int _hm_prim_vm_dontneed_runs(int pidfd, void *const *addr, const size_t *len, unsigned n);
int _hm_prim_vm_punch(int fd, uint64_t off, uint64_t len);
int _hm_prim_vm_fallocate(int fd, int mode, uint64_t off, uint64_t len);
/* A nameless file in dir (O_TMPFILE, else O_EXCL 0600 and unlinked at once);
 * with direct, O_DIRECT, and -EINVAL when the filesystem lacks O_DIRECT. */
int _hm_prim_vm_backing_file(const char *dir, int direct);
/* Synchronous pread/pwrite of exactly len bytes; returns len. */
ssize_t _hm_prim_vm_pio(int fd, int write, void *buf, size_t len, uint64_t off);
/* Blocks every signal in the calling thread; old_set is a sigset_t. */
int _hm_prim_vm_block_signals(void *old_set);
int _hm_prim_vm_restore_signals(const void *old_set);
/* Ends the process by sig with its default action (a core-dumping signal
 * such as SIGBUS, as the kernel ends a process whose mapped file fails):
 * the disposition is reset with the raw syscall (an interposed sigaction
 * must not see it) and the signal sent to the process; if every thread
 * blocks it, _exit(128 + sig) a second later. Never returns. */
_Noreturn void _hm_prim_vm_die(int sig);
/* Physical memory of the machine in bytes (sysconf _SC_PHYS_PAGES). */
int _hm_prim_vm_phys_mem(uint64_t *out);
/* ---- Access samplers (prim/perf.c) ---- */
/* perf_event_open(2) with PERF_FLAG_FD_CLOEXEC; attr is a struct
 * perf_event_attr. Returns the descriptor. */
int _hm_prim_perf_open(void *attr, int pid, int cpu, int group_fd);
int _hm_prim_perf_ioctl(int fd, unsigned long req, unsigned long arg);
/* MAP_SHARED of a perf descriptor (ring buffer or AUX area). */
int _hm_prim_perf_map(int fd, size_t len, size_t off, int writable, void **out);
/* Writes text to an existing file under root (sysfs attributes); never
 * creates it: -ENOENT when the kernel lacks the attribute. */
int _hm_prim_write_text(const char *root, const char *path, const char *text);

/* ---- Raw system calls and process facts (prim/sys.c). The memory calls
 * use syscall(2): never seen by the interposer's own mmap/munmap/madvise/
 * mremap hooks, async-signal-safe, usable before init. ---- */
int _hm_prim_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off,
                      void **out);
int _hm_prim_sys_munmap(void *addr, size_t len);
int _hm_prim_sys_madvise(void *addr, size_t len, int advice);
/* preadv2(2) of one buffer at off (-1: at the file position, which it
 * advances), with RWF_* flags: never seen by the interposer's read hooks,
 * and not a cancellation point. The count or -errno. */
ssize_t _hm_prim_sys_pread(int fd, void *buf, size_t len, off_t off, int rwf);
/* fcntl(fd, F_GETFL): the file status flags or -errno. */
int _hm_prim_sys_fd_flags(int fd);
/* Which pages of [addr, addr + len) are resident: one byte per page. */
int _hm_prim_sys_mincore(void *addr, size_t len, unsigned char *vec);
int _hm_prim_sys_mprotect(void *addr, size_t len, int prot);
int _hm_prim_sys_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr,
                        void **out);
int _hm_prim_sys_mbind(void *addr, size_t len, int mode, const unsigned long *mask,
                       unsigned long maxnode, unsigned flags);
/* The calling thread's NUMA policy (inherited by children and across exec). */
int _hm_prim_sys_set_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode);
/* The NUMA node of each page in status (move_pages without targets). */
int _hm_prim_page_nodes(void **pages, int *status, size_t n);
/* One write(2) to standard error, result ignored: async-signal-safe. */
void _hm_prim_stderr(const char *buf, size_t len);
/* read(2) (the raw system call, past the interposer's read hook) and write(2),
 * retried on EINTR; the count or -errno. */
ssize_t _hm_prim_read(int fd, void *buf, size_t len);
ssize_t _hm_prim_write(int fd, const void *buf, size_t len);
/* O_RDONLY|O_CLOEXEC of a real path (not under a root); the descriptor. */
int _hm_prim_open_read(const char *path);
/* eventfd(0, EFD_CLOEXEC|EFD_NONBLOCK); the descriptor. */
int _hm_prim_eventfd(void);
int _hm_prim_pid(void);
int _hm_prim_ppid(void);
int _hm_prim_tid(void);
int _hm_prim_cpu(void); /* sched_getcpu, -1 if unknown */
int _hm_prim_cpu_node(void); /* getcpu: the NUMA node this thread runs on */
int _hm_prim_raise(int sig);
size_t _hm_prim_page_size(void);
int _hm_prim_ncpus(void); /* online CPUs, at least 1 */
uint64_t _hm_prim_thread_cpu_ns(void); /* CLOCK_THREAD_CPUTIME_ID */
uint64_t _hm_prim_realtime_ns(void);   /* CLOCK_REALTIME */
void _hm_prim_sleep_ns(uint64_t ns);
/* The one environment read of libhetmem: the options table (options.c) and
 * the few variables other programs define (MPI ranks, TMPDIR) use it. */
const char *_hm_prim_getenv(const char *name);
/* readlink of /proc/self/exe, NUL-terminated; the length. */
ssize_t _hm_prim_self_exe(char *buf, size_t len);
/* The calling process's anonymous and shared memory resident now (RssAnon
 * plus RssShmem of root's /proc/self/status), in bytes: what a memory
 * cgroup would charge it besides file pages. */
int _hm_prim_self_anon_bytes(const char *root, uint64_t *out);
/* stat(2) of a real path: 1 if it is a directory, 0 if something else. */
int _hm_prim_stat_dir(const char *path);
/* _exit(2): no atexit handlers, no stdio flush (usable inside malloc). */
_Noreturn void _hm_prim_exit_now(int status);
void _hm_prim_yield(void); /* sched_yield */
/* gethostname into buf (len bytes, not always NUL-terminated when cut). */
int _hm_prim_hostname(char *buf, size_t len);

#endif
