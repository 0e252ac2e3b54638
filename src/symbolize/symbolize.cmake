# SPDX-License-Identifier: BSD-3-Clause
# Offline symbolization (hm_symbolize, hm_module_build_id) with elfutils
# libdw. Its own object library, linked into libhetmem only: hetmem_core is
# also what the preload interposer is built from, and libdw (with libelf,
# zlib, ...) must never be loaded into an application by LD_PRELOAD.
pkg_check_modules(DW REQUIRED IMPORTED_TARGET libdw)
add_library(hetmem_symbolize OBJECT ${CMAKE_CURRENT_LIST_DIR}/symbolize.c)
target_include_directories(hetmem_symbolize PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include
                                                    ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_compile_options(hetmem_symbolize PRIVATE ${HM_WARNINGS})
target_compile_definitions(hetmem_symbolize PRIVATE _GNU_SOURCE)
target_link_libraries(hetmem_symbolize PUBLIC PkgConfig::DW)
# The shared library is defined after src/sources.cmake is read; attach the
# objects (and libdw) to it once the top-level file is done.
cmake_language(DEFER CALL target_link_libraries hetmem PRIVATE hetmem_symbolize)
