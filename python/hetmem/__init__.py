# SPDX-License-Identifier: BSD-3-Clause
"""hetmem: heterogeneous-memory toolkit for HPC.

The native runtime (libhetmem) does discovery, measurement, paging and
placement; this package is the `hetmem` command and everything off the hot
paths: orchestration, advice, benchmarks and reports.
"""

__version__ = "0.1.0"
