# SPDX-License-Identifier: BSD-3-Clause
# Writes OUT: {"git_commit": "..."} for the checkout SRC was built from, so
# that an installed hetmem (no checkout beside it) can still name its commit
# in a report's machine details. Run at every build (a target, not at
# configure time): pip reuses its build folder across commits.
# "unknown" outside a git checkout or without git.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "{\"schema_version\": 1, \"git_commit\": \"${commit}\"}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
