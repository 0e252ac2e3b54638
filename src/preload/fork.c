/* SPDX-License-Identifier: BSD-3-Clause */
/* Fork without exec: the child's copy of the parent's tiered data.
 *
 * The pager's regions are MADV_DONTFORK (a child reading its parent's
 * non-resident pages would read zeros where data was, pager.c), and the
 * pager's threads do not come along. So that a child still sees its
 * parent's data, as after any fork (Python's multiprocessing with the fork
 * start method, a shell's subshells, a worker that reads a table its parent
 * built), the fork handlers copy it:
 *   prepare (parent, the forking thread): lists the pager's ranges (pager
 *     and split blocks, the small-block heap's spans), holds off large
 *     allocations and frees (fork_lk) and the heap's locks until the fork
 *     is done, and, when the ranges add up to at most fork_copy bytes and
 *     half the memory available, copies them into one anonymous mapping
 *     (the copy reads evicted data back through the pager like any access);
 *   parent: unmaps that copy (the child keeps its pages) and lets go;
 *   child: moves each range's copy to its address (mremap): the blocks are
 *     plain memory there, freed with munmap, and the heap goes on serving
 *     from its spans. Without a copy (too large, or none could be made) the
 *     child has none of them: the table forgets them, glibc serves the
 *     child, and a touch of one is a SIGSEGV that hm__forked_segv explains.
 * A fork costs nothing more in a process whose pager is not open, and a
 * copy of what the pager holds in one that has it: vfork and posix_spawn
 * (system(), popen(), Python's subprocess) run no fork handlers. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"
#include "tiers.h"

/* One fork's state, from prepare to the parent's or the child's handler
 * (fork is serialised by fork_lk); in a child whose copy could not be
 * made, the ranges stay for hm__forked_segv, which only reads them. */
static struct {
  uintptr_t (*range)[2]; /* the parent's pager ranges at fork */
  size_t n, range_bytes;
  char *copy; /* their bytes, one range after another; NULL: none made */
  size_t bytes;
  int from_pager; /* the parent had its pager open */
  int locked;     /* prepare took fork_lk and the heap's locks */
  struct sigaction prev;
  int watching; /* hm__forked_segv installed */
} hm__fork;

static void hm__forked_segv(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  for (size_t i = 0; hm__fork.watching && i < hm__fork.n; i++) {
    if (a < hm__fork.range[i][0] || a >= hm__fork.range[i][1]) continue;
    static const char msg[] =
        "hetmem: this process was forked (without exec) from one whose blocks are in "
        "hetmem's pager, and touched one of them: a forked child does not inherit them when "
        "they exceed HETMEM_FORK_COPY or half the memory available. Exec a program in the "
        "child, or in Python use multiprocessing's 'spawn' start method\n";
    _hm_prim_stderr(msg, sizeof msg - 1);
    _hm_pl_set_default(SIGSEGV); /* retried: kills as usual */
    return;
  }
  if ((hm__fork.prev.sa_flags & SA_RESETHAND) && hm__fork.prev.sa_handler != SIG_DFL) {
    _hm_pl_set_default(SIGSEGV); /* the kernel's reset, as it would have done */
  }
  _hm_pl_segv_chain(&hm__fork.prev, sig, si, uc); /* not ours: as before us */
}

/* ------------------------------------------------------------------------
 * The ranges
 * ------------------------------------------------------------------------ */
/* The pager's ranges into out (when not NULL, room for max); how many.
 * Blocks of the pager and split ones (their whole mapping: a split head is
 * plain memory, copied as well), and the heap's spans. */
static size_t hm__list(uintptr_t (*out)[2], size_t max) {
  size_t n = 0, cap = _hm_pl_table_capacity();
  const _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  uintptr_t top = atomic_load(&h->top);
  if (atomic_load(&h->len_pub) && top > h->lo) {
    if (out && n < max) out[n][0] = h->lo, out[n][1] = top;
    n++;
  }
  for (size_t i = 0; i < cap; i++) {
    _hm_pl_block_t *b = _hm_pl_table_slot(&_hm_pl_ctx.table, i);
    uintptr_t key = atomic_load_explicit(&b->key, memory_order_relaxed);
    if (key == HM_PL_KEY_EMPTY || key == HM_PL_KEY_DELETED ||
        (b->backend != HM_PL_PAGER && b->backend != HM_PL_SPLIT))
      continue;
    if (out && n < max) out[n][0] = key - b->off, out[n][1] = key - b->off + b->maplen;
    n++;
  }
  return n;
}

/* Lists the ranges into an array of their own (mmap: no malloc here). */
static void hm__list_ranges(void) {
  size_t n = hm__list(NULL, 0);
  if (!n) return;
  void *m = NULL;
  size_t bytes = n * sizeof *hm__fork.range;
  if (_hm_prim_sys_mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0,
                        &m))
    return;
  hm__fork.range = m;
  hm__fork.range_bytes = bytes;
  hm__fork.n = hm__list(hm__fork.range, n); /* the table is held still: the same n */
}

/* MemAvailable of /proc/meminfo in bytes; 0 when unreadable. */
static uint64_t hm__available(void) {
  char buf[4096];
  ssize_t r = _hm_prim_read_text(hm_ctx_fsroot(_hm_pl_ctx.ctx), "/proc/meminfo", buf, sizeof buf);
  uint64_t bytes = 0;
  if (r <= 0 || _hm_meminfo_field(buf, "MemAvailable", &bytes)) return 0;
  return bytes;
}

/* The copy of every range, when they fit fork_copy and half the memory
 * available. Each read of an evicted page is a fault the pager serves. */
static void hm__copy(void) {
  size_t total = 0;
  for (size_t i = 0; i < hm__fork.n; i++) total += hm__fork.range[i][1] - hm__fork.range[i][0];
  if (!total || total > _hm_pl_ctx.fork_copy || total > hm__available() / 2) return;
  void *m = NULL;
  if (_hm_prim_sys_mmap(NULL, total, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, &m))
    return;
  /* the copy is the child's: the pager's measure of the process leaves it
   * out (else the cache shrank for it, and the end-of-run note took it for
   * the program's own memory) until the parent handler unmaps it */
  if (hm_pager_exclude_bytes) (void)hm_pager_exclude_bytes(_hm_pl_ctx.pager, (int64_t)total);
  char *at = m;
  for (size_t i = 0; i < hm__fork.n; i++) {
    size_t len = hm__fork.range[i][1] - hm__fork.range[i][0];
    memcpy(at, (const void *)hm__fork.range[i][0], len);
    at += len;
  }
  hm__fork.copy = m;
  hm__fork.bytes = total;
}

/* ------------------------------------------------------------------------
 * The handlers
 * ------------------------------------------------------------------------ */
static void hm__prepare(void) {
  /* a child's own watch (its parent's ranges) stays for its handler */
  hm__fork.from_pager = hm__fork.locked = 0;
  if (atomic_load(&_hm_pl_ctx.state) != HM_PL_READY) return;
  memset(&hm__fork, 0, sizeof hm__fork);
  hm__fork.from_pager = 1;
  pthread_rwlock_wrlock(&_hm_pl_ctx.fork_lk);
  _hm_pl_heap_lock_all();
  hm__fork.locked = 1;
  _hm_pl_tls.guard++;
  hm__list_ranges();
  hm__copy();
  _hm_pl_tls.guard--;
}

/* In the child the lock is made anew: glibc's rwlock knows its writer
 * by thread id, which the child's thread does not have, and an unlock
 * there was taken for a reader's (the next rdlock waited forever). */
static void hm__unlock(int child) {
  if (!hm__fork.locked) return;
  _hm_pl_heap_unlock_all();
  if (child) pthread_rwlock_init(&_hm_pl_ctx.fork_lk, NULL);
  else pthread_rwlock_unlock(&_hm_pl_ctx.fork_lk);
  hm__fork.locked = 0;
}

static void hm__parent(void) {
  if (!hm__fork.from_pager) return;
  if (hm__fork.copy && hm_pager_exclude_bytes)
    (void)hm_pager_exclude_bytes(_hm_pl_ctx.pager, -(int64_t)hm__fork.bytes);
  /* counted under fork_lk: forks are serialised */
  _hm_pl_ctx_t *c = &_hm_pl_ctx;
  if (hm__fork.copy) {
    c->fork_copies++;
    c->fork_copied_bytes += hm__fork.bytes;
    if (hm__fork.bytes > c->fork_largest) c->fork_largest = hm__fork.bytes;
  } else if (hm__fork.n) {
    c->forks_uncopied++;
  }
  if (hm__fork.copy) (void)_hm_prim_sys_munmap(hm__fork.copy, hm__fork.bytes);
  if (hm__fork.range) (void)_hm_prim_sys_munmap(hm__fork.range, hm__fork.range_bytes);
  hm__fork.copy = NULL;
  hm__fork.range = NULL;
  hm__unlock(0);
}

/* Moves each range's copy to its place; 0 when all are there. */
static int hm__place_copies(void) {
  char *at = hm__fork.copy;
  int rc = 0;
  for (size_t i = 0; i < hm__fork.n; i++) {
    size_t len = hm__fork.range[i][1] - hm__fork.range[i][0];
    void *got = NULL;
    if (_hm_prim_sys_mremap(at, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                            (void *)hm__fork.range[i][0], &got))
      rc = -EFAULT;
    at += len;
  }
  return rc;
}

/* No copy: the child has none of the blocks. */
static void hm__watch(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = hm__forked_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (hm__fork.n && _hm_pl_real_sigaction(SIGSEGV, &sa, &hm__fork.prev) == 0)
    hm__fork.watching = 1;
  _hm_pl_table_clear(&_hm_pl_ctx.table); /* their addresses may be reused here */
  atomic_store(&_hm_pl_ctx.live_bytes, 0);
}

/* Single-threaded: nothing races with what it changes. */
static void hm__child(void) {
  hm__unlock(1);
  if (atomic_load(&_hm_pl_ctx.state) != HM_PL_NONE) atomic_store(&_hm_pl_ctx.state, HM_PL_FORKED);
  atomic_store(&_hm_pl_ctx.small_exited, 0);
  _hm_pl_tls.small = 0;
  _hm_pl_ctx.fork_copies = _hm_pl_ctx.fork_copied_bytes = 0; /* the parent's */
  _hm_pl_ctx.fork_largest = _hm_pl_ctx.forks_uncopied = 0;
  if (!hm__fork.from_pager) return; /* what it inherited is plain memory, or nothing */
  int kept = hm__fork.copy && hm__place_copies() == 0;
  if (!kept) hm__watch();
  _hm_pl_heap_forked(kept);
  if (kept && hm__fork.range) {
    (void)_hm_prim_sys_munmap(hm__fork.range, hm__fork.range_bytes);
    hm__fork.range = NULL;
    hm__fork.n = 0;
  }
}

void _hm_pl_fork_init(void) {
  uint64_t limit = 0;
  if (hm_option_get_u64(_hm_pl_ctx.ctx, "fork_copy", &limit)) limit = 0;
  _hm_pl_ctx.fork_copy = limit;
  pthread_atfork(hm__prepare, hm__parent, hm__child);
}
