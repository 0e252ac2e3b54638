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

/* ------------------------------------------------------------------------
 * Probe: tier measurements (src/probe/)
 * ------------------------------------------------------------------------ */
/* @@PROBE@@ */

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
} hm_pager_config_t;

/** Fills cfg from ctx's options (fast_budget, storage, fetch_unit, prefetch,
 *  io_depth). Callers then change what they need. */
HM_API void hm_pager_config_default(const hm_ctx_t *ctx, hm_pager_config_t *cfg);

/** Opens a pager. Errors (with a message on ctx): -EINVAL for a budget
 *  smaller than one fetch unit or a bad fetch unit, -ENOENT/-ENOTDIR/-EACCES/
 *  -EROFS for an unusable backing directory, -EPERM when userfaultfd is not
 *  permitted, -ENOSYS when the kernel lacks it. ctx must outlive the pager. */
HM_API HM_NODISCARD int hm_pager_open(hm_ctx_t *ctx, const hm_pager_config_t *cfg,
                                      hm_pager_t **out);

/** Unmaps every region, removes the backing files and frees the pager. */
HM_API int hm_pager_close(hm_pager_t *pager);

/** Maps a region of length bytes (rounded up to the fetch unit). Backing
 *  space is reserved now: -ENOSPC if the storage tier cannot hold it. */
HM_API HM_NODISCARD int hm_pager_map(hm_pager_t *pager, size_t length, void **addr);

/** Unmaps a region returned by hm_pager_map (addr and length as mapped). */
HM_API int hm_pager_unmap(hm_pager_t *pager, void *addr, size_t length);

typedef enum hm_advice_e {
  HM_ADVICE_NORMAL = 0,
  HM_ADVICE_WILLNEED = 1,   /* fetch the range now, asynchronously */
  HM_ADVICE_SEQUENTIAL = 2, /* expect forward streams: prefetch aggressively */
  HM_ADVICE_RANDOM = 3,     /* expect no pattern: do not prefetch */
  HM_ADVICE_DONTNEED = 4,   /* contents may be discarded (reads return zeros) */
} hm_advice_t;

/** Advises the pager about a range inside one region. */
HM_API int hm_pager_advise(hm_pager_t *pager, void *addr, size_t length, hm_advice_t advice);

/** Writes dirty resident pages of the range back (addr NULL: every region). */
HM_API int hm_pager_flush(hm_pager_t *pager, void *addr, size_t length);

#define HM_PAGER_STATS_VERSION 1
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
} hm_pager_stats_t;

/** Copies the counters into *out (out->size must be set). */
HM_API int hm_pager_stats(hm_pager_t *pager, hm_pager_stats_t *out);

/** The counters and the configuration as a JSON object; release with hm_free. */
HM_API HM_NODISCARD int hm_pager_stats_json(hm_pager_t *pager, char **out);

#ifdef __cplusplus
}
#endif

#endif /* HETMEM_H */
