/* SPDX-License-Identifier: BSD-3-Clause */
/* The evict-first rings (demq, coldq: _hm_sdm_demote in fault.c) when a
 * slot is queued, taken again for another unit while its entry is still
 * queued, and queued again: the old entry is stale. When the ring is full
 * and the stale entry is the oldest, dropping it must leave the live entry
 * in force (before entries carried a tag, the drop cleared the slot's
 * `demoted` flag, and the program's MADV_COLD for the new unit was lost);
 * dropping the live entry hands the slot back to CLOCK. When the 32-bit
 * tags wrap, both rings are emptied, so that no entry from before can carry
 * a tag given again. White box, on a pager struct with only the fields the
 * rings use. */
#include <stdlib.h>
#include <string.h>

#include "sdm/pager_int.h"
#include "testhelper.h"

#define NSLOTS (HM_SDM_DEMQ + 2)

static void queue(hm_pager_t *p, _hm_sdm_vq_t *q, int32_t slot) {
  _hm_sdm_unit_t V;
  memset(&V, 0, sizeof V);
  V.slot = slot;
  p->slots[slot].used = 1;
  _hm_sdm_demote(p, q, &V, &p->slots[slot]);
}

int main(void) {
  hm_pager_t *p = calloc(1, sizeof *p);
  _hm_sdm_slot_t *slots = calloc(NSLOTS, sizeof *slots);
  _hm_sdm_vqe_t *ring = calloc(2 * HM_SDM_DEMQ, sizeof *ring);
  if (!p || !slots || !ring) return 1;
  p->slots = slots;
  p->demq.e = ring;
  p->coldq.e = ring + HM_SDM_DEMQ;

  queue(p, &p->coldq, 0);
  /* slot 0 taken again for another unit (_hm_sdm_slot_take clears it),
   * and that unit advised cold in turn */
  memset(&slots[0], 0, sizeof slots[0]);
  queue(p, &p->coldq, 0);
  CHECK_EQ_INT(p->coldq.n, 2);
  for (int32_t s = 1; s < (int32_t)HM_SDM_DEMQ - 1; s++) queue(p, &p->coldq, s);
  CHECK_EQ_INT(p->coldq.n, HM_SDM_DEMQ);

  queue(p, &p->coldq, HM_SDM_DEMQ - 1); /* drops the stale entry */
  CHECK_EQ_INT(p->coldq.n, HM_SDM_DEMQ);
  CHECK(slots[0].demoted);
  CHECK_EQ_INT(p->coldq.e[p->coldq.head].slot, 0);
  CHECK_EQ_INT(p->coldq.e[p->coldq.head].tag, slots[0].dtag);

  queue(p, &p->coldq, HM_SDM_DEMQ); /* drops the live one: CLOCK's again */
  CHECK(!slots[0].demoted);
  CHECK(slots[1].demoted);

  /* a stale entry on one ring does not clear a live one on the other */
  memset(&slots[1], 0, sizeof slots[1]);
  queue(p, &p->demq, 1);
  queue(p, &p->coldq, HM_SDM_DEMQ + 1); /* drops coldq's stale entry of slot 1 */
  CHECK(slots[1].demoted);
  CHECK_EQ_INT(p->demq.e[p->demq.head].tag, slots[1].dtag);

  /* The tags wrap: a coldq entry left from before the wrap must not pass
   * for the live entry of the slot that gets its tag again. */
  memset(p, 0, sizeof *p);
  memset(slots, 0, NSLOTS * sizeof *slots);
  p->slots = slots;
  p->demq.e = ring;
  p->coldq.e = ring + HM_SDM_DEMQ;
  queue(p, &p->coldq, 2); /* tag 1 */
  CHECK_EQ_INT(slots[2].dtag, 1);
  memset(&slots[2], 0, sizeof slots[2]); /* slot 2 taken again: entry stale */
  p->dtag = UINT32_MAX - 1;
  queue(p, &p->demq, 3); /* UINT32_MAX */
  queue(p, &p->demq, 4); /* wraps: both rings emptied, then tag 1 */
  CHECK_EQ_INT(p->coldq.n, 0);
  CHECK_EQ_INT(p->demq.n, 1);
  CHECK(!slots[3].demoted);
  CHECK(slots[4].demoted);
  CHECK_EQ_INT(slots[4].dtag, 1);

  free(ring);
  free(slots);
  free(p);
  return hm_test_done("test_sdm_vq");
}
