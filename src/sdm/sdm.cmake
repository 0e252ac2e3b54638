# SPDX-License-Identifier: BSD-3-Clause
# The pager (software-defined memory) and its OS-layer primitives.
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pager.c
  ${CMAKE_CURRENT_LIST_DIR}/handler.c
  ${CMAKE_CURRENT_LIST_DIR}/copier.c
  ${CMAKE_CURRENT_LIST_DIR}/fault.c
  ${CMAKE_CURRENT_LIST_DIR}/demote.c
  ${CMAKE_CURRENT_LIST_DIR}/evict.c
  ${CMAKE_CURRENT_LIST_DIR}/budget.c
  ${CMAKE_CURRENT_LIST_DIR}/region.c
  ${CMAKE_CURRENT_LIST_DIR}/stats.c
  ${CMAKE_CURRENT_LIST_DIR}/prefetch.c
  ${CMAKE_CURRENT_LIST_DIR}/sparse.c
  ${CMAKE_CURRENT_LIST_DIR}/guard.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/uffd.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/vm.c
  # Also listed by probe.cmake (the clock; fs_info and close); a source
  # listed twice is built once.
  ${CMAKE_CURRENT_LIST_DIR}/../prim/mem.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/storage.c
)
