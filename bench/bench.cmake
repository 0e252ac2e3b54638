# SPDX-License-Identifier: BSD-3-Clause
# Benchmark programs, built into <build>/bench and installed into the
# package's _bench folder (COMPONENT runtime) so that `pip install .` ships
# them beside the library. One entry per program or suite, in a plain list.

# Compiler flags of the probe's measurement kernels (src/probe/probe.cmake);
# reference programs use exactly these so that comparisons are code against
# code.
if(NOT DEFINED HM_PROBE_KERNEL_FLAGS)
  set(HM_PROBE_KERNEL_FLAGS -O3)
endif()

# hm-stream-ref: McCalpin-style STREAM, the reference of `hetmem bench reference`.
add_executable(hm-stream-ref ${CMAKE_CURRENT_LIST_DIR}/stream_ref.c)
target_compile_options(hm-stream-ref PRIVATE ${HM_WARNINGS} ${HM_PROBE_KERNEL_FLAGS})
target_link_libraries(hm-stream-ref PRIVATE OpenMP::OpenMP_C m)
set_target_properties(hm-stream-ref PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
install(TARGETS hm-stream-ref RUNTIME DESTINATION _bench COMPONENT runtime)

# hm-stream-static: the same with static arrays of 20M doubles (3 x 160 MB
# of .bss), for static data in cache mode (src/preload/statics.c).
add_executable(hm-stream-static ${CMAKE_CURRENT_LIST_DIR}/stream_ref.c)
target_compile_options(hm-stream-static PRIVATE ${HM_WARNINGS} ${HM_PROBE_KERNEL_FLAGS})
target_compile_definitions(hm-stream-static PRIVATE HM_STREAM_STATIC=20000000)
target_link_libraries(hm-stream-static PRIVATE OpenMP::OpenMP_C m)
set_target_properties(hm-stream-static PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
install(TARGETS hm-stream-static RUNTIME DESTINATION _bench COMPONENT runtime)
