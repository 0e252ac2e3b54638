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

/* @@HETMEM_SECTIONS@@ later sections (tiers, probe, sdm, placement) follow. */

#ifdef __cplusplus
}
#endif

#endif /* HETMEM_H */
