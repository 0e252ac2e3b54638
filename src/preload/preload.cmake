# SPDX-License-Identifier: BSD-3-Clause
# The LD_PRELOAD interposer (libhetmem_preload.so). Included from
# src/sources.cmake while hetmem_core is being defined: it makes a separate
# SHARED target from hetmem_core's objects plus its own sources, so that it
# never needs libhetmem.so at run time, and exports only the hooks.
set(HM_PRELOAD_DIR ${CMAKE_CURRENT_LIST_DIR})
add_library(hetmem_preload SHARED
  $<TARGET_OBJECTS:hetmem_core>
  ${HM_PRELOAD_DIR}/init.c
  ${HM_PRELOAD_DIR}/hooks.c
  ${HM_PRELOAD_DIR}/dio.c
  ${HM_PRELOAD_DIR}/route.c
  ${HM_PRELOAD_DIR}/heap.c
  ${HM_PRELOAD_DIR}/fork.c
  ${HM_PRELOAD_DIR}/stats.c
  ${HM_PRELOAD_DIR}/table.c
  ${HM_PRELOAD_DIR}/site.c
  ${HM_PRELOAD_DIR}/place.c
  ${HM_PRELOAD_DIR}/prof.c
  ${HM_PRELOAD_DIR}/prof_write.c
  ${HM_PRELOAD_DIR}/rest.c
  ${HM_PRELOAD_DIR}/sampler_portable.c
  ${HM_PRELOAD_DIR}/term.c
  ${HM_PRELOAD_DIR}/outfile.c
  ${HM_PRELOAD_DIR}/full.c
  ${HM_PRELOAD_DIR}/sampler.c
  ${HM_PRELOAD_DIR}/sampler_perf.c
  ${HM_PRELOAD_DIR}/sampler_damon.c
  ${HM_PRELOAD_DIR}/sampler_refs.c
  ${HM_PRELOAD_DIR}/sampler_writes.c
  ${HM_PRELOAD_DIR}/statics.c
  ${HM_PRELOAD_DIR}/statics_syms.c
  ${HM_PRELOAD_DIR}/statics_place.c)
target_include_directories(hetmem_preload PRIVATE ${PROJECT_SOURCE_DIR}/include
                           ${PROJECT_SOURCE_DIR}/src)
target_compile_options(hetmem_preload PRIVATE ${HM_WARNINGS} -fno-plt -fno-builtin-malloc
                       -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc)
target_compile_definitions(hetmem_preload PRIVATE _GNU_SOURCE)
target_link_libraries(hetmem_preload PRIVATE hetmem_core ${CMAKE_DL_LIBS})
target_link_options(hetmem_preload PRIVATE
  -Wl,--version-script=${HM_PRELOAD_DIR}/preload.map -Wl,--as-needed)
set_target_properties(hetmem_preload PROPERTIES LINK_DEPENDS ${HM_PRELOAD_DIR}/preload.map)
install(TARGETS hetmem_preload LIBRARY DESTINATION _lib COMPONENT runtime)

# Test and benchmark programs for the interposer (run by tests/integration/test_run.py,
# not by ctest: they are meant to run under LD_PRELOAD).
if(HETMEM_BUILD_TESTS)
  add_executable(hm_preload_target ${PROJECT_SOURCE_DIR}/tests/c/preload_target.c)
  target_compile_options(hm_preload_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_preload_target PRIVATE _GNU_SOURCE)
  target_link_libraries(hm_preload_target PRIVATE Threads::Threads)
  add_executable(hm_small_target ${PROJECT_SOURCE_DIR}/tests/c/small_target.c)
  target_compile_options(hm_small_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_small_target PRIVATE _GNU_SOURCE)
  target_link_libraries(hm_small_target PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  add_executable(hm_sampler_target ${PROJECT_SOURCE_DIR}/tests/c/sampler_target.c)
  target_compile_options(hm_sampler_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_sampler_target PRIVATE _GNU_SOURCE)
  add_executable(hm_statics_target ${PROJECT_SOURCE_DIR}/tests/c/statics_target.c)
  target_compile_options(hm_statics_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_statics_target PRIVATE _GNU_SOURCE)
  # A library that allocates in its constructor, before the interposer's.
  add_library(hm_early SHARED ${PROJECT_SOURCE_DIR}/tests/c/early_lib.c)
  target_compile_options(hm_early PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_early PRIVATE _GNU_SOURCE)
  add_executable(hm_early_target ${PROJECT_SOURCE_DIR}/tests/c/early_target.c)
  target_compile_options(hm_early_target PRIVATE ${HM_WARNINGS})
  target_link_libraries(hm_early_target PRIVATE hm_early)
  # A plugin dlopen'ed and dlclose'd by its program.
  add_library(hm_plugin SHARED ${PROJECT_SOURCE_DIR}/tests/c/plugin_lib.c)
  target_compile_options(hm_plugin PRIVATE ${HM_WARNINGS})
  add_executable(hm_dlopen_target ${PROJECT_SOURCE_DIR}/tests/c/dlopen_target.c)
  target_compile_options(hm_dlopen_target PRIVATE ${HM_WARNINGS})
  target_link_libraries(hm_dlopen_target PRIVATE ${CMAKE_DL_LIBS})
  add_executable(hm_fraction_target ${PROJECT_SOURCE_DIR}/tests/c/fraction_target.c)
  target_compile_options(hm_fraction_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_fraction_target PRIVATE _GNU_SOURCE)
  add_executable(hm_segv_target ${PROJECT_SOURCE_DIR}/tests/c/segv_target.c)
  target_compile_options(hm_segv_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_segv_target PRIVATE _GNU_SOURCE)
  add_executable(hm_dio_target ${PROJECT_SOURCE_DIR}/tests/c/dio_target.c)
  target_compile_options(hm_dio_target PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_dio_target PRIVATE _GNU_SOURCE)
  target_link_libraries(hm_dio_target PRIVATE Threads::Threads)
  add_executable(hm_full_target ${PROJECT_SOURCE_DIR}/tests/c/full_target.c)
  target_compile_options(hm_full_target PRIVATE ${HM_WARNINGS})
  add_executable(hm_preload_bench ${PROJECT_SOURCE_DIR}/tests/c/preload_bench.c)
  target_compile_options(hm_preload_bench PRIVATE ${HM_WARNINGS})
  target_compile_definitions(hm_preload_bench PRIVATE _GNU_SOURCE)
  target_link_libraries(hm_preload_bench PRIVATE Threads::Threads)
endif()
