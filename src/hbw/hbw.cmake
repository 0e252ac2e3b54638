# SPDX-License-Identifier: BSD-3-Clause
# hbwmalloc.h (memkind's high-bandwidth API) served by the fastest tier, and
# memkind.h's kinds on hetmem's tiers.
# Included from src/sources.cmake: its objects are part of libhetmem.
target_sources(hetmem_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/hbw.c ${CMAKE_CURRENT_LIST_DIR}/block.c
                                       ${CMAKE_CURRENT_LIST_DIR}/kinds.c
                                       ${CMAKE_CURRENT_LIST_DIR}/memkind.c)
install(FILES ${PROJECT_SOURCE_DIR}/include/hbwmalloc.h ${PROJECT_SOURCE_DIR}/include/memkind.h
        DESTINATION _include COMPONENT runtime)
