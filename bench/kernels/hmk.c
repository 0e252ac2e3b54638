/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared plumbing of the hm-kernel-* programs; see hmk.h for the contract. */
#include "hmk.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

#include "size.h"

static const char *hmk__name = "kernel";

void hmk_fail(int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One line, whatever the message holds. */
  for (char *p = msg; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  fprintf(stderr, "hm-kernel-%s: %s\n", hmk__name, msg);
  fflush(stdout);
  exit(code);
}

void *hmk_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) hmk_fail(HMK_EXIT_RESOURCE, "cannot allocate %zu bytes", bytes);
  return p;
}

double hmk_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int hmk_parse_size(const char *text, uint64_t *out) { return _hm_parse_size(text, out) ? -1 : 0; }

static int hmk__in_choices(const char *choices, const char *v) {
  size_t n = strlen(v);
  const char *p = choices;
  while (p && *p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0) return 1;
    p = bar ? bar + 1 : NULL;
  }
  return 0;
}

static void hmk__usage(const hmk_args_t *a, const hmk_opt_t *opts, size_t nopts) {
  printf("usage: hm-kernel-%s [options]\n%s\n\n", a->kernel, a->summary ? a->summary : "");
  printf("  --bytes SIZE       total data footprint (4G, 512MiB, 1.5GB; default %llu)\n",
         (unsigned long long)a->bytes);
  printf("  --threads N        OpenMP threads (default: OMP_NUM_THREADS or all CPUs)\n");
  printf("  --reps N           timed repetitions (default %d)\n", a->reps);
  printf("  --min-time SECONDS repeat past --reps until the timed repetitions sum to this\n"
         "                     (default 0; at most %d repetitions)\n",
         a->max_reps > 0 ? a->max_reps : 100000);
  printf("  --stat best|median which repetition time is time_s (default best)\n");
  if (a->variants) printf("  --variant %-8s variant (default %s)\n", a->variants, a->variant);
  for (size_t i = 0; i < nopts; i++) printf("  %-18s %s\n", opts[i].name, opts[i].help);
  printf("\nPrints one line of JSON (schema_version %d) on stdout; exit 0 only when\n"
         "the result was verified (2: bad arguments, 3: wrong result, 4: no memory).\n",
         HMK_SCHEMA_VERSION);
}

static uint64_t hmk__count(const char *flag, const char *v, uint64_t min, uint64_t max) {
  uint64_t x;
  if (hmk_parse_size(v, &x) != 0) hmk_fail(HMK_EXIT_USAGE, "%s: '%s' is not a number", flag, v);
  if (x < min || x > max)
    hmk_fail(HMK_EXIT_USAGE, "%s: %s is out of range [%llu, %llu]", flag, v, (unsigned long long)min,
             (unsigned long long)max);
  return x;
}

/* --flag=value or --flag: the flag into flag[64], the value (or NULL) */
static const char *hmk__split(const char *arg, char flag[64]) {
  if (strncmp(arg, "--", 2) != 0) hmk_fail(HMK_EXIT_USAGE, "unexpected argument '%s'", arg);
  const char *eq = strchr(arg, '=');
  size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
  if (flen >= 64) hmk_fail(HMK_EXIT_USAGE, "unknown option '%s'", arg);
  memcpy(flag, arg, flen);
  flag[flen] = '\0';
  return eq ? eq + 1 : NULL;
}

static int hmk__common(const hmk_args_t *a, const char *flag) {
  return !strcmp(flag, "--bytes") || !strcmp(flag, "--threads") || !strcmp(flag, "--reps") ||
         !strcmp(flag, "--min-time") || !strcmp(flag, "--stat") || (a->variants && !strcmp(flag, "--variant"));
}

static double hmk__seconds(const char *val) {
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (end == val || *end || errno == ERANGE || !isfinite(v) || v < 0 || v > 3600)
    hmk_fail(HMK_EXIT_USAGE, "--min-time: '%s' is not a number of seconds in [0, 3600]", val);
  return v;
}

/* one of the options every kernel takes (hmk__common) */
static void hmk__set_common(hmk_args_t *a, const char *flag, const char *val) {
  if (!strcmp(flag, "--bytes")) {
    if (hmk_parse_size(val, &a->bytes) != 0)
      hmk_fail(HMK_EXIT_USAGE, "--bytes: '%s' is not a size (e.g. 4096, 64K, 512MiB, 4G)", val);
  } else if (!strcmp(flag, "--threads")) {
    a->threads = (int)hmk__count(flag, val, 1, 4096);
  } else if (!strcmp(flag, "--reps")) {
    a->reps = (int)hmk__count(flag, val, 1, 100000);
  } else if (!strcmp(flag, "--min-time")) {
    a->min_time = hmk__seconds(val);
  } else if (!strcmp(flag, "--stat")) {
    if (!hmk__in_choices("best|median", val))
      hmk_fail(HMK_EXIT_USAGE, "--stat: '%s' is not one of best|median", val);
    a->stat = val;
  } else { /* --variant */
    if (!hmk__in_choices(a->variants, val))
      hmk_fail(HMK_EXIT_USAGE, "--variant: '%s' is not one of %s", val, a->variants);
    a->variant = val;
  }
}

/* one of the kernel's own options (not a flag) */
static void hmk__set_opt(const hmk_opt_t *o, const char *flag, const char *val) {
  if (o->kind == HMK_OPT_SIZE) {
    if (hmk_parse_size(val, (uint64_t *)o->dst) != 0) hmk_fail(HMK_EXIT_USAGE, "%s: '%s' is not a size", flag, val);
  } else if (o->kind == HMK_OPT_COUNT) {
    *(uint64_t *)o->dst = hmk__count(flag, val, o->min, o->max);
  } else { /* HMK_OPT_CHOICE */
    if (!hmk__in_choices(o->choices, val)) hmk_fail(HMK_EXIT_USAGE, "%s: '%s' is not one of %s", flag, val, o->choices);
    *(const char **)o->dst = val;
  }
}

static const hmk_opt_t *hmk__find(const hmk_opt_t *opts, size_t nopts, const char *flag) {
  const hmk_opt_t *o = NULL;
  for (size_t k = 0; k < nopts; k++)
    if (strcmp(opts[k].name, flag) == 0) o = &opts[k];
  return o;
}

static void hmk__check(const hmk_args_t *a) {
  if (a->bytes < a->min_bytes)
    hmk_fail(HMK_EXIT_USAGE, "--bytes %llu is too small (at least %llu for %s)", (unsigned long long)a->bytes,
             (unsigned long long)a->min_bytes, a->kernel);
  if (a->max_reps > 0 && a->reps > a->max_reps)
    hmk_fail(HMK_EXIT_USAGE, "--reps must be <= %d for %s", a->max_reps, a->kernel);
}

void hmk_parse(hmk_args_t *a, int argc, char **argv, const hmk_opt_t *opts, size_t nopts) {
  hmk__name = a->kernel;
  a->threads = omp_get_max_threads();
  a->stat = "best";
  a->min_time = 0.0;
  a->inject_error = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      hmk__usage(a, opts, nopts);
      exit(0);
    }
    char flag[64];
    const char *val = hmk__split(arg, flag);
    const hmk_opt_t *o = hmk__find(opts, nopts, flag);
    int is_flag = !strcmp(flag, "--inject-error") || (o && o->kind == HMK_OPT_FLAG);
    if (!is_flag && !o && !hmk__common(a, flag)) hmk_fail(HMK_EXIT_USAGE, "unknown option '%s' (see --help)", flag);
    if (is_flag) {
      if (val) hmk_fail(HMK_EXIT_USAGE, "%s takes no value", flag);
      *(o ? (int *)o->dst : &a->inject_error) = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) hmk_fail(HMK_EXIT_USAGE, "%s needs a value", flag);
      val = argv[++i];
    }
    if (hmk__common(a, flag))
      hmk__set_common(a, flag, val);
    else
      hmk__set_opt(o, flag, val);
  }
  hmk__check(a);
  omp_set_dynamic(0);
  omp_set_num_threads(a->threads);
}

int hmk_more(hmk_args_t *a, hmk_result_t *r) {
  if (r->n < a->reps) return 1;
  if (a->min_time <= 0.0) return 0;
  int cap = a->max_reps > 0 ? a->max_reps : 100000;
  if (r->n >= cap) return 0;
  double sum = 0.0;
  for (int i = 0; i < r->n; i++) sum += r->times[i];
  if (sum >= a->min_time) return 0;
  double *t = realloc(r->times, sizeof(double) * (size_t)(r->n + 1));
  if (!t) hmk_fail(HMK_EXIT_RESOURCE, "out of memory");
  r->times = t;
  a->reps = r->n + 1;
  return 1;
}

static void hmk__append(hmk_result_t *r, const char *s) {
  size_t n = strlen(s);
  if (r->extra_len + n + 1 > r->extra_cap) {
    size_t cap = (r->extra_cap ? r->extra_cap * 2 : 1024) + n;
    char *p = realloc(r->extra, cap);
    if (!p) hmk_fail(HMK_EXIT_RESOURCE, "out of memory");
    r->extra = p;
    r->extra_cap = cap;
  }
  memcpy(r->extra + r->extra_len, s, n + 1);
  r->extra_len += n;
}

void hmk_result_init(hmk_result_t *r, const hmk_args_t *a) {
  memset(r, 0, sizeof *r);
  r->times = hmk_alloc(sizeof(double) * (size_t)a->reps);
}

void hmk_extra_raw(hmk_result_t *r, const char *key, const char *json) {
  hmk__append(r, ",\"");
  hmk__append(r, key);
  hmk__append(r, "\":");
  hmk__append(r, json);
}

static void hmk__fmt_num(char *buf, size_t len, double v) {
  if (!isfinite(v))
    snprintf(buf, len, "null");
  else
    snprintf(buf, len, "%.9g", v);
}

void hmk_extra_num(hmk_result_t *r, const char *key, double v) {
  char b[64];
  hmk__fmt_num(b, sizeof b, v);
  hmk_extra_raw(r, key, b);
}

void hmk_extra_u64(hmk_result_t *r, const char *key, uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  hmk_extra_raw(r, key, b);
}

void hmk_extra_str(hmk_result_t *r, const char *key, const char *v) {
  /* Kernel strings are our own identifiers: no quoting needed beyond this. */
  char b[256];
  snprintf(b, sizeof b, "\"%s\"", v);
  hmk_extra_raw(r, key, b);
}

static int hmk__cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

void hmk_emit(const hmk_args_t *a, hmk_result_t *r) {
  if (r->n <= 0) hmk_fail(HMK_EXIT_RESOURCE, "no timed repetition ran");
  double *s = hmk_alloc(sizeof(double) * (size_t)r->n);
  memcpy(s, r->times, sizeof(double) * (size_t)r->n);
  qsort(s, (size_t)r->n, sizeof(double), hmk__cmp);
  double best = s[0];
  double median = (r->n % 2) ? s[r->n / 2] : 0.5 * (s[r->n / 2 - 1] + s[r->n / 2]);
  double worst = s[r->n - 1];
  free(s);
  double t = strcmp(a->stat, "median") == 0 ? median : best;
  char b1[64], b2[64], b3[64], b4[64], b5[64], b6[64], b7[64], b8[64], b9[64];
  printf("{\"schema_version\":%d,\"kernel\":\"%s\",\"variant\":\"%s\",\"bytes\":%llu,"
         "\"threads\":%d,\"reps\":%d,\"times_s\":[",
         HMK_SCHEMA_VERSION, a->kernel, a->variant ? a->variant : "default",
         (unsigned long long)a->bytes, a->threads, a->reps);
  for (int i = 0; i < r->n; i++) {
    hmk__fmt_num(b1, sizeof b1, r->times[i]);
    printf("%s%s", i ? "," : "", b1);
  }
  hmk__fmt_num(b1, sizeof b1, t);
  hmk__fmt_num(b2, sizeof b2, best);
  hmk__fmt_num(b3, sizeof b3, median);
  hmk__fmt_num(b4, sizeof b4, worst);
  hmk__fmt_num(b5, sizeof b5, r->bytes_moved);
  hmk__fmt_num(b6, sizeof b6, r->flops);
  hmk__fmt_num(b7, sizeof b7, t > 0 ? r->bytes_moved / t / 1e9 : 0.0);
  hmk__fmt_num(b8, sizeof b8, t > 0 ? r->flops / t / 1e9 : 0.0);
  hmk__fmt_num(b9, sizeof b9, r->init_s);
  printf("],\"time_s\":%s,\"time_stat\":\"%s\",\"time_best_s\":%s,\"time_median_s\":%s,"
         "\"time_worst_s\":%s,\"bytes_moved\":%s,\"flops\":%s,\"gbs\":%s,\"gflops\":%s,"
         "\"init_s\":%s,",
         b1, a->stat, b2, b3, b4, b5, b6, b7, b8, b9);
  hmk__fmt_num(b1, sizeof b1, a->min_time);
  printf("\"min_time_s\":%s,", b1);
  hmk__fmt_num(b1, sizeof b1, r->verify_s);
  printf("\"verify_s\":%s,\"verified\":true%s}\n", b1, r->extra ? r->extra : "");
  fflush(stdout);
  free(r->times);
  free(r->extra);
  r->times = NULL;
  r->extra = NULL;
}

size_t hmk_isqrt(size_t n) {
  size_t m = (size_t)sqrt((double)n);
  while (m > 0 && m * m > n) m--;
  while ((m + 1) * (m + 1) <= n) m++;
  return m;
}

size_t hmk_tile_for(uint64_t budget, size_t n, size_t *nt) {
  size_t most = (size_t)sqrt((double)budget / (8.0 * 3.0 * 8.0)) / 16 * 16;
  if (most < 16) most = 16;
  size_t k = (n + most - 1) / most;
  if (k == 0) k = 1;
  size_t nb = n / k / 16 * 16;
  if (nb < 16) nb = 16;
  *nt = n / nb < 1 ? 1 : n / nb;
  if (*nt > k) *nt = k;
  return nb;
}

void hmk_done_with(const void *p, size_t bytes) {
  /* whole pages inside the range only: the pages at its ends may hold
   * neighbouring data still in use */
  uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, e = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
  if (e > a) (void)madvise((void *)a, e - a, MADV_COLD);
}

void hmk_will_need(const void *p, size_t bytes) {
  /* page-rounded outward: allocators return blocks inside pages */
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, e = ((uintptr_t)p + bytes + 4095) & ~(uintptr_t)4095;
  (void)madvise((void *)a, e - a, MADV_WILLNEED);
}
