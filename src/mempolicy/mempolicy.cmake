# SPDX-License-Identifier: BSD-3-Clause
# The numactl surface of `hetmem run` (--membind, --interleave, ...).
# Included from src/sources.cmake: its objects are part of libhetmem.
target_sources(hetmem_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mempolicy.c)
