/* SPDX-License-Identifier: BSD-3-Clause */
/* hetmem: heterogeneous-memory toolkit for HPC.
 *
 * Public C API. Contract for every function that returns int: 0 on success
 * or a negative errno value on failure; nothing aborts, longjmps or leaves a
 * signal handler behind. A failed call leaves a one-line explanation that
 * hm_ctx_last_error() returns until the next failing call on that context.
 *
 * All state lives in handles the caller passes explicitly (hm_ctx_t and the
 * objects made from it). The only process-wide state is the interposer's
 * context inside the preload library, which is never part of this API.
 */
#ifndef HETMEM_H
#define HETMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define HM_API __attribute__((visibility("default")))
#define HM_NODISCARD __attribute__((warn_unused_result))
#else
#define HM_API
#define HM_NODISCARD
#endif

#define HM_VERSION_MAJOR 0
#define HM_VERSION_MINOR 1
#define HM_VERSION_PATCH 0

/** Version string of the loaded library, e.g. "0.1.0". */
HM_API const char *hm_version(void);

/** Text for a negative errno returned by this API (never NULL). */
HM_API const char *hm_strerror(int err);

/** Frees memory that this API handed to the caller (strings, arrays). */
HM_API void hm_free(void *p);

/* ------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------ */

typedef struct hm_ctx_s hm_ctx_t;

/** Called on every error recorded on a context; err is a negative errno. */
typedef void hm_error_fn(int err, const char *message, void *arg);

/** Creates a context. Options are read from the HETMEM_* environment.
 *  fsroot replaces "/" for every /sys and /proc read (tests replay recorded
 *  trees this way); NULL means the HETMEM_FSROOT option, itself "/" by
 *  default. -ENOENT or -ENOTDIR when the root is not a readable directory,
 *  -EINVAL when a HETMEM_* variable holds a bad value. On failure *out may
 *  still be set, so that hm_ctx_last_error() can say why; release it with
 *  hm_ctx_free() either way. */
HM_API HM_NODISCARD int hm_ctx_new(hm_ctx_t **out, const char *fsroot);
HM_API void hm_ctx_free(hm_ctx_t *ctx);

/** The last error message recorded on ctx ("" when none). */
HM_API const char *hm_ctx_last_error(const hm_ctx_t *ctx);

/** Registers a callback for errors on ctx (NULL removes it). */
HM_API void hm_ctx_set_error_handler(hm_ctx_t *ctx, hm_error_fn *fn, void *arg);

/** The filesystem root this context reads /sys and /proc under. */
HM_API const char *hm_ctx_fsroot(const hm_ctx_t *ctx);

/* ------------------------------------------------------------------------
 * Options: one table; each option NAME is also the environment variable
 * HETMEM_<NAME in upper case>. Sizes accept suffixes (4G, 512MiB, 1.5GB).
 * ------------------------------------------------------------------------ */

/** Parses a size such as "4096", "64K", "512MiB", "4G", "1.5GB".
 *  K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024; kB/MB/GB/TB powers of
 *  1000. -EINVAL on anything else, -ERANGE on overflow. */
HM_API HM_NODISCARD int hm_parse_size(const char *text, uint64_t *out);

/** Current value of option name as text, written to buf (NUL-terminated).
 *  -ENOENT for an unknown name, -ENOSPC when buf is too small. */
HM_API HM_NODISCARD int hm_option_get(const hm_ctx_t *ctx, const char *name, char *buf,
                                      size_t len);

/** Sets option name from text; -EINVAL (with a message) for a bad value. */
HM_API HM_NODISCARD int hm_option_set(hm_ctx_t *ctx, const char *name, const char *value);

/** Numeric value of a size, count or boolean option. */
HM_API HM_NODISCARD int hm_option_get_u64(const hm_ctx_t *ctx, const char *name, uint64_t *out);

/** All options as a JSON array of {name, env, value, default, kind, help,
 *  origin}; *out must be released with hm_free(). */
HM_API HM_NODISCARD int hm_options_json(const hm_ctx_t *ctx, char **out);

/* ------------------------------------------------------------------------
 * Tiers (src/tiers.c)
 * ------------------------------------------------------------------------ */
/* @@TIERS@@ */
/* The tier inventory: every NUMA node that holds (or could hold) memory,
 * classified and ranked fastest first, then the storage tiers. Facts come
 * from sysfs under the context's fsroot (node, HMAT, memory_tiering, dax,
 * the NVIDIA driver's /proc files) and, on the live machine, from hwloc. */

typedef enum hm_tier_kind_e {
  HM_TIER_UNKNOWN = 0,
  HM_TIER_DRAM = 1,
  HM_TIER_HBM = 2,
  HM_TIER_PMEM = 3,    /* NVDIMM (Optane) memory in KMEM-DAX mode */
  HM_TIER_CXL = 4,     /* CXL memory expander */
  HM_TIER_GPU = 5,     /* GPU memory exposed as a NUMA node (Grace Hopper) */
  HM_TIER_STORAGE = 6, /* a directory on a filesystem */
} hm_tier_kind_t;

/** "dram", "hbm", "pmem", "cxl", "gpu", "storage" or "unknown". */
HM_API const char *hm_tier_kind_name(hm_tier_kind_t kind);

/* Where a tier's facts came from (hm_tier_t.sources bits). */
#define HM_TIER_SRC_SYSFS 0x01u          /* /sys/devices/system/node */
#define HM_TIER_SRC_HMAT 0x02u           /* nodeN/access{0,1}/initiators */
#define HM_TIER_SRC_MEMORY_TIERING 0x04u /* /sys/devices/virtual/memory_tiering */
#define HM_TIER_SRC_DAX 0x08u            /* /sys/bus/dax */
#define HM_TIER_SRC_HWLOC 0x10u          /* hwloc memory attributes (live only) */
#define HM_TIER_SRC_STATFS 0x20u         /* statfs of a storage directory */
#define HM_TIER_SRC_NVIDIA 0x40u         /* /proc/driver/nvidia/gpus */
#define HM_TIER_SRC_OVERRIDE 0x80u       /* HETMEM_HBW_NODES or MEMKIND_HBW_NODES */

#define HM_TIER_INFO_VERSION 1
typedef struct hm_tier_s {
  uint32_t size;    /* set by the caller to sizeof(hm_tier_t), for ABI checks */
  uint32_t version; /* set by the library */
  /* Strings stay valid until the next discovery on the context or its free. */
  const char *name; /* "node0", or "storage:/var/tmp" */
  hm_tier_kind_t kind;
  int32_t numa_node; /* -1 for storage */
  uint32_t rank;     /* 0 = fastest; storage after all memory */
  uint32_t sources;  /* HM_TIER_SRC_* bits */
  uint64_t capacity_bytes; /* 0 when unknown */
  uint64_t free_bytes;     /* 0 when unknown */
  uint32_t ncpus;          /* CPUs local to the node (0: CPU-less or storage) */
  int32_t memory_tier;     /* kernel memory_tierN, -1 when unknown */
  /* HMAT-rated figures for the node's best local initiators; 0 = none. */
  uint32_t read_bandwidth_mibs, write_bandwidth_mibs;
  uint32_t read_latency_ns, write_latency_ns;
  const char *path;    /* storage: the directory (resolved); NULL for memory */
  const char *fs_type; /* storage: "ext4", "xfs", ...; NULL for memory */
  int32_t o_direct;    /* storage: 1 if O_DIRECT works, 0 if not; -1 for memory */
} hm_tier_t;

/** Discovers the tiers and keeps them on ctx (replacing any earlier result).
 *  storage_dirs: the storage-tier directories (real paths, not under the
 *  fsroot). NULL with n == 0 means the default: the storage option, else
 *  $TMPDIR, else /var/tmp; a non-NULL array with n == 0 means none.
 *  Errors: -ENOENT when the fsroot holds no /sys/devices/system/node (nor a
 *  /proc/meminfo to fall back on); -ENOENT, -ENOTDIR, -EROFS, -EACCES for an
 *  unusable storage directory (the message names it). Malformed sysfs files
 *  never fail discovery: the affected facts become unknown. */
HM_API HM_NODISCARD int hm_tiers_discover(hm_ctx_t *ctx, const char *const *storage_dirs,
                                          size_t n);

/** Number of tiers found by the last discovery (0 before any). */
HM_API size_t hm_tier_count(const hm_ctx_t *ctx);

/** Tier i in rank order (i == rank). out->size must be set. -ERANGE when i
 *  is out of range, -EINVAL for a bad size. */
HM_API HM_NODISCARD int hm_tier_get(const hm_ctx_t *ctx, size_t i, hm_tier_t *out);

/** Copies up to len CPU numbers of tier i into cpus; returns how many the
 *  tier has (which may exceed len), or -ERANGE. */
HM_API int hm_tier_cpus(const hm_ctx_t *ctx, size_t i, int *cpus, size_t len);

/** Discovers (as hm_tiers_discover) and returns the inventory as JSON
 *  ({"schema_version": 1, "tiers": [...]}, documented in docs/formats.md);
 *  *out must be released with hm_free(). */
HM_API HM_NODISCARD int hm_tiers_json(hm_ctx_t *ctx, const char **storage_dirs, size_t n,
                                      char **out);

/* ------------------------------------------------------------------------
 * NUMA policy of a whole command, as numactl sets it (src/mempolicy/)
 * ------------------------------------------------------------------------ */

/** Resolves a policy without setting it: mode is "membind", "interleave",
 *  "preferred" (one node), "preferred-many" or "weighted-interleave";
 *  nodes uses numactl's syntax ("0,2-3", "all", "!1", "+1": relative to the
 *  nodes this process may use). Nodes must be allowed to this process and
 *  have memory. *out: {"schema_version": 1, "mode", "kernel_mode", "nodes":
 *  [...], "since_linux", "weights" (weighted-interleave: the system's
 *  per-node weights)}, released with hm_free(). -EINVAL with a message in
 *  the context for bad input. */
HM_API HM_NODISCARD int hm_mempolicy_json(hm_ctx_t *ctx, const char *mode, const char *nodes,
                                          char **out);

/** Resolves the policy and sets it for the calling thread with
 *  set_mempolicy(2): children and exec inherit it (call it between fork
 *  and exec). -EOPNOTSUPP when the kernel lacks the mode. */
HM_API HM_NODISCARD int hm_mempolicy_apply(hm_ctx_t *ctx, const char *mode, const char *nodes);

/* ------------------------------------------------------------------------
 * Probe: tier measurements (src/probe/)
 * ------------------------------------------------------------------------ */
/* @@PROBE@@ */
/* Every measurement binds, pins and allocates for itself and releases it all
 * before returning; the calling thread's CPU affinity is restored. Config
 * and result structs carry size and version so that the ABI can grow:
 * set cfg->size/out->size to sizeof the struct you were compiled with. */

#define HM_STREAM_CONFIG_VERSION 1
typedef struct hm_stream_config_s {
  uint32_t size;        /* sizeof(hm_stream_config_t) */
  uint32_t version;     /* HM_STREAM_CONFIG_VERSION */
  int32_t numa_node;    /* node the arrays are bound to (MPOL_BIND); -1: no binding */
  uint32_t threads;     /* 0: every CPU this thread may run on */
  uint64_t array_bytes; /* per array; 0: 4x the last-level cache, at least 8 MiB */
  uint32_t repetitions; /* best of; the first is a warm-up; 0: 10 */
  uint32_t ncpus;       /* thread i is pinned to cpus[i]; 0: the node's CPUs first */
  const int32_t *cpus;
} hm_stream_config_t;

#define HM_STREAM_RESULT_VERSION 1
typedef struct hm_stream_result_s {
  uint32_t size;    /* set by the caller to sizeof(hm_stream_result_t) */
  uint32_t version; /* set by the library */
  uint32_t threads;
  uint32_t repetitions;
  uint64_t array_bytes;
  /* Best rate in 1e9 bytes/s, counted as McCalpin does: copy and scale move
   * 2 arrays, add and triad 3, 8 bytes per element each. */
  double copy_gbs, scale_gbs, add_gbs, triad_gbs;
} hm_stream_result_t;

HM_API void hm_stream_config_default(hm_stream_config_t *cfg);

/** STREAM copy/scale/add/triad on memory bound to cfg->numa_node.
 *  -EINVAL for a bad config or a node that has no memory, -ENOMEM, -EIO if
 *  the arrays do not hold the values the kernels must produce. */
HM_API HM_NODISCARD int hm_probe_stream(hm_ctx_t *ctx, const hm_stream_config_t *cfg,
                                        hm_stream_result_t *out);

#define HM_LATENCY_CONFIG_VERSION 1
typedef struct hm_latency_config_s {
  uint32_t size, version; /* sizeof, HM_LATENCY_CONFIG_VERSION */
  int32_t numa_node;      /* -1: no binding */
  int32_t cpu;            /* CPU the chase runs on; -1: the node's first CPU */
  uint64_t buffer_bytes;  /* 0: 4x the last-level cache, at least 64 MiB */
  uint64_t loads;         /* dependent loads per repetition; 0: 2 million */
  uint32_t repetitions;   /* 0: 5; the result is the minimum of the averages */
  uint32_t small_pages;   /* 1: do not ask for transparent huge pages */
  uint32_t load_threads;  /* threads streaming reads from the same node on other
                             CPUs while the chase runs (loaded latency); 0: idle */
} hm_latency_config_t;

#define HM_LATENCY_RESULT_VERSION 1
typedef struct hm_latency_result_s {
  uint32_t size, version;
  uint64_t buffer_bytes;
  uint64_t loads;
  double ns_per_load; /* latency of one dependent cache-line load */
  uint32_t load_threads;
  double load_gbs;    /* read bandwidth the load threads drew meanwhile, 1e9 B/s */
} hm_latency_result_t;

HM_API void hm_latency_config_default(hm_latency_config_t *cfg);

/** Load latency by a pointer chase over a random cyclic permutation of
 *  cache lines (random within and across pages): idle, or loaded when
 *  cfg->load_threads other threads stream reads meanwhile (-EINVAL when
 *  there are not that many other CPUs). */
HM_API HM_NODISCARD int hm_probe_latency(hm_ctx_t *ctx, const hm_latency_config_t *cfg,
                                         hm_latency_result_t *out);

#define HM_STORAGE_MAX_QD 16
#define HM_STORAGE_NO_RANDOM 1u /* flags: sequential measurements only */
#define HM_STORAGE_NO_WRITE 2u  /* flags: skip timing the sequential write */
#define HM_STORAGE_CHECK_ONLY 4u /* flags: checks, probe file and fallocate only */
#define HM_STORAGE_CONFIG_VERSION 1
typedef struct hm_storage_config_s {
  uint32_t size, version; /* sizeof, HM_STORAGE_CONFIG_VERSION */
  const char *dir;        /* directory on the storage tier */
  uint64_t file_bytes;    /* probe file; 0: 1 GiB */
  uint32_t block_bytes;   /* sequential block, multiple of 4 KiB; 0: 1 MiB */
  uint32_t seq_depth;     /* sequential queue depth; 0: 8 */
  uint32_t seq_passes;    /* sequential read passes (best of); 0: 3 */
  uint32_t nqd;           /* random-read queue depths in qds; 0: 1,2,4,..,32 */
  uint32_t qds[HM_STORAGE_MAX_QD];
  double rand_seconds;    /* per queue depth; 0: 1.0 */
  uint32_t flags;         /* HM_STORAGE_* */
} hm_storage_config_t;

typedef struct hm_randread_point_s {
  uint32_t qd;
  uint64_t ios;
  double iops;
  double lat_us_mean, lat_us_p50, lat_us_p99; /* per 4 KiB read, submit to completion */
} hm_randread_point_t;

#define HM_STORAGE_RESULT_VERSION 1
typedef struct hm_storage_result_s {
  uint32_t size, version;
  uint64_t file_bytes;
  uint32_t block_bytes, seq_depth;
  double seq_read_gbs, seq_write_gbs; /* 1e9 bytes/s, O_DIRECT through io_uring */
  uint32_t nqd;
  hm_randread_point_t randread[HM_STORAGE_MAX_QD];
} hm_storage_result_t;

HM_API void hm_storage_config_default(hm_storage_config_t *cfg);

/** O_DIRECT sequential write and read bandwidth and 4 KiB random-read IOPS
 *  and latency through io_uring, on a probe file that is created (O_EXCL,
 *  0600) and unlinked at once in cfg->dir. Errors: -ENOENT/-ENOTDIR for a
 *  missing directory, -EROFS or -EACCES when it cannot be written, -ENOSPC
 *  when it lacks room for the probe file, -EINVAL when its filesystem does
 *  not do direct I/O (tmpfs and ramfs serve it from memory). */
HM_API HM_NODISCARD int hm_probe_storage(hm_ctx_t *ctx, const hm_storage_config_t *cfg,
                                         hm_storage_result_t *out);

/** Runs one measurement described by a JSON object and returns its result
 *  as JSON (release with hm_free). request: {"test": "stream"|"latency"|
 *  "storage", then the config fields by name (numa_node, threads,
 *  array_bytes, repetitions, cpus: [..]; cpu, buffer_bytes, loads,
 *  small_pages, load_threads; dir, file_bytes, block_bytes, seq_depth, seq_passes,
 *  qds: [..], rand_seconds, random: bool, write: bool, check_only: bool)}. Unknown keys are
 *  -EINVAL. Also {"test": "llc"}: {"llc_bytes": N}. */
HM_API HM_NODISCARD int hm_probe_json(hm_ctx_t *ctx, const char *request, char **out);

/* ------------------------------------------------------------------------
 * Software-defined memory: a userfaultfd pager that keeps a bounded DRAM
 * cache over backing files on a storage tier (src/sdm/).
 *
 * Regions behave like anonymous private memory: zero-filled at first,
 * readable and writable by any thread, and every byte written reads back
 * exactly, whether it is resident or was evicted to the backing file.
 * ------------------------------------------------------------------------ */

typedef struct hm_pager_s hm_pager_t;

typedef enum hm_prefetch_e {
  HM_PREFETCH_AUTO = 0,   /* stream/stride detection with an adaptive window */
  HM_PREFETCH_OFF = 1,    /* fetch only the faulting unit */
  HM_PREFETCH_SEQUENTIAL = 2, /* assume forward streams everywhere */
} hm_prefetch_t;

#define HM_PAGER_CONFIG_VERSION 1
typedef struct hm_pager_config_s {
  uint32_t size;        /* sizeof(hm_pager_config_t), for ABI checks */
  uint32_t version;     /* HM_PAGER_CONFIG_VERSION */
  uint64_t dram_budget; /* hard cap on cache pages plus the pager's buffers, bytes */
  const char *backing_dir; /* storage-tier directory for the backing files */
  uint64_t fetch_unit;  /* bytes: a power of two, 64 KiB..2 MiB */
  hm_prefetch_t prefetch;
  uint32_t io_depth;    /* io_uring queue depth */
  uint32_t handler_threads; /* fault-handling threads; 0 = chosen by the pager */
  uint32_t flags;       /* HM_PAGER_NO_*: kernel features not to use (tests, debugging) */
} hm_pager_config_t;

/* Flags of hm_pager_config_t: force the fallbacks the pager would use on an
 * older kernel. Features are otherwise probed at run time. */
#define HM_PAGER_NO_MINOR 1u    /* anonymous memory + UFFDIO_COPY, not memfd + CONTINUE */
#define HM_PAGER_NO_WP_ASYNC 2u /* synchronous write-protect faults for dirty tracking */
#define HM_PAGER_NO_WP 4u       /* no write-protect: write back every resident unit */
#define HM_PAGER_MEMFD 8u /* memfd + MINOR + UFFDIO_CONTINUE (zero-copy) fills instead of the
                             default anonymous + UFFDIO_COPY (faster here: see pager.c) */
#define HM_PAGER_NO_COPIER 16u /* install prefetch fills on the handler thread itself, not
                                  on a copier thread beside it (option copier=0) */
#define HM_PAGER_PROCESS_BUDGET 32u /* the budget bounds the whole process's anonymous and
                                       shared memory (RssAnon + RssShmem), not only the pager's:
                                       every 100 ms the cache is set to the budget less what the
                                       rest of the process holds (option budget_process=1) */

/** Fills cfg from ctx's options (fast_budget, storage, fetch_unit, prefetch,
 *  io_depth, handler_threads, copier). Callers then change what they need. */
HM_API void hm_pager_config_default(const hm_ctx_t *ctx, hm_pager_config_t *cfg);

/** Opens a pager. Errors (with a message on ctx): -EINVAL for a budget
 *  smaller than one fetch unit or a bad fetch unit, a budget above the
 *  machine's physical memory unless the option budget_over_ram is set
 *  (HETMEM_BUDGET_OVER_RAM=1), or a backing directory on tmpfs; -ENOENT/-ENOTDIR/-EACCES/-EROFS for an unusable backing
 *  directory; -EPERM when userfaultfd is not permitted; -ENOSYS when the
 *  kernel lacks it. ctx must outlive the pager.
 *  Fork: regions are MADV_DONTFORK, so a child process does not inherit them
 *  (touching one there raises SIGSEGV; libhetmem_preload.so first prints a
 *  line saying why) and never reads zeros where the parent had data; the
 *  child must open its own pager (the parent's refuses to map
 *  there, -ECHILD). Signals: handler threads block them, and a faulting
 *  thread that takes one simply retries its access.
 *  I/O errors: a backing-file read or write-back that fails even when
 *  retried ends the process with one line on stderr and SIGBUS (default
 *  action), as a failing mmap'd file would: the data cannot be given back
 *  and the cache cannot be freed, so returning zeros or waiting would be
 *  worse. Opening touches none of the pager's slot table (sized for the
 *  budget, reserved without commit): its memory follows use. */
HM_API HM_NODISCARD int hm_pager_open(hm_ctx_t *ctx, const hm_pager_config_t *cfg,
                                      hm_pager_t **out);

/** Unmaps every region, removes the backing files and frees the pager. */
HM_API int hm_pager_close(hm_pager_t *pager);

/** Maps a region of length bytes (rounded up to the fetch unit). Backing
 *  space is reserved now: -ENOSPC if the storage tier cannot hold it. */
HM_API HM_NODISCARD int hm_pager_map(hm_pager_t *pager, size_t length, void **addr);

/** Maps a region at addr exactly (page-aligned; length a multiple of the
 *  fetch unit), replacing whatever the caller had there: for memory the
 *  program already has at a fixed address, such as its static arrays,
 *  moved aside first and copied back in. -EINVAL when not aligned. */
HM_API HM_NODISCARD int hm_pager_map_at(hm_pager_t *pager, void *addr, size_t length);

/** Unmaps a region returned by hm_pager_map or hm_pager_map_at (addr and
 *  length as mapped). */
HM_API int hm_pager_unmap(hm_pager_t *pager, void *addr, size_t length);

typedef enum hm_advice_e {
  HM_ADVICE_NORMAL = 0,
  HM_ADVICE_WILLNEED = 1,   /* fetch the range now, asynchronously; its resident units
                               are marked used, as a fault on them would */
  HM_ADVICE_SEQUENTIAL = 2, /* expect forward streams: prefetch aggressively */
  HM_ADVICE_RANDOM = 3,     /* expect no pattern: do not prefetch */
  HM_ADVICE_DONTNEED = 4,   /* contents may be discarded (reads return zeros) */
  HM_ADVICE_COLD = 5,       /* not needed soon: the range's resident whole units are the
                               next to be evicted (written back first when dirty); a
                               fault on one before then makes it CLOCK's again */
} hm_advice_t;

/** Advises the pager about a range inside one region. */
HM_API int hm_pager_advise(hm_pager_t *pager, void *addr, size_t length, hm_advice_t advice);

/** Sets the budget (cache pages plus the pager's buffers) from now on, for
 *  a caller that shares its fast budget with memory of its own: at most the
 *  budget the pager was opened with (more is taken as that), and never less
 *  than the pager's own memory plus 4 fetch units. Returns at once: a
 *  handler thread applies it, evicting down to a smaller budget (dirty
 *  units written back first). -EINVAL for 0. */
HM_API int hm_pager_set_budget(hm_pager_t *pager, uint64_t dram_budget);

/** Bytes of the process's anonymous memory that a budget bounding the whole
 *  process (HM_PAGER_PROCESS_BUDGET) leaves out: delta > 0 while the caller
 *  holds such memory for a moment, delta < 0 when it is gone. The preload
 *  interposer leaves out the copy of the blocks it makes for a forked
 *  child, which the child keeps. Cost: one atomic add. */
HM_API int hm_pager_exclude_bytes(hm_pager_t *pager, int64_t delta);

/** Writes dirty resident pages of the range back (addr NULL: every region). */
HM_API int hm_pager_flush(hm_pager_t *pager, void *addr, size_t length);

#define HM_PAGER_STATS_VERSION 8
typedef struct hm_pager_stats_s {
  uint32_t size;    /* set by the caller to sizeof(hm_pager_stats_t) */
  uint32_t version; /* set by the pager */
  uint64_t faults;  /* fault events handled */
  uint64_t fetches; /* fetch units read for faults (demand misses) */
  uint64_t prefetch_issued;
  uint64_t prefetch_used;   /* prefetched units touched before eviction */
  uint64_t prefetch_wasted; /* prefetched units evicted untouched */
  uint64_t evictions;       /* units evicted */
  uint64_t writebacks;      /* dirty units written back */
  uint64_t bytes_read;
  uint64_t bytes_written;
  uint64_t resident_bytes;
  uint64_t peak_resident_bytes;
  uint64_t fault_ns;        /* total time threads waited in faults */
  uint64_t zero_fills;      /* units filled with zeros without I/O (never written back) */
  uint64_t minor_hits;      /* faults on data already in DRAM (prefetched, or a race) */
  uint64_t wp_faults;       /* synchronous write-protect faults (first write to a unit) */
  uint64_t io_errors;       /* backing I/O that failed even when retried */
  uint64_t own_bytes;       /* the pager's own memory charged to the budget */
  uint64_t budget_bytes;    /* the configured budget */
  uint64_t readahead_triggers; /* anonymous mode: held-back trigger pages a stream reached */
  uint64_t successor_prefetches; /* a stream reached a region's end and the region that
                                    followed it last time was requested at once */
  /* Version 2: */
  uint64_t demand_bytes_read; /* of bytes_read, what demand fetches read (a thread waited) */
  uint64_t footprint_bytes;   /* the most data touched at once: fetch units of live regions
                                 filled at least once, in bytes (peak); bytes_read /
                                 footprint_bytes is how many times it was read back */
  /* Version 3: */
  uint64_t resweep_refills; /* units read again soon after being evicted as left behind
                               by a stream: the span it sweeps again is then kept */
  /* Version 4: */
  uint64_t budget_mean_bytes; /* the budget's mean over the pager's life (it changes with
                                 hm_pager_set_budget; else budget_bytes) */
  uint64_t budget_low_bytes;  /* the lowest budget applied */
  /* Version 5: */
  uint64_t other_peak_bytes; /* HM_PAGER_PROCESS_BUDGET: the most memory the rest of the
                                process held (its anonymous and shared memory less the
                                pager's); 0 without that flag */
  /* Version 6: */
  uint64_t evict_ahead;      /* eviction batches started before a fault needed the room
                                (less than a batch was free) */
  uint64_t writeback_stalls; /* eviction batches whose write-backs a fault or a prefetch
                                waited for: the budget was spent before they ended */
  /* Version 7: */
  uint64_t sparse_spells; /* times a region was found swept sparsely (a few pages of every
                             unit, the same ones pass after pass) and filled page by page */
  /* Version 8: */
  uint64_t page_aheads;   /* pages read ahead along a thread's stride in such a region */
  uint64_t trimmed_pages; /* pages dropped from units of such a region that stayed (those
                             filled before the clock hand's last pass) */
} hm_pager_stats_t;

/** Copies the counters into *out (out->size must be set). */
HM_API int hm_pager_stats(hm_pager_t *pager, hm_pager_stats_t *out);

/** The counters and the configuration as a JSON object; release with hm_free. */
HM_API HM_NODISCARD int hm_pager_stats_json(hm_pager_t *pager, char **out);

/* ------------------------------------------------------------------------
 * Symbolization: allocation-site frames to source (src/symbolize/, libdw)
 * ------------------------------------------------------------------------ */
/* A frame is (module, offset): offset is an address minus the module's load
 * bias (its link-time virtual address), as profiles record it. Offline
 * only: libdw is part of libhetmem, never of the preload interposer. */

/** The GNU build-id of the ELF file at path as lower-case hex ("" when it
 *  has none); release *hex_out with hm_free. -ENOENT/-EACCES for an
 *  unreadable file, -ENOEXEC when it is not ELF. */
HM_API HM_NODISCARD int hm_module_build_id(hm_ctx_t *ctx, const char *path, char **hex_out);

/** Symbolizes n offsets of one module from its DWARF (or, without DWARF,
 *  its symbol table). The module is the file at module_path when its
 *  build-id equals build_id (lower-case hex; NULL or "" skips the check),
 *  else /usr/lib/debug/.build-id/xx/yyyy.debug. *json_out (release with
 *  hm_free): {"path": file read, "build_id", "verified": bool, "dwarf":
 *  bool, "frames": [{"offset", "function" (null if unknown),
 *  "function_offset", "file" (null if unknown), "line", "column"}]}; a
 *  frame in code the compiler inlined gives file/line of the outermost
 *  inlined call (in "function" itself), "inlined_file"/"inlined_line" (the
 *  line table's place) and "inlined": [{"function" (linkage name where
 *  there is one), "file", "line"}], the inlined functions innermost first,
 *  each at the place in it of the call below it. The
 *  offsets are looked up exactly as given (pass a return address minus 1
 *  to get the call's line). Errors: -ESTALE when the file at module_path
 *  has another build-id and no debug file matches, -ENOENT when neither
 *  exists, -ENOEXEC for a file libdw cannot read, -EINVAL for bad
 *  arguments. */
HM_API HM_NODISCARD int hm_symbolize(hm_ctx_t *ctx, const char *module_path,
                                     const char *build_id, const uint64_t *offsets, size_t n,
                                     char **json_out);

/* ------------------------------------------------------------------------
 * Workflow channel: versioned objects streamed from writer ranks to reader
 * ranks through a memory or storage tier (src/channel/).
 *
 * A channel is one shared segment (a file another process opens by name)
 * holding `slots` steps in flight. Writers put (key, step) objects and then
 * commit the step; a step becomes visible to readers only once every writer
 * rank committed it, so a reader never sees part of one. Each reader rank
 * waits for a step, gets objects (a zero-copy view or a copy) and releases
 * the step; its space is reused once every reader released it. Lookup is by
 * hash: its cost does not depend on the number of objects in the step.
 * Peers that die are detected (robust process-shared mutexes): the other
 * side gets -EPIPE, never a hang. A handle is used by one thread at a time;
 * the thread that opened it must outlive its use (its liveness lock is what
 * tells peers that the process is alive).
 * ------------------------------------------------------------------------ */
/* @@CHANNEL@@ */

typedef struct hm_chan_s hm_chan_t;

typedef enum hm_chan_policy_e {
  HM_CHAN_BLOCK = 0,   /* queue full: the writer waits for readers to release */
  HM_CHAN_DISCARD = 1, /* queue full: drop the oldest committed step no reader holds */
} hm_chan_policy_t;

typedef enum hm_chan_role_e {
  HM_CHAN_WRITER = 1,
  HM_CHAN_READER = 2,
} hm_chan_role_t;

#define HM_CHAN_KEY_MAX 63 /* bytes of a key, NUL excluded */
#define HM_CHAN_MAX_RANKS 64

#define HM_CHAN_CONFIG_VERSION 1
typedef struct hm_chan_config_s {
  uint32_t size, version; /* sizeof(hm_chan_config_t), HM_CHAN_CONFIG_VERSION */
  /* Where the segment lives: "dram" (shared memory in /dev/shm), "node:N"
   * (shared memory whose pages are bound to NUMA node N with mbind),
   * "file:DIR" (a file in DIR on a storage tier) or "dax:DIR" (a file on a
   * DAX/PMem filesystem, mapped with MAP_SYNC where the kernel allows). */
  const char *tier;
  const char *name;      /* [A-Za-z0-9._-]{1,64}: peers open the channel by it */
  uint32_t slots;        /* steps in flight (queue limit); 0: 2 */
  uint32_t writers;      /* writer ranks that must commit each step; 0: 1 */
  uint32_t readers;      /* reader ranks that must release each step; 0: 1 */
  hm_chan_policy_t policy;
  uint64_t slot_bytes;   /* data bytes one step may hold; 0: 64 MiB */
  uint64_t max_objects;  /* objects one step may hold; 0: 4096 */
  int32_t timeout_ms;    /* blocking put/commit limit; 0: 30000; <0: none */
  uint32_t replace;      /* 1: replace an existing segment of that name */
} hm_chan_config_t;

HM_API void hm_chan_config_default(hm_chan_config_t *cfg);

/** Creates the segment (it then persists until hm_chan_unlink). Errors:
 *  -EINVAL for a bad config (message names the field), -EEXIST when the
 *  name is taken and replace is 0, -ENOSPC when the tier cannot hold the
 *  header and index, -ENOENT/-EACCES for an unusable directory. Data space
 *  is allocated as steps fill, so a full tier shows up in hm_chan_put. */
HM_API HM_NODISCARD int hm_chan_create(hm_ctx_t *ctx, const hm_chan_config_t *cfg);

/** Removes the segment of (tier, name); handles still open keep working. */
HM_API int hm_chan_unlink(hm_ctx_t *ctx, const char *tier, const char *name);

/** The segment's file path for (tier, name), written to buf. */
HM_API HM_NODISCARD int hm_chan_path(const char *tier, const char *name, char *buf, size_t len);

/** Opens an existing channel as a writer or reader rank (rank < 0: the
 *  first free one). -ENOENT when it does not exist, -EBUSY when the rank is
 *  held by a live process, -EINVAL for a bad rank, -EPROTO for a segment
 *  that is not a channel of this version. ctx must outlive the handle. */
HM_API HM_NODISCARD int hm_chan_open(hm_ctx_t *ctx, const char *tier, const char *name,
                                     hm_chan_role_t role, int rank, hm_chan_t **out);

/** Closes the handle; a writer that closes is done (readers waiting beyond
 *  its last step get -ENODATA once every writer closed). */
HM_API int hm_chan_close(hm_chan_t *ch);

HM_API int hm_chan_rank(const hm_chan_t *ch);

/** Sets this handle's blocking limit in ms (<0: none). */
HM_API void hm_chan_set_timeout(hm_chan_t *ch, int timeout_ms);

/** Writer: copies len bytes under key into step. Steps increase; the first
 *  put of a new step takes a free slot (blocking or discarding as the
 *  policy says when none is free). -EEXIST for a key already in the step,
 *  -E2BIG when the step would exceed slot_bytes or max_objects, -ENOSPC
 *  when the storage tier is full (steps already committed stay readable),
 *  -ETIMEDOUT when the queue stayed full, -EPIPE when a reader died while
 *  the queue was full, -EINVAL for a step that is already committed. */
HM_API HM_NODISCARD int hm_chan_put(hm_chan_t *ch, const char *key, uint64_t step,
                                    const void *buf, size_t len);

/** Writer: like hm_chan_put but returns the object's space in the channel
 *  (64-byte aligned) for the caller to fill before committing: zero copy. */
HM_API HM_NODISCARD int hm_chan_put_alloc(hm_chan_t *ch, const char *key, uint64_t step,
                                          size_t len, void **ptr);

/** Writer: this rank is done with step. The step is published when every
 *  writer rank has committed it. */
HM_API HM_NODISCARD int hm_chan_commit(hm_chan_t *ch, uint64_t step);

/** Reader: waits up to timeout_ms (<0: forever) until step is committed
 *  and holds it. -ETIMEDOUT, -EPIPE when a writer died before committing
 *  it, -ENODATA when every writer closed without it (end of stream),
 *  -ENOENT when the step is gone (discarded, or released by this rank). */
HM_API HM_NODISCARD int hm_chan_wait(hm_chan_t *ch, uint64_t step, int timeout_ms);

/** Reader: the newest committed step this rank may still read, or -ENOENT. */
HM_API HM_NODISCARD int hm_chan_latest(hm_chan_t *ch, uint64_t *step);

/** Reader: a read-only view of key in a held step, valid until release.
 *  -ENOENT for a missing key, -EINVAL when the step is not held. */
HM_API HM_NODISCARD int hm_chan_get(hm_chan_t *ch, const char *key, uint64_t step,
                                    const void **ptr, size_t *len);

/** Reader: copies key into buf (cap bytes); *len gets its length.
 *  -ENOBUFS (with *len set) when buf is too small. */
HM_API HM_NODISCARD int hm_chan_get_copy(hm_chan_t *ch, const char *key, uint64_t step,
                                         void *buf, size_t cap, size_t *len);

/** Writer: count puts in one call (what a binding pays per call is paid
 *  once). keys: count NUL-terminated keys packed one after another; object
 *  i is lens[i] bytes at base + offs[i]. Stops at the first error, with
 *  hm_chan_put's codes; *done (may be NULL) gets how many went in. */
HM_API HM_NODISCARD int hm_chan_put_many(hm_chan_t *ch, uint64_t step, const char *keys,
                                         size_t count, const void *base, const uint64_t *offs,
                                         const uint64_t *lens, size_t *done);

/** Reader: count gets in one call (keys packed as in hm_chan_put_many):
 *  read-only views ptrs[i] of lens[i] bytes, valid until release. */
HM_API HM_NODISCARD int hm_chan_get_many(hm_chan_t *ch, uint64_t step, const char *keys,
                                         size_t count, const void **ptrs, uint64_t *lens);

/** Reader: gathers count objects into buf one after another (object i at
 *  the sum of lens[0..i-1]); -ENOBUFS when they exceed cap bytes. */
HM_API HM_NODISCARD int hm_chan_get_many_copy(hm_chan_t *ch, uint64_t step, const char *keys,
                                              size_t count, void *buf, size_t cap,
                                              uint64_t *lens);

/** Reader: this rank is done with step; its views become invalid. */
HM_API HM_NODISCARD int hm_chan_release(hm_chan_t *ch, uint64_t step);

/** Counters and layout of the channel as JSON; release with hm_free. */
HM_API HM_NODISCARD int hm_chan_info_json(hm_chan_t *ch, char **out);

/** Measures the channel in this process and returns JSON (release with
 *  hm_free): streams writer threads each put `objects` objects of
 *  object_bytes into their own channel on tier, steps times, and as many
 *  reader threads get them (a view, then a copy); mix: 0 runs the writers'
 *  and readers' phases one after the other, 1 runs them at the same time.
 *  Result: put/get ns per object, put/get GB/s and memcpy GB/s of the same
 *  bytes (documented in docs/formats.md). */
HM_API HM_NODISCARD int hm_chan_bench_json(hm_ctx_t *ctx, const char *tier, uint64_t objects,
                                           uint64_t object_bytes, uint32_t steps,
                                           uint32_t streams, int mix, char **out);

#ifdef __cplusplus
}
#endif

#endif /* HETMEM_H */
