# SPDX-License-Identifier: BSD-3-Clause
# Tier inventory (tiers.c) and the storage-directory checks it needs.
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tiers.c
  ${CMAKE_CURRENT_LIST_DIR}/tiers_json.c
  ${CMAKE_CURRENT_LIST_DIR}/tiers_override.c
  ${CMAKE_CURRENT_LIST_DIR}/prim/fsinfo.c
)
