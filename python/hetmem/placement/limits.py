# SPDX-License-Identifier: BSD-3-Clause
"""The placement advisor's limits that `hetmem advise --help` shows.

They live apart from the advisor (hetmem.placement.advise, problem, solve),
which imports numpy (and with it OpenBLAS, whose threads spin for a while
after start-up): every verb's parser is built at start-up, and `hetmem run`'s
child would otherwise start next to a busy parent on a machine with few cores.
"""

from __future__ import annotations

MAX_ILP_SITES = 10_000
DEFAULT_TIME_LIMIT_S = 20.0
