/* SPDX-License-Identifier: BSD-3-Clause */
/* WILLNEED's reference mark (_hm_sdm_mark_willneed, region.c): every
 * resident unit of the range gets its bit, nothing else does, whether the
 * range is walked unit by unit (fewer units than slots in use) or the slots
 * in use are (a range larger than what is resident: the walk was O(units
 * of the range) under the pager lock, a 100 GiB region's 400 k units for
 * one advice). White box, on a pager struct with only the fields the mark
 * uses: two regions, some units resident, in transit or absent. */
#include <stdlib.h>
#include <string.h>

#include "sdm/pager_int.h"
#include "testhelper.h"

#define NUNITS 64u
#define NSLOTS 12u

static _hm_sdm_unit_t units[2][NUNITS];
static _hm_sdm_region_t regs[2];
static _hm_sdm_slot_t slots[NSLOTS];
static uint32_t act[NSLOTS];

/* Slot k holds unit u of region g, in state st. */
static void place(hm_pager_t *p, uint32_t k, unsigned g, uint32_t u, uint8_t st) {
  slots[k].used = 1;
  slots[k].reg = &regs[g];
  slots[k].unit = u;
  units[g][u].state = st;
  units[g][u].slot = (int32_t)k;
  act[p->nact++] = k;
}

static void setup(hm_pager_t *p) {
  memset(p, 0, sizeof *p);
  memset(slots, 0, sizeof slots);
  for (unsigned g = 0; g < 2; g++) {
    memset(&regs[g], 0, sizeof regs[g]);
    regs[g].units = units[g];
    regs[g].nunits = NUNITS;
    for (uint32_t u = 0; u < NUNITS; u++)
      units[g][u] = (_hm_sdm_unit_t){.state = HM_U_NONE, .slot = -1};
  }
  p->slots = slots;
  p->act = act;
  p->nslots = NSLOTS;
  static const uint32_t at[] = {0, 3, 10, 20, 21, 40, 63};
  for (uint32_t k = 0; k < sizeof at / sizeof at[0]; k++) place(p, k, 0, at[k], HM_U_RES);
  place(p, 7, 0, 30, HM_U_FILLING); /* in transit: not marked */
  place(p, 8, 1, 3, HM_U_RES);      /* the same unit of another region */
  place(p, 9, 1, 20, HM_U_RES);
}

/* The marks after advising [u0, u1] of region 0, checked against the rule. */
static void check(uint32_t u0, uint32_t u1) {
  hm_pager_t p;
  setup(&p);
  _hm_sdm_mark_willneed(&p, &regs[0], u0, u1);
  for (uint32_t k = 0; k < p.nact; k++) {
    const _hm_sdm_slot_t *S = &slots[act[k]];
    int want = S->reg == &regs[0] && S->unit >= u0 && S->unit <= u1 &&
               units[0][S->unit].state == HM_U_RES;
    CHECK_EQ_INT(S->ref, want);
  }
}

int main(void) {
  check(2, 5);           /* 4 units, fewer than the 10 slots in use: walked */
  check(0, 63);          /* 64 units: the slots are walked */
  check(3, 40);          /* 38 units, both ends resident */
  check(22, 39);         /* nothing resident in it */
  check(30, 30);         /* only a unit in transit */
  check(63, 63);
  return hm_test_done("test_sdm_willmark");
}
