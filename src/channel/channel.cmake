# SPDX-License-Identifier: BSD-3-Clause
# Workflow channel (issue 6): versioned object streams over a memory tier.
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/channel.c
  ${CMAKE_CURRENT_LIST_DIR}/open.c
  ${CMAKE_CURRENT_LIST_DIR}/bench.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/chan.c
)
