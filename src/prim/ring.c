/* SPDX-License-Identifier: BSD-3-Clause */
/* The one io_uring wrapper: O_DIRECT reads and writes, a poll (the pager's
 * handler waits in one place for faults on its userfaultfd and for I/O
 * completions), submission, and completions by peek or by wait. The pager
 * and the storage probe both use it. */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "prim/prim.h"

struct _hm_prim_ring_s {
  struct io_uring ring;
};

int _hm_prim_ring_new(unsigned entries, _hm_prim_ring_t **out) {
  _hm_prim_ring_t *r = calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  int rc = io_uring_queue_init(entries, &r->ring, 0);
  if (rc < 0) {
    free(r);
    return rc;
  }
  /* Few workers, for the I/O handed to them (HM_PRIM_RING_ASYNC): each
   * pager read in memfd mode allocates its target pages in one memfd, and
   * many workers mostly contend on that file's locks. Best effort. */
  unsigned workers[2] = {2, 2};
  (void)io_uring_register_iowq_max_workers(&r->ring, workers);
  *out = r;
  return 0;
}

void _hm_prim_ring_free(_hm_prim_ring_t *r) {
  if (!r) return;
  io_uring_queue_exit(&r->ring);
  free(r);
}

int _hm_prim_ring_rw(_hm_prim_ring_t *r, int op, int fd, void *buf, unsigned len,
                        uint64_t off, uint64_t tag) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  if (!sqe) return -EBUSY;
  if (op & HM_PRIM_RING_WRITE)
    io_uring_prep_write(sqe, fd, buf, len, off);
  else
    io_uring_prep_read(sqe, fd, buf, len, off);
  if (op & HM_PRIM_RING_ASYNC) io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
  io_uring_sqe_set_data64(sqe, tag);
  return 0;
}

int _hm_prim_ring_poll(_hm_prim_ring_t *r, int fd, uint64_t tag) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
  if (!sqe) return -EBUSY;
  io_uring_prep_poll_add(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, tag);
  return 0;
}

int _hm_prim_ring_submit(_hm_prim_ring_t *r) {
  int rc;
  do {
    rc = io_uring_submit(&r->ring);
  } while (rc == -EINTR);
  return rc;
}

int _hm_prim_ring_notify(_hm_prim_ring_t *r, int fd) {
  return io_uring_register_eventfd(&r->ring, fd);
}

int _hm_prim_ring_next(_hm_prim_ring_t *r, int wait_us, uint64_t *tag, int *res) {
  struct io_uring_cqe *cqe = NULL;
  int rc;
  if (wait_us != 0) {
    struct __kernel_timespec ts = {.tv_sec = wait_us / 1000000,
                                   .tv_nsec = (long long)(wait_us % 1000000) * 1000};
    do {
      rc = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, wait_us > 0 ? &ts : NULL, NULL);
    } while (rc == -EINTR);
    if (rc == -ETIME) return 0;
    if (rc < 0) return rc;
  }
  rc = io_uring_peek_cqe(&r->ring, &cqe);
  if (rc == -EAGAIN) return 0;
  if (rc < 0) return rc;
  *tag = io_uring_cqe_get_data64(cqe);
  *res = cqe->res;
  io_uring_cqe_seen(&r->ring, cqe);
  return 1;
}
