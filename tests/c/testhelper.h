/* SPDX-License-Identifier: BSD-3-Clause */
/* A minimal check framework for the C tests (ctest runs each program; pytest
 * runs ctest). CHECK failures print file:line and the expression and make
 * the program exit non-zero at the end. */
#ifndef HM_TESTHELPER_H
#define HM_TESTHELPER_H
#include <stdio.h>
#include <stdlib.h>

static int hm_test_failures = 0;
static int hm_test_checks = 0;

#define CHECK(expr)                                                                  \
  do {                                                                               \
    hm_test_checks++;                                                                \
    if (!(expr)) {                                                                   \
      hm_test_failures++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr);      \
    }                                                                                \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                           \
  do {                                                                               \
    long long hm_a_ = (long long)(a), hm_b_ = (long long)(b);                        \
    hm_test_checks++;                                                                \
    if (hm_a_ != hm_b_) {                                                            \
      hm_test_failures++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__,    \
              __LINE__, #a, #b, hm_a_, hm_b_);                                       \
    }                                                                                \
  } while (0)

static inline int hm_test_done(const char *name) {
  printf("%s: %d checks, %d failed\n", name, hm_test_checks, hm_test_failures);
  return hm_test_failures ? 1 : 0;
}
#endif
