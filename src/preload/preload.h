/* SPDX-License-Identifier: BSD-3-Clause */
/* The LD_PRELOAD interposer: internals shared by the files of src/preload/.
 *
 * Shape (kept so that placement can extend it with allocation sites and
 * more tiers):
 *   hook (malloc, mmap, ...)  ->  size filter  ->  route()  ->  backend
 * Small requests never leave the hook: they go straight to glibc's own
 * allocator (__libc_malloc & co.). Large ones are routed to a backend (today
 * the pager; later a NUMA tier chosen per allocation site) and recorded in
 * the block table, which free/realloc/malloc_usable_size/munmap consult to
 * find who owns a pointer without any lock.
 */
#ifndef HM_PRELOAD_H
#define HM_PRELOAD_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "hetmem.h"
#include "internal.h"

/* Every symbol the interposer defines, listed once:
 * X(return type, name, (parameters)). preload.map exports exactly these
 * names (tests/integration/test_run.py checks both agree); hooks.c declares each one
 * with default visibility from this list, so a prototype that drifts from
 * glibc's fails to compile. pthread_create is hooked so that threads the
 * runtime starts (the pager's fault handlers) inherit the recursion guard. */
#define HM_PL_HOOKS(X)                                                                   \
  X(void *, malloc, (size_t size))                                                       \
  X(void, free, (void *ptr))                                                             \
  X(void *, calloc, (size_t nmemb, size_t size))                                         \
  X(void *, realloc, (void *ptr, size_t size))                                           \
  X(void *, reallocarray, (void *ptr, size_t nmemb, size_t size))                        \
  X(void *, memalign, (size_t alignment, size_t size))                                   \
  X(int, posix_memalign, (void **memptr, size_t alignment, size_t size))                 \
  X(void *, aligned_alloc, (size_t alignment, size_t size))                              \
  X(void *, valloc, (size_t size))                                                       \
  X(void *, pvalloc, (size_t size))                                                      \
  X(size_t, malloc_usable_size, (void *ptr))                                             \
  X(void *, mmap, (void *addr, size_t length, int prot, int flags, int fd, off_t offset)) \
  X(void *, mmap64, (void *addr, size_t length, int prot, int flags, int fd, off_t offset)) \
  X(int, munmap, (void *addr, size_t length))                                            \
  X(int, madvise, (void *addr, size_t length, int advice))                               \
  X(void *, mremap, (void *old_address, size_t old_size, size_t new_size, int flags, ...)) \
  X(int, pthread_create,                                                                 \
    (pthread_t * thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg))  \
  X(int, sigaction, (int sig, const struct sigaction *act, struct sigaction *old))         \
  X(__sighandler_t, signal, (int sig, __sighandler_t handler))                           \
  HM_PL_READ_HOOKS(X)

/* The read family (dio.c): direct reads into the pager's memory go through
 * a bounce buffer. The glibc functions they pass to: HM_PL_DIO_NREAL. */
#define HM_PL_DIO_NREAL 5
#define HM_PL_DIO_KEEP ((size_t)256 << 10) /* the bounce buffer a thread keeps */
#define HM_PL_READ_HOOKS(X)                                                              \
  X(ssize_t, read, (int fd, void *buf, size_t count))                                    \
  X(ssize_t, pread, (int fd, void *buf, size_t count, off_t offset))                     \
  X(ssize_t, pread64, (int fd, void *buf, size_t count, off_t offset))                   \
  X(ssize_t, __read_chk, (int fd, void *buf, size_t nbytes, size_t buflen))              \
  X(ssize_t, __pread_chk, (int fd, void *buf, size_t nbytes, off_t offset, size_t buflen)) \
  X(ssize_t, __pread64_chk, (int fd, void *buf, size_t nbytes, off_t offset, size_t buflen)) \
  X(ssize_t, readv, (int fd, const struct iovec *iov, int iovcnt))                       \
  X(ssize_t, preadv, (int fd, const struct iovec *iov, int iovcnt, off_t offset))        \
  X(ssize_t, preadv64, (int fd, const struct iovec *iov, int iovcnt, off_t offset))      \
  X(ssize_t, preadv2, (int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)) \
  X(ssize_t, preadv64v2, (int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags))

/* Backends that can own a large block. Index 0 is glibc (never in the
 * table). Placement adds tiers here (a NUMA node bound with mbind, ...). */
typedef enum _hm_pl_backend_e {
  HM_PL_LIBC = 0,  /* untracked glibc memory */
  HM_PL_PAGER = 1, /* a pager region (cache mode; the storage tier of flat/hybrid) */
  HM_PL_FAST = 2,  /* glibc memory that is tracked: fast tier, or any block while profiling */
  HM_PL_NUMA = 3,  /* an anonymous mapping bound to a NUMA node with mbind */
  HM_PL_OWN = 4,   /* profiling: an anonymous mapping of its own, between guard pages */
  HM_PL_SPLIT = 5, /* placement: a fast-tier prefix, the rest on the site's tier (route.c) */
  HM_PL__BACKENDS
} _hm_pl_backend_t;

/* Block flags. */
#define HM_PL_FROM_MMAP 1u /* made by the mmap hook: munmap/mremap may end it */
#define HM_PL_STATIC 2u    /* static data put behind the pager (statics.c) */

/* One live large block. key is the address handed to the application (0:
 * never used, 1: deleted, 2: being filled in); the block's mapping starts
 * off bytes below it. The fields are written before key is published and
 * read with relaxed atomics, so a scan racing with an insert never sees a
 * half-made block. */
typedef struct _hm_pl_block_s {
  _Atomic uintptr_t key;
  _Atomic size_t maplen;   /* bytes the backend mapped */
  _Atomic size_t req;      /* bytes the application asked for */
  _Atomic uint32_t off;    /* key - mapping start (alignment padding) */
  uint16_t backend;        /* _hm_pl_backend_t */
  uint16_t flags;
  /* placement and profiling (written before key is published, like the rest) */
  uint32_t site;           /* profile site slot, or placement site index + 1 (0: none) */
  uint16_t tier;           /* placement tier that serves the block */
  uint16_t sampled;        /* the access sampler has armed pages in it */
  uint64_t t_alloc;        /* ns since start (profiling: lifetimes) */
  _Atomic uint32_t pin;    /* sampler arming it right now (free waits) */
  uint32_t split_pages;    /* HM_PL_SPLIT: the mapping's first pages, on the fast tier */
} _hm_pl_block_t;

#define HM_PL_KEY_EMPTY ((uintptr_t)0)
#define HM_PL_KEY_DELETED ((uintptr_t)1)
#define HM_PL_KEY_BUSY ((uintptr_t)2)

/* The block table (table.c): open addressing over a fixed array, claimed
 * and released with compare-and-swap, plus a per-2-MiB-granule count of
 * blocks that lets free() reject almost every small pointer with a single
 * load. All functions are lock-free and async-signal-safe. The table is a
 * member of the interposer's context; nothing here is a global. */
#define HM_PL_GRANULE_SHIFT 21 /* 2 MiB */
#define HM_PL_VA_BITS 47       /* user space with 4-level page tables */
#define HM_PL_GRANULES ((uintptr_t)1 << (HM_PL_VA_BITS - HM_PL_GRANULE_SHIFT))

typedef struct _hm_pl_table_s {
  _hm_pl_block_t *_Atomic slots;
  /* Per granule: blocks overlapping it (saturates at 255, then stays). A
   * 64 MiB reservation of which only the pages covering used address
   * ranges are ever touched. */
  _Atomic uint8_t *_Atomic granules;
} _hm_pl_table_t;

int _hm_pl_table_init(_hm_pl_table_t *t);

/* 0 when p cannot be a block (the common case: every small pointer). Cost:
 * one load of the map pointer, one shift, one load, one branch. Addresses
 * above 2^47 (5-level tables with a high hint) always go to the table. */
static inline int _hm_pl_table_maybe(const _hm_pl_table_t *t, const void *p) {
  _Atomic uint8_t *g = atomic_load_explicit(&t->granules, memory_order_acquire);
  uintptr_t i = (uintptr_t)p >> HM_PL_GRANULE_SHIFT;
  if (__builtin_expect(g == NULL, 0)) return 0; /* before start-up nothing is ours */
  return i >= HM_PL_GRANULES || atomic_load_explicit(&g[i], memory_order_acquire) != 0;
}

/* Records a block (its mapping starts off bytes below key); NULL when the
 * table is full (the caller then serves the request from glibc). */
_hm_pl_block_t *_hm_pl_table_insert(_hm_pl_table_t *t, uintptr_t key, uint32_t off,
                                    size_t maplen, size_t req, uint16_t backend, uint16_t flags);
/* The same, with the placement/profiling fields of the block. */
_hm_pl_block_t *_hm_pl_table_insert_ex(_hm_pl_table_t *t, uintptr_t key, uint32_t off,
                                       size_t maplen, size_t req, uint16_t backend,
                                       uint16_t flags, uint32_t site, uint16_t tier,
                                       uint64_t t_alloc);
/* The block whose key is exactly p, or NULL (call after _hm_pl_table_maybe). */
_hm_pl_block_t *_hm_pl_table_find(_hm_pl_table_t *t, const void *p);
/* The block whose mapping contains p (a linear scan: munmap only). */
_hm_pl_block_t *_hm_pl_table_find_containing(_hm_pl_table_t *t, const void *p);
/* Releases the slot; the block's granules lose one count. */
void _hm_pl_table_remove(_hm_pl_table_t *t, _hm_pl_block_t *b);
/* Forgets every block (a forked child, single-threaded: the pager's
 * regions are not inherited, so their addresses may be reused there). */
void _hm_pl_table_clear(_hm_pl_table_t *t);
/* Counts [start, start + len) in the granule map for good, as a block that
 * is never removed: the small-block heap's chunks, so that the hooks' one
 * granule load also sends heap pointers to the slow path. */
void _hm_pl_table_mark(_hm_pl_table_t *t, uintptr_t start, size_t len);
/* Slots in the table. */
size_t _hm_pl_table_capacity(void);
/* Slot i (0 <= i < capacity), for scans (the sampler); NULL before init. */
_hm_pl_block_t *_hm_pl_table_slot(_hm_pl_table_t *t, size_t i);

/* ------------------------------------------------------------------------
 * Call sites (site.c): loaded modules and stack capture.
 *
 * A frame is a return address; it names (module, address - load bias),
 * the same in every run of the same build. Modules are found with
 * dl_iterate_phdr at start-up and again when an address falls in none of
 * them (a dlopen since); their build-ids come from PT_NOTE in memory.
 * ------------------------------------------------------------------------ */
#define HM_PL_MAX_DEPTH 64
#define HM_PL_MAX_MODULES 512

typedef struct _hm_pl_stack_s {
  int n;                              /* frames captured, innermost first */
  uint64_t hash;                      /* of the raw addresses (never 0 or 1) */
  uintptr_t a[HM_PL_MAX_DEPTH];
} _hm_pl_stack_t;

typedef struct _hm_pl_module_s {
  uintptr_t bias, lo, hi; /* dlpi_addr; lowest and highest address of its PT_LOADs */
  char path[512];
  char build_id[129];     /* lower-case hex, "" when none */
  int is_main;
} _hm_pl_module_t;

/* Scans the loaded modules and primes glibc's backtrace (which loads
 * libgcc_s on first use): call once at start-up, outside malloc. */
int _hm_pl_sites_init(void);
/* Captures up to depth return addresses of the caller of the hook, the
 * interposer's own frames skipped. Cost: one glibc backtrace() (the
 * DWARF unwinder, about 0.2 us per frame) plus a hash. */
void _hm_pl_capture(_hm_pl_stack_t *st, int depth);
/* Sets st->hash from its frames, as _hm_pl_capture does. */
void _hm_pl_stack_hash(_hm_pl_stack_t *st);
/* Module index of addr and its offset; -1 when no loaded module holds it
 * (after one rescan, skipped while another thread rescans). */
int _hm_pl_frame(uintptr_t addr, uint64_t *off);
size_t _hm_pl_module_count(void);
const _hm_pl_module_t *_hm_pl_module(size_t i);
/* Bumped whenever a rescan finds modules that came or went. */
unsigned _hm_pl_modules_gen(void);

/* ------------------------------------------------------------------------
 * Placement (place.c): the compact table (docs/formats.md) and matching.
 * ------------------------------------------------------------------------ */
#define HM_PL_MAX_TIERS 8
typedef struct _hm_pl_tier_s {
  char kind[16];
  int numa;            /* -1: not a NUMA node */
  uint64_t capacity;   /* bytes per process, 0 = unlimited */
  char name[256];
} _hm_pl_tier_t;

/* Reads the compact table; 0 or a negative errno with a one-line reason. */
int _hm_pl_place_load(const char *path, char *why, size_t len);
size_t _hm_pl_place_tiers(void);
const _hm_pl_tier_t *_hm_pl_place_tier(size_t i);
size_t _hm_pl_place_sites(void);
/* Site i's id and tier (i in 0.._hm_pl_place_sites()-1, sorted by id). */
void _hm_pl_place_site(size_t i, uint32_t *id, uint32_t *tier);
/* Bytes of each allocation of placement site i that the fastest tier
 * serves before the site's own tier serves the rest (0: none). */
uint64_t _hm_pl_place_split(size_t i);
/* The placement site a captured stack belongs to (index, or -1), by the
 * rule of hetmem.placement.match. Cost: a hit in this thread's cache of
 * raw return-address chains (a hash, a compare) or, on a miss, module
 * lookups plus a scan of the sites. Lock-free. */
int _hm_pl_place_match(const _hm_pl_stack_t *st);
/* Cache hits and misses, over all threads (statistics). */
void _hm_pl_place_cache_counts(uint64_t *hits, uint64_t *misses);
/* Loaded modules the placement recognised / placement modules with a
 * build-id that no loaded module had (statistics; call at exit). */
void _hm_pl_place_module_counts(uint32_t *matched, uint32_t *loaded);

/* ------------------------------------------------------------------------
 * Profiling (prof.c, prof_write.c): the allocation-site profile and the
 * access sampler (sampler.h).
 * ------------------------------------------------------------------------ */
typedef struct _hm_pl_prof_cfg_s {
  const char *path_template; /* %h %r %p */
  int depth;
  size_t threshold;
  const char *sampler;       /* auto, portable, none, pebs, ibs, spe, damon */
  uint64_t period_us;        /* sampler period */
  _hm_pl_table_t *table;     /* the interposer's block table (sampler scans it) */
  const char *fsroot;        /* root of the samplers' /sys accesses */
} _hm_pl_prof_cfg_t;

/* 0, or a negative errno with a one-line reason. */
int _hm_pl_prof_start(const _hm_pl_prof_cfg_t *cfg, char *why, size_t len);
/* 1 when the sampler counts per mapping (refs): large blocks then get a
 * mapping of their own. */
int _hm_pl_prof_per_mapping(void);
uint64_t _hm_pl_prof_now(void); /* ns since start */
/* The site of a captured stack (a slot of a lock-free table), 0 when full. */
uint32_t _hm_pl_prof_site(const _hm_pl_stack_t *st);
void _hm_pl_prof_alloc(uint32_t site, size_t size);
/* A freed block's own mapping (HM_PL_OWN, base and maplen as route.c has
 * them) handed to the refs sampler, which unmaps it after its next drain:
 * 1 when taken, else the caller unmaps it (sampler.h, _hm_smp_bury). */
/* A block's own mapping [base, base + len) was made (HM_PL_OWN, or a
 * static array's): the refs sampler counts the pages written in it. */
void _hm_pl_prof_own_mapped(void *base, size_t len);
int _hm_pl_prof_bury(void *base, size_t maplen, uintptr_t key, size_t req, uint32_t site,
                     uint64_t t_alloc);
/* Marks site (a slot of _hm_pl_prof_site) as a static array's. */
void _hm_pl_prof_mark_static(uint32_t site);
/* A block is being released: its lifetime and a live-bytes event are
 * recorded and any page the sampler armed in it is restored. Call after
 * removing b (its slot) from the table, with the fields read before, and
 * before giving its memory back. */
void _hm_pl_prof_release(_hm_pl_block_t *b, uint32_t site, uint64_t t_alloc, uintptr_t key,
                         size_t req, int event);
/* A live-bytes event of delta bytes at site (a moving realloc's old block,
 * given back before the new one is made: route.c). */
void _hm_pl_prof_live(uint32_t site, int64_t delta);
/* The rest of the process: memory outside the large blocks (rest.c). A
 * large allocation, free or moving realloc begins (busy) and ends (idle):
 * the measure reads between them only. A realloc's old block is busy from
 * its retiring until it is freed. Profile: a site's live bytes changed by
 * delta (live); the sampler's thread, once a period (tick). Placement: the
 * most seen outside the tiers in plain memory and the pager (bytes). */
void _hm_pl_rest_busy(void);
void _hm_pl_rest_idle(void);
void _hm_pl_rest_tick(void);
void _hm_pl_rest_live(int64_t delta);
uint64_t _hm_pl_rest_bytes(void);
/* A small allocation of size bytes called from return address ra. Cost: a
 * probe of this thread's table (no atomics, no lock). */
void _hm_pl_prof_small(uintptr_t ra, size_t size);
void _hm_pl_prof_thread(int delta); /* a thread starts (+1) or ends (-1) */
/* Writes the profile (at exit); stops the sampler first. */
void _hm_pl_prof_finish(void);
/* While the portable sampler's SIGSEGV handler is installed, the
 * application's own SIGSEGV disposition is kept here instead of replacing
 * it (the handler passes on every fault that is not the sampler's): returns
 * 1 when it took act and gave the application's old disposition, 0 when
 * the call is the kernel's. */
int _hm_pl_prof_segv_action(const struct sigaction *act, struct sigaction *old);
/* term.c: catches SIGINT, SIGTERM and SIGHUP where the program leaves them
 * at their default, so that a run stopped by one still writes its outputs:
 * finish() runs on a thread of its own, then the signal ends the process. */
void _hm_pl_term_catch(void (*finish)(void));
int _hm_pl_term_signal(void); /* the signal that stopped the run, 0 none */
/* sigaction on one of those signals while our handler is in: returns 1 with
 * the call done in *rc (the program's new disposition replaces ours; ours
 * reads back as SIG_DFL), 0 when not such a call. */
int _hm_pl_term_action(int sig, const struct sigaction *act, struct sigaction *old, int *rc);
/* glibc's sigaction, for hetmem's own handlers (the hook would keep them). */
int _hm_pl_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* Sets sig's disposition to the default, past the hooks (async-signal-safe). */
void _hm_pl_set_default(int sig);
/* Runs the application's SIGSEGV disposition app from one of hetmem's
 * handlers, as the kernel would: its handler under its mask, or the default
 * action (a fault is retried and kills; a sent signal is raised again). */
void _hm_pl_segv_chain(const struct sigaction *app, int sig, siginfo_t *si, void *uc);

/* outfile.c: output files in directories other users may write. Each
 * returns 0 or a negative errno with the reason in why. */
/* -EPERM when path's directory is writable by all without the sticky bit. */
int _hm_pl_out_dir_check(const char *path, char *why, size_t len);
/* Writes text to a new exclusive file beside path and renames it over path. */
int _hm_pl_out_replace(const char *path, const char *text, char *why, size_t len);
/* Appends text (one write) to path: never through a symbolic link, created
 * 0600, an existing file must be a regular file of this user. */
int _hm_pl_out_append(const char *path, const char *text, char *why, size_t len);

/* full.c: the storage tier cannot back a large allocation (policy
 * storage_full: error or fallback). */
int _hm_pl_full_init(const char *policy, char *why, size_t len);
/* rc: hm_pager_map's error for a request of bytes in dir. 1: the
 * allocation must fail (error policy), 0: served from DRAM (fallback
 * policy), -1: not a failure of the tier (the caller's usual fallback).
 * Says it once on stderr, counts it. */
int _hm_pl_full_note(int rc, const char *dir, uint64_t bytes);
struct _hm_sb_s;
/* ,"storage_full":{...} for the statistics line. */
void _hm_pl_full_json(struct _hm_sb_s *sb);

/* ------------------------------------------------------------------------
 * The one process-wide context of the interposer (init.c defines it; the
 * hooks, routing and statistics of hooks.c, route.c and stats.c share it).
 *
 * It is process-wide because the hooks are called with no handle; it is
 * the only such state in hetmem (hetmem.h's handles carry everything
 * else). Fields written once during start-up are read without locks after
 * `state` (acquire) says READY; counters are relaxed atomics, read at exit.
 * Hidden visibility: the hooks reach it PC-relative, never through the GOT.
 * ------------------------------------------------------------------------ */
#define HM_PL_HIDDEN __attribute__((visibility("hidden")))

enum { HM_PL_NONE = 0, HM_PL_OPENING = 1, HM_PL_READY = 2, HM_PL_FORKED = 3 };

/* A large static segment of a loaded module, or one large data symbol of
 * its .bss (statics.c). */
#define HM_PL_MAX_STATICS 64
typedef struct _hm_pl_static_s {
  uintptr_t lo, hi;  /* its whole pages */
  uintptr_t sym;     /* its first byte: a site's one frame (profile, placement) */
  uintptr_t at;      /* the part on a slower tier: [at, at + managed) */
  size_t managed;
  size_t fast;       /* placement: bytes left in plain memory as the fast tier's */
  int data;          /* initialized (.data); else zero-initialized (.bss) */
  int site;          /* profile site slot, or placement site index + 1; 0 none */
  int tier;          /* placement: the tier of [at, at + managed); -1 none */
  int noreserve;     /* profile: its own mapping was made MAP_NORESERVE */
  char module[256];
  char symbol[64];   /* "" when the segment is whole */
  const char *why;   /* why not (wholly) managed; NULL when it is */
} _hm_pl_static_t;

/* What _hm_pl_statics_symbols looks for, and whom it tells. */
typedef struct _hm_pl_symscan_s {
  uintptr_t bias, lo, hi; /* the module's load bias; the range the symbols lie in */
  size_t thr;             /* their least size */
  void (*cb)(void *arg, uintptr_t lo, uintptr_t hi, const char *name);
  void *arg;
} _hm_pl_symscan_t;

/* What the interposer does with large requests, fixed at start-up. */
enum { HM_PL_M_CACHE = 0, HM_PL_M_PROFILE = 1, HM_PL_M_PLACE = 2 };
extern HM_PL_HIDDEN const char *const _hm_pl_mode_names[3]; /* cache profile placement */

/* Placement counters, per site (index 0: allocations that matched no site)
 * and per tier; relaxed atomics, read at exit. */
typedef struct _hm_pl_pstat_s {
  _Atomic uint64_t allocs, overflows;
  _Atomic uint64_t splits; /* allocations served split (route.c) */
  _Atomic uint64_t bytes[HM_PL_MAX_TIERS];
} _hm_pl_pstat_t;

/* heap.c: the small-block heap in pager memory (small_blocks). Its
 * classes are 16 bytes to HM_PL_HEAP_MAX; it reserves HM_PL_HEAP_VA bytes
 * of address space. */
#define HM_PL_HEAP_CLASSES 61
#define HM_PL_HEAP_MAX ((size_t)1 << 20)
#define HM_PL_HEAP_VA ((size_t)64 << 30)

/* A thread's free blocks of one class, linked through the blocks. */
typedef struct _hm_pl_heap_tcache_s {
  void *head;
  uint32_t n;
} _hm_pl_heap_tcache_t;

/* A class's global free list and the rest of its newest span; a cache
 * line of its own (threads of different classes never share one). */
typedef struct _hm_pl_heap_class_s {
  _Alignas(64) _Atomic int lock;
  void *free;
  uintptr_t bump, end;
} _hm_pl_heap_class_t;

typedef struct _hm_pl_heap_s {
  _Atomic size_t len_pub;  /* the reservation's length once usable, else 0 (read by free) */
  uintptr_t lo;            /* its start, 64 KiB-aligned */
  _Atomic int on;          /* small requests come here (0 after fork) */
  _Atomic uintptr_t top;   /* spans handed out up to here */
  uintptr_t mapped;        /* chunks mapped into the pager up to here (grow lock) */
  _Atomic int grow_lock;
  uint8_t *cls;            /* class per 64 KiB of the reservation (0: no span) */
  uintptr_t sys[2][2];     /* the C library's and the loader's extents */
  int nsys;
  _hm_pl_heap_class_t klass[HM_PL_HEAP_CLASSES];
} _hm_pl_heap_t;

typedef struct _hm_pl_ctx_s {
  /* start-up (init.c's prepare, once) */
  pthread_once_t once;
  int mode;                  /* HM_PL_M_* */
  int depth;                 /* frames captured per large allocation */
  int hybrid;                /* placement: hybrid (else flat) */
  _hm_pl_static_t statics[HM_PL_MAX_STATICS]; /* found at start-up (statics.c) */
  int nstatics;
  int statics_managed;       /* how many are behind the pager */
  int own_maps;              /* profile: each large block in a mapping of its own
                              * (HM_PL_OWN), for the refs sampler's per-mapping counts */
  uint64_t pager_budget;     /* the pager's DRAM cache (cache: budget; hybrid: at least) */
  uint64_t pager_max;        /* the budget the pager is opened with: hybrid's whole fast
                              * budget, of which it gets what tier 0 leaves (route.c) */
  uint64_t fast_limit;       /* placement: the most tier 0 may hold (the budget, less the
                              * pager's least cache when a tier is the storage tier) */
  int rest_room;             /* placement: tier 0 also leaves room for the rest of the
                              * process (the budget bounds it, beside the pager) */
  uint64_t pager_floor;      /* placement: the pager's least cache (hm__place_floor) */
  _Atomic uint64_t share_sent; /* hybrid: the pager budget last set (route.c) */
  _hm_pl_pstat_t *pstat;     /* placement: 1 + sites */
  _Atomic uint64_t tier_live[HM_PL_MAX_TIERS], tier_peak[HM_PL_MAX_TIERS];
  _Atomic uint64_t tier_allocs[HM_PL_MAX_TIERS];
  int glibc_tier;            /* placement tier that glibc serves (-1: none) */
  size_t huge;               /* placement: THP size to advise DRAM/NUMA blocks with (0: no) */
  uint64_t auto_min, auto_max; /* placement: unmatched sizes sent to tier 0 (auto_fast; 0: off) */
  _Atomic uint64_t huge_bytes; /* bytes so advised */
  int prep_rc;               /* 0 or a negative errno */
  char prep_msg[HM_ERRMSG_MAX];
  hm_ctx_t *ctx;             /* options; never freed (blocks outlive main) */
  uint64_t budget;           /* fast_budget: the pager's DRAM cache */
  uint64_t fetch_unit;
  size_t page;
  char stats_path[HM_PATH_MAX];
  pthread_key_t thread_key;  /* flushes per-thread counters at thread exit */
  int have_key;
  size_t (*libc_usable)(void *);
  int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  void *_Atomic dio_real[HM_PL_DIO_NREAL]; /* dio.c: glibc's read family */
  _Atomic uint64_t dio_reads, dio_bytes; /* dio.c: direct reads bounced, their bytes */
  _hm_pl_table_t table;      /* live large blocks */
  /* backends */
  _Atomic int state;         /* HM_PL_NONE .. HM_PL_FORKED */
  hm_pager_t *pager;
  /* counters */
  _Atomic uint64_t large_allocs, large_frees, large_bytes, live_bytes, peak_live_bytes;
  _Atomic uint64_t mmap_allocs, fallbacks, realloc_moves, small_exited;
  _hm_pl_heap_t heap;        /* small_blocks (heap.c) */
  /* fork (fork.c): large allocations and frees hold it shared, a fork
   * exclusively, so that the child's copy of the blocks is whole */
  pthread_rwlock_t fork_lk;
  uint64_t fork_copy;        /* the most a fork copies for its child (fork_copy) */
  uint64_t fork_copies, fork_copied_bytes, fork_largest, forks_uncopied; /* fork.c, parent */
} _hm_pl_ctx_t;

extern HM_PL_HIDDEN _hm_pl_ctx_t _hm_pl_ctx;

/* Read on every allocation; 1 MiB (the option's default) until start-up
 * has read the option. */
extern HM_PL_HIDDEN _Atomic size_t _hm_pl_threshold;

/* Set once profiling runs: small allocations are then counted per caller. */
extern HM_PL_HIDDEN _Atomic int _hm_pl_profiling;

/* Per thread. initial-exec: no __tls_get_addr call, no allocation on first
 * access.
 *
 * guard: non-zero while this thread runs inside hetmem (start-up, a large
 * request, the outputs at exit) and for the whole life of the threads
 * hetmem starts (the pager's fault handlers, the sampler). What it
 * protects: an allocation made from there (dlsym's, the options', the
 * pager's, the profile writer's) is served by glibc and never routed back
 * into the pager, the profiler or placement; munmap and madvise from there
 * pass straight to the kernel; such threads are not counted in the
 * profile. The OS calls of prim never re-enter the hooks (raw syscalls),
 * so it guards only against hetmem's own allocations and libc calls. */
typedef struct _hm_pl_tls_s {
  unsigned guard;
  unsigned registered;
  unsigned counted; /* in the profile's thread count (hetmem's own are not) */
  unsigned refused; /* the last large request failed by policy (full.c): no glibc fallback */
  uint64_t small;
  _hm_pl_heap_tcache_t heap[HM_PL_HEAP_CLASSES]; /* heap.c's free lists of this thread */
  char *dio_buf; /* dio.c: this thread's kept bounce buffer (HM_PL_DIO_KEEP bytes), or NULL */
  int dio_busy;  /* dio.c: in use (a read in a signal handler then maps its own) */
} _hm_pl_tls_t;
extern HM_PL_HIDDEN __thread _hm_pl_tls_t _hm_pl_tls __attribute__((tls_model("initial-exec")));

/* *a = max(*a, v), relaxed: peaks kept by several threads (live bytes,
 * a tier's, the profile's counters). */
static inline void _hm_pl_atomic_max(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

/* Cost: one relaxed load (every allocation compares with it). */
static inline size_t _hm_pl_thr(void) {
  return atomic_load_explicit(&_hm_pl_threshold, memory_order_relaxed);
}

/* glibc exports its allocator under these names precisely so that
 * interposers can reach it without dlsym (which may itself allocate). */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

/* The pager may be absent from a build (a partial checkout): the weak
 * references then read as NULL and cache mode says so at start-up. */
#pragma weak hm_pager_open
#pragma weak hm_pager_map
#pragma weak hm_pager_map_at
#pragma weak hm_pager_unmap
#pragma weak hm_pager_advise
#pragma weak hm_pager_config_default
#pragma weak hm_pager_stats_json
#pragma weak hm_pager_set_budget
#pragma weak hm_pager_exclude_bytes

/* A large request as routed (route.c). */
typedef struct _hm_pl_req_s {
  size_t size;
  size_t align;   /* 0: the backend's natural alignment (a page or more) */
  uint16_t flags; /* HM_PL_FROM_MMAP */
} _hm_pl_req_t;

/* init.c: start-up, fork, the SIGSEGV chain. */
/* One line "hetmem: <msg>" on stderr in one write(2): usable inside malloc. */
void _hm_pl_say(const char *msg);
_Noreturn void _hm_pl_die_inside_malloc(const char *why);
/* The mode and its settings, before a large request is routed (see init.c). */
void _hm_pl_ensure_prepared(void);

/* statics.c: large static segments. Lists them (before main); in cache
 * mode puts the untouched part of each .bss behind the pager; writes them
 * into the statistics line. */
void _hm_pl_statics_find(size_t thr);
void _hm_pl_statics_prepare(size_t thr);
void _hm_pl_statics_json(_hm_sb_t *sb);
/* statics_syms.c: the object symbols of the ELF file at path that q asks
 * for, each passed to q->cb; how many, or a negative errno. */
int _hm_pl_statics_symbols(const char *path, const _hm_pl_symscan_t *q);
/* statics_place.c: a static entry in profile and placement mode. */
void _hm_pl_statics_profile(_hm_pl_static_t *s);
void _hm_pl_statics_place(_hm_pl_static_t *s);
/* The longest run of pages of [lo, hi) that nothing touched yet, into
 * [*a, *b); 0 when mincore cannot say (statics.c). */
int _hm_pl_statics_untouched(uintptr_t lo, uintptr_t hi, uintptr_t *a, uintptr_t *b);

/* route.c: routing, accounting, backends, huge-page advice. */
/* Opens the pager once per process (cache mode, or a storage tier); 0 when
 * it is open. */
int _hm_pl_open_pager(void);
/* Serves a large request from its backend and records the block; NULL when
 * it cannot (the caller then falls back to glibc). zero: calloc. */
void *_hm_pl_large_alloc_z(const _hm_pl_req_t *req, int zero);
void *_hm_pl_large_alloc(const _hm_pl_req_t *req);
void _hm_pl_large_free(_hm_pl_block_t *b);
/* realloc moving a block: its bytes given back first (sign -1; 1 when
 * done) or taken again (+1, the move failed); then freed with retired set. */
int _hm_pl_realloc_retire(_hm_pl_block_t *b, int sign);
/* Resizes a block of glibc's tier in glibc (route.c); 0 when it cannot. */
int _hm_pl_realloc_glibc(_hm_pl_block_t *b, void *ptr, size_t size, void **out);
void _hm_pl_large_free_moved(_hm_pl_block_t *b, int retired);
/* 1 (errno ENOMEM) when the last large request was refused by policy. */
int _hm_pl_refused(void);
/* The tier a placement site (or -1: none) wants. */
/* The tier a request of size bytes at placement site `site` (-1: none)
 * wants: the site's, else tier 0 for auto_fast sizes, else the slowest. */
int _hm_pl_place_want(int site, size_t size);
int _hm_pl_mmap_paged(void);
void _hm_pl_tier_account(int t, size_t req, int sign);
/* Claims req bytes of tier t's capacity (0 = unlimited); 0 when full. */
int _hm_pl_tier_reserve(int t, size_t req);
/* Tier t's capacity per process as enforced (0 = unlimited). */
uint64_t _hm_pl_tier_cap(int t);
/* The THP size to advise placement's DRAM/NUMA blocks with, or 0. */
size_t _hm_pl_thp_advise_size(const char *root);

/* hooks.c: the real functions, looked up once with dlsym. */
void _hm_pl_resolve_libc_usable(void);
void _hm_pl_resolve_signals(void);
/* dio.c: glibc's read family, so that a first read in a signal handler
 * (read is async-signal-safe) finds them without dlsym. */
void _hm_pl_dio_resolve(void);
/* dio.c: the thread's kept bounce buffer goes (at thread exit). */
void _hm_pl_dio_thread_exit(void);
/* hooks.c: have this thread's state flushed at its exit (once). */
void _hm_pl_register_thread(void);

/* heap.c: the small-block heap (see there). The allocation functions
 * return NULL when glibc is to serve the request. */
int _hm_pl_heap_start(void);
void _hm_pl_heap_thread_exit(void);
void _hm_pl_heap_forked(int kept);
void _hm_pl_heap_lock_all(void);
void _hm_pl_heap_unlock_all(void);
/* ra: the caller's return address (the C library's and the loader's own
 * blocks stay in glibc) */
void *_hm_pl_heap_malloc(size_t size, const void *ra);
void *_hm_pl_heap_memalign(size_t align, size_t size, const void *ra);
void _hm_pl_heap_free(void *p);
size_t _hm_pl_heap_usable(const void *p);
void *_hm_pl_heap_realloc(void *p, size_t size);
void _hm_pl_heap_json(_hm_sb_t *sb);

/* 1 when p is in the small-block heap's reservation. Cost: two loads, a
 * subtraction and a compare (the length is 0 while the heap is off); the
 * hooks ask only when the table's granule map says "maybe". */
static inline int _hm_pl_heap_has(const void *p) {
  size_t len = atomic_load_explicit(&_hm_pl_ctx.heap.len_pub, memory_order_acquire);
  return (uintptr_t)p - _hm_pl_ctx.heap.lo < len;
}

/* Small requests go to the heap (one relaxed load: off by default). */
static inline int _hm_pl_heap_on(void) {
  return atomic_load_explicit(&_hm_pl_ctx.heap.on, memory_order_relaxed);
}

/* fork.c: registers the fork handlers (start-up). */
void _hm_pl_fork_init(void);

/* stats.c: the profile and the statistics line, once per process. */
void _hm_pl_outputs(void);

#endif
