/* SPDX-License-Identifier: BSD-3-Clause */
/* Precise-address PMU samplers through perf_event_open(2): Intel PEBS
 * (mem-loads with a load-latency threshold, mem-stores), AMD IBS op and Arm
 * SPE. Events are described by the kernel's sysfs (devices/PMU/type, its
 * events/ and format/ directories), never by hard-coded model numbers, so
 * any processor whose kernel exports mem-loads works.
 *
 * Events are opened per CPU for this process with inherit set (the kernel
 * refuses mmap of an inherited per-task event on cpu -1), so the threads
 * the program creates later are sampled into the same buffers; the
 * profiler's thread reads every buffer each period (no wake-ups: the
 * events have no watermark), skips samples of other processes (forked
 * children write into inherited events too) and credits each sampled data
 * address to the live block holding it. Cost to the program: the PMU
 * interrupt per sample (period memory operations apart); nothing on any
 * hook. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "prim/prim.h"
#include "sampler.h"

/* Buffer sizes keep an unprivileged user inside perf_event_mlock_kb (516
 * KiB per CPU by default): two rings of 1 + 32 pages (PEBS loads and
 * stores), or one ring plus a 64-page AUX area (SPE), per CPU. At 48 bytes
 * a sample, a ring holds ~2700 samples: 50 ms of one core's loads at the
 * default period, drained every 10 ms. */
#define HM__RING_PAGES 32u    /* data pages per buffer (a power of two) */
#define HM__AUX_PAGES 64u     /* SPE AUX area pages (a power of two) */
#define HM__MAX_CPUS 1024
#define HM__LDLAT 3           /* cycles: every load the PMU can tag, not only misses */
#define HM__PEBS_PERIOD 20011 /* prime: no aliasing with loop strides */
#define HM__OP_PERIOD 65536   /* IBS and SPE: operations between tagged ones */

typedef struct hm__buf_s {
  int fd;
  int store;           /* default op of its samples: 0 loads, 1 stores, -1 from the sample */
  void *base;          /* user page + data */
  size_t len;
  uint8_t *aux;        /* SPE */
  size_t aux_len;
} hm__buf_t;

struct _hm_smp_perf_s {
  _hm_smp_kind_t kind;
  struct perf_event_attr attr[2]; /* loads (or ops), stores */
  int nattr;
  int has_aux_leader;             /* Intel mem-loads-aux group leader */
  struct perf_event_attr aux_attr;
  char event[2][160];
  hm__buf_t *bufs;
  int nbufs;
  int pid;
  uint64_t samples, attributed, foreign, no_addr, lost, bad;
  size_t page;
};

/* ------------------------------------------------------------------------
 * Event strings and format directories
 * ------------------------------------------------------------------------ */
static int hm__fmt_set(const char *fmt, uint64_t val, uint64_t config[3]) {
  /* "config1:0-15" or "config:0-7,32-35" or "config:23" */
  int idx;
  const char *p;
  if (strncmp(fmt, "config2:", 8) == 0) idx = 2, p = fmt + 8;
  else if (strncmp(fmt, "config1:", 8) == 0) idx = 1, p = fmt + 8;
  else if (strncmp(fmt, "config:", 7) == 0) idx = 0, p = fmt + 7;
  else return -EINVAL;
  while (*p) {
    char *end;
    unsigned long lo = strtoul(p, &end, 10), hi = lo;
    if (end == p || lo > 63) return -EINVAL;
    p = end;
    if (*p == '-') {
      hi = strtoul(p + 1, &end, 10);
      if (end == p + 1 || hi > 63 || hi < lo) return -EINVAL;
      p = end;
    }
    for (unsigned long b = lo; b <= hi; b++) {
      config[idx] &= ~(1ull << b);
      config[idx] |= (val & 1) << b;
      val >>= 1;
    }
    if (*p == ',') p++;
    else if (*p) return -EINVAL;
  }
  return 0;
}

int _hm_smp_perf_encode(const char *root, const char *pmu, const char *event,
                        uint64_t config[3], char *why, size_t wlen) {
  char copy[256], path[256], fmt[128];
  snprintf(copy, sizeof copy, "%s", event);
  char *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    while (*t == ' ') t++;
    if (!*t) continue;
    char *eq = strchr(t, '=');
    uint64_t val = 1;
    if (eq) {
      *eq = 0;
      char *end;
      if (strcmp(eq + 1, "?") == 0) {
        snprintf(why, wlen, "%s/%s: term '%s' needs a value", pmu, event, t);
        return -EINVAL;
      }
      val = strtoull(eq + 1, &end, 0);
      if (end == eq + 1 || *end) {
        snprintf(why, wlen, "%s: bad value in term '%s'", pmu, t);
        return -EINVAL;
      }
    }
    snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/format/%s", pmu, t);
    ssize_t n = _hm_prim_read_text(root, path, fmt, sizeof fmt);
    if (n < 0) {
      snprintf(why, wlen, "%s has no format for term '%s'", pmu, t);
      return (int)n;
    }
    if (hm__fmt_set(fmt, val, config)) {
      snprintf(why, wlen, "%s: cannot read format '%s' of term '%s'", pmu, fmt, t);
      return -EINVAL;
    }
  }
  return 0;
}

/* One event of pmu: "events/NAME" (when name is set) plus extra terms. */
static int hm__event(const _hm_smp_cfg_t *cfg, const char *pmu, const char *name,
                     const char *extra, struct perf_event_attr *a, char *desc, size_t dlen,
                     char *why, size_t wlen) {
  char path[256], ev[160] = "";
  uint64_t type;
  snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/type", pmu);
  int rc = _hm_prim_read_u64(cfg->root, path, &type);
  if (rc) {
    snprintf(why, wlen, "no %s PMU (%s)", pmu, path);
    return rc;
  }
  if (name) {
    snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/events/%s", pmu, name);
    ssize_t n = _hm_prim_read_text(cfg->root, path, ev, sizeof ev);
    if (n < 0) {
      snprintf(why, wlen, "PMU %s has no event %s", pmu, name);
      return (int)n;
    }
  }
  char full[256];
  snprintf(full, sizeof full, "%s%s%s", ev, *ev && extra && *extra ? "," : "",
           extra ? extra : "");
  uint64_t config[3] = {0, 0, 0};
  if ((rc = _hm_smp_perf_encode(cfg->root, pmu, full, config, why, wlen))) return rc;
  memset(a, 0, sizeof *a);
  a->size = sizeof *a;
  a->type = (uint32_t)type;
  a->config = config[0];
  a->config1 = config[1];
  a->config2 = config[2];
  snprintf(desc, dlen, "%s/%s%s%s/", pmu, name ? name : "", name && extra && *extra ? "," : "",
           extra ? extra : "");
  return 0;
}

static const char *hm__spe_pmu(const char *root, char *out, size_t len) {
  for (int i = 0; i < 4; i++) {
    char p[128];
    snprintf(p, sizeof p, "/sys/bus/event_source/devices/arm_spe_%d", i);
    if (_hm_prim_is_dir(root, p)) {
      snprintf(out, len, "arm_spe_%d", i);
      return out;
    }
  }
  return NULL;
}

/* Fills p's attributes for kind k (without opening anything). */
/* The core PMU with PEBS load latency (hybrid parts: the P-cores'). */
static const char *hm__pebs_pmu(const char *root) {
  static const char *const cands[] = {"cpu", "cpu_core"}; /* hybrid parts: P-cores */
  char path[128];
  for (size_t i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/events/mem-loads", cands[i]);
    char tmp[160];
    if (_hm_prim_read_text(root, path, tmp, sizeof tmp) > 0) return cands[i];
  }
  return NULL;
}

static int hm__build_pebs(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, uint64_t period,
                          char *why, size_t wlen) {
  int rc;
  const char *pmu = hm__pebs_pmu(cfg->root);
  if (!pmu) {
    snprintf(why, wlen, "no cpu/events/mem-loads (no PEBS load-latency event)");
    return -ENOENT;
  }
  char ldlat[32];
  snprintf(ldlat, sizeof ldlat, "ldlat=%d", HM__LDLAT);
  if ((rc = hm__event(cfg, pmu, "mem-loads", ldlat, &p->attr[0], p->event[0],
                      sizeof p->event[0], why, wlen)))
    return rc;
  p->nattr = 1;
  char w2[8];
  if (hm__event(cfg, pmu, "mem-stores", NULL, &p->attr[1], p->event[1], sizeof p->event[1],
                w2, sizeof w2) == 0)
    p->nattr = 2;
  char aux_desc[160];
  p->has_aux_leader = hm__event(cfg, pmu, "mem-loads-aux", NULL, &p->aux_attr, aux_desc,
                                sizeof aux_desc, w2, sizeof w2) == 0;
  for (int i = 0; i < p->nattr; i++) {
    p->attr[i].sample_period = period ? period : HM__PEBS_PERIOD;
    p->attr[i].sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR |
                             PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC;
    p->attr[i].precise_ip = 2;
    p->attr[i].exclude_kernel = 1;
    p->attr[i].exclude_hv = 1;
  }
  return 0;
}

static int hm__build_ibs(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, uint64_t period,
                         char *why, size_t wlen) {
  int rc;
  /* cnt_ctl=1 counts dispatched ops (not cycles) where the format has it */
  char path[128], tmp[64];
  snprintf(path, sizeof path, "/sys/bus/event_source/devices/ibs_op/format/cnt_ctl");
  int cnt = _hm_prim_read_text(cfg->root, path, tmp, sizeof tmp) > 0;
  if ((rc = hm__event(cfg, "ibs_op", NULL, cnt ? "cnt_ctl=1" : "", &p->attr[0], p->event[0],
                      sizeof p->event[0], why, wlen)))
    return rc;
  p->nattr = 1;
  p->attr[0].sample_period = period ? period : HM__OP_PERIOD;
  /* ADDR is filled from IbsDcLinAd since Linux 6.1; RAW has it before */
  p->attr[0].sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_RAW;
  return 0; /* IBS filters no privilege level on older kernels: no exclude_* */
}

/* The SPE terms the PMU's format directory offers, of those we want. */
static void hm__spe_terms(const char *root, const char *pmu, char *terms, size_t tlen) {
  static const char *const want[] = {"load_filter=1", "store_filter=1", "ts_enable=1",
                                     "jitter=1"};
  terms[0] = 0;
  for (size_t i = 0; i < 4; i++) {
    char name[32], path[160], tmp[64];
    snprintf(name, sizeof name, "%s", want[i]);
    *strchr(name, '=') = 0;
    snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/format/%s", pmu, name);
    if (_hm_prim_read_text(root, path, tmp, sizeof tmp) > 0) {
      size_t l = strlen(terms);
      snprintf(terms + l, tlen - l, "%s%s", l ? "," : "", want[i]);
    }
  }
}

static int hm__build_spe(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, uint64_t period,
                         char *why, size_t wlen) {
  int rc;
  char pmu[32];
  if (!hm__spe_pmu(cfg->root, pmu, sizeof pmu)) {
    snprintf(why, wlen, "no arm_spe PMU");
    return -ENOENT;
  }
  /* only terms the format directory offers */
  char terms[160];
  hm__spe_terms(cfg->root, pmu, terms, sizeof terms);
  if ((rc = hm__event(cfg, pmu, NULL, terms, &p->attr[0], p->event[0], sizeof p->event[0], why,
                      wlen)))
    return rc;
  uint64_t minint = 0;
  char path[160];
  snprintf(path, sizeof path, "/sys/bus/event_source/devices/%s/caps/min_interval", pmu);
  if (_hm_prim_read_u64(cfg->root, path, &minint)) minint = 0;
  uint64_t per = period ? period : HM__OP_PERIOD;
  if (per < minint) per = minint;
  p->nattr = 1;
  p->attr[0].sample_period = per;
  p->attr[0].sample_type = PERF_SAMPLE_TID;
  p->attr[0].exclude_kernel = 1;
  p->attr[0].exclude_hv = 1;
  return 0;
}

static int hm__build(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t k, _hm_smp_perf_t *p, char *why,
                     size_t wlen) {
  p->kind = k;
  p->nattr = 0;
  uint64_t period = cfg->pmu_period;
  if (k == HM_SMP_PEBS) return hm__build_pebs(cfg, p, period, why, wlen);
  if (k == HM_SMP_IBS) return hm__build_ibs(cfg, p, period, why, wlen);
  if (k == HM_SMP_SPE) return hm__build_spe(cfg, p, period, why, wlen);
  snprintf(why, wlen, "not a PMU sampler");
  return -EINVAL;
}

static int hm__open(const _hm_smp_cfg_t *cfg, struct perf_event_attr *a, int pid, int cpu,
                    int group) {
  return cfg->open ? cfg->open(a, pid, cpu, group) : _hm_prim_perf_open(a, pid, cpu, group);
}

static void hm__json_attr(char *out, size_t len, const char *name, const struct perf_event_attr *a,
                          const char *desc) {
  snprintf(out, len,
           "\"%s\":{\"event\":\"%s\",\"type\":%u,\"config\":\"0x%llx\",\"config1\":\"0x%llx\","
           "\"config2\":\"0x%llx\",\"sample_period\":%llu,\"precise_ip\":%u}",
           name, desc, a->type, (unsigned long long)a->config, (unsigned long long)a->config1,
           (unsigned long long)a->config2, (unsigned long long)a->sample_period,
           (unsigned)a->precise_ip);
}

static void hm__json_esc(char *out, size_t len, const char *s) {
  size_t k = 0;
  for (; *s && k + 2 < len; s++) {
    char c = *s;
    if (c == '"' || c == '\\') out[k++] = '\\';
    out[k++] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  out[k] = 0;
}

/* Opens the events once on this thread; lowers precise_ip until the
 * kernel takes it (PEBS). */
static int hm__try_open(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, char *why, size_t wlen) {
  for (int i = 0; i < p->nattr; i++) {
    struct perf_event_attr a = p->attr[i];
    a.disabled = 1;
    int fd = -1;
    int lead = -1;
    if (p->kind == HM_SMP_PEBS && p->has_aux_leader && i == 0) {
      struct perf_event_attr la = p->aux_attr;
      la.disabled = 1;
      la.exclude_kernel = 1;
      la.exclude_hv = 1;
      la.sample_period = a.sample_period;
      la.precise_ip = a.precise_ip;
      lead = hm__open(cfg, &la, 0, -1, -1);
    }
    for (;;) {
      fd = hm__open(cfg, &a, 0, -1, lead);
      if (fd >= 0 || p->kind != HM_SMP_PEBS || a.precise_ip == 0 || fd != -EINVAL) break;
      a.precise_ip--;
    }
    if (lead >= 0) _hm_prim_close(lead);
    if (fd < 0) {
      snprintf(why, wlen, "perf_event_open(%s): %s", p->event[i], strerror(-fd));
      return fd;
    }
    _hm_prim_close(fd);
    p->attr[i].precise_ip = a.precise_ip;
  }
  return 0;
}

int _hm_smp_perf_probe(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t k, char *probed, size_t plen,
                       char *why, size_t wlen) {
  _hm_smp_perf_t p;
  memset(&p, 0, sizeof p);
  int rc = hm__build(cfg, k, &p, why, wlen);
  if (rc) {
    char e[200];
    hm__json_esc(e, sizeof e, why);
    snprintf(probed, plen, "{\"present\":false,\"why\":\"%s\"}", e);
    return rc;
  }
  rc = hm__try_open(cfg, &p, why, wlen);
  char ev[2][400] = {"", ""}, e[200] = "";
  for (int i = 0; i < p.nattr; i++)
    hm__json_attr(ev[i], sizeof ev[i], i ? "stores" : (k == HM_SMP_PEBS ? "loads" : "ops"),
                  &p.attr[i], p.event[i]);
  if (rc) hm__json_esc(e, sizeof e, why);
  snprintf(probed, plen, "{\"present\":true,\"opens\":%s%s%s%s%s%s%s}", rc ? "false" : "true",
           rc ? ",\"why\":\"" : "", e, rc ? "\"" : "", ",", ev[0], p.nattr > 1 ? "," : "");
  if (p.nattr > 1) {
    size_t l = strlen(probed);
    if (l > 0 && l < plen) snprintf(probed + l - 1, plen - l + 1, "%s}", ev[1]);
  }
  return rc;
}

static int hm__map(_hm_smp_perf_t *p, hm__buf_t *b) {
  b->len = (1 + HM__RING_PAGES) * p->page;
  int rc = _hm_prim_perf_map(b->fd, b->len, 0, 1, &b->base);
  if (rc) return rc;
  if (p->kind == HM_SMP_SPE) {
    struct perf_event_mmap_page *pc = b->base;
    b->aux_len = HM__AUX_PAGES * p->page;
    pc->aux_offset = b->len;
    pc->aux_size = b->aux_len;
    void *aux = NULL;
    if ((rc = _hm_prim_perf_map(b->fd, b->aux_len, b->len, 1, &aux))) return rc;
    b->aux = aux;
  }
  return 0;
}

/* Opens p's events on every CPU this process may run on, inherited by
 * threads created later, and maps their buffers. */
/* The aux event that leads mem-loads on parts that need it, on cpu, with
 * its buffer; its fd in *lead. */
static int hm__open_leader(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, int cpu, int *lead,
                           char *why, size_t wlen) {
  /* its samples (none carry an address) go to the member's buffer */
  struct perf_event_attr la = p->aux_attr;
  la.exclude_kernel = la.exclude_hv = 1;
  la.inherit = 1;
  la.sample_period = p->attr[0].sample_period;
  la.sample_type = p->attr[0].sample_type;
  la.precise_ip = p->attr[0].precise_ip;
  *lead = hm__open(cfg, &la, 0, cpu, -1);
  if (*lead < 0) {
    snprintf(why, wlen, "perf_event_open(mem-loads-aux, cpu %d): %s", cpu, strerror(-*lead));
    return *lead;
  }
  hm__buf_t *lb = &p->bufs[p->nbufs++];
  lb->fd = *lead;
  lb->store = 0;
  int rc = hm__map(p, lb);
  if (rc) snprintf(why, wlen, "mmap of a perf buffer: %s", strerror(-rc));
  return rc;
}

/* Event i on cpu (behind its leader where it has one), with its buffer. */
static int hm__open_one(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, int i, int cpu, char *why,
                        size_t wlen) {
  int rc, lead = -1;
  if (p->kind == HM_SMP_PEBS && p->has_aux_leader && i == 0 &&
      (rc = hm__open_leader(cfg, p, cpu, &lead, why, wlen)))
    return rc;
  struct perf_event_attr a = p->attr[i];
  a.inherit = 1;
  int fd = hm__open(cfg, &a, 0, cpu, lead);
  if (fd < 0) {
    snprintf(why, wlen, "perf_event_open(%s, cpu %d): %s", p->event[i], cpu, strerror(-fd));
    return fd;
  }
  hm__buf_t *b = &p->bufs[p->nbufs++];
  b->fd = fd;
  b->store = p->kind == HM_SMP_PEBS ? i : -1;
  if (lead >= 0) {
    rc = _hm_prim_perf_ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, (unsigned long)lead);
    b->fd = -fd - 2; /* writes into the leader's buffer: no map of its own */
    if (rc) snprintf(why, wlen, "PERF_EVENT_IOC_SET_OUTPUT: %s", strerror(-rc));
    return rc;
  }
  if ((rc = hm__map(p, b)))
    snprintf(why, wlen, "mmap of a perf buffer: %s%s", strerror(-rc),
             rc == -EPERM ? " (over kernel.perf_event_mlock_kb)" : "");
  return rc;
}

static int hm__open_all(const _hm_smp_cfg_t *cfg, _hm_smp_perf_t *p, char *why, size_t wlen) {
  int cpus[HM__MAX_CPUS];
  int ncpu = _hm_prim_allowed_cpus(cpus, HM__MAX_CPUS);
  if (ncpu <= 0) {
    snprintf(why, wlen, "cannot list this process's CPUs");
    return ncpu < 0 ? ncpu : -ENODEV;
  }
  p->bufs = calloc((size_t)ncpu * (size_t)(p->nattr + 1), sizeof *p->bufs);
  if (!p->bufs) return -ENOMEM;
  for (int c = 0; c < ncpu; c++)
    for (int i = 0; i < p->nattr; i++) {
      int rc = hm__open_one(cfg, p, i, cpus[c], why, wlen);
      if (rc) return rc;
    }
  return 0;
}

int _hm_smp_perf_start(const _hm_smp_cfg_t *cfg, _hm_smp_kind_t k, _hm_smp_perf_t **out,
                       char *why, size_t wlen) {
  _hm_smp_perf_t *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  p->page = _hm_prim_page_size();
  p->pid = cfg->pid;
  int rc = hm__build(cfg, k, p, why, wlen);
  if (!rc) rc = hm__try_open(cfg, p, why, wlen);
  if (!rc) rc = hm__open_all(cfg, p, why, wlen);
  if (rc) {
    _hm_smp_perf_stop(p);
    return rc;
  }
  *out = p;
  return 0;
}

/* ------------------------------------------------------------------------
 * Records
 * ------------------------------------------------------------------------ */
static uint64_t hm__u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t hm__u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* IBS op raw data: u32 caps, then IBS_OP_CTL, RIP, DATA, DATA2, DATA3,
 * DC_LIN_AD, DC_PHYS_AD, ... (u64 each). IbsOpData3: bit 0 load, bit 1
 * store, bit 17 DcLinAddrValid. */
static void hm__ibs_raw(const uint8_t *raw, uint32_t size, _hm_smp_sample_t *s) {
  if (size < 4 + 6 * 8) return;
  uint64_t data3 = hm__u64(raw + 4 + 4 * 8);
  int ld = (int)(data3 & 1), st = (int)((data3 >> 1) & 1);
  if (!ld && !st) {
    s->addr = 0; /* not a memory operation */
    return;
  }
  s->store = st;
  if (!s->addr && (data3 >> 17) & 1) s->addr = hm__u64(raw + 4 + 5 * 8);
}

/* A cursor over one PERF_RECORD_SAMPLE (past its 8-byte header). */
typedef struct hm__cur_s {
  const uint8_t *r;
  size_t size, o;
} hm__cur_t;

/* The next 8-byte field when sample_type st has one of bits: 1 with *at
 * on it, 0 when st has none of them, -EINVAL past the record's end. */
static int hm__field(hm__cur_t *c, uint64_t st, uint64_t bits, const uint8_t **at) {
  if (!(st & bits)) return 0;
  if (c->o + 8 > c->size) return -EINVAL;
  *at = c->r + c->o;
  c->o += 8;
  return 1;
}

/* The fixed fields before the variable ones, in the kernel's order. */
static int hm__sample_head(hm__cur_t *c, uint64_t st, _hm_smp_sample_t *s) {
  static const uint64_t order[] = {PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,   PERF_SAMPLE_TID,
                                   PERF_SAMPLE_TIME,       PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
                                   PERF_SAMPLE_STREAM_ID,  PERF_SAMPLE_CPU,  PERF_SAMPLE_PERIOD};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const uint8_t *at;
    int rc = hm__field(c, st, order[i], &at);
    if (rc < 0) return rc;
    if (rc && order[i] == PERF_SAMPLE_TID) {
      s->pid = hm__u32(at);
      s->tid = hm__u32(at + 4);
    }
    if (rc && order[i] == PERF_SAMPLE_ADDR) s->addr = hm__u64(at);
  }
  return 0;
}

static int hm__sample_raw(hm__cur_t *c, int ibs, _hm_smp_sample_t *s) {
  if (c->o + 4 > c->size) return -EINVAL;
  uint32_t rs = hm__u32(c->r + c->o);
  if (c->o + 4 + (size_t)rs > c->size) return -EINVAL;
  if (ibs) hm__ibs_raw(c->r + c->o + 4, rs, s);
  c->o += 4 + rs;
  return 0;
}

/* The fields after RAW: the weight (latency) and the data source. */
static int hm__sample_tail(hm__cur_t *c, uint64_t st, _hm_smp_sample_t *s) {
  const uint8_t *at;
  int rc = hm__field(c, st, PERF_SAMPLE_WEIGHT_TYPE, &at);
  if (rc < 0) return rc;
  if (rc) {
    s->weight = hm__u64(at);
    if (st & PERF_SAMPLE_WEIGHT_STRUCT) s->weight &= 0xffffffffu; /* var1_dw: latency */
  }
  if ((rc = hm__field(c, st, PERF_SAMPLE_DATA_SRC, &at)) <= 0) return rc;
  s->data_src = hm__u64(at);
  uint64_t op = s->data_src & 0x1f; /* mem_op */
  if (op & PERF_MEM_OP_STORE) s->store = 1;
  else if (op & PERF_MEM_OP_LOAD) s->store = 0;
  return 0;
}

static int hm__sample(const uint8_t *r, size_t size, uint64_t st, int ibs, _hm_smp_sample_t *s) {
  hm__cur_t c = {r, size, 8};
  int rc;
  memset(s, 0, sizeof *s);
  s->store = -1;
  if ((rc = hm__sample_head(&c, st, s))) return rc;
  if (st & (PERF_SAMPLE_READ | PERF_SAMPLE_CALLCHAIN)) return -ENOTSUP;
  if ((st & PERF_SAMPLE_RAW) && (rc = hm__sample_raw(&c, ibs, s))) return rc;
  if (st & (PERF_SAMPLE_BRANCH_STACK | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER))
    return -ENOTSUP;
  return hm__sample_tail(&c, st, s);
}

/* One record: a sample delivered to fn, or lost records counted. */
static int hm__record(const uint8_t *rec, const struct perf_event_header *h,
                      uint64_t sample_type, int ibs, _hm_smp_sample_fn fn, void *arg,
                      uint64_t *lost) {
  if (h->type == PERF_RECORD_SAMPLE) {
    _hm_smp_sample_t s;
    int rc = hm__sample(rec, h->size, sample_type, ibs, &s);
    if (rc) return rc;
    if (fn) fn(arg, &s);
  } else if (h->type == PERF_RECORD_LOST && h->size >= 24) {
    if (lost) *lost += hm__u64(rec + 16);
  } else if (h->type == PERF_RECORD_LOST_SAMPLES && h->size >= 16) {
    if (lost) *lost += hm__u64(rec + 8);
  }
  return 0;
}

long _hm_smp_perf_parse(const uint8_t *ring, uint64_t size, uint64_t tail, uint64_t head,
                        uint64_t sample_type, int ibs, _hm_smp_sample_fn fn, void *arg,
                        uint64_t *lost) {
  if (size == 0 || (size & (size - 1))) return -EINVAL;
  uint8_t tmp[1u << 16];
  long n = 0;
  while (head - tail >= sizeof(struct perf_event_header)) {
    struct perf_event_header h;
    uint64_t at = tail & (size - 1);
    for (size_t i = 0; i < sizeof h; i++) ((uint8_t *)&h)[i] = ring[(at + i) & (size - 1)];
    if (h.size < sizeof h || h.size > head - tail) return -EINVAL;
    const uint8_t *rec = ring + at;
    if (at + h.size > size) { /* wraps */
      size_t first = (size_t)(size - at);
      memcpy(tmp, ring + at, first);
      memcpy(tmp + first, ring, h.size - first);
      rec = tmp;
    }
    int rc = hm__record(rec, &h, sample_type, ibs, fn, arg, lost);
    if (rc) return rc;
    tail += h.size;
    n++;
  }
  return n;
}

/* Arm SPE packets (Arm ARM, "Statistical Profiling Extension" packet
 * formats): a header byte whose bits [5:4] give the payload size (1 << n)
 * for every packet but PAD (0x00) and END (0x01); 0x20/0x21 prefix an
 * extended header. Address packets 0xb0..0xb7 (index = low bits, plus
 * extended bits), index 2 = data virtual address (bits 55:0, the top byte
 * a tag). Operation type 0x48..0x4b: class 1 is load/store, payload bit 0
 * set = store. A record ends at END or TIMESTAMP (0x71). */
typedef struct hm__spe_s {
  _hm_smp_sample_t cur; /* the record being decoded */
  int ldst;             /* it is a load or a store */
  long n;               /* records delivered */
  _hm_smp_sample_fn fn;
  void *arg;
} hm__spe_t;

/* A record ends: delivered when it is a load/store with an address. */
static void hm__spe_end(hm__spe_t *d) {
  if (d->ldst && d->cur.addr && d->fn) d->fn(d->arg, &d->cur);
  d->n += d->ldst && d->cur.addr;
  memset(&d->cur, 0, sizeof d->cur);
  d->cur.store = -1;
  d->ldst = 0;
}

/* One packet's payload (header h, extended bits ext); -EINVAL for a header
 * that is not of the format. */
static int hm__spe_packet(hm__spe_t *d, uint8_t h, unsigned ext, const uint8_t *pl) {
  if ((h & 0xf8) == 0xb0) {
    unsigned idx = (h & 7) | (ext << 3);
    if (idx == 2) d->cur.addr = hm__u64(pl) & ((1ull << 56) - 1);
  } else if ((h & 0xfc) == 0x48) {
    if ((h & 3) == 1) {
      d->ldst = 1;
      d->cur.store = pl[0] & 1;
    }
  } else if ((h & 0xf0) != 0x40 && (h & 0xf0) != 0x50 && (h & 0xf0) != 0x60 &&
             (h & 0xf8) != 0x98 && (h & 0xc0) != 0x80 && (h & 0xf0) != 0x70) {
    return -EINVAL; /* not a packet of the format */
  }
  return 0;
}

long _hm_smp_spe_decode(const uint8_t *buf, size_t len, _hm_smp_sample_fn fn, void *arg) {
  hm__spe_t d;
  memset(&d, 0, sizeof d);
  d.cur.store = -1;
  d.fn = fn;
  d.arg = arg;
  size_t i = 0;
  while (i < len) {
    uint8_t h = buf[i++];
    unsigned ext = 0;
    if (h == 0x00) continue; /* PAD */
    if (h == 0x01 || h == 0x71) { /* END, TIMESTAMP */
      if (h == 0x71 && i + 8 > len) return -EINVAL;
      if (h == 0x71) i += 8;
      hm__spe_end(&d);
      continue;
    }
    if ((h & 0xfc) == 0x20) { /* extended header */
      if (i >= len) return -EINVAL;
      ext = h & 3;
      h = buf[i++];
    }
    size_t plen = (size_t)1 << ((h >> 4) & 3);
    if (i + plen > len || hm__spe_packet(&d, h, ext, buf + i)) return -EINVAL;
    i += plen;
  }
  return d.n;
}

/* ------------------------------------------------------------------------
 * Draining
 * ------------------------------------------------------------------------ */
typedef struct hm__ctx_s {
  _hm_smp_perf_t *p;
  const _hm_smp_spans_t *spans;
  const _hm_smp_sink_t *sink;
  int store;
  uint64_t credited;
} hm__ctx_t;

static void hm__take(void *argp, const _hm_smp_sample_t *s) {
  hm__ctx_t *c = argp;
  c->p->samples++;
  if (s->pid && (int)s->pid != c->p->pid) {
    c->p->foreign++;
    return;
  }
  if (!s->addr) {
    c->p->no_addr++;
    return;
  }
  const _hm_smp_span_t *sp = _hm_smp_spans_find(c->spans, (uintptr_t)s->addr);
  if (!sp) return;
  int store = s->store >= 0 ? s->store : (c->store > 0);
  c->sink->credit(c->sink->arg, sp->site, HM_SMP_FIX, store);
  c->p->attributed++;
  c->credited++;
}

uint64_t _hm_smp_perf_drain(_hm_smp_perf_t *p, const _hm_smp_spans_t *spans,
                            const _hm_smp_sink_t *sink) {
  hm__ctx_t c = {p, spans, sink, 0, 0};
  for (int i = 0; i < p->nbufs; i++) {
    hm__buf_t *b = &p->bufs[i];
    if (b->fd < 0 || !b->base) continue;
    struct perf_event_mmap_page *pc = b->base;
    c.store = b->store;
    uint64_t dsize = pc->data_size ? pc->data_size : HM__RING_PAGES * p->page;
    uint64_t doff = pc->data_offset ? pc->data_offset : p->page;
    uint64_t head = __atomic_load_n(&pc->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = pc->data_tail;
    long r = _hm_smp_perf_parse((const uint8_t *)b->base + doff, dsize, tail, head,
                                p->attr[b->store > 0 ? 1 : 0].sample_type,
                                p->kind == HM_SMP_IBS, hm__take, &c, &p->lost);
    if (r < 0) p->bad++;
    __atomic_store_n(&pc->data_tail, head, __ATOMIC_RELEASE);
    if (b->aux) {
      uint64_t ah = __atomic_load_n(&pc->aux_head, __ATOMIC_ACQUIRE);
      uint64_t at = pc->aux_tail;
      uint64_t asz = b->aux_len;
      if (ah - at > asz) at = ah - asz; /* overwritten: keep the newest */
      while (at < ah) {
        uint64_t o = at & (asz - 1);
        uint64_t chunk = ah - at < asz - o ? ah - at : asz - o;
        /* SPE records are 64-byte aligned in the buffer: a wrap splits
         * none of them */
        if (_hm_smp_spe_decode(b->aux + o, (size_t)chunk, hm__take, &c) < 0) p->bad++;
        at += chunk;
      }
      __atomic_store_n(&pc->aux_tail, ah, __ATOMIC_RELEASE);
    }
  }
  return c.credited;
}

double _hm_smp_perf_period(const _hm_smp_perf_t *p) {
  return p && p->nattr ? (double)p->attr[0].sample_period : 1.0;
}

void _hm_smp_perf_describe(const _hm_smp_perf_t *p, char *out, size_t len) {
  snprintf(out, len,
           ",\"events\":[\"%s\"%s%s%s],\"precise_ip\":%u,\"cpu_buffers\":%d,"
           "\"samples_read\":%llu,\"samples_attributed\":%llu,\"samples_other_process\":%llu,"
           "\"samples_without_address\":%llu,\"lost\":%llu,\"bad_records\":%llu",
           p->event[0], p->nattr > 1 ? ",\"" : "", p->nattr > 1 ? p->event[1] : "",
           p->nattr > 1 ? "\"" : "", (unsigned)p->attr[0].precise_ip, p->nbufs,
           (unsigned long long)p->samples, (unsigned long long)p->attributed,
           (unsigned long long)p->foreign, (unsigned long long)p->no_addr,
           (unsigned long long)p->lost, (unsigned long long)p->bad);
}

void _hm_smp_perf_stop(_hm_smp_perf_t *p) {
  if (!p) return;
  for (int i = 0; p->bufs && i < p->nbufs; i++) {
    hm__buf_t *b = &p->bufs[i];
    int fd = b->fd < -1 ? -b->fd - 2 : b->fd;
    if (b->aux) _hm_prim_vm_unmap(b->aux, b->aux_len);
    if (b->base) _hm_prim_vm_unmap(b->base, b->len);
    if (fd >= 0) _hm_prim_close(fd);
  }
  free(p->bufs);
  free(p);
}
