# SPDX-License-Identifier: BSD-3-Clause
# Sources of libhetmem, one concern per file (see DEVELOPERS.md).
target_sources(hetmem_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ctx.c
  ${CMAKE_CURRENT_LIST_DIR}/error.c
  ${CMAKE_CURRENT_LIST_DIR}/options.c
  ${CMAKE_CURRENT_LIST_DIR}/size.c
  ${CMAKE_CURRENT_LIST_DIR}/strbuf.c
  ${CMAKE_CURRENT_LIST_DIR}/prim/fs.c
  ${CMAKE_CURRENT_LIST_DIR}/prim/perf.c
  ${CMAKE_CURRENT_LIST_DIR}/prim/ring.c
  ${CMAKE_CURRENT_LIST_DIR}/prim/sys.c
)
include(${CMAKE_CURRENT_LIST_DIR}/tiers.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/probe/probe.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/sdm/sdm.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/preload/preload.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/symbolize/symbolize.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/channel/channel.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/hbw/hbw.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/mempolicy/mempolicy.cmake)
