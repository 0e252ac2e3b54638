/* SPDX-License-Identifier: BSD-3-Clause */
/* The interposer's outputs: the profile (profile mode) and one JSON line of
 * statistics per process (docs/formats.md, "Interposer statistics"), at
 * exit or when a signal stops the run. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "hetmem.h"
#include "internal.h"
#include "preload.h"
#include "prim/prim.h"

/* ------------------------------------------------------------------------
 * Statistics at exit
 * ------------------------------------------------------------------------ */
static void hm__bytes_json(_hm_sb_t *sb, const _hm_pl_pstat_t *ps, size_t nt) {
  _hm_sb_puts(sb, "[");
  for (size_t t = 0; t < nt; t++)
    _hm_sb_printf(sb, "%s%llu", t ? "," : "", (unsigned long long)atomic_load(&ps->bytes[t]));
  _hm_sb_puts(sb, "]");
}

/* Every placement site that allocated: its outcomes. */
static void hm__sites_json(_hm_sb_t *sb, size_t ns, size_t nt) {
  const char *sep = "";
  for (size_t i = 0; i < ns; i++) {
    const _hm_pl_pstat_t *ps = &_hm_pl_ctx.pstat[i + 1];
    if (!atomic_load(&ps->allocs)) continue;
    uint32_t id, tier;
    _hm_pl_place_site(i, &id, &tier);
    _hm_sb_printf(sb, "%s{\"id\":%u,\"tier\":%u,\"allocations\":%llu,\"overflows\":%llu,"
                      "\"split_allocations\":%llu,\"split_bytes\":%llu,\"bytes\":",
                  sep, id, tier, (unsigned long long)atomic_load(&ps->allocs),
                  (unsigned long long)atomic_load(&ps->overflows),
                  (unsigned long long)atomic_load(&ps->splits),
                  (unsigned long long)_hm_pl_place_split(i));
    hm__bytes_json(sb, ps, nt);
    _hm_sb_puts(sb, "}");
    sep = ",";
  }
}

/* Per-site placement outcomes (docs/formats.md, "Interposer statistics"). */
static void hm__placement_json(_hm_sb_t *sb) {
  size_t nt = _hm_pl_place_tiers(), ns = _hm_pl_place_sites();
  uint64_t hits = 0, misses = 0;
  uint32_t matched = 0, loaded = 0;
  _hm_pl_place_cache_counts(&hits, &misses);
  _hm_pl_place_module_counts(&matched, &loaded);
  _hm_sb_printf(sb,
                ",\"placement\":{\"place_mode\":\"%s\",\"pager_budget\":%llu,"
                "\"huge_page_size\":%zu,\"huge_page_bytes\":%llu,"
                "\"match_cache\":{\"hits\":%llu,\"misses\":%llu},"
                "\"modules\":{\"loaded\":%u,\"matched\":%u},"
                "\"auto_fast\":{\"min\":%llu,\"max\":%llu},\"tiers\":[",
                _hm_pl_ctx.hybrid ? "hybrid" : "flat", (unsigned long long)_hm_pl_ctx.pager_budget,
                _hm_pl_ctx.huge, (unsigned long long)atomic_load(&_hm_pl_ctx.huge_bytes),
                (unsigned long long)hits, (unsigned long long)misses, loaded, matched,
                (unsigned long long)_hm_pl_ctx.auto_min, (unsigned long long)_hm_pl_ctx.auto_max);
  for (size_t t = 0; t < nt; t++) {
    const _hm_pl_tier_t *ti = _hm_pl_place_tier(t);
    _hm_sb_printf(sb,
                  "%s{\"index\":%zu,\"kind\":\"%s\",\"numa_node\":%d,\"capacity\":%llu,"
                  "\"served_by\":\"%s\",\"allocations\":%llu,\"live_bytes\":%llu,"
                  "\"peak_bytes\":%llu}",
                  t ? "," : "", t, ti->kind, ti->numa, (unsigned long long)_hm_pl_tier_cap((int)t),
                  (int)t == _hm_pl_ctx.glibc_tier ? "glibc" : ti->numa >= 0 ? "mbind" : "pager",
                  (unsigned long long)atomic_load(&_hm_pl_ctx.tier_allocs[t]),
                  (unsigned long long)atomic_load(&_hm_pl_ctx.tier_live[t]),
                  (unsigned long long)atomic_load(&_hm_pl_ctx.tier_peak[t]));
  }
  _hm_sb_puts(sb, "],\"unmatched\":{\"allocations\":");
  _hm_sb_printf(sb, "%llu,\"overflows\":%llu,\"bytes\":",
                (unsigned long long)atomic_load(&_hm_pl_ctx.pstat[0].allocs),
                (unsigned long long)atomic_load(&_hm_pl_ctx.pstat[0].overflows));
  hm__bytes_json(sb, &_hm_pl_ctx.pstat[0], nt);
  _hm_sb_puts(sb, "},\"sites\":[");
  hm__sites_json(sb, ns, nt);
  _hm_sb_puts(sb, "]}");
}

static void hm__stats_json(_hm_sb_t *sb) {
  char exe[HM_PATH_MAX];
  if (_hm_prim_self_exe(exe, sizeof exe) < 0) exe[0] = 0;
  uint64_t small = atomic_load(&_hm_pl_ctx.small_exited) + _hm_pl_tls.small;
  _hm_sb_printf(sb,
                "{\"schema_version\":1,\"pid\":%ld,\"ppid\":%ld,\"stopped_by_signal\":%d,"
                "\"exe\":",
                (long)_hm_prim_pid(), (long)_hm_prim_ppid(), _hm_pl_term_signal());
  _hm_sb_json_str(sb, exe);
  _hm_sb_printf(sb,
                ",\"threshold\":%zu,\"budget\":%llu,\"interposer\":{"
                "\"large_allocations\":%llu,\"large_frees\":%llu,\"large_bytes\":%llu,"
                "\"live_large_bytes\":%llu,\"peak_live_large_bytes\":%llu,"
                "\"mmap_allocations\":%llu,\"fallbacks\":%llu,\"realloc_moves\":%llu,"
                "\"small_allocations\":%llu,\"fork_copies\":%llu,\"fork_copied_bytes\":%llu,"
                "\"fork_copy_largest_bytes\":%llu,\"forks_without_copy\":%llu,"
                "\"direct_reads_bounced\":%llu,\"direct_bytes_bounced\":%llu,"
                "\"table_capacity\":%zu,\"hooks\":[",
                _hm_pl_thr(), (unsigned long long)_hm_pl_ctx.budget,
                (unsigned long long)atomic_load(&_hm_pl_ctx.large_allocs),
                (unsigned long long)atomic_load(&_hm_pl_ctx.large_frees),
                (unsigned long long)atomic_load(&_hm_pl_ctx.large_bytes),
                (unsigned long long)atomic_load(&_hm_pl_ctx.live_bytes),
                (unsigned long long)atomic_load(&_hm_pl_ctx.peak_live_bytes),
                (unsigned long long)atomic_load(&_hm_pl_ctx.mmap_allocs),
                (unsigned long long)atomic_load(&_hm_pl_ctx.fallbacks),
                (unsigned long long)atomic_load(&_hm_pl_ctx.realloc_moves), (unsigned long long)small,
                (unsigned long long)_hm_pl_ctx.fork_copies,
                (unsigned long long)_hm_pl_ctx.fork_copied_bytes,
                (unsigned long long)_hm_pl_ctx.fork_largest,
                (unsigned long long)_hm_pl_ctx.forks_uncopied,
                (unsigned long long)atomic_load(&_hm_pl_ctx.dio_reads),
                (unsigned long long)atomic_load(&_hm_pl_ctx.dio_bytes), _hm_pl_table_capacity());
  const char *sep = "";
#define HM__NAME(ret, name, params) _hm_sb_printf(sb, "%s\"" #name "\"", sep), sep = ",";
  HM_PL_HOOKS(HM__NAME)
#undef HM__NAME
  _hm_sb_puts(sb, "]}");
  _hm_sb_printf(sb, ",\"mode\":\"%s\"", _hm_pl_mode_names[_hm_pl_ctx.mode]);
  _hm_pl_full_json(sb);
  _hm_pl_statics_json(sb);
  _hm_pl_heap_json(sb);
  if (_hm_pl_ctx.mode == HM_PL_M_PLACE) hm__placement_json(sb);
  _hm_sb_puts(sb, ",\"pager\":");
  char *pj = NULL;
  if (atomic_load(&_hm_pl_ctx.state) == HM_PL_READY && _hm_pl_ctx.pager && hm_pager_stats_json &&
      hm_pager_stats_json(_hm_pl_ctx.pager, &pj) == 0 && pj) {
    _hm_sb_puts(sb, pj);
    hm_free(pj);
  } else {
    _hm_sb_puts(sb, "null");
  }
  _hm_sb_puts(sb, "}\n");
}

/* Writes the profile (profile mode) and appends one JSON line of statistics
 * per process (a command's children inherit the setting, and each process
 * has its own pager): O_APPEND with a single write keeps concurrent
 * writers' lines whole, and never through a symbolic link (outfile.c).
 * Once per process: at exit, or on the finisher
 * thread of a run stopped by a signal (term.c); a second caller waits for
 * the first rather than let the process end mid-write. The pager is
 * deliberately not closed: other destructors may still touch large blocks,
 * and the kernel reclaims everything (backing files were unlinked at
 * creation). */
void _hm_pl_outputs(void) {
  static _Atomic int state; /* 0 not yet, 1 being written, 2 written */
  int was = 0;
  if (!atomic_compare_exchange_strong(&state, &was, 1)) {
    for (int i = 0; i < 10000 && atomic_load(&state) != 2; i++) {
      _hm_prim_sleep_ns(1000000);
    }
    return;
  }
  int saved = errno;
  _hm_pl_tls.guard++;
  if (_hm_pl_ctx.mode == HM_PL_M_PROFILE) _hm_pl_prof_finish();
  if (_hm_pl_ctx.stats_path[0]) {
    _hm_sb_t sb;
    _hm_sb_init(&sb);
    hm__stats_json(&sb);
    char *text = NULL;
    if (_hm_sb_take(&sb, &text) == 0 && text) {
      char why[256], msg[HM_PATH_MAX + 320];
      if (_hm_pl_out_append(_hm_pl_ctx.stats_path, text, why, sizeof why) != 0) {
        snprintf(msg, sizeof msg, "warning: statistics not written to '%s': %s",
                 _hm_pl_ctx.stats_path, why);
        _hm_pl_say(msg);
      }
      hm_free(text);
    }
  }
  _hm_pl_tls.guard--;
  atomic_store(&state, 2);
  errno = saved;
}

__attribute__((destructor)) static void hm__dtor(void) {
  if (_hm_pl_ctx.prep_rc || !_hm_pl_ctx.ctx) return;
  _hm_pl_outputs();
}
