/* SPDX-License-Identifier: BSD-3-Clause */
/* Direct reads into tiered memory: the read family's hooks.
 *
 * Why: a read on a descriptor opened with O_DIRECT pins the destination's
 * pages and the device writes them while the call sleeps. If the pager
 * evicts such a page meanwhile (its contents written back, then
 * MADV_DONTNEED), the device writes into a page the mapping no longer
 * holds: the data is lost, and the next touch refills the old contents from
 * storage. The kernel's own reclaim skips pinned pages; user space cannot
 * see pins. So a direct read whose buffer may lie in the pager's memory is
 * read into a bounce buffer of plain memory and copied in: the copy faults
 * like any store, and the pager may evict whenever it likes. Buffered reads
 * need nothing: the kernel copies with copy_to_user, which faults and
 * retries. Direct writes need nothing either: the device only reads the
 * pinned pages, which keep their contents after an eviction.
 *
 * Cost for every other read: one load of the recursion guard and one or
 * two loads of the block table's granule map (a buffer in no 2 MiB granule
 * that holds a large block), then glibc's own function. A buffer in such a
 * granule adds one fcntl (is it O_DIRECT?). A bounced read adds a copy of
 * every byte (~10 GB/s against the device's 2-3); up to 256 KiB it reads
 * into a buffer its thread keeps, larger ones into a mapping of up to 4 MiB
 * made for the call.
 *
 * Not seen here: io_uring and Linux AIO submissions (raw system calls that
 * no hook sees); docs/guide.md says so. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "preload.h"
#include "prim/prim.h"

#define HM__BOUNCE ((size_t)4 << 20)

#define HM__EXPORT __attribute__((visibility("default")))
#define HM__DECLARE(ret, name, params) HM__EXPORT ret name params;
HM_PL_READ_HOOKS(HM__DECLARE)
#undef HM__DECLARE

void __chk_fail(void) __attribute__((noreturn)); /* glibc's, for the _chk hooks */

typedef void (*hm__fn_t)(void); /* any function; cast back to its type to call */

/* glibc's functions: found at start-up (_hm_pl_dio_resolve), or on first
 * use by a read that comes before it. */
enum { HM__READ, HM__PREAD, HM__READV, HM__PREADV, HM__PREADV2, HM__NREAL };
static const char *const hm__names[HM__NREAL] = {"read", "pread64", "readv", "preadv64", "preadv2"};
_Static_assert(HM__NREAL == HM_PL_DIO_NREAL, "the context holds one pointer per name");

static hm__fn_t hm__real(int i) {
  void *f = atomic_load_explicit(&_hm_pl_ctx.dio_real[i], memory_order_acquire);
  if (__builtin_expect(f == NULL, 0)) {
    _hm_pl_tls.guard++; /* dlsym may allocate */
    f = dlsym(RTLD_NEXT, hm__names[i]);
    _hm_pl_tls.guard--;
    atomic_store_explicit(&_hm_pl_ctx.dio_real[i], f, memory_order_release);
  }
  hm__fn_t fn;
  memcpy(&fn, &f, sizeof fn); /* object -> function pointer, as ISO C allows */
  return fn;
}

void _hm_pl_dio_resolve(void) {
  for (int i = 0; i < HM__NREAL; i++) (void)hm__real(i);
}

/* A buffer that may be the pager's: in a granule with a large block, while
 * the pager runs (not in a forked child, whose blocks are plain copies). */
static inline int hm__maybe_pager(const void *buf, size_t len) {
  if (hm_likely(_hm_pl_tls.guard || len == 0)) return 0;
  const _hm_pl_table_t *t = &_hm_pl_ctx.table;
  if (hm_likely(!_hm_pl_table_maybe(t, buf) && !_hm_pl_table_maybe(t, (const char *)buf + len - 1))) return 0;
  return atomic_load(&_hm_pl_ctx.state) == HM_PL_READY && _hm_pl_ctx.pager != NULL;
}

/* Bounce only where the kernel would start a transfer: an O_DIRECT
 * descriptor and a request whose length and offset are 512-byte aligned
 * (otherwise it refuses with EINVAL before any I/O, and still should). */
static int hm__direct(int fd, size_t len, off_t off) {
  int fl = _hm_prim_sys_fd_flags(fd);
  return fl >= 0 && (fl & O_DIRECT) && !(len & 511) && (off < 0 || !(off & 511));
}

/* A bounce buffer of cap bytes: the thread's kept one where it is large
 * enough and not in use (a small read pays no mapping, first touch and
 * unmapping with its TLB shootdown: 18-27 us a 4 KiB read here), else a
 * mapping of its own. NULL with errno when none can be made. */
static char *hm__buffer(size_t cap, int *kept) {
  *kept = 0;
  if (cap <= HM_PL_DIO_KEEP && !_hm_pl_tls.dio_busy) {
    void *p = _hm_pl_tls.dio_buf;
    if (!p && _hm_prim_sys_mmap(NULL, HM_PL_DIO_KEEP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0,
                                &p) == 0) {
      _hm_pl_tls.dio_buf = p;
      _hm_pl_register_thread(); /* unmapped at the thread's exit */
    }
    if (_hm_pl_tls.dio_buf) {
      _hm_pl_tls.dio_busy = *kept = 1;
      atomic_signal_fence(memory_order_seq_cst); /* marked before a handler's read can see it used */
      return _hm_pl_tls.dio_buf;
    }
  }
  void *bb = NULL;
  int rc = _hm_prim_sys_mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0, &bb);
  if (rc) errno = -rc;
  return rc ? NULL : bb;
}

static void hm__unbuffer(char *bb, size_t cap, int kept) {
  if (kept) {
    atomic_signal_fence(memory_order_seq_cst); /* the copy out is done before it is free */
    _hm_pl_tls.dio_busy = 0;
  } else {
    (void)_hm_prim_sys_munmap(bb, cap);
  }
}

void _hm_pl_dio_thread_exit(void) {
  if (_hm_pl_tls.dio_buf && !_hm_pl_tls.dio_busy) (void)_hm_prim_sys_munmap(_hm_pl_tls.dio_buf, HM_PL_DIO_KEEP);
  _hm_pl_tls.dio_buf = NULL;
}

/* Reads len bytes into dst through a bounce buffer, at off (-1: at the
 * file position), chunk by chunk until done, a short read or an error:
 * what one read would return (the bytes read, or -1 with errno when none
 * were). Sets *eof on a short read, so that a vector stops there. */
static ssize_t hm__bounce(int fd, char *dst, size_t len, off_t off, int rwf, int *eof) {
  size_t cap = len < HM__BOUNCE ? (len + 4095) & ~(size_t)4095 : HM__BOUNCE;
  int kept;
  char *bb = hm__buffer(cap, &kept);
  if (!bb) return -1;
  size_t done = 0;
  ssize_t n = 0;
  while (done < len) {
    size_t want = len - done < cap ? len - done : cap;
    n = _hm_prim_sys_pread(fd, bb, want, off < 0 ? -1 : off + (off_t)done, rwf);
    if (n <= 0) break;
    memcpy(dst + done, bb, (size_t)n); /* faults into the pager like any store */
    done += (size_t)n;
    if ((size_t)n < want) break;
  }
  hm__unbuffer(bb, cap, kept);
  atomic_fetch_add_explicit(&_hm_pl_ctx.dio_reads, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&_hm_pl_ctx.dio_bytes, done, memory_order_relaxed);
  *eof = done < len;
  if (done == 0 && n < 0) {
    errno = (int)-n;
    return -1;
  }
  return (ssize_t)done;
}

/* One buffer: bounced when it needs to be, else glibc's pread64 or read. */
static ssize_t hm__one(int fd, void *buf, size_t len, off_t off) {
  int eof;
  if (hm__maybe_pager(buf, len) && hm__direct(fd, len, off)) return hm__bounce(fd, buf, len, off, 0, &eof);
  if (off < 0) return ((ssize_t (*)(int, void *, size_t))hm__real(HM__READ))(fd, buf, len);
  return ((ssize_t (*)(int, void *, size_t, off_t))hm__real(HM__PREAD))(fd, buf, len, off);
}

/* A vector with a buffer that needs bouncing; others pass, and so does a
 * vector with a length the kernel would refuse. */
static int hm__vec_needs(int fd, const struct iovec *iov, int cnt, off_t off) {
  if (cnt <= 0 || cnt > IOV_MAX) return 0;
  size_t odd = 0;
  int maybe = 0;
  for (int i = 0; i < cnt; i++) {
    maybe |= hm__maybe_pager(iov[i].iov_base, iov[i].iov_len);
    odd |= iov[i].iov_len & 511;
  }
  return maybe && !odd && hm__direct(fd, 0, off);
}

/* A vector read one buffer after another through the bounce buffer, as
 * one call: stops at a short read; the bytes read, or -1 when none were. */
static ssize_t hm__vec_bounce(int fd, const struct iovec *iov, int cnt, off_t off, int rwf) {
  size_t done = 0;
  for (int i = 0; i < cnt; i++) {
    int eof = 0;
    off_t at = off < 0 ? -1 : off + (off_t)done;
    ssize_t n = iov[i].iov_len ? hm__bounce(fd, iov[i].iov_base, iov[i].iov_len, at, rwf, &eof) : 0;
    if (n < 0) return done ? (ssize_t)done : -1;
    done += (size_t)n;
    if (eof) break;
  }
  return (ssize_t)done;
}

ssize_t read(int fd, void *buf, size_t count) { return hm__one(fd, buf, count, -1); }

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
  if (offset < 0) return ((ssize_t (*)(int, void *, size_t, off_t))hm__real(HM__PREAD))(fd, buf, count, offset);
  return hm__one(fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) { return pread(fd, buf, count, offset); }

/* Fortified callers (_FORTIFY_SOURCE) reach these instead: the size
 * check first, as glibc's do. */
ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen) {
  if (nbytes > buflen) __chk_fail();
  return read(fd, buf, nbytes);
}

ssize_t __pread_chk(int fd, void *buf, size_t nbytes, off_t offset, size_t buflen) {
  if (nbytes > buflen) __chk_fail();
  return pread(fd, buf, nbytes, offset);
}

ssize_t __pread64_chk(int fd, void *buf, size_t nbytes, off_t offset, size_t buflen) {
  return __pread_chk(fd, buf, nbytes, offset, buflen);
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt) {
  if (hm__vec_needs(fd, iov, iovcnt, -1)) return hm__vec_bounce(fd, iov, iovcnt, -1, 0);
  return ((ssize_t (*)(int, const struct iovec *, int))hm__real(HM__READV))(fd, iov, iovcnt);
}

ssize_t preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
  if (offset >= 0 && hm__vec_needs(fd, iov, iovcnt, offset)) return hm__vec_bounce(fd, iov, iovcnt, offset, 0);
  return ((ssize_t (*)(int, const struct iovec *, int, off_t))hm__real(HM__PREADV))(fd, iov, iovcnt, offset);
}

ssize_t preadv64(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
  return preadv(fd, iov, iovcnt, offset);
}

/* offset -1: at the file position, as the kernel reads it. */
ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
  off_t at = offset == -1 ? -1 : offset;
  if ((offset >= 0 || offset == -1) && hm__vec_needs(fd, iov, iovcnt, at))
    return hm__vec_bounce(fd, iov, iovcnt, at, flags);
  return ((ssize_t (*)(int, const struct iovec *, int, off_t, int))hm__real(HM__PREADV2))(fd, iov, iovcnt, offset,
                                                                                          flags);
}

ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
  return preadv2(fd, iov, iovcnt, offset, flags);
}
