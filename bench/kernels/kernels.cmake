# SPDX-License-Identifier: BSD-3-Clause
# Benchmark kernels (hm-kernel-*): plain-malloc OpenMP programs that hetmem
# runs under each memory mode. Built into <build>/bench/kernels and installed
# into the package's _bench folder (python/hetmem/bench/kernels.py finds them).
pkg_check_modules(HMK_OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(HMK_LAPACKE REQUIRED IMPORTED_TARGET lapacke)
pkg_check_modules(HMK_FFTW REQUIRED IMPORTED_TARGET fftw3)
# FFTW's OpenMP flavour has no .pc file; it sits next to libfftw3.
find_library(HMK_FFTW_OMP NAMES fftw3_omp HINTS ${HMK_FFTW_LIBRARY_DIRS} REQUIRED)

set(HMK_DIR ${CMAKE_CURRENT_LIST_DIR})
# The size parser is libhetmem's source file, compiled in: the kernels do
# not link libhetmem (they stand for unmodified applications).
add_library(hm_kernel_common STATIC ${HMK_DIR}/hmk.c ${PROJECT_SOURCE_DIR}/src/size.c)
target_compile_options(hm_kernel_common PRIVATE ${HM_WARNINGS} -O3)
target_compile_definitions(hm_kernel_common PUBLIC _GNU_SOURCE)
target_include_directories(hm_kernel_common PUBLIC ${HMK_DIR} PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(hm_kernel_common PUBLIC OpenMP::OpenMP_C m)

set(HMK_KERNELS stream poly scan gemm lu fft chase gups umapcmp)
foreach(k IN LISTS HMK_KERNELS)
  if(NOT EXISTS ${HMK_DIR}/${k}.c)
    continue()
  endif()
  add_executable(hm-kernel-${k} ${HMK_DIR}/${k}.c)
  # Horner and triad want FMA: -std=c11 would otherwise forbid contraction.
  target_compile_options(hm-kernel-${k} PRIVATE ${HM_WARNINGS} -O3 -ffp-contract=fast)
  target_link_libraries(hm-kernel-${k} PRIVATE hm_kernel_common)
  set_target_properties(hm-kernel-${k} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench/kernels
    INSTALL_RPATH "")
  install(TARGETS hm-kernel-${k} RUNTIME DESTINATION _bench COMPONENT runtime)
endforeach()
if(TARGET hm-kernel-gemm)
  target_link_libraries(hm-kernel-gemm PRIVATE PkgConfig::HMK_OPENBLAS)
endif()
if(TARGET hm-kernel-lu)
  target_link_libraries(hm-kernel-lu PRIVATE PkgConfig::HMK_LAPACKE PkgConfig::HMK_OPENBLAS)
endif()
if(TARGET hm-kernel-umapcmp)
  # LLNL UMap is loaded at run time (--umap-lib): never a build dependency.
  target_link_libraries(hm-kernel-umapcmp PRIVATE ${CMAKE_DL_LIBS})
endif()
if(TARGET hm-kernel-fft)
  target_link_libraries(hm-kernel-fft PRIVATE ${HMK_FFTW_OMP} PkgConfig::HMK_FFTW)
endif()
