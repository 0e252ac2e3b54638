# SPDX-License-Identifier: BSD-3-Clause
# hm-placement: workloads of `hetmem bench placement` (several arrays
# allocated at distinct sites, skewed access; and an allocation-heavy loop).
# Built into <build>/bench and installed into the package's _bench folder.
# -g: the profile's sites are symbolized from its DWARF.
# The size parser is libhetmem's source file, compiled in (as the kernels do).
add_executable(hm-placement ${CMAKE_CURRENT_LIST_DIR}/placement.c ${PROJECT_SOURCE_DIR}/src/size.c)
target_include_directories(hm-placement PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(hm-placement PRIVATE ${HM_WARNINGS} -O2 -g -fno-inline-functions-called-once)
target_link_libraries(hm-placement PRIVATE Threads::Threads)
set_target_properties(hm-placement PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
install(TARGETS hm-placement RUNTIME DESTINATION _bench COMPONENT runtime)
