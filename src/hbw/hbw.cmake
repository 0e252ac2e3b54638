# SPDX-License-Identifier: BSD-3-Clause
# hbwmalloc.h (memkind's high-bandwidth API) served by the fastest tier.
# Included from src/sources.cmake: its objects are part of libhetmem.
target_sources(hetmem_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/hbw.c)
install(FILES ${PROJECT_SOURCE_DIR}/include/hbwmalloc.h DESTINATION _include COMPONENT runtime)
