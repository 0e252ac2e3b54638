/* SPDX-License-Identifier: BSD-3-Clause */
/* The small-block heap: in cache mode with small_blocks on, allocations
 * below the threshold (up to HM_PL_HEAP_MAX, 1 MiB: the default threshold)
 * are served from pager memory instead of glibc's, so that the budget
 * pages them like the large blocks.
 * A program whose memory is mostly small blocks (bwa mem's read batches and
 * hash tables) otherwise keeps them all in DRAM, and the pager's cache
 * gets only what they leave.
 *
 * Shape (mimalloc's and tcmalloc's, much reduced):
 *  - one reservation of HM_PL_HEAP_VA bytes of address space (PROT_NONE),
 *    mapped into the pager HM__CHUNK bytes at a time as it fills
 *    (hm_pager_map_at: pager regions side by side, a span may cross two);
 *  - spans of 64 KiB or more, each holding blocks of one size class, four
 *    classes per doubling from 16 bytes to HM_PL_HEAP_MAX (at most 25%
 *    rounding); a span's class is kept per 64 KiB in a side table in plain
 *    memory, so free and malloc_usable_size never touch pager memory to
 *    learn a block's size;
 *  - per thread and class a list of free blocks (linked through the blocks
 *    themselves) of at most hm__cache_max blocks: the fast paths take no
 *    lock; per class a global list and the unused rest of its newest span
 *    behind a spin lock, taken once per batch.
 *
 * Memory is never given back to the kernel: a freed block goes back to its
 * class's lists, a span never changes class. Blocks nobody uses stay on
 * the storage tier once evicted, which is where cold memory belongs; their
 * address space and storage are what they cost.
 *
 * Blocks the C library and the dynamic loader allocate for themselves
 * (link maps of loaded libraries, stdio buffers, TLS vectors) stay in
 * glibc: code that holds their locks touches them, and the pager's own
 * threads take those locks (a lazy symbol binding, dl_iterate_phdr). In
 * the heap, a thread holding the loader's lock faulted on a link map while
 * the handler waited for that lock: LAMMPS under Open MPI hung at once.
 *
 * Fork: the pager's regions are not inherited. A forked child allocates
 * from glibc, leaves its parent's heap blocks alone when it frees them, and
 * a touch of one gets init.c's explanation (the range is in its table). */
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

#define HM__SPAN_SHIFT 16 /* the side table's granule: 64 KiB */
#define HM__SPAN ((size_t)1 << HM__SPAN_SHIFT)
#define HM__CHUNK ((size_t)64 << 20) /* mapped into the pager at a time */
/* Classes of 128 KiB blocks and up: the least that can hold two fetch units
 * (64 KiB, the smallest unit); hm__discard checks the unit in use. */
#define HM__DISCARD_CLASS 48u

/* ------------------------------------------------------------------------
 * Size classes
 * ------------------------------------------------------------------------ */
/* Class c's block size: 16 x c up to 128 bytes (c 1..8), then four per
 * doubling: 2^k x (1 + s/4), s 1..4, k 7..19 (c 9..60: up to 1 MiB). Multiples of 16,
 * so every block is 16-byte aligned. */
static size_t hm__class_size(unsigned c) {
  if (c <= 8) return (size_t)c * 16;
  unsigned j = c - 9, k = 7 + j / 4, s = j % 4 + 1;
  return ((size_t)1 << k) + (size_t)s * ((size_t)1 << (k - 2));
}

/* The least class whose blocks hold size bytes (size <= HM_PL_HEAP_MAX).
 * Cost: a clz and a few shifts. */
static inline unsigned hm__class_of(size_t size) {
  if (size <= 128) return size ? (unsigned)((size + 15) >> 4) : 1;
  unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
  size_t step = (size_t)1 << (k - 2);
  unsigned s = (unsigned)((size - ((size_t)1 << k) + step - 1) >> (k - 2));
  return 8 + (k - 7) * 4 + s;
}

/* A span of class c: 64 KiB, or 8 blocks when they are larger. */
static size_t hm__span_bytes(unsigned c) {
  size_t want = 8 * hm__class_size(c);
  return want < HM__SPAN ? HM__SPAN : (want + HM__SPAN - 1) & ~(HM__SPAN - 1);
}

/* Blocks a thread keeps per class: up to 64 KiB of them, 8 to 128. */
static uint32_t hm__cache_max(unsigned c) {
  size_t n = HM__SPAN / hm__class_size(c);
  return n < 8 ? 8 : n > 128 ? 128 : (uint32_t)n;
}

/* ------------------------------------------------------------------------
 * Locks (spin, then yield: held for a batch's list walk at most)
 * ------------------------------------------------------------------------ */
static void hm__lock(_Atomic int *l) {
  while (atomic_exchange_explicit(l, 1, memory_order_acquire))
    while (atomic_load_explicit(l, memory_order_relaxed)) _hm_prim_yield();
}

static void hm__unlock(_Atomic int *l) { atomic_store_explicit(l, 0, memory_order_release); }

/* ------------------------------------------------------------------------
 * Spans and chunks
 * ------------------------------------------------------------------------ */
/* Maps chunks into the pager until [lo, end) is mapped (grow lock held).
 * The pager allocates (its region record): the guard sends that to glibc. */
static int hm__map_to(_hm_pl_heap_t *h, uintptr_t end) {
  while (h->mapped < end) {
    if (h->mapped + HM__CHUNK > h->lo + HM_PL_HEAP_VA) return -ENOMEM;
    _hm_pl_tls.guard++;
    int rc = hm_pager_map_at(_hm_pl_ctx.pager, (void *)h->mapped, HM__CHUNK);
    _hm_pl_tls.guard--;
    if (rc) return rc;
    /* free's fast path sends these addresses on to _hm_pl_heap_has */
    _hm_pl_table_mark(&_hm_pl_ctx.table, h->mapped, HM__CHUNK);
    h->mapped += HM__CHUNK;
  }
  return 0;
}

/* A new span of class c (its blocks zero: fresh pager memory), or 0. The
 * class's lock is held (lock order: class, then grow). */
static uintptr_t hm__span_new(_hm_pl_heap_t *h, unsigned c, size_t bytes) {
  hm__lock(&h->grow_lock);
  uintptr_t s = atomic_load_explicit(&h->top, memory_order_relaxed);
  int rc = hm__map_to(h, s + bytes);
  if (rc == 0) {
    memset(h->cls + ((s - h->lo) >> HM__SPAN_SHIFT), (int)c, bytes >> HM__SPAN_SHIFT);
    atomic_store_explicit(&h->top, s + bytes, memory_order_release);
  }
  hm__unlock(&h->grow_lock);
  return rc ? 0 : s;
}

/* ------------------------------------------------------------------------
 * Per-class lists
 * ------------------------------------------------------------------------ */
/* Up to n blocks of class c onto the thread's list t (class lock held):
 * freed blocks first, then the newest span's rest. How many. */
static uint32_t hm__take(_hm_pl_heap_class_t *k, _hm_pl_heap_tcache_t *t, size_t cs, uint32_t n) {
  uint32_t got = 0;
  while (got < n && k->free) {
    void *b = k->free;
    k->free = *(void **)b;
    *(void **)b = t->head;
    t->head = b;
    got++;
  }
  while (got < n && k->bump + cs <= k->end) {
    void *b = (void *)k->bump;
    k->bump += cs;
    *(void **)b = t->head;
    t->head = b;
    got++;
  }
  t->n += got;
  return got;
}

/* Refills the thread's list of class c with half its most, from a new
 * span when the class has no block left (made under the class's lock, so
 * that two threads never both start one). */
static int hm__refill(_hm_pl_heap_t *h, _hm_pl_heap_tcache_t *t, unsigned c) {
  _hm_pl_heap_class_t *k = &h->klass[c];
  size_t cs = hm__class_size(c);
  uint32_t want = hm__cache_max(c) / 2;
  hm__lock(&k->lock);
  uint32_t got = hm__take(k, t, cs, want);
  if (!got) {
    size_t bytes = hm__span_bytes(c);
    uintptr_t s = hm__span_new(h, c, bytes);
    if (s) { /* the old span's rest is less than a block */
      k->bump = s;
      k->end = s + bytes / cs * cs;
      got = hm__take(k, t, cs, want);
    }
  }
  hm__unlock(&k->lock);
  return got ? 0 : -ENOMEM;
}

/* Gives n (>= 1) of the thread's blocks of class c back to the global
 * list: one walk of the thread's list, one splice under the lock. */
static void hm__flush(_hm_pl_heap_t *h, _hm_pl_heap_tcache_t *t, unsigned c, uint32_t n) {
  if (!n || !t->head) return;
  void *first = t->head, *last = first;
  uint32_t moved = 1;
  for (; moved < n && *(void **)last; moved++) last = *(void **)last;
  t->head = *(void **)last;
  t->n -= moved < t->n ? moved : t->n;
  _hm_pl_heap_class_t *k = &h->klass[c];
  hm__lock(&k->lock);
  *(void **)last = k->free;
  k->free = first;
  hm__unlock(&k->lock);
}

/* ------------------------------------------------------------------------
 * Start-up and thread exit
 * ------------------------------------------------------------------------ */
/* dl_iterate_phdr's callback: the extent of the C library (the object
 * that holds __libc_malloc) and of the dynamic loader (its name). */
static int hm__system_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  _hm_pl_heap_t *h = arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  uintptr_t libc = (uintptr_t)&__libc_malloc;
  int is_libc = libc >= lo && libc < hi;
  int is_ld = info->dlpi_name && strstr(info->dlpi_name, "/ld-linux") != NULL;
  if ((is_libc || is_ld) && h->nsys < 2) {
    h->sys[h->nsys][0] = lo;
    h->sys[h->nsys][1] = hi;
    h->nsys++;
  }
  return 0;
}

/* 1 when the caller at ra is the C library or the loader. Cost: up to two
 * range compares. */
static int hm__from_system(const _hm_pl_heap_t *h, uintptr_t ra) {
  for (int i = 0; i < h->nsys; i++)
    if (ra >= h->sys[i][0] && ra < h->sys[i][1]) return 1;
  return 0;
}

/* Reserves the address space and the side table and opens the pager; from
 * then on small requests come here (hooks.c). 0 or a negative errno (the
 * heap then stays off and glibc serves them, as without the option). */
int _hm_pl_heap_start(void) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  int rc = _hm_pl_open_pager();
  if (rc) return rc < 0 ? rc : -EIO;
  if (!hm_pager_map_at) return -ENOSYS;
  void *va = NULL, *side = NULL;
  size_t len = HM_PL_HEAP_VA;
  rc = _hm_prim_sys_mmap(NULL, len + HM__SPAN, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, &va);
  if (rc) return rc;
  uintptr_t lo = ((uintptr_t)va + HM__SPAN - 1) & ~(uintptr_t)(HM__SPAN - 1);
  rc = _hm_prim_sys_mmap(NULL, len >> HM__SPAN_SHIFT, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, &side);
  if (rc) {
    (void)_hm_prim_sys_munmap(va, len + HM__SPAN);
    return rc;
  }
  h->cls = side;
  (void)dl_iterate_phdr(hm__system_object, h);
  h->mapped = lo;
  h->lo = lo;
  atomic_store_explicit(&h->top, lo, memory_order_relaxed);
  atomic_store_explicit(&h->on, 1, memory_order_relaxed);
  atomic_store_explicit(&h->len_pub, len, memory_order_release); /* frees route here now */
  return 0;
}

/* A thread's lists back to the global ones (thread exit). */
void _hm_pl_heap_thread_exit(void) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->on, memory_order_relaxed)) return;
  for (unsigned c = 1; c < HM_PL_HEAP_CLASSES; c++) {
    _hm_pl_heap_tcache_t *t = &_hm_pl_tls.heap[c];
    hm__flush(h, t, c, t->n);
    t->head = NULL;
    t->n = 0;
  }
}

/* Fork (fork.c): every lock of the heap, so that the child inherits none
 * held and the spans stay as listed; released in both processes after. */
void _hm_pl_heap_lock_all(void) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->len_pub, memory_order_relaxed)) return;
  for (unsigned c = 1; c < HM_PL_HEAP_CLASSES; c++) hm__lock(&h->klass[c].lock);
  hm__lock(&h->grow_lock);
}

void _hm_pl_heap_unlock_all(void) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->len_pub, memory_order_relaxed)) return;
  hm__unlock(&h->grow_lock);
  for (unsigned c = 1; c < HM_PL_HEAP_CLASSES; c++) hm__unlock(&h->klass[c].lock);
}

/* The forked child of a process with its pager open. The chunks were not
 * inherited, which left holes in the reservation: they are reserved again
 * at once, or the kernel would place glibc's next mappings there, where
 * free would take them for heap blocks. With kept (fork.c copied the
 * spans into place) the heap goes on serving from its spans, as plain
 * memory now (a new span needs the pager: glibc then serves); without,
 * the child's requests go to glibc and frees of its parent's blocks are
 * dropped. Raw mmap only: async-signal-safe. */
void _hm_pl_heap_forked(int kept) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->len_pub, memory_order_relaxed)) return;
  uintptr_t from = kept ? atomic_load(&h->top) : h->lo;
  if (!kept) {
    atomic_store_explicit(&h->on, 0, memory_order_relaxed);
    memset(_hm_pl_tls.heap, 0, sizeof _hm_pl_tls.heap);
  }
  void *got = NULL;
  if (h->mapped > from &&
      _hm_prim_sys_mmap((void *)from, h->mapped - from, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0, &got))
    atomic_store_explicit(&h->len_pub, 0, memory_order_relaxed); /* then glibc's frees stay glibc's */
  h->mapped = from; /* a new span asks the pager, which is the parent's: glibc serves */
}

/* ------------------------------------------------------------------------
 * The allocator's entry points (hooks.c)
 * ------------------------------------------------------------------------ */
/* Cost when the thread's list has a block: the class (a few instructions),
 * a TLS load and store; otherwise a batch under the class's lock. NULL:
 * glibc serves it (too large, hetmem's own thread, heap off, out of room). */
void *_hm_pl_heap_malloc(size_t size, const void *ra) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (size > HM_PL_HEAP_MAX || _hm_pl_tls.guard ||
      !atomic_load_explicit(&h->on, memory_order_relaxed) || hm__from_system(h, (uintptr_t)ra))
    return NULL;
  unsigned c = hm__class_of(size);
  _hm_pl_heap_tcache_t *t = &_hm_pl_tls.heap[c];
  if (hm_unlikely(!t->head) && hm__refill(h, t, c)) return NULL;
  void *b = t->head;
  t->head = *(void **)b;
  t->n--;
  return b;
}

/* A block of at least size bytes aligned to align (a power of two up to
 * HM__SPAN): the least class whose size is a multiple of align, since
 * spans start 64 KiB-aligned. NULL as for _hm_pl_heap_malloc. */
void *_hm_pl_heap_memalign(size_t align, size_t size, const void *ra) {
  if (align <= 16) return _hm_pl_heap_malloc(size, ra);
  if (align > HM__SPAN || size > HM_PL_HEAP_MAX) return NULL;
  for (unsigned c = hm__class_of(size < align ? align : size); c < HM_PL_HEAP_CLASSES; c++)
    if (hm__class_size(c) % align == 0) return _hm_pl_heap_malloc(hm__class_size(c), ra);
  return NULL;
}

/* The class of a heap block; 0 for an address no span holds. */
static unsigned hm__class_at(const _hm_pl_heap_t *h, const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (a < h->lo || a >= atomic_load_explicit(&h->top, memory_order_acquire)) return 0;
  return h->cls[(a - h->lo) >> HM__SPAN_SHIFT];
}

/* The whole fetch units of a freed block past its link word are dropped
 * from the pager (DONTNEED), chunk by chunk (each chunk is a region of its
 * own): dead data then neither holds cache nor is written back when
 * evicted, and the block's next use starts from zero-filled units instead
 * of reading them back. Only for blocks of two units or more (512 KiB at
 * the default unit), which took at least 128 page faults to fill: the
 * cost is a pager call and a madvise per unit dropped. */
static void hm__discard(const _hm_pl_heap_t *h, void *p, size_t cs) {
  uint64_t u = _hm_pl_ctx.fetch_unit;
  if (!u || cs < 2 * u) return;
  /* units are counted from each chunk's start, a multiple of u from lo */
  uintptr_t a = h->lo + ((((uintptr_t)p + sizeof(void *) - h->lo) + u - 1) & ~(uintptr_t)(u - 1));
  uintptr_t b = h->lo + (((uintptr_t)p + cs - h->lo) & ~(uintptr_t)(u - 1));
  _hm_pl_tls.guard++;
  while (a < b) {
    uintptr_t end = h->lo + ((a - h->lo) / HM__CHUNK + 1) * HM__CHUNK;
    if (end > b) end = b;
    (void)hm_pager_advise(_hm_pl_ctx.pager, (void *)a, end - a, HM_ADVICE_DONTNEED);
    a = end;
  }
  _hm_pl_tls.guard--;
}

/* Cost: the side table's byte, a TLS push; every hm__cache_max frees of a
 * class, half the list back under its lock. */
void _hm_pl_heap_free(void *p) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->on, memory_order_relaxed)) return; /* a forked child without */
  unsigned c = hm__class_at(h, p);
  if (!c) return; /* not a block: as glibc would, this frees nothing we know */
  if (hm_unlikely(c >= HM__DISCARD_CLASS)) hm__discard(h, p, hm__class_size(c));
  _hm_pl_heap_tcache_t *t = &_hm_pl_tls.heap[c];
  *(void **)p = t->head;
  t->head = p;
  if (hm_unlikely(++t->n > hm__cache_max(c))) hm__flush(h, t, c, t->n / 2);
}

size_t _hm_pl_heap_usable(const void *p) {
  unsigned c = hm__class_at(&_hm_pl_ctx.heap, p);
  return c ? hm__class_size(c) : 0;
}

/* realloc of a heap block: kept when the size still falls in its class or
 * one step below (no copy for small changes), else moved with malloc (which
 * may send a grown block to the pager's large blocks). */
void *_hm_pl_heap_realloc(void *p, size_t size) {
  size_t old = _hm_pl_heap_usable(p);
  if (size == 0) { /* as glibc: the block is freed */
    free(p);
    return NULL;
  }
  if (size <= old && hm__class_of(size) + 1 >= hm__class_of(old)) return p;
  void *n = malloc(size);
  if (!n) return NULL;
  memcpy(n, p, size < old ? size : old);
  free(p);
  return n;
}

/* Writes the heap's counters into the statistics line. */
void _hm_pl_heap_json(_hm_sb_t *sb) {
  _hm_pl_heap_t *h = &_hm_pl_ctx.heap;
  if (!atomic_load_explicit(&h->len_pub, memory_order_relaxed)) {
    _hm_sb_puts(sb, ",\"small_heap\":null");
    return;
  }
  _hm_sb_printf(sb,
                ",\"small_heap\":{\"max_block\":%zu,\"mapped_bytes\":%llu,\"span_bytes\":%llu}",
                (size_t)HM_PL_HEAP_MAX, (unsigned long long)(h->mapped - h->lo),
                (unsigned long long)(atomic_load(&h->top) - h->lo));
}
