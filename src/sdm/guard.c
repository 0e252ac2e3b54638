/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's guards against what would otherwise take the node down or
 * lose data without a word:
 *  - a budget above the machine's memory (a typo such as 1T for 1G): the
 *    slot table is sized for the budget (pager.c), and a program trusting
 *    such a budget would push the node into the OOM killer;
 *  - an I/O error on the backing store that a retry did not cure: a fill
 *    cannot hand the program its data and a write-back cannot free the
 *    cache, so carrying on means zeros where data was, or a hang. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "sdm/sdm.h"

int _hm_sdm_check_budget(hm_ctx_t *ctx, uint64_t budget) {
  uint64_t ram = 0;
  if (_hm_prim_vm_phys_mem(&ram) || budget <= ram) return 0;
  if (ctx && _hm_opt_u64(ctx, HM_OPT_BUDGET_OVER_RAM)) return 0;
  char b[32], r[32];
  _hm_format_size(budget, b, sizeof b);
  _hm_format_size(ram, r, sizeof r);
  return _hm_error(ctx, -EINVAL,
                   "fast budget %s is more than this machine's memory (%s): a typo? set "
                   "HETMEM_BUDGET_OVER_RAM=1 to allow it",
                   b, r);
}

_Noreturn void _hm_sdm_io_fatal(const char *dir, int is_write, uint64_t off, size_t len, int err) {
  char msg[HM_PATH_MAX + 256], sz[32];
  _hm_format_size(len, sz, sizeof sz);
  int n = snprintf(msg, sizeof msg,
                   "hetmem: I/O error on the storage tier %s: cannot %s %s at offset %llu of "
                   "a backing file (%s); the program cannot go on without that data\n",
                   dir, is_write ? "write back" : "read", sz, (unsigned long long)off,
                   strerror(err < 0 ? -err : err));
  if (n > 0) _hm_prim_stderr(msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  _hm_prim_vm_die(SIGBUS);
}
