# The pager (software-defined memory) and its OS-layer primitives.
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pager.c
  ${CMAKE_CURRENT_LIST_DIR}/prefetch.c
  ${CMAKE_CURRENT_LIST_DIR}/guard.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/uffd.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/vm.c
)
