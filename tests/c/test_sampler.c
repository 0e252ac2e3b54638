/* SPDX-License-Identifier: BSD-3-Clause */
/* The precise samplers (src/preload/sampler*.c) without a PMU: the
 * PERF_RECORD_SAMPLE parser on synthetic ring buffers (wrap-around, lost
 * records, IBS raw data, malformed records), the Arm SPE packet decoder,
 * event encoding from recorded sysfs trees (tests/golden/samplers), the
 * run-time selection with a fake perf_event_open, and the drain of a
 * buffer laid out as the kernel's mmap page crediting samples to the
 * blocks (sites) holding their addresses; and, where this kernel allows
 * perf_event_open, the whole path live: per-CPU inherited events, their
 * mmap'd rings and the drain, on the software page-fault event (whose
 * samples carry the faulting address like PEBS samples carry the data
 * address), touched from the main thread and from a thread created after
 * the events were opened. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/preload/table.c"
#include "../../src/preload/sampler.c"
#include "../../src/preload/sampler_perf.c"
#include "../../src/preload/sampler_damon.c"
#include "../../src/preload/sampler_refs.c"
#include "../../src/preload/sampler_writes.c"
#include "testhelper.h"

#define TREE(x) HM_SOURCE_DIR "/tests/golden/samplers/" x

/* ---- synthetic records ---- */
typedef struct got_s {
  int n;
  _hm_smp_sample_t s[16];
} got_t;

static void collect(void *arg, const _hm_smp_sample_t *s) {
  got_t *g = arg;
  if (g->n < 16) g->s[g->n] = *s;
  g->n++;
}

/* Writes len bytes at absolute position pos of a ring of size bytes. */
static void ring_put(uint8_t *ring, uint64_t size, uint64_t pos, const void *src, size_t len) {
  for (size_t i = 0; i < len; i++) ring[(pos + i) & (size - 1)] = ((const uint8_t *)src)[i];
}

/* A PEBS-style sample: IP, TID, ADDR, WEIGHT, DATA_SRC. Returns its size. */
static size_t pebs_record(uint8_t *out, uint64_t ip, uint32_t pid, uint32_t tid, uint64_t addr,
                          uint64_t weight, uint64_t op) {
  struct perf_event_header h = {PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER, 8 + 5 * 8};
  union perf_mem_data_src ds;
  memset(&ds, 0, sizeof ds);
  ds.mem_op = op;
  uint64_t v[5] = {ip, (uint64_t)pid | ((uint64_t)tid << 32), addr, weight, ds.val};
  memcpy(out, &h, 8);
  memcpy(out + 8, v, sizeof v);
  return h.size;
}

static const uint64_t PEBS_TYPE = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR |
                                  PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC;

static void test_parse(void) {
  enum { SIZE = 4096 };
  static uint8_t ring[SIZE];
  uint8_t rec[128];
  /* positions are free-running counters, as data_head/data_tail are:
   * start 40 bytes before the end of the second lap so a record wraps */
  uint64_t tail = 2 * SIZE - 40, pos = tail;
  size_t n = pebs_record(rec, 0x401000, 77, 78, 0x7f0000001040ull, 123, PERF_MEM_OP_LOAD);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n; /* 48 bytes: crosses the end */
  n = pebs_record(rec, 0x401004, 77, 79, 0x7f0000002000ull, 9, PERF_MEM_OP_STORE);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n;
  struct {
    struct perf_event_header h;
    uint64_t id, lost;
  } lost = {{PERF_RECORD_LOST, 0, 24}, 5, 17};
  ring_put(ring, SIZE, pos, &lost, sizeof lost);
  pos += sizeof lost;
  struct {
    struct perf_event_header h;
    uint64_t lost;
  } lost2 = {{PERF_RECORD_LOST_SAMPLES, 0, 16}, 3};
  ring_put(ring, SIZE, pos, &lost2, sizeof lost2);
  pos += sizeof lost2;
  struct perf_event_header other = {PERF_RECORD_THROTTLE, 0, 24};
  uint8_t thr[24] = {0};
  memcpy(thr, &other, 8);
  ring_put(ring, SIZE, pos, thr, 24);
  pos += 24;
  got_t g = {0};
  uint64_t lostn = 0;
  long r = _hm_smp_perf_parse(ring, SIZE, tail, pos, PEBS_TYPE, 0, collect, &g, &lostn);
  CHECK_EQ_INT(r, 5);
  CHECK_EQ_INT(g.n, 2);
  CHECK(g.s[0].addr == 0x7f0000001040ull);
  CHECK_EQ_INT(g.s[0].pid, 77);
  CHECK_EQ_INT(g.s[0].tid, 78);
  CHECK_EQ_INT(g.s[0].weight, 123);
  CHECK_EQ_INT(g.s[0].store, 0);
  CHECK(g.s[1].addr == 0x7f0000002000ull);
  CHECK_EQ_INT(g.s[1].store, 1);
  CHECK_EQ_INT(g.s[1].tid, 79);
  CHECK_EQ_INT(lostn, 20);
  /* a partial record at the head is left for the next read */
  g.n = 0;
  r = _hm_smp_perf_parse(ring, SIZE, tail, tail + 20, PEBS_TYPE, 0, collect, &g, NULL);
  CHECK_EQ_INT(r, -EINVAL);
  r = _hm_smp_perf_parse(ring, SIZE, tail, tail + 4, PEBS_TYPE, 0, collect, &g, NULL);
  CHECK_EQ_INT(r, 0);
  /* malformed: a zero-size header */
  uint8_t zero[SIZE] = {0};
  r = _hm_smp_perf_parse(zero, SIZE, 0, 64, PEBS_TYPE, 0, collect, &g, NULL);
  CHECK_EQ_INT(r, -EINVAL);
  /* a sample shorter than its sample_type says */
  struct perf_event_header shorth = {PERF_RECORD_SAMPLE, 0, 16};
  memcpy(zero, &shorth, 8);
  r = _hm_smp_perf_parse(zero, SIZE, 0, 16, PEBS_TYPE, 0, collect, &g, NULL);
  CHECK_EQ_INT(r, -EINVAL);
  CHECK_EQ_INT(g.n, 0);
  /* ring size must be a power of two */
  CHECK_EQ_INT(_hm_smp_perf_parse(ring, 3000, 0, 0, PEBS_TYPE, 0, NULL, NULL, NULL), -EINVAL);
}

/* IBS op: IP, TID, ADDR, RAW (u32 size; u32 caps; u64 regs[8]). */
static size_t ibs_record(uint8_t *out, uint64_t addr, uint64_t data3, uint64_t linad) {
  uint8_t raw[4 + 8 * 8];
  memset(raw, 0, sizeof raw);
  uint64_t regs[8] = {0, 0x401000, 0, 0, data3, linad, 0, 0};
  memcpy(raw + 4, regs, sizeof regs);
  uint32_t rs = sizeof raw;
  size_t size = 8 + 3 * 8 + 4 + rs; /* 104: a multiple of 8 */
  struct perf_event_header h = {PERF_RECORD_SAMPLE, 0, (uint16_t)size};
  uint64_t v[3] = {0x401000, 5 | (6ull << 32), addr};
  memcpy(out, &h, 8);
  memcpy(out + 8, v, sizeof v);
  memcpy(out + 32, &rs, 4);
  memcpy(out + 36, raw, rs);
  return size;
}

static void test_ibs(void) {
  enum { SIZE = 1024 };
  static uint8_t ring[SIZE];
  uint8_t rec[256];
  const uint64_t type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_RAW;
  uint64_t pos = 0;
  /* kernel before 6.1: ADDR 0, the address in IbsDcLinAd (DcLinAddrValid) */
  size_t n = ibs_record(rec, 0, 1ull | (1ull << 17), 0x7f00000a0000ull);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n;
  /* a store whose ADDR the kernel filled */
  n = ibs_record(rec, 0x7f00000b0008ull, 2ull | (1ull << 17), 0x7f00000b0008ull);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n;
  /* not a memory operation: no address even though the register has one */
  n = ibs_record(rec, 0, 0, 0x7f00000c0000ull);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n;
  /* a load whose linear address is not valid */
  n = ibs_record(rec, 0, 1, 0x7f00000d0000ull);
  ring_put(ring, SIZE, pos, rec, n);
  pos += n;
  got_t g = {0};
  long r = _hm_smp_perf_parse(ring, SIZE, 0, pos, type, 1, collect, &g, NULL);
  CHECK_EQ_INT(r, 4);
  CHECK_EQ_INT(g.n, 4);
  CHECK(g.s[0].addr == 0x7f00000a0000ull);
  CHECK_EQ_INT(g.s[0].store, 0);
  CHECK(g.s[1].addr == 0x7f00000b0008ull);
  CHECK_EQ_INT(g.s[1].store, 1);
  CHECK(g.s[2].addr == 0);
  CHECK(g.s[3].addr == 0);
  CHECK_EQ_INT(g.s[0].pid, 5);
}

static void test_spe(void) {
  uint8_t b[128];
  size_t k = 0;
  uint64_t pc = 0x400123, va = 0x00ff7f0000003008ull; /* tag byte 0x00, then the address */
  /* record 1: PC, load, data VA, events, data source, latency, TIMESTAMP */
  b[k++] = 0xb0;
  memcpy(b + k, &pc, 8), k += 8;
  b[k++] = 0x49, b[k++] = 0x00; /* op type LD/ST class, load */
  b[k++] = 0xb2;
  memcpy(b + k, &va, 8), k += 8;
  b[k++] = 0x52, b[k++] = 0x02, b[k++] = 0x00; /* events, 2 bytes */
  b[k++] = 0x43, b[k++] = 0x00;               /* data source */
  b[k++] = 0x99, b[k++] = 0x10, b[k++] = 0x00; /* counter: total latency */
  b[k++] = 0x71;
  memset(b + k, 0, 8), k += 8;
  /* record 2: a branch (class 2): not delivered */
  b[k++] = 0x4a, b[k++] = 0x00;
  b[k++] = 0x01;
  /* padding, then record 3: a store through an extended-header address */
  b[k++] = 0x00, b[k++] = 0x00;
  uint64_t va2 = 0x7f0000004000ull;
  b[k++] = 0x49, b[k++] = 0x01;
  b[k++] = 0x20, b[k++] = 0xb2; /* extended header, index 2 */
  memcpy(b + k, &va2, 8), k += 8;
  b[k++] = 0x64, b[k++] = 1, b[k++] = 0, b[k++] = 0, b[k++] = 0; /* context */
  b[k++] = 0x01;
  got_t g = {0};
  long r = _hm_smp_spe_decode(b, k, collect, &g);
  CHECK_EQ_INT(r, 2);
  CHECK_EQ_INT(g.n, 2);
  CHECK(g.s[0].addr == (va & ((1ull << 56) - 1)));
  CHECK_EQ_INT(g.s[0].store, 0);
  CHECK(g.s[1].addr == va2);
  CHECK_EQ_INT(g.s[1].store, 1);
  /* an unknown header byte, and a packet cut short */
  uint8_t bad[] = {0x0f, 0x00};
  CHECK_EQ_INT(_hm_smp_spe_decode(bad, sizeof bad, collect, &g), -EINVAL);
  uint8_t cut[] = {0xb2, 1, 2, 3};
  CHECK_EQ_INT(_hm_smp_spe_decode(cut, sizeof cut, collect, &g), -EINVAL);
}

static void test_encode(void) {
  uint64_t c[3] = {0, 0, 0};
  char why[256];
  CHECK_EQ_INT(_hm_smp_perf_encode(TREE("intel"), "cpu", "event=0xcd,umask=0x1,ldlat=3,ldlat=30",
                                   c, why, sizeof why),
               0);
  CHECK(c[0] == 0x1cd);
  CHECK(c[1] == 30); /* a later term wins */
  memset(c, 0, sizeof c);
  /* a split field: event bits 0-7 and 32-35 (AMD) */
  CHECK_EQ_INT(_hm_smp_perf_encode(TREE("amd"), "cpu", "event=0x1d0,umask=0x2", c, why,
                                   sizeof why),
               0);
  CHECK(c[0] == ((1ull << 32) | 0x2d0));
  memset(c, 0, sizeof c);
  CHECK_EQ_INT(_hm_smp_perf_encode(TREE("arm"), "arm_spe_0", "load_filter,store_filter=1,jitter",
                                   c, why, sizeof why),
               0);
  CHECK(c[0] == ((1ull << 33) | (1ull << 34) | (1ull << 16)));
  CHECK(_hm_smp_perf_encode(TREE("intel"), "cpu", "nosuchterm=1", c, why, sizeof why) < 0);
  CHECK(strstr(why, "nosuchterm") != NULL);
  CHECK_EQ_INT(_hm_smp_perf_encode(TREE("intel"), "cpu", "ldlat=?", c, why, sizeof why), -EINVAL);
}

/* ---- selection with a fake perf_event_open ---- */
static struct perf_event_attr g_seen[8];
static int g_nseen, g_accept_type = -1, g_max_precise = 3;

static int fake_open(void *attr, int pid, int cpu, int group) {
  (void)pid, (void)cpu, (void)group;
  struct perf_event_attr *a = attr;
  if (g_nseen < 8) g_seen[g_nseen++] = *a;
  if ((int)a->type != g_accept_type) return -ENOENT;
  if (a->precise_ip > g_max_precise) return -EINVAL;
  return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void test_select(void) {
  char probed[4096], why[512];
  _hm_smp_kind_t k = HM_SMP_NONE;
  _hm_smp_cfg_t cfg = {TREE("intel"), 10000, 0, 1, fake_open, NULL};
  /* Intel with a PMU that takes the event: pebs, precise_ip lowered to
   * what the (fake) kernel accepts */
  g_accept_type = 4, g_max_precise = 1, g_nseen = 0;
  CHECK_EQ_INT(_hm_smp_select(&cfg, "auto", &k, probed, sizeof probed, why, sizeof why), 0);
  CHECK_EQ_INT(k, HM_SMP_PEBS);
  CHECK(g_nseen >= 3);
  const struct perf_event_attr *a = &g_seen[g_nseen - 1];
  CHECK(a->type == 4);
  CHECK(a->config == 0x82d0); /* mem-stores, opened last */
  CHECK(a->precise_ip == 1);
  CHECK(a->sample_type == PEBS_TYPE);
  CHECK(a->exclude_kernel == 1);
  CHECK(strstr(probed, "\"config\":\"0x1cd\"") != NULL);
  CHECK(strstr(probed, "\"config1\":\"0x3\"") != NULL);
  CHECK(strstr(probed, "\"precise_ip\":1") != NULL);
  CHECK(strstr(probed, "\"ibs\":{\"probed\":false}") != NULL);
  /* the same tree with a kernel that refuses: auto falls through (this
   * tree's DAMON has no vaddr) to portable; pebs named is an error */
  g_accept_type = -1, g_nseen = 0;
  _hm_smp_cfg_t ro = cfg;
  CHECK_EQ_INT(_hm_smp_select(&ro, "pebs", &k, probed, sizeof probed, why, sizeof why),
               -ENOTSUP);
  CHECK(strstr(why, "perf_event_open(cpu/mem-loads,ldlat=3/)") != NULL);
  /* AMD: ibs_op type 11, ADDR and RAW requested, cnt_ctl set */
  cfg.root = TREE("amd");
  g_accept_type = 11, g_nseen = 0;
  CHECK_EQ_INT(_hm_smp_select(&cfg, "auto", &k, probed, sizeof probed, why, sizeof why), 0);
  CHECK_EQ_INT(k, HM_SMP_IBS);
  a = &g_seen[g_nseen - 1];
  CHECK(a->type == 11);
  CHECK(a->config == (1ull << 19));
  CHECK((a->sample_type & (PERF_SAMPLE_ADDR | PERF_SAMPLE_RAW)) ==
        (PERF_SAMPLE_ADDR | PERF_SAMPLE_RAW));
  CHECK(strstr(probed, "\"pebs\":{\"present\":false") != NULL);
  /* Arm: SPE, period raised to at least caps/min_interval */
  cfg.root = TREE("arm");
  cfg.pmu_period = 100;
  g_accept_type = 8, g_nseen = 0;
  CHECK_EQ_INT(_hm_smp_select(&cfg, "spe", &k, probed, sizeof probed, why, sizeof why), 0);
  CHECK_EQ_INT(k, HM_SMP_SPE);
  a = &g_seen[g_nseen - 1];
  CHECK(a->type == 8);
  CHECK(a->sample_period == 256);
  CHECK(a->config == ((1ull << 33) | (1ull << 34) | (1ull << 0) | (1ull << 16)));
  /* Arm asked for IBS: one-line error */
  CHECK_EQ_INT(_hm_smp_select(&cfg, "ibs", &k, probed, sizeof probed, why, sizeof why),
               -ENOTSUP);
  CHECK(strstr(why, "ibs_op") != NULL);
  CHECK(strchr(why, '\n') == NULL);
  CHECK_EQ_INT(_hm_smp_select(&cfg, "bogus", &k, probed, sizeof probed, why, sizeof why),
               -EINVAL);
  /* portable is always there */
  CHECK_EQ_INT(_hm_smp_select(&cfg, "portable", &k, probed, sizeof probed, why, sizeof why), 0);
  CHECK_EQ_INT(k, HM_SMP_PORTABLE);
  /* Sapphire Rapids: mem-loads opened in a group led by mem-loads-aux */
  cfg.root = TREE("intel-spr");
  cfg.pmu_period = 0;
  g_accept_type = 4, g_max_precise = 3, g_nseen = 0;
  CHECK_EQ_INT(_hm_smp_select(&cfg, "pebs", &k, probed, sizeof probed, why, sizeof why), 0);
  CHECK(g_seen[0].config == 0x8203); /* the aux leader first */
  CHECK(g_seen[1].config == 0x1cd);
  CHECK(g_seen[1].sample_period == HM__PEBS_PERIOD);
}

/* ---- draining a buffer laid out like the kernel's ---- */
typedef struct credits_s {
  uint64_t loads[4], stores[4], shorts[4], shorts2[4], firsts[4];
  uint64_t pairs, ratio_ok; /* short-window pairs heard, with a sane ratio */
} credits_t;

static void credit(void *arg, uint32_t site, uint64_t w, int what) {
  credits_t *c = arg;
  if (site >= 4) return;
  if (what == HM_SMP_SHORT) c->shorts[site] += w;
  else if (what == HM_SMP_SHORT2) c->shorts2[site] += w;
  else if (what == HM_SMP_FIRST) c->firsts[site] += w;
  else (what == HM_SMP_STORE ? c->stores : c->loads)[site] += w;
}

static void pair(void *arg, double ratio) {
  credits_t *c = arg;
  c->pairs++;
  c->ratio_ok += ratio >= 0.0 && ratio < 1e6;
}

/* A sink crediting into c. */
static _hm_smp_sink_t sink_of(credits_t *c) {
  _hm_smp_sink_t k = {credit, pair, c};
  return k;
}

static void test_drain(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = (1 + HM__RING_PAGES) * page;
  uint8_t *mem = aligned_alloc(page, len);
  CHECK(mem != NULL);
  if (!mem) return;
  memset(mem, 0, len);
  struct perf_event_mmap_page *pc = (void *)mem;
  pc->data_offset = page;
  pc->data_size = HM__RING_PAGES * page;
  uint8_t *ring = mem + page;
  uint64_t pos = 0;
  uint8_t rec[64];
  const uintptr_t A = 0x7f0000100000ull, B = 0x7f0000300000ull;
  /* site 1 = [A, A+1 MiB), site 2 = [B, B+64 KiB) */
  size_t n;
  for (int i = 0; i < 5; i++) {
    n = pebs_record(rec, 1, 42, 42, A + (uint64_t)i * 4096, 10, PERF_MEM_OP_LOAD);
    ring_put(ring, pc->data_size, pos, rec, n), pos += n;
  }
  n = pebs_record(rec, 1, 42, 43, B + 8, 10, PERF_MEM_OP_STORE);
  ring_put(ring, pc->data_size, pos, rec, n), pos += n;
  n = pebs_record(rec, 1, 42, 43, B + 65536, 10, PERF_MEM_OP_LOAD); /* just past B */
  ring_put(ring, pc->data_size, pos, rec, n), pos += n;
  n = pebs_record(rec, 1, 4242, 4242, A, 10, PERF_MEM_OP_LOAD); /* a forked child's */
  ring_put(ring, pc->data_size, pos, rec, n), pos += n;
  n = pebs_record(rec, 1, 42, 42, 0, 10, PERF_MEM_OP_LOAD); /* no address */
  ring_put(ring, pc->data_size, pos, rec, n), pos += n;
  pc->data_head = pos;

  _hm_smp_perf_t p;
  memset(&p, 0, sizeof p);
  p.kind = HM_SMP_PEBS;
  p.nattr = 1;
  p.attr[0].sample_type = PEBS_TYPE;
  p.attr[0].sample_period = 20011;
  p.page = page;
  p.pid = 42;
  hm__buf_t buf = {99, 0, mem, len, NULL, 0};
  p.bufs = &buf;
  p.nbufs = 1;
  _hm_smp_span_t sp[2] = {{B, B + 65536, 2, 0}, {A, A + (1 << 20), 1, 0}};
  _hm_smp_spans_t spans = {sp, 2, 2};
  _hm_smp_spans_sort(&spans);
  CHECK(_hm_smp_spans_find(&spans, A - 1) == NULL);
  CHECK(_hm_smp_spans_find(&spans, B + 100)->site == 2);
  credits_t c;
  _hm_smp_sink_t sk = sink_of(&c);
  memset(&c, 0, sizeof c);
  uint64_t got = _hm_smp_perf_drain(&p, &spans, &sk);
  CHECK_EQ_INT(got, 6);
  CHECK_EQ_INT(c.loads[1], 5 * HM_SMP_FIX);
  CHECK_EQ_INT(c.stores[1], 0);
  CHECK_EQ_INT(c.stores[2], HM_SMP_FIX);
  CHECK_EQ_INT(c.loads[2], 0);
  CHECK_EQ_INT(p.samples, 9);
  CHECK_EQ_INT(p.foreign, 1);
  CHECK_EQ_INT(p.no_addr, 1);
  CHECK(pc->data_tail == pos); /* consumed */
  /* nothing new: nothing credited again */
  CHECK_EQ_INT(_hm_smp_perf_drain(&p, &spans, &sk), 0);
  CHECK_EQ_INT(c.loads[1], 5 * HM_SMP_FIX);
  CHECK(_hm_smp_perf_period(&p) == 20011.0);
  free(mem);
}

/* ---- referenced bits (sampler_refs.c) ---- */
/* Credits smaps text to n spans into a zeroed c, with the Rss of the last
 * drain (prev) and this one's (cur) where given. */
static _hm_smp_refs_walk_t walk_text(char *text, _hm_smp_span_t *sp, size_t n, credits_t *c,
                                     const _hm_smp_rss_t *prev, _hm_smp_rss_t *cur) {
  _hm_smp_spans_t spans = {sp, n, n};
  _hm_smp_sink_t sk = sink_of(c);
  memset(c, 0, sizeof *c);
  _hm_smp_refs_walk_t w = {&spans, &sk, HM_SMP_LOAD, 4096, 0, 0, 0, prev, cur, 0};
  _hm_smp_refs_credit_text(text, strlen(text), &w);
  w.spans = NULL, w.sink = NULL; /* theirs were this function's */
  return w;
}

/* smaps text as the kernel writes it: a block alone in its mapping takes
 * the mapping's whole count; a mapping holding two blocks is shared by
 * overlap; a file mapping's bits are not what clear_refs 2 clears. */
static void test_refs_text(void) {
  char text[] =
      "7f0000100000-7f0000201000 rw-p 00000000 00:00 0 \n"
      "Size:               1028 kB\n"
      "Referenced:          400 kB\n"
      "AnonHugePages:         0 kB\n"
      "VmFlags: rd wr mr mw me ac \n"
      "7f0000201000-7f0000202000 ---p 00000000 00:00 0 \n"
      "Referenced:            0 kB\n"
      "7f0000400000-7f0000800000 rw-p 00000000 00:00 0          [heap]\n"
      "Referenced:         2048 kB\n"
      "7f0001000000-7f0001100000 r--p 00000000 08:01 123456     /usr/lib/libx.so\n"
      "Referenced:          512 kB\n";
  /* site 1: the whole first mapping past a 16-byte header; sites 2 and 3:
   * the first half and the last quarter of the heap mapping */
  _hm_smp_span_t sp[3] = {{0x7f0000100010ull, 0x7f0000200fffull, 1, 0},
                          {0x7f0000400000ull, 0x7f0000600000ull, 2, 0},
                          {0x7f0000700000ull, 0x7f0000800000ull, 3, 0}};
  credits_t c;
  _hm_smp_refs_walk_t w = walk_text(text, sp, 3, &c, NULL, NULL);
  CHECK_EQ_INT(w.mappings, 4);
  CHECK_EQ_INT(c.loads[1], 100 * HM_SMP_FIX); /* 400 kB: 100 pages */
  CHECK_EQ_INT(c.loads[2], 256 * HM_SMP_FIX); /* half of 512 pages */
  CHECK_EQ_INT(c.loads[3], 128 * HM_SMP_FIX); /* a quarter */
  CHECK_EQ_INT(c.stores[1] + c.stores[2] + c.stores[3], 0);
  CHECK_EQ_INT(w.anon_pages, 100 + 512); /* the library's 128 are not */
  CHECK_EQ_INT(w.total, (100 + 256 + 128) * HM_SMP_FIX);
}

/* First touches: a live block's mapping that gained resident pages since
 * the last drain has them taken off its loads and credited as first
 * touches (an array initialised, not reused); a freed block keeps them as
 * loads; a mapping the last drain did not have counts all it holds as
 * first touched. Each drain records the mappings' Rss for the next. */
static void test_refs_first_touch(void) {
  char text[] =
      "7f0000100000-7f0000200000 rw-p 00000000 00:00 0 \n"
      "Rss:                1024 kB\n"
      "Referenced:         1024 kB\n"
      "7f0000300000-7f0000400000 rw-p 00000000 00:00 0 \n"
      "Rss:                1024 kB\n"
      "Referenced:          800 kB\n"
      "7f0000500000-7f0000600000 rw-p 00000000 00:00 0 \n"
      "Rss:                 512 kB\n"
      "Referenced:          512 kB\n"
      "7f0000700000-7f0000800000 rw-p 00000000 00:00 0 \n"
      "Rss:                 256 kB\n"
      "Referenced:          256 kB\n";
  /* the last drain: the first mapping held 256 kB, the second all of its
   * 1024, the third is new, the fourth had other bounds (moved) */
  uint64_t before_v[] = {0x7f0000100000ull, 0x7f0000200000ull, 256u << 10,
                         0x7f0000300000ull, 0x7f0000400000ull, 1024u << 10,
                         0x7f0000700000ull, 0x7f0000780000ull, 256u << 10};
  _hm_smp_rss_t before = {before_v, 3, 3}, now = {NULL, 0, 0};
  uint64_t now_v[12];
  now.v = now_v, now.cap = 4;
  _hm_smp_span_t sp[4] = {{0x7f0000100000ull, 0x7f0000200000ull, 1, 0},
                          {0x7f0000300000ull, 0x7f0000400000ull, 2, 0},
                          {0x7f0000500000ull, 0x7f0000600000ull, 3, 32768},
                          {0x7f0000700000ull, 0x7f0000800000ull, 0, 0}};
  credits_t c;
  _hm_smp_refs_walk_t w = walk_text(text, sp, 4, &c, &before, &now);
  CHECK_EQ_INT(c.loads[1], 64 * HM_SMP_FIX); /* 256 pages, 192 of them new */
  CHECK_EQ_INT(c.loads[2], 200 * HM_SMP_FIX); /* nothing new: all 200 */
  CHECK_EQ_INT(c.loads[3], 64 * HM_SMP_FIX);  /* freed half way: 128 pages x 1/2 */
  CHECK_EQ_INT(c.loads[0], 0);                /* moved: all of it new */
  CHECK_EQ_INT(w.fresh_pages, 192 + 64);      /* the freed block's are kept */
  CHECK_EQ_INT(c.firsts[1], 192 * HM_SMP_FIX);
  CHECK_EQ_INT(c.firsts[2] + c.firsts[3], 0);
  CHECK_EQ_INT(c.firsts[0], 64 * HM_SMP_FIX);
  CHECK_EQ_INT(w.total, (64 + 200 + 64) * HM_SMP_FIX); /* loads only */
  CHECK_EQ_INT(now.n, 4);
  CHECK(now.v[2] == 1024u << 10 && now.v[11] == 256u << 10);
  /* what the written-page scan takes off a block: its mapping's growth */
  CHECK(_hm_smp_rss_grown(&now, &before, 0x7f0000100010ull, 0x7f0000101000ull) == 768u << 10);
  CHECK(_hm_smp_rss_grown(&now, &before, 0x7f0000300000ull, 0x7f0000400000ull) == 0);
  CHECK(_hm_smp_rss_grown(&now, &before, 0x7f0000580000ull, 0x7f0000600000ull) == 512u << 10);
  CHECK(_hm_smp_rss_grown(&now, &before, 0x7f0000200000ull, 0x7f0000201000ull) == 0); /* none */
}

typedef struct spin_s {
  volatile char *base;
  size_t n, page;
  atomic_int stop;
  atomic_ulong passes; /* whole sweeps over the pages */
} spin_t;

static void *spinner(void *arg) {
  spin_t *t = arg;
  while (!atomic_load(&t->stop)) {
    for (size_t i = 0; i < t->n; i++) t->base[i * t->page]++;
    atomic_fetch_add(&t->passes, 1);
  }
  return NULL;
}

/* Busy for at least `ns`, and until the spinner has swept all its pages
 * twice since the call (so once wholly after the last drain's clear): on
 * a loaded machine the spinner may be off its CPU for a whole interval,
 * and what is checked is the sampler, not the scheduler. A hang guard of
 * 10 s. */
static void hm__spin_interval(spin_t *t, uint64_t ns) {
  unsigned long p0 = atomic_load(&t->passes);
  uint64_t t0 = _hm_prim_now_ns();
  for (;;) {
    uint64_t dt = _hm_prim_now_ns() - t0;
    if ((dt >= ns && atomic_load(&t->passes) >= p0 + 2) || dt > 10000000000ull) return;
  }
}

/* A thread touching a's pages over and over: each interval sees all of
 * them, the short windows after a drain's clear some, and none of the
 * idle b's. */
static void hm__spin_live(_hm_smp_refs_t *r, _hm_smp_spans_t *spans, char *a, size_t n,
                          size_t page) {
  spin_t t = {a, n, page, 0, 0};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, spinner, &t) == 0);
  credits_t c;
  _hm_smp_sink_t sk = sink_of(&c);
  /* a page whose translation stays in a TLB sets no bit again unless the
   * clear flushes it: without hm__clear's flush, 1-3 of these 20 drains
   * saw more than half of the 256 pages, however hard the spinner worked */
  int whole = 0;
  for (int k = 0; k < 20; k++) {
    memset(&c, 0, sizeof c);
    /* an interval (the spinner's passes take 10-100 us), busy: a thread
     * asleep here would let the spinner move to a CPU with a cold TLB */
    hm__spin_interval(&t, 2000000u);
    _hm_smp_refs_drain(r, spans, &sk, NULL);
    whole += c.loads[1] >= n / 2 * HM_SMP_FIX;
    CHECK_EQ_INT(c.loads[2], 0);
  }
  memset(&c, 0, sizeof c);
  /* the spinner may be off its CPU for many windows on a busy machine:
   * drains until both short windows saw it (a hang guard of 10 s) */
  int k = 0;
  for (uint64_t t0 = _hm_prim_now_ns(); !(c.shorts[1] && c.shorts2[1]) &&
                                        _hm_prim_now_ns() - t0 < 10000000000ull;
       k++)
    _hm_smp_refs_drain(r, spans, &sk, NULL);
  atomic_store(&t.stop, 1);
  pthread_join(th, NULL);
  CHECK(whole >= 10); /* each interval held two whole sweeps: TLB slack only */
  CHECK(c.shorts[1] > 0 && c.shorts2[1] > 0);
  CHECK_EQ_INT(c.shorts[2] + c.shorts2[2], 0);
  /* the windows' end reaches the sink as a pair, never as a credit */
  CHECK(c.pairs > 0 && c.ratio_ok == c.pairs);
  CHECK_EQ_INT(c.loads[0] + c.stores[0] + c.shorts[0] + c.shorts2[0], 0);
  CHECK(c.shorts[1] <= (uint64_t)k * n * HM_SMP_FIX); /* at most a's pages a window */
  CHECK(_hm_smp_refs_shorts(r) > 0);
}

/* The sampler live on this kernel: pages touched between two drains are
 * credited to their block, untouched ones are not, and the next drain
 * sees only what was touched since. */
static void test_refs_live(void) {
  _hm_smp_cfg_t cfg = {"/", 10000, 0, 0, NULL, NULL};
  char probed[256], why[256];
  if (_hm_smp_refs_probe(&cfg, probed, sizeof probed, why, sizeof why)) {
    printf("# refs live test skipped: %s\n", why);
    return;
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 256;
  /* [guard][a: n pages][guard][b: n - 1 pages][guard]: two mappings that
   * merge with nothing */
  char *m = mmap(NULL, (2 * n + 2) * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  if (m == MAP_FAILED) return;
  char *a = m + page, *b = a + (n + 1) * page;
  CHECK(mprotect(a, n * page, PROT_READ | PROT_WRITE) == 0);
  CHECK(mprotect(b, (n - 1) * page, PROT_READ | PROT_WRITE) == 0);
  memset(a, 1, n * page);
  memset(b, 1, (n - 1) * page);
  _hm_smp_refs_t *r = NULL;
  CHECK_EQ_INT(_hm_smp_refs_start(&cfg, &r, why, sizeof why), 0);
  CHECK(r && r->touch_ns >= 0.0);
  if (!r) return;
  _hm_smp_span_t sp[2] = {{(uintptr_t)a, (uintptr_t)a + n * page, 1, 0},
                          {(uintptr_t)b, (uintptr_t)b + (n - 1) * page, 2, 0}};
  _hm_smp_spans_t spans = {sp, 2, 2};
  for (size_t i = 0; i < n / 4; i++) a[i * page]++; /* a quarter of a */
  credits_t c;
  _hm_smp_sink_t sk = sink_of(&c);
  memset(&c, 0, sizeof c);
  _hm_smp_refs_drain(r, &spans, &sk, NULL);
  CHECK_EQ_INT(c.loads[1], (n / 4) * HM_SMP_FIX);
  CHECK_EQ_INT(c.loads[2], 0);
  memset(&c, 0, sizeof c);
  for (size_t i = 0; i < n - 1; i++) b[i * page]++;
  _hm_smp_refs_drain(r, &spans, &sk, NULL);
  CHECK_EQ_INT(c.loads[1], 0);
  CHECK_EQ_INT(c.loads[2], (n - 1) * HM_SMP_FIX);
  /* nothing touched after the clear */
  CHECK_EQ_INT(c.shorts[1] + c.shorts[2] + c.shorts2[1] + c.shorts2[2], 0);
  CHECK(_hm_smp_refs_interval_ns(r) >= 10000000u);
  hm__spin_live(r, &spans, a, n, page);
  _hm_smp_refs_stop(r);
  munmap(m, (2 * n + 2) * page);
}

typedef struct touch_s {
  volatile char *base;
  size_t from, to, page;
} touch_t;

static void *toucher(void *arg) {
  touch_t *t = arg;
  for (size_t i = t->from; i < t->to; i++) t->base[i * t->page] = 1;
  return NULL;
}

static void test_live_software_event(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  _hm_smp_perf_t *p = calloc(1, sizeof *p);
  CHECK(p != NULL);
  if (!p) return;
  p->kind = HM_SMP_PEBS; /* buffer i = 0: loads */
  p->nattr = 1;
  p->page = page;
  p->pid = getpid();
  struct perf_event_attr *a = &p->attr[0];
  a->size = sizeof *a;
  a->type = PERF_TYPE_SOFTWARE;
  a->config = PERF_COUNT_SW_PAGE_FAULTS;
  a->sample_period = 1;
  a->sample_type = PEBS_TYPE;
  a->exclude_kernel = 1;
  snprintf(p->event[0], sizeof p->event[0], "software/page-faults/");
  _hm_smp_cfg_t cfg = {"/", 10000, 0, getpid(), NULL, NULL};
  char why[256] = "";
  int rc = hm__open_all(&cfg, p, why, sizeof why);
  if (rc == -EACCES || rc == -EPERM || rc == -ENOSYS || rc == -ENOENT) {
    printf("live perf test skipped: %s\n", why);
    _hm_smp_perf_stop(p);
    return;
  }
  CHECK_EQ_INT(rc, 0);
  if (rc) {
    printf("%s\n", why);
    _hm_smp_perf_stop(p);
    return;
  }
  CHECK(p->nbufs >= 1);
  enum { PAGES = 48 };
  size_t len = PAGES * page;
  char *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(region != MAP_FAILED);
  if (region == MAP_FAILED) return;
  madvise(region, len, MADV_NOHUGEPAGE);
  /* first half here, second half in a thread created now */
  touch_t t0 = {region, 0, PAGES / 2, page}, t1 = {region, PAGES / 2, PAGES, page};
  toucher(&t0);
  pthread_t th;
  CHECK_EQ_INT(pthread_create(&th, NULL, toucher, &t1), 0);
  pthread_join(th, NULL);
  _hm_smp_span_t sp[1] = {{(uintptr_t)region, (uintptr_t)region + len, 3, 0}};
  _hm_smp_spans_t spans = {sp, 1, 1};
  credits_t c;
  _hm_smp_sink_t sk = sink_of(&c);
  memset(&c, 0, sizeof c);
  uint64_t got = _hm_smp_perf_drain(p, &spans, &sk);
  /* one fault per page, each a sample with the page's address */
  CHECK_EQ_INT(got, PAGES);
  CHECK_EQ_INT(c.loads[3], PAGES * HM_SMP_FIX);
  CHECK_EQ_INT(p->foreign, 0);
  CHECK(p->samples >= PAGES); /* the test's other faults too */
  CHECK_EQ_INT(p->bad, 0);
  munmap(region, len);
  _hm_smp_perf_stop(p);
}

/* Writes PSI's cpu file under root with `some` total us (NULL: removed). */
static void write_psi(const char *root, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/proc/pressure/cpu", root);
  if (!text) {
    (void)unlink(path);
    return;
  }
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* A pair is contended when PSI's cpu "some" time grew by more than
 * HM__BUSY_SHARE of its span; no PSI (or a file without the line): never. */
static void test_refs_contended(void) {
  char root[] = "/tmp/hm-test-psi-XXXXXX", sub[64];
  CHECK(mkdtemp(root) != NULL);
  snprintf(sub, sizeof sub, "%s/proc", root);
  CHECK(mkdir(sub, 0700) == 0);
  snprintf(sub, sizeof sub, "%s/proc/pressure", root);
  CHECK(mkdir(sub, 0700) == 0);
  _hm_smp_refs_t r;
  memset(&r, 0, sizeof r);
  r.root = root;
  const char *full = "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  char text[256];
  snprintf(text, sizeof text, "some avg10=1.00 avg60=0.50 avg300=0.10 total=1000\n%s", full);
  write_psi(root, text);
  CHECK(hm__cpu_wait_us(&r) == 1000);
  uint64_t since = _hm_prim_now_ns() - 10000000u; /* a pair of 10 ms */
  snprintf(text, sizeof text, "some avg10=1.00 avg60=0.50 avg300=0.10 total=1300\n%s", full);
  write_psi(root, text); /* 0.3 ms waited: 3% */
  CHECK(!hm__contended(&r, 1000, since));
  snprintf(text, sizeof text, "some avg10=1.00 avg60=0.50 avg300=0.10 total=2500\n%s", full);
  write_psi(root, text); /* 1.5 ms: 15% */
  CHECK(hm__contended(&r, 1000, since));
  write_psi(root, full); /* no "some" line */
  CHECK(hm__cpu_wait_us(&r) == -1 && !hm__contended(&r, 1000, since));
  write_psi(root, NULL);
  CHECK(hm__cpu_wait_us(&r) == -1 && !hm__contended(&r, -1, since));
  CHECK(rmdir(sub) == 0);
  snprintf(sub, sizeof sub, "%s/proc", root);
  CHECK(rmdir(sub) == 0 && rmdir(root) == 0);
}

int main(void) {
  test_parse();
  test_ibs();
  test_spe();
  test_encode();
  test_select();
  test_drain();
  test_refs_text();
  test_refs_first_touch();
  test_refs_live();
  test_refs_contended();
  test_live_software_event();
  return hm_test_done("test_sampler");
}
