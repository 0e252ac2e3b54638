/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's small-block heap (src/preload/heap.c) over a real pager
 * with an 8 MiB budget: block sizes, alignment, the class rounding and
 * reuse; 64 MiB of blocks that read back exactly after the pager evicted
 * and fetched them again; blocks of 128 KiB and up (dropped from the pager
 * when freed) that read back exactly once reused and rewritten; 4 threads
 * allocating, filling and freeing blocks, half of them verified and freed
 * by another thread, while the main thread takes and releases every heap
 * lock as fork's handlers do (also run under ThreadSanitizer); then the
 * heap still serves and its free lists hold only blocks of their class.
 * heap.c and table.c are compiled in; the interposer's context and
 * thread-local state are defined as init.c does, the pager opened as
 * route.c does. Nothing is preloaded: the heap is called directly. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/preload/heap.c"
#include "../../src/preload/table.c"
#include "sdm_testutil.h"
#include "testhelper.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define BUDGET (8 * MiB)
/* The least fetch unit: blocks of 128 KiB (HM__DISCARD_CLASS) and up hold
 * two units, so freeing one drops its units from the pager. */
#define UNIT (64 * KiB)

/* As init.c defines them. */
_hm_pl_ctx_t _hm_pl_ctx = {
    .once = PTHREAD_ONCE_INIT, .page = 4096, .fork_lk = PTHREAD_RWLOCK_INITIALIZER};
__thread _hm_pl_tls_t _hm_pl_tls __attribute__((tls_model("initial-exec")));

static hm_ctx_t *g_ctx;
/* The callers' return address: one in this program, not in the C library
 * (whose own blocks the heap leaves to glibc). */
static const char g_here;
#define RA ((const void *)&g_here)

/* route.c's, reduced to what the heap needs: the pager, opened once with
 * the test's budget and unit over a scratch directory, and the context's
 * fetch unit as init.c sets it (hm__discard reads it). */
int _hm_pl_open_pager(void) {
  if (_hm_pl_ctx.pager) return 0;
  hm_pager_config_t cfg = hm_sdm_config(g_ctx, hm_sdm_scratch(), BUDGET, UNIT, 0);
  int rc = hm_pager_open(g_ctx, &cfg, &_hm_pl_ctx.pager);
  if (rc) {
    fprintf(stderr, "open: %s\n", hm_ctx_last_error(g_ctx));
    return rc;
  }
  _hm_pl_ctx.fetch_unit = cfg.fetch_unit;
  return 0;
}

/* ------------------------------------------------------------------------
 * Patterns: word i of the block at p filled with salt, different for every
 * block, word and fill.
 * ------------------------------------------------------------------------ */
static uint64_t hm__base(const void *p, uint64_t salt) {
  return hm_sdm_mix((uintptr_t)p ^ (salt * 0x9e3779b97f4a7c15ull));
}

/* The pager tests' salted fill, salted per block. */
static void hm__fill(void *p, size_t size, uint64_t salt) {
  hm_sdm_fill_salted(p, size / 8, hm__base(p, salt));
}

/* Words of the block that differ from hm__fill's. */
static size_t hm__bad(const void *p, size_t size, uint64_t salt) {
  return (size_t)hm_sdm_check_salted(p, size / 8, hm__base(p, salt));
}

static void *hm__malloc(size_t size) { return _hm_pl_heap_malloc(size, RA); }

/* ------------------------------------------------------------------------
 * One thread: sizes, rounding, alignment, reuse
 * ------------------------------------------------------------------------ */
/* A block just handed out for size bytes: 16-byte aligned, the heap's
 * (and the granule map's: free's fast path must send it on), usable size
 * within one class step (16 bytes up to 128, then a quarter). */
static void hm__check_block(const void *p, size_t size) {
  CHECK(p != NULL);
  if (!p) return;
  size_t u = _hm_pl_heap_usable(p), slack = size <= 128 ? 16 : size / 4;
  CHECK((uintptr_t)p % 16 == 0);
  CHECK(_hm_pl_heap_has(p));
  CHECK(_hm_pl_table_maybe(&_hm_pl_ctx.table, p));
  CHECK(u >= size);
  CHECK(u - size < slack);
}

static int hm__cmp_ptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Live blocks never overlap: sorted, each ends before the next starts. */
static void hm__check_disjoint(uintptr_t *p, size_t n) {
  qsort(p, n, sizeof *p, hm__cmp_ptr);
  for (size_t i = 1; i < n; i++) CHECK(p[i - 1] + _hm_pl_heap_usable((void *)p[i - 1]) <= p[i]);
}

/* About 14% up each time, odd sizes included, ending at HM_PL_HEAP_MAX
 * exactly; 0 after it. */
static size_t hm__next_size(size_t s) {
  if (s == HM_PL_HEAP_MAX) return 0;
  return s + s / 7 + 1 < HM_PL_HEAP_MAX ? s + s / 7 + 1 : HM_PL_HEAP_MAX;
}

static void hm__sizes(void) {
  uintptr_t live[256];
  size_t n = 0;
  for (size_t s = 16; s && n < 256; s = hm__next_size(s)) {
    unsigned char *p = hm__malloc(s);
    hm__check_block(p, s);
    if (!p) continue;
    p[0] = 1; /* writable at both ends */
    p[s - 1] = 2;
    live[n++] = (uintptr_t)p;
  }
  CHECK(n > 60);
  CHECK(_hm_pl_heap_usable((void *)live[n - 1]) == HM_PL_HEAP_MAX);
  hm__check_disjoint(live, n);
  for (size_t i = 0; i < n; i++) _hm_pl_heap_free((void *)live[i]);
  CHECK(hm__malloc(HM_PL_HEAP_MAX + 1) == NULL); /* large: not the heap's */
  CHECK(_hm_pl_heap_malloc(64, (const void *)(uintptr_t)&__libc_malloc) == NULL); /* libc's own */
  static int outside;
  CHECK(!_hm_pl_heap_has(&outside));
  CHECK_EQ_INT(_hm_pl_heap_usable(&outside), 0);
}

static void hm__reuse(void) {
  void *p = hm__malloc(200);
  CHECK(p != NULL);
  _hm_pl_heap_free(p);
  CHECK(hm__malloc(200) == p); /* the thread's list is last in, first out */
  _hm_pl_heap_free(p);
}

static void hm__memalign_sizes(size_t align) {
  const size_t sz[] = {1, align / 2, align, align + 16, 3 * align + 5};
  for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
    void *p = _hm_pl_heap_memalign(align, sz[i], RA);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK((uintptr_t)p % align == 0);
    CHECK(_hm_pl_heap_usable(p) >= sz[i]);
    CHECK(_hm_pl_heap_has(p));
    _hm_pl_heap_free(p);
  }
}

static void hm__memalign(void) {
  for (size_t a = 32; a <= 64 * KiB; a *= 2) hm__memalign_sizes(a);
  CHECK(_hm_pl_heap_memalign(128 * KiB, 64, RA) == NULL); /* above a span's alignment */
}

/* ------------------------------------------------------------------------
 * Data survives paging
 * ------------------------------------------------------------------------ */
#define PAGED_MAX 2048

static void hm__paging(void) {
  static void *blk[PAGED_MAX];
  static size_t len[PAGED_MAX];
  const size_t sz[] = {4 * KiB, 12 * KiB, 28 * KiB, 60 * KiB, 100 * KiB, 256 * KiB};
  size_t n = 0, total = 0;
  hm_pager_stats_t s0 = hm_sdm_stats(_hm_pl_ctx.pager);
  for (; total < 64 * MiB && n < PAGED_MAX; n++) {
    len[n] = sz[n % (sizeof sz / sizeof sz[0])];
    blk[n] = hm__malloc(len[n]);
    hm__check_block(blk[n], len[n]);
    if (!blk[n]) return;
    hm__fill(blk[n], len[n], n);
    total += len[n];
  }
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += hm__bad(blk[i], len[i], i);
  hm_pager_stats_t s1 = hm_sdm_stats(_hm_pl_ctx.pager);
  CHECK_EQ_INT(bad, 0);
  CHECK(s1.evictions > s0.evictions); /* 64 MiB passed through 8 MiB */
  CHECK(s1.bytes_read > s0.bytes_read);
  for (size_t i = 0; i < n; i++) _hm_pl_heap_free(blk[i]);
}

/* ------------------------------------------------------------------------
 * Blocks of the discarding classes, freed and reused
 * ------------------------------------------------------------------------ */
#define DISC_MAX 128

/* Words of a reused block (past its link word) that are neither zero (a
 * dropped unit) nor what it held before it was freed: salt 1. */
static size_t hm__not_old(const void *p, size_t size, size_t *zeros) {
  const uint64_t *w = p;
  uint64_t base = hm__base(p, 1);
  size_t bad = 0;
  for (size_t i = 1; i < size / 8; i++) {
    *zeros += w[i] == 0;
    bad += w[i] != 0 && w[i] != hm_sdm_mix(i * 3 + base); /* hm_sdm_fill_salted's word */
  }
  return bad;
}

static int hm__was(void *const *old, size_t n, const void *p) {
  for (size_t i = 0; i < n; i++)
    if (old[i] == p) return 1;
  return 0;
}

/* 1.5 budgets of blocks of size bytes filled, freed, taken again,
 * rewritten: the rewrite reads back exactly after it was pushed out. */
static void hm__discard_size(size_t size) {
  void *old[DISC_MAX], *now[DISC_MAX];
  size_t n = 3 * BUDGET / 2 / size, reused = 0, bad = 0, zeros = 0;
  if (n > DISC_MAX) n = DISC_MAX;
  for (size_t i = 0; i < n; i++) {
    old[i] = hm__malloc(size);
    hm__check_block(old[i], size);
    if (!old[i]) return;
    hm__fill(old[i], size, 1);
  }
  for (size_t i = 0; i < n; i++) _hm_pl_heap_free(old[i]);
  for (size_t i = 0; i < n; i++) {
    now[i] = hm__malloc(size);
    hm__check_block(now[i], size);
    if (!now[i]) return;
    if (hm__was(old, n, now[i])) {
      reused++;
      bad += hm__not_old(now[i], size, &zeros);
    }
    hm__fill(now[i], size, 2);
  }
  for (size_t i = 0; i < n; i++) bad += hm__bad(now[i], size, 2);
  CHECK(reused > 0);
  CHECK_EQ_INT(bad, 0);
  printf("discard %zu KiB: %zu blocks, %zu reused, %zu zero words\n", size / KiB, n, reused,
         zeros);
  for (size_t i = 0; i < n; i++) _hm_pl_heap_free(now[i]);
}

static void hm__discard_reuse(void) {
  const size_t sz[] = {128 * KiB, 200 * KiB, 512 * KiB, HM_PL_HEAP_MAX};
  CHECK(hm__class_of(sz[0]) == HM__DISCARD_CLASS);
  for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) hm__discard_size(sz[i]);
}

/* ------------------------------------------------------------------------
 * Threads: cross-thread frees, thread exit, the fork handlers' locks
 * ------------------------------------------------------------------------ */
#define NT 4
#define ROUNDS 150
#define BATCH 32

typedef struct hm__item_s {
  struct hm__item_s *next;
  void *p;
  size_t size;
  uint64_t salt;
} hm__item_t;

/* Blocks handed to a thread to verify and free. */
typedef struct hm__queue_s {
  pthread_mutex_t mu;
  hm__item_t *head;
} hm__queue_t;

typedef struct hm__worker_s {
  unsigned id;
  uint64_t rng, made, freed, bad, null, left;
  pthread_t th;
} hm__worker_t;

static hm__queue_t g_q[NT];
static _Atomic int g_producing; /* workers still handing blocks out */
static _Atomic int g_running;   /* workers not yet ended */

static void hm__push(hm__queue_t *q, hm__item_t *it) {
  pthread_mutex_lock(&q->mu);
  it->next = q->head;
  q->head = it;
  pthread_mutex_unlock(&q->mu);
}

static hm__item_t *hm__take_all(hm__queue_t *q) {
  pthread_mutex_lock(&q->mu);
  hm__item_t *it = q->head;
  q->head = NULL;
  pthread_mutex_unlock(&q->mu);
  return it;
}

/* Mostly small, every 8th up to 64 KiB, every 32nd of a discarding class. */
static size_t hm__size(hm__worker_t *w) {
  uint64_t r = hm_sdm_mix(++w->rng);
  if (r % 32 == 0) return 128 * KiB + (size_t)(r >> 20) % (192 * KiB);
  if (r % 8 == 0) return 4 * KiB + (size_t)(r >> 20) % (60 * KiB);
  return 16 + (size_t)(r >> 20) % 4096;
}

static void hm__verify_free(hm__worker_t *w, hm__item_t *it) {
  w->bad += hm__bad(it->p, it->size, it->salt);
  w->bad += _hm_pl_heap_usable(it->p) < it->size;
  _hm_pl_heap_free(it->p);
  w->freed++;
}

static void hm__drain(hm__worker_t *w) {
  for (hm__item_t *it = hm__take_all(&g_q[w->id]), *next; it; it = next) {
    next = it->next;
    hm__verify_free(w, it);
    free(it);
  }
}

/* BATCH blocks made and filled; the odd ones go to the next thread, the
 * even ones are verified and freed here, newest first. */
static void hm__round(hm__worker_t *w) {
  hm__item_t mine[BATCH];
  size_t kept = 0;
  for (unsigned i = 0; i < BATCH; i++) {
    size_t size = hm__size(w);
    void *p = hm__malloc(size);
    if (!p) {
      w->null++;
      continue;
    }
    w->bad += (uintptr_t)p % 16 != 0 || !_hm_pl_heap_has(p);
    uint64_t salt = (uint64_t)w->id << 32 | w->made++;
    hm__fill(p, size, salt);
    hm__item_t it = {NULL, p, size, salt}, *out = i % 2 ? malloc(sizeof *out) : NULL;
    if (out) {
      *out = it;
      hm__push(&g_q[(w->id + 1) % NT], out);
    } else {
      mine[kept++] = it; /* an even one, or no memory for the item */
    }
  }
  while (kept) hm__verify_free(w, &mine[--kept]);
}

/* The thread's lists after _hm_pl_heap_thread_exit: all given back. */
static uint64_t hm__lists_left(void) {
  uint64_t left = 0;
  for (unsigned c = 1; c < HM_PL_HEAP_CLASSES; c++)
    left += _hm_pl_tls.heap[c].head != NULL || _hm_pl_tls.heap[c].n != 0;
  return left;
}

static void *hm__worker(void *arg) {
  hm__worker_t *w = arg;
  for (int r = 0; r < ROUNDS; r++) {
    hm__round(w);
    hm__drain(w);
  }
  atomic_fetch_sub(&g_producing, 1);
  while (atomic_load(&g_producing)) { /* the others may still hand some over */
    hm__drain(w);
    sched_yield();
  }
  hm__drain(w);
  _hm_pl_heap_thread_exit();
  w->left = hm__lists_left();
  atomic_fetch_sub(&g_running, 1);
  return NULL;
}

/* What fork.c's handlers do around a fork, again and again while the
 * workers run: every lock taken, held a moment, released. */
static unsigned hm__lock_cycles(void) {
  const struct timespec hold = {0, 100 * 1000};
  unsigned n = 0;
  do {
    _hm_pl_heap_lock_all();
    nanosleep(&hold, NULL);
    _hm_pl_heap_unlock_all();
    n++;
    hm_sdm_sleep_ms(1);
  } while (atomic_load(&g_running));
  return n;
}

static void hm__threads(void) {
  static hm__worker_t w[NT];
  atomic_store(&g_producing, NT);
  atomic_store(&g_running, NT);
  for (unsigned t = 0; t < NT; t++) pthread_mutex_init(&g_q[t].mu, NULL); /* each hands to the next */
  for (unsigned t = 0; t < NT; t++) {
    w[t] = (hm__worker_t){.id = t, .rng = 1000u * (t + 1)};
    CHECK_EQ_INT(pthread_create(&w[t].th, NULL, hm__worker, &w[t]), 0);
  }
  unsigned cycles = hm__lock_cycles();
  uint64_t made = 0, freed = 0, bad = 0, null = 0, left = 0;
  for (unsigned t = 0; t < NT; t++) {
    pthread_join(w[t].th, NULL);
    made += w[t].made;
    freed += w[t].freed;
    bad += w[t].bad;
    null += w[t].null;
    left += w[t].left;
  }
  printf("threads: %llu blocks, %u lock cycles\n", (unsigned long long)made, cycles);
  CHECK_EQ_INT(made, (uint64_t)NT * ROUNDS * BATCH);
  CHECK_EQ_INT(freed, made); /* every block freed once, half by another thread */
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(null, 0);
  CHECK_EQ_INT(left, 0);
}

/* ------------------------------------------------------------------------
 * Afterwards: the heap still serves, its lists are whole
 * ------------------------------------------------------------------------ */
/* A list of class c from head: at most `most` blocks (no cycle), each in a
 * span of class c. How many, or -1 at the first stray block. */
static long hm__walk(const _hm_pl_heap_t *h, unsigned c, void *head, size_t most) {
  long n = 0;
  for (void *b = head; b; b = *(void **)b, n++)
    if ((size_t)n > most || hm__class_at(h, b) != c || (uintptr_t)b % 16) return -1;
  return n;
}

static void hm__check_lists(void) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  size_t spans = atomic_load(&h->top) - h->lo;
  for (unsigned c = 1; c < HM_PL_HEAP_CLASSES; c++) {
    size_t most = spans / hm__class_size(c);
    hm__lock(&h->klass[c].lock);
    long global = hm__walk(h, c, h->klass[c].free, most);
    hm__unlock(&h->klass[c].lock);
    long mine = hm__walk(h, c, _hm_pl_tls.heap[c].head, most);
    CHECK(global >= 0);
    CHECK_EQ_INT(mine, _hm_pl_tls.heap[c].n);
  }
}

static void hm__still_serves(void) {
  void *p[64];
  size_t bad = 0;
  for (unsigned i = 0; i < 64; i++) {
    size_t size = (size_t)16 << (i % 17); /* 16 B .. 1 MiB */
    p[i] = hm__malloc(size);
    hm__check_block(p[i], size);
    if (p[i]) hm__fill(p[i], size, 7 + i);
  }
  for (unsigned i = 0; i < 64; i++)
    if (p[i]) bad += hm__bad(p[i], (size_t)16 << (i % 17), 7 + i);
  CHECK_EQ_INT(bad, 0);
  for (unsigned i = 0; i < 64; i++) _hm_pl_heap_free(p[i]);
}

int main(void) {
  CHECK_EQ_INT(hm_ctx_new(&g_ctx, NULL), 0);
  CHECK_EQ_INT(_hm_pl_table_init(&_hm_pl_ctx.table), 0);
  if (!g_ctx) return hm_test_done("test_preload_heap");
  int rc = _hm_pl_heap_start();
  if (rc == -EPERM || rc == -ENOSYS) {
    printf("test_preload_heap: no userfaultfd here (%s): skipped\n", hm_strerror(rc));
    hm_ctx_free(g_ctx);
    return 0;
  }
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    hm__sizes();
    hm__reuse();
    hm__memalign();
    hm__discard_reuse();
    hm__paging();
    hm__threads();
    hm__still_serves();
    hm__check_lists();
  }
  if (_hm_pl_ctx.pager) hm_sdm_close(_hm_pl_ctx.pager, hm_sdm_dir);
  hm_ctx_free(g_ctx);
  return hm_test_done("test_preload_heap");
}
