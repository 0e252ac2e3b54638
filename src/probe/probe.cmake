# SPDX-License-Identifier: BSD-3-Clause
# Tier characterization (hetmem probe): STREAM, pointer chase, storage.
# The measurement kernels are built with HM_PROBE_KERNEL_FLAGS, and so is the
# reference STREAM in bench/ (bench.cmake reads this variable), so that the
# two differ in code only, never in compiler flags.
set(HM_PROBE_KERNEL_FLAGS -O3)
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/common.c
  ${CMAKE_CURRENT_LIST_DIR}/stream.c
  ${CMAKE_CURRENT_LIST_DIR}/chase.c
  ${CMAKE_CURRENT_LIST_DIR}/storage.c
  ${CMAKE_CURRENT_LIST_DIR}/probe.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/mem.c
  ${CMAKE_CURRENT_LIST_DIR}/../prim/storage.c
)
set_source_files_properties(
  ${CMAKE_CURRENT_LIST_DIR}/stream.c ${CMAKE_CURRENT_LIST_DIR}/chase.c
  TARGET_DIRECTORY hetmem_core
  PROPERTIES COMPILE_OPTIONS "${HM_PROBE_KERNEL_FLAGS}")
