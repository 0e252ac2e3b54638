/* SPDX-License-Identifier: BSD-3-Clause */
/* Statistics: hm_pager_stats (counters read with relaxed loads, the
 * budget figures under the pager lock) and hm_pager_stats_json, which adds
 * the region lengths read back most (read_back). */
#include <errno.h>

#include "sdm/pager_int.h"

static const char *const hm__dirty_names[] = {"wp_async", "wp_sync", "all"};

/* A length with no entry takes a free one, or that of the length read
 * least, whose bytes it inherits and marks as such (Metwally's space-saving
 * count): a length read most keeps an entry even when its blocks are many
 * and each read little (LAMMPS's neighbour list, 155 blocks of 512 KiB, 28
 * MB each: with a plain "replace the least if larger" 16 of them were
 * counted). Its bytes less the inherited ones are a lower bound, exact
 * while nothing was inherited. Cost: O(n), once per region unmapped. */
void _hm_sdm_rsize_add(_hm_sdm_rsize_t *t, size_t n, uint64_t len, uint64_t blocks,
                       uint64_t bytes) {
  if (bytes == 0) return;
  size_t least = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].len == len) {
      t[i].blocks += blocks;
      t[i].bytes += bytes;
      return;
    }
    if (t[i].bytes < t[least].bytes) least = i;
  }
  uint64_t had = t[least].bytes;
  t[least] = (_hm_sdm_rsize_t){len, blocks, had + bytes, had};
}

/* The table of unmapped regions with the live ones added (pager lock). */
static void hm__rsizes(hm_pager_t *p, _hm_sdm_rsize_t *t) {
  memcpy(t, p->rsizes, sizeof p->rsizes);
  for (size_t i = 0; i < p->nregs; i++)
    _hm_sdm_rsize_add(t, HM_SDM_READ_SIZES, p->regs[i]->len, 1, p->regs[i]->bytes_read);
}

/* "read_back": the HM__READ_BACK_SHOWN lengths read most, most first. */
#define HM__READ_BACK_SHOWN 8
static void hm__rsizes_json(hm_pager_t *p, _hm_sb_t *sb) {
  _hm_sdm_rsize_t t[HM_SDM_READ_SIZES];
  pthread_mutex_lock(&p->lk);
  hm__rsizes(p, t);
  pthread_mutex_unlock(&p->lk);
  _hm_sb_printf(sb, ", \"read_back\": [");
  for (size_t k = 0; k < HM__READ_BACK_SHOWN; k++) {
    size_t top = k;
    for (size_t i = k + 1; i < HM_SDM_READ_SIZES; i++)
      if (t[i].bytes - t[i].over > t[top].bytes - t[top].over) top = i;
    _hm_sdm_rsize_t e = t[top];
    t[top] = t[k];
    if (e.bytes == e.over) break;
    _hm_sb_printf(sb, "%s{\"block_bytes\": %llu, \"blocks\": %llu, \"bytes_read\": %llu}",
                  k ? ", " : "", (unsigned long long)e.len, (unsigned long long)e.blocks,
                  (unsigned long long)(e.bytes - e.over));
  }
  _hm_sb_printf(sb, "]");
}

int hm_pager_stats(hm_pager_t *p, hm_pager_stats_t *out) {
  if (!p || !out || out->size < offsetof(hm_pager_stats_t, fault_ns) + sizeof(uint64_t))
    return -EINVAL;
  hm_pager_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
  s.version = HM_PAGER_STATS_VERSION;
  s.faults = HM_SDM_GET(p, c_faults);
  s.fetches = HM_SDM_GET(p, c_fetches);
  s.prefetch_issued = HM_SDM_GET(p, c_pf_issued);
  s.prefetch_used = HM_SDM_GET(p, c_pf_used);
  s.prefetch_wasted = HM_SDM_GET(p, c_pf_wasted);
  s.evictions = HM_SDM_GET(p, c_evictions);
  s.writebacks = HM_SDM_GET(p, c_writebacks);
  s.bytes_read = HM_SDM_GET(p, c_bytes_read);
  s.bytes_written = HM_SDM_GET(p, c_bytes_written);
  s.fault_ns = HM_SDM_GET(p, c_fault_ns);
  s.zero_fills = HM_SDM_GET(p, c_zero_fills);
  s.minor_hits = HM_SDM_GET(p, c_minor_hits);
  s.wp_faults = HM_SDM_GET(p, c_wp_faults);
  s.io_errors = HM_SDM_GET(p, c_io_errors);
  s.readahead_triggers = HM_SDM_GET(p, c_ra_triggers);
  s.successor_prefetches = HM_SDM_GET(p, c_pf_succ);
  s.demand_bytes_read = HM_SDM_GET(p, c_demand_bytes);
  s.resweep_refills = HM_SDM_GET(p, c_resweep_refills);
  s.evict_ahead = HM_SDM_GET(p, c_ev_ahead);
  s.writeback_stalls = HM_SDM_GET(p, c_wb_stalls);
  s.sparse_spells = HM_SDM_GET(p, c_sparse);
  s.page_aheads = HM_SDM_GET(p, c_page_ahead);
  s.trimmed_pages = HM_SDM_GET(p, c_trimmed);
  pthread_mutex_lock(&p->lk);
  s.resident_bytes = p->resident;
  s.peak_resident_bytes = p->peak;
  s.own_bytes = p->own;
  s.budget_bytes = p->cfg.dram_budget;
  s.footprint_bytes = p->seen_peak;
  _hm_sdm_budget_figures(p, &s.budget_mean_bytes, &s.budget_low_bytes);
  s.other_peak_bytes = p->other_peak;
  pthread_mutex_unlock(&p->lk);
  memcpy(out, &s, s.size);
  return 0;
}

int hm_pager_stats_json(hm_pager_t *p, char **out) {
  if (!p || !out) return -EINVAL;
  hm_pager_stats_t s;
  s.size = sizeof s;
  int rc = hm_pager_stats(p, &s);
  if (rc) return rc;
  static const char *const pf_names[] = {"auto", "off", "sequential"};
  _hm_sb_t sb;
  _hm_sb_init(&sb);
  _hm_sb_printf(&sb, "{\"schema_version\": 1, \"config\": {\"dram_budget\": %llu, \"backing_dir\": ",
                (unsigned long long)p->cfg.dram_budget);
  _hm_sb_json_str(&sb, p->dir);
  _hm_sb_printf(&sb,
                ", \"fetch_unit\": %llu, \"prefetch\": \"%s\", \"io_depth\": %u, "
                "\"handler_threads\": %u, \"flags\": %u, \"read_max_bytes\": %llu, "
                "\"reads_in_flight_max\": %u}, ",
                (unsigned long long)p->unit, pf_names[p->cfg.prefetch], p->cfg.io_depth,
                p->cfg.handler_threads, p->cfg.flags, (unsigned long long)_hm_sdm_read_units(p) * p->unit,
                p->nh * p->h[0].nops);
  _hm_sb_printf(&sb,
                "\"features\": {\"fill\": \"%s\", \"dirty_tracking\": \"%s\", "
                "\"uffd_features\": %llu, \"copier\": %s}, ",
                p->memfd_mode ? "memfd_minor_continue" : "anon_copy",
                hm__dirty_names[p->dirty_mode], (unsigned long long)p->features,
                p->h[0].copier ? "true" : "false");
  _hm_sb_printf(
      &sb,
      "\"counters\": {\"faults\": %llu, \"fetches\": %llu, \"prefetch_issued\": %llu, "
      "\"prefetch_used\": %llu, \"prefetch_wasted\": %llu, \"evictions\": %llu, "
      "\"writebacks\": %llu, \"bytes_read\": %llu, \"bytes_written\": %llu, "
      "\"resident_bytes\": %llu, \"peak_resident_bytes\": %llu, \"fault_ns\": %llu, "
      "\"zero_fills\": %llu, \"minor_hits\": %llu, \"wp_faults\": %llu, \"io_errors\": %llu, "
      "\"own_bytes\": %llu, \"readahead_triggers\": %llu, \"successor_prefetches\": %llu, "
      "\"demand_bytes_read\": %llu, \"footprint_bytes\": %llu, \"resweep_refills\": %llu, "
      "\"budget_mean_bytes\": %llu, \"budget_low_bytes\": %llu, \"other_peak_bytes\": %llu, "
      "\"evict_ahead\": %llu, \"writeback_stalls\": %llu, \"sparse_spells\": %llu, "
      "\"page_aheads\": %llu, \"trimmed_pages\": %llu}",
      (unsigned long long)s.faults, (unsigned long long)s.fetches,
      (unsigned long long)s.prefetch_issued, (unsigned long long)s.prefetch_used,
      (unsigned long long)s.prefetch_wasted, (unsigned long long)s.evictions,
      (unsigned long long)s.writebacks, (unsigned long long)s.bytes_read,
      (unsigned long long)s.bytes_written, (unsigned long long)s.resident_bytes,
      (unsigned long long)s.peak_resident_bytes, (unsigned long long)s.fault_ns,
      (unsigned long long)s.zero_fills, (unsigned long long)s.minor_hits,
      (unsigned long long)s.wp_faults, (unsigned long long)s.io_errors,
      (unsigned long long)s.own_bytes, (unsigned long long)s.readahead_triggers,
      (unsigned long long)s.successor_prefetches, (unsigned long long)s.demand_bytes_read,
      (unsigned long long)s.footprint_bytes, (unsigned long long)s.resweep_refills,
      (unsigned long long)s.budget_mean_bytes, (unsigned long long)s.budget_low_bytes,
      (unsigned long long)s.other_peak_bytes, (unsigned long long)s.evict_ahead,
      (unsigned long long)s.writeback_stalls, (unsigned long long)s.sparse_spells,
      (unsigned long long)s.page_aheads, (unsigned long long)s.trimmed_pages);
  hm__rsizes_json(p, &sb);
  _hm_sb_printf(&sb, "}");
  return _hm_sb_take(&sb, out);
}
