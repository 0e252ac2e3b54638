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
